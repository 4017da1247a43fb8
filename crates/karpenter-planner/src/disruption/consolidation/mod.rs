//! Consolidation: removing underutilized nodes, or replacing them with one
//! cheaper node, when their pods fit elsewhere (Karpenter's
//! computeConsolidation), and the price rules a replacement must pass.
//!
//! A round tries multi-node consolidation (`multi`), then single-node
//! (`single`), then a multi-node set Karpenter's prefix search misses.

mod balanced;

pub use balanced::{BALANCED_K, Score};
mod multi;
mod single;

use std::collections::BTreeMap;

use crate::labels;
use crate::model::{Cluster, ConsolidationPolicy, InstanceType, OfferingFilter, Reason};
use crate::requirements::{Requirement, Requirements};
use crate::solve::{
    Cheapest, ClosedNodes, PlannedClaim, Prepared, min_values_not_met, min_values_prefix,
    min_values_shortfall,
};

use super::candidates::{Candidate, closed_nodes};
use super::simulate::{candidate_pods, move_pods};
use super::{Command, DisruptionOptions, Findings, Method};
use balanced::Balanced;

/// Karpenter caps a multi-node command at this many candidates.
pub const MAX_MULTI_NODE_CANDIDATES: usize = 100;

/// Spot-to-spot consolidation needs at least this many cheaper options.
pub const MIN_SPOT_TO_SPOT_OPTIONS: usize = 15;

/// A round's consolidation: the working copy, its prepared scheduling
/// snapshot and the nodes pods may not move onto, shared by every
/// simulation the round runs.
struct Consolidation<'a> {
    prepared: &'a Prepared<'a>,
    closed: ClosedNodes,
    state: &'a Cluster,
    options: &'a DisruptionOptions,
    /// The round's Balanced pools and what their scores are relative to.
    balanced: Balanced,
}

/// The consolidation commands of a round: Karpenter's multi-node search,
/// else every single-node command that stays valid next to the others,
/// else a multi-node set that is not a prefix of the cost order.
pub(super) fn commands(
    prepared: &Prepared<'_>,
    state: &Cluster,
    graceful: &[Candidate],
    options: &DisruptionOptions,
    findings: &mut Findings<'_>,
) -> Option<Vec<Command>> {
    let consolidatable = consolidatable(state, graceful, findings.unconsolidatable);
    if consolidatable.is_empty() {
        return None;
    }
    let consolidation = Consolidation {
        prepared,
        closed: closed_nodes(state),
        state,
        options,
        balanced: Balanced::new(state, &consolidatable),
    };
    if let Some(command) = consolidation.multi_node(
        &consolidatable,
        findings.blocked,
        findings.evaluated,
        findings.rejected_moves,
    ) {
        return Some(vec![command]);
    }
    let taken = consolidation.single_node(&consolidatable, findings);
    if !taken.is_empty() {
        return Some(taken);
    }
    consolidation
        .multi_node_beyond_prefix(&consolidatable, findings.evaluated)
        .map(|command| vec![command])
}

/// Consolidation candidates: consolidatable nodes with pods to move, of
/// pools that allow more than emptiness, whose instance type, capacity
/// type and zone are known (their price is). Why a node with pods is not
/// one goes to `unconsolidatable`, in Karpenter's words.
fn consolidatable<'g>(
    state: &Cluster,
    graceful: &'g [Candidate],
    unconsolidatable: &mut BTreeMap<String, String>,
) -> Vec<&'g Candidate> {
    graceful
        .iter()
        .filter(|c| match should_consolidate(state, c) {
            ShouldConsolidate::Yes => c.consolidatable,
            ShouldConsolidate::No => false,
            ShouldConsolidate::Never(why) => {
                unconsolidatable
                    .entry(state.nodes[c.node].name.clone())
                    .or_insert(why);
                false
            }
        })
        .collect()
}

/// What Karpenter's ShouldDisrupt for consolidation says of a candidate.
enum ShouldConsolidate {
    /// A candidate, once its Consolidatable condition holds.
    Yes,
    /// Not consolidation's to take (an empty node is Emptiness's).
    No,
    /// Not consolidatable, for a reason the node's events tell.
    Never(String),
}

/// Karpenter's ShouldDisrupt for consolidation, in its order: what the
/// price needs (instance type, capacity type, zone), whether the pool
/// consolidates at all, emptiness, the policy.
fn should_consolidate(state: &Cluster, candidate: &Candidate) -> ShouldConsolidate {
    let pool = &state.node_pools[candidate.pool];
    let node = &state.nodes[candidate.node];
    // The candidate's price is its node's (`node_price`), worked out once.
    let why = if node.instance_type.is_empty() || candidate.price <= 0.0 {
        format!("Instance Type {:?} not found", node.instance_type)
    } else if node.capacity_type.is_empty() {
        format!("Node does not have label {:?}", labels::CAPACITY_TYPE)
    } else if node.zone.is_empty() {
        format!("Node does not have label {:?}", labels::TOPOLOGY_ZONE)
    } else if pool.consolidate_after.is_none() {
        format!("NodePool {:?} has consolidation disabled", pool.name)
    } else if candidate.reschedulable.is_empty() {
        return ShouldConsolidate::No;
    } else if pool.consolidation == ConsolidationPolicy::WhenEmpty {
        format!(
            "NodePool {:?} has consolidation policy WhenEmpty, but node is not empty",
            pool.name
        )
    } else {
        return ShouldConsolidate::Yes;
    };
    ShouldConsolidate::Never(why)
}

impl Consolidation<'_> {
    /// A consolidation of `candidates` that saves money and that their
    /// Balanced pools approve.
    fn consolidate(
        &self,
        candidates: &[&Candidate],
        method: Method,
    ) -> Result<Command, NotConsolidated> {
        let mut command = self
            .compute(candidates, method)
            .map_err(NotConsolidated::Unconsolidatable)?;
        command.balanced_scores = self
            .balanced
            .scores(self.state, candidates, command.savings_per_hour)
            .map_err(NotConsolidated::ScoredTooLow)?;
        Ok(command)
    }

    /// Karpenter's computeConsolidation: delete when everything fits
    /// elsewhere, replace when one strictly cheaper node holds what does not.
    fn compute(&self, candidates: &[&Candidate], method: Method) -> Result<Command, String> {
        let cluster = self.state;
        let names: Vec<String> = candidates
            .iter()
            .map(|c| cluster.nodes[c.node].name.clone())
            .collect();
        let candidate_price: f64 = candidates.iter().map(|c| c.price).sum();
        let removed: Vec<usize> = candidates.iter().map(|c| c.node).collect();
        let moved = move_pods(
            self.prepared,
            cluster,
            &removed,
            &candidate_pods(cluster, candidates),
            Some(&self.closed),
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
                    balanced_scores: BTreeMap::new(),
                    repair: None,
                });
            }
            [claim] => claim,
            more => {
                return Err(format!(
                    "Can't remove without creating {} candidates",
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
        let replacing = Replacing {
            cluster,
            claim,
            candidates,
            candidate_price,
            method,
        };
        let replacement = if all_spot && allows_spot {
            if !self.options.spot_to_spot {
                return Err(
                    "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
                        .to_owned(),
                );
            }
            replacing.spot_to_spot()?
        } else {
            replacing.cheaper_replacement()?
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
            balanced_scores: BTreeMap::new(),
            repair: None,
        })
    }
}

/// Why candidates were not consolidated.
#[derive(Debug)]
enum NotConsolidated {
    /// No consolidation exists (Karpenter's `Unconsolidatable` reasons).
    Unconsolidatable(String),
    /// One exists, but a Balanced pool scores it below the threshold
    /// (never an event, as upstream: such refusals are routine); the
    /// scores of its Balanced pools, for the rejected-move metrics.
    ScoredTooLow(BTreeMap<String, Score>),
}

/// What a replacement is sought for: the claim the simulation planned for the candidates'
/// pods, the candidates, what they cost together and the method at work.
struct Replacing<'a> {
    cluster: &'a Cluster,
    claim: &'a PlannedClaim,
    candidates: &'a [&'a Candidate],
    candidate_price: f64,
    method: Method,
}

impl Replacing<'_> {
    /// Whether an option of `it` within `requirements` costs less than the candidates, at
    /// the worst price it could launch at.
    fn cheaper(&self, it: &InstanceType, requirements: &Requirements) -> bool {
        worst_launch_price(it, requirements) < self.candidate_price
    }

    /// `claim` kept to the options cheaper than the candidates (and within
    /// `also`); a multi-node replacement may not be one of the candidates'
    /// own types.
    fn cheaper_claim(&self, also: Option<Requirement>) -> Result<PlannedClaim, String> {
        let keep = |it: &InstanceType, requirements: &Requirements| self.cheaper(it, requirements);
        let Some(mut replacement) = restrict_claim(self.cluster, self.claim, also, keep) else {
            return Err("Can't replace with a cheaper node".to_owned());
        };
        if self.method == Method::MultiNodeConsolidation {
            replacement = without_candidate_types(self.cluster, self.candidates, replacement)?;
        }
        // What is left must still meet the claim's minValues (relaxed ones
        // included: BestEffort lowers them to what the options offered when
        // provisioning, never below that for a replacement). A merge that
        // fails here leaves the nodes to single-node consolidation.
        let shortfall = shortfall_of(self.cluster, &replacement, &self.claim.requirements);
        if !shortfall.is_empty() {
            return Err(format!(
                "Filtering by price: {}",
                min_values_not_met(&shortfall)
            ));
        }
        Ok(replacement)
    }

    /// The replacement of spot candidates by spot: only options cheaper than
    /// the candidates and, for a single node, at least
    /// [`MIN_SPOT_TO_SPOT_OPTIONS`] of them, cut to that many, or to as many
    /// of the cheapest as the claim's minValues need when that is more
    /// (Karpenter's guard against churning from one spot type to the next).
    fn spot_to_spot(&self) -> Result<PlannedClaim, String> {
        let spot = Requirement::in_values(labels::CAPACITY_TYPE, [labels::CAPACITY_TYPE_SPOT]);
        let mut replacement = self.cheaper_claim(Some(spot))?;
        if self.candidates.len() == 1 {
            if replacement.instance_types.len() < MIN_SPOT_TO_SPOT_OPTIONS {
                return Err(format!(
                    "SpotToSpotConsolidation requires {MIN_SPOT_TO_SPOT_OPTIONS} cheaper instance type options than the current candidate to consolidate, got {}",
                    replacement.instance_types.len()
                ));
            }
            let (catalog, options) = claim_options(self.cluster, &replacement);
            let needed = min_values_prefix(catalog, &options, &self.claim.requirements);
            replacement
                .instance_types
                .truncate(MIN_SPOT_TO_SPOT_OPTIONS.max(needed));
            let kept: Vec<&str> = replacement
                .instance_types
                .iter()
                .map(String::as_str)
                .collect();
            replacement
                .requirements
                .add(Requirement::in_values(labels::INSTANCE_TYPE, kept));
        }
        Ok(replacement)
    }

    /// The replacement of candidates that are not all spot: only options
    /// cheaper than the candidates; on-demand may become spot, but never a
    /// pricier on-demand fallback.
    fn cheaper_replacement(&self) -> Result<PlannedClaim, String> {
        let mut replacement = self.cheaper_claim(None)?;
        // On-demand may become spot, but never a pricier on-demand fallback.
        let keep = |it: &InstanceType, requirements: &Requirements| self.cheaper(it, requirements);
        if let Some(capacity) = replacement.requirements.get(labels::CAPACITY_TYPE)
            && capacity.has(labels::CAPACITY_TYPE_SPOT)
            && capacity.has(labels::CAPACITY_TYPE_ON_DEMAND)
        {
            let spot = Requirement::in_values(labels::CAPACITY_TYPE, [labels::CAPACITY_TYPE_SPOT]);
            if let Some(spot_only) = restrict_claim(self.cluster, &replacement, Some(spot), keep) {
                replacement = spot_only;
            }
        }
        Ok(replacement)
    }
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

/// The instance types of the claim's pool.
fn claim_catalog<'c>(cluster: &'c Cluster, claim: &PlannedClaim) -> Option<&'c [InstanceType]> {
    let pool = cluster
        .node_pools
        .iter()
        .find(|p| p.name == claim.node_pool)?;
    cluster.catalogs.get(pool.catalog).map(Vec::as_slice)
}

/// The claim's pool catalog and its options' places in it, in the claim's
/// order.
fn claim_options<'c>(
    cluster: &'c Cluster,
    claim: &PlannedClaim,
) -> (&'c [InstanceType], Vec<usize>) {
    let Some(catalog) = claim_catalog(cluster, claim) else {
        return (&[], Vec::new());
    };
    let options = claim
        .instance_types
        .iter()
        .filter_map(|name| catalog.iter().position(|it| &it.name == name))
        .collect();
    (catalog, options)
}

/// The minValues of `requirements` that `claim`'s options do not meet.
fn shortfall_of(
    cluster: &Cluster,
    claim: &PlannedClaim,
    requirements: &Requirements,
) -> BTreeMap<String, usize> {
    if !requirements.has_min_values() {
        return BTreeMap::new();
    }
    let (catalog, options) = claim_options(cluster, claim);
    min_values_shortfall(catalog, &options, requirements)
}

/// Keeps the claim's options that pass `keep` and recomputes its cheapest
/// offering. None when nothing is left.
fn restrict_claim(
    cluster: &Cluster,
    claim: &PlannedClaim,
    extra: Option<Requirement>,
    keep: impl Fn(&InstanceType, &Requirements) -> bool,
) -> Option<PlannedClaim> {
    let catalog = claim_catalog(cluster, claim)?;
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
