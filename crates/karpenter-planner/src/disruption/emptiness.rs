//! Emptiness: every empty, consolidatable candidate removed in one command,
//! as far as its pool's budget for `Empty` and the PDBs allow. Nothing moves,
//! so nothing is simulated. A node holding CapacityBuffer room (provisioning
//! puts virtual pods on it) is not empty.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Cluster, Reason, StateNode};

use super::budgets::{budget_left, budget_mapping};
use super::candidates::{Candidate, pdb_blocks};
use super::{Command, Method};

/// The emptiness command of a round, if any candidate is empty.
pub(super) fn command(
    state: &Cluster,
    graceful: &[Candidate],
    holding_buffers: &BTreeSet<String>,
    unconsolidatable: &mut BTreeMap<String, String>,
    blocked: &mut BTreeMap<String, String>,
    evaluated: &mut usize,
) -> Option<Command> {
    let mut budgets = budget_mapping(state, Reason::Empty);
    let mut empty = Vec::new();
    for candidate in graceful {
        if !candidate.reschedulable.is_empty() || !candidate.consolidatable {
            continue;
        }
        let name = &state.nodes[candidate.node].name;
        if holding_buffers.contains(name) {
            unconsolidatable.insert(name.clone(), format!("Node {name:?} has buffer pods"));
            continue;
        }
        let Some(budget) = budget_left(state, &mut budgets, candidate, Reason::Empty, blocked)
        else {
            continue;
        };
        let with: Vec<&StateNode> = empty
            .iter()
            .chain(std::iter::once(&candidate))
            .map(|c| &state.nodes[c.node])
            .collect();
        if let Some(reason) = pdb_blocks(state, with) {
            blocked.insert(state.nodes[candidate.node].name.clone(), reason);
            continue;
        }
        *budget -= 1;
        empty.push(candidate);
    }
    *evaluated += empty.len();
    if empty.is_empty() {
        return None;
    }
    Some(Command {
        reason: Reason::Empty,
        method: Method::Emptiness,
        candidates: empty
            .iter()
            .map(|c| state.nodes[c.node].name.clone())
            .collect(),
        replacements: Vec::new(),
        savings_per_hour: empty.iter().map(|c| c.price).sum(),
        placements: BTreeMap::new(),
        balanced_scores: BTreeMap::new(),
        repair: None,
    })
}
