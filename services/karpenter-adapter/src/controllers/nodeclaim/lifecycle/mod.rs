//! The NodeClaim lifecycle (Karpenter's `nodeclaim.lifecycle`): each pass
//! over a claim runs its steps in order and writes what changed once.
//!
//! ```text
//!   finalizer ──▶ launch ──▶ registration ──▶ initialization ──▶ liveness
//!   (karpenter.sh/   Create      Node with its      Ready, startup and      not registered in 15 min,
//!    termination)    → Launched   providerID synced  ephemeral taints gone,  not launched in 5 min:
//!                                 → Registered       resources reported      delete the claim
//!                                                    → Initialized
//!   deleted claim ──▶ finalize: TGP deadline annotation, delete its Nodes, delete the instance,
//!                     wait until the provider says it is gone, release the finalizer
//! ```
//!
//! Each step is decided from the claim and its Node as they are, so a pass
//! interrupted anywhere (the process killed) is simply run again: `Create`
//! is idempotent by claim name, so a relaunch returns the same instance.

mod finalize;
mod initialization;
mod launch;
mod liveness;
mod registration;

use std::sync::Arc;

use karpenter_api::NodeClaim;
use karpenter_core::labels;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue, sooner};
use crate::error::{Error, Result};
use crate::objects::finalizers;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// What a step decided.
pub(crate) enum Step {
    /// Go on with the next step; come back after this long (if set).
    Continue(Requeue),
    /// The claim was deleted; nothing more this pass.
    Deleted,
}

/// The lifecycle controller.
pub struct Lifecycle {
    pub ctx: Context,
}

impl Reconciler for Lifecycle {
    const NAME: &'static str = "nodeclaim.lifecycle";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_claims + versions.nodes + versions.node_classes
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        index
            .node_claims
            .iter()
            .filter(|claim| self.ctx.manages(claim))
            .map(|claim| {
                let nodes = index.nodes_for_provider_id(claim.provider_id().unwrap_or_default());
                let versions = std::iter::once(claim.meta().resource_version.as_deref())
                    .chain(nodes.iter().map(|n| n.meta().resource_version.as_deref()));
                ((String::new(), claim.name_any()), fingerprint(versions))
            })
            .collect()
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(stored) = index.node_claims.named(&key.1).cloned() else {
            return Ok(None);
        };
        if !self.ctx.manages(&stored) {
            return Ok(None);
        }
        if stored.meta().deletion_timestamp.is_some() {
            return finalize::finalize(&self.ctx, &index, &stored).await;
        }
        let api = self.ctx.node_claims();
        let stored = finalizers::add(&api, &stored, labels::TERMINATION_FINALIZER).await?;
        let mut claim = stored.clone();
        let mut failed: Option<Error> = None;
        let mut requeue = None;

        match launch::launch(&self.ctx, &index, &mut claim).await {
            Ok(Step::Deleted) => return Ok(None),
            Ok(Step::Continue(r)) => requeue = sooner(requeue, r),
            Err(error) => failed = Some(error),
        }
        let registered_node = registration::register(&self.ctx, &index, &mut claim).await?;
        initialization::initialize(&self.ctx, &index, registered_node.as_ref(), &mut claim).await?;
        match liveness::check(&self.ctx, &claim).await? {
            Step::Deleted => return Ok(None),
            Step::Continue(r) => requeue = sooner(requeue, r),
        }
        write(&self.ctx, &stored, &claim).await?;
        match failed {
            Some(error) => Err(error),
            None => Ok(requeue),
        }
    }
}

/// Writes the claim's labels and annotations, then its status, if changed.
async fn write(ctx: &Context, stored: &NodeClaim, claim: &NodeClaim) -> Result<()> {
    let api = ctx.node_claims();
    let mut current = stored.clone();
    if claim.labels() != stored.labels() || claim.annotations() != stored.annotations() {
        current = patch::merge(
            &api,
            stored,
            json!({"metadata": {"labels": claim.labels(), "annotations": claim.annotations()}}),
        )
        .await?;
    }
    if claim.status != stored.status {
        patch::status(&api, &current, claim).await?;
    }
    Ok(())
}
