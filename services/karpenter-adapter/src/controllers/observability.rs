//! Cluster-state metrics (Karpenter's `metrics.pod` and `state` gauges),
//! refreshed from the index every few seconds: whether the state is synced,
//! how many nodes and in-flight claims there are, one `pods_state` series
//! per pod, and each pod's startup time (creation to Ready) once, for pods
//! seen pending.

use std::collections::HashSet;
use std::time::Duration;

use crate::state::index::PodEntry;
use karpenter_core::labels;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::controllers::Context;
use crate::metrics::PodStateLabels;
use crate::state::index::Index;
use crate::state::watch::Published;

const EVERY: Duration = Duration::from_secs(5);

/// Pods seen pending, and those whose startup was recorded.
#[derive(Default)]
pub struct Startups {
    pending: HashSet<String>,
    recorded: HashSet<String>,
}

fn uid(pod: &PodEntry) -> String {
    pod.uid()
        .unwrap_or_else(|| format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()))
}

/// Seconds from creation to Ready, once the pod is Ready.
pub fn startup_seconds(pod: &PodEntry) -> Option<f64> {
    let created = pod.metadata.creation_timestamp.as_ref()?.0;
    let at = pod.ready_since.as_ref()?.0;
    Some(at.duration_since(created).as_secs_f64().max(0.0))
}

impl Startups {
    /// The startups to record in `index` (each pod once).
    pub fn observe(&mut self, index: &Index) -> Vec<f64> {
        let mut present = HashSet::new();
        let mut out = Vec::new();
        for pod in index.pods.iter() {
            let id = uid(pod);
            if pod.is_terminal() {
                continue;
            }
            let phase = pod.phase.as_deref();
            present.insert(id.clone());
            if phase == Some("Pending") || phase.is_none() {
                self.pending.insert(id.clone());
            }
            if self.pending.contains(&id)
                && !self.recorded.contains(&id)
                && let Some(seconds) = startup_seconds(pod)
            {
                self.recorded.insert(id);
                out.push(seconds);
            }
        }
        self.pending.retain(|id| present.contains(id));
        self.recorded.retain(|id| present.contains(id));
        out
    }
}

fn record(ctx: &Context, index: &Index, startups: &mut Startups) {
    let metrics = &ctx.metrics;
    metrics
        .cluster_state_synced
        .set(i64::from(index.synced(ctx.node_class_kind())));
    let in_flight = index
        .node_claims
        .iter()
        .filter(|c| index.node_of(c).is_none())
        .count();
    metrics
        .cluster_state_node_count
        .set(i64::try_from(index.nodes.len() + in_flight).unwrap_or(i64::MAX));
    if ctx.settings.disable_cluster_state_observability {
        return;
    }
    metrics.pods_state.clear();
    for pod in index.pods.iter() {
        let node = pod.node_name.clone().unwrap_or_default();
        let nodepool = index
            .nodes
            .named(&node)
            .and_then(|n| n.labels().get(labels::NODE_POOL).cloned())
            .unwrap_or_default();
        metrics
            .pods_state
            .get_or_create(&PodStateLabels {
                name: pod.name_any(),
                namespace: pod.namespace().unwrap_or_default(),
                scheduled: (!node.is_empty()).to_string(),
                node,
                nodepool,
                phase: pod.phase.clone().unwrap_or_default(),
            })
            .set(1);
    }
    for seconds in startups.observe(index) {
        metrics.pods_startup_duration.observe(seconds);
    }
}

/// Refreshes the metrics until the snapshots end.
pub async fn run(ctx: Context, mut snapshots: watch::Receiver<Published>) {
    if snapshots.wait_for(|p| p.index.listed()).await.is_err() {
        return;
    }
    let mut startups = Startups::default();
    loop {
        let index = snapshots.borrow().index.clone();
        record(&ctx, &index, &mut startups);
        tokio::time::sleep(EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::index::{PodEntry, Update};
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn pod(phase: &str, ready_at: Option<&str>) -> PodEntry {
        let conditions = ready_at.map_or_else(
            || json!([]),
            |at| json!([{"type": "Ready", "status": "True", "lastTransitionTime": at}]),
        );
        PodEntry::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "default", "uid": "u1",
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": phase, "conditions": conditions}
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    #[test]
    fn a_pod_seen_pending_has_its_startup_recorded_once() {
        let mut startups = Startups::default();
        let mut index = Index::default();
        index.apply(Update::Pod(Event::Apply(pod("Pending", None))));
        assert!(startups.observe(&index).is_empty());
        index.apply(Update::Pod(Event::Apply(pod(
            "Running",
            Some("2026-01-01T00:00:42Z"),
        ))));
        assert_eq!(startups.observe(&index), [42.0]);
        assert!(startups.observe(&index).is_empty(), "once");

        let mut fresh = Startups::default();
        assert!(
            fresh.observe(&index).is_empty(),
            "never seen pending: not a startup"
        );
    }
}
