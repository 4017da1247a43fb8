//! Node termination (Karpenter's `node.termination`): a deleted Node with
//! the termination finalizer is tainted, drained, its instance deleted, and
//! only once the provider says the instance is gone is the finalizer
//! released.
//!
//! ```text
//!   Node deleted ──▶ delete its NodeClaim (if not already)
//!                ──▶ instance already gone and Node not Ready? release at once
//!                ──▶ taint karpenter.sh/disrupted:NoSchedule
//!                ──▶ drain (Drained) ──▶ volumes detached (VolumesDetached)
//!                ──▶ delete instance (InstanceTerminating) ──▶ gone? release finalizer
//! ```
//!
//! After the drain, the instance is kept until the attach-detach controller
//! has deleted the VolumeAttachments of the pods that left (their volumes
//! can then attach where the pods went), unless the claim's termination
//! grace period has run out; attachments of pods that stay on the node
//! (static, tolerating the disrupted taint) do not hold it.

pub mod drain;
pub mod evictions;
pub mod volumes;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::CONDITION_DISRUPTION_REASON;
use karpenter_core::labels;
use kube::api::ListParams;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::{Error, Result};
use crate::events::{Event, Kind};
use crate::metrics::{PoolLabels, PoolZoneLabels};
use crate::objects::claim::claim_conditions;
use crate::objects::finalizers;
use crate::objects::{disrupted, patch};
use crate::state::index::{Index, Key, PodEntry};
use crate::state::watch::Versions;
use drain::Drain;

/// The claim condition a drain keeps.
pub const DRAINED: &str = "Drained";
/// Nodes being terminated leave external load balancers.
pub const EXCLUDE_FROM_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

const DRAIN_POLL: Duration = Duration::from_secs(1);
const INSTANCE_GONE_POLL: Duration = Duration::from_secs(5);

/// The node termination controller.
pub struct Termination {
    pub ctx: Context,
}

fn terminating(node: &Node) -> bool {
    node.meta().deletion_timestamp.is_some()
        && finalizers::holds(node, labels::TERMINATION_FINALIZER)
}

impl Reconciler for Termination {
    const NAME: &'static str = "node.termination";

    fn relevant(versions: &Versions) -> u64 {
        versions.nodes + versions.pods + versions.node_claims
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        index
            .nodes
            .iter()
            .filter(|n| terminating(n))
            .map(|node| {
                let name = node.name_any();
                let pid = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .unwrap_or_default();
                let versions = std::iter::once(node.meta().resource_version.as_deref())
                    .chain(
                        index
                            .claims_for_provider_id(pid)
                            .iter()
                            .map(|c| c.meta().resource_version.as_deref()),
                    )
                    .chain(
                        index
                            .pods_on(&name)
                            .iter()
                            .map(|p| p.meta().resource_version.as_deref()),
                    );
                ((String::new(), name), fingerprint(versions))
            })
            .collect()
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(node) = index.nodes.named(&key.1).cloned() else {
            return Ok(None);
        };
        if !terminating(&node) {
            return Ok(None);
        }
        terminate(&self.ctx, &index, &node).await
    }
}

async fn terminate(ctx: &Context, index: &Index, node: &Node) -> Result<Requeue> {
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    let claim = index.claim_for_provider_id(&provider_id).cloned();
    if let Some(claim) = &claim {
        patch::delete(&ctx.node_claims(), claim.as_ref()).await?;
    }
    if !provider_id.is_empty()
        && !karpenter_api::node::is_ready(node)
        && ctx
            .clients
            .get(&provider_id)
            .await
            .map_err(Error::peer("Get"))?
            .is_none()
    {
        return release(ctx, node).await;
    }
    let deadline = claim
        .as_deref()
        .and_then(crate::objects::claim::termination_deadline);
    if let Some(deadline) = deadline {
        ctx.recorder.emit(Event::new(
            node,
            Kind::Warning,
            "TerminationGracePeriodExpiring",
            format!(
                "All pods will be deleted by {}",
                deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
            ),
        ));
    }
    let node = taint(ctx, node).await?;
    let Some(claim) = claim else {
        // A Node without a claim: drain it, then let it go.
        return match drain_confirmed(ctx, index, &node, None, "").await? {
            Drain::Done => release(ctx, &node).await,
            Drain::Waiting(_) => Ok(Some(DRAIN_POLL)),
        };
    };
    let reason = disruption_reason(&claim);
    let mut next = (*claim).clone();
    let outcome = drain_confirmed(ctx, index, &node, deadline, &reason).await?;
    let requeue = match outcome {
        Drain::Waiting(count) => {
            if claim_conditions(&mut next).get(DRAINED).is_none() {
                claim_conditions(&mut next).set_unknown(DRAINED, "Draining", "Draining");
            }
            ctx.recorder.emit(Event::new(
                &node,
                Kind::Warning,
                "FailedDraining",
                format!("Failed to drain node, {count} pods are waiting to be evicted"),
            ));
            Some(DRAIN_POLL)
        }
        Drain::Done => finish_drain(ctx, index, &node, &mut next, deadline).await?,
    };
    if next.status != claim.status {
        patch::status(&ctx.node_claims(), claim.as_ref(), &next).await?;
    }
    match requeue {
        Some(after) => Ok(Some(after)),
        None => release(ctx, &node).await,
    }
}

/// One drain pass over the index's pods of `node`; when that finds none left,
/// the pass runs again over the pods the API server lists on the node now.
/// The index can lag behind (a stalled or frozen watch): a node, and the
/// instance under it, are only let go on what is bound to it now.
async fn drain_confirmed(
    ctx: &Context,
    index: &Index,
    node: &Node,
    deadline: Option<k8s_openapi::jiff::Timestamp>,
    reason: &str,
) -> Result<Drain> {
    let name = node.name_any();
    if let Drain::Waiting(count) =
        drain::drain(ctx, node, index.pods_on(&name), deadline, reason).await?
    {
        return Ok(Drain::Waiting(count));
    }
    let listed = ctx
        .all_pods()
        .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
        .await?;
    let live: Vec<Arc<PodEntry>> = listed
        .items
        .into_iter()
        .map(|pod| Arc::new(PodEntry::new(pod)))
        .collect();
    drain::drain(ctx, node, &live, deadline, reason).await
}

/// The drain is done: after the minimum drain time the claim is `Drained`,
/// then, once its volumes are detached, the instance is deleted; `None`
/// once it is gone.
async fn finish_drain(
    ctx: &Context,
    index: &Index,
    node: &Node,
    claim: &mut NodeClaim,
    deadline: Option<k8s_openapi::jiff::Timestamp>,
) -> Result<Requeue> {
    let mut conditions = claim_conditions(claim);
    let drained_at_least = conditions.is_unknown(DRAINED)
        && conditions.get(DRAINED).is_some()
        && since_transition_of(&conditions) < ctx.timing.min_drain;
    if drained_at_least {
        return Ok(Some(DRAIN_POLL));
    }
    if !conditions.is_true(DRAINED) {
        conditions.set_true(DRAINED);
        let pool = node
            .labels()
            .get(labels::NODE_POOL)
            .cloned()
            .unwrap_or_default();
        ctx.metrics
            .nodes_drained
            .get_or_create(&PoolLabels { nodepool: pool })
            .inc();
    }
    let provider_id = claim.provider_id().unwrap_or_default().to_owned();
    if provider_id.is_empty() {
        return Ok(None);
    }
    if !volumes::detached(ctx, index, node, claim, deadline).await? {
        return Ok(Some(volumes::POLL));
    }
    let gone = ctx.clients.terminate_instance(&provider_id).await?;
    claim_conditions(claim).set_true(karpenter_api::nodeclaim::CONDITION_INSTANCE_TERMINATING);
    Ok((!gone).then_some(INSTANCE_GONE_POLL))
}

fn since_transition_of(conditions: &crate::objects::conditions::Conditions<'_>) -> Duration {
    conditions
        .get(DRAINED)
        .map(|c| crate::objects::claim::elapsed(c.last_transition_time.0))
        .unwrap_or_default()
}

/// The reason pods are drained for: the claim's disruption reason, else
/// a forceful termination.
fn disruption_reason(claim: &NodeClaim) -> String {
    claim
        .conditions()
        .iter()
        .find(|c| {
            c.type_ == CONDITION_DISRUPTION_REASON
                && c.status == karpenter_api::ConditionStatus::True
        })
        .map_or_else(|| "Forceful Termination".to_owned(), |c| c.reason.clone())
}

/// Taints the Node `karpenter.sh/disrupted:NoSchedule` (replacing one with
/// another effect) and takes it out of external load balancers.
async fn taint(ctx: &Context, node: &Node) -> Result<Node> {
    let excluded = node
        .labels()
        .get(EXCLUDE_FROM_LOAD_BALANCERS)
        .map(String::as_str)
        == Some("karpenter");
    if disrupted::has_taint(node) && excluded {
        return Ok(node.clone());
    }
    let written = patch::merge(
        &ctx.nodes(),
        node,
        json!({
            "metadata": {"labels": {EXCLUDE_FROM_LOAD_BALANCERS: "karpenter"}},
            "spec": {"taints": disrupted::with_taint(node)},
        }),
    )
    .await?;
    tracing::info!("tainted node");
    Ok(written)
}

/// Releases the Node's finalizer: the instance is gone.
async fn release(ctx: &Context, node: &Node) -> Result<Requeue> {
    if !finalizers::remove(&ctx.nodes(), node, labels::TERMINATION_FINALIZER).await? {
        // Released already, by a pass that read it first: counted there.
        return Ok(None);
    }
    if let Some(created) = &node.metadata.creation_timestamp {
        let pool = PoolLabels {
            nodepool: node
                .labels()
                .get(labels::NODE_POOL)
                .cloned()
                .unwrap_or_default(),
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let seconds = crate::metrics::seconds_between(created.0, now);
        ctx.metrics
            .nodes_lifetime
            .get_or_create(&pool)
            .observe(seconds);
    }
    ctx.metrics
        .nodes_terminated
        .get_or_create(&PoolZoneLabels {
            nodepool: node
                .labels()
                .get(labels::NODE_POOL)
                .cloned()
                .unwrap_or_default(),
            zone: node
                .labels()
                .get(labels::TOPOLOGY_ZONE)
                .cloned()
                .unwrap_or_default(),
        })
        .inc();
    tracing::info!("deleted node");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_reason_follows_the_claims_disruption() {
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"conditions": [{"type": "DisruptionReason", "status": "True", "reason": "Underutilized",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(disruption_reason(&claim), "Underutilized");
        let mut plain = claim.clone();
        plain.status = None;
        assert_eq!(disruption_reason(&plain), "Forceful Termination");
    }
}
