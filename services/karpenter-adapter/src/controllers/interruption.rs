//! Interruption (Karpenter's `interruption` controller): the provider's
//! stream of cloud events about instances, acted on before the cloud takes
//! the instance.
//!
//! ```text
//!   WatchInterruptions ──event──▶ NodeClaims by provider ID
//!     spot interruption, scheduled change,
//!     state change (stopping, stopped, shutting-down, terminated) ─▶ delete the claim
//!                                       (termination drains; the provisioner
//!                                        replaces the leaving pods at once)
//!     rebalance recommendation ─▶ an event only
//!   ──▶ AcknowledgeInterruption (after acting; the cloud resends until then)
//! ```
//!
//! Claims are matched by the instance an event names (a provider ID that
//! lacks a part the provider could not learn still finds its claim). The
//! stream is reopened with backoff when it breaks. A cloud message can
//! arrive more than once; acting twice is harmless (a claim already being
//! deleted is left alone) and events are not repeated within the dedupe
//! window.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use karpenter_api::NodeClaim;
use karpenter_proto::provider::v1 as pv;
use kube::{Resource, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::controllers::Context;
use crate::events::{Event, Kind};
use crate::metrics::{Disrupted, MessageTypeLabels};
use crate::objects::patch;
use crate::state::index::Index;
use crate::state::watch::Published;

use pv::interruption_event::Kind as EventKind;

/// How long an event id is remembered after it was handled.
const REMEMBER: Duration = Duration::from_secs(600);

/// What Karpenter does for a kind of message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Delete the NodeClaim: termination cordons and drains it.
    CordonAndDrain,
    NoAction,
}

/// Karpenter's message kind (the metric label and disruption reason).
pub fn message_type(event: &pv::InterruptionEvent) -> &'static str {
    match event.kind() {
        EventKind::SpotInterruption => "spot_interrupted",
        EventKind::RebalanceRecommendation => "rebalance_recommendation",
        EventKind::ScheduledChange => "scheduled_change",
        EventKind::StateChange if stopped(&event.state) => "instance_stopped",
        EventKind::StateChange if terminated(&event.state) => "instance_terminated",
        EventKind::CapacityReservationInterruption => "capacity_reservation_interrupted",
        _ => "no_op",
    }
}

fn stopped(state: &str) -> bool {
    ["stopping", "stopped"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(state))
}

fn terminated(state: &str) -> bool {
    ["shutting-down", "terminated"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(state))
}

pub fn action(event: &pv::InterruptionEvent) -> Action {
    match message_type(event) {
        "spot_interrupted"
        | "scheduled_change"
        | "instance_stopped"
        | "instance_terminated"
        | "capacity_reservation_interrupted" => Action::CordonAndDrain,
        _ => Action::NoAction,
    }
}

/// The warning Karpenter publishes on the Node and NodeClaim.
fn notice(event: &pv::InterruptionEvent) -> Option<(Kind, &'static str, &'static str)> {
    Some(match message_type(event) {
        "spot_interrupted" => (
            Kind::Warning,
            "SpotInterrupted",
            "Spot interruption warning was triggered",
        ),
        "rebalance_recommendation" => (
            Kind::Normal,
            "SpotRebalanceRecommendation",
            "Spot rebalance recommendation was triggered",
        ),
        "scheduled_change" => (
            Kind::Warning,
            "InstanceUnhealthy",
            "An unhealthy warning was triggered for the instance",
        ),
        "instance_stopped" => (Kind::Warning, "InstanceStopping", "Instance is stopping"),
        "instance_terminated" => (
            Kind::Warning,
            "InstanceTerminating",
            "Instance is terminating",
        ),
        "capacity_reservation_interrupted" => (
            Kind::Warning,
            "CapacityReservationInstanceInterrupted",
            "Capacity Reservation interruption warning was triggered",
        ),
        _ => return None,
    })
}

/// Runs until the snapshots end: one stream at a time, reopened on error.
/// Nothing is consumed before the index has listed the cluster: an event
/// matched against an empty index would be acknowledged unacted.
pub async fn run(ctx: Context, mut snapshots: watch::Receiver<Published>) {
    if snapshots.wait_for(|p| p.index.listed()).await.is_err() {
        return;
    }
    let mut handled: HashMap<String, Instant> = HashMap::new();
    let mut failures = 0u32;
    loop {
        if snapshots.has_changed().is_err() {
            return;
        }
        match ctx.clients.watch_interruptions().await {
            Ok(mut stream) => {
                failures = 0;
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(event) => handle(&ctx, &snapshots, &mut handled, event).await,
                        Err(status) => {
                            tracing::warn!(error = %status.message(), "interruption stream broke");
                            break;
                        }
                    }
                }
            }
            Err(status) => {
                failures += 1;
                tracing::warn!(error = %status.message(), "watching interruptions failed");
            }
        }
        let wait = Duration::from_millis(500 * (1 << failures.min(5)));
        tokio::time::sleep(wait.min(Duration::from_secs(10))).await;
    }
}

async fn handle(
    ctx: &Context,
    snapshots: &watch::Receiver<Published>,
    handled: &mut HashMap<String, Instant>,
    event: pv::InterruptionEvent,
) {
    let kind = message_type(&event);
    let span = tracing::info_span!("reconcile", controller = "interruption", message = kind, id = %event.id);
    let _entered = span.enter();
    handled.retain(|_, at| at.elapsed() < REMEMBER);
    if handled.contains_key(&event.id) {
        // Delivered again before the acknowledgement reached the provider:
        // acted on already, so only acknowledged again.
        if let Err(status) = ctx.clients.acknowledge_interruption(&event.id).await {
            tracing::warn!(error = %status.message(), "acknowledging an interruption failed");
        }
        return;
    }
    ctx.metrics
        .interruption_received
        .get_or_create(&MessageTypeLabels {
            message_type: kind.to_owned(),
        })
        .inc();
    let index = snapshots.borrow().index.clone();
    // Only an event that does something is worth asking the API server
    // about when the index knows none of its claims; asked once per event.
    let consequential = action(&event) != Action::NoAction || notice(&event).is_some();
    let mut listed: Option<Vec<Arc<NodeClaim>>> = None;
    let mut ok = true;
    for provider_id in &event.provider_ids {
        let found = interrupted_claims(ctx, &index, provider_id, consequential, &mut listed);
        let claims = match found.await {
            Ok(claims) => claims,
            Err(error) => {
                tracing::warn!(%provider_id, %error, "finding the interrupted claims failed");
                ok = false;
                continue;
            }
        };
        for claim in claims {
            if !ctx.manages(&claim) {
                continue;
            }
            if let Err(error) = act(ctx, &index, &event, &claim).await {
                tracing::warn!(nodeclaim = %claim.name_any(), %error, "acting on an interruption failed");
                ok = false;
            }
        }
    }
    if !ok {
        // Not acknowledged: the provider sends it again.
        return;
    }
    if let Some(time) = &event.time {
        let now = crate::scheduling::now();
        let seconds = now.seconds.saturating_sub(time.seconds) as f64;
        ctx.metrics.interruption_latency.observe(seconds.max(0.0));
    }
    match ctx.clients.acknowledge_interruption(&event.id).await {
        Ok(()) => {
            ctx.metrics.interruption_deleted.inc();
            handled.insert(event.id, Instant::now());
        }
        Err(status) => {
            tracing::warn!(error = %status.message(), "acknowledging an interruption failed")
        }
    }
}

/// The claims an interruption names. The index answers first; when it
/// knows none (its NodeClaim watch lags, or another leader launched the
/// claim moments ago) and the event would act, the API server's own list
/// is asked (once per event, kept in `listed`), so an event is never
/// acknowledged unacted because this replica's view was behind.
async fn interrupted_claims(
    ctx: &Context,
    index: &Index,
    provider_id: &str,
    consequential: bool,
    listed: &mut Option<Vec<Arc<NodeClaim>>>,
) -> crate::error::Result<Vec<Arc<NodeClaim>>> {
    let known = index.claims_for_interrupted(provider_id);
    if !known.is_empty() || !consequential {
        return Ok(known);
    }
    if listed.is_none() {
        let live = ctx
            .node_claims()
            .list(&kube::api::ListParams::default())
            .await?;
        *listed = Some(live.items.into_iter().map(Arc::new).collect());
    }
    Ok(listed
        .iter()
        .flatten()
        .filter(|claim| crate::state::index::names_instance_of(provider_id, claim))
        .cloned()
        .collect())
}

/// Publishes the notice and, for messages that take the instance, deletes
/// the claim (unless it is being deleted already).
async fn act(
    ctx: &Context,
    index: &Index,
    event: &pv::InterruptionEvent,
    claim: &NodeClaim,
) -> crate::error::Result<()> {
    let node = index.node_of(claim);
    if let Some((kind, reason, message)) = notice(event) {
        if let Some(node) = node {
            ctx.recorder
                .emit(Event::new(node.as_ref(), kind, reason, message).dedupe_on(&event.id));
        }
        ctx.recorder
            .emit(Event::new(claim, kind, reason, message).dedupe_on(&event.id));
    }
    if action(event) != Action::CordonAndDrain || claim.meta().deletion_timestamp.is_some() {
        return Ok(());
    }
    match patch::delete(&ctx.node_claims(), claim).await {
        Ok(()) => {}
        Err(error) if error.is_not_found() => return Ok(()),
        Err(error) => return Err(error),
    }
    tracing::info!(nodeclaim = %claim.name_any(), "initiating delete from interruption message");
    ctx.metrics
        .claim_disrupted(claim, Disrupted::because(message_type(event)));
    if let Some(node) = node {
        ctx.recorder.emit(Event::new(
            node.as_ref(),
            Kind::Warning,
            "TerminatingOnInterruption",
            "Interruption triggered termination for the Node",
        ));
    }
    ctx.recorder.emit(Event::new(
        claim,
        Kind::Warning,
        "TerminatingOnInterruption",
        "Interruption triggered termination for the NodeClaim",
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, state: &str) -> pv::InterruptionEvent {
        pv::InterruptionEvent {
            kind: kind as i32,
            state: state.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn messages_that_take_the_instance_drain_it_and_a_rebalance_only_tells() {
        for (kind, state, expected, action_expected) in [
            (
                EventKind::SpotInterruption,
                "",
                "spot_interrupted",
                Action::CordonAndDrain,
            ),
            (
                EventKind::ScheduledChange,
                "",
                "scheduled_change",
                Action::CordonAndDrain,
            ),
            (
                EventKind::StateChange,
                "stopping",
                "instance_stopped",
                Action::CordonAndDrain,
            ),
            (
                EventKind::StateChange,
                "terminated",
                "instance_terminated",
                Action::CordonAndDrain,
            ),
            (EventKind::StateChange, "running", "no_op", Action::NoAction),
            (
                EventKind::CapacityReservationInterruption,
                "",
                "capacity_reservation_interrupted",
                Action::CordonAndDrain,
            ),
            (
                EventKind::RebalanceRecommendation,
                "",
                "rebalance_recommendation",
                Action::NoAction,
            ),
        ] {
            let e = event(kind, state);
            assert_eq!(message_type(&e), expected);
            assert_eq!(action(&e), action_expected, "{expected}");
        }
        assert_eq!(
            notice(&event(EventKind::RebalanceRecommendation, "")).map(|n| n.1),
            Some("SpotRebalanceRecommendation")
        );
    }
}
