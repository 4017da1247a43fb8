//! Disruption: which nodes to remove or replace, Karpenter's way, as one
//! pure call over a snapshot.
//!
//! ```text
//!   expired nodes ──────────────────────────────▶ Expired (forceful, no budget)
//!   candidates (managed, initialized, not blocked by do-not-disrupt / PDBs)
//!     round: Emptiness ─▶ Drift ─▶ Multi-node ─▶ Single-node   (first that acts)
//!            each command is simulated with the scheduler (its pods must fit
//!            on the rest of the cluster plus at most one cheaper replacement),
//!            checked against the pool's budgets, then applied to a working
//!            copy of the cluster; the next round starts from that copy
//!     until no method acts
//!   cost: before, after, and a lower bound (fractional bin packing)
//! ```
//!
//! Karpenter takes one command per loop and searches multi-node sets by
//! prefix. Here single-node consolidation evaluates every candidate in a
//! round and accepts every command whose simulation stays valid next to the
//! ones already accepted, so the plan reaches the state Karpenter's
//! successive loops would, and sets that are not a prefix are found too.

mod apply;
mod budgets;
mod candidates;
mod consolidation;
mod drift;
mod lower_bound;
mod simulate;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::{Cluster, Pod, PodKey, StateNode};
use crate::solve::{Options, PlannedClaim, Prepared};

use apply::apply;
use budgets::{budget_exhausted, budget_mapping};
use candidates::{Candidate, build_candidates, closed_nodes, node_price, pdb_blocks};
use consolidation::consolidate;
use drift::drift_command;
use simulate::move_pods;

// The reason lives with the model: a node pool's budgets name reasons, and
// the model must not depend on the planner that reads it.
pub use crate::model::Reason;
pub use consolidation::{MAX_MULTI_NODE_CANDIDATES, MIN_SPOT_TO_SPOT_OPTIONS};
pub use lower_bound::lower_bound;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Emptiness,
    Drift,
    Expiration,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

#[derive(Clone, Debug, Default)]
pub struct DisruptionOptions {
    /// The SpotToSpotConsolidation feature gate (off by default).
    pub spot_to_spot: bool,
}

#[derive(Clone, Debug)]
pub struct Command {
    pub reason: Reason,
    pub method: Method,
    /// Node names.
    pub candidates: Vec<String>,
    pub replacements: Vec<PlannedClaim>,
    pub savings_per_hour: f64,
    /// Existing node -> the candidates' pods the simulation moved there.
    pub placements: BTreeMap<String, Vec<PodKey>>,
}

#[derive(Clone, Debug, Default)]
pub struct DisruptionPlan {
    pub commands: Vec<Command>,
    /// Node name -> why it may not be disrupted.
    pub blocked: BTreeMap<String, String>,
    pub cost_before: f64,
    pub cost_after: f64,
    pub lower_bound: f64,
    pub candidates_evaluated: usize,
}

fn managed_cost(cluster: &Cluster) -> f64 {
    cluster
        .nodes
        .iter()
        .filter(|n| n.is_managed() && !n.marked_for_deletion)
        .map(|n| node_price(cluster, n))
        .sum()
}

/// Plans every disruption Karpenter would carry out, from this snapshot on.
pub fn plan(
    cluster: &Cluster,
    scheduling: &Options,
    options: &DisruptionOptions,
) -> DisruptionPlan {
    let mut state = cluster.clone();
    let mut plan = DisruptionPlan {
        cost_before: managed_cost(cluster),
        lower_bound: lower_bound(cluster),
        ..DisruptionPlan::default()
    };

    // Expiration is forceful: no budgets, no do-not-disrupt, no PDBs.
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
    if !expired.is_empty() {
        let prepared = Prepared::new(&state, scheduling);
        for index in expired {
            let node = &state.nodes[index];
            let moving: Vec<&Pod> = node.pods.iter().filter(|p| p.is_reschedulable()).collect();
            let moved = move_pods(&prepared, &state, &[index], &moving, None);
            plan.commands.push(Command {
                reason: Reason::Expired,
                method: Method::Expiration,
                candidates: vec![node.name.clone()],
                savings_per_hour: node_price(&state, node) - moved.replacement_price(),
                replacements: moved.replacements,
                placements: moved.placements,
            });
        }
        for command in plan.commands.clone() {
            apply(&mut state, &command);
        }
    }

    let mut blocked: BTreeMap<String, String> = BTreeMap::new();
    while !scheduling.interrupted()
        && let Some(commands) = round(
            &state,
            scheduling,
            options,
            &mut blocked,
            &mut plan.candidates_evaluated,
        )
    {
        for command in &commands {
            apply(&mut state, command);
        }
        plan.commands.extend(commands);
    }
    let disrupted: HashSet<&str> = plan
        .commands
        .iter()
        .flat_map(|c| c.candidates.iter().map(String::as_str))
        .collect();
    blocked.retain(|node, _| !disrupted.contains(node.as_str()));
    plan.blocked = blocked;
    plan.cost_after = managed_cost(&state);
    plan
}

/// One pass of Karpenter's disruption loop: the first method that acts.
fn round(
    state: &Cluster,
    scheduling: &Options,
    options: &DisruptionOptions,
    blocked: &mut BTreeMap<String, String>,
    evaluated: &mut usize,
) -> Option<Vec<Command>> {
    let graceful = build_candidates(state, false, blocked);
    if graceful.is_empty()
        && !state
            .nodes
            .iter()
            .any(|n| !n.disruption.drifted_reason.is_empty())
    {
        return None;
    }

    // Emptiness: every empty, consolidatable node in one command.
    let mut budgets = budget_mapping(state, Reason::Empty);
    let mut empty = Vec::new();
    for candidate in &graceful {
        if !candidate.reschedulable.is_empty() || !candidate.consolidatable {
            continue;
        }
        let budget = budgets.entry(candidate.pool).or_insert(0);
        if *budget == 0 {
            blocked.insert(
                state.nodes[candidate.node].name.clone(),
                budget_exhausted(state, candidate.pool, Reason::Empty),
            );
            continue;
        }
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
    if !empty.is_empty() {
        return Some(vec![Command {
            reason: Reason::Empty,
            method: Method::Emptiness,
            candidates: empty
                .iter()
                .map(|c| state.nodes[c.node].name.clone())
                .collect(),
            replacements: Vec::new(),
            savings_per_hour: empty.iter().map(|c| c.price).sum(),
            placements: BTreeMap::new(),
        }]);
    }

    let prepared = Prepared::new(state, scheduling);

    // Drift: empty nodes first (deleted without replacement, whatever the
    // consolidation policy), then the oldest drift first; one node per
    // command, no price check.
    let mut eventual_blocked = BTreeMap::new();
    let mut drifted: Vec<Candidate> = build_candidates(state, true, &mut eventual_blocked)
        .into_iter()
        .filter(|c| !state.nodes[c.node].disruption.drifted_reason.is_empty())
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
    let budgets = budget_mapping(state, Reason::Drifted);
    for candidate in &drifted {
        if budgets.get(&candidate.pool).copied().unwrap_or(0) == 0 {
            blocked.insert(
                state.nodes[candidate.node].name.clone(),
                budget_exhausted(state, candidate.pool, Reason::Drifted),
            );
            continue;
        }
        *evaluated += 1;
        match drift_command(&prepared, state, candidate) {
            Ok(command) => return Some(vec![command]),
            Err(reason) => {
                blocked.insert(state.nodes[candidate.node].name.clone(), reason);
            }
        }
    }

    // Consolidation candidates: consolidatable nodes of pools that allow it.
    let consolidatable: Vec<&Candidate> = graceful
        .iter()
        .filter(|c| {
            let pool = &state.node_pools[c.pool];
            let node = &state.nodes[c.node];
            c.consolidatable
                && !pool.consolidation_when_empty_only
                && pool.consolidate_after_seconds.is_some()
                && !c.reschedulable.is_empty()
                && !node.instance_type.is_empty()
                && !node.capacity_type.is_empty()
                && !node.zone.is_empty()
        })
        .collect();
    if consolidatable.is_empty() {
        return None;
    }

    let closed = closed_nodes(state);

    // Multi-node: Karpenter's binary search over prefixes of the cheapest
    // candidates to disrupt.
    let mut budgets = budget_mapping(state, Reason::Underutilized);
    let mut within_budget = Vec::new();
    for candidate in &consolidatable {
        let budget = budgets.entry(candidate.pool).or_insert(0);
        if *budget == 0 {
            blocked.insert(
                state.nodes[candidate.node].name.clone(),
                budget_exhausted(state, candidate.pool, Reason::Underutilized),
            );
            continue;
        }
        *budget -= 1;
        within_budget.push(*candidate);
    }
    if within_budget.len() >= 2 {
        let mut high = within_budget.len().min(MAX_MULTI_NODE_CANDIDATES + 1) - 1;
        let mut low = 1;
        let mut best = None;
        while low <= high {
            let mid = (low + high) / 2;
            let batch = &within_budget[..=mid];
            *evaluated += batch.len();
            let pdbs_allow =
                pdb_blocks(state, batch.iter().map(|c| &state.nodes[c.node])).is_none();
            match consolidate(
                &prepared,
                &closed,
                state,
                batch,
                options,
                Method::MultiNodeConsolidation,
            ) {
                Ok(command) if command.savings_per_hour > 0.0 && pdbs_allow => {
                    best = Some(command);
                    low = mid + 1;
                }
                _ => {
                    if mid == 0 {
                        break;
                    }
                    high = mid - 1;
                }
            }
        }
        if let Some(command) = best {
            return Some(vec![command]);
        }
    }

    // Single-node: every candidate evaluated; every command that stays valid
    // next to the ones taken before it is taken (Karpenter would take them
    // one loop at a time).
    let budgets = budget_mapping(state, Reason::Underutilized);
    let mut remaining_budget = budgets.clone();
    let mut taken: Vec<Command> = Vec::new();
    let mut removed: HashSet<String> = HashSet::new();
    let mut removed_nodes: Vec<usize> = Vec::new();
    let mut touched: HashSet<String> = HashSet::new();
    for candidate in &consolidatable {
        let name = &state.nodes[candidate.node].name;
        if remaining_budget.get(&candidate.pool).copied().unwrap_or(0) == 0
            || touched.contains(name)
        {
            continue;
        }
        *evaluated += 1;
        // An error means no saving, or the pods have nowhere else to go: the
        // node stays.
        if let Ok(command) = consolidate(
            &prepared,
            &closed,
            state,
            &[*candidate],
            options,
            Method::SingleNodeConsolidation,
        ) {
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
    if !taken.is_empty() {
        return Some(taken);
    }

    // Beyond Karpenter: a set of candidates that only pays off together but
    // is not a prefix of the cost order (a pinned or full node in front of
    // it fails every prefix). Grow it greedily, skipping candidates that
    // make it invalid, within the multi-node cap.
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
        if let Ok(command) = consolidate(
            &prepared,
            &closed,
            state,
            &trial,
            options,
            Method::MultiNodeConsolidation,
        ) && command.savings_per_hour > best.as_ref().map_or(0.0, |b| b.savings_per_hour)
        {
            set = trial;
            best = Some(command);
        } else if set.len() == 1 && best.is_none() {
            // The first member cannot pair with anything so far: let the
            // next candidate start the set instead.
            set = vec![*candidate];
        }
    }
    best.map(|command| vec![command])
}
