//! Waiting for a terminating node's volumes to detach (Karpenter's
//! `awaitVolumeDetachment`): the attach-detach controller deletes the
//! VolumeAttachments of the pods that left; until it has, the instance
//! stays, so their volumes can attach where the pods went. Attachments of
//! pods still on the node (they do not drain) do not count, nor do those
//! without a persistent volume. Past the claim's termination grace period
//! nothing is waited for.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_api::NodeClaim;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::controllers::Context;
use crate::error::Result;
use crate::events::{Event, Kind};
use crate::objects::claim::claim_conditions;
use crate::state::index::Index;

/// The claim condition: the node's volumes are detached.
pub const VOLUMES_DETACHED: &str = "VolumesDetached";
/// How soon a node waiting for its volumes is looked at again.
pub const POLL: Duration = Duration::from_secs(2);

/// Whether the instance may go: its drained pods' volumes are detached,
/// or the grace period is over. Sets `VolumesDetached` on the claim.
pub async fn detached(
    ctx: &Context,
    index: &Index,
    node: &Node,
    claim: &mut NodeClaim,
    deadline: Option<k8s_openapi::jiff::Timestamp>,
) -> Result<bool> {
    let pending = pending(ctx, index, node).await?;
    if pending.is_empty() {
        claim_conditions(claim).set_true(VOLUMES_DETACHED);
        return Ok(true);
    }
    if deadline.is_some_and(|d| k8s_openapi::jiff::Timestamp::now() > d) {
        let why = "TerminationGracePeriodElapsed";
        claim_conditions(claim).set_false(VOLUMES_DETACHED, why, why);
        return Ok(true);
    }
    let why = "AwaitingVolumeDetachment";
    claim_conditions(claim).set_unknown(VOLUMES_DETACHED, why, why);
    let message = format!(
        "Awaiting deletion of bound volumeattachments ({})",
        listed(&pending, 5)
    );
    ctx.recorder
        .emit(Event::new(node, Kind::Normal, why, &message).dedupe_on(node.name_any()));
    Ok(false)
}

/// `a, b, c` of the first `shown`, then `and N other(s)`.
fn listed(names: &[String], shown: usize) -> String {
    let mut text = names
        .iter()
        .take(shown)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > shown {
        text.push_str(&format!(" and {} other(s)", names.len() - shown));
    }
    text
}

/// The node's VolumeAttachments that hold it: of a persistent volume no
/// pod still on the node uses.
async fn pending(ctx: &Context, index: &Index, node: &Node) -> Result<Vec<String>> {
    let name = node.name_any();
    let api: Api<VolumeAttachment> = Api::all(ctx.client.clone());
    // Any recent state will do (the API server answers from its watch
    // cache): this runs every few seconds for each node waiting here.
    let attachments: Vec<VolumeAttachment> = api
        .list(&ListParams::default().match_any())
        .await?
        .items
        .into_iter()
        .filter(|va| va.spec.node_name == name)
        .collect();
    if attachments.is_empty() {
        return Ok(Vec::new());
    }
    let staying = staying_volumes(ctx, index, &name).await?;
    Ok(attachments
        .into_iter()
        .filter(|va| {
            va.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !staying.contains(pv))
        })
        .map(|va| va.name_any())
        .collect())
}

/// The persistent volumes of the pods still on the node (the drain is
/// done: what is left does not drain), from the API server's own list.
async fn staying_volumes(ctx: &Context, index: &Index, node: &str) -> Result<BTreeSet<String>> {
    let pods = ctx
        .all_pods()
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    let mut volumes = BTreeSet::new();
    for pod in pods.items {
        let terminal = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        if terminal {
            continue;
        }
        let namespace = pod.namespace().unwrap_or_default();
        let claims = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .map(|c| c.claim_name.clone())
            });
        for claim in claims {
            if let Some(volume) = index
                .persistent_volume_claims
                .get(&namespace, &claim)
                .and_then(|pvc| pvc.spec.as_ref()?.volume_name.clone())
            {
                volumes.insert(volume);
            }
        }
    }
    Ok(volumes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_are_listed_as_karpenter_lists_them() {
        let names: Vec<String> = (1..=7).map(|i| format!("va-{i}")).collect();
        assert_eq!(listed(&names[..2], 5), "va-1, va-2");
        assert_eq!(
            listed(&names, 5),
            "va-1, va-2, va-3, va-4, va-5 and 2 other(s)"
        );
    }
}
