//! Disruption budgets: how many more nodes of each pool may be disrupted
//! for a reason now, counting the nodes already being disrupted.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Cluster, Reason, StateNode};

use super::candidates::Candidate;

/// Whether a budget applies now: it has no schedule, or its schedule fired
/// within the last `duration`.
fn budget_active(budget: &crate::model::Budget, now: i64) -> bool {
    budget
        .window
        .as_ref()
        .is_none_or(|(cron, duration)| cron.fired_within(now.saturating_sub(*duration), now))
}

/// A pool's budget for a reason now: the nodes its budgets allow to be
/// disrupting at once, and those that already are (Karpenter's
/// `allowed_disruptions` and `nodes_consuming_budgets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolBudget {
    pub node_pool: String,
    pub reason: Reason,
    pub allowed: i64,
    pub disrupting: i64,
}

/// Every pool's budget for each reason disruption acts for, on the cluster
/// as given.
pub fn pool_budgets(cluster: &Cluster) -> Vec<PoolBudget> {
    let reasons = [
        Reason::Empty,
        Reason::Underutilized,
        Reason::Drifted,
        Reason::Unhealthy,
    ];
    let mut out = Vec::new();
    for reason in reasons {
        for (pool_index, (allowed, disrupting)) in budgets(cluster, reason) {
            out.push(PoolBudget {
                node_pool: cluster.node_pools[pool_index].name.clone(),
                reason,
                // No budget applying allows every node; reported as
                // Karpenter reports it (math.MaxInt32).
                allowed: allowed.min(i64::from(i32::MAX)),
                disrupting,
            });
        }
    }
    out
}

/// How many more nodes of each pool may be disrupted for `reason` now.
pub(super) fn budget_mapping(cluster: &Cluster, reason: Reason) -> HashMap<usize, i64> {
    budgets(cluster, reason)
        .into_iter()
        .map(|(pool, (allowed, disrupting))| (pool, allowed.saturating_sub(disrupting).max(0)))
        .collect()
}

/// Each pool's allowed disruptions for `reason` and its nodes disrupting
/// now, by pool index.
fn budgets(cluster: &Cluster, reason: Reason) -> Vec<(usize, (i64, i64))> {
    let mut mapping = Vec::new();
    for (pool_index, pool) in cluster.node_pools.iter().enumerate() {
        // Only initialized nodes count (a node still starting would round a
        // percentage up against the nodes already serving), and not those
        // whose instance is already being deleted.
        let nodes: Vec<&StateNode> = cluster
            .nodes
            .iter()
            .filter(|n| {
                n.node_pool == pool.name && n.initialized && !n.disruption.instance_terminating
            })
            .collect();
        let total = nodes.len() as i64;
        let disrupting = nodes
            .iter()
            .filter(|n| {
                // Repair's own budget does not count the nodes it exists to
                // repair (upstream v1.15): a NotReady node would otherwise
                // use up the budget that lets it be replaced.
                n.marked_for_deletion
                    || n.disruption.disrupting
                    || (n.disruption.node_not_ready && reason != Reason::Unhealthy)
            })
            .count() as i64;
        let mut allowed = i64::MAX;
        for budget in &pool.budgets {
            let applies = budget.reasons.is_empty() || budget.reasons.contains(&reason);
            if !applies || !budget_active(budget, cluster.now_seconds) {
                continue;
            }
            let value = match budget.nodes.strip_suffix('%') {
                Some(percent) => {
                    let percent: i64 = percent.parse().unwrap_or(0);
                    (percent * total + 99) / 100
                }
                None => budget.nodes.parse().unwrap_or(0),
            };
            allowed = allowed.min(value);
        }
        mapping.push((pool_index, (allowed, disrupting)));
    }
    mapping
}

/// The budget left for `reason` in `candidate`'s pool (`budgets` from [`budget_mapping`]), for
/// the caller to spend; `None`, with why recorded in `blocked`, when it is used up.
pub(super) fn budget_left<'b>(
    cluster: &Cluster,
    budgets: &'b mut HashMap<usize, i64>,
    candidate: &Candidate,
    reason: Reason,
    blocked: &mut BTreeMap<String, String>,
) -> Option<&'b mut i64> {
    let budget = budgets.entry(candidate.pool).or_insert(0);
    if *budget == 0 {
        blocked.insert(
            cluster.nodes[candidate.node].name.clone(),
            budget_exhausted(cluster, candidate.pool, reason),
        );
        return None;
    }
    Some(budget)
}

/// Why a candidate waits: its pool's budget for `reason` is used up.
pub(super) fn budget_exhausted(cluster: &Cluster, pool: usize, reason: Reason) -> String {
    format!(
        "disruption budget of nodepool {:?} allows no more {} disruptions",
        cluster.node_pools[pool].name,
        reason.as_str()
    )
}
