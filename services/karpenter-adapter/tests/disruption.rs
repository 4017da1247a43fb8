//! The disruption state of NodeClaims end to end: `Consolidatable` once
//! initialized and past `consolidateAfter`, `Drifted` with Karpenter's
//! reasons when the NodePool changes under a claim.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use karpenter_api::{NodeClaim, NodePool};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn condition(claim: &NodeClaim, type_: &str) -> Option<(String, String)> {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (format!("{:?}", c.status), c.reason.clone()))
}

async fn only_claim(cluster: &Cluster) -> Option<NodeClaim> {
    let mut claims = cluster.claims().await;
    (claims.len() == 1).then(|| claims.remove(0))
}

/// The cells of `column` in `kubectl get nodeclaims -o wide` (the API
/// server's Table rendering of the CRD's printer columns).
async fn wide_column(cluster: &Cluster, column: &str) -> Vec<String> {
    let request = http::Request::get("/apis/karpenter.sh/v1/nodeclaims")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .expect("request");
    let table: serde_json::Value = cluster.client.request(request).await.expect("table");
    let index = table["columnDefinitions"]
        .as_array()
        .and_then(|columns| columns.iter().position(|c| c["name"] == column))
        .unwrap_or_else(|| panic!("no {column} column: {table}"));
    table["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|row| row["cells"][index].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_become_consolidatable_and_drift_when_their_pool_changes() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({}),
            json!({"disruption": {"consolidateAfter": "2s"}}),
        ))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("the pod running", Duration::from_secs(40), || {
        cluster.running("inflate", 1)
    })
    .await;
    eventually(
        "the claim consolidatable after consolidateAfter",
        Duration::from_secs(30),
        || async {
            only_claim(&cluster).await.is_some_and(|c| {
                condition(&c, "Consolidatable").is_some_and(|(status, _)| status == "True")
            })
        },
    )
    .await;
    let claim = only_claim(&cluster).await.expect("one claim");
    assert!(
        condition(&claim, "Drifted").is_none(),
        "nothing drifted yet"
    );
    assert!(
        claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref())
            .is_some(),
        "binding the pod is a pod event"
    );
    let capacity_type = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("karpenter.sh/capacity-type").cloned())
        .expect("capacity type label");
    let other = if capacity_type == "spot" {
        "on-demand"
    } else {
        "spot"
    };

    let pools = Api::<NodePool>::all(cluster.client.clone());
    pools
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [other]}]}}}})),
        )
        .await
        .expect("requirements narrowed");
    eventually(
        "RequirementsDrifted once the claim's capacity type is no longer allowed",
        Duration::from_secs(30),
        || async {
            only_claim(&cluster).await.is_some_and(|c| {
                condition(&c, "Drifted") == Some(("True".into(), "RequirementsDrifted".into()))
            })
        },
    )
    .await;
    assert_eq!(
        wide_column(&cluster, "Drifted").await,
        ["True"],
        "kubectl get nodeclaims -o wide shows the drift"
    );
    pools
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})),
        )
        .await
        .expect("label added");
    eventually(
        "NodePoolDrifted once the template's hash moves",
        Duration::from_secs(30),
        || async {
            only_claim(&cluster).await.is_some_and(|c| {
                condition(&c, "Drifted") == Some(("True".into(), "NodePoolDrifted".into()))
            })
        },
    )
    .await;
    adapter.stop().await;
}

/// Karpenter's node class hash controller: when the provider hashes its
/// node classes differently (a new hash version), a claim with the old
/// version takes the new version and the class's new hash (unless it has
/// drifted already), so that it can drift again; before, a claim launched
/// under the old version never drifted from its node class.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_of_an_older_node_class_hash_version_take_the_new_hash() {
    const HASH: &str = "karpenter.kwok.sh/kwoknodeclass-hash";
    const VERSION: &str = "karpenter.kwok.sh/kwoknodeclass-hash-version";
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("the pod running", Duration::from_secs(40), || {
        cluster.running("inflate", 1)
    })
    .await;
    let claim = only_claim(&cluster).await.expect("a claim");
    let current = |key: &str| claim.annotations().get(key).cloned().expect("annotated");
    let (hash, version) = (current(HASH), current(VERSION));
    Api::<karpenter_api::NodeClaim>::all(cluster.client.clone())
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {HASH: "stale", VERSION: "v0"}}})),
        )
        .await
        .expect("patched");
    eventually(
        "the claim takes the current version and hash",
        Duration::from_secs(30),
        || async {
            only_claim(&cluster).await.is_some_and(|c| {
                c.annotations().get(VERSION) == Some(&version)
                    && c.annotations().get(HASH) == Some(&hash)
            })
        },
    )
    .await;
    adapter.stop().await;
}
