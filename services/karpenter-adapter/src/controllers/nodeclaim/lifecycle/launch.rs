//! Launch: `Create` through the provider, then the instance's details on
//! the claim and `Launched=True`.
//!
//! No capacity for any offering (RESOURCE_EXHAUSTED) or a node class that
//! cannot launch (FAILED_PRECONDITION) deletes the claim, so the next batch
//! plans again with what is left; the capacity error is also told to the
//! pods planned onto the claim that are still pending (Karpenter v1.15.1). Any other failure leaves `Launched`
//! Unknown with the reason and is retried with backoff: `Create` is
//! idempotent by claim name, so a retry never launches a second instance.

use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::CONDITION_LAUNCHED;
use karpenter_proto::provider::v1 as pv;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use tonic::Code;
use tracing::Instrument as _;

use super::Step;
use crate::controllers::Context;
use crate::error::{Error, Result};
use crate::events::{Event, Kind};
use crate::metrics::Disrupted;
use crate::objects::claim::claim_conditions;
use crate::objects::claim::{quantities, wire_claim};
use crate::objects::patch;
use crate::state::index::Index;

/// A message cut to `limit` characters, as Karpenter cuts provider errors.
pub(crate) fn truncate(message: &str, limit: usize) -> String {
    if message.chars().count() <= limit {
        return message.to_owned();
    }
    let cut: String = message.chars().take(limit).collect();
    format!("{cut}...")
}

pub(super) async fn launch(ctx: &Context, index: &Index, claim: &mut NodeClaim) -> Result<Step> {
    {
        let mut conditions = claim_conditions(claim);
        if !conditions.is_unknown(CONDITION_LAUNCHED) {
            conditions.refresh(CONDITION_LAUNCHED);
            return Ok(Step::Continue(None));
        }
    }
    let class_name = &claim.spec.node_class_ref.name;
    let Some(node_class) = index.node_classes.named(class_name) else {
        ctx.recorder.emit(Event::new(
            claim,
            Kind::Warning,
            "",
            format!("Failed resolving NodeClass {class_name:?}: it does not exist"),
        ));
        delete_for(ctx, claim, "nodeclass_not_found").await?;
        return Ok(Step::Deleted);
    };
    let planned = ctx.created_claims.pods_of(&claim.name_any());
    match create(ctx, claim, node_class).await {
        Ok(instance) => {
            populate(claim, &instance);
            claim_conditions(claim).set_true(CONDITION_LAUNCHED);
            let pool = claim.node_pool().unwrap_or_default().to_owned();
            ctx.metrics
                .nodeclaims_launched
                .get_or_create(&crate::metrics::PoolLabels { nodepool: pool })
                .inc();
            tracing::info!(
                provider_id = %instance.provider_id,
                instance_type = %instance.instance_type,
                zone = %instance.zone,
                capacity_type = %instance.capacity_type,
                "launched nodeclaim"
            );
            Ok(Step::Continue(None))
        }
        Err(status) if let Some(refusal) = Refusal::of(status.code()) => {
            ctx.recorder.emit(Event::new(
                claim,
                Kind::Warning,
                refusal.event_reason,
                format!(
                    "NodeClaim {} {}: {}",
                    claim.name_any(),
                    refusal.says,
                    truncate(status.message(), 300)
                ),
            ));
            tracing::warn!(error = %status.message(), "failed launching nodeclaim: {}", refusal.why);
            if status.code() == Code::ResourceExhausted {
                tell_pending_pods(ctx, index, claim, &planned, status.message());
            }
            delete_for(ctx, claim, refusal.counted_as).await?;
            Ok(Step::Deleted)
        }
        Err(status) => {
            claim_conditions(claim).set_unknown(
                CONDITION_LAUNCHED,
                "LaunchFailed",
                &truncate(status.message(), 300),
            );
            Err(Error::peer("Create")(status))
        }
    }
}

/// The capacity error on each pod planned onto the claim that is still
/// pending (in the index, unbound, not being deleted): its node will not
/// come, and the next batch plans it again.
fn tell_pending_pods(
    ctx: &Context,
    index: &Index,
    claim: &NodeClaim,
    planned: &[karpenter_proto::scheduler::v1::PodRef],
    message: &str,
) {
    let name = claim.name_any();
    for pod in planned {
        let Some(entry) = index.pods.get(&pod.namespace, &pod.name) else {
            continue;
        };
        if entry.node_name.is_some() || entry.meta().deletion_timestamp.is_some() {
            continue;
        }
        ctx.recorder.emit(
            Event::new(
                entry.as_ref(),
                Kind::Warning,
                "InsufficientCapacityError",
                format!(
                    "NodeClaim {name} planned for this pod could not launch: {}",
                    truncate(message, 300)
                ),
            )
            .dedupe_on(name.clone()),
        );
    }
}

/// A launch failure that ends the claim, so the next batch plans its pods
/// with what is left.
struct Refusal {
    /// The Warning event's reason.
    event_reason: &'static str,
    /// What the event says after the claim's name.
    says: &'static str,
    /// Why, in the log.
    why: &'static str,
    /// The reason the claim is counted as disrupted under.
    counted_as: &'static str,
}

impl Refusal {
    /// No capacity for any offering, or a node class that cannot launch.
    fn of(code: Code) -> Option<Refusal> {
        match code {
            Code::ResourceExhausted => Some(Refusal {
                event_reason: "InsufficientCapacityError",
                says: "event",
                why: "insufficient capacity",
                counted_as: "insufficient_capacity",
            }),
            Code::FailedPrecondition => Some(Refusal {
                event_reason: "NodeClassNotReady",
                says: "cannot launch",
                why: "node class not ready",
                counted_as: "nodeclass_not_ready",
            }),
            _ => None,
        }
    }
}

/// `Create` in a span continuing the trace the claim was created in.
async fn create(
    ctx: &Context,
    claim: &NodeClaim,
    node_class: &DynamicObject,
) -> std::result::Result<pv::Instance, tonic::Status> {
    let name = claim.name_any();
    let span = tracing::info_span!("launch", nodeclaim = %name);
    if let Some(parent) = ctx.created_claims.of(&name) {
        parent.adopt(&span);
    }
    let created = ctx
        .clients
        .create(wire_claim(claim, Some(node_class)))
        .instrument(span)
        .await;
    // A transient failure is retried in the same trace; anything else is
    // the end of this claim's launch.
    if !matches!(&created, Err(status) if crate::clients::transient(status)) {
        ctx.created_claims.forget(&name);
    }
    created
}

/// The instance's labels (the claim's own win), provider ID, image and
/// resources on the claim.
fn populate(claim: &mut NodeClaim, instance: &pv::Instance) {
    let mut merged = instance
        .labels
        .clone()
        .into_iter()
        .collect::<std::collections::BTreeMap<_, _>>();
    merged.extend(claim.labels().clone());
    *claim.labels_mut() = merged;
    let status = claim.status.get_or_insert_with(Default::default);
    status.provider_id = Some(instance.provider_id.clone());
    if !instance.image_id.is_empty() {
        status.image_id = Some(instance.image_id.clone());
    }
    status.capacity = quantities(instance.capacity.as_ref());
    status.allocatable = quantities(instance.allocatable.as_ref());
}

/// Deletes a claim that cannot launch, counted as a disruption for `reason`.
async fn delete_for(ctx: &Context, claim: &NodeClaim, reason: &str) -> Result<()> {
    patch::delete(&ctx.node_claims(), claim).await?;
    ctx.metrics
        .claim_disrupted(claim, Disrupted::because(reason));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_provider_errors_are_cut() {
        assert_eq!(truncate("short", 300), "short");
        let long = "x".repeat(400);
        let cut = truncate(&long, 300);
        assert_eq!(cut.len(), 303);
        assert!(cut.ends_with("..."));
    }
}
