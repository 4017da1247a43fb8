//! Karpenter's events on pods that carry `karpenter.sh/do-not-disrupt`, for
//! the pods on the nodes a disruption pass weighs (its claims' nodes):
//!
//! ```text
//!   a value neither "true" nor a positive duration ─▶ InvalidDoNotDisruptAnnotation (Warning; ignored)
//!   a duration not yet passed since the pod started ─▶ DoNotDisruptUntil <when it elapses>
//!   a duration passed                               ─▶ DoNotDisruptGracePeriodElapsed
//! ```
//!
//! Whether the annotation protects is the snapshot's rule
//! ([`karpenter_snapshot::do_not_disrupt`]); this reads the same value with
//! [`karpenter_snapshot::parse_do_not_disrupt`] to say so on the pod.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::controllers::Context;
use crate::events::{Event, Kind};
use crate::state::index::{Index, PodEntry};

/// The events of every annotated pod on a node of a NodeClaim.
pub fn report(ctx: &Context, index: &Index, now: Timestamp) {
    for claim in index.node_claims.iter() {
        let Some(node) = claim.status.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        for pod in index.pods_on(node) {
            if let Some(event) = event_of(pod, now) {
                ctx.recorder.emit(event);
            }
        }
    }
}

/// What a pod's annotation says now, if it has one other than `"true"`.
fn event_of(pod: &PodEntry, now: Timestamp) -> Option<Event> {
    let value = pod
        .metadata
        .annotations
        .as_ref()?
        .get(karpenter_core::labels::DO_NOT_DISRUPT)?;
    let duration = match karpenter_snapshot::parse_do_not_disrupt(value) {
        Ok(None) => return None,
        Ok(Some(duration)) => duration,
        Err(why) => {
            return Some(
                Event::new(
                    pod,
                    Kind::Warning,
                    "InvalidDoNotDisruptAnnotation",
                    format!(
                        "Invalid karpenter.sh/do-not-disrupt annotation: {why}, ignoring annotation"
                    ),
                )
                .dedupe_on(why),
            );
        }
    };
    // Protected while the start is unknown: nothing to say yet.
    let start = pod.start_time.as_ref()?.0;
    let elapses = SignedDuration::try_from(duration)
        .ok()
        .and_then(|d| start.checked_add(d).ok())?;
    Some(if now < elapses {
        let at = elapses.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        Event::new(
            pod,
            Kind::Normal,
            "DoNotDisruptUntil",
            format!("The karpenter.sh/do-not-disrupt grace period will elapse at {at}"),
        )
        .dedupe_on(at)
    } else {
        Event::new(
            pod,
            Kind::Normal,
            "DoNotDisruptGracePeriodElapsed",
            "The karpenter.sh/do-not-disrupt grace period has elapsed, pod is now disruptable",
        )
    })
}
