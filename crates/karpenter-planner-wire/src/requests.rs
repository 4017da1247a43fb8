//! The two requests end to end, what the gRPC service and the in-process
//! CLI (`karpctl plan`, `karpctl disrupt`) both call: validate and convert
//! the wire request ([`crate::from_wire`]), run the planner, answer on the
//! wire ([`crate::to_wire`]).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use karpenter_planner::disruption::DisruptionOptions;
use karpenter_planner::solve::Options;
use karpenter_proto::convert::InvalidField;
use karpenter_proto::scheduler::v1 as sched;

use crate::from_wire::Parsed;
use crate::to_wire::{options, plan_response, solve_response};

/// Validates and solves a wire request: what the gRPC service and the
/// in-process `plan` command both call.
pub fn solve_request(request: &sched::SolveRequest) -> Result<sched::SolveResponse, InvalidField> {
    solve_request_until(request, None)
}

/// [`solve_request`] that stops early once `interrupt` is set (the answer
/// is then incomplete: the caller discards it).
pub fn solve_request_until(
    request: &sched::SolveRequest,
    interrupt: Option<Arc<AtomicBool>>,
) -> Result<sched::SolveResponse, InvalidField> {
    with_cluster(
        request.cluster.as_ref(),
        request.options.as_ref(),
        interrupt,
        |snapshot, parsed, options| {
            let solution = karpenter_planner::solve::solve(&parsed.cluster, &options);
            solve_response(&solution, parsed, snapshot)
        },
    )
}

/// Validates and plans a wire disruption request: what the gRPC service and
/// the in-process `disrupt` command both call.
pub fn plan_disruption_request(
    request: &sched::PlanDisruptionRequest,
) -> Result<sched::PlanDisruptionResponse, InvalidField> {
    plan_disruption_request_until(request, None)
}

/// [`plan_disruption_request`] that stops early once `interrupt` is set.
pub fn plan_disruption_request_until(
    request: &sched::PlanDisruptionRequest,
    interrupt: Option<Arc<AtomicBool>>,
) -> Result<sched::PlanDisruptionResponse, InvalidField> {
    let gate = |name: &str| {
        request
            .options
            .as_ref()
            .and_then(|o| o.feature_gates.get(name).copied())
            .unwrap_or(false)
    };
    let disruption = DisruptionOptions {
        spot_to_spot: gate(karpenter_core::feature_gates::SPOT_TO_SPOT_CONSOLIDATION),
        manages_deletion_cost: gate(karpenter_core::feature_gates::POD_DELETION_COST_MANAGEMENT),
    };
    with_cluster(
        request.cluster.as_ref(),
        request.options.as_ref(),
        interrupt,
        |snapshot, parsed, scheduling| {
            let plan =
                karpenter_planner::disruption::plan(&parsed.cluster, &scheduling, &disruption);
            plan_response(&plan, parsed, snapshot)
        },
    )
}

/// What both requests do around the planner: read the cluster (an empty one when the request
/// has none) and the scheduling options with `interrupt`, then `answer` from them.
fn with_cluster<R>(
    cluster: Option<&sched::ClusterSnapshot>,
    scheduling: Option<&sched::SchedulingOptions>,
    interrupt: Option<Arc<AtomicBool>>,
    answer: impl FnOnce(&sched::ClusterSnapshot, &Parsed, Options) -> R,
) -> Result<R, InvalidField> {
    let empty = sched::ClusterSnapshot::default();
    let snapshot = cluster.unwrap_or(&empty);
    let parsed = crate::from_wire::cluster(snapshot)?;
    let options = Options {
        interrupt,
        ..options(scheduling)
    };
    Ok(answer(snapshot, &parsed, options))
}
