//! `status.lastPodEventTime` on NodeClaims (Karpenter's
//! `nodeclaim.podevents`): the last time a pod was bound to the claim's
//! node, or one there went terminal, started terminating or left. The
//! consolidation clock (`consolidateAfter`) runs from it.
//!
//! ```text
//!   pods on the claim's node: {(uid, terminal, terminating)} changed? ──▶ lastPodEventTime = now
//!                                                   (not again within 10 s)
//! ```
//!
//! DaemonSet pods do not count. At start every claim with pods gets a fresh
//! time, as Karpenter's watch sees every pod once after a restart.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::objects::claim::elapsed;
use crate::objects::patch;
use crate::state::index::{Index, Key, PodEntry};
use crate::state::watch::Versions;

/// Pod events closer together than this move the time once.
pub const DEDUPE: Duration = Duration::from_secs(10);

/// What of a pod on the node counts as an event when it changes.
type PodState = (String, bool, bool);

fn pod_states(pods: &[Arc<PodEntry>]) -> BTreeSet<PodState> {
    pods.iter()
        .filter(|p| !p.owner_references().iter().any(|o| o.kind == "DaemonSet"))
        .map(|p| {
            (
                p.meta().uid.clone().unwrap_or_default(),
                p.is_terminal(),
                p.meta().deletion_timestamp.is_some(),
            )
        })
        .collect()
}

/// Whether the pods changed since last recorded (first sight: whether
/// there are any).
fn changed(before: Option<&BTreeSet<PodState>>, now: &BTreeSet<PodState>) -> bool {
    match before {
        None => !now.is_empty(),
        Some(before) => before != now,
    }
}

/// The pod-events controller; remembers what it last saw on each node.
pub struct PodEvents {
    pub ctx: Context,
    seen: Mutex<HashMap<String, BTreeSet<PodState>>>,
}

impl PodEvents {
    pub fn new(ctx: Context) -> Self {
        PodEvents {
            ctx,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, BTreeSet<PodState>>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self, claim: &str, now: &BTreeSet<PodState>) -> bool {
        changed(self.seen().get(claim), now)
    }

    fn record(&self, claim: &str, now: BTreeSet<PodState>) {
        self.seen().insert(claim.to_owned(), now);
    }
}

impl Reconciler for PodEvents {
    const NAME: &'static str = "nodeclaim.podevents";

    fn relevant(versions: &Versions) -> u64 {
        versions.pods + versions.node_claims
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        self.seen()
            .retain(|name, _| index.node_claims.named(name).is_some());
        self.ctx.claim_keys(index, |claim| {
            let node = claim.status.as_ref()?.node_name.as_deref()?;
            let states: Vec<String> = pod_states(index.pods_on(node))
                .into_iter()
                .map(|(uid, terminal, terminating)| format!("{uid}/{terminal}/{terminating}"))
                .collect();
            Some(fingerprint(states.iter().map(|s| Some(s.as_str()))))
        })
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(claim) = index.node_claims.named(&key.1).cloned() else {
            self.seen().remove(&key.1);
            return Ok(None);
        };
        let Some(node) = claim.status.as_ref().and_then(|s| s.node_name.clone()) else {
            return Ok(None);
        };
        let states = pod_states(index.pods_on(&node));
        if !self.changed(&key.1, &states) {
            return Ok(None);
        }
        let last = claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref());
        if last.is_none_or(|t| elapsed(t.0) >= DEDUPE) {
            let now = Time(Timestamp::now());
            patch::merge_status(
                &self.ctx.node_claims(),
                &claim,
                json!({"lastPodEventTime": now}),
            )
            .await?;
        }
        // Recorded only once acted on: a failed write is retried.
        self.record(&key.1, states);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states(list: &[(&str, bool, bool)]) -> BTreeSet<PodState> {
        list.iter()
            .map(|(uid, t, d)| ((*uid).to_owned(), *t, *d))
            .collect()
    }

    #[test]
    fn first_sight_counts_only_with_pods_then_every_change_counts() {
        assert!(
            !changed(None, &states(&[])),
            "an empty node at start is no event"
        );
        let empty = states(&[]);
        assert!(
            changed(Some(&empty), &states(&[("a", false, false)])),
            "a pod bound"
        );
        let bound = states(&[("a", false, false)]);
        assert!(!changed(Some(&bound), &states(&[("a", false, false)])));
        assert!(
            changed(Some(&bound), &states(&[("a", false, true)])),
            "the pod terminating"
        );
        assert!(
            changed(Some(&bound), &states(&[("a", true, false)])),
            "the pod finished"
        );
        assert!(changed(Some(&bound), &states(&[])), "the pod gone");
    }
}
