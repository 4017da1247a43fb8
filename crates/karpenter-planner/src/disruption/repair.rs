//! Node repair as a voluntary disruption (Karpenter v1.15): a node whose
//! conditions match one of the provider's repair policies past its
//! toleration is replaced (or rebooted) ahead of drift and consolidation,
//! one node a round, paced by its pool's `Unhealthy` budget.
//!
//! ```text
//!   eligible unhealthy nodes, highest score first (ties: cheaper to disrupt, name)
//!     do-not-repair, or no pool (a standalone claim) ─▶ not a candidate
//!     more than 20% of its pool unhealthy ──────────▶ repair blocked (the breaker)
//!     pool's Unhealthy budget used up (initialized nodes only) ─▶ waits
//!     reboot policy ───────────────────────────────▶ reboot in place
//!     pods no eviction may take, no drain bound ────▶ blocked
//!     static pool ─▶ its template, one for one (not while scaling down,
//!                    not past limits.nodes; else blocked)
//!     else: its pods (blocked ones too) simulated onto the rest plus
//!           replacements (else blocked); an empty node is deleted without one
//! ```
//!
//! As Karpenter's, only the breaker is reported as `repair_blocked`
//! (`NodeRepairBlocked`, a correlated failure an alert should hear of);
//! the rest is `blocked` (`DisruptionBlocked`), and an operator's veto is
//! silent.
//!
//! The node-level do-not-disrupt annotation does not hold repair back, and
//! pods that block eviction are drained until the drain bound (the policy's
//! terminationGracePeriod, or the claim's), which the adapter stamps as the
//! claim's termination deadline when it deletes it.

use std::collections::BTreeMap;

use karpenter_core::repair::{breaker_message, breaker_tripped};

use crate::model::{Cluster, NODES_LIMIT, Reason, StateNode};
use crate::solve::Prepared;

use super::budgets::{budget_exhausted, budget_mapping};
use super::candidates::{Candidate, candidate_of, pod_blocks};
use super::simulate::move_pods;
use super::static_drift::template_claim;
use super::{Command, Method, RepairCommand};

/// The repair command of a round, if a node is due and allowed.
pub(super) fn command<'c>(
    prepared: &mut Option<Prepared<'c>>,
    state: &'c Cluster,
    scheduling: &'c crate::solve::Options,
    repair_blocked: &mut BTreeMap<String, String>,
    blocked: &mut BTreeMap<String, String>,
    evaluated: &mut usize,
) -> Option<Command> {
    let due = due(state);
    if due.is_empty() {
        return None;
    }
    let budgets = budget_mapping(state, Reason::Unhealthy);
    for candidate in due {
        let node = &state.nodes[candidate.node];
        let pool = &state.node_pools[candidate.pool];
        let (unhealthy, total) = pool_health(state, &pool.name);
        if breaker_tripped(unhealthy, total) {
            let scope = format!("nodepool {:?}", pool.name);
            repair_blocked.insert(node.name.clone(), breaker_message(&scope));
            continue;
        }
        // A node that never initialized does not count toward the budget's
        // total, so it does not spend from it either.
        if node.initialized && budgets.get(&candidate.pool).copied().unwrap_or(0) <= 0 {
            blocked.insert(
                node.name.clone(),
                budget_exhausted(state, candidate.pool, Reason::Unhealthy),
            );
            continue;
        }
        *evaluated += 1;
        let prepared = prepared.get_or_insert_with(|| Prepared::new(state, scheduling));
        match repair_command(prepared, state, &candidate) {
            Ok(command) => return Some(command),
            Err(Some(reason)) => {
                blocked.insert(node.name.clone(), reason);
            }
            // Waits without a word (a static pool scaling down), as Karpenter's.
            Err(None) => {}
        }
    }
    None
}

/// The nodes due for repair, in the order repair takes them. As
/// Karpenter's, a node the operator vetoed with `karpenter.sh/do-not-repair`
/// or one without its pool is not a candidate, and nothing is said of it.
fn due(state: &Cluster) -> Vec<Candidate> {
    let mut due = Vec::new();
    for (index, node) in state.nodes.iter().enumerate() {
        let Some(repair) = node.disruption.repair.as_ref().filter(|r| r.eligible) else {
            continue;
        };
        if !node.has_node || node.planned || node.marked_for_deletion || node.disruption.disrupting
        {
            continue;
        }
        if repair.do_not_repair {
            continue;
        }
        let Some(pool) = state
            .node_pools
            .iter()
            .position(|p| p.name == node.node_pool && !node.node_pool.is_empty())
        else {
            continue;
        };
        due.push(candidate_of(state, index, pool));
    }
    let score = |c: &Candidate| {
        state.nodes[c.node]
            .disruption
            .repair
            .as_ref()
            .map_or(f64::MIN, |r| r.score)
    };
    due.sort_by(|a, b| {
        score(b)
            .total_cmp(&score(a))
            .then(a.disruption_cost.total_cmp(&b.disruption_cost))
            .then_with(|| state.nodes[a.node].name.cmp(&state.nodes[b.node].name))
    });
    due
}

/// A pool's unhealthy nodes (any matching condition, eligible or not) and
/// all its nodes.
fn pool_health(state: &Cluster, pool: &str) -> (usize, usize) {
    let nodes: Vec<&StateNode> = state
        .nodes
        .iter()
        .filter(|n| n.has_node && !n.planned && n.node_pool == pool)
        .collect();
    let unhealthy = nodes
        .iter()
        .filter(|n| n.disruption.repair.is_some())
        .count();
    (unhealthy, nodes.len())
}

/// How `candidate` is repaired, or why it cannot be now (`None`: it waits
/// and nothing is said).
fn repair_command(
    prepared: &Prepared<'_>,
    state: &Cluster,
    candidate: &Candidate,
) -> Result<Command, Option<String>> {
    let node = &state.nodes[candidate.node];
    let pool = &state.node_pools[candidate.pool];
    let Some(repair) = node.disruption.repair.as_ref() else {
        return Err(None);
    };
    let mut command = Command {
        reason: Reason::Unhealthy,
        method: Method::Repair,
        candidates: vec![node.name.clone()],
        replacements: Vec::new(),
        savings_per_hour: 0.0,
        placements: BTreeMap::new(),
        balanced_scores: BTreeMap::new(),
        repair: Some(RepairCommand {
            condition: repair.condition_name(),
            reboot: repair.reboot,
            termination_grace_period: repair.termination_grace_period,
        }),
    };
    let drain_bound = repair
        .termination_grace_period
        .or(node.disruption.termination_grace_period);
    if drain_bound.is_none() && pod_blocks(state, node).is_some() {
        let why = "repair requires a termination grace period to bypass blocking pods";
        return Err(Some(why.into()));
    }
    if repair.reboot {
        return Ok(command);
    }
    if pool.is_static() {
        static_room(state, pool)?;
        command.replacements = vec![template_claim(pool)];
        return Ok(command);
    }
    let moving: Vec<_> = candidate
        .reschedulable
        .iter()
        .map(|i| &node.pods[*i])
        .collect();
    if moving.is_empty() {
        command.savings_per_hour = candidate.price;
        return Ok(command);
    }
    let moved = move_pods(prepared, state, &[candidate.node], &moving, None);
    if let Some(reason) = moved.stranded {
        return Err(Some(reason));
    }
    command.savings_per_hour = candidate.price - moved.replacement_price();
    command.replacements = moved.replacements;
    command.placements = moved.placements;
    Ok(command)
}

/// Whether a static pool may stage a replacement now: not while it holds
/// more claims than `replicas` (a scale down is under way: it waits without
/// a word, as Karpenter's), nor past `limits.nodes`.
fn static_room(state: &Cluster, pool: &crate::model::NodePool) -> Result<(), Option<String>> {
    let claims = state.nodes.iter().filter(|n| n.node_pool == pool.name);
    let staying = claims.clone().filter(|n| !n.marked_for_deletion).count();
    let replicas = pool.replicas.unwrap_or(0);
    if i64::try_from(staying).unwrap_or(i64::MAX) > replicas {
        return Err(None);
    }
    let count = i64::try_from(claims.count()).unwrap_or(i64::MAX);
    if pool
        .limits
        .get(NODES_LIMIT)
        .is_some_and(|limit| count >= *limit)
    {
        let why = "static NodePool is at its node limit and cannot stage a replacement";
        return Err(Some(why.into()));
    }
    Ok(())
}
