//! A token bucket (client-go's QPS and burst): `rate` tokens a second, up
//! to `burst` at once. Pure: the caller passes the time.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Takes a token, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Option<Duration> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_requests_wait_for_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 3.0, start);
        assert_eq!(bucket.take(start), None);
        assert_eq!(bucket.take(start), None);
        assert_eq!(bucket.take(start), None);
        let wait = bucket.take(start).expect("the burst is spent");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(start + Duration::from_millis(100)), None);
    }
}
