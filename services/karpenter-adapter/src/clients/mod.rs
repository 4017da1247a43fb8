//! The adapter's two gRPC peers: the scheduler and the cloud provider.
//!
//! Every call has a deadline; calls that failed for a reason worth another
//! try (the peer is down, restarting or slow) are retried a few times with
//! exponential backoff, then the error goes back to the controller, whose
//! next pass tries again. A call is never retried after an answer that
//! means "no" (invalid argument, insufficient capacity, not found).

mod encoded;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use karpenter_proto::provider::v1 as pv;
use karpenter_proto::provider::v1::cloud_provider_client::CloudProviderClient;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_runtime::ClientTls;
use karpenter_snapshot::{Built, ClusterRequest};
use tonic::codegen::Bytes;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::metrics::{AdapterMetrics, ProviderCallLabels, ProviderErrorLabels};

const SOLVE: &str = "/karpenter.scheduler.v1.Scheduler/Solve";
const PLAN_DISRUPTION: &str = "/karpenter.scheduler.v1.Scheduler/PlanDisruption";

/// Requests larger than this are refused by the scheduler anyway.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// How long one call may take.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    pub solve: Duration,
    pub provider: Duration,
    /// `Create` waits for the cloud to start an instance.
    pub create: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            solve: Duration::from_secs(60),
            provider: Duration::from_secs(30),
            create: Duration::from_secs(120),
        }
    }
}

/// Whether an error is the peer being unavailable (worth retrying), not
/// an answer.
pub fn transient(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::Unknown
    ) || (status.code() == Code::Internal && status.message().contains("transport"))
}

/// `request` with `built`'s snapshot as its cluster, encoded.
fn encode<R: ClusterRequest>(built: Built, request: &R) -> Result<Bytes, Status> {
    built
        .encode_request(request)
        .map(Bytes::from)
        .map_err(|e| Status::internal(format!("encoding the scheduler request: {e}")))
}

/// Runs `call` until it answers, at most `attempts` times, waiting
/// 200 ms, 400 ms, ... between transient failures.
pub async fn with_retry<T, F, Fut>(attempts: u32, mut call: F) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut wait = Duration::from_millis(200);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(status) if attempt < attempts && transient(&status) => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
                attempt += 1;
            }
            Err(status) => return Err(status),
        }
    }
}

/// Where a peer is.
#[derive(Clone, Copy, Debug)]
pub struct Peer<'a> {
    /// `http://host:port`, or `https://host:port` with TLS.
    pub address: &'a str,
    /// The name its certificate must carry, if not the address's host.
    pub tls_server_name: Option<&'a str>,
}

/// A channel to `peer` that connects when first used: over TLS (each
/// connection with the certificate files as they are then) when `tls` is
/// given.
fn channel(peer: Peer<'_>, tls: Option<&Arc<ClientTls>>) -> anyhow::Result<Channel> {
    let endpoint = match tls {
        Some(_) => ClientTls::endpoint(peer.address)?,
        None => Endpoint::from_shared(peer.address.to_owned())
            .map_err(|error| anyhow::anyhow!("{:?} is not a URL: {error}", peer.address))?,
    };
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(5))
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    Ok(match tls {
        Some(tls) => tls.connect_lazy(&endpoint, peer.tls_server_name),
        None => endpoint.connect_lazy(),
    })
}

/// Both peers; cheap to clone.
#[derive(Clone)]
pub struct Clients {
    provider: CloudProviderClient<Channel>,
    scheduler_channel: Channel,
    provider_channel: Channel,
    pub deadlines: Deadlines,
    /// Whether each peer answered its last call (for /readyz).
    scheduler_up: Arc<AtomicBool>,
    provider_up: Arc<AtomicBool>,
    /// Karpenter's cloud provider call metrics, once the adapter has them,
    /// with the provider's name from `Info`.
    provider_metrics: Arc<OnceLock<(Arc<AdapterMetrics>, String)>>,
}

impl Clients {
    /// Clients that connect lazily: the adapter starts while its peers do.
    pub fn new(
        scheduler: Peer<'_>,
        provider: Peer<'_>,
        tls: Option<Arc<ClientTls>>,
    ) -> anyhow::Result<Self> {
        let scheduler_channel = channel(scheduler, tls.as_ref())
            .map_err(|error| error.context("the scheduler's address"))?;
        let provider_channel = channel(provider, tls.as_ref())
            .map_err(|error| error.context("the provider's address"))?;
        let provider = CloudProviderClient::new(provider_channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Self {
            provider,
            scheduler_channel,
            provider_channel,
            deadlines: Deadlines::default(),
            scheduler_up: Arc::new(AtomicBool::new(false)),
            provider_up: Arc::new(AtomicBool::new(false)),
            provider_metrics: Arc::new(OnceLock::new()),
        })
    }

    /// Times and counts the errors of every provider call from now on
    /// (`karpenter_cloudprovider_duration_seconds`, `_errors_total`),
    /// labelled with `provider` (the provider's name).
    pub fn measure_provider_calls(&self, metrics: Arc<AdapterMetrics>, provider: &str) {
        let _ = self.provider_metrics.set((metrics, provider.to_owned()));
    }

    /// Asks both peers' gRPC health service whether they serve, and
    /// records the answers (calls record theirs too).
    pub async fn probe(&self) {
        async fn serving(channel: Channel) -> bool {
            let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
            let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            });
            request.set_timeout(Duration::from_secs(5));
            health.check(request).await.is_ok_and(|r| {
                r.into_inner().status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
            })
        }
        let (scheduler, provider) = tokio::join!(
            serving(self.scheduler_channel.clone()),
            serving(self.provider_channel.clone())
        );
        self.scheduler_up.store(scheduler, Ordering::Relaxed);
        self.provider_up.store(provider, Ordering::Relaxed);
    }

    /// Whether (scheduler, provider) answered their last call or probe.
    pub fn up(&self) -> (bool, bool) {
        (
            self.scheduler_up.load(Ordering::Relaxed),
            self.provider_up.load(Ordering::Relaxed),
        )
    }

    fn note<T>(flag: &AtomicBool, result: &Result<T, Status>) {
        let down = matches!(result, Err(status) if transient(status));
        flag.store(!down, Ordering::Relaxed);
    }

    /// A request with its deadline and the current span's trace context.
    fn request<T>(message: T, deadline: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(deadline);
        karpenter_runtime::telemetry::inject_current(request.metadata_mut());
        request
    }

    /// Solve over `built`'s snapshot. The request (the whole cluster) is
    /// encoded once, its pods straight from the index's prepared ones
    /// ([`Built::encode_request`]); retries resend the same bytes rather
    /// than holding a copy of the snapshot.
    pub async fn solve(
        &self,
        built: Built,
        options: sched::SchedulingOptions,
    ) -> Result<sched::SolveResponse, Status> {
        let request = sched::SolveRequest {
            cluster: None,
            options: Some(options),
        };
        self.scheduler_call(SOLVE, encode(built, &request)?).await
    }

    /// PlanDisruption over `built`'s snapshot, encoded like [`Clients::solve`].
    pub async fn plan_disruption(
        &self,
        built: Built,
        options: sched::SchedulingOptions,
    ) -> Result<sched::PlanDisruptionResponse, Status> {
        let request = sched::PlanDisruptionRequest {
            cluster: None,
            options: Some(options),
        };
        self.scheduler_call(PLAN_DISRUPTION, encode(built, &request)?)
            .await
    }

    async fn scheduler_call<Resp>(&self, path: &'static str, body: Bytes) -> Result<Resp, Status>
    where
        Resp: prost::Message + Default + Send + 'static,
    {
        let deadline = self.deadlines.solve;
        let result = with_retry(3, || {
            let channel = self.scheduler_channel.clone();
            let request = Self::request(body.clone(), deadline);
            async move { encoded::unary(channel, path, request, MAX_MESSAGE_BYTES).await }
        })
        .await;
        Self::note(&self.scheduler_up, &result);
        result
    }

    /// One provider call with the provider deadline and retries, timed and
    /// its failure counted as Karpenter's cloud provider decorator does.
    async fn provider_call<Req, Resp, F, Fut>(
        &self,
        method: &'static str,
        message: Req,
        deadline: Duration,
        call: F,
    ) -> Result<Resp, Status>
    where
        Req: Clone,
        F: Fn(CloudProviderClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let started = std::time::Instant::now();
        let result = with_retry(3, || {
            call(
                self.provider.clone(),
                Self::request(message.clone(), deadline),
            )
        })
        .await
        .map(tonic::Response::into_inner);
        Self::note(&self.provider_up, &result);
        if let Some((metrics, provider)) = self.provider_metrics.get() {
            record_provider_call(metrics, provider, method, started, result.as_ref().err());
        }
        result
    }

    pub async fn info(&self) -> Result<pv::InfoResponse, Status> {
        self.provider_call(
            "Info",
            pv::InfoRequest {},
            self.deadlines.provider,
            |mut c, r| async move { c.info(r).await },
        )
        .await
    }

    pub async fn instance_types(
        &self,
        request: pv::GetInstanceTypesRequest,
    ) -> Result<Vec<types::InstanceType>, Status> {
        self.provider_call(
            "GetInstanceTypes",
            request,
            self.deadlines.provider,
            |mut c, r| async move { c.get_instance_types(r).await },
        )
        .await
        .map(|r| r.instance_types)
    }

    pub async fn create(&self, claim: pv::NodeClaim) -> Result<pv::Instance, Status> {
        let request = pv::CreateRequest {
            node_claim: Some(claim),
        };
        self.provider_call(
            "Create",
            request,
            self.deadlines.create,
            |mut c, r| async move { c.create(r).await },
        )
        .await?
        .instance
        .ok_or_else(|| Status::internal("the provider answered Create without an instance"))
    }

    /// Asks for the instance to be terminated and whether it is gone: the
    /// provider's NOT_FOUND to Delete, or a Get that finds it no more. A
    /// claim (finalization) or node (termination) is released only then.
    pub async fn terminate_instance(&self, provider_id: &str) -> crate::error::Result<bool> {
        let peer = crate::error::Error::peer;
        if self.delete(provider_id).await.map_err(peer("Delete"))? {
            return Ok(true);
        }
        Ok(self.get(provider_id).await.map_err(peer("Get"))?.is_none())
    }

    /// Terminates the instance; `Ok(true)` once it is gone (NOT_FOUND).
    pub async fn delete(&self, provider_id: &str) -> Result<bool, Status> {
        let request = pv::DeleteRequest {
            provider_id: provider_id.to_owned(),
        };
        let deleted = self
            .provider_call(
                "Delete",
                request,
                self.deadlines.provider,
                |mut c, r| async move { c.delete(r).await },
            )
            .await;
        Ok(unless_gone(deleted)?.is_none())
    }

    /// Reboots the instance in place (node repair); idempotent by
    /// `operation_id`.
    pub async fn reboot(&self, provider_id: &str, operation_id: &str) -> Result<(), Status> {
        let request = pv::RebootRequest {
            provider_id: provider_id.to_owned(),
            operation_id: operation_id.to_owned(),
        };
        self.provider_call(
            "Reboot",
            request,
            self.deadlines.provider,
            |mut c, r| async move { c.reboot(r).await },
        )
        .await
        .map(|_| ())
    }

    /// The instance, or `None` when it no longer exists.
    pub async fn get(&self, provider_id: &str) -> Result<Option<pv::Instance>, Status> {
        let request = pv::GetRequest {
            provider_id: provider_id.to_owned(),
        };
        let got = self
            .provider_call(
                "Get",
                request,
                self.deadlines.provider,
                |mut c, r| async move { c.get(r).await },
            )
            .await;
        Ok(unless_gone(got)?.and_then(|response| response.instance))
    }

    /// The provider's interruption stream (no deadline: it stays open).
    pub async fn watch_interruptions(
        &self,
    ) -> Result<tonic::Streaming<pv::InterruptionEvent>, Status> {
        let mut client = self.provider.clone();
        let result = client
            .watch_interruptions(pv::WatchInterruptionsRequest {})
            .await
            .map(tonic::Response::into_inner);
        Self::note(&self.provider_up, &result);
        result
    }

    /// Tells the provider an interruption was acted on.
    pub async fn acknowledge_interruption(&self, id: &str) -> Result<(), Status> {
        let request = pv::AcknowledgeInterruptionRequest { id: id.to_owned() };
        self.provider_call(
            "AcknowledgeInterruption",
            request,
            self.deadlines.provider,
            |mut c, r| async move { c.acknowledge_interruption(r).await },
        )
        .await
        .map(|_| ())
    }

    pub async fn list(&self) -> Result<Vec<pv::Instance>, Status> {
        self.provider_call(
            "List",
            pv::ListRequest {},
            self.deadlines.provider,
            |mut c, r| async move { c.list(r).await },
        )
        .await
        .map(|r| r.instances)
    }

    pub async fn resolve_node_class(
        &self,
        node_class: pv::NodeClass,
    ) -> Result<pv::ResolveNodeClassResponse, Status> {
        let request = pv::ResolveNodeClassRequest {
            node_class: Some(node_class),
        };
        self.provider_call(
            "ResolveNodeClass",
            request,
            self.deadlines.provider,
            |mut c, r| async move { c.resolve_node_class(r).await },
        )
        .await
    }

    pub async fn finalize_node_class(&self, node_class: pv::NodeClass) -> Result<(), Status> {
        let request = pv::FinalizeNodeClassRequest {
            node_class: Some(node_class),
        };
        self.provider_call(
            "FinalizeNodeClass",
            request,
            self.deadlines.provider,
            |mut c, r| async move { c.finalize_node_class(r).await },
        )
        .await
        .map(|_| ())
    }

    pub async fn is_drifted(&self, request: pv::IsDriftedRequest) -> Result<String, Status> {
        self.provider_call(
            "IsDrifted",
            request,
            self.deadlines.provider,
            |mut c, r| async move { c.is_drifted(r).await },
        )
        .await
        .map(|r| r.reason)
    }
}

/// Karpenter's cloud provider decorator: the call's time, and its failure
/// by Karpenter's error names (the provider answers with gRPC codes the
/// proto gives those meanings).
fn record_provider_call(
    metrics: &AdapterMetrics,
    provider: &str,
    method: &'static str,
    started: std::time::Instant,
    error: Option<&Status>,
) {
    let controller = crate::metrics::current_controller();
    let labels = ProviderCallLabels {
        controller: controller.to_owned(),
        method: method.to_owned(),
        provider: provider.to_owned(),
    };
    metrics
        .cloudprovider_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    if let Some(status) = error {
        // Karpenter's names for the answers its decorator recognizes, from
        // the calls that give them (the proto says which).
        let error = match (method, status.code()) {
            ("Get" | "Delete" | "Reboot", Code::NotFound) => "NodeClaimNotFoundError",
            ("Create", Code::ResourceExhausted) => "InsufficientCapacityError",
            ("Create", Code::FailedPrecondition) => "NodeClassNotReadyError",
            _ => "",
        };
        metrics
            .cloudprovider_errors
            .get_or_create(&ProviderErrorLabels {
                controller: labels.controller,
                method: labels.method,
                provider: labels.provider,
                error: error.to_owned(),
            })
            .inc();
    }
}

/// A call about one instance, with the provider's NOT_FOUND read as an
/// answer (`None`: the instance is gone) rather than a failure.
fn unless_gone<T>(answer: Result<T, Status>) -> Result<Option<T>, Status> {
    match answer {
        Ok(answer) => Ok(Some(answer)),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_and_answers_are_not() {
        let calls = AtomicU32::new(0);
        let result = with_retry(3, || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(Status::unavailable("restarting"))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(result.ok(), Some(2));
        let calls = AtomicU32::new(0);
        let result: Result<(), Status> = with_retry(3, || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(Status::resource_exhausted("no capacity")) }
        })
        .await;
        assert_eq!(result.map_err(|s| s.code()), Err(Code::ResourceExhausted));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "an answer is not retried");
    }
}
