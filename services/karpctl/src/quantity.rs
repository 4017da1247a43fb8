//! Kubernetes resource quantities (`resource.Quantity`) as the integers the
//! wire contract carries: CPU in millicores, everything else in base units,
//! rounded up.
//!
//! The grammar is Kubernetes':
//! `[+-]? (digits[.digits] | .digits) (binarySI | decimalSI | decimalExponent)?`
//! with binary suffixes `Ki Mi Gi Ti Pi Ei`, decimal suffixes `n u m "" k M G T P E`
//! and exponents `e3`, `E-2`. The value is kept exact (digits, a power of ten
//! and a power of two) until the final rounding, so `0.1` CPU is exactly 100m
//! and `1.0001m` rounds up to 2m.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    #[error("invalid quantity {0:?}")]
    Invalid(String),
    #[error("quantity {0:?} must not be negative")]
    Negative(String),
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
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
    if resource == "cpu" {
        Unit::Milli
    } else {
        Unit::Base
    }
}

/// Parses `text` and returns it in `unit`, rounded up. Negative quantities
/// are rejected (no resource in a manifest may be negative).
pub fn parse(text: &str, unit: Unit) -> Result<i64, QuantityError> {
    let invalid = || QuantityError::Invalid(text.to_string());
    let s = text.trim();
    if s.is_empty() || s != text {
        return Err(invalid());
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    // number part
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return Err(invalid());
    }
    if number.ends_with('.') && frac_part.is_empty() && int_part.is_empty() {
        return Err(invalid());
    }
    let (exp10, exp2): (i64, u32) = match suffix {
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
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or_else(invalid)?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4
            {
                return Err(invalid());
            }
            (exponent.parse::<i64>().map_err(|_| invalid())?, 0)
        }
    };
    // Exact value: mantissa * 10^exp * 2^exp2.
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    let mut exp = exp10 - frac_part.len() as i64;
    if unit == Unit::Milli {
        exp += 3;
    }
    if digits.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative(text.to_string()));
    }
    // Drop trailing zeros into the exponent so long but exact inputs fit.
    let trimmed = digits.trim_end_matches('0');
    exp += (digits.len() - trimmed.len()) as i64;
    let too_large = || QuantityError::TooLarge(text.to_string());
    if trimmed.len() > 36 {
        // Only representable if the excess is a fraction that rounds up.
        let keep = trimmed.len() - 36;
        let head = &trimmed[..36];
        let mantissa: i128 = head.parse().map_err(|_| invalid())?;
        // The dropped digits are non-zero (trailing zeros were trimmed): round up.
        return finish(mantissa, exp + keep as i64, exp2, true).ok_or_else(too_large);
    }
    let mantissa: i128 = trimmed.parse().map_err(|_| invalid())?;
    finish(mantissa, exp, exp2, false).ok_or_else(too_large)
}

/// ceil(mantissa * 10^exp * 2^exp2), `sticky` meaning the true mantissa is
/// slightly above `mantissa`.
fn finish(mantissa: i128, exp: i64, exp2: u32, sticky: bool) -> Option<i64> {
    let mut value = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
    if exp >= 0 {
        let scale = 10i128.checked_pow(u32::try_from(exp).ok()?)?;
        value = value.checked_mul(scale)?;
        if sticky {
            value = value.checked_add(1)?;
        }
    } else {
        let neg = u32::try_from(-exp).ok()?;
        if neg > 38 {
            return Some(1);
        }
        let scale = 10i128.checked_pow(neg)?;
        let (q, r) = (value / scale, value % scale);
        value = if r != 0 || sticky { q + 1 } else { q };
    }
    i64::try_from(value).ok()
}

/// A quantity as YAML/JSON gives it: a string or a number.
pub fn parse_value(value: &serde_json::Value, unit: Unit) -> Result<i64, QuantityError> {
    match value {
        serde_json::Value::String(s) => parse(s, unit),
        serde_json::Value::Number(n) => parse(&n.to_string(), unit),
        other => Err(QuantityError::Invalid(other.to_string())),
    }
}

/// Formats a wire quantity for people: millicores as `1500m`/`2`, bytes with
/// the largest exact binary suffix (`2Gi`), counts as they are.
pub fn format(resource: &str, value: i64) -> String {
    if unit_of(resource) == Unit::Milli {
        if value % 1000 == 0 {
            return (value / 1000).to_string();
        }
        return format!("{value}m");
    }
    if resource == "memory" || resource == "ephemeral-storage" || resource.starts_with("hugepages-")
    {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i64 << shift;
            if value != 0 && value % unit == 0 {
                return format!("{}{suffix}", value / unit);
            }
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(s: &str) -> i64 {
        parse(s, Unit::Milli).unwrap_or_else(|e| panic!("{s}: {e}"))
    }
    fn base(s: &str) -> i64 {
        parse(s, Unit::Base).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn cpu_in_millicores() {
        assert_eq!(cpu("1"), 1000);
        assert_eq!(cpu("1500m"), 1500);
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
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "", " 1", "1x", "1.2.3", "Gi", ".", "1 Gi", "1gi", "1e", "e3", "1ee3", "--1", "1Mi3",
            "0x10", "1e+",
        ] {
            assert!(
                matches!(parse(bad, Unit::Base), Err(QuantityError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse("-1", Unit::Milli),
            Err(QuantityError::Negative(_))
        ));
        assert!(matches!(
            parse("1e30", Unit::Base),
            Err(QuantityError::TooLarge(_))
        ));
        assert!(matches!(
            parse("9Ei", Unit::Base),
            Err(QuantityError::TooLarge(_))
        ));
        assert_eq!(parse("-0", Unit::Base), Ok(0));
    }

    #[test]
    fn numbers_from_yaml() {
        assert_eq!(parse_value(&serde_json::json!(1), Unit::Milli), Ok(1000));
        assert_eq!(parse_value(&serde_json::json!(0.25), Unit::Milli), Ok(250));
        assert_eq!(parse_value(&serde_json::json!(10), Unit::Base), Ok(10));
        assert!(parse_value(&serde_json::json!(true), Unit::Base).is_err());
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format("cpu", 1500), "1500m");
        assert_eq!(format("cpu", 2000), "2");
        assert_eq!(format("memory", 2 << 30), "2Gi");
        assert_eq!(format("memory", 1000), "1000");
        assert_eq!(format("pods", 29), "29");
    }
}
