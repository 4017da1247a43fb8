//! Kubernetes resource quantities (`resource.Quantity`): `100m`, `1.5Gi`,
//! `2e3`, `500Mi`.
//!
//! ```text
//!   "1.5Gi" ──Quantity::parse──▶ Quantity (exact decimal, signed)
//!                                  ├─ cmp / add / sub / as_f64   (CEL's quantity library)
//!                                  └─ to_units(Unit) ──▶ i64       (the wire: cpu in millicores,
//!                                                                   the rest in base units, rounded up)
//!   i64 ──format(resource, value)──▶ "1500m", "2Gi"               (for people and Node objects)
//! ```
//!
//! The grammar is Kubernetes':
//! `[+-]? (digits[.digits] | .digits) (binarySI | decimalSI | decimalExponent)?`
//! with binary suffixes `Ki Mi Gi Ti Pi Ei`, decimal suffixes `n u m "" k M G T P E`
//! and exponents `e3`, `E-2`. Values are exact (an integer over a power of
//! ten) and, as kube-apiserver does, rounded up (away from zero) to
//! nano precision: `0.1n` is `1n`.

use std::cmp::Ordering;

/// Why a quantity is not acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// It does not match `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`.
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    /// The suffix is none Kubernetes knows.
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// The value is beyond what can be represented.
    #[error("quantity is too large")]
    TooLarge,
    /// A negative value where only non-negative ones make sense.
    #[error("quantity must not be negative")]
    Negative,
}

/// The unit a resource is counted in on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Thousandths of the quantity (CPU).
    Milli,
    /// The quantity itself (bytes, counts).
    Base,
}

/// The unit of a resource name: `cpu` is in millicores, the rest in base units.
pub fn unit_of(resource: &str) -> Unit {
    if resource == crate::resources::CPU {
        Unit::Milli
    } else {
        Unit::Base
    }
}

/// A quantity as an exact decimal: `num / 10^scale`, `scale` at most 9.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    num: i128,
    scale: u32,
}

/// Kubernetes keeps quantities to nano precision.
const MAX_SCALE: i64 = 9;
/// Significant digits an `i128` holds whatever they are.
const MAX_DIGITS: usize = 38;

impl Quantity {
    /// Parses a quantity the way `resource.ParseQuantity` does.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let (negative, number, suffix) = split(text)?;
        let (exp10, exp2) = suffix_exponents(suffix)?;
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        let mut exp = exp10 - frac_part.len() as i64;
        // Significant digits only: leading zeros carry nothing, trailing
        // zeros go into the exponent.
        let all: String = [int_part, frac_part].concat();
        let leading = all.trim_start_matches('0');
        let digits = leading.trim_end_matches('0');
        exp += (leading.len() - digits.len()) as i64;
        if digits.is_empty() {
            return Ok(Quantity { num: 0, scale: 0 });
        }
        // Digits past what an i128 holds are far below nano precision for
        // any representable value: keep that they were there (round up).
        let mut sticky = false;
        let digits = if digits.len() > MAX_DIGITS {
            exp += (digits.len() - MAX_DIGITS) as i64;
            sticky = true;
            &digits[..MAX_DIGITS]
        } else {
            digits
        };
        let mut num: i128 = digits.parse().map_err(|_| QuantityError::Format)?;
        num = num
            .checked_mul(1i128 << exp2)
            .ok_or(QuantityError::TooLarge)?;
        if exp < -MAX_SCALE {
            let drop = (-MAX_SCALE - exp) as u32;
            match 10i128.checked_pow(drop) {
                Some(divisor) => {
                    sticky |= num % divisor != 0;
                    num /= divisor;
                }
                None => {
                    sticky = true;
                    num = 0;
                }
            }
            exp = -MAX_SCALE;
        }
        if sticky {
            num += 1;
        }
        let scale = if exp >= 0 {
            let factor = u32::try_from(exp)
                .ok()
                .and_then(|e| 10i128.checked_pow(e))
                .ok_or(QuantityError::TooLarge)?;
            num = num.checked_mul(factor).ok_or(QuantityError::TooLarge)?;
            0
        } else {
            (-exp) as u32
        };
        let mut q = Quantity {
            num: if negative { -num } else { num },
            scale,
        };
        q.normalize();
        Ok(q)
    }

    /// An integer quantity.
    pub fn from_int(i: i64) -> Quantity {
        Quantity {
            num: i128::from(i),
            scale: 0,
        }
    }

    /// The value in `unit`, rounded up; negative values are refused (no
    /// resource may be negative).
    pub fn to_units(&self, unit: Unit) -> Result<i64, QuantityError> {
        if self.num < 0 {
            return Err(QuantityError::Negative);
        }
        let mut num = self.num;
        let mut scale = self.scale;
        if unit == Unit::Milli {
            if scale >= 3 {
                scale -= 3;
            } else {
                num = num
                    .checked_mul(10i128.pow(3 - scale))
                    .ok_or(QuantityError::TooLarge)?;
                scale = 0;
            }
        }
        let divisor = 10i128.pow(scale);
        let value = num / divisor + i128::from(num % divisor != 0);
        i64::try_from(value).map_err(|_| QuantityError::TooLarge)
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

    /// `compareTo`.
    pub fn compare(&self, other: &Quantity) -> Ordering {
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
            num: other.num.checked_neg()?,
            scale: other.scale,
        })
    }

    /// -1, 0 or 1.
    pub fn sign(&self) -> i64 {
        match self.num.cmp(&0) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }
    }

    /// The value as an `i64` if it is a whole number that fits.
    pub fn as_i64(&self) -> Option<i64> {
        if self.scale != 0 {
            return None;
        }
        i64::try_from(self.num).ok()
    }

    /// The value as a float (approximate).
    pub fn as_f64(&self) -> f64 {
        (self.num as f64) / 10f64.powi(self.scale as i32)
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.compare(other) == Ordering::Equal
    }
}

/// How a quantity is written, which its canonical form keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Notation {
    BinarySi,
    DecimalSi,
    DecimalExponent,
}

/// The canonical form kube-apiserver stores a quantity in: `1000m` is `1`,
/// `0.5` is `500m`, `2000` is `2k`, `1024Mi` is `1Gi`, `1e3` stays `1e3`.
/// The suffix family of the input is kept; a binary value that is not a
/// whole number or is under 1024 is written in decimal.
pub fn canonical(text: &str) -> Result<String, QuantityError> {
    let (_, _, suffix) = split(text)?;
    let q = Quantity::parse(text)?;
    let mut notation = match suffix {
        s if s.ends_with('i') => Notation::BinarySi,
        s if s.starts_with(['e', 'E']) => Notation::DecimalExponent,
        _ => Notation::DecimalSi,
    };
    if notation == Notation::BinarySi && (q.scale != 0 || q.num.abs() < 1024) {
        notation = Notation::DecimalSi;
    }
    let sign = if q.num < 0 { "-" } else { "" };
    let magnitude = q.num.unsigned_abs();
    if magnitude == 0 {
        return Ok("0".to_owned());
    }
    if notation == Notation::BinarySi {
        let mut mantissa = magnitude;
        let mut power = 0;
        while power < 6 && mantissa % 1024 == 0 {
            mantissa /= 1024;
            power += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
        return Ok(format!("{sign}{mantissa}{suffix}"));
    }
    // value = mantissa × 10^exponent with the exponent a multiple of three.
    let mut mantissa = magnitude;
    let mut exponent = -i64::from(q.scale);
    while exponent.rem_euclid(3) != 0 {
        mantissa *= 10;
        exponent -= 1;
    }
    while mantissa % 1000 == 0 && exponent < 18 {
        mantissa /= 1000;
        exponent += 3;
    }
    let suffix = match notation {
        Notation::DecimalExponent if exponent == 0 => String::new(),
        Notation::DecimalExponent => format!("e{exponent}"),
        _ => match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => "",
        }
        .to_owned(),
    };
    Ok(format!("{sign}{mantissa}{suffix}"))
}

/// Sign, number and suffix, checked against Kubernetes' regular expression.
fn split(text: &str) -> Result<(bool, &str, &str), QuantityError> {
    let (negative, rest) = match text.as_bytes().first() {
        None => return Err(QuantityError::Format),
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(QuantityError::Format);
    }
    // The suffix must match [eEinumkKMGTP]*[-+]?[0-9]*.
    let letters = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let tail = &suffix[letters..];
    let tail = tail.strip_prefix(['-', '+']).unwrap_or(tail);
    if !tail.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::Format);
    }
    Ok((negative, number, suffix))
}

/// The powers of ten and of two a suffix multiplies by.
fn suffix_exponents(suffix: &str) -> Result<(i64, u32), QuantityError> {
    Ok(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => {
            let exponent = suffix
                .strip_prefix(['e', 'E'])
                .ok_or(QuantityError::Suffix)?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(QuantityError::Suffix);
            }
            let value: i32 = exponent.parse().map_err(|_| QuantityError::Suffix)?;
            (i64::from(value), 0)
        }
    })
}

/// Parses `text` and returns it in `unit`, rounded up. Negative quantities
/// are refused.
pub fn parse(text: &str, unit: Unit) -> Result<i64, QuantityError> {
    Quantity::parse(text)?.to_units(unit)
}

/// Parses a quantity for the resource `name` into its wire unit.
pub fn parse_resource(name: &str, text: &str) -> Result<i64, QuantityError> {
    parse(text, unit_of(name))
}

/// Formats a wire quantity as Kubernetes shows it: millicores as `1500m` /
/// `2`, bytes (memory, ephemeral storage, hugepages) with the largest exact
/// binary suffix (`2Gi`), counts as they are.
pub fn format(resource: &str, value: i64) -> String {
    if unit_of(resource) == Unit::Milli {
        if value % 1000 == 0 {
            return (value / 1000).to_string();
        }
        return format!("{value}m");
    }
    if value != 0 && is_byte_resource(resource) {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i64 << shift;
            if value % unit == 0 {
                return format!("{}{suffix}", value / unit);
            }
        }
    }
    value.to_string()
}

fn is_byte_resource(resource: &str) -> bool {
    resource == crate::resources::MEMORY
        || resource == crate::resources::EPHEMERAL_STORAGE
        || resource.starts_with("hugepages-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_match_kube_apiserver() {
        for (input, stored) in [
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("2000", "2k"),
            ("100Mi", "100Mi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("100Ki", "100Ki"),
            ("0.5Ki", "512"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("2Gi", "2Gi"),
            ("0", "0"),
            ("0Mi", "0"),
            ("-1500m", "-1500m"),
            ("1n", "1n"),
            ("10G", "10G"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("123Mi", "123Mi"),
        ] {
            assert_eq!(canonical(input).as_deref(), Ok(stored), "{input}");
        }
        assert!(canonical("1x").is_err());
        assert!(canonical("").is_err());
    }

    fn cpu(s: &str) -> i64 {
        parse(s, Unit::Milli).unwrap_or_else(|e| panic!("{s}: {e}"))
    }
    fn base(s: &str) -> i64 {
        parse(s, Unit::Base).unwrap_or_else(|e| panic!("{s}: {e}"))
    }
    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn cpu_in_millicores() {
        assert_eq!(cpu("1"), 1000);
        assert_eq!(cpu("1500m"), 1500);
        assert_eq!(cpu("700m"), 700);
        assert_eq!(cpu("9m"), 9);
        assert_eq!(cpu("0.5"), 500);
        assert_eq!(cpu(".5"), 500);
        assert_eq!(cpu("0.1"), 100);
        assert_eq!(cpu("2."), 2000);
        assert_eq!(cpu("1e3"), 1_000_000);
        assert_eq!(cpu("1E-3"), 1);
        assert_eq!(cpu("100u"), 1, "rounded up");
        assert_eq!(cpu("1.0001m"), 2, "rounded up");
        assert_eq!(cpu("250000n"), 1, "0.25m rounds up");
        assert_eq!(cpu("+2"), 2000);
        assert_eq!(cpu("0"), 0);
        assert_eq!(cpu("0m"), 0);
        assert_eq!(cpu("1k"), 1_000_000);
    }

    #[test]
    fn memory_in_bytes() {
        assert_eq!(base("2Gi"), 2 * 1024 * 1024 * 1024);
        assert_eq!(base("2048Mi"), 2 * 1024 * 1024 * 1024);
        assert_eq!(base("100M"), 100_000_000);
        assert_eq!(base("1e3"), 1000);
        assert_eq!(base("1.5Gi"), 1_610_612_736);
        assert_eq!(base("0.5Ki"), 512);
        assert_eq!(base("1500m"), 2, "1.5 bytes rounds up");
        assert_eq!(base("128974848"), 128_974_848);
        assert_eq!(base("129e6"), 129_000_000);
        assert_eq!(base("123Mi"), 128_974_848);
        assert_eq!(base("1Ei"), 1 << 60);
        assert_eq!(base("29"), 29);
        assert_eq!(base("000012"), 12);
        assert_eq!(
            base("1.000000000000000000000000000000000000000001"),
            2,
            "digits beyond an i128 still round up"
        );
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "", " 1", "1x", "1.2.3", "Gi", ".", "1 Gi", "1gi", "e3", "--1", "0x10",
        ] {
            assert_eq!(
                parse(bad, Unit::Base),
                Err(QuantityError::Format),
                "{bad:?}"
            );
        }
        for bad in ["1e", "1ee3", "1Mi3", "1e+"] {
            assert_eq!(
                parse(bad, Unit::Base),
                Err(QuantityError::Suffix),
                "{bad:?}"
            );
        }
        assert_eq!(parse("-1", Unit::Milli), Err(QuantityError::Negative));
        assert_eq!(parse("1e30", Unit::Base), Err(QuantityError::TooLarge));
        assert_eq!(parse("9Ei", Unit::Base), Err(QuantityError::TooLarge));
        assert_eq!(
            parse("1e2000000000", Unit::Base),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(parse("-0", Unit::Base), Ok(0));
        assert_eq!(
            parse("0e2147483647", Unit::Base),
            Ok(0),
            "no loop over the exponent"
        );
    }

    #[test]
    fn rounds_up_to_nano_precision_like_kubernetes() {
        assert_eq!(q("0.1n"), q("1n"));
        assert_eq!(q("-0.1n"), q("-1n"), "away from zero");
        assert_eq!(q("1e-30"), q("1n"));
    }

    #[test]
    fn compares_and_adds_exactly_across_suffixes() {
        assert_eq!(q("1Ki").as_i64(), Some(1024));
        assert_eq!(q("500m").as_f64(), 0.5);
        assert_eq!(q("-3").sign(), -1);
        assert_eq!(q("0.1").as_i64(), None);
        assert_eq!(q("1Gi").compare(&q("1G")), Ordering::Greater);
        assert_eq!(q("1000m").compare(&q("1")), Ordering::Equal);
        assert_eq!(q("1Ki").add(&q("24")).and_then(|x| x.as_i64()), Some(1048));
        assert_eq!(q("1").sub(&q("1500m")).map(|x| x.sign()), Some(-1));
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format("cpu", 1500), "1500m");
        assert_eq!(format("cpu", 2000), "2");
        assert_eq!(format("memory", 2 << 30), "2Gi");
        assert_eq!(format("memory", 1 << 40), "1Ti");
        assert_eq!(format("memory", 1000), "1000");
        assert_eq!(format("pods", 29), "29");
    }
}
