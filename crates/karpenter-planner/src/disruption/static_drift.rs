//! Static drift (Karpenter's `StaticDrift`): a static pool keeps `replicas`
//! nodes, so its drifted nodes are not drained onto the rest of the cluster
//! but each replaced by a fresh claim from the pool's template.
//!
//! Per static pool, in the order candidates are tried:
//! - nothing while the pool holds more claims than `replicas` (its scale
//!   down finishes first);
//! - at most the pool's Drifted budget, and at most what `limits.nodes`
//!   leaves counting every claim of the pool (a replacement is launched
//!   before its node goes);
//! - one command per node, whose one replacement is the template as it is
//!   (no pods, no instance types chosen: the provider picks at launch).
//!
//! Static pools' nodes are never emptied or consolidated, and regular drift
//! skips them ([`is_static_node`]).

use std::collections::BTreeMap;

use crate::labels;
use crate::model::{Cluster, NODES_LIMIT, NodePool, Reason, StateNode};
use crate::resources::Resources;
use crate::solve::PlannedClaim;

use super::budgets::{budget_exhausted, budget_mapping};
use super::candidates::{Candidate, build_candidates};
use super::{Command, Method};

/// Whether `node` belongs to a static pool.
pub(super) fn is_static_node(cluster: &Cluster, node: &StateNode) -> bool {
    cluster
        .node_pools
        .iter()
        .any(|p| p.name == node.node_pool && p.is_static())
}

/// The static drift commands of a round, for every static pool at once.
pub(super) fn commands(
    state: &Cluster,
    blocked: &mut BTreeMap<String, String>,
    evaluated: &mut usize,
) -> Vec<Command> {
    let mut by_pool: BTreeMap<usize, Vec<Candidate>> = BTreeMap::new();
    let mut eventual_blocked = BTreeMap::new();
    for candidate in build_candidates(state, true, &mut eventual_blocked) {
        let node = &state.nodes[candidate.node];
        if state.node_pools[candidate.pool].is_static()
            && !node.disruption.drifted_reason.is_empty()
        {
            by_pool.entry(candidate.pool).or_default().push(candidate);
        }
    }
    for (node, reason) in eventual_blocked {
        let drifted_static = state.nodes.iter().any(|n| {
            n.name == node && !n.disruption.drifted_reason.is_empty() && is_static_node(state, n)
        });
        if drifted_static {
            blocked.entry(node).or_insert(reason);
        }
    }
    let budgets = budget_mapping(state, Reason::Drifted);
    let mut commands = Vec::new();
    for (pool_index, candidates) in by_pool {
        let pool = &state.node_pools[pool_index];
        let budget = budgets.get(&pool_index).copied().unwrap_or(0);
        let granted = match allowed(state, pool, budget, candidates.len()) {
            Ok(granted) => granted,
            Err(reason) => {
                for candidate in &candidates {
                    blocked.insert(state.nodes[candidate.node].name.clone(), reason.clone());
                }
                continue;
            }
        };
        for (i, candidate) in candidates.iter().enumerate() {
            let name = state.nodes[candidate.node].name.clone();
            if i >= granted {
                blocked.insert(name, waits(state, pool, pool_index, budget, granted));
                continue;
            }
            *evaluated += 1;
            commands.push(Command {
                reason: Reason::Drifted,
                method: Method::StaticDrift,
                candidates: vec![name],
                replacements: vec![template_claim(pool)],
                savings_per_hour: 0.0,
                placements: BTreeMap::new(),
                balanced_scores: BTreeMap::new(),
                repair: None,
            });
        }
    }
    commands
}

/// How many of a static pool's `drifted` candidates may be replaced now,
/// or why none may.
fn allowed(state: &Cluster, pool: &NodePool, budget: i64, drifted: usize) -> Result<usize, String> {
    let replicas = pool.replicas.unwrap_or(0);
    let claims: Vec<&StateNode> = state
        .nodes
        .iter()
        .filter(|n| n.node_pool == pool.name)
        .collect();
    let staying = claims.iter().filter(|n| !n.marked_for_deletion).count();
    if i64::try_from(staying).unwrap_or(i64::MAX) > replicas {
        return Err(format!(
            "static nodepool {:?} holds {staying} nodeclaims for {replicas} replicas (a scale down or a replacement is under way); drift waits",
            pool.name
        ));
    }
    let room = pool.limits.get(NODES_LIMIT).map_or(i64::MAX, |limit| {
        limit.saturating_sub(i64::try_from(claims.len()).unwrap_or(i64::MAX))
    });
    let wanted = budget.min(i64::try_from(drifted).unwrap_or(i64::MAX));
    Ok(usize::try_from(wanted.min(room).max(0)).unwrap_or(0))
}

/// Why a drifted node of a static pool waits this round.
fn waits(
    state: &Cluster,
    pool: &NodePool,
    pool_index: usize,
    budget: i64,
    granted: usize,
) -> String {
    if i64::try_from(granted).unwrap_or(i64::MAX) >= budget {
        budget_exhausted(state, pool_index, Reason::Drifted)
    } else {
        format!(
            "nodepool {:?} is at its limits.nodes: a replacement would exceed it",
            pool.name
        )
    }
}

/// The claim a static pool's template makes: its requirements, labels and
/// taints, nothing narrowed by pods.
pub(super) fn template_claim(pool: &NodePool) -> PlannedClaim {
    let mut claim_labels = pool.labels.clone();
    claim_labels.insert(labels::NODE_POOL.to_owned(), pool.name.clone());
    PlannedClaim {
        node_pool: pool.name.clone(),
        instance_types: Vec::new(),
        cheapest: None,
        requirements: pool.requirements.clone(),
        labels: claim_labels,
        taints: pool.taints.clone(),
        startup_taints: pool.startup_taints.clone(),
        pods: Vec::new(),
        requests: Resources::default(),
        min_values_relaxed: false,
    }
}
