//! Multi-node consolidation: several candidates removed together, with at
//! most one cheaper replacement. Karpenter's binary search over prefixes of
//! the candidates in cost order and, beyond Karpenter, a greedy search for
//! a set that is not a prefix.

use std::collections::{BTreeMap, HashMap};

use crate::disruption::budgets::{budget_left, budget_mapping};
use crate::disruption::candidates::{Candidate, pdb_blocks};
use crate::disruption::{Command, Method};
use crate::model::Reason;

use super::{Consolidation, MAX_MULTI_NODE_CANDIDATES, NotConsolidated, Score};

impl Consolidation<'_> {
    /// Karpenter's multi-node consolidation: the longest prefix of the
    /// candidates within budget (at most [`MAX_MULTI_NODE_CANDIDATES`] + 1)
    /// whose consolidation saves money, by binary search.
    pub(super) fn multi_node(
        &self,
        consolidatable: &[&Candidate],
        blocked: &mut BTreeMap<String, String>,
        evaluated: &mut usize,
        rejected_moves: &mut BTreeMap<String, BTreeMap<String, Score>>,
    ) -> Option<Command> {
        let state = self.state;
        let mut budgets = budget_mapping(state, Reason::Underutilized);
        let mut within_budget = Vec::new();
        for candidate in consolidatable {
            let Some(budget) = budget_left(
                state,
                &mut budgets,
                candidate,
                Reason::Underutilized,
                blocked,
            ) else {
                continue;
            };
            *budget -= 1;
            within_budget.push(*candidate);
        }
        if within_budget.len() < 2 {
            return None;
        }
        let mut high = within_budget.len().min(MAX_MULTI_NODE_CANDIDATES + 1) - 1;
        let mut low = 1;
        let mut best = None;
        let mut last_rejected = None;
        while low <= high {
            let mid = (low + high) / 2;
            let batch = &within_budget[..=mid];
            *evaluated += batch.len();
            let pdbs_allow =
                pdb_blocks(state, batch.iter().map(|c| &state.nodes[c.node])).is_none();
            match self.consolidate(batch, Method::MultiNodeConsolidation) {
                Ok(command) if command.savings_per_hour > 0.0 && pdbs_allow => {
                    best = Some(command);
                    low = mid + 1;
                }
                outcome => {
                    if let Err(NotConsolidated::ScoredTooLow(scores)) = outcome {
                        let names: Vec<&str> = batch
                            .iter()
                            .map(|c| state.nodes[c.node].name.as_str())
                            .collect();
                        last_rejected = Some((names.join(","), scores));
                    }
                    if mid == 0 {
                        break;
                    }
                    high = mid - 1;
                }
            }
        }
        // As Karpenter: when no prefix went ahead and a Balanced pool
        // rejected one, the last (smallest) rejected move is counted once.
        if best.is_none()
            && let Some((names, scores)) = last_rejected
        {
            rejected_moves.insert(names, scores);
        }
        best
    }

    /// Beyond Karpenter: a set of candidates that only pays off together but
    /// is not a prefix of the cost order (a pinned or full node in front of
    /// it fails every prefix). Grow it greedily, skipping candidates that
    /// make it invalid, within the multi-node cap.
    pub(super) fn multi_node_beyond_prefix(
        &self,
        consolidatable: &[&Candidate],
        evaluated: &mut usize,
    ) -> Option<Command> {
        let state = self.state;
        let mut set: Vec<&Candidate> = Vec::new();
        let mut best: Option<Command> = None;
        let budget = budget_mapping(state, Reason::Underutilized);
        let within_budget = |trial: &[&Candidate]| {
            let mut per_pool: HashMap<usize, i64> = HashMap::new();
            for c in trial {
                *per_pool.entry(c.pool).or_default() += 1;
            }
            per_pool
                .iter()
                .all(|(pool, n)| *n <= budget.get(pool).copied().unwrap_or(0))
        };
        for candidate in consolidatable.iter().take(2 * MAX_MULTI_NODE_CANDIDATES) {
            if set.len() >= MAX_MULTI_NODE_CANDIDATES {
                break;
            }
            let mut trial = set.clone();
            trial.push(candidate);
            if !within_budget(&trial) {
                continue;
            }
            if trial.len() < 2 {
                set = trial;
                continue;
            }
            *evaluated += 1;
            if pdb_blocks(state, trial.iter().map(|c| &state.nodes[c.node])).is_some() {
                continue;
            }
            if let Ok(command) = self.consolidate(&trial, Method::MultiNodeConsolidation)
                && command.savings_per_hour > best.as_ref().map_or(0.0, |b| b.savings_per_hour)
            {
                set = trial;
                best = Some(command);
            } else if set.len() == 1 && best.is_none() {
                // The first member cannot pair with anything so far: let the
                // next candidate start the set instead.
                set = vec![*candidate];
            }
        }
        best
    }
}
