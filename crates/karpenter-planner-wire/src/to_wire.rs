//! From the planner's decisions back to the wire types: a Solve answer and
//! a PlanDisruption answer, pods named by UID.

use std::collections::{BTreeMap, HashMap};

use karpenter_proto::convert::{
    requirement_list as requirements, resource_list, taint_list as taints,
};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

use karpenter_planner::disruption::{DisruptionPlan, Method, Reason};
use karpenter_planner::model::{Pod, PodKey};

use crate::from_wire::Parsed;
use karpenter_planner::solve::{MinValuesPolicy, Options, PlannedClaim, Solution};

pub fn options(options: Option<&sched::SchedulingOptions>) -> Options {
    let Some(options) = options else {
        return Options::default();
    };
    Options {
        min_values_policy: if options.min_values_policy
            == sched::scheduling_options::MinValuesPolicy::BestEffort as i32
        {
            MinValuesPolicy::BestEffort
        } else {
            MinValuesPolicy::Strict
        },
        ignore_preferences: options.preference_policy
            == sched::scheduling_options::PreferencePolicy::Ignore as i32,
        well_known_labels: options.well_known_labels.clone(),
        plan_dra_pods: options.plan_dra_pods,
        interrupt: None,
    }
}

fn pod_ref(key: &PodKey, uids: &HashMap<&PodKey, &str>) -> sched::PodRef {
    sched::PodRef {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        uid: uids.get(key).map(|u| (*u).to_owned()).unwrap_or_default(),
    }
}

/// The UIDs of `pods` by key, to name pods on the wire.
fn uids<'c>(pods: impl IntoIterator<Item = &'c Pod>) -> HashMap<&'c PodKey, &'c str> {
    pods.into_iter().map(|p| (&p.key, p.uid.as_str())).collect()
}

/// The pods placed on each existing node, on the wire.
fn placements(
    placements: &BTreeMap<String, Vec<PodKey>>,
    uids: &HashMap<&PodKey, &str>,
) -> Vec<sched::NodePlacement> {
    placements
        .iter()
        .map(|(node, pods)| sched::NodePlacement {
            node: node.clone(),
            pods: pods.iter().map(|p| pod_ref(p, uids)).collect(),
        })
        .collect()
}

pub fn node_claim(claim: &PlannedClaim, uids: &HashMap<&PodKey, &str>) -> sched::NodeClaimPlan {
    sched::NodeClaimPlan {
        node_pool: claim.node_pool.clone(),
        instance_types: claim.instance_types.clone(),
        cheapest: claim.cheapest.as_ref().map(|c| sched::OfferingChoice {
            instance_type: c.instance_type.clone(),
            zone: c.zone.clone(),
            capacity_type: c.capacity_type.clone(),
            price: c.price,
        }),
        requirements: requirements(&claim.requirements),
        labels: claim.labels.clone(),
        taints: taints(&claim.taints),
        startup_taints: taints(&claim.startup_taints),
        pods: claim.pods.iter().map(|p| pod_ref(p, uids)).collect(),
        requests: Some(resource_list(&claim.requests)),
        node_class_ref: None,
        min_values_relaxed: claim.min_values_relaxed,
        // The request's pools say (see `node_claim_with_class`).
        price_overlay_applied: false,
        capacity_overlay_applied: false,
    }
}

/// A planned claim on the wire, with what its pool says about it.
fn node_claim_with_class(
    claim: &PlannedClaim,
    uids: &HashMap<&PodKey, &str>,
    pools: &HashMap<&str, PoolFacts<'_>>,
) -> sched::NodeClaimPlan {
    let mut plan = node_claim(claim, uids);
    if let Some(pool) = pools.get(claim.node_pool.as_str()) {
        plan.node_class_ref = pool.node_class_ref.cloned();
        let overlaid = |flag: fn(&types::InstanceType) -> bool| {
            claim.instance_types.iter().any(|name| {
                pool.instance_types
                    .get(name.as_str())
                    .is_some_and(|it| flag(it))
            })
        };
        plan.price_overlay_applied = overlaid(|it| it.price_overlaid);
        plan.capacity_overlay_applied = overlaid(|it| it.capacity_overlaid);
    }
    plan
}

/// What the request says about a pool that its planned claims carry: its
/// node class, and its instance types (whether NodeOverlays changed them).
struct PoolFacts<'s> {
    node_class_ref: Option<&'s sched::NodeClassReference>,
    instance_types: HashMap<&'s str, &'s types::InstanceType>,
}

/// Each pool's [`PoolFacts`], by name.
fn pool_facts(snapshot: &sched::ClusterSnapshot) -> HashMap<&str, PoolFacts<'_>> {
    let catalogs = &snapshot.instance_type_catalogs;
    snapshot
        .node_pools
        .iter()
        .map(|p| {
            let names = catalogs.iter().map(|c| c.name.as_str());
            let instance_types =
                karpenter_proto::convert::pool_catalog_index(names, &p.instance_type_catalog)
                    .and_then(|i| catalogs.get(i))
                    .into_iter()
                    .flat_map(|c| c.instance_types.iter())
                    // Only an overlaid type changes a claim.
                    .filter(|it| it.price_overlaid || it.capacity_overlaid)
                    .map(|it| (it.name.as_str(), it))
                    .collect();
            let facts = PoolFacts {
                node_class_ref: p.node_class_ref.as_ref(),
                instance_types,
            };
            (p.name.as_str(), facts)
        })
        .collect()
}

pub fn solve_response(
    solution: &Solution,
    parsed: &Parsed,
    snapshot: &sched::ClusterSnapshot,
) -> sched::SolveResponse {
    let uids = uids(&parsed.cluster.pending);
    let pools = pool_facts(snapshot);
    sched::SolveResponse {
        pools_without_instance_types: solution
            .pools_without_instance_types
            .iter()
            .map(|p| sched::PoolWithoutInstanceTypes {
                node_pool: p.node_pool.clone(),
                min_values: p.min_values,
            })
            .collect(),
        node_claims: solution
            .new_claims
            .iter()
            .map(|c| node_claim_with_class(c, &uids, &pools))
            .collect(),
        existing_nodes: placements(&solution.existing, &uids),
        unschedulable: solution
            .unschedulable
            .iter()
            .map(|(pod, reason)| sched::UnschedulablePod {
                pod: Some(pod_ref(pod, &uids)),
                reason: reason.clone(),
                invalid_field: String::new(),
            })
            .chain(
                parsed
                    .invalid_pods
                    .iter()
                    .map(|(pod, error)| sched::UnschedulablePod {
                        pod: Some(pod.clone()),
                        reason: format!("the pod could not be understood: {error}"),
                        invalid_field: error.field.clone(),
                    }),
            )
            .collect(),
        cost_per_hour: solution.cost_per_hour(),
        rejected: parsed.rejected.clone(),
    }
}

fn disruption_reason(reason: Reason) -> sched::DisruptionReason {
    match reason {
        Reason::Empty => sched::DisruptionReason::Empty,
        Reason::Underutilized => sched::DisruptionReason::Underutilized,
        Reason::Drifted => sched::DisruptionReason::Drifted,
        Reason::Expired => sched::DisruptionReason::Expired,
        Reason::Unhealthy => sched::DisruptionReason::Unhealthy,
    }
}

fn disruption_method(method: Method) -> sched::DisruptionMethod {
    match method {
        Method::Emptiness => sched::DisruptionMethod::Emptiness,
        Method::Drift => sched::DisruptionMethod::Drift,
        Method::StaticDrift => sched::DisruptionMethod::StaticDrift,
        Method::Expiration => sched::DisruptionMethod::Expiration,
        Method::MultiNodeConsolidation => sched::DisruptionMethod::MultiNodeConsolidation,
        Method::SingleNodeConsolidation => sched::DisruptionMethod::SingleNodeConsolidation,
        Method::Repair => sched::DisruptionMethod::Repair,
    }
}

/// The wire answer to a disruption request: `plan` for the cluster
/// `parsed` from `snapshot`, pods named by UID, replacements with their
/// pool's node class, and what could not be read reported as rejected.
pub fn plan_response(
    plan: &DisruptionPlan,
    parsed: &Parsed,
    snapshot: &sched::ClusterSnapshot,
) -> sched::PlanDisruptionResponse {
    let cluster = &parsed.cluster;
    let uids = uids(
        cluster
            .nodes
            .iter()
            .flat_map(|n| n.pods.iter())
            .chain(cluster.pending.iter()),
    );
    let pools = pool_facts(snapshot);
    sched::PlanDisruptionResponse {
        commands: plan
            .commands
            .iter()
            .map(|command| sched::DisruptionCommand {
                reason: disruption_reason(command.reason) as i32,
                method: disruption_method(command.method) as i32,
                candidates: command.candidates.clone(),
                replacements: command
                    .replacements
                    .iter()
                    .map(|c| node_claim_with_class(c, &uids, &pools))
                    .collect(),
                savings_per_hour: command.savings_per_hour,
                placements: placements(&command.placements, &uids),
                balanced_scores: command
                    .balanced_scores
                    .iter()
                    .map(|(pool, score)| balanced_score(pool, score))
                    .collect(),
                reboot: command.repair.as_ref().is_some_and(|r| r.reboot),
                termination_grace_period: command
                    .repair
                    .as_ref()
                    .and_then(|r| r.termination_grace_period)
                    .and_then(|d| prost_types::Duration::try_from(d).ok()),
                repair_condition: command
                    .repair
                    .as_ref()
                    .map(|r| r.condition.clone())
                    .unwrap_or_default(),
            })
            .collect(),
        blocked: blocked_candidates(&plan.blocked),
        repair_blocked: blocked_candidates(&plan.repair_blocked),
        unconsolidatable: blocked_candidates(&plan.unconsolidatable),
        pool_budgets: plan
            .budgets
            .iter()
            .map(|b| sched::NodePoolBudget {
                node_pool: b.node_pool.clone(),
                reason: disruption_reason(b.reason) as i32,
                allowed: b.allowed,
                disrupting: b.disrupting,
            })
            .collect(),
        deletion_costs: plan
            .deletion_costs
            .iter()
            .map(|d| sched::NodeDeletionCost {
                node: d.node.clone(),
                cost: d.cost,
            })
            .collect(),
        rejected_moves: plan
            .rejected_moves
            .iter()
            .map(|(candidate, scores)| sched::RejectedMove {
                candidate: candidate.clone(),
                scores: scores
                    .iter()
                    .map(|(pool, score)| balanced_score(pool, score))
                    .collect(),
            })
            .collect(),
        cost: Some(sched::ClusterCost {
            before: plan.cost_before,
            after: plan.cost_after,
            lower_bound: plan.lower_bound,
            node_pools: plan.pool_costs.clone().into_iter().collect(),
        }),
        candidates_evaluated: i32::try_from(plan.candidates_evaluated).unwrap_or(i32::MAX),
        // Pending pods only matter to disruption as pods to place; one that
        // could not be understood is reported like any other object.
        rejected: parsed
            .rejected
            .iter()
            .cloned()
            .chain(
                parsed
                    .invalid_pods
                    .iter()
                    .map(|(pod, error)| sched::RejectedObject {
                        kind: "Pod".into(),
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        field: error.field.clone(),
                        message: error.message.clone(),
                    }),
            )
            .collect(),
    }
}

/// A Balanced pool's score as the wire carries it (the threshold and K
/// written out, as Karpenter's ConsolidationApproved event shows them).
fn balanced_score(
    pool: &str,
    score: &karpenter_planner::disruption::BalancedScore,
) -> sched::BalancedScore {
    use karpenter_planner::disruption::BALANCED_K;
    sched::BalancedScore {
        node_pool: pool.to_owned(),
        score: score.value(),
        threshold: 1.0 / BALANCED_K,
        // K is a small whole number (2).
        k: BALANCED_K as i32,
        savings_fraction: score.savings_fraction,
        disruption_fraction: score.disruption_fraction,
    }
}

fn blocked_candidates(
    reasons: &std::collections::BTreeMap<String, String>,
) -> Vec<sched::BlockedCandidate> {
    reasons
        .iter()
        .map(|(node, reason)| sched::BlockedCandidate {
            node: node.clone(),
            reason: reason.clone(),
        })
        .collect()
}
