//! Drift and budgets end to end (upstream's drift e2e suite and the
//! budget scenarios, on provider-kwok): a NodePool template change drifts
//! and replaces nodes without losing pods, a `nodes: "0"` budget holds
//! them until it is lifted, and a replacement that never initializes rolls
//! the command back.

mod common;

use std::time::Duration;

use common::{Cluster, eventually, test_timing};
use karpenter_adapter::controllers::Timing;
use karpenter_api::NodePool;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const TEAM: &str = "example.com/team";

fn pool(spec_extra: serde_json::Value) -> serde_json::Value {
    Cluster::pool(
        "default",
        json!({"metadata": {"labels": {TEAM: "a"}},
               "spec": {"requirements": [
                   {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                   {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}]}}),
        spec_extra,
    )
}

async fn relabel(cluster: &Cluster, team: &str) {
    Api::<NodePool>::all(cluster.client.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {TEAM: team}}}}})),
        )
        .await
        .expect("pool patched");
}

async fn teams(cluster: &Cluster) -> Vec<String> {
    common::serving_label_values(&cluster.nodes().await, TEAM)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_template_change_drifts_and_replaces_every_node_and_pods_keep_running() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.node_pool(pool(json!({}))).await;
    cluster.deployment("inflate", 2, "1500m", json!({})).await;
    eventually("two pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 2)
    })
    .await;
    assert_eq!(teams(&cluster).await, ["a", "a"]);
    relabel(&cluster, "b").await;
    eventually(
        "every node replaced by one with the new label",
        Duration::from_secs(120),
        || async {
            teams(&cluster).await == ["b", "b"]
                && cluster.claims().await.len() == 2
                && cluster.running("inflate", 2).await
        },
    )
    .await;
    let metrics = adapter.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("karpenter_nodeclaims_disrupted_total{")
                && l.contains("reason=\"drifted\"")),
        "{metrics}"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zero_budget_holds_drifted_nodes_until_it_is_lifted() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(pool(
            json!({"disruption": {"consolidateAfter": "30s", "budgets": [{"nodes": "0"}]}}),
        ))
        .await;
    cluster.deployment("inflate", 1, "1500m", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let before = cluster.claims().await[0].metadata.name.clone();
    relabel(&cluster, "b").await;
    eventually("the claim drifted", Duration::from_secs(30), || async {
        cluster
            .claims()
            .await
            .iter()
            .any(|c| common::condition(c, "Drifted").as_deref() == Some("True"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let claims = cluster.claims().await;
    assert_eq!(claims.len(), 1, "nothing replaced under a zero budget");
    assert_eq!(claims[0].metadata.name, before);
    Api::<NodePool>::all(cluster.client.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disruption": {"budgets": [{"nodes": "1"}]}}})),
        )
        .await
        .expect("budget lifted");
    eventually(
        "replaced once the budget allows",
        Duration::from_secs(90),
        || async { teams(&cluster).await == ["b"] && cluster.running("inflate", 1).await },
    )
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replacement_that_never_initializes_rolls_the_command_back() {
    let cluster = Cluster::start().await;
    let timing = Timing {
        disruption_timeout: Duration::from_secs(6),
        ..test_timing()
    };
    let adapter = cluster.adapter_with(cluster.settings(&[]), timing).await;
    cluster.node_pool(pool(json!({}))).await;
    cluster.deployment("inflate", 1, "1500m", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let original = cluster.nodes().await[0]
        .metadata
        .name
        .clone()
        .unwrap_or_default();
    // New nodes come up with a startup taint nothing removes: the
    // replacement registers but never initializes.
    Api::<NodePool>::all(cluster.client.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {
                "metadata": {"labels": {TEAM: "b"}},
                "spec": {"startupTaints": [{"key": "example.com/never-ready", "effect": "NoSchedule"}]}}}})),
        )
        .await
        .expect("pool patched");
    eventually(
        "a replacement launched",
        Duration::from_secs(60),
        || async { cluster.claims().await.len() == 2 },
    )
    .await;
    let tainted = |nodes: &[k8s_openapi::api::core::v1::Node]| {
        nodes.iter().any(|n| {
            n.metadata.name.as_deref() == Some(original.as_str())
                && n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
        })
    };
    assert!(
        tainted(&cluster.nodes().await),
        "the candidate is tainted before its replacement launches"
    );
    eventually(
        "the original untainted after the command times out",
        Duration::from_secs(60),
        || async { !tainted(&cluster.nodes().await) },
    )
    .await;
    let nodes = cluster.nodes().await;
    let still = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(original.as_str()))
        .expect("the original node stays");
    assert!(still.metadata.deletion_timestamp.is_none());
    assert!(cluster.running("inflate", 1).await, "the pod never left");
    adapter.stop().await;
}
