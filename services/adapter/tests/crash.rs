//! Crash safety: the adapter killed at each step of a launch and of a
//! drain, then started again. Nothing may leak, launch twice or be lost.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Cluster, eventually};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::NodeClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// One instance per claim, each claim launched on its own instance, every
/// pod running.
async fn consistent(cluster: &Cluster, app: &str, replicas: usize) {
    eventually(
        "pods running and one instance per claim",
        Duration::from_secs(60),
        || async {
            let claims = cluster.claims().await;
            let instances = cluster.kwok.instances();
            cluster.running(app, replicas).await
                && claims.len() == instances.len()
                && claims.iter().all(|c| {
                    instances.iter().any(|i| {
                        Some(i.provider_id.as_str()) == c.provider_id()
                            && i.node_claim_name == c.name_any()
                    })
                })
        },
    )
    .await;
}

async fn pool_and_pods(cluster: &Cluster, replicas: i32) {
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster
        .deployment("inflate", replicas, "1", json!({}))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_the_claim_is_created() {
    let cluster = Cluster::start().await;
    cluster.holds.before_create.store(true, Ordering::SeqCst);
    let adapter = cluster.adapter().await;
    pool_and_pods(&cluster, 2).await;
    eventually("a claim created", Duration::from_secs(20), || async {
        !cluster.claims().await.is_empty()
    })
    .await;
    adapter.kill();
    assert!(cluster.kwok.instances().is_empty(), "nothing launched yet");
    cluster.holds.before_create.store(false, Ordering::SeqCst);
    let adapter = cluster.adapter().await;
    consistent(&cluster, "inflate", 2).await;
    assert_eq!(
        cluster.claims().await.len(),
        1,
        "the claim of the first run is launched, not replaced"
    );
    adapter.stop().await;
}

async fn killed_after_create(cluster: Cluster) {
    cluster.holds.after_create.store(true, Ordering::SeqCst);
    let adapter = cluster.adapter().await;
    pool_and_pods(&cluster, 2).await;
    eventually("an instance launched", Duration::from_secs(20), || async {
        !cluster.kwok.instances().is_empty()
    })
    .await;
    adapter.kill();
    let claims = cluster.claims().await;
    assert_eq!(claims.len(), 1);
    assert!(
        claims[0].provider_id().is_none(),
        "the answer never reached the claim"
    );
    cluster.holds.after_create.store(false, Ordering::SeqCst);
    let adapter = cluster.adapter().await;
    consistent(&cluster, "inflate", 2).await;
    assert_eq!(cluster.kwok.instances().len(), 1, "not launched twice");
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_the_instance_is_created() {
    killed_after_create(Cluster::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_the_instance_is_created_over_https() {
    killed_after_create(Cluster::start_with(true).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_registration() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    pool_and_pods(&cluster, 2).await;
    eventually("a claim registered", Duration::from_secs(20), || async {
        cluster.claims().await.iter().any(|c| c.is_registered())
    })
    .await;
    adapter.kill();
    let adapter = cluster.adapter().await;
    consistent(&cluster, "inflate", 2).await;
    // Pods bind as soon as the node is Ready; the claim's Initialized
    // write may land a moment later (other controllers write its status too).
    eventually(
        "every claim initialized after the restart",
        Duration::from_secs(20),
        || async { cluster.claims().await.iter().all(|c| c.is_initialized()) },
    )
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_drain() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    pool_and_pods(&cluster, 2).await;
    consistent(&cluster, "inflate", 2).await;
    // A PDB that allows no eviction holds the drain.
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "inflate"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "inflate"}}}
    }))
    .expect("pdb");
    let pdbs = Api::<PodDisruptionBudget>::default_namespaced(cluster.client.clone());
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("pdb");
    let victim = cluster.claims().await.remove(0);
    Api::<NodeClaim>::all(cluster.client.clone())
        .delete(&victim.name_any(), &DeleteParams::default())
        .await
        .expect("deleted");
    let node_name = victim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    eventually(
        "the node tainted for the drain",
        Duration::from_secs(20),
        || async {
            cluster.nodes().await.iter().any(|n| {
                n.name_any() == node_name
                    && n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
            })
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    adapter.kill();
    assert_eq!(
        cluster.pods("inflate").await.len(),
        2,
        "the PDB kept the pods"
    );
    let adapter = cluster.adapter().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        cluster
            .nodes()
            .await
            .iter()
            .any(|n| n.name_any() == node_name),
        "the drain still waits for the PDB after the restart"
    );
    pdbs.delete("inflate", &DeleteParams::default())
        .await
        .expect("pdb lifted");
    eventually("the node gone", Duration::from_secs(30), || async {
        !cluster
            .nodes()
            .await
            .iter()
            .any(|n| n.name_any() == node_name)
    })
    .await;
    consistent(&cluster, "inflate", 2).await;
    adapter.stop().await;
}

/// Upstream's crash cleanup for disruption: the adapter dies after a
/// consolidation tainted its candidate and created the replacement (its
/// launch held). After the restart the candidate is untainted, the
/// replacement launches as ordinary capacity, consolidation runs again, and
/// the cluster ends on one small node: no leaked instance, no pod lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_consolidation_after_the_replacement_is_created() {
    const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": INSTANCE_TYPE, "operator": "In", "values": ["c-2x-amd64-linux", "c-8x-amd64-linux"]}]}}),
            json!({"disruption": {"consolidateAfter": "2s"}}),
        ))
        .await;
    cluster.deployment("inflate", 6, "1", json!({})).await;
    consistent(&cluster, "inflate", 6).await;
    cluster.holds.before_create.store(true, Ordering::SeqCst);
    cluster.scale("inflate", 1).await;
    let disrupted = |node: &k8s_openapi::api::core::v1::Node| {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
    };
    eventually(
        "the candidate tainted and its replacement created",
        Duration::from_secs(60),
        || async {
            cluster.claims().await.len() == 2 && cluster.nodes().await.iter().any(disrupted)
        },
    )
    .await;
    adapter.kill();
    cluster.holds.before_create.store(false, Ordering::SeqCst);
    let adapter = cluster.adapter().await;
    eventually(
        "one small node, no taint left, the pod running",
        Duration::from_secs(120),
        || async {
            let claims = cluster.claims().await;
            let nodes = cluster.nodes().await;
            claims.len() == 1
                && common::label(&claims[0], INSTANCE_TYPE) == Some("c-2x-amd64-linux")
                && nodes.len() == 1
                && !nodes.iter().any(disrupted)
                && cluster.running("inflate", 1).await
        },
    )
    .await;
    consistent(&cluster, "inflate", 1).await;
    adapter.stop().await;
}
