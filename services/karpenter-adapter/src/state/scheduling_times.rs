//! When provisioning first decided about each pending pod and when a plan
//! first placed it (Karpenter's pod scheduling decision and success
//! times), for the pod metrics: the provisioner writes them after each
//! Solve, the observability pass reads them and forgets pods that left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::jiff::Timestamp;

/// A pod's first scheduling decision and first placement.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Times {
    /// A Solve first had the pod among its pending pods.
    pub decided: Option<Timestamp>,
    /// A Solve first placed it (a new claim or an existing node).
    pub placed: Option<Timestamp>,
}

/// The times of every pod provisioning has planned, by UID.
#[derive(Clone, Default)]
pub struct SchedulingTimes(Arc<Mutex<HashMap<String, Times>>>);

impl SchedulingTimes {
    /// A Solve at `now` decided about the pod `uid`, and `placed` it or not;
    /// only the first of each is kept.
    pub fn record(&self, uid: &str, placed: bool, now: Timestamp) {
        let mut times = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = times.entry(uid.to_owned()).or_default();
        entry.decided.get_or_insert(now);
        if placed {
            entry.placed.get_or_insert(now);
        }
    }

    pub fn get(&self, uid: &str) -> Times {
        let times = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        times.get(uid).copied().unwrap_or_default()
    }

    /// Forgets the pods `keep` says are gone (or no longer of interest).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut times = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        times.retain(|uid, _| keep(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_decision_and_placement_are_kept() {
        let times = SchedulingTimes::default();
        let at = |s: i64| Timestamp::from_second(s).unwrap_or_else(|e| panic!("{e}"));
        times.record("p", false, at(10));
        times.record("p", true, at(20));
        times.record("p", true, at(30));
        let got = times.get("p");
        assert_eq!((got.decided, got.placed), (Some(at(10)), Some(at(20))));
        times.retain(|uid| uid != "p");
        assert_eq!(times.get("p"), Times::default());
    }
}
