//! When a node may be consolidated: Karpenter's `consolidateAfter` rule,
//! decided here once for the adapter (which writes the `Consolidatable`
//! condition) and the planner (which reads the condition, or applies the
//! rule itself to a cluster no controller has watched, as `karpctl plan`
//! does).
//!
//! A node becomes consolidatable once it is initialized and its pool's
//! `consolidateAfter` has passed since its last pod event, or since its
//! initialization when no pod event was recorded. `Never` keeps it out of
//! consolidation for good; zero makes it consolidatable at once. Times are
//! Unix seconds: Kubernetes stores condition and status times at that
//! precision, and `consolidateAfter` is written in whole seconds.

use std::time::Duration;

/// What the rule says about one node now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consolidatable {
    /// It may be consolidated.
    Now,
    /// Not while things stay as they are: its pool says `Never`, or it is
    /// not initialized.
    No,
    /// After this much longer without a pod event.
    After(Duration),
}

impl Consolidatable {
    /// Karpenter's `IsUnderConsolidateAfter`: the node is waiting out a
    /// non-zero `consolidateAfter` (consolidation moves no pods onto it).
    pub fn is_waiting(self) -> bool {
        matches!(self, Consolidatable::After(_))
    }
}

/// The rule: `after` is the pool's `consolidateAfter` (`None` for `Never`),
/// `initialized_at` when the node was initialized (`None` while it is not),
/// `last_pod_event_at` the node's last pod scheduled or removed.
pub fn consolidatable(
    after: Option<Duration>,
    initialized_at: Option<i64>,
    last_pod_event_at: Option<i64>,
    now: i64,
) -> Consolidatable {
    let (Some(after), Some(initialized_at)) = (after, initialized_at) else {
        return Consolidatable::No;
    };
    let since = last_pod_event_at.unwrap_or(initialized_at);
    // A time in the future (clock skew between writers) has waited nothing.
    let waited = Duration::from_secs(u64::try_from(now.saturating_sub(since)).unwrap_or(0));
    match after.checked_sub(waited) {
        Some(left) if !left.is_zero() => Consolidatable::After(left),
        _ => Consolidatable::Now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn waits_consolidate_after_since_the_last_pod_event_else_initialization() {
        assert_eq!(
            consolidatable(Some(MINUTE), Some(0), None, 60),
            Consolidatable::Now
        );
        assert_eq!(
            consolidatable(Some(MINUTE), Some(0), Some(50), 60),
            Consolidatable::After(Duration::from_secs(50))
        );
        assert_eq!(
            consolidatable(Some(MINUTE), Some(0), Some(0), 59),
            Consolidatable::After(Duration::from_secs(1))
        );
        assert!(consolidatable(Some(MINUTE), Some(0), Some(30), 60).is_waiting());
    }

    #[test]
    fn never_and_uninitialized_nodes_are_not_consolidatable() {
        assert_eq!(
            consolidatable(None, Some(0), None, 1_000_000),
            Consolidatable::No
        );
        assert_eq!(
            consolidatable(Some(Duration::ZERO), None, None, 0),
            Consolidatable::No
        );
        assert!(!consolidatable(None, Some(0), Some(0), 0).is_waiting());
    }

    #[test]
    fn zero_is_at_once_and_future_events_wait_the_whole_delay() {
        assert_eq!(
            consolidatable(Some(Duration::ZERO), Some(10), Some(10), 10),
            Consolidatable::Now
        );
        assert_eq!(
            consolidatable(Some(MINUTE), Some(0), Some(i64::MAX), i64::MIN),
            Consolidatable::After(MINUTE)
        );
    }
}
