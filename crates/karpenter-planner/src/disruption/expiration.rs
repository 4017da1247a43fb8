//! Expiration: a node past its pool's `expireAfter` is replaced whatever
//! its budgets, do-not-disrupt annotations and PDBs say (forceful, as in
//! Karpenter), before any graceful method runs.

use crate::model::{Cluster, Pod, Reason};
use crate::solve::{Options, Prepared};

use super::candidates::node_price;
use super::simulate::move_pods;
use super::{Command, Method};

/// One command per expired managed node, each simulated on `state` as it
/// stands (the caller applies them together).
pub(super) fn commands(state: &Cluster, scheduling: &Options) -> Vec<Command> {
    let expired: Vec<usize> = (0..state.nodes.len())
        .filter(|i| {
            let n = &state.nodes[*i];
            n.is_managed()
                && !n.marked_for_deletion
                && n.disruption
                    .expiration_seconds
                    .is_some_and(|t| t <= state.now_seconds)
        })
        .collect();
    if expired.is_empty() {
        return Vec::new();
    }
    let prepared = Prepared::new(state, scheduling);
    let mut commands = Vec::new();
    for index in expired {
        let node = &state.nodes[index];
        let moving: Vec<&Pod> = node.pods.iter().filter(|p| p.is_reschedulable()).collect();
        let moved = move_pods(&prepared, state, &[index], &moving, None);
        commands.push(Command {
            reason: Reason::Expired,
            method: Method::Expiration,
            candidates: vec![node.name.clone()],
            savings_per_hour: node_price(state, node) - moved.replacement_price(),
            replacements: moved.replacements,
            placements: moved.placements,
            balanced_scores: std::collections::BTreeMap::new(),
            repair: None,
        });
    }
    commands
}
