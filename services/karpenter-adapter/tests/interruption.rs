//! Interruptions end to end (upstream's interruption e2e suite, on
//! provider-kwok's admin API): a spot interruption drains the node and its
//! pods land on a replacement in another offering before the instance goes;
//! a rebalance recommendation only tells.

mod common;

use std::time::Duration;

use common::{Cluster, eventually, label};
use provider_kwok::InterruptionRequest;
use serde_json::json;

const ZONE: &str = "topology.kubernetes.io/zone";

fn spot_pool() -> serde_json::Value {
    Cluster::pool(
        "default",
        json!({"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux"]}]}}),
        json!({}),
    )
}

fn interruption(kind: &str, provider_id: &str) -> InterruptionRequest {
    InterruptionRequest {
        kind: kind.to_owned(),
        provider_ids: vec![provider_id.to_owned()],
        state: String::new(),
        detail: String::new(),
    }
}

async fn events_with_reason(cluster: &Cluster, reason: &str) -> usize {
    cluster.events(reason).await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spot_interruption_drains_and_replaces_in_another_offering() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.node_pool(spot_pool()).await;
    cluster.deployment("inflate", 2, "1", json!({})).await;
    eventually("two pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 2)
    })
    .await;
    let claims = cluster.claims().await;
    assert_eq!(claims.len(), 1);
    let interrupted = claims[0].clone();
    let provider_id = interrupted
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .expect("launched");
    let zone = label(&interrupted, ZONE).expect("zone").to_owned();
    cluster
        .kwok
        .interrupt(&interruption("spot-interruption", &provider_id))
        .expect("queued");
    eventually(
        "the pods running on a replacement in another zone",
        Duration::from_secs(60),
        || async {
            let claims = cluster.claims().await;
            claims.len() == 1
                && claims[0].metadata.name != interrupted.metadata.name
                && label(&claims[0], ZONE) != Some(zone.as_str())
                && cluster.running("inflate", 2).await
        },
    )
    .await;
    assert!(events_with_reason(&cluster, "SpotInterrupted").await >= 1);
    assert!(events_with_reason(&cluster, "TerminatingOnInterruption").await >= 1);
    let metrics = adapter.metrics().await;
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "karpenter_interruption_received_messages_total{message_type=\"spot_interrupted\"} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("karpenter_interruption_deleted_messages_total 1")),
        "acknowledged once: {metrics}"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebalance_recommendation_only_tells() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.node_pool(spot_pool()).await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let claim = cluster.claims().await.remove(0);
    let provider_id = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .expect("launched");
    cluster
        .kwok
        .interrupt(&interruption("rebalance-recommendation", &provider_id))
        .expect("queued");
    eventually(
        "the recommendation told",
        Duration::from_secs(30),
        || async { events_with_reason(&cluster, "SpotRebalanceRecommendation").await >= 1 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let claims = cluster.claims().await;
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].metadata.name, claim.metadata.name);
    assert!(claims[0].metadata.deletion_timestamp.is_none());
    adapter.stop().await;
}
