//! Karpenter v1.15's PodDeletionCostManagement: the
//! `controller.kubernetes.io/pod-deletion-cost` each managed node's
//! ReplicaSet pods should carry, so that when a Deployment scales in, the
//! ReplicaSet controller deletes pods from the nodes disruption would take
//! first, and those nodes empty.
//!
//! ```text
//!   A  being removed (marked for deletion, or tainted disrupted)   i32::MIN
//!   B  drifted (not of a static pool), within its Drifted budget  ┐ -n .. -1,
//!   C  the rest, within its pool's Underutilized budget           ┘ B before C
//!   D  not disruptable: not a candidate (not initialized, nominated,
//!      do-not-disrupt, PDB, ...), a pod outside kube-system not run by a
//!      ReplicaSet/Job/DaemonSet, no price, consolidateAfter Never, or over
//!      budget                                                     cleared
//! ```
//!
//! B and C follow consolidation's own candidate order: the highest price
//! per unit of disruption first (ties by name). Only the ranking is decided
//! here; the adapter writes it.

use crate::model::{Cluster, Reason, StateNode};

use super::budgets::budget_mapping;
use super::candidates::{candidate_block, node_price, reschedule_disruption_cost};

/// The pod-deletion-cost of one node's pods; `None`: cleared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDeletionCost {
    pub node: String,
    pub cost: Option<i32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    Removing,
    Drifted,
    Consolidatable,
    Kept,
}

/// Owners whose pods a scale-in or a rerun replaces: a node hosting others
/// (outside kube-system) is pinned.
const REPLACEABLE_OWNERS: [&str; 3] = ["ReplicaSet", "Job", "DaemonSet"];

fn group(cluster: &Cluster, node: &StateNode) -> Group {
    if node.marked_for_deletion || node.disruption.disrupting {
        return Group::Removing;
    }
    let pool = cluster
        .node_pools
        .iter()
        .position(|p| p.name == node.node_pool);
    let pinned = node.pods.iter().any(|p| {
        p.key.namespace != "kube-system" && !REPLACEABLE_OWNERS.contains(&p.owner_kind.as_str())
    });
    if candidate_block(cluster, node, pool, false).is_some()
        || pinned
        || node_price(cluster, node) <= 0.0
    {
        return Group::Kept;
    }
    let Some(pool) = pool.map(|p| &cluster.node_pools[p]) else {
        return Group::Kept;
    };
    if !node.disruption.drifted_reason.is_empty() && !pool.is_static() {
        Group::Drifted
    } else if pool.consolidate_after.is_none() {
        Group::Kept
    } else {
        Group::Consolidatable
    }
}

/// Every managed node's cost: the removed first, then the ranked, then the
/// cleared.
pub fn ranking(cluster: &Cluster) -> Vec<NodeDeletionCost> {
    // A node whose pool is not in the request (not ready, or its catalog
    // could not be read) is left as it is: neither ranked nor cleared.
    let mut nodes: Vec<(&StateNode, Group, f64)> = cluster
        .nodes
        .iter()
        .filter(|n| n.is_managed() && !n.planned)
        .filter(|n| cluster.node_pools.iter().any(|p| p.name == n.node_pool))
        .map(|n| {
            let ratio = node_price(cluster, n) / reschedule_disruption_cost(n);
            (n, group(cluster, n), ratio)
        })
        .collect();
    nodes.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.name.cmp(&b.0.name)));
    let mut drift_budget = budget_mapping(cluster, Reason::Drifted);
    let mut consolidation_budget = budget_mapping(cluster, Reason::Underutilized);
    for (node, group, _) in &mut nodes {
        let budgets = match group {
            Group::Drifted => &mut drift_budget,
            Group::Consolidatable => &mut consolidation_budget,
            _ => continue,
        };
        let pool = cluster
            .node_pools
            .iter()
            .position(|p| p.name == node.node_pool);
        match pool.and_then(|p| budgets.get_mut(&p)) {
            Some(left) if *left > 0 => *left -= 1,
            _ => *group = Group::Kept,
        }
    }
    let of = |wanted: Group| nodes.iter().filter(move |(_, g, _)| *g == wanted);
    let ranked: Vec<&StateNode> = of(Group::Drifted)
        .chain(of(Group::Consolidatable))
        .map(|(n, _, _)| *n)
        .collect();
    let count = i32::try_from(ranked.len()).unwrap_or(i32::MAX);
    let mut out: Vec<NodeDeletionCost> = of(Group::Removing)
        .map(|(n, _, _)| NodeDeletionCost {
            node: n.name.clone(),
            cost: Some(i32::MIN),
        })
        .collect();
    out.extend(ranked.iter().zip(0..).map(|(n, i)| NodeDeletionCost {
        node: n.name.clone(),
        cost: Some(i - count),
    }));
    out.extend(of(Group::Kept).map(|(n, _, _)| NodeDeletionCost {
        node: n.name.clone(),
        cost: None,
    }));
    out
}
