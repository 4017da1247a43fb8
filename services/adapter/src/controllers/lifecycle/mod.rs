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

pub use finalize::{INSTANCE_TERMINATING, termination_deadline};

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED};
use karpenter_core::labels;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::runner::{Reconciler, fingerprint};
use super::{Context, Requeue, sooner};
use crate::conditions::Conditions;
use crate::error::{Error, Result};
use crate::index::{Index, Key};
use crate::patch;
use crate::watch::Versions;

/// The dependents of a claim's `Ready` condition.
pub const CLAIM_CONDITIONS: &[&str] = &[
    CONDITION_LAUNCHED,
    CONDITION_REGISTERED,
    CONDITION_INITIALIZED,
];

/// What a step decided.
pub(crate) enum Step {
    /// Go on with the next step; come back after this long (if set).
    Continue(Requeue),
    /// The claim was deleted; nothing more this pass.
    Deleted,
}

/// The claim's conditions, materialized as Karpenter does.
pub(crate) fn claim_conditions(claim: &mut NodeClaim) -> Conditions<'_> {
    let generation = claim.metadata.generation.unwrap_or(0);
    let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let status = claim.status.get_or_insert_with(Default::default);
    Conditions::new(
        &mut status.conditions,
        generation,
        created,
        CLAIM_CONDITIONS,
    )
}

/// How long since a condition last changed (zero when absent).
pub(crate) fn since_transition(claim: &NodeClaim, type_: &str) -> std::time::Duration {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| elapsed(c.last_transition_time.0))
        .unwrap_or_default()
}

/// Time since `at` (zero for a time in the future).
pub(crate) fn elapsed(at: Timestamp) -> std::time::Duration {
    let seconds = Timestamp::now().duration_since(at).as_secs_f64();
    std::time::Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or_default()
}

/// The zone and capacity type labels of an object, for metrics.
pub(crate) fn zone_and_capacity(
    object_labels: &std::collections::BTreeMap<String, String>,
) -> (String, String) {
    (
        object_labels
            .get(labels::TOPOLOGY_ZONE)
            .cloned()
            .unwrap_or_default(),
        object_labels
            .get(labels::CAPACITY_TYPE)
            .cloned()
            .unwrap_or_default(),
    )
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
        let stored = patch::add_finalizer(&api, &stored, labels::TERMINATION_FINALIZER).await?;
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
        let status = serde_json::to_value(&claim.status)
            .map_err(|e| Error::Invalid(format!("NodeClaim {}: status: {e}", claim.name_any())))?;
        patch::merge_status(&api, &current, status).await?;
    }
    Ok(())
}
