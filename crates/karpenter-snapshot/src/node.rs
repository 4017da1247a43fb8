//! Nodes and NodeClaims into state nodes: a claim with its Node is one
//! state node (the claim's disruption state on the node), a claim without
//! one is in flight.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::{ConditionsExt as _, NodeClaim};
use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

use crate::fields::{self, FieldError};
use crate::{Built, Mode, ObjectError, Source};

/// Where each state node is, by node name and by provider ID.
#[derive(Default)]
pub struct Nodes {
    by_name: BTreeMap<String, usize>,
    by_provider_id: BTreeMap<String, usize>,
}

impl Nodes {
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn add(
        &mut self,
        built: &mut Built,
        id: usize,
        node: sched::StateNode,
    ) -> Result<(), ObjectError> {
        if self.by_name.contains_key(&node.name) {
            return Err(ObjectError {
                id,
                kind: "Node",
                namespace: String::new(),
                name: node.name.clone(),
                field: "metadata.name".into(),
                message: format!("node {:?} is defined twice", node.name),
            });
        }
        let index = built.snapshot.nodes.len();
        self.by_name.insert(node.name.clone(), index);
        if !node.provider_id.is_empty() {
            self.by_provider_id.insert(node.provider_id.clone(), index);
        }
        built.snapshot.nodes.push(node);
        built.origins.nodes.push(id);
        Ok(())
    }
}

fn label(node_labels: &BTreeMap<String, String>, key: &str) -> String {
    node_labels.get(key).cloned().unwrap_or_default()
}

/// What resolving a node's repair policies takes.
#[derive(Clone, Copy)]
pub(crate) struct RepairInput<'a> {
    pub(crate) policies: &'a karpenter_api::repair::Policies,
    pub(crate) now: i64,
    pub(crate) history: &'a BTreeMap<String, karpenter_api::repair::RebootHistory>,
}

/// Each claimed node's reboots for repair, from its claim's annotations.
pub(crate) fn reboot_history(
    claims: &[Source<'_, NodeClaim>],
) -> BTreeMap<String, karpenter_api::repair::RebootHistory> {
    claims
        .iter()
        .filter_map(|source| {
            let claim = source.object;
            let node = claim.status.as_ref()?.node_name.clone()?;
            let history = karpenter_api::repair::RebootHistory::from_annotations(
                claim.metadata.annotations.as_ref(),
            );
            (history != Default::default()).then_some((node, history))
        })
        .collect()
}

/// The repair policy `node`'s conditions resolve to, on the wire.
fn node_repair(node: &Node, name: &str, input: RepairInput<'_>) -> Option<sched::NodeRepair> {
    use karpenter_api::repair::Action;
    let resolved = input
        .policies
        .resolve(node, input.now, input.history.get(name))?;
    Some(sched::NodeRepair {
        condition_type: resolved.condition_type,
        condition_reason: resolved.condition_reason,
        eligible: resolved.eligible,
        action: match resolved.action {
            Action::Replace => sched::NodeRepairAction::Replace,
            Action::Reboot => sched::NodeRepairAction::Reboot,
        } as i32,
        termination_grace_period: resolved.termination_grace_period.map(fields::std_duration),
        score: resolved.score,
        do_not_repair: karpenter_api::repair::do_not_repair(node.metadata.annotations.as_ref()),
    })
}

/// A Node object.
pub(crate) fn node(
    source: &Source<'_, Node>,
    mode: Mode,
    repair: Option<RepairInput<'_>>,
) -> Result<sched::StateNode, ObjectError> {
    let object = source.object;
    let meta = &object.metadata;
    let (name, error) = crate::named(source.id, "Node", "", meta)?;
    let node_labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let spec = object.spec.clone().unwrap_or_default();
    let status = object.status.clone().unwrap_or_default();
    let all_taints = fields::node_taints(spec.taints.as_ref(), "spec.taints").map_err(&error)?;
    let (startup_taints, taints): (Vec<_>, Vec<_>) = all_taints
        .into_iter()
        .partition(|t| t.key == labels::UNREGISTERED_TAINT_KEY);
    let registered = startup_taints.is_empty();
    let capacity =
        fields::resources(status.capacity.as_ref(), "status.capacity").map_err(&error)?;
    let allocatable = fields::resources(status.allocatable.as_ref(), "status.allocatable")
        .map_err(&error)?
        .or_else(|| capacity.clone());
    // In a cluster only the label (or, below, the claim's condition) says a
    // node is initialized; manifests from a repository rarely carry either,
    // so there a registered node counts as initialized.
    let initialized = match node_labels.get(labels::INITIALIZED).map(String::as_str) {
        Some(value) => value == "true",
        None => mode == Mode::Manifests && registered,
    };
    let conditions = status.conditions.unwrap_or_default();
    // A node that reports no conditions (a manifest without status) is ready.
    let not_ready = !conditions.is_empty() && !karpenter_api::node::ready_condition(&conditions);
    let disruption = sched::NodeClaimDisruptionState {
        do_not_disrupt: annotations.get(labels::DO_NOT_DISRUPT).map(String::as_str) == Some("true"),
        disrupting: taints
            .iter()
            .any(|t| t.key == labels::DISRUPTED_TAINT_KEY || t.key == labels::REBOOTING_TAINT_KEY),
        node_not_ready: not_ready,
        repair: repair.and_then(|input| node_repair(object, &name, input)),
        ..Default::default()
    };
    Ok(sched::StateNode {
        node_claim_name: String::new(),
        provider_id: spec.provider_id.clone().unwrap_or_default(),
        node_pool: label(&node_labels, labels::NODE_POOL),
        capacity_type: label(&node_labels, labels::CAPACITY_TYPE),
        zone: label(&node_labels, labels::TOPOLOGY_ZONE),
        instance_type: label(&node_labels, labels::INSTANCE_TYPE),
        labels: node_labels,
        taints,
        startup_taints,
        capacity,
        allocatable,
        pods: Vec::new(),
        has_node: true,
        registered,
        initialized,
        marked_for_deletion: meta.deletion_timestamp.is_some(),
        unschedulable: spec.unschedulable.unwrap_or(false),
        price: 0.0,
        creation_timestamp: fields::optional_timestamp(meta.creation_timestamp.as_ref()),
        disruption: Some(disruption),
        name,
        volume_limits: Default::default(),
    })
}

/// Each node's attachable-volume limits from its CSINode (Karpenter's
/// `populateVolumeLimits`: every driver's `allocatable.count`).
pub(crate) fn apply_volume_limits(
    snapshot: &mut sched::ClusterSnapshot,
    csi_nodes: &[crate::Source<'_, k8s_openapi::api::storage::v1::CSINode>],
) {
    if csi_nodes.is_empty() {
        return;
    }
    let by_name: std::collections::BTreeMap<&str, &k8s_openapi::api::storage::v1::CSINode> =
        csi_nodes
            .iter()
            .filter_map(|s| Some((s.object.metadata.name.as_deref()?, s.object)))
            .collect();
    for node in &mut snapshot.nodes {
        let Some(csi) = by_name.get(node.name.as_str()) else {
            continue;
        };
        for driver in &csi.spec.drivers {
            if let Some(count) = driver.allocatable.as_ref().and_then(|a| a.count) {
                node.volume_limits
                    .insert(driver.name.clone(), i64::from(count.max(0)));
            }
        }
    }
}

/// A claim whose expiry comes from its pool (it sets no `expireAfter`):
/// resolved once the pools are read.
pub struct PoolExpiry {
    node: usize,
    created: prost_types::Timestamp,
    pool: String,
}

/// A NodeClaim: merged into its Node's state node (by `status.nodeName` or
/// provider ID), or an in-flight state node of its own.
///
/// A claim of a node class kind another provider serves is another
/// Karpenter's: in a cluster it is left out, and its Node is planned as an
/// unmanaged node (never expired or disrupted here).
pub(crate) fn foreign_claim(claim: &NodeClaim, classes: &crate::NodeClasses, mode: Mode) -> bool {
    mode == Mode::Live
        && !classes.kind.is_empty()
        && (claim.spec.node_class_ref.kind != classes.kind
            || claim.spec.node_class_ref.group != classes.group)
}

/// Plans the Node of a foreign claim as unmanaged.
pub(crate) fn disown(claim: &NodeClaim, nodes: &Nodes, built: &mut Built) {
    let status = claim.status.as_ref();
    let by_name = status
        .and_then(|s| s.node_name.as_deref())
        .and_then(|n| nodes.by_name.get(n));
    let by_provider_id = status
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
        .and_then(|p| nodes.by_provider_id.get(p));
    if let Some(i) = by_name.or(by_provider_id)
        && let Some(node) = built.snapshot.nodes.get_mut(*i)
    {
        node.node_pool.clear();
    }
}

pub(crate) fn node_claim(
    source: &Source<'_, NodeClaim>,
    mode: Mode,
    expiry_from_pool: bool,
    nodes: &mut Nodes,
    built: &mut Built,
) -> Result<Option<PoolExpiry>, ObjectError> {
    let claim = source.object;
    let meta = &claim.metadata;
    let (name, error) = crate::named(source.id, "NodeClaim", "", meta)?;
    let status = claim.status.clone().unwrap_or_default();
    let mut claim_labels = meta.labels.clone().unwrap_or_default();
    let requirements = fields::karpenter_requirements(&claim.spec.requirements);
    for r in &requirements {
        if r.operator == types::Operator::In as i32 && r.values.len() == 1 {
            claim_labels
                .entry(r.key.clone())
                .or_insert_with(|| r.values[0].clone());
        }
    }
    let annotations = meta.annotations.clone().unwrap_or_default();
    let creation = fields::optional_timestamp(meta.creation_timestamp.as_ref());
    let expire_after = claim
        .spec
        .expire_after
        .as_std()
        .map(fields::std_duration)
        .filter(|_| !(mode == Mode::Manifests && expiry_from_pool));
    let disruption = disruption_state(
        claim,
        &annotations,
        creation.as_ref(),
        expire_after.as_ref(),
    );
    let claim_initialized = status
        .conditions
        .condition("Initialized")
        .map(|c| c.status == karpenter_api::ConditionStatus::True);
    let node_name = status.node_name.clone().unwrap_or_default();
    let provider_id = status.provider_id.clone().unwrap_or_default();
    let existing = nodes.by_name.get(&node_name).copied().or_else(|| {
        nodes
            .by_provider_id
            .get(&provider_id)
            .copied()
            .filter(|_| !provider_id.is_empty())
    });
    // A claim in a cluster always has its expireAfter (copied from its pool
    // at creation); one from a manifest that gives none follows its pool.
    let from_pool = mode == Mode::Manifests && expiry_from_pool;
    let pool_expiry = |node: usize, pool: &str| {
        creation
            .filter(|_| from_pool && !pool.is_empty())
            .map(|created| PoolExpiry {
                node,
                created,
                pool: pool.to_string(),
            })
    };
    let expected_allocatable = fields::resources(Some(&status.allocatable), "status.allocatable")
        .map_err(&error)?
        .map(|r| r.quantities)
        .unwrap_or_default();
    let claimed = Claimed {
        claim,
        labels: &claim_labels,
        creation,
        initialized: claim_initialized,
        expected_allocatable: &expected_allocatable,
        disruption,
    };
    if let Some(i) = existing {
        let node = &mut built.snapshot.nodes[i];
        merge_claim(node, claimed);
        let pool = node.node_pool.clone();
        return Ok(pool_expiry(i, &pool));
    }
    if nodes.by_name.contains_key(&name) {
        return Err(error(FieldError::new(
            "metadata.name",
            format!("a node named {name:?} already exists"),
        )));
    }
    let node_pool = label(&claim_labels, labels::NODE_POOL);
    let expiry = pool_expiry(built.snapshot.nodes.len(), &node_pool);
    let state = in_flight_node(name.clone(), provider_id, claimed).map_err(&error)?;
    nodes.add(built, source.id, state)?;
    Ok(expiry)
}

/// What a NodeClaim says about its node, read once.
struct Claimed<'a> {
    claim: &'a NodeClaim,
    labels: &'a BTreeMap<String, String>,
    creation: Option<prost_types::Timestamp>,
    initialized: Option<bool>,
    expected_allocatable: &'a BTreeMap<String, i64>,
    disruption: sched::NodeClaimDisruptionState,
}

/// A claim's Node already in the snapshot takes the claim's name, pool,
/// creation, initialization and disruption state; until it is initialized
/// its startup taints are ignored and the claim's expected allocatable
/// stands in for extended resources the kubelet has not reported.
fn merge_claim(node: &mut sched::StateNode, claimed: Claimed<'_>) {
    let claim = claimed.claim;
    node.node_claim_name = claim.metadata.name.clone().unwrap_or_default();
    if node.node_pool.is_empty() {
        node.node_pool = label(claimed.labels, labels::NODE_POOL);
    }
    if claimed.creation.is_some() {
        node.creation_timestamp = claimed.creation;
    }
    let labelled = node.labels.get(labels::INITIALIZED).map(String::as_str);
    node.initialized = match (labelled, claimed.initialized) {
        (Some("true"), _) | (_, Some(true)) => true,
        (None, None) => node.initialized,
        _ => false,
    };
    if !node.initialized {
        let startup = fields::karpenter_taints(&claim.spec.startup_taints);
        node.taints.retain(|t| !ignored_while_starting(t, &startup));
        // The kubelet reports extended resources late (zero, or not at
        // all, until its device plugins register): until then the
        // claim's expectation stands in.
        let allocatable = node.allocatable.get_or_insert_with(Default::default);
        for (name, value) in claimed.expected_allocatable {
            let reported = allocatable.quantities.entry(name.clone()).or_insert(0);
            if *reported == 0 {
                *reported = *value;
            }
        }
    }
    node.marked_for_deletion |= claim.metadata.deletion_timestamp.is_some();
    let from_node = node.disruption.take().unwrap_or_default();
    // Karpenter reads do-not-disrupt from the NodeClaim only until its Node
    // registers; after that the Node's annotation decides, so removing it
    // from the Node unblocks the node even if the claim still carries it.
    node.disruption = Some(sched::NodeClaimDisruptionState {
        do_not_disrupt: if node.registered {
            from_node.do_not_disrupt
        } else {
            claimed.disruption.do_not_disrupt
        },
        disrupting: from_node.disrupting,
        node_not_ready: from_node.node_not_ready,
        repair: from_node
            .repair
            .map(|repair| claimed_repair(repair, claim, &claimed.disruption)),
        ..claimed.disruption
    });
}

/// A node's repair with its claim's say: do-not-repair on either object,
/// and a drain bound no longer than the claim's terminationGracePeriod.
fn claimed_repair(
    mut repair: sched::NodeRepair,
    claim: &NodeClaim,
    state: &sched::NodeClaimDisruptionState,
) -> sched::NodeRepair {
    repair.do_not_repair |=
        karpenter_api::repair::do_not_repair(claim.metadata.annotations.as_ref());
    let seconds = |d: &prost_types::Duration| (d.seconds, d.nanos);
    if let (Some(policy), Some(own)) = (
        repair.termination_grace_period,
        state.termination_grace_period,
    ) && seconds(&own) < seconds(&policy)
    {
        repair.termination_grace_period = Some(own);
    }
    repair
}

/// A claim without a Node yet: in-flight capacity, from the claim's labels,
/// taints (startup ones and the unregistered taint included) and status.
fn in_flight_node(
    name: String,
    provider_id: String,
    claimed: Claimed<'_>,
) -> Result<sched::StateNode, FieldError> {
    let claim = claimed.claim;
    let status = claim.status.clone().unwrap_or_default();
    let mut startup_taints = fields::karpenter_taints(&claim.spec.startup_taints);
    startup_taints.push(types::Taint {
        key: labels::UNREGISTERED_TAINT_KEY.to_string(),
        value: String::new(),
        effect: types::TaintEffect::NoExecute as i32,
    });
    let capacity = fields::resources(Some(&status.capacity), "status.capacity")?
        .filter(|c| !c.quantities.is_empty());
    let allocatable = fields::resources(Some(&status.allocatable), "status.allocatable")?
        .filter(|a| !a.quantities.is_empty())
        .or_else(|| capacity.clone());
    let labels_of = claimed.labels;
    Ok(sched::StateNode {
        name: name.clone(),
        node_claim_name: name,
        provider_id,
        node_pool: label(labels_of, labels::NODE_POOL),
        capacity_type: label(labels_of, labels::CAPACITY_TYPE),
        zone: label(labels_of, labels::TOPOLOGY_ZONE),
        instance_type: label(labels_of, labels::INSTANCE_TYPE),
        labels: labels_of.clone(),
        taints: fields::karpenter_taints(&claim.spec.taints),
        startup_taints,
        capacity,
        allocatable,
        pods: Vec::new(),
        has_node: false,
        registered: false,
        initialized: claimed.initialized == Some(true),
        marked_for_deletion: claim.metadata.deletion_timestamp.is_some(),
        unschedulable: false,
        price: 0.0,
        creation_timestamp: claimed.creation,
        disruption: Some(claimed.disruption),
        volume_limits: Default::default(),
    })
}

fn disruption_state(
    claim: &NodeClaim,
    annotations: &BTreeMap<String, String>,
    creation: Option<&prost_types::Timestamp>,
    expire_after: Option<&prost_types::Duration>,
) -> sched::NodeClaimDisruptionState {
    let conditions = claim
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let true_since = |kind: &str| {
        conditions
            .condition(kind)
            .filter(|c| c.status == karpenter_api::ConditionStatus::True)
            .map(|c| fields::timestamp(&c.last_transition_time))
    };
    let drifted_reason = conditions
        .condition("Drifted")
        .filter(|c| c.status == karpenter_api::ConditionStatus::True)
        .map(|c| {
            if c.reason.is_empty() {
                "Drifted".to_owned()
            } else {
                c.reason.clone()
            }
        })
        .unwrap_or_default();
    sched::NodeClaimDisruptionState {
        drifted_reason,
        drifted_time: true_since("Drifted"),
        consolidatable: conditions.is_true("Consolidatable"),
        last_pod_event_time: fields::optional_timestamp(
            claim
                .status
                .as_ref()
                .and_then(|s| s.last_pod_event_time.as_ref()),
        ),
        initialized_time: true_since("Initialized"),
        do_not_disrupt: annotations.get(labels::DO_NOT_DISRUPT).map(String::as_str) == Some("true"),
        expiration_time: match (creation, expire_after) {
            (Some(c), Some(d)) => Some(fields::plus(c, d)),
            _ => None,
        },
        node_pool_hash: annotations
            .get(labels::NODE_POOL_HASH)
            .cloned()
            .unwrap_or_default(),
        disrupting: false,
        node_not_ready: false,
        repair: None,
        nominated: false,
        instance_terminating: conditions
            .is_true(karpenter_api::nodeclaim::CONDITION_INSTANCE_TERMINATING),
        termination_grace_period: claim
            .spec
            .termination_grace_period
            .as_ref()
            .map(|d| fields::std_duration(d.as_std())),
    }
}

/// Claims whose expiry follows their pool get it from the pool's template.
pub(crate) fn apply_pool_expiries(
    snapshot: &mut sched::ClusterSnapshot,
    expiries: Vec<PoolExpiry>,
) {
    for expiry in expiries {
        let expire_after = snapshot
            .node_pools
            .iter()
            .find(|p| p.name == expiry.pool)
            .and_then(|p| p.expire_after);
        if let (Some(d), Some(disruption)) = (
            expire_after,
            snapshot.nodes[expiry.node].disruption.as_mut(),
        ) {
            disruption.expiration_time = Some(fields::plus(&expiry.created, &d));
        }
    }
}

/// Karpenter plans pods onto a node that is still starting as it will be:
/// the known ephemeral taints (not-ready, unreachable, uninitialized,
/// unregistered, `readiness.k8s.io/*`) and its claim's startup taints
/// (matched by key and effect) do not count.
fn ignored_while_starting(taint: &types::Taint, startup: &[types::Taint]) -> bool {
    use karpenter_core::taints::{Effect, is_known_ephemeral};
    let effect = match types::TaintEffect::try_from(taint.effect) {
        Ok(types::TaintEffect::NoSchedule) => Some(Effect::NoSchedule),
        Ok(types::TaintEffect::PreferNoSchedule) => Some(Effect::PreferNoSchedule),
        Ok(types::TaintEffect::NoExecute) => Some(Effect::NoExecute),
        _ => None,
    };
    effect.is_some_and(|e| is_known_ephemeral(&taint.key, e))
        || startup
            .iter()
            .any(|s| s.key == taint.key && s.effect == taint.effect)
}
