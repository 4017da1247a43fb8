//! Provisioning and the claim lifecycle end to end: pending pods become
//! NodeClaims, instances, registered and initialized Nodes, and bound pods.

mod common;

use std::time::Duration;

use common::{Cluster, condition, eventually, label};
use karpenter_core::labels;
use kube::ResourceExt;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_pods_get_nodes_that_carry_the_pools_labels_and_taints() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({
                "metadata": {"labels": {"team": "checkout"}, "annotations": {"example.com/owner": "a"}},
                "spec": {"taints": [{"key": "dedicated", "value": "checkout", "effect": "NoSchedule"}]}
            }),
            json!({}),
        ))
        .await;
    cluster
        .deployment(
            "inflate",
            5,
            "1",
            json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "checkout", "effect": "NoSchedule"}]}),
        )
        .await;
    eventually(
        "5 pods running on new nodes",
        Duration::from_secs(60),
        || cluster.running("inflate", 5),
    )
    .await;

    let claims = cluster.claims().await;
    assert!(!claims.is_empty());
    for claim in &claims {
        for condition_type in ["Launched", "Registered", "Initialized", "Ready"] {
            assert_eq!(
                condition(claim, condition_type).as_deref(),
                Some("True"),
                "{} {condition_type}: {:?}",
                claim.name_any(),
                claim.status
            );
        }
        assert_eq!(label(claim, labels::NODE_POOL), Some("default"));
        assert!(claim.name_any().starts_with("default-"));
        assert!(
            claim
                .finalizers()
                .contains(&labels::TERMINATION_FINALIZER.to_owned())
        );
        let owner = &claim.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("NodePool", "default")
        );
    }
    let nodes = cluster.nodes().await;
    assert_eq!(nodes.len(), claims.len(), "one node per claim");
    for node in &nodes {
        assert_eq!(label(node, "team"), Some("checkout"));
        assert_eq!(label(node, labels::NODE_POOL), Some("default"));
        assert_eq!(label(node, labels::REGISTERED), Some("true"));
        assert_eq!(label(node, labels::INITIALIZED), Some("true"));
        assert_eq!(
            node.annotations()
                .get("example.com/owner")
                .map(String::as_str),
            Some("a")
        );
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "dedicated" && t.value.as_deref() == Some("checkout"))
        );
        assert!(
            !taints
                .iter()
                .any(|t| t.key == labels::UNREGISTERED_TAINT_KEY),
            "registration lifts the unregistered taint"
        );
        assert!(
            node.finalizers()
                .contains(&labels::TERMINATION_FINALIZER.to_owned())
        );
        assert_eq!(node.owner_references()[0].kind, "NodeClaim");
    }
    assert!(
        adapter.ready().await,
        "ready while reconciling with both peers up"
    );
    let metrics = adapter.metrics().await;
    assert!(
        metrics.contains("karpenter_nodeclaims_created_total{"),
        "{metrics}"
    );
    assert!(
        metrics.contains("karpenter_nodes_created_total{"),
        "{metrics}"
    );
    adapter.stop().await;
}
