//! The runtime every service binary shares.
//!
//! ```text
//!   --listen ADDR (LISTEN_ADDR)            gRPC: the service itself
//!                                                + grpc.health.v1.Health
//!                                                + grpc.reflection.v1 / v1alpha
//!   --metrics-listen ADDR (METRICS_LISTEN_ADDR)
//!                                          HTTP: /metrics  (Prometheus text)
//!                                                /healthz  (process is up)
//!                                                /readyz   (gRPC is serving)
//!   --tls-cert/--tls-key [--tls-ca]        gRPC over TLS [mutual, with
//!   [--tls-client-allow NAMES]              an allow-list] ([`TlsArgs`])
//!   OTEL_EXPORTER_OTLP_ENDPOINT            traces over OTLP ([`telemetry`])
//! ```
//!
//! A service binary parses its flags and hands [`run_service`] its name, its
//! [`ServiceArgs`] and how to build its tonic `Routes`; it gets logs and
//! traces, a metrics registry named after it, health, reflection, request
//! metrics, graceful shutdown on SIGTERM / Ctrl-C, and a handler that panics
//! answering INTERNAL for that call while the server keeps serving, without
//! writing any of it. Services register their own metrics with [`Metrics::counter`] and
//! friends.

#![forbid(unsafe_code)]

pub mod build_info;
mod metrics;
mod middleware;
mod panics;
pub mod telemetry;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
pub use metrics::{GrpcMetricsLayer, Metrics};
pub use panics::CatchPanicLayer;
pub use telemetry::{Telemetry, TraceContextLayer};
pub use tls::{
    ADAPTER_IDENTITY, AdmitLayer, ClientTls, PeerIdentity, RECHECK_EVERY as TLS_RECHECK_EVERY,
    ServerTls, TlsArgs,
};
use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic_health::ServingStatus;

/// Flags every service binary takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ServiceArgs {
    /// Address the gRPC server listens on.
    #[arg(long = "listen", env = "LISTEN_ADDR", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Address the HTTP server for /metrics, /healthz and /readyz listens on.
    #[arg(
        long = "metrics-listen",
        env = "METRICS_LISTEN_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_listen: SocketAddr,
    /// Log filter (tracing-subscriber EnvFilter syntax), e.g. "info,karpenter=debug".
    #[arg(long = "log-level", env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log as JSON lines, as Karpenter does (`false` for text).
    #[arg(long = "log-json", env = "LOG_JSON", default_value_t = true, action = clap::ArgAction::Set)]
    pub log_json: bool,
    /// TLS of the gRPC server (off without flags).
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// Installs the global tracing subscriber, logging to standard error, and
/// exporting traces named `service` when the environment asks
/// ([`telemetry`]). Safe to call more than once (the later calls do
/// nothing), so tests can start several services. Keep the answer until
/// the process ends.
pub fn init_tracing(service: &str, filter: &str, json: bool) -> anyhow::Result<Telemetry> {
    telemetry::install(service, filter, json, telemetry::writer("stderr")?)
}

/// [`init_tracing`] writing the logs to `output`: `stdout`, `stderr` or a
/// file path (appended to), as Karpenter's `LOG_OUTPUT_PATHS` names it.
pub fn init_tracing_output(
    service: &str,
    filter: &str,
    json: bool,
    output: &str,
) -> anyhow::Result<Telemetry> {
    telemetry::install(service, filter, json, telemetry::writer(output)?)
}

/// Bound listeners, so a caller that asked for port 0 learns the real ports
/// before serving (tests do this).
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: TcpListener,
    /// The gRPC server's TLS, when the flags ask for it.
    pub tls: Option<Arc<ServerTls>>,
}

impl Listeners {
    pub async fn bind(args: &ServiceArgs) -> anyhow::Result<Self> {
        let grpc = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding gRPC listener on {}", args.listen))?;
        let http = TcpListener::bind(args.metrics_listen)
            .await
            .with_context(|| format!("binding metrics listener on {}", args.metrics_listen))?;
        let tls = args.tls.server()?;
        Ok(Self { grpc, http, tls })
    }

    pub fn grpc_addr(&self) -> std::io::Result<SocketAddr> {
        self.grpc.local_addr()
    }

    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        self.http.local_addr()
    }
}

/// What a service registers: its gRPC routes and the fully qualified names of
/// the services in them, which are reported SERVING on the health service.
pub struct Service {
    pub routes: Routes,
    pub names: Vec<&'static str>,
    pub metrics: Arc<Metrics>,
}

/// Whether a process is ready to serve (what `/readyz` answers).
pub type Readiness = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    ready: Readiness,
}

/// Serves `/metrics`, `/healthz` and `/readyz` (200 while `ready` says
/// so, 503 otherwise) on `listener` until `shutdown` resolves. Services
/// without a gRPC server of their own (the adapter) use this alone.
pub async fn serve_http(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Readiness,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = axum::Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz_handler))
        .with_state(HttpState { metrics, ready });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("metrics server failed")
}

/// Longest any unary call may take on the server (above the adapter's
/// longest deadline, Create's 120 s); a call still running then is ended
/// with DEADLINE_EXCEEDED. Streams (interruptions) are not cut: the limit
/// covers the handler's answer, not the stream it returns.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);
/// Calls one connection runs at once; more wait their turn.
pub const CALLS_PER_CONNECTION: usize = 256;
/// HTTP/2 streams one connection may have open at once.
pub const STREAMS_PER_CONNECTION: u32 = 256;
/// How often an idle connection is pinged (HTTP/2 and TCP keep-alive), so
/// a peer that vanished without closing is noticed.
pub const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is closed.
pub const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long open calls may finish once shutdown begins.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves the service until `shutdown` resolves: gRPC with health and
/// reflection on one listener, metrics and probes over HTTP on the other.
pub async fn serve_with_shutdown(
    listeners: Listeners,
    service: Service,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    for name in &service.names {
        health_reporter
            .set_service_status(*name, ServingStatus::Serving)
            .await;
    }
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(karpenter_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("building the gRPC reflection service")?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(karpenter_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .context("building the gRPC reflection service")?;

    let ready = Arc::new(AtomicBool::new(false));
    let readiness: Readiness = {
        let ready = ready.clone();
        Arc::new(move || ready.load(Ordering::SeqCst))
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });

    let mut http_stop = stop_rx.clone();
    let http = tokio::spawn(serve_http(
        listeners.http,
        service.metrics.clone(),
        readiness,
        async move {
            let _ = http_stop.wait_for(|stopped| *stopped).await;
        },
    ));

    let routes = service
        .routes
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    ready.store(true, Ordering::SeqCst);
    let mut grpc_stop = stop_rx.clone();
    let router = tonic::transport::Server::builder()
        .timeout(CALL_TIMEOUT)
        .concurrency_limit_per_connection(CALLS_PER_CONNECTION)
        .max_concurrent_streams(Some(STREAMS_PER_CONNECTION))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_keepalive(Some(KEEPALIVE_INTERVAL))
        .layer(TraceContextLayer)
        .layer(GrpcMetricsLayer::new(service.metrics.clone()))
        .layer(AdmitLayer)
        .layer(CatchPanicLayer::new(service.metrics.clone()))
        .add_routes(routes);
    let stopped = async move {
        let _ = grpc_stop.wait_for(|stopped| *stopped).await;
    };
    // TLS handshakes are done by the runtime (certificates reloaded, the
    // client's name judged), tonic serves what they produce.
    let server: std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), tonic::transport::Error>> + Send>,
    > = match listeners.tls {
        Some(tls) => {
            Box::pin(router.serve_with_incoming_shutdown(tls.incoming(listeners.grpc), stopped))
        }
        None => Box::pin(router.serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listeners.grpc),
            stopped,
        )),
    };
    // Graceful shutdown waits for open calls, and a server-streaming call
    // (interruptions) stays open as long as its client wants: after the
    // grace period the remaining connections are closed.
    let mut deadline_stop = stop_rx;
    let deadline = async move {
        let _ = deadline_stop.wait_for(|stopped| *stopped).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let grpc_result = tokio::select! {
        result = server => result,
        () = deadline => {
            tracing::info!(grace = ?SHUTDOWN_GRACE, "calls still open after the shutdown grace period; closing them");
            Ok(())
        }
    };
    ready.store(false, Ordering::SeqCst);
    for name in &service.names {
        health_reporter
            .set_service_status(*name, ServingStatus::NotServing)
            .await;
    }
    grpc_result.context("gRPC server failed")?;
    http.await.context("metrics server task failed")??;
    Ok(())
}

/// A gRPC service binary's life after its flags are parsed: logs and traces
/// as `args` say (the spans named `name`), the service `build` makes with a
/// metrics registry prefixed `name` (dashes as underscores, so
/// `karpenter-scheduler` counts `karpenter_scheduler_*`), served until
/// SIGTERM or Ctrl-C. The one start-up sequence every service shares;
/// `build` is where a service checks its own flags.
pub async fn run_service<F, Fut>(name: &str, args: &ServiceArgs, build: F) -> anyhow::Result<()>
where
    F: FnOnce(Arc<Metrics>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Service>>,
{
    let _telemetry = init_tracing(name, &args.log_level, args.log_json)?;
    let metrics = Metrics::new(&name.replace('-', "_"));
    let service = build(metrics).await?;
    serve(args, service).await
}

/// Binds the listeners and serves until SIGTERM or Ctrl-C.
pub async fn serve(args: &ServiceArgs, service: Service) -> anyhow::Result<()> {
    let listeners = Listeners::bind(args).await?;
    tracing::info!(
        grpc = %listeners.grpc_addr()?,
        metrics = %listeners.http_addr()?,
        services = ?service.names,
        "serving"
    );
    serve_with_shutdown(listeners, service, shutdown_signal()).await
}

/// Resolves on SIGTERM (what Kubernetes sends) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

/// What the page is: prometheus-client writes OpenMetrics text (counters
/// declared by their family name, samples in `_total`, a closing `# EOF`),
/// which Prometheus parses as such only when told.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics_handler(
    State(state): State<HttpState>,
) -> (
    StatusCode,
    [(http::header::HeaderName, &'static str); 1],
    axum::body::Body,
) {
    let content_type = [(http::header::CONTENT_TYPE, METRICS_CONTENT_TYPE)];
    match state.metrics.encode_chunks() {
        Ok(chunks) => {
            let pieces = chunks.into_iter().map(Ok::<_, std::convert::Infallible>);
            let body = axum::body::Body::from_stream(futures_util::stream::iter(pieces));
            (StatusCode::OK, content_type, body)
        }
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            content_type,
            axum::body::Body::from(format!("encoding metrics: {error}")),
        ),
    }
}

async fn readyz_handler(State(state): State<HttpState>) -> (StatusCode, &'static str) {
    if (state.ready)() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
