//! Kubelet eviction thresholds (`100Mi`, `10%`) as the integers the wire
//! carries; plain quantities are `karpenter_core::quantity`'s.

use karpenter_core::quantity::{self, Unit};

/// `percent`% of `total`, rounded up, computed as the kubelet and Karpenter
/// do (`total / 100 * percent` in floating point).
pub fn percent_of(total: i64, percent: f64) -> i64 {
    ((total.max(0) as f64) / 100.0 * percent).ceil() as i64
}

/// An eviction threshold: an absolute quantity, or a percentage (0 to 100,
/// as the kubelet accepts) of `total`, rounded up; `100%` turns the
/// threshold off, as Karpenter reads it.
pub fn parse_threshold(text: &str, total: i64) -> Option<i64> {
    match text.trim().strip_suffix('%') {
        Some(percent) => {
            let percent: f64 = percent.trim().parse().ok()?;
            if !(0.0..=100.0).contains(&percent) {
                return None;
            }
            if percent == 100.0 {
                return Some(0);
            }
            Some(percent_of(total, percent))
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
        assert_eq!(parse_threshold("100%", 1000), Some(0));
        assert_eq!(parse_threshold("abc", 1000), None);
    }
}
