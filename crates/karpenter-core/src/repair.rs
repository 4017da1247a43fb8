//! Node repair's circuit breaker, one rule for both repair paths (the
//! disruption method the scheduler plans and the legacy `node.health`
//! controller): a pool stops being repaired while more than a fifth of its
//! nodes are unhealthy, so a correlated fault (a bad image, a zone outage)
//! is not amplified by replacing every node into it.

/// The share of a pool's nodes that may be unhealthy while its nodes are
/// still repaired, rounded up as a PDB's percentage is.
pub const UNHEALTHY_THRESHOLD_PERCENT: usize = 20;

/// How long an eligible repair condition must have waited to gain one
/// priority tier over a fresher one (upstream's aging constant, 30 min).
pub const AGING_SECONDS: f64 = 30.0 * 60.0;

/// Whether a pool of `total` nodes with `unhealthy` of them has tripped the
/// breaker (one of three is within 20% of three, rounded up).
pub fn breaker_tripped(unhealthy: usize, total: usize) -> bool {
    unhealthy
        > total
            .saturating_mul(UNHEALTHY_THRESHOLD_PERCENT)
            .div_ceil(100)
}

/// The message of a tripped breaker, Karpenter's `NodeRepairBlocked`
/// word for word (`scope`: `nodepool "x"` or `the cluster`); the counts
/// go to the log.
pub fn breaker_message(scope: &str) -> String {
    format!("more than {UNHEALTHY_THRESHOLD_PERCENT}% of nodes in {scope} are unhealthy")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_percent_rounded_up_may_be_unhealthy() {
        assert!(!breaker_tripped(1, 3));
        assert!(breaker_tripped(2, 3));
        assert!(!breaker_tripped(2, 10));
        assert!(breaker_tripped(3, 10));
        assert!(!breaker_tripped(1, 1));
        assert!(!breaker_tripped(0, 0));
    }
}
