//! Garbage collection, both ways between the cloud and the cluster:
//!
//! - an instance the provider lists that no NodeClaim launched (a crash
//!   between `Create` and the claim's status, a claim deleted by hand with
//!   its finalizer removed) is terminated once it is older than
//!   `orphan_age`, and its Node deleted;
//! - a registered NodeClaim whose instance the provider no longer lists is
//!   deleted, unless its Node is still Ready (its kubelet still talks);
//! - a Node Karpenter made whose NodeClaim is gone and whose instance the
//!   provider no longer has is deleted.

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use karpenter_core::labels;
use kube::{Resource, ResourceExt};
use tokio::sync::watch;

use crate::controllers::Context;
use crate::error::{Error, Result};
use crate::metrics::Disrupted;
use crate::objects::patch;
use crate::state::index::Index;
use crate::state::watch::Published;

/// Runs garbage collection every `gc_every` until the snapshots end.
pub async fn run(ctx: Context, mut snapshots: watch::Receiver<Published>) {
    if snapshots.wait_for(|p| p.index.listed()).await.is_err() {
        return;
    }
    loop {
        let index = snapshots.borrow().index.clone();
        let span = tracing::info_span!("reconcile", controller = "garbagecollection");
        let result = tracing::Instrument::instrument(collect(&ctx, &index), span).await;
        if let Err(error) = result {
            tracing::warn!(%error, "garbage collection failed");
        }
        tokio::time::sleep(ctx.timing.gc_every).await;
    }
}

/// One round of collection against `index` (taken before the provider is
/// listed, so an instance launched meanwhile is young and kept).
pub async fn collect(ctx: &Context, index: &Index) -> Result<()> {
    let instances = ctx.clients.list().await.map_err(Error::peer("List"))?;
    let live: Vec<_> = instances
        .into_iter()
        .filter(|i| !matches!(i.state.as_str(), "shutting-down" | "terminated"))
        .collect();
    let listed: HashSet<&str> = live.iter().map(|i| i.provider_id.as_str()).collect();
    let now = Timestamp::now().as_second();

    for instance in &live {
        if !index
            .claims_for_provider_id(&instance.provider_id)
            .is_empty()
        {
            continue;
        }
        // Launched for a claim whose status is not written yet (its
        // lifecycle's `Create` returns this very instance).
        if index
            .node_claims
            .named(&instance.node_claim_name)
            .is_some_and(|c| c.provider_id().is_none_or(str::is_empty))
        {
            continue;
        }
        let age = instance
            .launch_time
            .as_ref()
            .map_or(i64::MAX, |t| now - t.seconds);
        if Duration::from_secs(u64::try_from(age).unwrap_or(0)) < ctx.timing.orphan_age {
            continue;
        }
        tracing::info!(provider_id = %instance.provider_id, "garbage collecting an instance no NodeClaim launched");
        ctx.clients
            .delete(&instance.provider_id)
            .await
            .map_err(Error::peer("Delete"))?;
        for node in index.nodes_for_provider_id(&instance.provider_id) {
            patch::delete(&ctx.nodes(), node.as_ref()).await?;
        }
    }

    for claim in index.node_claims.iter() {
        let provider_id = claim.provider_id().unwrap_or_default();
        if !ctx.manages(claim)
            || !claim.is_registered()
            || claim.meta().deletion_timestamp.is_some()
            || provider_id.is_empty()
            || listed.contains(provider_id)
        {
            continue;
        }
        if index
            .node_of(claim)
            .is_some_and(|node| karpenter_api::node::is_ready(node))
        {
            continue;
        }
        tracing::info!(nodeclaim = %claim.name_any(), "garbage collecting a NodeClaim whose instance is gone");
        patch::delete(&ctx.node_claims(), claim.as_ref()).await?;
        let reschedulable_pods = index.reschedulable_pods_of(claim);
        ctx.metrics.claim_disrupted(
            claim,
            Disrupted {
                reason: "garbage_collected",
                reschedulable_pods: Some(reschedulable_pods),
                ..Disrupted::default()
            },
        );
    }

    let prefix = ctx.info.provider_id_prefix.as_str();
    for node in index.nodes.iter() {
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or_default();
        let ours = node.labels().contains_key(labels::NODE_POOL)
            && !provider_id.is_empty()
            && provider_id.starts_with(prefix);
        if !ours
            || node.meta().deletion_timestamp.is_some()
            || !index.claims_for_provider_id(provider_id).is_empty()
            || listed.contains(provider_id)
            || karpenter_api::node::is_ready(node)
        {
            continue;
        }
        tracing::info!(node = %node.name_any(), "garbage collecting a Node whose NodeClaim and instance are gone");
        patch::delete(&ctx.nodes(), node.as_ref()).await?;
    }
    Ok(())
}
