//! A tower layer that turns a panic in a gRPC handler into an INTERNAL
//! answer for that one call: the panic is logged and counted, the
//! connection and the server go on serving.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt as _;

use crate::metrics::Metrics;
use crate::middleware::{Inner, Middleware, ResponseFuture, layer};

#[derive(Clone)]
pub struct CatchPanicLayer {
    metrics: Arc<Metrics>,
}

impl CatchPanicLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

layer!(CatchPanicLayer);

/// The panic's message, when it is text.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

impl<S, B, ResBody> Middleware<S, B> for CatchPanicLayer
where
    S: Inner<B, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    fn call(&self, inner: &mut S, request: http::Request<B>) -> ResponseFuture<S, B> {
        let method = request.uri().path().to_owned();
        let metrics = self.metrics.clone();
        // A handler may panic while building its future, too.
        let future = match std::panic::catch_unwind(AssertUnwindSafe(|| inner.call(request))) {
            Ok(future) => future,
            Err(payload) => {
                let message = panic_message(payload.as_ref()).to_owned();
                return Box::pin(async move { Ok(internal(&metrics, &method, &message)) });
            }
        };
        Box::pin(async move {
            match AssertUnwindSafe(future).catch_unwind().await {
                Ok(result) => result,
                Err(payload) => Ok(internal(&metrics, &method, panic_message(payload.as_ref()))),
            }
        })
    }
}

fn internal<B: Default>(metrics: &Metrics, method: &str, message: &str) -> http::Response<B> {
    tracing::error!(
        method,
        panic = message,
        "a gRPC handler panicked; answering INTERNAL"
    );
    metrics.record_panic(method);
    tonic::Status::internal(format!(
        "the server failed while handling {method}; the failure is logged"
    ))
    .into_http()
}
