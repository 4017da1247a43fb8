//! The scheduler service: `karpenter-planner-wire` served over gRPC.
//!
//! ```text
//!   gRPC Solve / PlanDisruption ──limits (size, deadline, concurrency)──▶ karpenter_planner_wire::requests
//!        │ bad field: INVALID_ARGUMENT + google.rpc.BadRequest(field path)
//! ```
//!
//! The tonic service runs each request off the I/O threads, under a
//! deadline and a bound on calls computing at once.
//!
//! It keeps no state between calls: every request carries the whole cluster
//! snapshot, so any number of replicas can answer.

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use karpenter_planner_wire::{plan_disruption_request_until, solve_request_until};
use karpenter_proto::convert::InvalidField;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::scheduler::v1::scheduler_server::{Scheduler, SchedulerServer};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// Default cap on a request. The benchmark shape's snapshot of 100,000
/// pending pods (Karpenter's scheduling benchmark, BENCHMARKS.md) is
/// 11.4 MiB on the wire and 150,000 pods 17.1 MiB
/// (`cargo bench -p karpenter-scheduler --bench solve -- --request-bytes`);
/// 64 MiB leaves room for pods carrying several times its labels and
/// constraints. What a request may cost once decoded is bounded apart
/// (`karpenter_proto::bounds`).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// Default longest a call may compute before it is interrupted.
pub const DEFAULT_MAX_CALL_SECONDS: f64 = 60.0;

/// Limits that keep one caller from holding the service.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest request accepted, in bytes.
    pub max_request_bytes: usize,
    /// Longest a call may compute (a shorter client deadline wins).
    pub max_call: Duration,
    /// Calls computing at once; the rest wait their turn (within their
    /// deadline).
    pub concurrent_calls: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_call: Duration::from_secs_f64(DEFAULT_MAX_CALL_SECONDS),
            concurrent_calls: std::thread::available_parallelism().map_or(2, usize::from),
        }
    }
}

#[derive(Clone)]
pub struct SchedulerMetrics {
    pub pods_scheduled: Counter,
    pub pods_unschedulable: Counter,
    pub node_claims_planned: Counter,
    pub disruption_commands: Counter,
    pub interrupted_calls: Counter,
}

#[derive(Clone)]
pub struct SchedulerService {
    metrics: Arc<SchedulerMetrics>,
    limits: Arc<Limits>,
    computing: Arc<Semaphore>,
}

impl SchedulerService {
    pub fn new(metrics: &karpenter_runtime::Metrics, limits: Limits) -> Self {
        let own = SchedulerMetrics {
            pods_scheduled: metrics.counter(
                "pods_placed",
                "Pending pods the scheduler placed on a node or a planned node claim",
            ),
            pods_unschedulable: metrics.counter(
                "pods_unschedulable",
                "Pending pods the scheduler could not place",
            ),
            node_claims_planned: metrics
                .counter("node_claims_planned", "Node claims the scheduler planned"),
            disruption_commands: metrics.counter(
                "disruption_commands",
                "Disruption commands the scheduler planned",
            ),
            interrupted_calls: metrics.counter(
                "interrupted_calls",
                "Calls stopped because their deadline passed",
            ),
        };
        Self {
            metrics: Arc::new(own),
            computing: Arc::new(Semaphore::new(limits.concurrent_calls.max(1))),
            limits: Arc::new(limits),
        }
    }

    pub fn into_server(self) -> SchedulerServer<Self> {
        let max = self.limits.max_request_bytes;
        SchedulerServer::new(self)
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    }

    /// Runs CPU-bound `work` off the I/O threads, at most
    /// `concurrent_calls` at once, and interrupts it when the call's
    /// deadline passes (the work stops at its next step; its answer is
    /// dropped and the caller gets DEADLINE_EXCEEDED).
    async fn compute<T: Send + 'static>(
        &self,
        deadline: Duration,
        work: impl FnOnce(Arc<AtomicBool>) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let deadline = tokio::time::Instant::now() + deadline;
        let interrupt = InterruptOnDrop(Arc::new(AtomicBool::new(false)));
        let flag = interrupt.0.clone();
        let exceeded = |metrics: &SchedulerMetrics| {
            metrics.interrupted_calls.inc();
            Status::deadline_exceeded("the call's deadline passed before planning finished")
        };
        let Ok(permit) =
            tokio::time::timeout_at(deadline, self.computing.clone().acquire_owned()).await
        else {
            return Err(exceeded(&self.metrics));
        };
        let permit = permit.map_err(|_| Status::unavailable("the scheduler is shutting down"))?;
        // The permit goes with the work: a call interrupted by its deadline
        // keeps its slot until the planner has noticed and stopped.
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work(flag)
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(joined) => {
                joined.map_err(|e| Status::internal(format!("planning task failed: {e}")))
            }
            Err(_) => {
                interrupt.0.store(true, Ordering::Relaxed);
                Err(exceeded(&self.metrics))
            }
        }
    }

    /// A planning call: the size of its `cluster` noted on the call's span
    /// (`pods` and `nodes`, where the span declares them), then `work` run
    /// on it as [`Self::compute`] runs it; a bad field is INVALID_ARGUMENT
    /// naming it.
    async fn plan<Req, Resp>(
        &self,
        request: Request<Req>,
        cluster: fn(&Req) -> Option<&sched::ClusterSnapshot>,
        work: fn(&Req, Option<Arc<AtomicBool>>) -> Result<Resp, InvalidField>,
    ) -> Result<Resp, Status>
    where
        Req: Send + 'static,
        Resp: Send + 'static,
    {
        let deadline = self.deadline(&request);
        let request = request.into_inner();
        if let Some(cluster) = cluster(&request) {
            let span = tracing::Span::current();
            span.record("pods", cluster.pending_pods.len());
            span.record("nodes", cluster.nodes.len());
        }
        self.compute(deadline, move |interrupt| work(&request, Some(interrupt)))
            .await?
            .map_err(|error| invalid_argument(&error))
    }

    /// The server's limit, or the client's deadline when it is shorter.
    fn deadline<T>(&self, request: &Request<T>) -> Duration {
        let client = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc_timeout);
        client.map_or(self.limits.max_call, |c| c.min(self.limits.max_call))
    }
}

/// Interrupts the planning when the call goes away before it finished
/// (the client disconnected, or the transport's own timeout dropped it).
struct InterruptOnDrop(Arc<AtomicBool>);

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A `grpc-timeout` header value (`10S`, `500m`, `1H`) as a duration.
pub fn grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.checked_mul(3600)?),
        "M" => Duration::from_secs(amount.checked_mul(60)?),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
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
        request: Request<sched::SolveRequest>,
    ) -> Result<Response<sched::SolveResponse>, Status> {
        let response = self
            .plan(request, |r| r.cluster.as_ref(), solve_request_until)
            .await?;
        let span = tracing::Span::current();
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
        request: Request<sched::PlanDisruptionRequest>,
    ) -> Result<Response<sched::PlanDisruptionResponse>, Status> {
        let response = self
            .plan(
                request,
                |r| r.cluster.as_ref(),
                plan_disruption_request_until,
            )
            .await?;
        let span = tracing::Span::current();
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
    limits: Limits,
) -> karpenter_runtime::Service {
    let server = SchedulerService::new(&metrics, limits).into_server();
    karpenter_runtime::Service {
        routes: tonic::service::Routes::new(server),
        names: vec!["karpenter.scheduler.v1.Scheduler"],
        metrics,
    }
}
