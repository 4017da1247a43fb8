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
//! own. Export is OTLP over gRPC (`http://` or `https://` with the system's
//! roots or `OTEL_EXPORTER_OTLP_CERTIFICATE`), uncompressed; another
//! protocol or compression is refused at start, naming the variable. The
//! exporter reads the other standard `OTEL_*` variables itself
//! (`OTEL_BSP_SCHEDULE_DELAY`, `OTEL_EXPORTER_OTLP_TIMEOUT`, headers, ...).
//! Off, nothing is injected or exported and spans cost what logging costs.

use std::sync::Arc;

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

use crate::middleware::{Inner, Middleware, ResponseFuture, layer};

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

/// Where and how spans are exported, read from the standard `OTEL_*`
/// variables. A trace-specific variable wins over the general one; an
/// empty value counts as unset (Helm templates often render one).
#[derive(Debug, PartialEq, Eq)]
struct ExporterConfig {
    endpoint: String,
    /// PEM file of the CA that signed the collector's certificate; the
    /// system's roots otherwise (https only).
    ca_file: Option<String>,
    /// `OTEL_SERVICE_NAME` is set: the SDK names the service from it.
    service_named: bool,
}

impl ExporterConfig {
    /// `None` when traces are off (no endpoint, or `OTEL_SDK_DISABLED`);
    /// an error naming the variable for what this exporter cannot do.
    fn from_env(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Self>> {
        let value = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let signal = |name: &str| {
            let traces = name.replace("OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_");
            value(&traces)
                .map(|v| (traces, v))
                .or_else(|| value(name).map(|v| (name.to_owned(), v)))
        };
        if value("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let Some((endpoint_var, endpoint)) = signal("OTEL_EXPORTER_OTLP_ENDPOINT") else {
            return Ok(None);
        };
        if let Some((name, protocol)) = signal("OTEL_EXPORTER_OTLP_PROTOCOL")
            && protocol != "grpc"
        {
            anyhow::bail!(
                "{name}={protocol}: the services export OTLP over gRPC only; set it to grpc or leave it unset"
            );
        }
        if let Some((name, compression)) = signal("OTEL_EXPORTER_OTLP_COMPRESSION")
            && compression != "none"
        {
            anyhow::bail!(
                "{name}={compression}: the services export traces uncompressed; set it to none or leave it unset"
            );
        }
        let uri: http::Uri = endpoint
            .parse()
            .with_context(|| format!("{endpoint_var}={endpoint}: not a URL"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            anyhow::bail!(
                "{endpoint_var}={endpoint}: expected http://host:port or https://host:port (the collector's OTLP/gRPC port, usually 4317)"
            );
        }
        Ok(Some(Self {
            endpoint,
            ca_file: signal("OTEL_EXPORTER_OTLP_CERTIFICATE").map(|(_, file)| file),
            service_named: value("OTEL_SERVICE_NAME").is_some(),
        }))
    }

    fn uses_tls(&self) -> bool {
        self.endpoint.starts_with("https:")
    }
}

/// The tracer provider exporting over OTLP/gRPC. Must run inside a tokio
/// runtime: the exporter's channel lives on it.
fn tracer_provider(service: &str, config: &ExporterConfig) -> anyhow::Result<SdkTracerProvider> {
    use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(config.endpoint.clone());
    if config.uses_tls() {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
        if let Some(file) = &config.ca_file {
            let pem = std::fs::read(file)
                .with_context(|| format!("reading OTEL_EXPORTER_OTLP_CERTIFICATE {file}"))?;
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        builder = builder.with_tls_config(tls);
    }
    let exporter = builder
        .build()
        .with_context(|| format!("building the OTLP trace exporter for {}", config.endpoint))?;
    let resource = if config.service_named {
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
/// filtered by `filter`, and, when the environment asks, spans at info and
/// above exported as traces named `service` whatever the log level (a
/// quiet log must not silence the traces). Later calls do nothing (tests
/// start several services in one process).
pub(crate) fn install(
    service: &str,
    filter: &str,
    json: bool,
    writer: BoxMakeWriter,
) -> anyhow::Result<Telemetry> {
    use tracing_subscriber::Layer as _;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let provider = match ExporterConfig::from_env(|name| std::env::var(name).ok())? {
        Some(config) => Some(tracer_provider(service, &config)?),
        None => None,
    };
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(service.to_owned()))
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    });
    let logs = if json {
        // `message` and the event's fields at the top level, as in
        // Karpenter's lines, so log queries written for it find them.
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(writer)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer().with_writer(writer).boxed()
    };
    let installed = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
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

layer!(TraceContextLayer);

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

impl<S: Inner<B>, B> Middleware<S, B> for TraceContextLayer {
    fn call(&self, inner: &mut S, request: http::Request<B>) -> ResponseFuture<S, B> {
        let span = server_span(request.uri().path());
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&HeaderExtractor(request.headers()))
        });
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
        let future = span.in_scope(|| inner.call(request));
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

#[cfg(test)]
mod tests {
    use super::ExporterConfig;

    fn config(vars: &[(&str, &str)]) -> anyhow::Result<Option<ExporterConfig>> {
        ExporterConfig::from_env(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    fn endpoint(vars: &[(&str, &str)]) -> Option<String> {
        config(vars).expect("accepted").map(|c| c.endpoint)
    }

    #[test]
    fn traces_are_off_without_an_endpoint_or_when_disabled() {
        assert_eq!(endpoint(&[]), None);
        assert_eq!(endpoint(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]), None);
        assert_eq!(
            endpoint(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_SDK_DISABLED", "TRUE"),
            ]),
            None
        );
    }

    #[test]
    fn the_trace_endpoint_wins_unless_it_is_empty() {
        let general = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317");
        assert_eq!(
            endpoint(&[
                general,
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces:4317")
            ]),
            Some("https://traces:4317".into())
        );
        assert_eq!(
            endpoint(&[general, ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")]),
            Some("http://collector:4317".into())
        );
    }

    #[test]
    fn what_the_exporter_cannot_do_is_refused_naming_the_variable() {
        let general = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317");
        for (vars, named) in [
            (
                vec![general, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")],
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
            ),
            (
                vec![general, ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")],
                "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=gzip",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")],
                "OTEL_EXPORTER_OTLP_ENDPOINT=collector:4317",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector")],
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=ftp://collector",
            ),
        ] {
            let error = config(&vars).expect_err("refused").to_string();
            assert!(error.contains(named), "{error}");
        }
        assert!(
            config(&[general, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])
                .expect("grpc")
                .is_some()
        );
    }

    #[test]
    fn a_collector_ca_applies_to_https() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/otel/ca.pem"),
        ])
        .expect("accepted")
        .expect("on");
        assert!(c.uses_tls());
        assert_eq!(c.ca_file.as_deref(), Some("/etc/otel/ca.pem"));
    }
}
