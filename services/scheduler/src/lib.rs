//! The scheduler service: the wire edge of `karpenter-planner`.
//!
//! ```text
//!   SolveRequest ──from_wire──▶ planner model::Cluster ──solve──▶ Solution ──to_wire──▶ SolveResponse
//!   PlanDisruptionRequest ──from_wire──▶ Cluster ──disruption::plan──▶ plan ──to_wire──▶ response
//!        │ bad field: INVALID_ARGUMENT + google.rpc.BadRequest(field path)
//! ```
//!
//! [`solve_request`] and [`plan_disruption_request`] are the whole path
//! in-process (what `karpctl plan` uses without `--scheduler`); the tonic
//! service runs them off the I/O threads.
//!
//! It keeps no state between calls: every request carries the whole cluster
//! snapshot, so any number of replicas can answer.

#![forbid(unsafe_code)]

pub mod from_wire;
pub mod to_wire;

use std::sync::Arc;

use karpenter_proto::convert::InvalidField;
use karpenter_proto::scheduler::v1 as pb;
use karpenter_proto::scheduler::v1::scheduler_server::{Scheduler, SchedulerServer};
use prometheus_client::metrics::counter::Counter;
pub use to_wire::{plan_disruption_request, solve_request};
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// Default cap on a request: a 20,000-pod snapshot is about 20 MB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 256 * 1024 * 1024;

#[derive(Clone, Default)]
pub struct SchedulerMetrics {
    pub pods_scheduled: Counter,
    pub pods_unschedulable: Counter,
    pub node_claims_planned: Counter,
    pub disruption_commands: Counter,
}

#[derive(Clone)]
pub struct SchedulerService {
    metrics: Arc<SchedulerMetrics>,
}

impl SchedulerService {
    pub fn new(metrics: &karpenter_runtime::Metrics) -> Self {
        let own = SchedulerMetrics::default();
        metrics.with_registry(|registry| {
            registry.register(
                "pods_placed",
                "Pending pods the scheduler placed on a node or a planned node claim",
                own.pods_scheduled.clone(),
            );
            registry.register(
                "pods_unschedulable",
                "Pending pods the scheduler could not place",
                own.pods_unschedulable.clone(),
            );
            registry.register(
                "node_claims_planned",
                "Node claims the scheduler planned",
                own.node_claims_planned.clone(),
            );
            registry.register(
                "disruption_commands",
                "Disruption commands the scheduler planned",
                own.disruption_commands.clone(),
            );
        });
        Self {
            metrics: Arc::new(own),
        }
    }

    pub fn into_server(self, max_request_bytes: usize) -> SchedulerServer<Self> {
        SchedulerServer::new(self)
            .max_decoding_message_size(max_request_bytes)
            .max_encoding_message_size(max_request_bytes)
    }
}

/// INVALID_ARGUMENT with the field path as a google.rpc.BadRequest, so
/// clients in any language can point at the field.
pub fn invalid_argument(error: &InvalidField) -> Status {
    let details =
        ErrorDetails::with_bad_request_violation(error.field.clone(), error.message.clone());
    Status::with_error_details(tonic::Code::InvalidArgument, error.to_string(), details)
}

#[tonic::async_trait]
impl Scheduler for SchedulerService {
    #[tracing::instrument(name = "Solve", skip_all, fields(
        pods = tracing::field::Empty,
        nodes = tracing::field::Empty,
        node_claims = tracing::field::Empty,
        unschedulable = tracing::field::Empty,
    ))]
    async fn solve(
        &self,
        request: Request<pb::SolveRequest>,
    ) -> Result<Response<pb::SolveResponse>, Status> {
        let request = request.into_inner();
        let span = tracing::Span::current();
        if let Some(cluster) = &request.cluster {
            span.record("pods", cluster.pending_pods.len());
            span.record("nodes", cluster.nodes.len());
        }
        // Solving is CPU-bound: keep it off the I/O threads.
        let result = tokio::task::spawn_blocking(move || solve_request(&request))
            .await
            .map_err(|e| Status::internal(format!("solver task failed: {e}")))?;
        let response = result.map_err(|error| invalid_argument(&error))?;
        span.record("node_claims", response.node_claims.len());
        span.record("unschedulable", response.unschedulable.len());
        let placed: usize = response
            .node_claims
            .iter()
            .map(|c| c.pods.len())
            .sum::<usize>()
            + response
                .existing_nodes
                .iter()
                .map(|n| n.pods.len())
                .sum::<usize>();
        self.metrics.pods_scheduled.inc_by(placed as u64);
        self.metrics
            .pods_unschedulable
            .inc_by(response.unschedulable.len() as u64);
        self.metrics
            .node_claims_planned
            .inc_by(response.node_claims.len() as u64);
        tracing::info!("solved");
        Ok(Response::new(response))
    }

    #[tracing::instrument(name = "PlanDisruption", skip_all, fields(
        nodes = tracing::field::Empty,
        commands = tracing::field::Empty,
        blocked = tracing::field::Empty,
    ))]
    async fn plan_disruption(
        &self,
        request: Request<pb::PlanDisruptionRequest>,
    ) -> Result<Response<pb::PlanDisruptionResponse>, Status> {
        let request = request.into_inner();
        let span = tracing::Span::current();
        if let Some(cluster) = &request.cluster {
            span.record("nodes", cluster.nodes.len());
        }
        let result = tokio::task::spawn_blocking(move || plan_disruption_request(&request))
            .await
            .map_err(|e| Status::internal(format!("disruption planner task failed: {e}")))?;
        let response = result.map_err(|error| invalid_argument(&error))?;
        span.record("commands", response.commands.len());
        span.record("blocked", response.blocked.len());
        self.metrics
            .disruption_commands
            .inc_by(response.commands.len() as u64);
        tracing::info!("planned disruption");
        Ok(Response::new(response))
    }
}

/// The routes of the service, for `karpenter_runtime::serve`.
pub fn service(
    metrics: Arc<karpenter_runtime::Metrics>,
    max_request_bytes: usize,
) -> karpenter_runtime::Service {
    let server = SchedulerService::new(&metrics).into_server(max_request_bytes);
    karpenter_runtime::Service {
        routes: tonic::service::Routes::new(server),
        names: vec!["karpenter.scheduler.v1.Scheduler"],
        metrics,
    }
}
