//! What provisioning remembers of each NodeClaim it created, for the
//! claim's launch: the trace it was created in (so the launch continues
//! it) and the pods planned onto it (so a launch that fails for lack of
//! capacity can tell them).
//!
//! ```text
//!   provisioning (reconcile span, Solve) ──creates claim N──▶ remember(N, pods)
//!   lifecycle of N ──launch span adopts N's trace──▶ Create in the provider
//!                  ──insufficient capacity──▶ an event on N's pods still pending
//! ```
//!
//! Provisioning and the lifecycle controller are different tasks, and a
//! claim reaches the second through the API server; this is carried beside
//! it in memory. After a restart, or once launched, a claim's launch starts
//! a trace of its own and knows no pods.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use karpenter_proto::scheduler::v1::PodRef;
use karpenter_runtime::telemetry::TraceParent;

/// Remembered claims older than this are forgotten: the claim was deleted
/// or launched by another replica.
const KEEP: Duration = Duration::from_secs(15 * 60);

/// The most pods remembered for one claim (a claim's pods are bounded by
/// its instance type's pod capacity; this only caps a pathological plan).
const MAX_PODS: usize = 1_000;

struct Created {
    trace: Option<TraceParent>,
    pods: Vec<PodRef>,
    at: Instant,
}

#[derive(Clone, Default)]
pub struct CreatedClaims {
    by_claim: Arc<Mutex<HashMap<String, Created>>>,
}

impl CreatedClaims {
    /// Remembers the claim `name`: the current span's trace (none while
    /// traces are off) and the pods planned onto it.
    pub fn remember(&self, name: &str, pods: &[PodRef]) {
        let now = Instant::now();
        let created = Created {
            trace: TraceParent::current(),
            pods: pods.iter().take(MAX_PODS).cloned().collect(),
            at: now,
        };
        let mut map = self.by_claim.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, c| now.duration_since(c.at) < KEEP);
        map.insert(name.to_owned(), created);
    }

    /// The trace the claim `name` was created in, if remembered.
    pub fn of(&self, name: &str) -> Option<TraceParent> {
        let map = self.by_claim.lock().unwrap_or_else(|p| p.into_inner());
        map.get(name).and_then(|c| c.trace.clone())
    }

    /// The pods planned onto the claim `name`, if remembered.
    pub fn pods_of(&self, name: &str) -> Vec<PodRef> {
        let map = self.by_claim.lock().unwrap_or_else(|p| p.into_inner());
        map.get(name).map(|c| c.pods.clone()).unwrap_or_default()
    }

    /// Forgets the claim `name` (launched or gone).
    pub fn forget(&self, name: &str) {
        let mut map = self.by_claim.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(name);
    }
}
