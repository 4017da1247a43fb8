//! Registration: the Node whose `spec.providerID` is the claim's joins the
//! claim. Its labels, annotations and taints are synced from the claim, it
//! gets the termination finalizer and an owner reference to the claim, the
//! `karpenter.sh/unregistered` taint comes off and `karpenter.sh/registered`
//! goes on; then the claim is `Registered` with its `nodeName`.

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::CONDITION_REGISTERED;
use karpenter_core::labels;
use kube::ResourceExt;
use serde_json::json;

use crate::controllers::Context;
use crate::error::Result;
use crate::events::{Event, Kind};
use crate::metrics::{PoolLabels, PoolZoneLabels};
use crate::objects::claim::claim_conditions;
use crate::objects::finalizers;
use crate::objects::patch;
use crate::state::index::Index;

use karpenter_core::labels::DO_NOT_SYNC_TAINTS;

/// Registers the claim's Node; returns it as written (for initialization
/// to read without waiting for the watch).
pub(super) async fn register(
    ctx: &Context,
    index: &Index,
    claim: &mut NodeClaim,
) -> Result<Option<Node>> {
    {
        let mut conditions = claim_conditions(claim);
        if !conditions.is_unknown(CONDITION_REGISTERED) {
            conditions.refresh(CONDITION_REGISTERED);
            return Ok(None);
        }
    }
    let provider_id = claim.provider_id().unwrap_or_default().to_owned();
    let node = match index.nodes_for_provider_id(&provider_id) {
        [] => {
            claim_conditions(claim).set_unknown(
                CONDITION_REGISTERED,
                "NodeNotFound",
                "Node not registered with cluster",
            );
            return Ok(None);
        }
        [node] => node.clone(),
        _ => {
            claim_conditions(claim).set_false(
                CONDITION_REGISTERED,
                "MultipleNodesFound",
                "Invariant violated, matched multiple nodes",
            );
            return Ok(None);
        }
    };
    if !node.labels().contains_key(labels::REGISTERED) && !has_unregistered_taint(&node) {
        tracing::error!(node = %node.name_any(), "node registered without the karpenter.sh/unregistered taint");
        ctx.recorder.emit(Event::new(
            claim,
            Kind::Warning,
            "UnregisteredTaintMissing",
            "Missing karpenter.sh/unregistered taint which prevents registration related race conditions on Karpenter-managed nodes",
        ));
    }
    let synced = synced_node(claim, &node);
    let written = if synced == *node {
        synced
    } else {
        let patch = json!({
            "metadata": {
                "labels": synced.labels(),
                "annotations": synced.annotations(),
                "finalizers": synced.finalizers(),
                "ownerReferences": synced.owner_references(),
            },
            "spec": {"taints": synced.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default()},
        });
        patch::merge(&ctx.nodes(), &node, patch).await?
    };
    claim_conditions(claim).set_true(CONDITION_REGISTERED);
    claim.status.get_or_insert_with(Default::default).node_name = Some(written.name_any());
    let pool = claim.node_pool().unwrap_or_default().to_owned();
    let (zone, _) = crate::objects::claim::zone_and_capacity(claim.labels());
    ctx.metrics
        .nodes_created
        .get_or_create(&PoolZoneLabels {
            nodepool: pool.clone(),
            zone,
        })
        .inc();
    ctx.metrics
        .nodeclaims_registered
        .get_or_create(&PoolLabels { nodepool: pool })
        .inc();
    tracing::info!(node = %written.name_any(), "registered nodeclaim");
    Ok(Some(written))
}

fn has_unregistered_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t.key == labels::UNREGISTERED_TAINT_KEY && t.effect == "NoExecute")
        })
}

fn node_taint(taint: &karpenter_api::Taint) -> Taint {
    Taint {
        key: taint.key.clone(),
        value: taint.value.clone(),
        effect: taint.effect.as_str().to_owned(),
        time_added: None,
    }
}

/// The Node as a registered node of `claim`: labels and annotations of the
/// claim over the Node's own, the claim's taints and startup taints added
/// where the Node has none with the same key and effect (unless it opts
/// out), the finalizer and owner reference, registered and not tainted
/// unregistered.
pub(crate) fn synced_node(claim: &NodeClaim, node: &Node) -> Node {
    let mut synced = node.clone();
    finalizers::ensure(&mut synced, labels::TERMINATION_FINALIZER);
    let uid = claim.uid().unwrap_or_default();
    let owners = synced.owner_references_mut();
    if !owners
        .iter()
        .any(|o| o.api_version == "karpenter.sh/v1" && o.kind == "NodeClaim" && o.uid == uid)
    {
        owners.push(OwnerReference {
            api_version: "karpenter.sh/v1".to_owned(),
            kind: "NodeClaim".to_owned(),
            name: claim.name_any(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    let spec = synced.spec.get_or_insert_with(Default::default);
    let mut taints = spec.taints.take().unwrap_or_default();
    if node.labels().get(DO_NOT_SYNC_TAINTS).map(String::as_str) != Some("true") {
        for taint in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
            if !taints
                .iter()
                .any(|t| t.key == taint.key && t.effect == taint.effect.as_str())
            {
                taints.push(node_taint(taint));
            }
        }
    }
    taints.retain(|t| !(t.key == labels::UNREGISTERED_TAINT_KEY && t.effect == "NoExecute"));
    spec.taints = (!taints.is_empty()).then_some(taints);
    synced.annotations_mut().extend(claim.annotations().clone());
    let node_labels = synced.labels_mut();
    node_labels.extend(claim.labels().clone());
    node_labels.insert(labels::REGISTERED.to_owned(), "true".to_owned());
    synced
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::node_claim;
    use serde_json::json;

    fn claim() -> NodeClaim {
        node_claim(json!({
            "metadata": {"name": "default-abc", "uid": "claim-uid",
                         "labels": {"karpenter.sh/nodepool": "default", "team": "a"},
                         "annotations": {"karpenter.sh/nodepool-hash": "1"}},
            "spec": {"taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                     "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}]}
        }))
    }

    fn node(labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": labels},
            "spec": {"providerID": "kwok://n1", "taints": taints}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_registered_node_carries_the_claims_labels_taints_and_owner() {
        let node = node(
            json!({"team": "b", "kubernetes.io/hostname": "n1"}),
            json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                   {"key": "dedicated", "value": "other", "effect": "NoSchedule"}]),
        );
        let synced = synced_node(&claim(), &node);
        let l = synced.labels();
        assert_eq!(
            l.get("team").map(String::as_str),
            Some("a"),
            "the claim wins"
        );
        assert_eq!(l.get(labels::REGISTERED).map(String::as_str), Some("true"));
        assert_eq!(
            l.get("kubernetes.io/hostname").map(String::as_str),
            Some("n1")
        );
        let taints = synced
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let keys: Vec<(&str, Option<&str>)> = taints
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [("dedicated", Some("other")), ("example.com/agent", None)],
            "the node's own value stays; the startup taint is added; unregistered is gone"
        );
        assert_eq!(synced.finalizers(), [labels::TERMINATION_FINALIZER]);
        assert_eq!(synced.owner_references()[0].uid, "claim-uid");
        // Syncing again changes nothing.
        assert_eq!(synced_node(&claim(), &synced), synced);
    }

    #[test]
    fn a_node_can_keep_its_own_taints() {
        let node = node(json!({DO_NOT_SYNC_TAINTS: "true"}), json!([]));
        let synced = synced_node(&claim(), &node);
        assert!(
            synced
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_none()
        );
    }
}
