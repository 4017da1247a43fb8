//! Kubelet eviction thresholds (`100Mi`, `10%`) as the integers the wire
//! carries; plain quantities are `karpenter_core::quantity`'s.

use karpenter_core::quantity::{self, Unit};

/// An eviction threshold: an absolute quantity, or a percentage (0 to 100,
/// as the kubelet accepts) of `total`, rounded up.
pub fn parse_threshold(text: &str, total: i64) -> Option<i64> {
    match text.trim().strip_suffix('%') {
        Some(percent) => {
            let percent: f64 = percent.trim().parse().ok()?;
            if !(0.0..=100.0).contains(&percent) {
                return None;
            }
            Some(((total.max(0) as f64) * percent / 100.0).ceil() as i64)
        }
        None => quantity::parse(text.trim(), Unit::Base).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds() {
        assert_eq!(parse_threshold("10%", 1000), Some(100));
        assert_eq!(parse_threshold("100Mi", 1000), Some(100 * 1024 * 1024));
        assert_eq!(parse_threshold("-10%", 1000), None);
        assert_eq!(parse_threshold("150%", 1000), None);
        assert_eq!(parse_threshold("abc", 1000), None);
    }
}
