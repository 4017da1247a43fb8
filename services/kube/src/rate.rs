//! A token bucket in front of the client's HTTP stack: `poll_ready` waits
//! until a token is there, so callers queue instead of overrunning the API
//! server (client-go's QPS and burst).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        let refill = now.duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

/// Wraps a service in a token bucket shared by every clone.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<Bucket>>,
}

impl RateLimitLayer {
    pub fn new(rate: f64, burst: f64) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(Bucket {
                rate,
                burst,
                tokens: burst,
                at: Instant::now(),
            })),
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
    bucket: Arc<Mutex<Bucket>>,
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
                .take(Instant::now());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_requests_wait_for_the_rate() {
        let start = Instant::now();
        let mut bucket = Bucket {
            rate: 10.0,
            burst: 3.0,
            tokens: 3.0,
            at: start,
        };
        assert_eq!(bucket.take(start), None);
        assert_eq!(bucket.take(start), None);
        assert_eq!(bucket.take(start), None);
        let wait = bucket.take(start).expect("the burst is spent");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(start + Duration::from_millis(100)), None);
    }
}
