//! Kubernetes quantities (`100Mi`, `1.5Gi`, `500m`, `10%`) as the integers the
//! wire carries: millicores for cpu, base units for everything else.

/// A quantity in base units (bytes for memory and storage), rounded up.
pub fn parse(text: &str) -> Option<i64> {
    parse_scaled(text, 1.0)
}

/// A cpu quantity in millicores.
pub fn parse_millis(text: &str) -> Option<i64> {
    parse_scaled(text, 1000.0)
}

fn parse_scaled(text: &str, scale: f64) -> Option<i64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        "Pi" => 1024.0f64.powi(5),
        _ => return None,
    };
    let value = (number * multiplier * scale).ceil();
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some(value as i64)
}

/// An eviction threshold: an absolute quantity or a percentage of `total`.
pub fn parse_threshold(text: &str, total: i64) -> Option<i64> {
    match text.trim().strip_suffix('%') {
        Some(percent) => {
            let percent: f64 = percent.trim().parse().ok()?;
            Some(((total as f64) * percent / 100.0).ceil() as i64)
        }
        None => parse(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse("100Mi"), Some(100 * 1024 * 1024));
        assert_eq!(parse("1Gi"), Some(1 << 30));
        assert_eq!(parse_millis("500m"), Some(500));
        assert_eq!(parse_millis("2"), Some(2000));
        assert_eq!(parse_threshold("10%", 1000), Some(100));
        assert_eq!(parse("abc"), None);
    }
}
