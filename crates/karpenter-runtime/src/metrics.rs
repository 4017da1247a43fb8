//! Prometheus metrics: a registry the service adds its own metrics to, and a
//! tower layer that counts every gRPC call and times it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::middleware::{Inner, Middleware, ResponseFuture, layer};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodCodeLabels {
    pub method: String,
    pub code: String,
}

/// The service's metric registry plus the gRPC request metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Metrics under names of their own (controller-runtime's and
    /// client-go's, which dashboards read without the service's prefix).
    unprefixed: Mutex<Registry>,
    requests: Family<MethodCodeLabels, Counter>,
    durations: Family<MethodLabels, Histogram>,
    panics: Family<MethodLabels, Counter>,
}

impl Metrics {
    /// A registry whose metrics are prefixed with `prefix` (e.g. "karpenter_scheduler").
    pub fn new(prefix: &str) -> Arc<Self> {
        let mut registry = Registry::with_prefix(prefix);
        let requests = Family::<MethodCodeLabels, Counter>::default();
        let durations = Family::<MethodLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "grpc_requests",
            "gRPC requests handled, by method and status code",
            requests.clone(),
        );
        registry.register(
            "grpc_request_duration_seconds",
            "Time to answer a gRPC request, by method",
            durations.clone(),
        );
        let build_info = Family::<crate::build_info::BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&crate::build_info::BuildLabels::of_this_binary())
            .set(1);
        registry.register(
            "build_info",
            "A metric with a constant '1' value labeled by version from which the service was built",
            build_info,
        );
        let panics = Family::<MethodLabels, Counter>::default();
        registry.register(
            "grpc_handler_panics",
            "gRPC calls whose handler panicked (answered INTERNAL), by method",
            panics.clone(),
        );
        Arc::new(Self {
            registry: Mutex::new(registry),
            unprefixed: Mutex::new(Registry::default()),
            requests,
            durations,
            panics,
        })
    }

    /// A counter registered under `name` (prefixed with the service's prefix).
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        let counter = Counter::default();
        self.with_registry(|registry| registry.register(name, help, counter.clone()));
        counter
    }

    /// A gauge registered under `name`.
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        let gauge = Gauge::default();
        self.with_registry(|registry| registry.register(name, help, gauge.clone()));
        gauge
    }

    /// A histogram of seconds (0.5 ms to about 16 s) registered under `name`.
    pub fn seconds_histogram(&self, name: &str, help: &str) -> Histogram {
        let histogram = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        self.with_registry(|registry| registry.register(name, help, histogram.clone()));
        histogram
    }

    pub(crate) fn record_panic(&self, method: &str) {
        self.panics
            .get_or_create(&MethodLabels {
                method: method.to_owned(),
            })
            .inc();
    }

    /// Lets a service register its own metrics.
    pub fn with_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut registry)
    }

    /// Lets a service register metrics under names without its prefix.
    pub fn with_unprefixed_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        let mut registry = self
            .unprefixed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut registry)
    }

    /// The metrics page, whole (for tests and small pages).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        Ok(self.encode_chunks()?.concat())
    }

    /// The metrics page in pieces of about [`PAGE_CHUNK`] bytes, as the
    /// HTTP handler streams it. A page of thousands of nodes' series is
    /// megabytes: one buffer grown by doubling held the old and the new
    /// copy at once, and allocations that large are the ones an allocator
    /// keeps as resident memory; pieces of one size are reused scrape
    /// after scrape.
    pub fn encode_chunks(&self) -> Result<Vec<String>, std::fmt::Error> {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut page = ChunkedPage::default();
        for registry in [&self.registry, &self.unprefixed] {
            let registry = registry
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            encode_registry(&mut page, &registry)?;
        }
        encode_eof(&mut page)?;
        Ok(page.finish())
    }

    fn record(&self, method: &str, code: &str, seconds: f64) {
        self.requests
            .get_or_create(&MethodCodeLabels {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .inc();
        self.durations
            .get_or_create(&MethodLabels {
                method: method.to_owned(),
            })
            .observe(seconds);
    }
}

/// How large a piece of the metrics page is.
pub const PAGE_CHUNK: usize = 64 * 1024;

/// A text page written in pieces of about [`PAGE_CHUNK`] bytes.
#[derive(Default)]
struct ChunkedPage {
    done: Vec<String>,
    current: String,
}

impl std::fmt::Write for ChunkedPage {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        if self.current.capacity() == 0 {
            self.current = String::with_capacity(PAGE_CHUNK);
        }
        self.current.push_str(text);
        if self.current.len() >= PAGE_CHUNK - 1024 {
            self.done.push(std::mem::take(&mut self.current));
        }
        Ok(())
    }
}

impl ChunkedPage {
    fn finish(mut self) -> Vec<String> {
        if !self.current.is_empty() {
            self.done.push(self.current);
        }
        self.done
    }
}

/// Records, for every gRPC request, its method, its status code (as sent in
/// the response headers; "0" when the status comes in the trailers, which
/// tonic does for successful unary calls) and the time to the response head.
#[derive(Clone)]
pub struct GrpcMetricsLayer {
    metrics: Arc<Metrics>,
}

impl GrpcMetricsLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

layer!(GrpcMetricsLayer);

impl<S, B, ResBody> Middleware<S, B> for GrpcMetricsLayer
where
    S: Inner<B, Response = http::Response<ResBody>>,
{
    fn call(&self, inner: &mut S, request: http::Request<B>) -> ResponseFuture<S, B> {
        let method = request.uri().path().to_owned();
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let future = inner.call(request);
        Box::pin(async move {
            let result = future.await;
            let code = match &result {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("0")
                    .to_owned(),
                Err(_) => "transport-error".to_owned(),
            };
            metrics.record(&method, &code, started.elapsed().as_secs_f64());
            result
        })
    }
}
