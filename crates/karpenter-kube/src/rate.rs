//! A token bucket in front of the client's HTTP stack: `poll_ready` waits
//! until a token is there, so callers queue instead of overrunning the API
//! server (client-go's QPS and burst).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use karpenter_core::rate::TokenBucket;
use tokio::time::{Instant, Sleep};

/// Wraps a service in a token bucket shared by every clone.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    pub fn new(rate: f64, burst: f64) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(
                rate,
                burst,
                std::time::Instant::now(),
            ))),
        }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            permitted: false,
        }
    }
}

/// The rate-limited service.
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token is taken for the next call.
    permitted: bool,
}

impl<S, R> tower::Service<R> for RateLimit<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.permitted {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(Instant::now().into_std());
            match taken {
                None => self.permitted = true,
                Some(after) => self.wait = Some(Box::pin(tokio::time::sleep(after))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}
