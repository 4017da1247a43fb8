//! Karpenter's metrics, by Karpenter's names (`karpenter_*`), so existing
//! dashboards and alerts keep working.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
    pub min_values_relaxed: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolZoneLabels {
    pub nodepool: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminatedLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
    /// The pool's policy (`when_empty`, `when_empty_or_underutilized`) for
    /// a consolidation; empty for every other reason.
    pub consolidation_policy: String,
    /// `graceful`, `eventual` (a terminationGracePeriod) or `forceful`.
    pub termination_mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnhealthyLabels {
    pub condition: String,
    pub nodepool: String,
    pub capacity_type: String,
    pub image_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete` (no replacement) or `replace`.
    pub decision: String,
    /// `empty`, `underutilized`, `drifted`.
    pub reason: String,
    /// `empty`, `single`, `multi`, or empty outside consolidation.
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CostLabels {
    /// `current` (the managed nodes now), `planned` (once the plan's
    /// commands are done), `lower_bound` (the cheapest any set of nodes
    /// from the pools could hold the same pods for).
    pub estimate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource_type: String,
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodStateLabels {
    pub name: String,
    pub namespace: String,
    pub node: String,
    pub nodepool: String,
    pub phase: String,
    pub scheduled: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MessageTypeLabels {
    pub message_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    /// `scheduler` or `provider`.
    pub peer: String,
}

/// Why a claim was disrupted, for [`AdapterMetrics::claim_disrupted`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Disrupted<'a> {
    /// Karpenter's reason in snake case (`underutilized`, `expired`, ...).
    pub reason: &'a str,
    /// The pool's consolidation policy in snake case, for consolidation.
    pub consolidation_policy: &'a str,
    /// The pods that must move, where Karpenter counts them (disruption
    /// commands, expiration, repair, garbage collection).
    pub reschedulable_pods: Option<usize>,
}

impl<'a> Disrupted<'a> {
    /// A disruption whose pods are not counted (launch failures, liveness,
    /// interruption).
    pub fn because(reason: &'a str) -> Self {
        Self {
            reason,
            ..Self::default()
        }
    }
}

/// A pool's consolidation policy as Karpenter's metrics label it.
pub fn consolidation_policy_label(policy: karpenter_api::ConsolidationPolicy) -> &'static str {
    match policy {
        karpenter_api::ConsolidationPolicy::WhenEmpty => "when_empty",
        karpenter_api::ConsolidationPolicy::WhenEmptyOrUnderutilized => {
            "when_empty_or_underutilized"
        }
    }
}

/// Karpenter's termination mode of a claim: `graceful` without a
/// terminationGracePeriod, `forceful` with a zero one, `eventual` otherwise.
fn termination_mode(claim: &karpenter_api::NodeClaim) -> &'static str {
    match claim
        .spec
        .termination_grace_period
        .as_ref()
        .map(|d| d.as_std())
    {
        None => "graceful",
        Some(d) if d.is_zero() => "forceful",
        Some(_) => "eventual",
    }
}

/// The adapter's metrics, registered on the service's registry.
#[derive(Clone)]
pub struct AdapterMetrics {
    pub nodeclaims_created: Family<CreatedLabels, Counter>,
    pub nodeclaims_launched: Family<PoolLabels, Counter>,
    pub nodeclaims_registered: Family<PoolLabels, Counter>,
    pub nodeclaims_initialized: Family<PoolLabels, Counter>,
    pub nodeclaims_terminated: Family<TerminatedLabels, Counter>,
    pub nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
    pub pods_disruption_initiated: Family<DisruptedLabels, Counter>,
    pub nodeclaims_unhealthy_disrupted: Family<UnhealthyLabels, Counter>,
    pub disruption_decisions: Family<DecisionLabels, Counter>,
    pub disruption_cost: Family<CostLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub nodes_created: Family<PoolZoneLabels, Counter>,
    pub interruption_received: Family<MessageTypeLabels, Counter>,
    pub interruption_deleted: Counter,
    pub interruption_latency: Histogram,
    pub nodes_terminated: Family<PoolZoneLabels, Counter>,
    pub nodes_drained: Family<PoolLabels, Counter>,
    pub pods_state: Family<PodStateLabels, Gauge>,
    pub pods_startup_duration: Histogram,
    pub pods_drained: Family<ReasonLabels, Counter>,
    pub pods_eviction_requests: Family<CodeLabels, Counter>,
    pub scheduling_duration: Family<ControllerLabels, Histogram>,
    pub unschedulable_pods: Family<ControllerLabels, Gauge>,
    pub cluster_state_synced: Gauge,
    pub cluster_state_node_count: Gauge,
    pub nodepool_usage: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub nodepool_limit: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub leader: Gauge,
    pub peer_up: Family<PeerLabels, Gauge>,
}

fn duration_buckets() -> Histogram {
    // 5 ms to about 10 minutes, as Karpenter's DurationBuckets span.
    Histogram::new(exponential_buckets(0.005, 2.0, 18))
}

impl AdapterMetrics {
    /// Counts `claim` as disrupted (`karpenter_nodeclaims_disrupted_total`)
    /// and, where Karpenter counts them, the pods that must move off its
    /// node (`karpenter_pods_disruption_initiated_total`).
    pub fn claim_disrupted(&self, claim: &karpenter_api::NodeClaim, disrupted: Disrupted<'_>) {
        use kube::ResourceExt as _;
        let labels = claim.labels();
        let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
        let labels = DisruptedLabels {
            reason: disrupted.reason.to_owned(),
            nodepool: label(karpenter_core::labels::NODE_POOL),
            capacity_type: label(karpenter_core::labels::CAPACITY_TYPE),
            consolidation_policy: disrupted.consolidation_policy.to_owned(),
            termination_mode: termination_mode(claim).to_owned(),
        };
        self.nodeclaims_disrupted.get_or_create(&labels).inc();
        if let Some(pods) = disrupted.reschedulable_pods {
            self.pods_disruption_initiated
                .get_or_create(&labels)
                .inc_by(u64::try_from(pods).unwrap_or(u64::MAX));
        }
    }

    pub fn register(metrics: &karpenter_runtime::Metrics) -> Arc<Self> {
        let m = AdapterMetrics {
            nodeclaims_created: Family::default(),
            nodeclaims_launched: Family::default(),
            nodeclaims_registered: Family::default(),
            nodeclaims_initialized: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            pods_disruption_initiated: Family::default(),
            nodeclaims_unhealthy_disrupted: Family::default(),
            disruption_decisions: Family::default(),
            disruption_cost: Family::default(),
            nodes_created: Family::default(),
            interruption_received: Family::default(),
            interruption_deleted: Counter::default(),
            interruption_latency: Histogram::new(exponential_buckets(0.5, 2.0, 14)),
            nodes_terminated: Family::default(),
            nodes_drained: Family::default(),
            pods_state: Family::default(),
            pods_startup_duration: Histogram::new(exponential_buckets(0.5, 2.0, 14)),
            pods_drained: Family::default(),
            pods_eviction_requests: Family::default(),
            scheduling_duration: Family::new_with_constructor(duration_buckets),
            unschedulable_pods: Family::default(),
            cluster_state_synced: Gauge::default(),
            cluster_state_node_count: Gauge::default(),
            nodepool_usage: Family::default(),
            nodepool_limit: Family::default(),
            leader: Gauge::default(),
            peer_up: Family::default(),
        };
        metrics.with_registry(|r| {
            m.register_nodeclaims(r);
            m.register_disruption(r);
            m.register_interruption(r);
            m.register_nodes(r);
            m.register_pods(r);
            m.register_scheduling(r);
            m.register_cluster(r);
        });
        Arc::new(m)
    }

    /// NodeClaims through their lifecycle.
    fn register_nodeclaims(&self, r: &mut Registry) {
        r.register(
            "nodeclaims_created",
            "NodeClaims created, by reason and node pool",
            self.nodeclaims_created.clone(),
        );
        r.register(
            "nodeclaims_launched",
            "NodeClaims whose instance launched",
            self.nodeclaims_launched.clone(),
        );
        r.register(
            "nodeclaims_registered",
            "NodeClaims whose node registered",
            self.nodeclaims_registered.clone(),
        );
        r.register(
            "nodeclaims_initialized",
            "NodeClaims whose node initialized",
            self.nodeclaims_initialized.clone(),
        );
        r.register(
            "nodeclaims_terminated",
            "NodeClaims terminated",
            self.nodeclaims_terminated.clone(),
        );
        r.register(
            "nodeclaims_disrupted",
            "NodeClaims removed before their time (insufficient capacity, timeouts, garbage collection)",
            self.nodeclaims_disrupted.clone(),
        );
        r.register(
            "pods_disruption_initiated",
            "Pods that must move because Karpenter disrupted their node, counted when the node's NodeClaim is deleted (DaemonSet and static pods excluded)",
            self.pods_disruption_initiated.clone(),
        );
        r.register(
            "nodeclaims_unhealthy_disrupted",
            "NodeClaims repaired because a node condition matched a repair policy too long, by condition",
            self.nodeclaims_unhealthy_disrupted.clone(),
        );
    }

    /// Disruption decisions and the cluster's cost.
    fn register_disruption(&self, r: &mut Registry) {
        r.register(
            "voluntary_disruption_decisions",
            "Disruption commands started, by decision (delete or replace), reason and consolidation type",
            self.disruption_decisions.clone(),
        );
        r.register(
            "disruption_cluster_cost_per_hour",
            "The managed nodes' price per hour at the last disruption plan: current, planned (after its commands) and the lower bound for the same pods",
            self.disruption_cost.clone(),
        );
    }

    /// Interruption messages from the provider.
    fn register_interruption(&self, r: &mut Registry) {
        r.register(
            "interruption_received_messages",
            "Interruption messages received from the provider, by message type",
            self.interruption_received.clone(),
        );
        r.register(
            "interruption_deleted_messages",
            "Interruption messages acknowledged after acting on them",
            self.interruption_deleted.clone(),
        );
        r.register(
            "interruption_message_queue_duration_seconds",
            "Time from the cloud's event to the adapter acting on it",
            self.interruption_latency.clone(),
        );
    }

    /// Nodes created, terminated and drained.
    fn register_nodes(&self, r: &mut Registry) {
        r.register(
            "nodes_created",
            "Nodes that registered",
            self.nodes_created.clone(),
        );
        r.register(
            "nodes_terminated",
            "Nodes terminated",
            self.nodes_terminated.clone(),
        );
        r.register("nodes_drained", "Nodes drained", self.nodes_drained.clone());
    }

    /// Pods: state, startup, drains and evictions.
    fn register_pods(&self, r: &mut Registry) {
        r.register(
            "pods_state",
            "Pods, one series each with its node, node pool and phase",
            self.pods_state.clone(),
        );
        r.register(
            "pods_startup_duration_seconds",
            "Time from a pod's creation to it being Ready",
            self.pods_startup_duration.clone(),
        );
        r.register(
            "pods_drained",
            "Pods evicted or deleted by a drain",
            self.pods_drained.clone(),
        );
        r.register(
            "pods_eviction_requests",
            "Eviction requests, by response code",
            self.pods_eviction_requests.clone(),
        );
    }

    /// Provisioning batches.
    fn register_scheduling(&self, r: &mut Registry) {
        r.register(
            "scheduler_scheduling_duration_seconds",
            "Time to plan a provisioning batch, Solve included",
            self.scheduling_duration.clone(),
        );
        r.register(
            "scheduler_unschedulable_pods_count",
            "Pending pods the last plan could not place",
            self.unschedulable_pods.clone(),
        );
    }

    /// Cluster state, node pools, leadership and peers.
    fn register_cluster(&self, r: &mut Registry) {
        r.register(
            "cluster_state_synced",
            "1 when the cluster state is synced (every NodeClaim launched and every object listed)",
            self.cluster_state_synced.clone(),
        );
        r.register(
            "cluster_state_node_count",
            "Nodes and in-flight NodeClaims the adapter knows",
            self.cluster_state_node_count.clone(),
        );
        r.register(
            "nodepools_usage",
            "Resources the node pool's nodes have",
            self.nodepool_usage.clone(),
        );
        r.register(
            "nodepools_limit",
            "The node pool's limits",
            self.nodepool_limit.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease",
            self.leader.clone(),
        );
        r.register(
            "peer_up",
            "1 while the peer (scheduler, provider) answers its gRPC health check (ours)",
            self.peer_up.clone(),
        );
    }
}
