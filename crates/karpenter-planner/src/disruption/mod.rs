//! Disruption: which nodes to remove or replace, Karpenter's way, as one
//! pure call over a snapshot.
//!
//! ```text
//!   expired nodes ──────────────────────────────▶ Expired (forceful, no budget)
//!   candidates (managed, initialized, not blocked by do-not-disrupt / PDBs)
//!     round: Repair ─▶ Emptiness ─▶ Static drift ─▶ Drift ─▶ Multi-node ─▶ Single-node
//!            (the first that acts)
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
//!
//! This module holds the entry, [`plan`], its types and the round driver.
//! Each method, and what the methods share, has a file of its own, as in
//! Karpenter's `pkg/controllers/disruption`:
//!
//! ```text
//!   candidates      who may be disrupted at all, and what disrupting each costs
//!   budgets         how many more of a pool's nodes may go now, per reason
//!   simulate        where a command's pods would go (a scheduling run without its nodes)
//!   expiration      expired nodes: forceful, first, all at once
//!   repair          unhealthy nodes (NodeRepair), one a round, Unhealthy budget, 20% breaker
//!   emptiness       empty nodes, in one command
//!   static_drift    a static pool's drifted nodes, each replaced by its template
//!   drift           one drifted node per command, no price check
//!   consolidation   computeConsolidation and the price rules of a replacement
//!     multi           prefixes by binary search; beyond Karpenter, sets that are not prefixes
//!     single          every candidate; every command that stays valid
//!   apply           a command carried out on the plan's working copy
//!   lower_bound     the cost no plan can beat
//!   deletion_cost   the pod-deletion-cost ranking (gate PodDeletionCostManagement)
//! ```

mod apply;
mod budgets;
pub use budgets::PoolBudget;
mod candidates;
mod consolidation;
pub mod deletion_cost;

pub use consolidation::{BALANCED_K, Score as BalancedScore};
mod drift;
mod emptiness;
mod expiration;
mod lower_bound;
mod repair;
mod simulate;
mod static_drift;

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::model::{Cluster, PodKey};
use crate::solve::{Options, PlannedClaim, Prepared};

use apply::apply;
use candidates::{build_candidates, node_price};

// The reason lives with the model: a node pool's budgets name reasons, and
// the model must not depend on the planner that reads it.
pub use crate::model::Reason;
pub use consolidation::{MAX_MULTI_NODE_CANDIDATES, MIN_SPOT_TO_SPOT_OPTIONS};
pub use lower_bound::lower_bound;

/// How a command was found: Karpenter's disruption methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Emptiness,
    Drift,
    /// A static pool's drifted node, replaced by the pool's template.
    StaticDrift,
    Expiration,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
    /// Node repair: an unhealthy node replaced (or rebooted).
    Repair,
}

#[derive(Clone, Debug, Default)]
pub struct DisruptionOptions {
    /// The SpotToSpotConsolidation feature gate (off by default).
    pub spot_to_spot: bool,
    /// The PodDeletionCostManagement feature gate: the plan ranks nodes
    /// for `controller.kubernetes.io/pod-deletion-cost`, and that
    /// annotation is no longer read as an eviction cost.
    pub manages_deletion_cost: bool,
}

/// One disruption: the candidates removed together, and the claims that
/// replace them.
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
    /// Pool name -> the Balanced score that approved the command (empty
    /// when no candidate's pool is Balanced).
    pub balanced_scores: BTreeMap<String, consolidation::Score>,
    /// Repair commands only: how the node is repaired.
    pub repair: Option<RepairCommand>,
}

/// How a repair command repairs its node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairCommand {
    /// The condition repaired: `Type`, or `Type/Reason` for a policy that
    /// names a reason.
    pub condition: String,
    /// Reboot in place (no replacements).
    pub reboot: bool,
    /// The drain bound the claim's termination deadline is stamped with when
    /// it is deleted; `None`: its own terminationGracePeriod.
    pub termination_grace_period: Option<std::time::Duration>,
}

/// Every command, in the order they are carried out, why the candidates
/// left alone stay, and what the managed nodes cost before and after.
#[derive(Clone, Debug, Default)]
pub struct DisruptionPlan {
    pub commands: Vec<Command>,
    /// Node name -> why it may not be disrupted.
    pub blocked: BTreeMap<String, String>,
    /// Node name -> why consolidation could not take it on its own
    /// (Karpenter's `Unconsolidatable` reasons), for nodes no command took.
    pub unconsolidatable: BTreeMap<String, String>,
    /// Node name -> the scores with which its Balanced pool rejected
    /// removing or replacing it on its own (the latest round's), for nodes
    /// no command took; a multi-node move no prefix of which went ahead,
    /// by its nodes' names comma-separated. Upstream counts such moves as
    /// `rejected`.
    pub rejected_moves: BTreeMap<String, BTreeMap<String, BalancedScore>>,
    /// Node name -> why repair leaves the unhealthy node alone (Karpenter's
    /// `NodeRepairBlocked`), for nodes no command took.
    pub repair_blocked: BTreeMap<String, String>,
    pub cost_before: f64,
    /// `cost_before` by node pool.
    pub pool_costs: BTreeMap<String, f64>,
    pub cost_after: f64,
    pub lower_bound: f64,
    pub candidates_evaluated: usize,
    /// With `manages_deletion_cost`: the pod-deletion-cost of each managed
    /// node's pods, ranked on the cluster as given.
    pub deletion_costs: Vec<deletion_cost::NodeDeletionCost>,
    /// Every pool's budget for each reason, on the cluster as given.
    pub budgets: Vec<PoolBudget>,
}

/// Plans every disruption Karpenter would carry out, from this snapshot on.
pub fn plan(
    cluster: &Cluster,
    scheduling: &Options,
    options: &DisruptionOptions,
) -> DisruptionPlan {
    let mut state = cluster.clone();
    candidates::settle_eviction_costs(&mut state, options.manages_deletion_cost);
    let mut plan = DisruptionPlan {
        cost_before: managed_cost(cluster),
        pool_costs: pool_costs(cluster),
        lower_bound: lower_bound(cluster),
        budgets: budgets::pool_budgets(cluster),
        deletion_costs: if options.manages_deletion_cost {
            deletion_cost::ranking(&state)
        } else {
            Vec::new()
        },
        ..DisruptionPlan::default()
    };

    // Expired nodes go first and all at once: expiration is forceful.
    let expired = expiration::commands(&state, scheduling);
    for command in &expired {
        apply(&mut state, command);
    }
    plan.commands.extend(expired);

    let mut blocked: BTreeMap<String, String> = BTreeMap::new();
    let mut unconsolidatable: BTreeMap<String, String> = BTreeMap::new();
    let mut rejected_moves = BTreeMap::new();
    let mut repair_blocked = BTreeMap::new();
    while !scheduling.interrupted()
        && let Some(commands) = round(
            &state,
            scheduling,
            options,
            &mut Findings {
                blocked: &mut blocked,
                unconsolidatable: &mut unconsolidatable,
                evaluated: &mut plan.candidates_evaluated,
                rejected_moves: &mut rejected_moves,
                repair_blocked: &mut repair_blocked,
            },
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
    unconsolidatable.retain(|node, _| !disrupted.contains(node.as_str()));
    rejected_moves.retain(|node, _| !disrupted.contains(node.as_str()));
    repair_blocked.retain(|node, _| !disrupted.contains(node.as_str()));
    plan.repair_blocked = repair_blocked;
    plan.blocked = blocked;
    plan.unconsolidatable = unconsolidatable;
    plan.rejected_moves = rejected_moves;
    plan.cost_after = managed_cost(&state);
    plan
}

/// What the rounds of a plan learn besides their commands.
pub(super) struct Findings<'a> {
    /// Why nodes are not candidates at all.
    pub(super) blocked: &'a mut BTreeMap<String, String>,
    /// Why candidates could not be consolidated on their own.
    pub(super) unconsolidatable: &'a mut BTreeMap<String, String>,
    /// How many candidates were weighed.
    pub(super) evaluated: &'a mut usize,
    /// Single-node moves a Balanced pool rejected, by candidate.
    pub(super) rejected_moves: &'a mut BTreeMap<String, BTreeMap<String, BalancedScore>>,
    /// Why unhealthy nodes are not repaired.
    pub(super) repair_blocked: &'a mut BTreeMap<String, String>,
}

/// One pass of Karpenter's disruption loop: the first method that acts.
fn round(
    state: &Cluster,
    scheduling: &Options,
    options: &DisruptionOptions,
    findings: &mut Findings<'_>,
) -> Option<Vec<Command>> {
    let blocked = &mut *findings.blocked;
    let evaluated = &mut *findings.evaluated;
    let mut prepared = None;
    // Repair goes first, whatever else could be done (upstream v1.15).
    if state.nodes.iter().any(|n| n.disruption.repair.is_some())
        && let Some(command) = repair::command(
            &mut prepared,
            state,
            scheduling,
            findings.repair_blocked,
            blocked,
            evaluated,
        )
    {
        return Some(vec![command]);
    }
    // Static pools' nodes are only ever replaced by static drift.
    let graceful: Vec<_> = build_candidates(state, false, blocked)
        .into_iter()
        .filter(|c| !state.node_pools[c.pool].is_static())
        .collect();
    if graceful.is_empty()
        && !state
            .nodes
            .iter()
            .any(|n| !n.disruption.drifted_reason.is_empty())
    {
        return None;
    }
    // Emptiness needs no simulation unless CapacityBuffers hold room:
    // then a node provisioning puts virtual pods on is not empty.
    let holding = if state.pending.iter().any(|p| p.buffer) {
        buffer_hosts(prepared.insert(Prepared::new(state, scheduling)), state)
    } else {
        BTreeSet::new()
    };
    let empty = emptiness::command(
        state,
        &graceful,
        &holding,
        findings.unconsolidatable,
        blocked,
        evaluated,
    );
    if let Some(command) = empty {
        return Some(vec![command]);
    }
    if state.node_pools.iter().any(|p| p.is_static()) {
        let static_drift = static_drift::commands(state, blocked, evaluated);
        if !static_drift.is_empty() {
            return Some(static_drift);
        }
    }
    let prepared = prepared.unwrap_or_else(|| Prepared::new(state, scheduling));
    if let Some(command) = drift::command(&prepared, state, blocked, evaluated) {
        return Some(vec![command]);
    }
    consolidation::commands(&prepared, state, &graceful, options, findings)
}

/// The nodes provisioning would put CapacityBuffer virtual pods on (with
/// every pending pod scheduled as provisioning schedules them).
fn buffer_hosts(prepared: &Prepared<'_>, state: &Cluster) -> BTreeSet<String> {
    let virtual_pods: HashSet<&PodKey> = state
        .pending
        .iter()
        .filter(|p| p.buffer)
        .map(|p| &p.key)
        .collect();
    let solution = prepared.run(&[], state.pending.iter());
    solution
        .existing
        .into_iter()
        .filter(|(_, pods)| pods.iter().any(|p| virtual_pods.contains(p)))
        .map(|(node, _)| node)
        .collect()
}

/// What the managed nodes not being deleted cost per hour.
fn managed_cost(cluster: &Cluster) -> f64 {
    pool_costs(cluster).values().sum()
}

/// What each pool's managed nodes cost per hour.
fn pool_costs(cluster: &Cluster) -> BTreeMap<String, f64> {
    let mut costs = BTreeMap::new();
    for node in cluster
        .nodes
        .iter()
        .filter(|n| n.is_managed() && !n.marked_for_deletion)
    {
        *costs.entry(node.node_pool.clone()).or_insert(0.0) += node_price(cluster, node);
    }
    costs
}
