//! The trace each NodeClaim was created in, so its launch continues it.
//!
//! ```text
//!   provisioning (reconcile span, Solve) ──creates claim N──▶ remember(N)
//!   lifecycle of N ──launch span adopts N's trace──▶ Create in the provider
//! ```
//!
//! Provisioning and the lifecycle controller are different tasks, and a
//! claim reaches the second through the API server; the trace is carried
//! beside it in memory. After a restart, or once launched, a claim's
//! launch starts a trace of its own. Empty while traces are off.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use karpenter_runtime::telemetry::TraceParent;

/// Remembered traces older than this are forgotten: the claim was deleted
/// or launched by another replica.
const KEEP: Duration = Duration::from_secs(15 * 60);

#[derive(Clone, Default)]
pub struct ClaimTraces {
    by_claim: Arc<Mutex<HashMap<String, (TraceParent, Instant)>>>,
}

impl ClaimTraces {
    /// Remembers the current span's trace for the claim `name`.
    pub fn remember(&self, name: &str) {
        let Some(parent) = TraceParent::current() else {
            return;
        };
        let now = Instant::now();
        let mut map = self.by_claim.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, (_, at)| now.duration_since(*at) < KEEP);
        map.insert(name.to_owned(), (parent, now));
    }

    /// The trace the claim `name` was created in, if remembered.
    pub fn of(&self, name: &str) -> Option<TraceParent> {
        let map = self.by_claim.lock().unwrap_or_else(|p| p.into_inner());
        map.get(name).map(|(parent, _)| parent.clone())
    }

    /// Forgets the claim `name` (launched or gone).
    pub fn forget(&self, name: &str) {
        let mut map = self.by_claim.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(name);
    }
}
