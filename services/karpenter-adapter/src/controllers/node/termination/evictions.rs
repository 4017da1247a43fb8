//! Per-pod backoff of eviction requests, as Karpenter's eviction queue
//! keeps it: a pod whose eviction was refused (a PodDisruptionBudget, the
//! API server's own throttling) is asked again after 100 ms, then twice as
//! long each time, up to 10 s, instead of on every drain pass; with many
//! terminating nodes, the requests would otherwise fill the client's rate
//! limit. An eviction that went through forgets the pod.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// The first retry's delay.
const BASE: Duration = Duration::from_millis(100);
/// The longest delay between two requests for one pod.
const MAX: Duration = Duration::from_secs(10);
/// A pod not asked about for this long is forgotten (it left some other
/// way), so the record stays as small as the drains in progress.
const FORGET_AFTER: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug)]
struct Refused {
    times: u32,
    next: Instant,
    last: Instant,
}

/// Shared by every drain of the adapter, keyed by the pod's UID.
#[derive(Clone, Debug, Default)]
pub struct Evictions {
    refused: Arc<Mutex<HashMap<String, Refused>>>,
}

impl Evictions {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, Refused>) -> R) -> R {
        f(&mut self.refused.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether the pod may be asked for now.
    pub fn due(&self, uid: &str, now: Instant) -> bool {
        self.with(|refused| {
            refused.retain(|_, r| now.duration_since(r.last) < FORGET_AFTER);
            refused.get(uid).is_none_or(|r| now >= r.next)
        })
    }

    /// The eviction was refused: the next request waits longer.
    pub fn refused(&self, uid: &str, now: Instant) {
        self.with(|refused| {
            let entry = refused.entry(uid.to_owned()).or_insert(Refused {
                times: 0,
                next: now,
                last: now,
            });
            let delay = BASE
                .checked_mul(1u32 << entry.times.min(16))
                .unwrap_or(MAX)
                .min(MAX);
            entry.times = entry.times.saturating_add(1);
            entry.next = now + delay;
            entry.last = now;
        });
    }

    /// The eviction went through (or the pod is gone).
    pub fn accepted(&self, uid: &str) {
        self.with(|refused| refused.remove(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_back_off_from_100_ms_to_10_s_and_success_forgets() {
        let evictions = Evictions::default();
        let start = Instant::now();
        assert!(evictions.due("a", start));
        let mut at = start;
        let mut delays = Vec::new();
        for _ in 0..10 {
            evictions.refused("a", at);
            let mut wait = Duration::ZERO;
            while !evictions.due("a", at + wait) {
                wait += Duration::from_millis(50);
            }
            delays.push(wait);
            at += wait;
        }
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
        );
        assert!(evictions.due("b", at), "other pods are not held back");
        evictions.accepted("a");
        assert!(evictions.due("a", at));
    }
}
