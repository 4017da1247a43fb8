//! Cluster-state metrics (Karpenter's `metrics.pod`, `metrics.node` and
//! `state` gauges), refreshed from the index every few seconds: whether the
//! state is synced, how many nodes and in-flight claims there are, one
//! `pods_state` series per pod, each pod's startup time (creation to Ready)
//! once, for pods seen pending, and each node's resources ([`node_usage`]):
//! allocatable, system overhead, its pods' and DaemonSet pods' requests
//! and limits, its age, and the cluster's utilization.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use karpenter_core::resources::Resources;

use crate::state::index::PodEntry;
use karpenter_core::labels;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::controllers::Context;
use crate::metrics::{
    AdapterMetrics, NodeLabels, NodeResourceLabels, PodStateLabels, ResourceTypeLabels, label_name,
    resource_type, resource_value, seconds_between,
};
use crate::state::index::Index;
use crate::state::scheduling_times::SchedulingTimes;
use crate::state::watch::Published;

const EVERY: Duration = Duration::from_secs(5);

/// What the pod metrics have seen of each pod (by UID): since when it is
/// known pending (its creation, or this adapter's start for a pod older
/// than that: what a poll every few seconds saw would be late by up to a
/// poll), and which of its durations are recorded (each once).
#[derive(Default)]
pub struct PodTimings {
    /// When this adapter began watching pods.
    watching_since: Option<Timestamp>,
    seen: HashMap<String, Timestamp>,
    decided: HashSet<String>,
    bound: HashSet<String>,
    started: HashSet<String>,
}

/// The pod durations one pass observed, in seconds.
#[derive(Debug, Default, PartialEq)]
pub struct PodDurations {
    /// Creation to Ready.
    pub startup: Vec<f64>,
    /// Creation to bound.
    pub bound: Vec<f64>,
    /// First seen pending to provisioning's first decision about it.
    pub decision: Vec<f64>,
    /// Provisioning's first placement to bound.
    pub provisioning_bound: Vec<f64>,
    /// Provisioning's first placement to Ready.
    pub provisioning_startup: Vec<f64>,
}

fn uid(pod: &PodEntry) -> String {
    pod.uid()
        .unwrap_or_else(|| format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()))
}

impl PodTimings {
    /// The durations to record in `index` at `now` (each pod's once, for
    /// pods seen pending), with provisioning's `times`; forgets pods that
    /// left, here and in `times`.
    pub fn observe(
        &mut self,
        index: &Index,
        times: &SchedulingTimes,
        now: Timestamp,
    ) -> PodDurations {
        let mut present = HashSet::new();
        let mut out = PodDurations::default();
        let watching_since = *self.watching_since.get_or_insert(now);
        for pod in index.pods.iter().filter(|p| !p.is_terminal()) {
            let id = uid(pod);
            present.insert(id.clone());
            if matches!(pod.phase.as_deref(), Some("Pending") | None) {
                let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
                let known = created.map_or(watching_since, |c| c.max(watching_since));
                self.seen.entry(id.clone()).or_insert(known);
            }
            let Some(seen) = self.seen.get(&id).copied() else {
                continue;
            };
            let provisioning = times.get(&id);
            if let Some(decided) = provisioning.decided
                && self.decided.insert(id.clone())
            {
                out.decision.push(seconds_between(seen, decided));
            }
            let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            if let Some(bound) = pod.scheduled_since.as_ref().map(|t| t.0)
                && self.bound.insert(id.clone())
            {
                out.bound.extend(created.map(|c| seconds_between(c, bound)));
                let placed = provisioning.placed.map(|p| seconds_between(p, bound));
                out.provisioning_bound.extend(placed);
            }
            if let Some(ready) = pod.ready_since.as_ref().map(|t| t.0)
                && self.started.insert(id.clone())
            {
                out.startup
                    .extend(created.map(|c| seconds_between(c, ready)));
                let placed = provisioning.placed.map(|p| seconds_between(p, ready));
                out.provisioning_startup.extend(placed);
            }
        }
        self.seen.retain(|id, _| present.contains(id));
        for done in [&mut self.decided, &mut self.bound, &mut self.started] {
            done.retain(|id| present.contains(id));
        }
        // A pod that started needs provisioning's times no more.
        times.retain(|id| present.contains(id) && !self.started.contains(id));
        out
    }
}

/// Since when the cluster state has not been synced, for
/// `karpenter_cluster_state_unsynced_time_seconds`.
#[derive(Default)]
pub struct Unsynced(Option<std::time::Instant>);

impl Unsynced {
    /// Seconds unsynced, now that the state is (`synced`) or is not.
    pub fn observe(&mut self, synced: bool) -> f64 {
        if synced {
            self.0 = None;
            return 0.0;
        }
        self.0
            .get_or_insert_with(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
    }
}

/// What the metrics passes carry from one to the next.
#[derive(Default)]
struct Passes {
    timings: PodTimings,
    unsynced: Unsynced,
    nodes: NodeSeries,
}

fn record(ctx: &Context, index: &Index, pass: &mut Passes) {
    let metrics = &ctx.metrics;
    let synced = index.synced(ctx.node_class_kind());
    metrics.cluster_state_synced.set(i64::from(synced));
    metrics
        .cluster_state_unsynced_time
        .set(pass.unsynced.observe(synced));
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
    let now = Timestamp::now();
    let durations = pass.timings.observe(index, &ctx.scheduling_times, now);
    let histograms = [
        (&metrics.pods_startup_duration, &durations.startup),
        (&metrics.pods_bound_duration, &durations.bound),
        (
            &metrics.pods_scheduling_decision_duration,
            &durations.decision,
        ),
        (
            &metrics.pods_provisioning_bound_duration,
            &durations.provisioning_bound,
        ),
        (
            &metrics.pods_provisioning_startup_duration,
            &durations.provisioning_startup,
        ),
    ];
    for (histogram, seconds) in histograms {
        for value in seconds {
            histogram.observe(*value);
        }
    }
    record_nodes(metrics, index, &ctx.info.well_known_labels, &mut pass.nodes);
}

/// What one node holds, as Karpenter's node metrics report it.
#[derive(Debug, Default, PartialEq)]
pub struct NodeUsage {
    pub allocatable: Resources,
    /// Capacity minus allocatable.
    pub system_overhead: Resources,
    pub pod_requests: Resources,
    pub pod_limits: Resources,
    pub daemon_requests: Resources,
    pub daemon_limits: Resources,
}

/// Each node's usage by name: the requests and limits of the pods bound to
/// it that have not finished (DaemonSet pods also on their own), without
/// the pod count Kubernetes' effective requests carry.
pub fn node_usage(index: &Index) -> BTreeMap<String, NodeUsage> {
    let mut usage: BTreeMap<String, NodeUsage> = index
        .nodes
        .iter()
        .map(|node| (node.name_any(), node_resources(node)))
        .collect();
    for pod in index.pods.iter().filter(|p| !p.is_terminal()) {
        let (Some(node), Ok(Some(prepared))) = (&pod.node_name, pod.prepared()) else {
            continue;
        };
        let Some(entry) = usage.get_mut(node) else {
            continue;
        };
        let wire = prepared.wire();
        let mut requests = karpenter_proto::convert::pod_requests(wire);
        requests.pods = 0;
        let limits = karpenter_proto::convert::pod_limits(wire);
        if wire.owner_kind == "DaemonSet" {
            entry.daemon_requests.add(&requests);
            entry.daemon_limits.add(&limits);
        }
        entry.pod_requests.add(&requests);
        entry.pod_limits.add(&limits);
    }
    usage
}

/// A node's allocatable and its overhead (capacity minus allocatable).
fn node_resources(node: &Node) -> NodeUsage {
    let status = node.status.as_ref();
    let parse = |list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        let mut resources = Resources::default();
        for (name, quantity) in list.into_iter().flatten() {
            if let Ok(value) = karpenter_core::quantity::parse_resource(name, &quantity.0) {
                resources.set(name, value);
            }
        }
        resources
    };
    let allocatable = parse(status.and_then(|s| s.allocatable.as_ref()));
    let capacity = parse(status.and_then(|s| s.capacity.as_ref()));
    NodeUsage {
        system_overhead: capacity.minus(&allocatable),
        allocatable,
        ..NodeUsage::default()
    }
}

/// Label strings shared across a pass: a zone, a pool or a label name is
/// stored once however many nodes carry it.
#[derive(Default)]
struct Interned(HashMap<String, Arc<str>>);

impl Interned {
    fn get(&mut self, text: String) -> Arc<str> {
        if let Some(shared) = self.0.get(&text) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(text.as_str());
        self.0.insert(text, shared.clone());
        shared
    }
}

/// The labels Karpenter's node metrics carry for `node`: its name, phase,
/// whether a NodeClaim manages it, and every well-known label (Karpenter's
/// and the provider's) by the last part of its key in snake case.
fn node_labels(
    node: &Node,
    managed: bool,
    well_known: &[String],
    interned: &mut Interned,
) -> NodeLabels {
    let node_labels = node.labels();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let keys = labels::NEUTRAL_WELL_KNOWN_LABELS
        .iter()
        .copied()
        .chain(well_known.iter().map(String::as_str));
    for key in keys {
        let Some((_, name)) = key.split_once('/') else {
            continue;
        };
        let name = label_name(name);
        let value = node_labels.get(key).cloned().unwrap_or_default();
        labels.entry(name).or_insert(value);
    }
    labels.insert("node_name".into(), node.name_any());
    let phase = node.status.as_ref().and_then(|s| s.phase.clone());
    labels.insert("phase".into(), phase.unwrap_or_default());
    labels.insert("managed".into(), managed.to_string());
    NodeLabels(
        labels
            .into_iter()
            .map(|(name, value)| (interned.get(name), interned.get(value)))
            .collect(),
    )
}

/// The node metrics' series of the last pass, so that the next one sets
/// its values first and then removes only the series that went (a scrape
/// between clearing and refilling would see part of the cluster).
#[derive(Default)]
pub struct NodeSeries {
    resources: HashSet<(usize, NodeResourceLabels)>,
    lifetimes: HashSet<NodeLabels>,
}

/// Karpenter's `metrics.node` gauges: this pass's values, then the series
/// of nodes (or resources) that went removed.
fn record_nodes(
    metrics: &AdapterMetrics,
    index: &Index,
    well_known: &[String],
    series: &mut NodeSeries,
) {
    let usage = node_usage(index);
    let per_resource_gauges = [
        &metrics.nodes_allocatable,
        &metrics.nodes_system_overhead,
        &metrics.nodes_total_pod_requests,
        &metrics.nodes_total_pod_limits,
        &metrics.nodes_total_daemon_requests,
        &metrics.nodes_total_daemon_limits,
    ];
    let mut current = NodeSeries::default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut interned = Interned::default();
    let mut allocatable_total = Resources::default();
    let mut requested_total = Resources::default();
    for node in index.nodes.iter() {
        let Some(node_usage) = usage.get(&node.name_any()) else {
            continue;
        };
        let managed = index.claim_of(node).is_some();
        let labels = node_labels(node, managed, well_known, &mut interned);
        let per_resource = [
            &node_usage.allocatable,
            &node_usage.system_overhead,
            &node_usage.pod_requests,
            &node_usage.pod_limits,
            &node_usage.daemon_requests,
            &node_usage.daemon_limits,
        ];
        for (family, resources) in per_resource.into_iter().enumerate() {
            for (name, value) in resources.to_map() {
                let resource = ResourceTypeLabels {
                    resource_type: resource_type(&name),
                };
                let key = (labels.clone(), resource);
                let gauge = per_resource_gauges[family].get_or_create(&key);
                gauge.set(resource_value(&name, value));
                drop(gauge);
                current.resources.insert((family, key));
            }
        }
        if let Some(created) = &node.metadata.creation_timestamp {
            let age = seconds_between(created.0, now);
            metrics
                .nodes_current_lifetime
                .get_or_create(&labels)
                .set(age);
            current.lifetimes.insert(labels);
        }
        allocatable_total.add(&node_usage.allocatable);
        requested_total.add(&node_usage.pod_requests);
    }
    for (family, key) in series.resources.difference(&current.resources) {
        per_resource_gauges[*family].remove(key);
    }
    for labels in series.lifetimes.difference(&current.lifetimes) {
        metrics.nodes_current_lifetime.remove(labels);
    }
    *series = current;
    record_utilization(metrics, &allocatable_total, &requested_total);
}

/// `karpenter_cluster_utilization_percent`, per resource the nodes have.
fn record_utilization(metrics: &AdapterMetrics, allocatable: &Resources, requested: &Resources) {
    let percents = utilization(allocatable, requested);
    for (name, percent) in &percents {
        let labels = ResourceTypeLabels {
            resource_type: resource_type(name),
        };
        metrics
            .cluster_utilization
            .get_or_create(&labels)
            .set(*percent);
    }
    for name in karpenter_core::resources::CORE {
        if !percents.contains_key(name) {
            let labels = ResourceTypeLabels {
                resource_type: resource_type(name),
            };
            metrics.cluster_utilization.remove(&labels);
        }
    }
}

/// Pod requests as a percentage of allocatable, per resource the nodes
/// have.
pub fn utilization(allocatable: &Resources, requested: &Resources) -> HashMap<String, f64> {
    allocatable
        .to_map()
        .into_iter()
        .filter(|(_, total)| *total > 0)
        .map(|(name, total)| {
            let percent = 100.0 * requested.get(&name) as f64 / total as f64;
            (name, percent)
        })
        .collect()
}

/// Refreshes the metrics until the snapshots end.
pub async fn run(ctx: Context, mut snapshots: watch::Receiver<Published>) {
    if snapshots.wait_for(|p| p.index.listed()).await.is_err() {
        return;
    }
    let mut passes = Passes::default();
    loop {
        let index = snapshots.borrow().index.clone();
        record(&ctx, &index, &mut passes);
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
        let times = SchedulingTimes::default();
        let now = Timestamp::now();
        let mut timings = PodTimings::default();
        let mut index = Index::default();
        index.apply(Update::Pod(Event::Apply(pod("Pending", None))));
        assert_eq!(
            timings.observe(&index, &times, now),
            PodDurations::default()
        );
        index.apply(Update::Pod(Event::Apply(pod(
            "Running",
            Some("2026-01-01T00:00:42Z"),
        ))));
        assert_eq!(timings.observe(&index, &times, now).startup, [42.0]);
        assert!(
            timings.observe(&index, &times, now).startup.is_empty(),
            "once"
        );

        let mut fresh = PodTimings::default();
        assert!(
            fresh.observe(&index, &times, now).startup.is_empty(),
            "never seen pending: not a startup"
        );
    }

    /// Karpenter's pod scheduling metrics: seen pending, decided about and
    /// placed by provisioning, bound, Ready; each duration once.
    #[test]
    fn a_provisioned_pod_has_its_scheduling_durations_recorded_once() {
        let created = "2026-01-01T00:00:00Z";
        let base = Timestamp::from_second(1_767_225_600).unwrap_or_else(|e| panic!("{e}"));
        let seconds = |s: i64| {
            base.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(s))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let entry = |status: serde_json::Value, node: Option<&str>| {
            PodEntry::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "p", "namespace": "default", "uid": "u1", "creationTimestamp": created},
                    "spec": {"containers": [{"name": "c"}], "nodeName": node},
                    "status": status
                }))
                .unwrap_or_else(|e| panic!("{e}")),
            )
        };
        let times = SchedulingTimes::default();
        let mut timings = PodTimings::default();
        let mut index = Index::default();
        index.apply(Update::Pod(Event::Apply(entry(
            json!({"phase": "Pending"}),
            None,
        ))));
        timings.observe(&index, &times, seconds(2));
        times.record("u1", true, seconds(5));
        let decided = timings.observe(&index, &times, seconds(6));
        assert_eq!(decided.decision, [3.0], "seen at 2 s, decided at 5 s");
        let scheduled = json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:20Z"}]});
        index.apply(Update::Pod(Event::Apply(entry(scheduled, Some("n1")))));
        let bound = timings.observe(&index, &times, seconds(21));
        assert_eq!(
            (bound.bound, bound.provisioning_bound),
            (vec![20.0], vec![15.0])
        );
        let running = json!({"phase": "Running", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:20Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:30Z"}]});
        index.apply(Update::Pod(Event::Apply(entry(running, Some("n1")))));
        let started = timings.observe(&index, &times, seconds(31));
        assert_eq!(
            (started.startup, started.provisioning_startup),
            (vec![30.0], vec![25.0])
        );
        assert_eq!(
            timings.observe(&index, &times, seconds(40)),
            PodDurations::default(),
            "once"
        );
        assert_eq!(
            times.get("u1"),
            Default::default(),
            "a started pod's times are forgotten"
        );
    }

    fn bound(name: &str, owner: Option<&str>, phase: &str) -> PodEntry {
        let owners = owner.map_or_else(
            || json!([]),
            |kind| json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "o", "controller": true}]),
        );
        PodEntry::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "uid": name, "ownerReferences": owners},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                    "limits": {"cpu": "2", "memory": "1Gi"}}}]},
                "status": {"phase": phase}
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// Karpenter's metrics.node: allocatable, capacity minus allocatable,
    /// the requests and limits of pods not finished (DaemonSet pods also
    /// apart), and the cluster's utilization by requests.
    #[test]
    fn node_usage_counts_the_pods_bound_and_running() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let mut index = Index::default();
        index.apply(Update::Node(Event::Apply(node)));
        index.apply(Update::Pod(Event::Apply(bound(
            "app",
            Some("ReplicaSet"),
            "Running",
        ))));
        index.apply(Update::Pod(Event::Apply(bound(
            "agent",
            Some("DaemonSet"),
            "Running",
        ))));
        index.apply(Update::Pod(Event::Apply(bound("done", None, "Succeeded"))));
        let usage = node_usage(&index);
        let n1 = &usage["n1"];
        assert_eq!(n1.allocatable.cpu, 3800);
        assert_eq!(n1.system_overhead.cpu, 200);
        assert_eq!(n1.system_overhead.memory, 1 << 30);
        assert_eq!(n1.system_overhead.pods, 0);
        assert_eq!((n1.pod_requests.cpu, n1.pod_limits.cpu), (1000, 4000));
        assert_eq!(n1.pod_requests.pods, 0, "no pod count, as Karpenter's");
        assert_eq!((n1.daemon_requests.cpu, n1.daemon_limits.cpu), (500, 2000));
        let percent = utilization(&n1.allocatable, &n1.pod_requests);
        assert!((percent["cpu"] - 100.0 * 1000.0 / 3800.0).abs() < 1e-9);
        assert_eq!(percent["pods"], 0.0);
    }

    #[test]
    fn unsynced_time_counts_from_the_first_pass_that_found_the_state_unsynced() {
        let mut unsynced = Unsynced::default();
        assert_eq!(unsynced.observe(true), 0.0);
        assert!(unsynced.observe(false) < 0.01, "from now");
        std::thread::sleep(Duration::from_millis(20));
        assert!(unsynced.observe(false) >= 0.02);
        assert_eq!(unsynced.observe(true), 0.0, "synced again");
        assert!(unsynced.observe(false) < 0.01, "a new spell");
    }

    /// A node that went takes its series with it; the others keep theirs
    /// throughout (set first, stale ones removed after).
    #[test]
    fn node_series_of_a_node_that_went_are_removed() {
        let registry = karpenter_runtime::Metrics::new("karpenter");
        let metrics = AdapterMetrics::register(&registry);
        let node = |name: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "3"}}
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut index = Index::default();
        index.apply(Update::Node(Event::Apply(node("n1"))));
        index.apply(Update::Node(Event::Apply(node("n2"))));
        let mut series = NodeSeries::default();
        record_nodes(&metrics, &index, &[], &mut series);
        let page = registry.encode().unwrap_or_else(|e| panic!("{e}"));
        assert!(page.contains("node_name=\"n1\"") && page.contains("node_name=\"n2\""));
        index.apply(Update::Node(Event::Delete(node("n1"))));
        record_nodes(&metrics, &index, &[], &mut series);
        let page = registry.encode().unwrap_or_else(|e| panic!("{e}"));
        assert!(!page.contains("node_name=\"n1\""), "{page}");
        let n2 = page
            .lines()
            .filter(|l| l.starts_with("karpenter_nodes_") && l.contains("node_name=\"n2\""))
            .count();
        assert_eq!(n2, 3, "allocatable, overhead and age of n2: {page}");
    }
}
