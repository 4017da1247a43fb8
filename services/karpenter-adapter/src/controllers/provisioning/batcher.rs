//! The batcher: pending pods open a batch window that closes after
//! `BATCH_IDLE_DURATION` without a new pod, or after `BATCH_MAX_DURATION`
//! at most, so a burst of pods (a Deployment scaled up) is planned at once.
//!
//! A pod triggers when it becomes provisionable, when it changes, and again
//! every [`RETRIGGER`] while it stays provisionable (Karpenter requeues each
//! pending pod every ten seconds). A pod that already triggered in the open
//! window does not extend it. A CapacityBuffer triggers the same way.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use kube::{Resource, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::state::index::Index;
use crate::state::watch::Published;

/// How often a pod that stays pending triggers again.
pub const RETRIGGER: Duration = Duration::from_secs(10);

/// Nodes being deleted, or whose NodeClaim is.
fn leaving_nodes(index: &Index) -> HashSet<String> {
    index
        .nodes
        .iter()
        .filter(|node| {
            node.meta().deletion_timestamp.is_some()
                || index
                    .claim_of(node)
                    .is_some_and(|c| c.meta().deletion_timestamp.is_some())
        })
        .map(|node| node.name_any())
        .collect()
}

/// Waits for batches of pending pods.
pub struct Batcher {
    idle: Duration,
    max: Duration,
    /// Pod UID → (resource version, when it last triggered).
    seen: HashMap<String, (String, Instant)>,
    /// The pools that provisioned at the last scan: one that starts to
    /// (its controller wrote `Ready`) may place pods that waited before.
    provisioning: HashSet<String>,
}

/// UIDs and resource versions of the pods Karpenter provisions for: those
/// kube-scheduler gave up on, and those on nodes being deleted (their
/// replacement capacity launches while they drain, as upstream's
/// provisioner does for deleting nodes).
pub fn provisionable(index: &Index) -> impl Iterator<Item = (String, String)> + '_ {
    let leaving = leaving_nodes(index);
    index
        .pods
        .iter()
        .filter(move |p| {
            p.meta().deletion_timestamp.is_none()
                && match p.node_name.as_deref() {
                    None => p.provisionable,
                    Some(node) => leaving.contains(node) && p.is_reschedulable(),
                }
        })
        .map(|p| {
            (
                p.uid().unwrap_or_else(|| {
                    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
                }),
                p.meta().resource_version.clone().unwrap_or_default(),
            )
        })
}

/// CapacityBuffers (watched with their gate on) trigger as pods do: their
/// virtual pods are pending every batch, and a real pod that took their
/// room (kube-scheduler binds it; nothing is pending) is only noticed by
/// planning again, which the retrigger does (upstream requeues each buffer
/// every 30 s).
fn buffers(index: &Index) -> impl Iterator<Item = (String, String)> + '_ {
    index.capacity_buffers.iter().map(|b| {
        (
            format!("capacitybuffer/{}", b.key()),
            b.meta().resource_version.clone().unwrap_or_default(),
        )
    })
}

impl Batcher {
    pub fn new(idle: Duration, max: Duration) -> Self {
        Self {
            idle,
            max,
            seen: HashMap::new(),
            provisioning: HashSet::new(),
        }
    }

    /// Records the pods of `index`; how many triggered that were not yet
    /// in `window`.
    pub fn scan(&mut self, index: &Index, window: &mut HashSet<String>, now: Instant) -> usize {
        let mut triggered = 0;
        let mut present = HashSet::new();
        let provisioning: HashSet<String> = index
            .node_pools
            .iter()
            .filter(|p| p.provisions())
            .map(|p| p.name_any())
            .collect();
        if !provisioning.is_subset(&self.provisioning) {
            self.seen.clear();
        }
        self.provisioning = provisioning;
        for (uid, version) in provisionable(index).chain(buffers(index)) {
            let fresh = self
                .seen
                .get(&uid)
                .is_none_or(|(seen, at)| *seen != version || now.duration_since(*at) >= RETRIGGER);
            if fresh {
                self.seen.insert(uid.clone(), (version, now));
                if window.insert(uid.clone()) {
                    triggered += 1;
                }
            }
            present.insert(uid);
        }
        self.seen.retain(|uid, _| present.contains(uid));
        triggered
    }

    /// Waits until a batch closes; `None` when the snapshots end.
    pub async fn next(&mut self, snapshots: &mut watch::Receiver<Published>) -> Option<()> {
        let mut window = HashSet::new();
        loop {
            let index = snapshots.borrow_and_update().index.clone();
            if self.scan(&index, &mut window, Instant::now()) > 0 {
                break;
            }
            // Wake for a change, or to notice a pod due to trigger again.
            tokio::select! {
                changed = snapshots.changed() => changed.ok()?,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        let opened = Instant::now();
        let closes_at = opened + self.max;
        let mut idle_until = opened + self.idle;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(idle_until.min(closes_at)) => return Some(()),
                changed = snapshots.changed() => {
                    changed.ok()?;
                    let index = snapshots.borrow_and_update().index.clone();
                    if self.scan(&index, &mut window, Instant::now()) > 0 {
                        idle_until = Instant::now() + self.idle;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::Event;
    use serde_json::json;
    use std::sync::Arc;

    use crate::state::index::{PodEntry, Update};
    use crate::state::watch::Versions;

    fn pending(name: &str, version: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": version},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn publish(sender: &watch::Sender<Published>, index: &mut Index, pod: Pod) {
        index.apply(Update::Pod(Event::Apply(PodEntry::new(pod))));
        let versions = sender.borrow().versions;
        sender.send_replace(Published {
            index: Arc::new(index.clone()),
            versions: Versions {
                pods: versions.pods + 1,
                ..versions
            },
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_closes_when_idle_and_only_new_pods_extend_it() {
        let (sender, mut receiver) = watch::channel(Published::default());
        let mut index = Index::default();
        let mut batcher = Batcher::new(Duration::from_secs(5), Duration::from_secs(10));
        // Waits for the next window while `late` is published 3 s in; how
        // long the window stayed open.
        let mut window_with_late_pod = async |index: &Index, late: Pod| {
            let started = Instant::now();
            let feeder = {
                let sender = sender.clone();
                let mut index = index.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    publish(&sender, &mut index, late);
                })
            };
            batcher.next(&mut receiver).await.expect("a batch");
            let took = started.elapsed();
            feeder.await.expect("feeder");
            took
        };
        publish(&sender, &mut index, pending("a", "1"));
        // The same pod again 3 s in does not extend the window...
        let took = window_with_late_pod(&index, pending("a", "2")).await;
        assert_eq!(took, Duration::from_secs(5));

        // ...a new pod does: 3 s, new pod, 3 s still open, closes at 3 + 5.
        publish(&sender, &mut index, pending("b", "1"));
        let took = window_with_late_pod(&index, pending("c", "1")).await;
        assert_eq!(took, Duration::from_secs(8));
    }

    /// An index with one pending pod, and a batcher whose first scan (at
    /// the instant returned) it has triggered.
    fn one_pod_triggered() -> (Index, Batcher, Instant) {
        let mut index = Index::default();
        index.apply(Update::Pod(Event::Apply(PodEntry::new(pending("a", "1")))));
        let mut batcher = Batcher::new(Duration::from_secs(1), Duration::from_secs(10));
        let now = Instant::now();
        assert_eq!(batcher.scan(&index, &mut HashSet::new(), now), 1);
        (index, batcher, now)
    }

    #[test]
    fn a_pod_that_stays_pending_triggers_again_after_a_while() {
        let (index, mut batcher, now) = one_pod_triggered();
        assert_eq!(
            batcher.scan(&index, &mut HashSet::new(), now + Duration::from_secs(5)),
            0
        );
        assert_eq!(
            batcher.scan(&index, &mut HashSet::new(), now + RETRIGGER),
            1
        );
    }

    #[test]
    fn a_pool_that_becomes_ready_triggers_the_pods_waiting_for_it() {
        let (mut index, mut batcher, now) = one_pod_triggered();
        let mut pool: karpenter_api::NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "resourceVersion": "1"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef":
                {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}
        }))
        .expect("pool");
        index.apply(Update::NodePool(Event::Apply(pool.clone())));
        assert_eq!(
            batcher.scan(&index, &mut HashSet::new(), now),
            0,
            "not Ready yet"
        );
        pool.status = serde_json::from_value(serde_json::json!({"conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .expect("status");
        index.apply(Update::NodePool(Event::Apply(pool)));
        assert_eq!(batcher.scan(&index, &mut HashSet::new(), now), 1);
        assert_eq!(batcher.scan(&index, &mut HashSet::new(), now), 0);
    }
}
