//! `resource.Quantity` as kube-apiserver's CEL `quantity()` library sees it:
//! parsing (`100Mi`, `1.5`, `2e3`, `500m`), exact comparison and arithmetic.

use std::cmp::Ordering;

/// The error kube's `ParseQuantity` returns for a malformed quantity.
pub const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// The error for an unknown suffix.
pub const SUFFIX_ERROR: &str = "unable to parse quantity's suffix";

/// A quantity as an exact decimal: `num / 10^scale`.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    num: i128,
    scale: u32,
}

const MAX_SCALE: u32 = 30;

impl Quantity {
    /// Parses a quantity the way `resource.ParseQuantity` does.
    pub fn parse(s: &str) -> Result<Quantity, &'static str> {
        if s.is_empty() {
            return Err(FORMAT_ERROR);
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let negative = match bytes[0] {
            b'-' => {
                i = 1;
                true
            }
            b'+' => {
                i = 1;
                false
            }
            _ => false,
        };
        let num_start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let number = &s[num_start..i];
        let suffix = &s[i..];
        if number.is_empty() || number.matches('.').count() > 1 || number == "." {
            return Err(FORMAT_ERROR);
        }
        // The suffix must match [eEinumkKMGTP]*[-+]?[0-9]*.
        let sb = suffix.as_bytes();
        let mut j = 0;
        while j < sb.len() && b"eEinumkKMGTP".contains(&sb[j]) {
            j += 1;
        }
        if j < sb.len() && (sb[j] == b'-' || sb[j] == b'+') {
            j += 1;
        }
        while j < sb.len() && sb[j].is_ascii_digit() {
            j += 1;
        }
        if j != sb.len() {
            return Err(FORMAT_ERROR);
        }

        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        let mut num: i128 = 0;
        for d in digits.bytes() {
            num = num
                .checked_mul(10)
                .and_then(|n| n.checked_add(i128::from(d - b'0')))
                .ok_or(FORMAT_ERROR)?;
        }
        let mut scale = u32::try_from(frac_part.len()).map_err(|_| FORMAT_ERROR)?;

        // Suffix: binary SI, decimal SI, or a decimal exponent.
        let (mul_pow2, exp10): (u32, i32) = match suffix {
            "" => (0, 0),
            "Ki" => (10, 0),
            "Mi" => (20, 0),
            "Gi" => (30, 0),
            "Ti" => (40, 0),
            "Pi" => (50, 0),
            "Ei" => (60, 0),
            "n" => (0, -9),
            "u" => (0, -6),
            "m" => (0, -3),
            "k" => (0, 3),
            "M" => (0, 6),
            "G" => (0, 9),
            "T" => (0, 12),
            "P" => (0, 15),
            "E" => (0, 18),
            _ => {
                let rest = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))
                    .ok_or(SUFFIX_ERROR)?;
                let e: i32 = rest.parse().map_err(|_| SUFFIX_ERROR)?;
                (0, e)
            }
        };
        num = num.checked_mul(1i128 << mul_pow2).ok_or(FORMAT_ERROR)?;
        if exp10 >= 0 {
            for _ in 0..exp10 {
                if scale > 0 {
                    scale -= 1;
                } else {
                    num = num.checked_mul(10).ok_or(FORMAT_ERROR)?;
                }
            }
        } else {
            scale = scale
                .checked_add(exp10.unsigned_abs())
                .ok_or(FORMAT_ERROR)?;
        }
        let mut q = Quantity {
            num: if negative { -num } else { num },
            scale,
        };
        q.normalize();
        if q.scale > MAX_SCALE {
            // Beyond nano precision kube rounds up; keep it exact enough.
            while q.scale > MAX_SCALE {
                q.num /= 10;
                q.scale -= 1;
            }
        }
        Ok(q)
    }

    /// An integer quantity.
    pub fn from_int(i: i64) -> Quantity {
        Quantity {
            num: i128::from(i),
            scale: 0,
        }
    }

    fn normalize(&mut self) {
        while self.scale > 0 && self.num % 10 == 0 {
            self.num /= 10;
            self.scale -= 1;
        }
    }

    fn aligned(&self, other: &Quantity) -> Option<(i128, i128, u32)> {
        let scale = self.scale.max(other.scale);
        let a = self
            .num
            .checked_mul(10i128.checked_pow(scale - self.scale)?)?;
        let b = other
            .num
            .checked_mul(10i128.checked_pow(scale - other.scale)?)?;
        Some((a, b, scale))
    }

    /// `compareTo`: -1, 0 or 1.
    pub fn cmp(&self, other: &Quantity) -> Ordering {
        match self.aligned(other) {
            Some((a, b, _)) => a.cmp(&b),
            None => self
                .as_f64()
                .partial_cmp(&other.as_f64())
                .unwrap_or(Ordering::Equal),
        }
    }

    /// `add`; `None` on overflow.
    pub fn add(&self, other: &Quantity) -> Option<Quantity> {
        let (a, b, scale) = self.aligned(other)?;
        let mut q = Quantity {
            num: a.checked_add(b)?,
            scale,
        };
        q.normalize();
        Some(q)
    }

    /// `sub`; `None` on overflow.
    pub fn sub(&self, other: &Quantity) -> Option<Quantity> {
        self.add(&Quantity {
            num: -other.num,
            scale: other.scale,
        })
    }

    /// `sign`: -1, 0 or 1.
    pub fn sign(&self) -> i64 {
        match self.num.cmp(&0) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }
    }

    /// `asInteger` / `isInteger`: the value as an `int64` if it is a whole
    /// number that fits.
    pub fn as_i64(&self) -> Option<i64> {
        if self.scale != 0 {
            return None;
        }
        i64::try_from(self.num).ok()
    }

    /// `asApproximateFloat`.
    pub fn as_f64(&self) -> f64 {
        (self.num as f64) / 10f64.powi(i32::try_from(self.scale).unwrap_or(i32::MAX))
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_kubernetes_suffixes() {
        assert_eq!(q("1Ki").as_i64(), Some(1024));
        assert_eq!(q("1.5Gi").as_i64(), Some(1_610_612_736));
        assert_eq!(q("500m").as_f64(), 0.5);
        assert_eq!(q("2k").as_i64(), Some(2000));
        assert_eq!(q("1e3").as_i64(), Some(1000));
        assert_eq!(q("-3").sign(), -1);
        assert_eq!(q("0.1").as_i64(), None);
        assert!(Quantity::parse("abc").is_err());
        assert!(Quantity::parse("1.2.3").is_err());
        assert!(Quantity::parse("1Xi").is_err());
        assert!(Quantity::parse("").is_err());
    }

    #[test]
    fn compares_exactly_across_suffixes() {
        assert_eq!(q("1Gi").cmp(&q("1G")), Ordering::Greater);
        assert_eq!(q("1000m").cmp(&q("1")), Ordering::Equal);
        assert_eq!(q("1Ki").add(&q("24")).and_then(|x| x.as_i64()), Some(1048));
        assert_eq!(q("1").sub(&q("1500m")).map(|x| x.sign()), Some(-1));
    }
}
