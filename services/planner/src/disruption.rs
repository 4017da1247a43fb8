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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::labels;
use crate::model::{Cluster, InstanceType, OfferingFilter, Pod, PodKey, StateNode};
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::solve::{Cheapest, ClosedNodes, Options, PlannedClaim, Prepared};
use crate::taints::{Effect, Taint};

/// Karpenter caps a multi-node command at this many candidates.
pub const MAX_MULTI_NODE_CANDIDATES: usize = 100;
/// Spot-to-spot consolidation needs at least this many cheaper options.
pub const MIN_SPOT_TO_SPOT_OPTIONS: usize = 15;

// The reason lives with the model: a node pool's budgets name reasons, and
// the model must not depend on the planner that reads it.
pub use crate::model::Reason;

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

/// A node that may be disrupted, with what disrupting it costs.
#[derive(Clone, Debug)]
struct Candidate {
    node: usize,
    pool: usize,
    /// Indices into the node's pods of those that must move.
    reschedulable: Vec<usize>,
    disruption_cost: f64,
    price: f64,
    consolidatable: bool,
}

fn eviction_cost(pod: &Pod) -> f64 {
    let cost = 1.0
        + f64::from(pod.deletion_cost) / 2f64.powi(27)
        + f64::from(pod.priority) / 2f64.powi(25);
    cost.clamp(-10.0, 10.0)
}

fn tolerates_disrupted_taint(pod: &Pod) -> bool {
    let taint = Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_owned(),
        value: String::new(),
        effect: Effect::NoSchedule,
    };
    pod.tolerations.iter().any(|t| t.tolerates(&taint))
}

/// Pods the eviction API would be asked to evict (Karpenter's IsEvictable).
fn is_evictable(pod: &Pod) -> bool {
    pod.is_active()
        && !tolerates_disrupted_taint(pod)
        && pod.owner_kind != "Node"
        && !pod.do_not_disrupt
}

/// The price of a node per hour: as given, or its offering's.
fn node_price(cluster: &Cluster, node: &StateNode) -> f64 {
    if node.price > 0.0 {
        return node.price;
    }
    let Some(pool) = cluster.node_pools.iter().find(|p| p.name == node.node_pool) else {
        return 0.0;
    };
    let Some(it) = cluster
        .catalogs
        .get(pool.catalog)
        .and_then(|c| c.iter().find(|it| it.name == node.instance_type))
    else {
        return 0.0;
    };
    it.offerings
        .iter()
        .filter(|o| {
            (node.zone.is_empty() || o.zone == node.zone)
                && (node.capacity_type.is_empty() || o.capacity_type == node.capacity_type)
        })
        .map(|o| o.price)
        .min_by(f64::total_cmp)
        .unwrap_or(0.0)
}

/// Karpenter's `IsUnderConsolidateAfter`: an initialized node whose pool's
/// `consolidateAfter` (neither `Never` nor zero) has not passed since its
/// last pod event (else its initialization). Consolidation moves no pods
/// onto such a node.
fn under_consolidate_after(cluster: &Cluster, node: &StateNode) -> bool {
    let Some(after) = cluster
        .node_pools
        .iter()
        .find(|p| p.name == node.node_pool)
        .and_then(|p| p.consolidate_after_seconds)
        .filter(|after| *after > 0)
    else {
        return false;
    };
    if !node.initialized {
        return false;
    }
    let Some(since) = node
        .disruption
        .last_pod_event_seconds
        .or(node.disruption.initialized_seconds)
    else {
        return false;
    };
    cluster.now_seconds.saturating_sub(since) < after
}

fn closed_nodes(cluster: &Cluster) -> ClosedNodes {
    ClosedNodes {
        closed: cluster
            .nodes
            .iter()
            .map(|n| under_consolidate_after(cluster, n))
            .collect(),
        deleting: cluster
            .nodes
            .iter()
            .filter(|n| n.marked_for_deletion)
            .map(|n| n.name.clone())
            .collect(),
    }
}

fn is_consolidatable(cluster: &Cluster, node: &StateNode, pool: usize) -> bool {
    let Some(after) = cluster.node_pools[pool].consolidate_after_seconds else {
        return false;
    };
    if node.disruption.consolidatable {
        return true;
    }
    let start = node
        .disruption
        .last_pod_event_seconds
        .or(node.disruption.initialized_seconds)
        .unwrap_or(node.creation_seconds);
    cluster.now_seconds.saturating_sub(start) >= after
}

/// Why a managed node cannot be a candidate at all, if it cannot.
fn candidate_block(
    cluster: &Cluster,
    node: &StateNode,
    pool: Option<usize>,
    eventual: bool,
) -> Option<String> {
    if !node.has_node {
        return Some("nodeclaim does not have an associated node".to_owned());
    }
    if !node.initialized {
        return Some("node isn't initialized".to_owned());
    }
    if node.marked_for_deletion || node.disruption.disrupting {
        return Some("node is deleting or marked for deletion".to_owned());
    }
    if node.disruption.nominated {
        return Some("node is nominated for a pending pod".to_owned());
    }
    if node.disruption.do_not_disrupt {
        return Some(format!(
            "disruption is blocked through the {:?} annotation",
            labels::DO_NOT_DISRUPT
        ));
    }
    if pool.is_none() {
        return Some(format!("NodePool {:?} not found", node.node_pool));
    }
    // A termination grace period lets drift proceed past pods that block
    // eviction: they are removed when the period ends.
    let ignore_pod_blocks = eventual && node.disruption.termination_grace_period_seconds.is_some();
    if ignore_pod_blocks {
        return None;
    }
    for pod in &node.pods {
        if pod.is_active() && pod.do_not_disrupt {
            return Some(format!(
                "pod {:?} has {:?} annotation",
                pod.key.to_string(),
                labels::DO_NOT_DISRUPT
            ));
        }
    }
    pdb_blocks(cluster, [node])
}

/// Why the evictable pods of `nodes` cannot be evicted, as Karpenter judges
/// a candidate: a pod whose PDB allows no disruption now (an unhealthy pod
/// under `AlwaysAllow` excepted), or a pod under more than one PDB (the
/// eviction API refuses it). A PDB that allows some disruptions does not
/// block, however many of its pods the nodes hold: the drain evicts them as
/// the budget lets it, backing off on the API server's 429s.
fn pdb_blocks<'a>(
    cluster: &Cluster,
    nodes: impl IntoIterator<Item = &'a StateNode>,
) -> Option<String> {
    for node in nodes {
        for pod in node.pods.iter().filter(|p| is_evictable(p)) {
            let matching: Vec<usize> = (0..cluster.pdbs.len())
                .filter(|i| cluster.pdbs[*i].selects(pod))
                .collect();
            if matching.len() > 1 {
                let names: Vec<String> = matching
                    .iter()
                    .map(|i| cluster.pdbs[*i].key.to_string())
                    .collect();
                return Some(format!(
                    "pod {:?} is selected by more than one PDB ({}); eviction does not support multiple PDBs",
                    pod.key.to_string(),
                    names.join(", ")
                ));
            }
            if let Some(&index) = matching.first() {
                let pdb = &cluster.pdbs[index];
                if !pdb.lets_unhealthy_go(pod) && pdb.disruptions_allowed <= 0 {
                    return Some(format!(
                        "pdb {:?} prevents pod evictions",
                        pdb.key.to_string()
                    ));
                }
            }
        }
    }
    None
}

fn build_candidates(
    cluster: &Cluster,
    eventual: bool,
    blocked: &mut BTreeMap<String, String>,
) -> Vec<Candidate> {
    let mut candidates = Vec::new();
    let mut order: Vec<usize> = (0..cluster.nodes.len()).collect();
    order.sort_by(|a, b| cluster.nodes[*a].name.cmp(&cluster.nodes[*b].name));
    for index in order {
        let node = &cluster.nodes[index];
        if !node.is_managed() || node.planned {
            continue;
        }
        let pool = cluster
            .node_pools
            .iter()
            .position(|p| p.name == node.node_pool);
        if let Some(reason) = candidate_block(cluster, node, pool, eventual) {
            blocked.entry(node.name.clone()).or_insert(reason);
            continue;
        }
        let Some(pool) = pool else {
            continue;
        };
        let lifetime = match cluster.node_pools[pool].expire_after_seconds {
            Some(total) if total > 0 => {
                let age = cluster.now_seconds.saturating_sub(node.creation_seconds) as f64;
                ((total as f64 - age) / total as f64).clamp(0.0, 1.0)
            }
            _ => 1.0,
        };
        let cost: f64 = node.pods.iter().map(eviction_cost).sum::<f64>() * lifetime;
        candidates.push(Candidate {
            node: index,
            pool,
            reschedulable: node
                .pods
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_reschedulable())
                .map(|(i, _)| i)
                .collect(),
            disruption_cost: cost,
            price: node_price(cluster, node),
            consolidatable: is_consolidatable(cluster, node, pool),
        });
    }
    candidates.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| cluster.nodes[a.node].name.cmp(&cluster.nodes[b.node].name))
    });
    candidates
}

// ---------------------------------------------------------------------------
// Budgets

/// Whether a budget applies now: it has no schedule, or its schedule fired
/// within the last `duration`.
fn budget_active(budget: &crate::model::Budget, now: i64) -> bool {
    budget
        .window
        .as_ref()
        .is_none_or(|(cron, duration)| cron.fired_within(now.saturating_sub(*duration), now))
}

/// How many more nodes of each pool may be disrupted for `reason` now.
fn budget_mapping(cluster: &Cluster, reason: Reason) -> HashMap<usize, i64> {
    let mut mapping = HashMap::new();
    for (pool_index, pool) in cluster.node_pools.iter().enumerate() {
        let nodes: Vec<&StateNode> = cluster
            .nodes
            .iter()
            .filter(|n| n.node_pool == pool.name && n.initialized)
            .collect();
        let total = nodes.len() as i64;
        let disrupting = nodes
            .iter()
            .filter(|n| {
                n.marked_for_deletion || n.disruption.disrupting || n.disruption.node_not_ready
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
        mapping.insert(pool_index, allowed.saturating_sub(disrupting).max(0));
    }
    mapping
}

/// Why a candidate waits: its pool's budget for `reason` is used up.
fn budget_exhausted(cluster: &Cluster, pool: usize, reason: Reason) -> String {
    format!(
        "disruption budget of nodepool {:?} allows no more {} disruptions",
        cluster.node_pools[pool].name,
        reason.as_str()
    )
}

// ---------------------------------------------------------------------------
// Simulation

/// Where pods go when their nodes are removed: a scheduling run with the
/// nodes gone and the pods pending.
struct Moved {
    /// The first moving pod that found no place, and why.
    stranded: Option<String>,
    /// A moving pod landed on a node that is still starting.
    on_starting_node: Option<String>,
    /// New claims holding moving pods.
    replacements: Vec<PlannedClaim>,
    /// Existing node -> the moving pods placed there.
    placements: BTreeMap<String, Vec<PodKey>>,
}

impl Moved {
    fn replacement_price(&self) -> f64 {
        self.replacements
            .iter()
            .filter_map(|r| r.cheapest.as_ref())
            .map(|c| c.price)
            .sum()
    }
}

/// Simulates `moving` leaving the `removed` nodes (with the pending pods,
/// which must not be left worse off). A consolidation passes the nodes its
/// pods may not move onto.
fn move_pods(
    prepared: &Prepared<'_>,
    cluster: &Cluster,
    removed: &[usize],
    moving: &[&Pod],
    closed: Option<&ClosedNodes>,
) -> Moved {
    let moving_keys: HashSet<&PodKey> = moving.iter().map(|p| &p.key).collect();
    let pods = cluster.pending.iter().chain(moving.iter().copied());
    let solution = match closed {
        Some(closed) => prepared.run_consolidation(removed, closed, pods),
        None => prepared.run(removed, pods),
    };
    let stranded = solution
        .unschedulable
        .iter()
        .find(|(pod, _)| moving_keys.contains(pod))
        .map(|(pod, reason)| format!("not all pods would schedule, {pod} => {reason}"));
    let mut placements = BTreeMap::new();
    let mut on_starting_node = None;
    for (node_name, pods) in &solution.existing {
        let moved: Vec<PodKey> = pods
            .iter()
            .filter(|p| moving_keys.contains(p))
            .cloned()
            .collect();
        if moved.is_empty() {
            continue;
        }
        let starting = cluster
            .nodes
            .iter()
            .find(|n| &n.name == node_name)
            .is_some_and(|n| !n.initialized);
        if starting && on_starting_node.is_none() {
            on_starting_node = Some(node_name.clone());
        }
        placements.insert(node_name.clone(), moved);
    }
    let replacements = solution
        .new_claims
        .into_iter()
        .filter(|c| c.pods.iter().any(|p| moving_keys.contains(p)))
        .collect();
    Moved {
        stranded,
        on_starting_node,
        replacements,
        placements,
    }
}

fn candidate_pods<'c>(cluster: &'c Cluster, candidates: &[&Candidate]) -> Vec<&'c Pod> {
    candidates
        .iter()
        .flat_map(|c| {
            let node = &cluster.nodes[c.node];
            c.reschedulable.iter().map(move |i| &node.pods[*i])
        })
        .filter(|pod| !pod.do_not_disrupt && !cluster.pdbs.iter().any(|pdb| pdb.always_blocks(pod)))
        .collect()
}

/// The most a claim could cost to launch: the priciest compatible offering
/// of the first capacity type it could get (reserved, then spot, then
/// on-demand), as Karpenter prices a replacement.
fn worst_launch_price(it: &InstanceType, requirements: &Requirements) -> f64 {
    for capacity_type in [
        labels::CAPACITY_TYPE_RESERVED,
        labels::CAPACITY_TYPE_SPOT,
        labels::CAPACITY_TYPE_ON_DEMAND,
    ] {
        if requirements
            .get(labels::CAPACITY_TYPE)
            .is_some_and(|r| !r.has(capacity_type))
        {
            continue;
        }
        let prices = it.offerings.iter().filter(|o| {
            o.available
                && o.capacity_type == capacity_type
                && requirements
                    .get(labels::TOPOLOGY_ZONE)
                    .is_none_or(|z| z.has(&o.zone))
        });
        if let Some(max) = prices.map(|o| o.price).max_by(f64::total_cmp) {
            return max;
        }
    }
    f64::INFINITY
}

/// Keeps the claim's options that pass `keep` and recomputes its cheapest
/// offering. None when nothing is left.
fn restrict_claim(
    cluster: &Cluster,
    claim: &PlannedClaim,
    extra: Option<Requirement>,
    keep: impl Fn(&InstanceType, &Requirements) -> bool,
) -> Option<PlannedClaim> {
    let pool = cluster
        .node_pools
        .iter()
        .find(|p| p.name == claim.node_pool)?;
    let catalog = cluster.catalogs.get(pool.catalog)?;
    let mut requirements = claim.requirements.clone();
    if let Some(extra) = extra {
        requirements.add(extra);
    }
    let filter = OfferingFilter::new(&requirements, &cluster.offering_space);
    let mut kept: Vec<(&InstanceType, f64)> = claim
        .instance_types
        .iter()
        .filter_map(|name| catalog.iter().find(|it| &it.name == name))
        .filter(|it| it.has_compatible_offering(&filter) && keep(it, &requirements))
        .map(|it| {
            (
                it,
                it.cheapest_allowed(&filter).map_or(f64::MAX, |o| o.price),
            )
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    kept.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.name.cmp(&b.0.name)));
    let names: Vec<String> = kept.iter().map(|(it, _)| it.name.clone()).collect();
    requirements.add(Requirement::in_values(
        labels::INSTANCE_TYPE,
        names.iter().map(String::as_str),
    ));
    let (it, _) = kept[0];
    let offering = it.cheapest_allowed(&filter)?;
    let mut labels = claim.labels.clone();
    for key in [
        labels::INSTANCE_TYPE,
        labels::TOPOLOGY_ZONE,
        labels::CAPACITY_TYPE,
    ] {
        match requirements.get(key).and_then(Requirement::single_value) {
            Some(value) => {
                labels.insert(key.to_owned(), value.to_owned());
            }
            None => {
                labels.remove(key);
            }
        }
    }
    Some(PlannedClaim {
        instance_types: names,
        cheapest: Some(Cheapest {
            instance_type: it.name.clone(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type.clone(),
            price: offering.price,
        }),
        requirements,
        labels,
        ..claim.clone()
    })
}

/// Karpenter's `filterOutSameInstanceType`: merging nodes into one of a
/// type some of them already are saves nothing real (the single-node pass
/// deletes the emptier one instead). When an option is a candidate's type,
/// only options cheaper than the cheapest such candidate stay.
fn without_candidate_types(
    cluster: &Cluster,
    candidates: &[&Candidate],
    replacement: PlannedClaim,
) -> Result<PlannedClaim, String> {
    let most = candidates
        .iter()
        .filter(|c| {
            replacement
                .instance_types
                .contains(&cluster.nodes[c.node].instance_type)
        })
        .map(|c| c.price)
        .min_by(f64::total_cmp);
    let Some(most) = most else {
        return Ok(replacement);
    };
    restrict_claim(cluster, &replacement, None, |it, requirements| {
        worst_launch_price(it, requirements) < most
    })
    .ok_or_else(|| "the replacement would be the same instance type or pricier".to_owned())
}

/// Karpenter's computeConsolidation: delete when everything fits elsewhere,
/// replace when one strictly cheaper node holds what does not.
fn consolidate(
    prepared: &Prepared<'_>,
    closed: &ClosedNodes,
    cluster: &Cluster,
    candidates: &[&Candidate],
    options: &DisruptionOptions,
    method: Method,
) -> Result<Command, String> {
    let names: Vec<String> = candidates
        .iter()
        .map(|c| cluster.nodes[c.node].name.clone())
        .collect();
    let candidate_price: f64 = candidates.iter().map(|c| c.price).sum();
    let removed: Vec<usize> = candidates.iter().map(|c| c.node).collect();
    let moved = move_pods(
        prepared,
        cluster,
        &removed,
        &candidate_pods(cluster, candidates),
        Some(closed),
    );
    if let Some(reason) = moved.stranded {
        return Err(reason);
    }
    // Never count on a node that is still starting.
    if let Some(node) = moved.on_starting_node {
        return Err(format!("would schedule against uninitialized node {node}"));
    }
    let claim = match moved.replacements.as_slice() {
        [] => {
            return Ok(Command {
                reason: Reason::Underutilized,
                method,
                candidates: names,
                replacements: Vec::new(),
                savings_per_hour: candidate_price,
                placements: moved.placements,
            });
        }
        [claim] => claim,
        more => {
            return Err(format!(
                "can't remove without creating {} nodes",
                more.len()
            ));
        }
    };
    let all_spot = candidates
        .iter()
        .all(|c| cluster.nodes[c.node].capacity_type == labels::CAPACITY_TYPE_SPOT);
    let allows_spot = claim
        .requirements
        .get(labels::CAPACITY_TYPE)
        .is_none_or(|r| r.has(labels::CAPACITY_TYPE_SPOT));
    let cheaper = |it: &InstanceType, requirements: &Requirements| {
        worst_launch_price(it, requirements) < candidate_price
    };
    let replacement = if all_spot && allows_spot {
        if !options.spot_to_spot {
            return Err(
                "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
                    .to_owned(),
            );
        }
        let spot = Requirement::in_values(labels::CAPACITY_TYPE, [labels::CAPACITY_TYPE_SPOT]);
        let Some(mut replacement) = restrict_claim(cluster, claim, Some(spot), cheaper) else {
            return Err("Can't replace with a cheaper node".to_owned());
        };
        if method == Method::MultiNodeConsolidation {
            replacement = without_candidate_types(cluster, candidates, replacement)?;
        }
        if candidates.len() == 1 {
            if replacement.instance_types.len() < MIN_SPOT_TO_SPOT_OPTIONS {
                return Err(format!(
                    "SpotToSpotConsolidation requires {MIN_SPOT_TO_SPOT_OPTIONS} cheaper instance type options than the current candidate to consolidate, got {}",
                    replacement.instance_types.len()
                ));
            }
            replacement
                .instance_types
                .truncate(MIN_SPOT_TO_SPOT_OPTIONS);
            let kept: Vec<&str> = replacement
                .instance_types
                .iter()
                .map(String::as_str)
                .collect();
            replacement
                .requirements
                .add(Requirement::in_values(labels::INSTANCE_TYPE, kept));
        }
        replacement
    } else {
        let Some(mut replacement) = restrict_claim(cluster, claim, None, cheaper) else {
            return Err("Can't replace with a cheaper node".to_owned());
        };
        if method == Method::MultiNodeConsolidation {
            replacement = without_candidate_types(cluster, candidates, replacement)?;
        }
        // On-demand may become spot, but never a pricier on-demand fallback.
        if let Some(capacity) = replacement.requirements.get(labels::CAPACITY_TYPE)
            && capacity.has(labels::CAPACITY_TYPE_SPOT)
            && capacity.has(labels::CAPACITY_TYPE_ON_DEMAND)
        {
            let spot = Requirement::in_values(labels::CAPACITY_TYPE, [labels::CAPACITY_TYPE_SPOT]);
            if let Some(spot_only) = restrict_claim(cluster, &replacement, Some(spot), cheaper) {
                replacement = spot_only;
            }
        }
        replacement
    };
    let price = replacement
        .cheapest
        .as_ref()
        .map_or(f64::INFINITY, |c| c.price);
    Ok(Command {
        reason: Reason::Underutilized,
        method,
        candidates: names,
        savings_per_hour: candidate_price - price,
        placements: moved.placements,
        replacements: vec![replacement],
    })
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
    })
}

// ---------------------------------------------------------------------------
// Applying commands to the working copy

/// Carries a command out on the working copy: candidates marked for
/// deletion (they count against budgets until gone), their pods moved where
/// the simulation put them, replacements added as running nodes.
fn apply(cluster: &mut Cluster, command: &Command) {
    let candidates: HashSet<&str> = command.candidates.iter().map(String::as_str).collect();
    // Evictions use up the PDBs' allowances for the rest of the plan.
    let evicted: Vec<Pod> = cluster
        .nodes
        .iter()
        .filter(|n| candidates.contains(n.name.as_str()))
        .flat_map(|n| n.pods.iter().filter(|p| is_evictable(p)).cloned())
        .collect();
    for pod in &evicted {
        if let Some(pdb) = cluster.pdbs.iter_mut().find(|pdb| pdb.selects(pod))
            && !pdb.lets_unhealthy_go(pod)
        {
            pdb.disruptions_allowed -= 1;
        }
    }
    let mut moved: HashMap<PodKey, Pod> = HashMap::new();
    for node in cluster
        .nodes
        .iter_mut()
        .filter(|n| candidates.contains(n.name.as_str()))
    {
        node.marked_for_deletion = true;
        for pod in node.pods.drain(..) {
            if pod.is_reschedulable() {
                moved.insert(pod.key.clone(), pod);
            }
        }
    }
    let now = cluster.now_seconds;
    for (target, pods) in &command.placements {
        if let Some(node) = cluster.nodes.iter_mut().find(|n| &n.name == target) {
            // Pods arriving are pod events: the node's consolidateAfter
            // window opens again, as it will on the cluster.
            if !pods.is_empty() {
                node.disruption.last_pod_event_seconds = Some(now);
            }
            for key in pods {
                if let Some(mut pod) = moved.remove(key) {
                    pod.node_name = node.name.clone();
                    node.pods.push(pod);
                }
            }
        }
    }
    for (i, claim) in command.replacements.iter().enumerate() {
        let Some(cheapest) = &claim.cheapest else {
            continue;
        };
        let pool = cluster
            .node_pools
            .iter()
            .find(|p| p.name == claim.node_pool);
        let it = pool
            .and_then(|p| cluster.catalogs.get(p.catalog))
            .and_then(|c| c.iter().find(|it| it.name == cheapest.instance_type))
            .cloned();
        let name = format!(
            "{}-replacement-{}-{i}",
            command.candidates.first().map_or("node", String::as_str),
            claim.node_pool
        );
        let mut node_labels = claim.labels.clone();
        node_labels.insert(
            labels::INSTANCE_TYPE.to_owned(),
            cheapest.instance_type.clone(),
        );
        node_labels.insert(labels::TOPOLOGY_ZONE.to_owned(), cheapest.zone.clone());
        node_labels.insert(
            labels::CAPACITY_TYPE.to_owned(),
            cheapest.capacity_type.clone(),
        );
        node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
        let pods = claim
            .pods
            .iter()
            .filter_map(|key| moved.remove(key))
            .map(|mut pod| {
                pod.node_name = name.clone();
                pod
            })
            .collect();
        cluster.nodes.push(StateNode {
            name: name.clone(),
            node_claim_name: name,
            node_pool: claim.node_pool.clone(),
            label_requirements: Arc::new(Requirements::from_labels(&node_labels)),
            labels: node_labels,
            taints: claim.taints.clone(),
            allocatable: it
                .as_ref()
                .map(|it| it.allocatable.clone())
                .unwrap_or_default(),
            capacity: it
                .as_ref()
                .map(|it| it.capacity.clone())
                .unwrap_or_default(),
            pods,
            // Later rounds of the plan run after the replacement is up (as
            // Karpenter's later loops do); it is never a candidate itself.
            has_node: true,
            initialized: true,
            marked_for_deletion: false,
            unschedulable: false,
            price: cheapest.price,
            creation_seconds: cluster.now_seconds,
            disruption: crate::model::DisruptionState::default(),
            planned: true,
            capacity_type: cheapest.capacity_type.clone(),
            zone: cheapest.zone.clone(),
            instance_type: cheapest.instance_type.clone(),
        });
    }
}

fn managed_cost(cluster: &Cluster) -> f64 {
    cluster
        .nodes
        .iter()
        .filter(|n| n.is_managed() && !n.marked_for_deletion)
        .map(|n| node_price(cluster, n))
        .sum()
}

// ---------------------------------------------------------------------------
// The plan

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

// ---------------------------------------------------------------------------
// Lower bound

/// The cheapest any set of nodes from the pools could hold the managed
/// nodes' pods for, if pods could be split across nodes: the optimum of the
/// linear relaxation of bin packing over CPU, memory and pod count. No real
/// plan can beat it.
pub fn lower_bound(cluster: &Cluster) -> f64 {
    let mut demand = Resources::default();
    for node in cluster
        .nodes
        .iter()
        .filter(|n| n.is_managed() && !n.marked_for_deletion)
    {
        for pod in node.pods.iter().filter(|p| p.is_active() && !p.is_daemon()) {
            demand.add(&pod.requests);
        }
    }
    if demand.is_zero() {
        return 0.0;
    }
    let demand = [demand.cpu as f64, demand.memory as f64, demand.pods as f64];
    let mut columns: Vec<([f64; 3], f64)> = Vec::new();
    let mut seen = BTreeSet::new();
    for pool in cluster.node_pools.iter().filter(|p| p.ready) {
        let Some(catalog) = cluster.catalogs.get(pool.catalog) else {
            continue;
        };
        let filter = OfferingFilter::new(&pool.requirements, &cluster.offering_space);
        for it in catalog {
            if it.requirements.intersects(&pool.requirements).is_err()
                || !seen.insert(it.name.clone())
            {
                continue;
            }
            let Some(offering) = it.cheapest_allowed(&filter) else {
                continue;
            };
            let a = &it.allocatable;
            columns.push((
                [
                    a.cpu.max(0) as f64,
                    a.memory.max(0) as f64,
                    a.pods.max(0) as f64,
                ],
                offering.price,
            ));
        }
    }
    covering_lp(&demand, &columns).unwrap_or(0.0)
}

/// min Σ price_j x_j subject to Σ a_j x_j ≥ demand, x ≥ 0, solved through
/// its dual (max demand·y subject to a_j·y ≤ price_j, y ≥ 0) with a dense
/// simplex: three variables, one constraint per instance type.
fn covering_lp(demand: &[f64; 3], columns: &[([f64; 3], f64)]) -> Option<f64> {
    // Scale each resource so the numbers stay near 1.
    let scale: Vec<f64> = (0..3)
        .map(|r| {
            let max = columns.iter().map(|(a, _)| a[r]).fold(0.0_f64, f64::max);
            if max > 0.0 { max } else { 1.0 }
        })
        .collect();
    let m = columns.len();
    if m == 0 {
        return None;
    }
    // Tableau rows: constraints a_j·y + s_j = price_j; objective row last.
    let width = 3 + m + 1;
    let mut tableau = vec![vec![0.0; width]; m + 1];
    for (j, (a, price)) in columns.iter().enumerate() {
        for r in 0..3 {
            tableau[j][r] = a[r] / scale[r];
        }
        tableau[j][3 + j] = 1.0;
        tableau[j][width - 1] = *price;
    }
    for r in 0..3 {
        tableau[m][r] = -demand[r] / scale[r];
    }
    for _ in 0..(10 * (m + 3)) {
        // Entering: most negative reduced cost.
        let (entering, value) = (0..width - 1)
            .map(|c| (c, tableau[m][c]))
            .min_by(|a, b| a.1.total_cmp(&b.1))?;
        if value >= -1e-12 {
            return Some(tableau[m][width - 1]);
        }
        let leaving = (0..m)
            .filter(|row| tableau[*row][entering] > 1e-12)
            .min_by(|a, b| {
                (tableau[*a][width - 1] / tableau[*a][entering])
                    .total_cmp(&(tableau[*b][width - 1] / tableau[*b][entering]))
            })?;
        let pivot = tableau[leaving][entering];
        for value in tableau[leaving].iter_mut() {
            *value /= pivot;
        }
        let pivot_row = tableau[leaving].clone();
        for (row, values) in tableau.iter_mut().enumerate() {
            if row == leaving {
                continue;
            }
            let factor = values[entering];
            if factor != 0.0 {
                for (value, p) in values.iter_mut().zip(&pivot_row) {
                    *value -= factor * p;
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covering_lp_mixes_types_fractionally() {
        // Need 8 CPU and 8 GiB: a CPU-heavy type (4 CPU, 1 GiB, $1) and a
        // memory-heavy one (1 CPU, 4 GiB, $1): 1.6 of each = $3.2.
        let columns = [([4.0, 1.0, 100.0], 1.0), ([1.0, 4.0, 100.0], 1.0)];
        let cost = covering_lp(&[8.0, 8.0, 1.0], &columns).unwrap();
        assert!((cost - 3.2).abs() < 1e-9, "{cost}");
    }
}
