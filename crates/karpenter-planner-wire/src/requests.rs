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
    let empty = sched::ClusterSnapshot::default();
    let snapshot = request.cluster.as_ref().unwrap_or(&empty);
    let parsed = crate::from_wire::cluster(snapshot)?;
    let options = Options {
        interrupt,
        ..options(request.options.as_ref())
    };
    let solution = karpenter_planner::solve::solve(&parsed.cluster, &options);
    Ok(solve_response(&solution, &parsed, snapshot))
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
    let empty = sched::ClusterSnapshot::default();
    let snapshot = request.cluster.as_ref().unwrap_or(&empty);
    let parsed = crate::from_wire::cluster(snapshot)?;
    let cluster = &parsed.cluster;
    let scheduling = Options {
        interrupt,
        ..options(request.options.as_ref())
    };
    let disruption = DisruptionOptions {
        spot_to_spot: request
            .options
            .as_ref()
            .and_then(|o| o.feature_gates.get("SpotToSpotConsolidation").copied())
            .unwrap_or(false),
    };
    let plan = karpenter_planner::disruption::plan(cluster, &scheduling, &disruption);
    Ok(plan_response(&plan, &parsed, snapshot))
}
