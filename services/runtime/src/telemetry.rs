//! Logs, and OpenTelemetry traces across the services.
//!
//! ```text
//!   adapter  reconcile span ──(traceparent in gRPC metadata: inject_current)──▶
//!   scheduler / provider  TraceContextLayer: server span, child of the caller's
//!                         └── the handler's own spans (Solve, Create, ...)
//!   every process ──(batch, OTLP/gRPC)──▶ OTEL_EXPORTER_OTLP_ENDPOINT
//! ```
//!
//! Traces are off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED` is
//! not `true`; the service name is `OTEL_SERVICE_NAME`, else the service's
//! own. The exporter reads the other standard `OTEL_*` variables itself
//! (`OTEL_BSP_SCHEDULE_DELAY`, `OTEL_EXPORTER_OTLP_TIMEOUT`, ...). Off,
//! nothing is injected or exported and spans cost what logging costs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Keeps the trace exporter alive; dropping it sends the spans still
/// buffered (at the end of `main`).
#[must_use = "traces stop being exported when this is dropped"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("exporting the last traces failed: {error}");
        }
    }
}

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}

/// Whether the environment asks for traces.
fn traces_wanted() -> bool {
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled
        && (env_set("OTEL_EXPORTER_OTLP_ENDPOINT") || env_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The tracer provider exporting over OTLP/gRPC. Must run inside a tokio
/// runtime: the exporter's channel lives on it.
fn tracer_provider(service: &str) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .context("building the OTLP trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT)")?;
    let resource = if env_set("OTEL_SERVICE_NAME") {
        opentelemetry_sdk::Resource::builder().build()
    } else {
        opentelemetry_sdk::Resource::builder()
            .with_service_name(service.to_owned())
            .build()
    };
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Installs the global subscriber: logs to `writer` (JSON lines or text)
/// filtered by `filter`, and, when the environment asks, the same spans
/// exported as traces named `service`. Later calls do nothing (tests
/// start several services in one process).
pub(crate) fn install(
    service: &str,
    filter: &str,
    json: bool,
    writer: BoxMakeWriter,
) -> anyhow::Result<Telemetry> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let provider = if traces_wanted() {
        Some(tracer_provider(service)?)
    } else {
        None
    };
    let traces = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service.to_owned())));
    let (text, json_lines) = if json {
        (
            None,
            Some(tracing_subscriber::fmt::layer().json().with_writer(writer)),
        )
    } else {
        (
            Some(tracing_subscriber::fmt::layer().with_writer(writer)),
            None,
        )
    };
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json_lines)
        .with(traces)
        .try_init()
        .is_ok();
    if !installed {
        return Ok(Telemetry { provider: None });
    }
    if provider.is_some() {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    }
    Ok(Telemetry { provider })
}

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// Puts the current span's trace context into a gRPC request's metadata
/// (`traceparent`), so the peer's spans join the caller's trace.
pub fn inject_current(metadata: &mut tonic::metadata::MetadataMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut MetadataInjector(metadata));
    });
}

/// The trace a span belongs to, kept to continue it later from another
/// task (a NodeClaim created by provisioning, launched by its lifecycle).
#[derive(Clone, Debug)]
pub struct TraceParent(opentelemetry::Context);

impl TraceParent {
    /// The current span's trace; `None` when traces are off.
    pub fn current() -> Option<Self> {
        let context = tracing::Span::current().context();
        context
            .span()
            .span_context()
            .is_valid()
            .then_some(Self(context))
    }

    /// Makes `span` a child of this trace. Call before `span` is entered.
    pub fn adopt(&self, span: &tracing::Span) {
        let _ = span.set_parent(self.0.clone());
    }
}

/// Starts a span for every gRPC request, continuing the caller's trace
/// when the request carries one; the handler's spans are its children.
#[derive(Clone, Copy, Default)]
pub struct TraceContextLayer;

impl<S> tower::Layer<S> for TraceContextLayer {
    type Service = TraceContextService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceContextService { inner }
    }
}

#[derive(Clone)]
pub struct TraceContextService<S> {
    inner: S,
}

/// The span of one gRPC request to `path` (`/package.Service/Method`).
fn server_span(path: &str) -> tracing::Span {
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""));
    tracing::info_span!(
        "grpc.server",
        otel.name = %path.trim_start_matches('/'),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    )
}

impl<S, B, ResBody> tower::Service<http::Request<B>> for TraceContextService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let span = server_span(request.uri().path());
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&HeaderExtractor(request.headers()))
        });
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
        let future = span.in_scope(|| self.inner.call(request));
        Box::pin(future.instrument(span))
    }
}

/// A writer for [`install`]: `stdout`, `stderr` or a file (appended to).
pub(crate) fn writer(output: &str) -> anyhow::Result<BoxMakeWriter> {
    Ok(match output {
        "" | "stdout" => BoxMakeWriter::new(std::io::stdout),
        "stderr" => BoxMakeWriter::new(std::io::stderr),
        path => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening the log file {path}"))?;
            BoxMakeWriter::new(Arc::new(file))
        }
    })
}
