//! Which nodes may be disrupted at all, and what disrupting each costs:
//! the reasons a node cannot be a candidate (not initialized, deleting,
//! nominated, do-not-disrupt, PDBs), whether its pool's `consolidateAfter`
//! has passed, its price, and the order candidates are tried in.

use std::collections::BTreeMap;

use karpenter_core::consolidation::{self, Consolidatable};

use crate::labels;
use crate::model::{Cluster, Pod, StateNode};
use crate::solve::ClosedNodes;
use crate::taints::{Effect, Taint};

/// A node that may be disrupted, with what disrupting it costs.
#[derive(Clone, Debug)]
pub(super) struct Candidate {
    pub(super) node: usize,
    pub(super) pool: usize,
    /// Indices into the node's pods of those that must move.
    pub(super) reschedulable: Vec<usize>,
    pub(super) disruption_cost: f64,
    /// What moving its pods costs, as the Balanced policy weighs it
    /// ([`reschedule_disruption_cost`]).
    pub(super) reschedule_cost: f64,
    pub(super) price: f64,
    pub(super) consolidatable: bool,
}

/// Which annotation gives each pod's eviction cost (Karpenter v1.15):
/// `karpenter.sh/disruption-cost` when set, else
/// `controller.kubernetes.io/pod-deletion-cost`, unless Karpenter writes
/// that one itself (`manages_deletion_cost`: it would read its own ranking
/// back). Settled once per plan, into `deletion_cost`.
pub(super) fn settle_eviction_costs(cluster: &mut Cluster, manages_deletion_cost: bool) {
    for pod in cluster.nodes.iter_mut().flat_map(|n| n.pods.iter_mut()) {
        let annotated = if manages_deletion_cost {
            0
        } else {
            pod.deletion_cost
        };
        pod.deletion_cost = pod.disruption_cost.unwrap_or(annotated);
    }
}

/// Karpenter's EvictionCost: about 1 per pod, raised by its deletion cost
/// and priority, so candidates whose pods matter less go first.
fn eviction_cost(pod: &Pod) -> f64 {
    let cost = 1.0
        + f64::from(pod.deletion_cost) / 2f64.powi(27)
        + f64::from(pod.priority) / 2f64.powi(25);
    cost.clamp(-10.0, 10.0)
}

/// Draining any node costs this much before its pods are counted
/// (cordon, drain, API calls, the replacement's start).
pub(super) const NODE_BASE_DISRUPTION_COST: f64 = 1.0;

/// Karpenter's RescheduleDisruptionCost of a node: the base cost plus the
/// positive eviction costs of the pods that must move. Unlike the order of
/// candidates, it does not shrink as the node nears expiry.
pub(super) fn reschedule_disruption_cost(node: &StateNode) -> f64 {
    NODE_BASE_DISRUPTION_COST
        + node
            .pods
            .iter()
            .filter(|p| p.is_reschedulable())
            .map(|p| eviction_cost(p).max(0.0))
            .sum::<f64>()
}

fn tolerates_disrupted_taint(pod: &Pod) -> bool {
    let taint = Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_owned(),
        value: String::new(),
        effect: Effect::NoSchedule,
    };
    pod.tolerations.iter().any(|t| t.tolerates(&taint))
}

/// Pods the eviction API would be asked to evict (Karpenter's IsEvictable).
pub(super) fn is_evictable(pod: &Pod) -> bool {
    pod.is_active()
        && !tolerates_disrupted_taint(pod)
        && pod.owner_kind != "Node"
        && !pod.do_not_disrupt
}

/// The price of a node per hour: as given, or its offering's.
pub(super) fn node_price(cluster: &Cluster, node: &StateNode) -> f64 {
    if node.price > 0.0 {
        return node.price;
    }
    let Some(pool) = cluster.node_pools.iter().find(|p| p.name == node.node_pool) else {
        return 0.0;
    };
    let Some(it) = cluster
        .catalogs
        .get(pool.catalog)
        .and_then(|c| c.iter().find(|it| it.name == node.instance_type))
    else {
        return 0.0;
    };
    it.offerings
        .iter()
        .filter(|o| {
            (node.zone.is_empty() || o.zone == node.zone)
                && (node.capacity_type.is_empty() || o.capacity_type == node.capacity_type)
        })
        .map(|o| o.price)
        .min_by(f64::total_cmp)
        .unwrap_or(0.0)
}

/// What karpenter-core's consolidation rule says of `node` now: the rule
/// the adapter writes the `Consolidatable` condition from, applied here to
/// clusters no controller watched (manifests) and between its passes. A
/// node initialized at an unknown time counts from its creation.
fn consolidation_state(cluster: &Cluster, node: &StateNode) -> Consolidatable {
    let after = cluster
        .node_pools
        .iter()
        .find(|p| p.name == node.node_pool)
        .and_then(|p| p.consolidate_after);
    let initialized_at = node.initialized.then(|| {
        node.disruption
            .initialized_seconds
            .unwrap_or(node.creation_seconds)
    });
    consolidation::consolidatable(
        after,
        initialized_at,
        node.disruption.last_pod_event_seconds,
        cluster.now_seconds,
    )
}

/// The nodes a consolidation may not move pods onto: those still under
/// their pool's `consolidateAfter`.
pub(super) fn closed_nodes(cluster: &Cluster) -> ClosedNodes {
    ClosedNodes {
        closed: cluster
            .nodes
            .iter()
            .map(|n| consolidation_state(cluster, n).is_waiting())
            .collect(),
        deleting: cluster
            .nodes
            .iter()
            .filter(|n| n.marked_for_deletion)
            .map(|n| n.name.clone())
            .collect(),
    }
}

/// Whether consolidation may take `node`: the rule says so now, or it is
/// waiting and its `Consolidatable` condition (written by the adapter's
/// clock) already says so. `Never` and uninitialized nodes never are.
fn is_consolidatable(cluster: &Cluster, node: &StateNode) -> bool {
    match consolidation_state(cluster, node) {
        Consolidatable::Now => true,
        Consolidatable::No => false,
        Consolidatable::After(_) => node.disruption.consolidatable,
    }
}

/// Why a managed node cannot be a candidate at all, if it cannot.
pub(super) fn candidate_block(
    cluster: &Cluster,
    node: &StateNode,
    pool: Option<usize>,
    eventual: bool,
) -> Option<String> {
    if !node.has_node {
        return Some("nodeclaim does not have an associated node".to_owned());
    }
    if !node.initialized {
        return Some("node isn't initialized".to_owned());
    }
    if node.marked_for_deletion || node.disruption.disrupting {
        return Some("node is deleting or marked for deletion".to_owned());
    }
    if node.disruption.nominated {
        return Some("node is nominated for a pending pod".to_owned());
    }
    if node.disruption.do_not_disrupt {
        return Some(format!(
            "disruption is blocked through the {:?} annotation",
            labels::DO_NOT_DISRUPT
        ));
    }
    if pool.is_none() {
        return Some(format!("NodePool {:?} not found", node.node_pool));
    }
    // A termination grace period lets drift proceed past pods that block
    // eviction: they are removed when the period ends.
    let ignore_pod_blocks = eventual && node.disruption.termination_grace_period.is_some();
    if ignore_pod_blocks {
        return None;
    }
    pod_blocks(cluster, node)
}

/// Why `node`'s pods may not be evicted now: a do-not-disrupt pod, or a PDB.
pub(super) fn pod_blocks(cluster: &Cluster, node: &StateNode) -> Option<String> {
    for pod in &node.pods {
        if pod.is_active() && pod.do_not_disrupt {
            return Some(format!(
                "pod {:?} has {:?} annotation",
                pod.key.to_string(),
                labels::DO_NOT_DISRUPT
            ));
        }
    }
    pdb_blocks(cluster, [node])
}

/// Why the evictable pods of `nodes` cannot be evicted, as Karpenter judges
/// a candidate: a pod whose PDB allows no disruption now (an unhealthy pod
/// under `AlwaysAllow` excepted), or a pod under more than one PDB (the
/// eviction API refuses it). A PDB that allows some disruptions does not
/// block, however many of its pods the nodes hold: the drain evicts them as
/// the budget lets it, backing off on the API server's 429s.
pub(super) fn pdb_blocks<'a>(
    cluster: &Cluster,
    nodes: impl IntoIterator<Item = &'a StateNode>,
) -> Option<String> {
    for node in nodes {
        for pod in node.pods.iter().filter(|p| is_evictable(p)) {
            let matching: Vec<usize> = (0..cluster.pdbs.len())
                .filter(|i| cluster.pdbs[*i].selects(pod))
                .collect();
            if matching.len() > 1 {
                let names: Vec<String> = matching
                    .iter()
                    .map(|i| cluster.pdbs[*i].key.to_string())
                    .collect();
                return Some(format!(
                    "pod {:?} is selected by more than one PDB ({}); eviction does not support multiple PDBs",
                    pod.key.to_string(),
                    names.join(", ")
                ));
            }
            if let Some(&index) = matching.first() {
                let pdb = &cluster.pdbs[index];
                if !pdb.lets_unhealthy_go(pod) && pdb.disruptions_allowed <= 0 {
                    return Some(format!(
                        "pdb {:?} prevents pod evictions",
                        pdb.key.to_string()
                    ));
                }
            }
        }
    }
    None
}

/// `cluster.nodes[index]` of `cluster.node_pools[pool]` as a candidate.
pub(super) fn candidate_of(cluster: &Cluster, index: usize, pool: usize) -> Candidate {
    let node = &cluster.nodes[index];
    let lifetime = match cluster.node_pools[pool].expire_after {
        Some(total) if !total.is_zero() => {
            let total = total.as_secs_f64();
            let age = cluster.now_seconds.saturating_sub(node.creation_seconds) as f64;
            ((total - age) / total).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    let cost: f64 = node.pods.iter().map(eviction_cost).sum::<f64>() * lifetime;
    Candidate {
        node: index,
        pool,
        reschedulable: node
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_reschedulable())
            .map(|(i, _)| i)
            .collect(),
        disruption_cost: cost,
        reschedule_cost: reschedule_disruption_cost(node),
        price: node_price(cluster, node),
        consolidatable: is_consolidatable(cluster, node),
    }
}

/// The candidates of a round, cheapest to disrupt first (ties: by name);
/// `eventual` judges them as drift does. Why a managed node is not a
/// candidate goes to `blocked`, unless a reason is there already.
pub(super) fn build_candidates(
    cluster: &Cluster,
    eventual: bool,
    blocked: &mut BTreeMap<String, String>,
) -> Vec<Candidate> {
    let mut candidates = Vec::new();
    let mut order: Vec<usize> = (0..cluster.nodes.len()).collect();
    order.sort_by(|a, b| cluster.nodes[*a].name.cmp(&cluster.nodes[*b].name));
    for index in order {
        let node = &cluster.nodes[index];
        if !node.is_managed() || node.planned {
            continue;
        }
        let pool = cluster
            .node_pools
            .iter()
            .position(|p| p.name == node.node_pool);
        if let Some(reason) = candidate_block(cluster, node, pool, eventual) {
            blocked.entry(node.name.clone()).or_insert(reason);
            continue;
        }
        let Some(pool) = pool else {
            continue;
        };
        candidates.push(candidate_of(cluster, index, pool));
    }
    candidates.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| cluster.nodes[a.node].name.cmp(&cluster.nodes[b.node].name))
    });
    candidates
}
