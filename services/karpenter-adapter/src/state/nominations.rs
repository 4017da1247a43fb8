//! Nodes provisioning planned pending pods onto (Karpenter's
//! `StateNode.Nominate`). Until the pods bind, such a node looks empty or
//! underused; for a window after the nomination disruption leaves it alone,
//! so a node is not taken away from the pods about to land on it.
//!
//! ```text
//!   provisioning: Solve placed pods on node N ──▶ nominate(N, now + window)
//!   disruption:   snapshot ──mark()──▶ N's disruption.nominated = true (until the window ends)
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use karpenter_proto::scheduler::v1 as sched;

/// Karpenter's nomination window: twice the longest batch, at least 10 s.
pub fn window(batch_max_duration: Duration) -> Duration {
    (2 * batch_max_duration).max(Duration::from_secs(10))
}

/// Nominated nodes (by Node or NodeClaim name) and until when.
#[derive(Clone, Default)]
pub struct Nominations {
    until: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Nominations {
    /// Nominates each of `names` until `window` from now.
    pub fn nominate<'a>(&self, names: impl IntoIterator<Item = &'a str>, window: Duration) {
        let until = Instant::now() + window;
        let mut map = self.until.lock().unwrap_or_else(|p| p.into_inner());
        for name in names {
            map.insert(name.to_owned(), until);
        }
    }

    /// Marks the snapshot's nominated nodes and forgets lapsed nominations.
    pub fn mark(&self, snapshot: &mut sched::ClusterSnapshot) {
        let now = Instant::now();
        let mut map = self.until.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, until| *until > now);
        if map.is_empty() {
            return;
        }
        for node in &mut snapshot.nodes {
            if map.contains_key(&node.name) || map.contains_key(&node.node_claim_name) {
                node.disruption
                    .get_or_insert_with(Default::default)
                    .nominated = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> sched::ClusterSnapshot {
        sched::ClusterSnapshot {
            nodes: ["a", "b"]
                .iter()
                .map(|n| sched::StateNode {
                    name: format!("node-{n}"),
                    node_claim_name: format!("claim-{n}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn nominated(snapshot: &sched::ClusterSnapshot) -> Vec<bool> {
        snapshot
            .nodes
            .iter()
            .map(|n| n.disruption.as_ref().is_some_and(|d| d.nominated))
            .collect()
    }

    #[test]
    fn a_node_is_nominated_by_node_or_claim_name_until_the_window_ends() {
        let nominations = Nominations::default();
        nominations.nominate(["node-a"], Duration::from_secs(60));
        nominations.nominate(["claim-b"], Duration::ZERO);
        let mut s = snapshot();
        nominations.mark(&mut s);
        assert_eq!(nominated(&s), [true, false], "b's window has passed");
        nominations.nominate(["claim-b"], Duration::from_secs(60));
        let mut s = snapshot();
        nominations.mark(&mut s);
        assert_eq!(nominated(&s), [true, true]);
    }

    #[test]
    fn the_window_is_twice_the_longest_batch_and_at_least_ten_seconds() {
        assert_eq!(window(Duration::from_secs(10)), Duration::from_secs(20));
        assert_eq!(window(Duration::from_secs(2)), Duration::from_secs(10));
    }
}
