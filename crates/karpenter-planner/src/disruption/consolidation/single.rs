//! Single-node consolidation: each candidate removed or replaced on its
//! own. Karpenter takes one such command per loop; here every candidate is
//! evaluated in one round and every command that stays valid next to the
//! ones taken before it is taken, which reaches the state Karpenter's
//! successive loops would.

use std::collections::HashSet;

use crate::disruption::budgets::budget_mapping;
use crate::disruption::candidates::{Candidate, pdb_blocks};
use crate::disruption::{Command, Findings, Method};
use crate::model::Reason;

use super::{Consolidation, NotConsolidated};

impl Consolidation<'_> {
    /// The single-node commands of a round. A command stays valid when its
    /// pods move onto no node removed or filled by a command before it, the
    /// PDBs allow all removals together and its pool's budget has room.
    pub(super) fn single_node(
        &self,
        consolidatable: &[&Candidate],
        findings: &mut Findings<'_>,
    ) -> Vec<Command> {
        let state = self.state;
        let mut remaining_budget = budget_mapping(state, Reason::Underutilized);
        let mut taken: Vec<Command> = Vec::new();
        let mut removed: HashSet<String> = HashSet::new();
        let mut removed_nodes: Vec<usize> = Vec::new();
        let mut touched: HashSet<String> = HashSet::new();
        for candidate in consolidatable {
            let name = &state.nodes[candidate.node].name;
            if remaining_budget.get(&candidate.pool).copied().unwrap_or(0) == 0
                || touched.contains(name)
                || !self.balanced.can_pass(candidate)
            {
                continue;
            }
            *findings.evaluated += 1;
            // An error means no saving, or the pods have nowhere else to go:
            // the node stays, and says why; or its Balanced pool rejected
            // the move, which is counted.
            let consolidated = self.consolidate(&[*candidate], Method::SingleNodeConsolidation);
            match &consolidated {
                Err(NotConsolidated::Unconsolidatable(why)) => {
                    findings.unconsolidatable.insert(name.clone(), why.clone());
                }
                Err(NotConsolidated::ScoredTooLow(scores)) => {
                    findings.rejected_moves.insert(name.clone(), scores.clone());
                }
                Ok(_) => {}
            }
            if let Ok(command) = consolidated {
                let conflicts = command
                    .placements
                    .keys()
                    .any(|target| removed.contains(target) || touched.contains(target));
                let with = removed_nodes
                    .iter()
                    .map(|i| &state.nodes[*i])
                    .chain(std::iter::once(&state.nodes[candidate.node]));
                if conflicts || pdb_blocks(state, with).is_some() {
                    continue;
                }
                removed.insert(name.clone());
                removed_nodes.push(candidate.node);
                touched.extend(command.placements.keys().cloned());
                if let Some(budget) = remaining_budget.get_mut(&candidate.pool) {
                    *budget -= 1;
                }
                taken.push(command);
            }
        }
        taken
    }
}
