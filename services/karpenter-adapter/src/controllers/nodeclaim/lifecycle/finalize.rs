//! A deleted claim: record when its pods must be gone (deletion time plus
//! `terminationGracePeriod`), delete its Nodes (their termination drains
//! them), delete the instance, and release the finalizer only once the
//! provider says the instance is gone and no Node of it is left.

use std::time::Duration;

use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::{CONDITION_INSTANCE_TERMINATING, CONDITION_REGISTERED};
use karpenter_core::labels;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::events::{Event, Kind};
use crate::metrics::TerminatedLabels;
use crate::objects::claim::claim_conditions;
use crate::objects::finalizers;
use crate::objects::patch;
use crate::state::index::Index;

/// How often a claim whose instance is still going away is looked at.
const INSTANCE_GONE_POLL: Duration = Duration::from_secs(5);

pub(super) async fn finalize(ctx: &Context, index: &Index, stored: &NodeClaim) -> Result<Requeue> {
    if !finalizers::holds(stored, labels::TERMINATION_FINALIZER) {
        return Ok(None);
    }
    let api = ctx.node_claims();
    let mut claim = annotate_deadline(ctx, stored).await?;

    if claim.conditions().iter().any(|c| {
        c.type_ == CONDITION_REGISTERED && c.status == karpenter_api::ConditionStatus::True
    }) {
        let nodes = index.nodes_for_provider_id(claim.provider_id().unwrap_or_default());
        for node in nodes {
            patch::delete(&ctx.nodes(), node.as_ref()).await?;
        }
        if !nodes.is_empty() {
            // Node termination drains and releases them; their events
            // bring this claim back.
            return Ok(Some(Duration::from_secs(10)));
        }
    }
    if let Some(provider_id) = claim
        .provider_id()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
    {
        let gone = ctx.clients.terminate_instance(&provider_id).await?;
        if !gone {
            let before = claim.status.clone();
            claim_conditions(&mut claim).set_true(CONDITION_INSTANCE_TERMINATING);
            if claim.status != before {
                patch::status(&api, &claim, &claim).await?;
            }
            return Ok(Some(INSTANCE_GONE_POLL));
        }
    }
    if !finalizers::remove(&api, &claim, labels::TERMINATION_FINALIZER).await? {
        // Released already, by a pass that read it first: counted there.
        return Ok(None);
    }
    record_termination_times(ctx, &claim);
    let (zone, capacity_type) = crate::objects::claim::zone_and_capacity(claim.labels());
    ctx.metrics
        .nodeclaims_terminated
        .get_or_create(&TerminatedLabels {
            nodepool: claim.node_pool().unwrap_or_default().to_owned(),
            capacity_type,
            zone,
        })
        .inc();
    tracing::info!("deleted nodeclaim");
    Ok(None)
}

/// Karpenter's termination histograms, as the finalizer goes: since the
/// claim's deletion, and since its instance began terminating (the
/// `InstanceTerminating` condition), by pool.
fn record_termination_times(ctx: &Context, claim: &NodeClaim) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let since = |at| crate::metrics::seconds_between(at, now);
    let pool = crate::metrics::PoolLabels {
        nodepool: claim.node_pool().unwrap_or_default().to_owned(),
    };
    if let Some(deleted) = &claim.metadata.deletion_timestamp {
        let seconds = since(deleted.0);
        ctx.metrics
            .nodeclaims_termination
            .get_or_create(&pool)
            .observe(seconds);
    }
    let instance_terminating = claim
        .conditions()
        .iter()
        .find(|c| c.type_ == CONDITION_INSTANCE_TERMINATING)
        .map(|c| &c.last_transition_time);
    if let Some(began) = instance_terminating {
        let seconds = since(began.0);
        ctx.metrics
            .nodeclaims_instance_termination
            .get_or_create(&pool)
            .observe(seconds);
    }
}

/// Writes the termination deadline annotation once (never moving one that
/// is there) and announces it.
async fn annotate_deadline(ctx: &Context, claim: &NodeClaim) -> Result<NodeClaim> {
    if claim
        .annotations()
        .contains_key(labels::NODE_CLAIM_TERMINATION_TIMESTAMP)
    {
        return Ok(claim.clone());
    }
    let (Some(grace), Some(deleted)) = (
        claim.spec.termination_grace_period.clone(),
        claim.meta().deletion_timestamp.as_ref(),
    ) else {
        return Ok(claim.clone());
    };
    let grace: Duration = grace.into();
    let Ok(span) = k8s_openapi::jiff::SignedDuration::try_from(grace) else {
        return Ok(claim.clone());
    };
    let Ok(deadline) = deleted.0.checked_add(span) else {
        return Ok(claim.clone());
    };
    let text = deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let written = patch::merge(
        &ctx.node_claims(),
        claim,
        json!({"metadata": {"annotations": {labels::NODE_CLAIM_TERMINATION_TIMESTAMP: text}}}),
    )
    .await?;
    tracing::info!(deadline = %text, "annotated nodeclaim");
    ctx.recorder.emit(Event::new(
        claim,
        Kind::Warning,
        "TerminationGracePeriodExpiring",
        format!("All pods will be deleted by {text}"),
    ));
    Ok(written)
}
