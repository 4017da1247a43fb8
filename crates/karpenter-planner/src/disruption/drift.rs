//! Drift: a node whose claim no longer matches its pool is replaced, with
//! as many claims as its pods need and no price check. Drift is eventual
//! disruption: a claim with a termination grace period is a candidate even
//! when its pods block eviction.

use std::collections::BTreeMap;

use crate::model::{Cluster, Reason};
use crate::solve::Prepared;

use super::budgets::{budget_left, budget_mapping};
use super::candidates::{Candidate, build_candidates};
use super::simulate::{candidate_pods, move_pods};
use super::{Command, Method};

/// The drift command of a round: empty nodes first (deleted without
/// replacement, whatever the consolidation policy), then the oldest drift
/// first; one node per command, the first whose budget allows it and whose
/// pods have somewhere to go.
pub(super) fn command(
    prepared: &Prepared<'_>,
    state: &Cluster,
    blocked: &mut BTreeMap<String, String>,
    evaluated: &mut usize,
) -> Option<Command> {
    let mut budgets = budget_mapping(state, Reason::Drifted);
    for candidate in &drifted_candidates(state, blocked) {
        if budget_left(state, &mut budgets, candidate, Reason::Drifted, blocked).is_none() {
            continue;
        }
        *evaluated += 1;
        match drift_command(prepared, state, candidate) {
            Ok(command) => return Some(command),
            Err(reason) => {
                blocked.insert(state.nodes[candidate.node].name.clone(), reason);
            }
        }
    }
    None
}

/// The drifted candidates in the order drift tries them. Why a drifted
/// node is not even an eventual candidate is recorded, unless a graceful
/// reason already is.
fn drifted_candidates(state: &Cluster, blocked: &mut BTreeMap<String, String>) -> Vec<Candidate> {
    let mut eventual_blocked = BTreeMap::new();
    let mut drifted: Vec<Candidate> = build_candidates(state, true, &mut eventual_blocked)
        .into_iter()
        .filter(|c| {
            !state.nodes[c.node].disruption.drifted_reason.is_empty()
                && !state.node_pools[c.pool].is_static()
        })
        .collect();
    for (node, reason) in eventual_blocked {
        if !state
            .nodes
            .iter()
            .any(|n| n.name == node && n.disruption.drifted_reason.is_empty())
        {
            blocked.entry(node).or_insert(reason);
        }
    }
    drifted.sort_by_key(|c| {
        let node = &state.nodes[c.node];
        (
            !c.reschedulable.is_empty(),
            node.disruption.drifted_seconds.unwrap_or(0),
            node.name.clone(),
        )
    });
    drifted
}

/// Drift replaces without a price check, with as many claims as it takes.
fn drift_command(
    prepared: &Prepared<'_>,
    cluster: &Cluster,
    candidate: &Candidate,
) -> Result<Command, String> {
    let moved = move_pods(
        prepared,
        cluster,
        &[candidate.node],
        &candidate_pods(cluster, &[candidate]),
        None,
    );
    if let Some(reason) = moved.stranded {
        return Err(reason);
    }
    Ok(Command {
        reason: Reason::Drifted,
        method: Method::Drift,
        candidates: vec![cluster.nodes[candidate.node].name.clone()],
        savings_per_hour: candidate.price - moved.replacement_price(),
        replacements: moved.replacements,
        placements: moved.placements,
        balanced_scores: BTreeMap::new(),
        repair: None,
    })
}
