//! Crash safety: the adapter killed at each step of a launch, a drain, a
//! consolidation and an interruption, then started again. Nothing may
//! leak, launch twice, be lost, stay tainted or be disrupted twice.

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
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    consolidating(&cluster, 2).await;
    cluster.holds.before_create.store(true, Ordering::SeqCst);
    cluster.scale("inflate", 1).await;
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
    consolidated(&cluster).await;
    adapter.stop().await;
}

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";

fn disrupted(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
}

/// Six 1-vCPU pods on one 8-vCPU node, scaled to one: consolidation
/// replaces the node with a 2-vCPU one. Pods take `grace` seconds to stop.
async fn consolidating(cluster: &Cluster, grace: i64) {
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": INSTANCE_TYPE, "operator": "In", "values": ["c-2x-amd64-linux", "c-8x-amd64-linux"]}]}}),
            json!({"disruption": {"consolidateAfter": "2s"}}),
        ))
        .await;
    cluster
        .deployment(
            "inflate",
            6,
            "1",
            json!({"terminationGracePeriodSeconds": grace}),
        )
        .await;
    consistent(cluster, "inflate", 6).await;
}

/// The consolidation finished: one 2-vCPU node, untainted, the pod on it.
async fn consolidated(cluster: &Cluster) {
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
    consistent(cluster, "inflate", 1).await;
}

/// The adapter dies once the replacement's instance exists but before the
/// provider's answer reached it (the claim has no provider ID yet). After
/// the restart the claim's launch is asked again and finds the same
/// instance; the consolidation completes without a leaked instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_consolidation_after_the_replacement_is_launched() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    consolidating(&cluster, 2).await;
    cluster.holds.after_create.store(true, Ordering::SeqCst);
    cluster.scale("inflate", 1).await;
    eventually(
        "the candidate tainted and its replacement's instance launched",
        Duration::from_secs(60),
        || async {
            cluster.kwok.instances().len() == 2 && cluster.nodes().await.iter().any(disrupted)
        },
    )
    .await;
    adapter.kill();
    cluster.holds.after_create.store(false, Ordering::SeqCst);
    let adapter = cluster.adapter().await;
    consolidated(&cluster).await;
    adapter.stop().await;
}

/// The adapter dies while the consolidated node drains (its pod takes 20 s
/// to stop). After the restart the drain goes on, the replacement it had
/// launched is the node that stays (nothing disrupted twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_consolidation_drain() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    consolidating(&cluster, 20).await;
    cluster.scale("inflate", 1).await;
    let mut replacement = String::new();
    eventually(
        "the candidate draining onto its replacement",
        Duration::from_secs(90),
        || async {
            let claims = cluster.claims().await;
            let (deleting, live): (Vec<_>, Vec<_>) = claims
                .iter()
                .partition(|c| c.metadata.deletion_timestamp.is_some());
            let evicting = cluster.pods("inflate").await.iter().any(|p| {
                p.metadata.deletion_timestamp.is_some()
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == deleting
                            .first()
                            .and_then(|c| c.status.as_ref())
                            .and_then(|s| s.node_name.as_deref())
            });
            deleting.len() == 1 && live.len() == 1 && evicting
        },
    )
    .await;
    for claim in cluster.claims().await {
        if claim.metadata.deletion_timestamp.is_none() {
            replacement = claim.name_any();
        }
    }
    adapter.kill();
    let adapter = cluster.adapter().await;
    consolidated(&cluster).await;
    assert_eq!(
        cluster.claims().await[0].name_any(),
        replacement,
        "the replacement launched before the crash is the one kept"
    );
    adapter.stop().await;
}

fn spot_pool() -> serde_json::Value {
    Cluster::pool(
        "default",
        json!({"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": INSTANCE_TYPE, "operator": "In", "values": ["c-4x-amd64-linux"]}]}}),
        json!({}),
    )
}

/// Two pods on one spot node, then a spot interruption for it; returns the
/// interrupted claim's name.
async fn interrupted(cluster: &Cluster, grace: i64) -> String {
    cluster.node_pool(spot_pool()).await;
    cluster
        .deployment(
            "inflate",
            2,
            "1",
            json!({"terminationGracePeriodSeconds": grace}),
        )
        .await;
    consistent(cluster, "inflate", 2).await;
    let claim = cluster.claims().await.remove(0);
    let provider_id = claim.provider_id().expect("launched").to_owned();
    cluster
        .kwok
        .interrupt(&provider_kwok::InterruptionRequest {
            kind: "spot-interruption".into(),
            provider_ids: vec![provider_id],
            state: String::new(),
            detail: String::new(),
        })
        .expect("queued");
    claim.name_any()
}

/// The interruption handled: the interrupted claim gone, its pods running
/// on exactly one replacement, every message acknowledged.
async fn replaced_after_interruption(cluster: &Cluster, interrupted: &str) {
    eventually(
        "the pods on one replacement, the event acknowledged",
        Duration::from_secs(90),
        || async {
            let claims = cluster.claims().await;
            claims.len() == 1
                && claims[0].name_any() != interrupted
                && cluster.running("inflate", 2).await
                && cluster.kwok.unacknowledged().is_empty()
        },
    )
    .await;
    consistent(cluster, "inflate", 2).await;
}

/// The adapter acted on a spot interruption (the claim is deleting) and
/// dies before acknowledging it. The cloud sends the message again; the
/// restarted adapter finds the work done and only acknowledges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_after_acting_on_an_interruption_before_acknowledging_it() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.holds.before_ack.store(true, Ordering::SeqCst);
    let name = interrupted(&cluster, 2).await;
    eventually(
        "the interrupted claim deleting",
        Duration::from_secs(30),
        || async {
            cluster
                .claims()
                .await
                .iter()
                .any(|c| c.name_any() == name && c.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    adapter.kill();
    assert_eq!(cluster.kwok.unacknowledged().len(), 1, "not acknowledged");
    cluster.holds.before_ack.store(false, Ordering::SeqCst);
    let adapter = cluster.adapter().await;
    replaced_after_interruption(&cluster, &name).await;
    adapter.stop().await;
}

/// The adapter dies while the interrupted node drains (pods take 20 s to
/// stop). After the restart the drain finishes and the replacement launched
/// before the crash is the only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_interruption_drain() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    let name = interrupted(&cluster, 20).await;
    eventually(
        "the interrupted node draining, its replacement launched",
        Duration::from_secs(60),
        || async {
            let claims = cluster.claims().await;
            let evicting = cluster
                .pods("inflate")
                .await
                .iter()
                .any(|p| p.metadata.deletion_timestamp.is_some());
            claims.len() == 2
                && claims
                    .iter()
                    .any(|c| c.name_any() != name && c.provider_id().is_some())
                && evicting
        },
    )
    .await;
    let replacement = cluster
        .claims()
        .await
        .into_iter()
        .find(|c| c.name_any() != name)
        .map(|c| c.name_any())
        .expect("replacement");
    adapter.kill();
    let adapter = cluster.adapter().await;
    replaced_after_interruption(&cluster, &name).await;
    assert_eq!(cluster.claims().await[0].name_any(), replacement);
    adapter.stop().await;
}
