//! Node repair end to end (upstream's `node/health` suite, on provider-kwok,
//! whose repair policy is `Ready` False or Unknown for 10 minutes): an
//! unhealthy node is replaced even when a PDB and do-not-disrupt would hold
//! a graceful disruption, and nothing is repaired while more than 20% of a
//! pool is unhealthy.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn pool() -> serde_json::Value {
    Cluster::pool(
        "default",
        json!({"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}]}}),
        json!({"disruption": {"consolidateAfter": "Never"}}),
    )
}

/// Sets the node's `Ready` condition, as its kubelet (or the node
/// lifecycle controller) would, changed `minutes_ago`.
async fn set_ready(cluster: &Cluster, node: &str, status: &str, minutes_ago: i64) {
    let since = Timestamp::now() - SignedDuration::from_mins(minutes_ago);
    let since = since.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    Api::<Node>::all(cluster.client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": status, "reason": "KubeletNotReady",
                "message": "container runtime is down",
                "lastHeartbeatTime": since, "lastTransitionTime": since}]}})),
        )
        .await
        .expect("node status patched");
}

async fn node_names(cluster: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .nodes()
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

fn repair_settings(cluster: &Cluster) -> karpenter_adapter::settings::Settings {
    cluster.settings(&["--feature-gates", "NodeRepair=true"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unhealthy_node_is_replaced_whatever_holds_graceful_disruption() {
    let cluster = Cluster::start().await;
    let adapter = cluster
        .adapter_with(repair_settings(&cluster), common::test_timing())
        .await;
    cluster.node_pool(pool()).await;
    cluster.deployment("inflate", 1, "1500m", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    // A PDB allowing no disruption and a do-not-disrupt node: neither holds
    // a repair back.
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "inflate"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "inflate"}}}
    }))
    .expect("pdb");
    Api::<PodDisruptionBudget>::default_namespaced(cluster.client.clone())
        .create(&PostParams::default(), &pdb)
        .await
        .expect("pdb created");
    let sick = node_names(&cluster).await.remove(0);
    Api::<Node>::all(cluster.client.clone())
        .patch(
            &sick,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
        )
        .await
        .expect("node annotated");

    // NotReady for less than the toleration: nothing happens.
    set_ready(&cluster, &sick, "False", 5).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        node_names(&cluster).await,
        std::slice::from_ref(&sick),
        "still tolerated"
    );

    set_ready(&cluster, &sick, "False", 11).await;
    eventually(
        "the unhealthy node replaced and the pod running elsewhere",
        Duration::from_secs(90),
        || async {
            let names = node_names(&cluster).await;
            let pods = cluster.pods("inflate").await;
            names.len() == 1
                && names[0] != sick
                && cluster.running("inflate", 1).await
                && pods.iter().all(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(names[0].as_str())
                })
        },
    )
    .await;
    let metrics = adapter.metrics().await;
    assert!(
        metrics.lines().any(|l| {
            l.starts_with("karpenter_nodeclaims_unhealthy_disrupted_total{")
                && l.contains("condition=\"ready\"")
                && l.ends_with(" 1")
        }),
        "{metrics}"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_repaired_while_more_than_a_fifth_of_the_pool_is_unhealthy() {
    let cluster = Cluster::start().await;
    let adapter = cluster
        .adapter_with(repair_settings(&cluster), common::test_timing())
        .await;
    cluster.node_pool(pool()).await;
    // One pod per 2-vCPU node.
    cluster.deployment("inflate", 3, "1500m", json!({})).await;
    eventually("three pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 3)
    })
    .await;
    let before = node_names(&cluster).await;
    assert_eq!(before.len(), 3);

    // Two of three unhealthy is more than 20% (rounded up, one node). The
    // adapter is down meanwhile, so it never sees one without the other.
    adapter.stop().await;
    set_ready(&cluster, &before[0], "Unknown", 30).await;
    set_ready(&cluster, &before[1], "False", 30).await;
    let adapter = cluster
        .adapter_with(repair_settings(&cluster), common::test_timing())
        .await;
    let events = Api::<Event>::all(cluster.client.clone());
    eventually(
        "repair blocked, told on the node",
        Duration::from_secs(30),
        || async {
            events.list(&Default::default()).await.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some("NodeRepairBlocked")
                        && e.involved_object.kind.as_deref() == Some("Node")
                        && e.message.as_deref().is_some_and(|m| m.contains("nodepool"))
                })
            })
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node_names(&cluster).await, before, "no node repaired");

    // One recovers: one of three is within the allowance, so it goes.
    set_ready(&cluster, &before[1], "True", 0).await;
    eventually(
        "the remaining unhealthy node replaced",
        Duration::from_secs(90),
        || async {
            let names = node_names(&cluster).await;
            names.len() == 3
                && !names.contains(&before[0])
                && names.contains(&before[1])
                && names.contains(&before[2])
                && cluster.running("inflate", 3).await
        },
    )
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_feature_gate_an_unhealthy_node_stays() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.node_pool(pool()).await;
    cluster.deployment("inflate", 1, "1500m", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let before = node_names(&cluster).await;
    set_ready(&cluster, &before[0], "False", 60).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        node_names(&cluster).await,
        before,
        "NodeRepair is off by default"
    );
    adapter.stop().await;
}
