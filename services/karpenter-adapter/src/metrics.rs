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
pub struct MoveLabels {
    /// `approved` (the move started).
    pub decision: String,
    pub nodepool: String,
    /// The pool's consolidation policy (`WhenEmptyOrUnderutilized`, `Balanced`, ...).
    pub policy: String,
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
pub struct ResourceTypeLabels {
    pub resource_type: String,
}

/// A node's labels on Karpenter's node metrics: `node_name`, `phase`,
/// `managed` and each well-known label by the last part of its key in
/// snake case (`nodepool`, `zone`, `instance_type`, ...); with
/// `resource_type` on the resource gauges. The set depends on the
/// provider's well-known labels, so it is a list.
pub type NodeLabels = Vec<(String, String)>;

/// A float gauge (Prometheus' gauges are floats; prometheus-client's
/// default is an integer).
pub type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// A resource's `resource_type` label, as Karpenter writes it.
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A quantity as Karpenter's metrics report it: CPU in cores (the integers
/// hold millicores), everything else in its base unit.
pub fn resource_value(name: &str, value: i64) -> f64 {
    if name == karpenter_core::resources::CPU {
        value as f64 / 1000.0
    } else {
        value as f64
    }
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
pub struct ResultLabels {
    pub result: String,
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
        karpenter_api::ConsolidationPolicy::Balanced => "balanced",
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

/// Declares the adapter's metrics once: each entry gives the field, its
/// type (built with `Default` unless an `= init` follows), and the name and
/// help it is registered under, in the order they are exposed. From it come
/// the [`AdapterMetrics`] struct, its constructor and its registration.
macro_rules! adapter_metrics {
    ($($field:ident: $ty:ty $(= $init:expr)? => $name:literal, $help:literal;)*) => {
        /// The adapter's metrics, registered on the service's registry.
        #[derive(Clone)]
        pub struct AdapterMetrics {
            $(pub $field: $ty,)*
        }

        impl AdapterMetrics {
            fn new() -> Self {
                AdapterMetrics {
                    $($field: adapter_metrics!(@init $($init)?),)*
                }
            }

            fn register_all(&self, r: &mut Registry) {
                $(r.register($name, $help, self.$field.clone());)*
            }
        }
    };
    (@init) => {
        Default::default()
    };
    (@init $init:expr) => {
        $init
    };
}

adapter_metrics! {
    // NodeClaims through their lifecycle.
    nodeclaims_created: Family<CreatedLabels, Counter>
        => "nodeclaims_created", "NodeClaims created, by reason and node pool";
    nodeclaims_launched: Family<PoolLabels, Counter>
        => "nodeclaims_launched", "NodeClaims whose instance launched";
    nodeclaims_registered: Family<PoolLabels, Counter>
        => "nodeclaims_registered", "NodeClaims whose node registered";
    nodeclaims_initialized: Family<PoolLabels, Counter>
        => "nodeclaims_initialized", "NodeClaims whose node initialized";
    nodeclaims_terminated: Family<TerminatedLabels, Counter>
        => "nodeclaims_terminated", "NodeClaims terminated";
    nodeclaims_disrupted: Family<DisruptedLabels, Counter>
        => "nodeclaims_disrupted", "NodeClaims removed before their time (insufficient capacity, timeouts, garbage collection)";
    pods_disruption_initiated: Family<DisruptedLabels, Counter>
        => "pods_disruption_initiated", "Pods that must move because Karpenter disrupted their node, counted when the node's NodeClaim is deleted (DaemonSet and static pods excluded)";
    nodeclaims_unhealthy_disrupted: Family<UnhealthyLabels, Counter>
        => "nodeclaims_unhealthy_disrupted", "NodeClaims repaired because a node condition matched a repair policy too long, by condition";
    nodeclaims_reboots: Family<ResultLabels, Counter>
        => "nodeclaims_reboots", "Reboots for repair that ended, by result (succeeded, provider_error, drain_timeout, recovery_timeout)";

    // Disruption decisions and the cluster's cost.
    disruption_decisions: Family<DecisionLabels, Counter>
        => "voluntary_disruption_decisions", "Disruption commands started, by decision (delete or replace), reason and consolidation type";
    consolidation_moves: Family<MoveLabels, Counter>
        => "consolidation_moves", "Consolidation moves started, by decision, node pool and consolidation policy (each pool of a multi-node move counts once)";
    consolidation_score: Family<MoveLabels, Histogram> = Family::new_with_constructor(score_buckets)
        => "consolidation_score", "Balanced consolidation scores of the moves started (a move's share of its pool's cost saved over its share of the pool's disruption), by decision, node pool and policy";
    disruption_cost: Family<CostLabels, FloatGauge>
        => "disruption_cluster_cost_per_hour", "The managed nodes' price per hour at the last disruption plan: current, planned (after its commands) and the lower bound for the same pods";

    // Interruption messages from the provider.
    interruption_received: Family<MessageTypeLabels, Counter>
        => "interruption_received_messages", "Interruption messages received from the provider, by message type";
    interruption_deleted: Counter
        => "interruption_deleted_messages", "Interruption messages acknowledged after acting on them";
    interruption_latency: Histogram = Histogram::new(exponential_buckets(0.5, 2.0, 14))
        => "interruption_message_queue_duration_seconds", "Time from the cloud's event to the adapter acting on it";

    // Nodes created, terminated and drained.
    nodes_created: Family<PoolZoneLabels, Counter>
        => "nodes_created", "Nodes that registered";
    nodes_terminated: Family<PoolZoneLabels, Counter>
        => "nodes_terminated", "Nodes terminated";
    nodes_drained: Family<PoolLabels, Counter>
        => "nodes_drained", "Nodes drained";

    // Pods: state, startup, drains and evictions.
    pods_state: Family<PodStateLabels, Gauge>
        => "pods_state", "Pods, one series each with its node, node pool and phase";
    pods_startup_duration: Histogram = Histogram::new(exponential_buckets(0.5, 2.0, 14))
        => "pods_startup_duration_seconds", "Time from a pod's creation to it being Ready";
    pods_drained: Family<ReasonLabels, Counter>
        => "pods_drained", "Pods evicted or deleted by a drain";
    pods_eviction_requests: Family<CodeLabels, Counter>
        => "pods_eviction_requests", "Eviction requests, by response code";

    // PodDeletionCostManagement.
    deletion_cost_writes: Family<ResultLabels, Counter>
        => "pod_deletion_cost_pod_annotation_writes", "Writes of controller.kubernetes.io/pod-deletion-cost, by result (updated, skipped_unchanged, skipped_notfound, skipped_conflict, error)";
    deletion_cost_pending_nodes: Family<PoolLabels, Gauge>
        => "pod_deletion_cost_nodes_with_pending_annotation_writes", "Nodes whose pods' pod-deletion-cost the last pass wrote, by node pool";

    // Provisioning batches.
    scheduling_duration: Family<ControllerLabels, Histogram> = Family::new_with_constructor(duration_buckets)
        => "scheduler_scheduling_duration_seconds", "Time to plan a provisioning batch, Solve included";
    unschedulable_pods: Family<ControllerLabels, Gauge>
        => "scheduler_unschedulable_pods_count", "Pending pods the last plan could not place";

    // Cluster state, node pools, leadership and peers.
    cluster_state_synced: Gauge
        => "cluster_state_synced", "1 when the cluster state is synced (every NodeClaim launched and every object listed)";
    cluster_state_node_count: Gauge
        => "cluster_state_node_count", "Nodes and in-flight NodeClaims the adapter knows";
    nodepool_usage: Family<ResourceLabels, FloatGauge>
        => "nodepools_usage", "Resources the node pool's nodes have";
    nodepool_limit: Family<ResourceLabels, FloatGauge>
        => "nodepools_limit", "The node pool's limits";

    // Each node's resources (Karpenter's metrics.node controller).
    nodes_allocatable: Family<NodeLabels, FloatGauge>
        => "nodes_allocatable", "Node allocatable are the resources allocatable by nodes";
    nodes_total_pod_requests: Family<NodeLabels, FloatGauge>
        => "nodes_total_pod_requests", "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods";
    nodes_total_pod_limits: Family<NodeLabels, FloatGauge>
        => "nodes_total_pod_limits", "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods";
    nodes_total_daemon_requests: Family<NodeLabels, FloatGauge>
        => "nodes_total_daemon_requests", "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes";
    nodes_total_daemon_limits: Family<NodeLabels, FloatGauge>
        => "nodes_total_daemon_limits", "Node total daemon limits are the resources specified by DaemonSet pod limits";
    nodes_system_overhead: Family<NodeLabels, FloatGauge>
        => "nodes_system_overhead", "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status";
    nodes_current_lifetime: Family<NodeLabels, FloatGauge>
        => "nodes_current_lifetime_seconds", "Node age in seconds";
    cluster_utilization: Family<ResourceTypeLabels, FloatGauge>
        => "cluster_utilization_percent", "Utilization of allocatable resources by pod requests";
    leader: Gauge
        => "leader", "1 while this replica holds the leader lease";
    peer_up: Family<PeerLabels, Gauge>
        => "peer_up", "1 while the peer (scheduler, provider) answers its gRPC health check (ours)";
}

/// Karpenter's buckets for Balanced consolidation scores (1.0 and up pass
/// its default threshold band).
fn score_buckets() -> Histogram {
    Histogram::new([0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0])
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
        let m = AdapterMetrics::new();
        metrics.with_registry(|r| m.register_all(r));
        Arc::new(m)
    }
}
