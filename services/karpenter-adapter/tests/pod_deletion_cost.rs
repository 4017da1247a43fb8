//! Karpenter v1.15's PodDeletionCostManagement end to end (on
//! provider-kwok): with the gate on, a Deployment's pods carry
//! `controller.kubernetes.io/pod-deletion-cost` from the disruption plan's
//! ranking (every ranked node's pods a negative rank), so that its
//! ReplicaSet deletes pods from the nodes disruption would take first;
//! without the gate nothing is written.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use serde_json::json;

const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

fn costs(pods: &[k8s_openapi::api::core::v1::Pod]) -> Vec<Option<i64>> {
    pods.iter()
        .map(|p| {
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(POD_DELETION_COST))
                .and_then(|v| v.parse().ok())
        })
        .collect()
}

fn pool() -> serde_json::Value {
    Cluster::pool(
        "default",
        json!({"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}]}}),
        // Consolidation is on, but the pods fill their nodes: nothing moves;
        // every node is within the budget.
        json!({"disruption": {"consolidateAfter": "1h", "budgets": [{"nodes": "100%"}]}}),
    )
}

// Upstream controller_test.go: "should reconcile and update pod annotations
// when feature gate is enabled", "should only annotate pods whose
// controller owner reference is a ReplicaSet"; and the metric
// `pod_annotation_writes_total{result=updated}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_set_pods_carry_the_disruption_ranking_as_their_deletion_cost() {
    let cluster = Cluster::start().await;
    let settings = cluster.settings(&["--feature-gates", "PodDeletionCostManagement=true"]);
    let adapter = cluster.adapter_with(settings, common::test_timing()).await;
    cluster.node_pool(pool()).await;
    cluster.deployment("inflate", 2, "1500m", json!({})).await;
    eventually("two pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 2)
    })
    .await;
    eventually(
        "each pod carries its node's rank",
        Duration::from_secs(60),
        || async {
            let costs = costs(&cluster.pods("inflate").await);
            costs.len() == 2
                && costs
                    .iter()
                    .all(|c| c.is_some_and(|c| (-2..=-1).contains(&c)))
        },
    )
    .await;
    let mut ranks = costs(&cluster.pods("inflate").await);
    ranks.sort();
    assert_eq!(ranks, [Some(-2), Some(-1)], "one rank per node, -n to -1");
    let metrics = adapter.metrics().await;
    assert!(
        metrics.contains(
            "karpenter_pod_deletion_cost_pod_annotation_writes_total{result=\"updated\"} 2"
        ),
        "{metrics}"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_gate_no_deletion_cost_is_written() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.node_pool(pool()).await;
    cluster.deployment("inflate", 2, "1500m", json!({})).await;
    eventually("two pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 2)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(costs(&cluster.pods("inflate").await), [None, None]);
    adapter.stop().await;
}
