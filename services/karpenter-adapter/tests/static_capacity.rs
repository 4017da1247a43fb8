//! Static NodePools end to end (Karpenter's `static.provisioning` and
//! `static.deprovisioning`, gate `StaticCapacity`, on provider-kwok): a
//! static pool keeps `replicas` nodes without pending pods, within
//! `limits.nodes`, follows `kubectl scale nodepool`, and is not emptied;
//! a template change replaces its nodes one budget at a time (static
//! drift), never past `limits.nodes` nor below `replicas`.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use karpenter_api::NodePool;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn static_pool(replicas: i64, limits: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({"replicas": replicas, "disruption": {"consolidateAfter": "0s"}});
    if !limits.is_null() {
        spec["limits"] = limits;
    }
    Cluster::pool(
        "fixed",
        json!({"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}]}}),
        spec,
    )
}

async fn active_claims(cluster: &Cluster) -> usize {
    cluster
        .claims()
        .await
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .count()
}

async fn scale(cluster: &Cluster, replicas: i64) {
    Api::<NodePool>::all(cluster.client.clone())
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scaled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_static_pool_keeps_its_replicas_and_follows_scaling() {
    let cluster = Cluster::start().await;
    let settings = cluster.settings(&["--feature-gates", "StaticCapacity=true"]);
    let _adapter = cluster.adapter_with(settings, common::test_timing()).await;
    cluster
        .node_pool(static_pool(2, serde_json::Value::Null))
        .await;

    eventually(
        "two nodes for replicas 2",
        Duration::from_secs(60),
        || async { cluster.nodes().await.len() == 2 && active_claims(&cluster).await == 2 },
    )
    .await;
    // Empty, consolidatable at once: still kept, and no more launched.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        cluster.nodes().await.len(),
        2,
        "a static pool is not emptied"
    );
    assert_eq!(cluster.claims().await.len(), 2, "nor grown");

    scale(&cluster, 3).await;
    eventually("a third node", Duration::from_secs(60), || async {
        cluster.nodes().await.len() == 3
    })
    .await;
    scale(&cluster, 1).await;
    eventually("scaled down to one", Duration::from_secs(90), || async {
        cluster.nodes().await.len() == 1 && cluster.claims().await.len() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_static_pool_stops_at_limits_nodes_and_waits_for_its_gate() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(static_pool(3, json!({"nodes": "2"})))
        .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        cluster.claims().await.len(),
        0,
        "the gate is off by default"
    );
    adapter.stop().await;

    let settings = cluster.settings(&["--feature-gates", "StaticCapacity=true"]);
    let _adapter = cluster.adapter_with(settings, common::test_timing()).await;
    eventually(
        "two claims, as limits.nodes allows",
        Duration::from_secs(60),
        || async { cluster.claims().await.len() == 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(cluster.claims().await.len(), 2, "never past limits.nodes");
}

const TEAM: &str = "example.com/team";

fn teams_of(nodes: &[k8s_openapi::api::core::v1::Node]) -> Vec<String> {
    common::serving_label_values(nodes, TEAM)
}

// Upstream staticdrift_test.go and the static capacity e2e: a drifted static
// node is replaced by the pool's template, within the Drifted budget and
// limits.nodes, and the pool is never scaled down under its replacements.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_static_pools_drifted_nodes_are_replaced_within_budget_and_limits() {
    let cluster = Cluster::start().await;
    let settings = cluster.settings(&["--feature-gates", "StaticCapacity=true"]);
    let _adapter = cluster.adapter_with(settings, common::test_timing()).await;
    let mut pool = static_pool(2, json!({"nodes": "3"}));
    pool["spec"]["template"]["metadata"]["labels"] = json!({TEAM: "a"});
    pool["spec"]["disruption"]["budgets"] = json!([{"nodes": "1", "reasons": ["Drifted"]}]);
    cluster.node_pool(pool).await;
    eventually("two nodes of team a", Duration::from_secs(60), || async {
        teams_of(&cluster.nodes().await) == ["a", "a"]
    })
    .await;

    Api::<NodePool>::all(cluster.client.clone())
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {TEAM: "b"}}}}})),
        )
        .await
        .expect("template changed");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(150);
    let mut most_claims = 0;
    loop {
        let claims = cluster.claims().await;
        most_claims = most_claims.max(claims.len());
        let nodes = cluster.nodes().await;
        let serving = nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .count();
        assert!(
            serving >= 2,
            "a static pool never drops below replicas while it drifts: {serving} nodes, {} claims",
            claims.len()
        );
        if teams_of(&nodes) == ["b", "b"] && claims.len() == 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "both nodes replaced by the new template; nodes {:?}, {} claims",
            teams_of(&nodes),
            claims.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        most_claims <= 3,
        "never past limits.nodes: {most_claims} claims at once"
    );
    assert!(
        most_claims == 3,
        "each replacement launched before its node went"
    );
}
