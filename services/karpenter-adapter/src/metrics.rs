//! Karpenter's metrics, by Karpenter's names (`karpenter_*`), so existing
//! dashboards and alerts keep working.

use std::collections::HashMap;
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
pub struct PoolDecisionLabels {
    pub nodepool: String,
    pub decision: String,
    pub reason: String,
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolReasonLabels {
    pub nodepool: String,
    /// Karpenter's disruption reason (`Underutilized`, `Empty`, ...).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolidationTypeLabels {
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
/// provider's well-known labels, so it is a list, and it is shared by the
/// node's series (thousands of nodes, a dozen series each).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct NodeLabels(pub Arc<[(Arc<str>, Arc<str>)]>);

impl EncodeLabelSet for NodeLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.0.as_ref().encode(encoder)
    }
}

/// A node's series of one resource.
pub type NodeResourceLabels = (NodeLabels, ResourceTypeLabels);

/// A float gauge (Prometheus' gauges are floats; prometheus-client's
/// default is an integer).
pub type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

tokio::task_local! {
    /// The controller a task works for (the runner's reconciles and each
    /// supervised controller loop): the `controller` label of the cloud
    /// provider call metrics, as Karpenter takes it from its context.
    pub static CONTROLLER: &'static str;
}

/// The controller the current task works for, or `""`.
pub fn current_controller() -> &'static str {
    CONTROLLER.try_with(|name| *name).unwrap_or("")
}

/// A resource's `resource_type` label, as Karpenter writes it.
pub fn resource_type(name: &str) -> String {
    label_name(name)
}

/// A Kubernetes name (a resource, the last part of a label key) as
/// Karpenter writes it in a metric: lower case, dashes as underscores.
pub fn label_name(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// Seconds from `from` to `to`, never negative (a clock or a timestamp
/// from the cluster may be ahead).
pub fn seconds_between(
    from: k8s_openapi::jiff::Timestamp,
    to: k8s_openapi::jiff::Timestamp,
) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
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

impl ControllerLabels {
    pub fn of(controller: &str) -> Self {
        Self {
            controller: controller.to_owned(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileResultLabels {
    pub controller: String,
    /// `success`, `error`, `requeue_after` (controller-runtime's values).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: String,
    pub controller: String,
}

impl QueueLabels {
    pub fn of(controller: &str) -> Self {
        Self {
            name: controller.to_owned(),
            controller: controller.to_owned(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallLabels {
    pub controller: String,
    /// Karpenter's method name (`Create`, `Delete`, `Get`, `List`,
    /// `GetInstanceTypes`, `IsDrifted`, ...).
    pub method: String,
    pub provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderErrorLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
    /// `NodeClaimNotFoundError`, `InsufficientCapacityError`,
    /// `NodeClassNotReadyError`, or empty.
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceTypeLabels {
    pub instance_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OfferingLabels {
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    pub name: String,
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
    ($($field:ident: $ty:ty $(= $init:expr)? => $($registry:ident)? $name:literal, $help:literal;)*) => {
        /// The adapter's metrics, registered on the service's registry.
        #[derive(Clone)]
        pub struct AdapterMetrics {
            $(pub $field: $ty,)*
        }

        impl AdapterMetrics {
            /// Every metric as a scrape names it, whether or not it has a
            /// sample yet (the drop-in coverage table is checked against
            /// this list).
            pub fn exposed_names() -> Vec<String> {
                vec![$(adapter_metrics!(@exposed $name, stringify!($ty) $(, $registry)?),)*]
            }

            fn new() -> Self {
                AdapterMetrics {
                    $($field: adapter_metrics!(@init $($init)?),)*
                }
            }

            /// Registers each metric: under the service's prefix, or as
            /// it is named when marked `unprefixed`.
            fn register_all(&self, prefixed: &mut Registry, unprefixed: &mut Registry) {
                $(adapter_metrics!(@registry prefixed unprefixed $($registry)?)
                    .register($name, $help, self.$field.clone());)*
            }
        }
    };
    (@init) => {
        Default::default()
    };
    (@init $init:expr) => {
        $init
    };
    (@registry $prefixed:ident $unprefixed:ident) => {
        $prefixed
    };
    (@exposed $name:literal, $ty:expr) => {
        exposed_name(concat!("karpenter_", $name), $ty)
    };
    (@exposed $name:literal, $ty:expr, unprefixed) => {
        exposed_name($name, $ty)
    };
    (@registry $prefixed:ident $unprefixed:ident unprefixed) => {
        $unprefixed
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
    disruption_decisions_by_pool: Family<PoolDecisionLabels, Counter>
        => "voluntary_disruption_decisions_by_nodepool", "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, and consolidation type";
    disruption_queue_failures: Family<DecisionLabels, Counter>
        => "voluntary_disruption_queue_failures", "The number of times that an enqueued disruption decision failed. Labeled by disruption method";
    disruption_failed_validations: Family<ConsolidationTypeLabels, Counter>
        => "voluntary_disruption_failed_validations", "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation type";
    consolidation_moves: Family<MoveLabels, Counter>
        => "consolidation_moves", "Consolidation moves started, by decision, node pool and consolidation policy (each pool of a multi-node move counts once)";
    consolidation_score: Family<MoveLabels, Histogram> = Family::new_with_constructor(score_buckets)
        => "consolidation_score", "Balanced consolidation scores of the moves started (a move's share of its pool's cost saved over its share of the pool's disruption), by decision, node pool and policy";
    disruption_cost: Family<CostLabels, FloatGauge>
        => "disruption_cluster_cost_per_hour", "The managed nodes' price per hour at the last disruption plan: current, planned (after its commands) and the lower bound for the same pods";

    // Calls to the cloud provider (Karpenter's cloudprovider decorator).
    cloudprovider_duration: Family<ProviderCallLabels, Histogram> = Family::new_with_constructor(prometheus_default_buckets)
        => "cloudprovider_duration_seconds", "Duration of cloud provider method calls. Labeled by the controller, method name and provider";
    cloudprovider_errors: Family<ProviderErrorLabels, Counter>
        => "cloudprovider_errors", "Total number of errors returned from CloudProvider calls";
    instance_type_cpu_cores: Family<InstanceTypeLabels, FloatGauge>
        => "cloudprovider_instance_type_cpu_cores", "VCPUs cores for a given instance type";
    instance_type_memory_bytes: Family<InstanceTypeLabels, FloatGauge>
        => "cloudprovider_instance_type_memory_bytes", "Memory, in bytes, for a given instance type";
    offering_available: Family<OfferingLabels, FloatGauge>
        => "cloudprovider_instance_type_offering_available", "Instance type offering availability, based on instance type, capacity type, and zone";
    offering_price_estimate: Family<OfferingLabels, FloatGauge>
        => "cloudprovider_instance_type_offering_price_estimate", "Instance type offering estimated hourly price used when making informed decisions on node cost calculation, based on instance type, capacity type, and zone";

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
    nodes_lifetime: Family<PoolLabels, Histogram> = Family::new_with_constructor(lifetime_buckets)
        => "nodes_lifetime_duration_seconds", "The lifetime duration of the nodes since creation";
    nodeclaims_termination: Family<PoolLabels, Histogram> = Family::new_with_constructor(|| Histogram::new(exponential_buckets(1.0, 2.0, 12)))
        => "nodeclaims_termination_duration_seconds", "Duration of NodeClaim termination in seconds";
    nodeclaims_instance_termination: Family<PoolLabels, Histogram> = Family::new_with_constructor(|| Histogram::new(exponential_buckets(1.0, 2.0, 11)))
        => "nodeclaims_instance_termination_duration_seconds", "Duration of CloudProvider Instance termination in seconds";

    // Pods: state, startup, drains and evictions.
    pods_state: Family<PodStateLabels, Gauge>
        => "pods_state", "Pods, one series each with its node, node pool and phase";
    pods_startup_duration: Histogram = Histogram::new(exponential_buckets(0.5, 2.0, 14))
        => "pods_startup_duration_seconds", "Time from a pod's creation to it being Ready";
    pods_bound_duration: Histogram = duration_buckets()
        => "pods_bound_duration_seconds", "The time from pod creation until the pod is bound";
    pods_scheduling_decision_duration: Histogram = duration_buckets()
        => "pods_scheduling_decision_duration_seconds", "The time it takes for Karpenter to first try to schedule a pod after it's been seen";
    pods_provisioning_bound_duration: Histogram = duration_buckets()
        => "pods_provisioning_bound_duration_seconds", "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp";
    pods_provisioning_startup_duration: Histogram = duration_buckets()
        => "pods_provisioning_startup_duration_seconds", "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated from a point in memory, not by the pod creation timestamp";
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
    ignored_pods: Gauge
        => "scheduler_ignored_pods_count", "Number of pods ignored during scheduling by Karpenter";
    queue_depth: Gauge
        => "scheduler_queue_depth", "The number of pods currently waiting to be scheduled";
    unschedulable_pods: Family<ControllerLabels, Gauge>
        => "scheduler_unschedulable_pods_count", "Pending pods the last plan could not place";

    // Cluster state, node pools, leadership and peers.
    cluster_state_synced: Gauge
        => "cluster_state_synced", "1 when the cluster state is synced (every NodeClaim launched and every object listed)";
    cluster_state_node_count: Gauge
        => "cluster_state_node_count", "Nodes and in-flight NodeClaims the adapter knows";
    cluster_state_unsynced_time: FloatGauge
        => "cluster_state_unsynced_time_seconds", "The time for which cluster state is not synced";
    nodepool_usage: Family<ResourceLabels, FloatGauge>
        => "nodepools_usage", "Resources the node pool's nodes have";
    nodepool_limit: Family<ResourceLabels, FloatGauge>
        => "nodepools_limit", "The node pool's limits";
    nodepool_cost: Family<PoolLabels, FloatGauge>
        => "nodepools_cost_total", "Total cost of the nodepool from Karpenter's perspective, per hour at the last disruption plan. Units are determined by the cloud provider. Not an authoritative source for billing. Includes modifications due to NodeOverlays";
    nodepool_allowed_disruptions: Family<PoolReasonLabels, Gauge>
        => "nodepools_allowed_disruptions", "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be deleted at any point";
    nodepool_disrupting_nodes: Family<PoolReasonLabels, Gauge>
        => "nodepools_nodes_consuming_budgets", "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool";

    // Each node's resources (Karpenter's metrics.node controller).
    nodes_allocatable: Family<NodeResourceLabels, FloatGauge>
        => "nodes_allocatable", "Node allocatable are the resources allocatable by nodes";
    nodes_total_pod_requests: Family<NodeResourceLabels, FloatGauge>
        => "nodes_total_pod_requests", "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods";
    nodes_total_pod_limits: Family<NodeResourceLabels, FloatGauge>
        => "nodes_total_pod_limits", "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods";
    nodes_total_daemon_requests: Family<NodeResourceLabels, FloatGauge>
        => "nodes_total_daemon_requests", "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes";
    nodes_total_daemon_limits: Family<NodeResourceLabels, FloatGauge>
        => "nodes_total_daemon_limits", "Node total daemon limits are the resources specified by DaemonSet pod limits";
    nodes_system_overhead: Family<NodeResourceLabels, FloatGauge>
        => "nodes_system_overhead", "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status";
    nodes_current_lifetime: Family<NodeLabels, FloatGauge>
        => "nodes_current_lifetime_seconds", "Node age in seconds";
    cluster_utilization: Family<ResourceTypeLabels, FloatGauge>
        => "cluster_utilization_percent", "Utilization of allocatable resources by pod requests";
    leader: Gauge
        => "leader", "1 while this replica holds the leader lease";
    leader_election_status: Family<LeaseLabels, Gauge>
        => unprefixed "leader_election_master_status", "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease";

    // controller-runtime's reconcile and work-queue metrics, one series
    // per controller (the runner's queue is the controller's work queue).
    reconcile_total: Family<ReconcileResultLabels, Counter>
        => unprefixed "controller_runtime_reconcile", "Total number of reconciliations per controller";
    reconcile_errors: Family<ControllerLabels, Counter>
        => unprefixed "controller_runtime_reconcile_errors", "Total number of reconciliation errors per controller";
    reconcile_panics: Family<ControllerLabels, Counter>
        => unprefixed "controller_runtime_reconcile_panics", "Total number of reconciliation panics per controller";
    reconcile_time: Family<ControllerLabels, Histogram> = Family::new_with_constructor(reconcile_buckets)
        => unprefixed "controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller";
    active_workers: Family<ControllerLabels, Gauge>
        => unprefixed "controller_runtime_active_workers", "Number of currently used workers per controller";
    max_concurrent_reconciles: Family<ControllerLabels, Gauge>
        => unprefixed "controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller";
    workqueue_depth: Family<QueueLabels, Gauge>
        => unprefixed "workqueue_depth", "Current depth of workqueue";
    workqueue_adds: Family<QueueLabels, Counter>
        => unprefixed "workqueue_adds", "Total number of adds handled by workqueue";
    workqueue_retries: Family<QueueLabels, Counter>
        => unprefixed "workqueue_retries", "Total number of retries handled by workqueue";
    peer_up: Family<PeerLabels, Gauge>
        => "peer_up", "1 while the peer (scheduler, provider) answers its gRPC health check (ours)";
}

/// A metric's name in a scrape: a counter's samples end in `_total`.
fn exposed_name(name: &str, ty: &str) -> String {
    if ty.contains("Counter") {
        format!("{name}_total")
    } else {
        name.to_owned()
    }
}

/// Karpenter's buckets for Balanced consolidation scores (1.0 and up pass
/// its default threshold band).
fn score_buckets() -> Histogram {
    Histogram::new([0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0])
}

/// Karpenter's node lifetime buckets: 15 minutes to 30 days.
fn lifetime_buckets() -> Histogram {
    const HOUR: f64 = 3600.0;
    const DAY: f64 = 24.0 * HOUR;
    Histogram::new([
        0.25 * HOUR,
        0.5 * HOUR,
        0.75 * HOUR,
        HOUR,
        2.0 * HOUR,
        4.0 * HOUR,
        6.0 * HOUR,
        8.0 * HOUR,
        10.0 * HOUR,
        12.0 * HOUR,
        16.0 * HOUR,
        20.0 * HOUR,
        DAY,
        2.0 * DAY,
        3.0 * DAY,
        5.0 * DAY,
        10.0 * DAY,
        15.0 * DAY,
        20.0 * DAY,
        25.0 * DAY,
        30.0 * DAY,
    ])
}

/// Prometheus' default buckets, which Karpenter's cloud provider histogram
/// keeps.
fn prometheus_default_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// controller-runtime's reconcile-time buckets (5 ms to 60 s).
fn reconcile_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
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

    /// Whether this replica leads: `karpenter_leader` and client-go's
    /// `leader_election_master_status` for the lease `name`.
    pub fn set_leading(&self, name: &str, leading: bool) {
        self.leader.set(i64::from(leading));
        self.leader_election_status
            .get_or_create(&LeaseLabels {
                name: name.to_owned(),
            })
            .set(i64::from(leading));
    }

    /// The provider's instance types as Karpenter's AWS provider reports
    /// them: each type's vCPUs and memory, and each offering's
    /// availability (available in any pool's catalog) and price.
    pub fn record_catalogs(
        &self,
        catalogs: &[karpenter_proto::scheduler::v1::InstanceTypeCatalog],
    ) {
        let mut available: HashMap<OfferingLabels, (bool, f64)> = HashMap::new();
        for instance_type in catalogs.iter().flat_map(|c| &c.instance_types) {
            let name = InstanceTypeLabels {
                instance_type: instance_type.name.clone(),
            };
            let capacity = instance_type.capacity.as_ref().map(|c| &c.quantities);
            let quantity = |resource: &str| capacity.and_then(|q| q.get(resource)).copied();
            if let Some(cpu) = quantity(karpenter_core::resources::CPU) {
                let cores = resource_value(karpenter_core::resources::CPU, cpu);
                self.instance_type_cpu_cores.get_or_create(&name).set(cores);
            }
            if let Some(memory) = quantity(karpenter_core::resources::MEMORY) {
                self.instance_type_memory_bytes
                    .get_or_create(&name)
                    .set(memory as f64);
            }
            for offering in &instance_type.offerings {
                let labels = OfferingLabels {
                    instance_type: instance_type.name.clone(),
                    capacity_type: offering.capacity_type.clone(),
                    zone: offering.zone.clone(),
                };
                let entry = available.entry(labels).or_insert((false, offering.price));
                entry.0 |= offering.available;
                entry.1 = offering.price;
            }
        }
        for (labels, (is_available, price)) in available {
            let flag = if is_available { 1.0 } else { 0.0 };
            self.offering_available.get_or_create(&labels).set(flag);
            self.offering_price_estimate
                .get_or_create(&labels)
                .set(price);
        }
    }

    pub fn register(metrics: &karpenter_runtime::Metrics) -> Arc<Self> {
        let m = AdapterMetrics::new();
        metrics.with_registry(|prefixed| {
            metrics.with_unprefixed_registry(|unprefixed| m.register_all(prefixed, unprefixed));
        });
        Arc::new(m)
    }
}
