//! The planner's own view of a cluster: requirements parsed, effective
//! requests summed, selectors resolved. Built once per request by the
//! caller (the scheduler service turns its wire request into it); nothing
//! here knows a wire format.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::hostports::HostPort;
use crate::labels;
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::selector::LabelSelector;
use crate::taints::{Taint, Toleration};

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod affinity / anti-affinity term with its namespaces resolved.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AffinityTerm {
    pub selector: Option<LabelSelector>,
    /// The namespaces whose pods the term selects; None means all.
    pub namespaces: Option<BTreeSet<String>>,
    pub topology_key: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    pub selector: Option<LabelSelector>,
    pub min_domains: Option<i32>,
    /// nodeAffinityPolicy: Honor (default) counts only nodes matching the
    /// pod's node affinity.
    pub honor_node_affinity: bool,
    /// nodeTaintsPolicy: Ignore (default) counts nodes whatever their taints.
    pub honor_node_taints: bool,
}

#[derive(Clone, Debug)]
pub struct Pod {
    pub key: PodKey,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub node_name: String,
    /// Effective requests (containers, init containers, sidecars, overhead)
    /// with `pods: 1`.
    pub requests: Resources,
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity, ORed terms, with volume topology ANDed in.
    pub required_terms: Vec<Requirements>,
    pub preferred_terms: Vec<(i32, Requirements)>,
    pub pod_affinity: Vec<AffinityTerm>,
    pub preferred_pod_affinity: Vec<(i32, AffinityTerm)>,
    pub pod_anti_affinity: Vec<AffinityTerm>,
    pub preferred_pod_anti_affinity: Vec<(i32, AffinityTerm)>,
    pub spread: Vec<SpreadConstraint>,
    pub tolerations: Vec<Toleration>,
    pub host_ports: Vec<HostPort>,
    pub priority: i32,
    pub do_not_disrupt: bool,
    /// `controller.kubernetes.io/pod-deletion-cost`.
    pub deletion_cost: i32,
    /// `karpenter.sh/disruption-cost`, read first.
    pub disruption_cost: Option<i32>,
    pub owner_kind: String,
    pub creation_seconds: i64,
    pub phase: String,
    pub terminating: bool,
    /// The Ready condition is False.
    pub not_ready: bool,
    /// Asks for devices through Dynamic Resource Allocation.
    pub dra_requests: bool,
    /// A CapacityBuffer's virtual pod (always pending, never bound).
    pub buffer: bool,
    /// Volumes that count against a node's attach limits.
    pub volumes: Vec<crate::volumes::VolumeRef>,
}

impl Pod {
    pub fn is_daemon(&self) -> bool {
        self.owner_kind == "DaemonSet"
    }

    /// A pod that finished (Succeeded / Failed) holds no resources.
    pub fn is_terminal(&self) -> bool {
        self.phase == "Succeeded" || self.phase == "Failed"
    }

    pub fn is_active(&self) -> bool {
        !self.is_terminal() && !self.terminating
    }

    /// A pod that must find another node when its node goes away
    /// (Karpenter's IsReschedulable): running, or a StatefulSet pod still
    /// terminating; never a daemon or static pod.
    pub fn is_reschedulable(&self) -> bool {
        (self.is_active() || (self.owner_kind == "StatefulSet" && self.terminating))
            && !self.is_daemon()
            && self.owner_kind != "Node"
    }
}

#[derive(Clone, Debug)]
pub struct Offering {
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
    pub available: bool,
    pub requirements: Requirements,
    /// Index of `zone` in the cluster's [`OfferingSpace`].
    pub zone_id: usize,
    /// Index of `capacity_type` in the cluster's [`OfferingSpace`].
    pub capacity_type_id: usize,
}

#[derive(Clone, Debug)]
pub struct InstanceType {
    pub name: String,
    pub requirements: Requirements,
    pub offerings: Vec<Offering>,
    pub capacity: Resources,
    pub allocatable: Resources,
    /// How many volumes of each CSI driver it can attach.
    pub volume_limits: crate::volumes::VolumeLimits,
}

impl InstanceType {
    /// The cheapest available offering the filter allows (ties: zone, then
    /// capacity type, by name).
    pub fn cheapest_allowed(&self, filter: &OfferingFilter) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|offering| offering.available && filter.allows(offering))
            .min_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.zone.cmp(&b.zone))
                    .then_with(|| a.capacity_type.cmp(&b.capacity_type))
            })
    }

    pub fn has_compatible_offering(&self, filter: &OfferingFilter) -> bool {
        self.offerings
            .iter()
            .any(|offering| offering.available && filter.allows(offering))
    }
}

/// Every zone and capacity type the request's offerings name, numbered, so
/// an offering is checked against a node's requirements by two lookups.
#[derive(Clone, Debug, Default)]
pub struct OfferingSpace {
    pub zones: Vec<String>,
    pub capacity_types: Vec<String>,
    /// Some offering carries requirements beyond zone and capacity type.
    pub has_offering_requirements: bool,
}

impl OfferingSpace {
    fn intern(names: &mut Vec<String>, name: &str) -> usize {
        match names.iter().position(|n| n == name) {
            Some(index) => index,
            None => {
                names.push(name.to_owned());
                names.len() - 1
            }
        }
    }

    /// Numbers the offerings of every catalog.
    pub fn number(catalogs: &mut [Vec<InstanceType>]) -> OfferingSpace {
        let mut space = OfferingSpace::default();
        for offering in catalogs
            .iter_mut()
            .flatten()
            .flat_map(|it| it.offerings.iter_mut())
        {
            offering.zone_id = Self::intern(&mut space.zones, &offering.zone);
            offering.capacity_type_id =
                Self::intern(&mut space.capacity_types, &offering.capacity_type);
            space.has_offering_requirements |= !offering.requirements.is_empty();
        }
        space
    }
}

/// Which offerings a node's requirements allow, worked out once per node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OfferingFilter {
    zones: Vec<bool>,
    capacity_types: Vec<bool>,
    /// Only kept when some offering has requirements of its own.
    all: Option<Requirements>,
}

impl OfferingFilter {
    pub fn new(requirements: &Requirements, space: &OfferingSpace) -> Self {
        let allowed = |key: &str, names: &[String]| -> Vec<bool> {
            match requirements.get(key) {
                Some(requirement) => names.iter().map(|n| requirement.has(n)).collect(),
                None => vec![true; names.len()],
            }
        };
        Self {
            zones: allowed(labels::TOPOLOGY_ZONE, &space.zones),
            capacity_types: allowed(labels::CAPACITY_TYPE, &space.capacity_types),
            all: space
                .has_offering_requirements
                .then(|| requirements.clone()),
        }
    }

    pub fn allows(&self, offering: &Offering) -> bool {
        self.zones.get(offering.zone_id).copied().unwrap_or(false)
            && self
                .capacity_types
                .get(offering.capacity_type_id)
                .copied()
                .unwrap_or(false)
            && (offering.requirements.is_empty()
                || self
                    .all
                    .as_ref()
                    .is_none_or(|all| all.intersects(&offering.requirements).is_ok()))
    }
}

/// Why a node is disrupted (Karpenter's disruption reasons): what a
/// command reports and what a budget may be limited to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    Empty,
    Underutilized,
    Drifted,
    Expired,
    /// Node repair.
    Unhealthy,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
            Reason::Unhealthy => "Unhealthy",
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Budget {
    /// A count (`"3"`) or a percentage of the pool's nodes (`"10%"`).
    pub nodes: String,
    /// When the budget applies: after each firing of the schedule, for the
    /// duration in seconds; `None`: always.
    pub window: Option<(crate::cron::Cron, i64)>,
    /// The disruption reasons the budget limits; empty: all of them.
    pub reasons: Vec<Reason>,
}

/// How a pool's nodes may be consolidated (`spec.disruption.consolidationPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConsolidationPolicy {
    /// Only empty nodes.
    WhenEmpty,
    /// Empty nodes, and nodes whose pods fit elsewhere or on a cheaper node.
    #[default]
    WhenEmptyOrUnderutilized,
    /// As `WhenEmptyOrUnderutilized`, when the move's savings are worth its
    /// disruption ([`crate::disruption`]'s Balanced score).
    Balanced,
}

#[derive(Clone, Debug)]
pub struct NodePool {
    pub name: String,
    pub weight: i32,
    /// spec requirements + template labels + karpenter.sh/nodepool.
    pub requirements: Requirements,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub limits: BTreeMap<String, i64>,
    pub usage: Resources,
    pub ready: bool,
    pub catalog: usize,
    pub consolidation: ConsolidationPolicy,
    /// `consolidateAfter`; `None`: `Never`.
    pub consolidate_after: Option<Duration>,
    pub budgets: Vec<Budget>,
    /// `expireAfter`; `None`: `Never`.
    pub expire_after: Option<Duration>,
    pub template_hash: String,
    /// `spec.replicas`: set for a static pool, whose nodes only static
    /// drift (and expiry) disrupt.
    pub replicas: Option<i64>,
}

/// The pool limit on how many nodes it may have (`limits.nodes`).
pub const NODES_LIMIT: &str = "nodes";

impl NodePool {
    /// A static pool (Karpenter's `OwnedByStaticNodePool`).
    pub fn is_static(&self) -> bool {
        self.replicas.is_some()
    }
}

/// What disruption needs to know about a node claim beyond its node: its
/// conditions, annotations and the times that drive consolidation, drift
/// and expiry (Unix seconds).
#[derive(Clone, Debug, Default)]
pub struct DisruptionState {
    /// The Drifted condition's reason; empty when not drifted.
    pub drifted_reason: String,
    /// The Consolidatable condition is True.
    pub consolidatable: bool,
    /// `status.lastPodEventTime`.
    pub last_pod_event_seconds: Option<i64>,
    /// `karpenter.sh/do-not-disrupt`: the Node's once registered, the claim's before.
    pub do_not_disrupt: bool,
    /// When the claim expires; `None`: never.
    pub expiration_seconds: Option<i64>,
    /// `karpenter.sh/nodepool-hash` of the claim.
    pub node_pool_hash: String,
    /// The `karpenter.sh/disrupted` taint is on the node.
    pub disrupting: bool,
    /// The node's Ready condition is not True.
    pub node_not_ready: bool,
    /// Nominated for a pending pod.
    pub nominated: bool,
    /// The claim's terminationGracePeriod.
    pub termination_grace_period: Option<Duration>,
    /// When the claim became initialized.
    pub initialized_seconds: Option<i64>,
    /// When the Drifted condition became true.
    pub drifted_seconds: Option<i64>,
    /// The claim's InstanceTerminating condition is True.
    pub instance_terminating: bool,
    /// Set when a node condition matches a repair policy.
    pub repair: Option<NodeRepair>,
}

/// The repair policy a node's conditions resolve to (the adapter resolves
/// the provider's policies; the planner paces repairs).
#[derive(Clone, Debug, Default)]
pub struct NodeRepair {
    pub condition: String,
    pub reason: String,
    /// The toleration has passed.
    pub eligible: bool,
    /// Reboot in place instead of replacing.
    pub reboot: bool,
    /// min(policy, claim terminationGracePeriod); `None`: the claim's own.
    pub termination_grace_period: Option<Duration>,
    /// Higher first.
    pub score: f64,
    /// `karpenter.sh/do-not-repair`.
    pub do_not_repair: bool,
}

impl NodeRepair {
    /// The condition as events and metrics name it: `Type`, or
    /// `Type/Reason` when the policy names a reason.
    pub fn condition_name(&self) -> String {
        if self.reason.is_empty() {
            self.condition.clone()
        } else {
            format!("{}/{}", self.condition, self.reason)
        }
    }
}

#[derive(Clone, Debug)]
pub struct StateNode {
    pub name: String,
    pub node_claim_name: String,
    pub node_pool: String,
    pub labels: BTreeMap<String, String>,
    /// `labels` as requirements, built once: every scheduling run of a
    /// disruption plan reads them.
    pub label_requirements: Arc<Requirements>,
    /// Taints that count for scheduling (startup taints removed for nodes not
    /// yet initialized).
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    pub capacity: Resources,
    pub pods: Vec<Pod>,
    pub has_node: bool,
    pub initialized: bool,
    pub marked_for_deletion: bool,
    pub unschedulable: bool,
    pub price: f64,
    pub creation_seconds: i64,
    pub disruption: DisruptionState,
    pub capacity_type: String,
    pub zone: String,
    pub instance_type: String,
    /// A node the disruption planner itself added (a replacement): never a
    /// candidate in the same plan.
    pub planned: bool,
    /// How many volumes of each CSI driver it can attach.
    pub volume_limits: crate::volumes::VolumeLimits,
}

impl StateNode {
    pub fn is_managed(&self) -> bool {
        !self.node_pool.is_empty()
    }
}

#[derive(Clone, Debug)]
pub struct DaemonSet {
    pub key: PodKey,
    pub pod: Pod,
}

#[derive(Clone, Debug, Default)]
pub struct Pdb {
    pub key: PodKey,
    pub selector: Option<LabelSelector>,
    pub disruptions_allowed: i32,
    pub always_allow_unhealthy: bool,
    /// maxUnavailable 0 / "0%" or minAvailable "100%": no pod it selects may
    /// ever be evicted.
    pub fully_blocking: bool,
}

impl Pdb {
    pub fn selects(&self, pod: &Pod) -> bool {
        self.key.namespace == pod.key.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }

    /// Whether `pod` may be evicted whatever the budget allows: it is not
    /// ready and the PDB's `unhealthyPodEvictionPolicy` is `AlwaysAllow`.
    pub fn lets_unhealthy_go(&self, pod: &Pod) -> bool {
        self.always_allow_unhealthy && pod.not_ready
    }

    /// Whether the PDB forbids ever evicting `pod`.
    pub fn always_blocks(&self, pod: &Pod) -> bool {
        self.fully_blocking && self.selects(pod) && !self.lets_unhealthy_go(pod)
    }
}

/// A whole request, parsed.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub pending: Vec<Pod>,
    pub nodes: Vec<StateNode>,
    pub node_pools: Vec<NodePool>,
    pub catalogs: Vec<Vec<InstanceType>>,
    pub offering_space: OfferingSpace,
    pub daemon_sets: Vec<DaemonSet>,
    pub pdbs: Vec<Pdb>,
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pub now_seconds: i64,
}
