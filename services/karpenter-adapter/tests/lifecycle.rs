//! The claim lifecycle's other half end to end: termination, garbage
//! collection, liveness, leader failover.

mod common;

use std::time::Duration;

use common::{Cluster, eventually, test_timing};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use serde_json::json;

async fn scaled_out(cluster: &Cluster, replicas: i32) {
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster
        .deployment("inflate", replicas, "1", json!({}))
        .await;
    eventually("pods running", Duration::from_secs(40), || {
        cluster.running("inflate", replicas as usize)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_node_claim_drains_and_terminates_its_node() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    scaled_out(&cluster, 2).await;
    // A kwok node is the shape its claim promised: the consistency check
    // finds nothing wrong.
    eventually(
        "every claim ConsistentStateFound",
        Duration::from_secs(40),
        || async {
            let claims = cluster.claims().await;
            !claims.is_empty()
                && claims.iter().all(|c| {
                    c.conditions().iter().any(|k| {
                        k.type_ == "ConsistentStateFound"
                            && k.status == karpenter_api::ConditionStatus::True
                    })
                })
        },
    )
    .await;
    let claims = cluster.claims().await;
    let victim = claims[0].clone();
    let node_name = victim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("registered");
    Api::<NodeClaim>::all(cluster.client.clone())
        .delete(&victim.name_any(), &DeleteParams::default())
        .await
        .expect("deleted");
    eventually(
        "the claim, its node and its instance gone",
        Duration::from_secs(40),
        || async {
            let claims = cluster.claims().await;
            let nodes = cluster.nodes().await;
            !claims.iter().any(|c| c.name_any() == victim.name_any())
                && !nodes.iter().any(|n| n.name_any() == node_name)
                && !cluster
                    .kwok
                    .instances()
                    .iter()
                    .any(|i| i.node_claim_name == victim.name_any())
        },
    )
    .await;
    eventually(
        "the evicted pods running again",
        Duration::from_secs(40),
        || cluster.running("inflate", 2),
    )
    .await;
    // Karpenter's termination histograms: the claim since its deletion,
    // its instance, the node's lifetime, one observation each, by pool.
    let metrics = adapter.metrics().await;
    for histogram in [
        "karpenter_nodeclaims_termination_duration_seconds_count{nodepool=\"default\"} 1",
        "karpenter_nodes_lifetime_duration_seconds_count{nodepool=\"default\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == histogram),
            "{histogram} in:\n{metrics}"
        );
    }
    // Once, though a pass on a stale read releases the node again (it
    // counted twice before finalizers::remove said whether it released).
    let terminated: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("karpenter_nodes_terminated_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(terminated, 1.0, "{metrics}");
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_node_removes_its_claim() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    scaled_out(&cluster, 1).await;
    let node = cluster.nodes().await.remove(0);
    Api::<Node>::all(cluster.client.clone())
        .delete(&node.name_any(), &DeleteParams::default())
        .await
        .expect("deleted");
    eventually(
        "the node's claim deleted",
        Duration::from_secs(40),
        || async {
            !cluster.claims().await.iter().any(|c| {
                c.status.as_ref().and_then(|s| s.node_name.as_deref())
                    == Some(node.name_any().as_str())
            }) && !cluster
                .nodes()
                .await
                .iter()
                .any(|n| n.name_any() == node.name_any())
        },
    )
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_no_claim_launched_is_collected() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    let mut grpc =
        karpenter_proto::provider::v1::cloud_provider_client::CloudProviderClient::connect(
            cluster.kwok_service.url(),
        )
        .await
        .expect("connect");
    grpc.create(karpenter_proto::provider::v1::CreateRequest {
        node_claim: Some(karpenter_proto::provider::v1::NodeClaim {
            name: "orphan".into(),
            node_pool: "default".into(),
            ..Default::default()
        }),
    })
    .await
    .expect("launched behind Karpenter's back");
    assert_eq!(cluster.kwok.instances().len(), 1);
    eventually("the orphan terminated", Duration::from_secs(20), || async {
        cluster.kwok.instances().is_empty()
    })
    .await;
    eventually("its node gone", Duration::from_secs(20), || async {
        cluster.nodes().await.is_empty()
    })
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_whose_node_never_registers_is_deleted() {
    let cluster = Cluster::start().await;
    let timing = karpenter_adapter::controllers::Timing {
        registration_ttl: Duration::from_secs(3),
        ..test_timing()
    };
    let adapter = cluster.adapter_with(cluster.settings(&[]), timing).await;
    cluster
        .create_dynamic(
            "karpenter.kwok.sh/v1alpha1",
            "KWOKNodeClass",
            "kwoknodeclasses",
            json!({"metadata": {"name": "slow"}, "spec": {"nodeRegistrationDelay": "1h"}}),
        )
        .await;
    let mut pool = Cluster::pool("slow", json!({}), json!({}));
    pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("slow");
    cluster.node_pool(pool).await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("a claim launched", Duration::from_secs(20), || async {
        cluster.claims().await.iter().any(|c| c.is_launched())
    })
    .await;
    let first = cluster.claims().await.remove(0).name_any();
    eventually(
        "that claim deleted for not registering",
        Duration::from_secs(30),
        || async { !cluster.claims().await.iter().any(|c| c.name_any() == first) },
    )
    .await;
    assert!(
        !cluster
            .kwok
            .instances()
            .iter()
            .any(|i| i.node_claim_name == first),
        "its instance is terminated"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_takes_over_when_the_leader_dies() {
    let cluster = Cluster::start().await;
    let leader = cluster
        .adapter_with(cluster.settings(&["--identity", "one"]), test_timing())
        .await;
    eventually("the first replica leads", Duration::from_secs(10), || {
        leader.leads()
    })
    .await;
    let standby = cluster
        .adapter_with(cluster.settings(&["--identity", "two"]), test_timing())
        .await;
    // A synced standby is ready (a rollout or drain may go on) but does
    // not lead.
    eventually("the standby is ready", Duration::from_secs(10), || {
        standby.ready()
    })
    .await;
    assert!(!standby.leads().await, "a standby does not reconcile");
    leader.kill();
    eventually("the standby leads", Duration::from_secs(15), || {
        standby.leads()
    })
    .await;
    scaled_out(&cluster, 1).await;
    standby.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_claim_is_drained_deleted_and_replaced() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"expireAfter": "8s"}}),
            json!({}),
        ))
        .await;
    cluster
        .deployment(
            "inflate",
            1,
            "1",
            json!({"terminationGracePeriodSeconds": 1}),
        )
        .await;
    eventually("the pod running", Duration::from_secs(40), || {
        cluster.running("inflate", 1)
    })
    .await;
    let first = cluster.claims().await.remove(0);
    assert_eq!(
        first.spec.expire_after(),
        Some(Duration::from_secs(8)),
        "the claim carries its pool's expireAfter"
    );
    eventually(
        "the expired claim says so while it drains",
        Duration::from_secs(30),
        || async {
            cluster.claims().await.iter().any(|c| {
                c.name_any() == first.name_any()
                    && c.metadata.deletion_timestamp.is_some()
                    && common::condition(c, "Expired").as_deref() == Some("True")
            })
        },
    )
    .await;
    eventually(
        "the expired claim and its instance gone, the pod running on a new claim",
        Duration::from_secs(40),
        || async {
            let claims = cluster.claims().await;
            !claims.iter().any(|c| c.name_any() == first.name_any())
                && !cluster
                    .kwok
                    .instances()
                    .iter()
                    .any(|i| i.node_claim_name == first.name_any())
                && cluster.running("inflate", 1).await
        },
    )
    .await;
    let metrics = adapter.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("karpenter_nodeclaims_disrupted_total")
                && l.contains("reason=\"expired\"")
                && l.contains("consolidation_policy=\"\"")
                && l.contains("termination_mode=\"graceful\"")),
        "{metrics}"
    );
    // Karpenter: "should fire karpenter_pods_disruption_initiated_total by
    // the count of reschedulable pods on the node when expired".
    assert!(
        metrics.lines().any(
            |l| l.starts_with("karpenter_pods_disruption_initiated_total{")
                && l.contains("reason=\"expired\"")
                && l.ends_with(" 1")
        ),
        "{metrics}"
    );
    adapter.stop().await;
}

/// Upstream's "should ignore expired NodeClaims that are not managed by
/// this Karpenter instance": a claim of a node class kind the provider does
/// not serve (another Karpenter's) is left alone however old it is, while
/// one of ours with the same expireAfter is expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_providers_expired_claim_is_left_alone() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    let claim = |name: &str, group: &str, kind: &str| {
        json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "other"}},
            "spec": {
                "nodeClassRef": {"group": group, "kind": kind, "name": "default"},
                "requirements": [],
                "expireAfter": "2s",
            }
        })
    };
    cluster
        .create_dynamic(
            "karpenter.sh/v1",
            "NodeClaim",
            "nodeclaims",
            claim("foreign", "karpenter.k8s.aws", "EC2NodeClass"),
        )
        .await;
    cluster
        .create_dynamic(
            "karpenter.sh/v1",
            "NodeClaim",
            "nodeclaims",
            claim("ours", "karpenter.kwok.sh", "KWOKNodeClass"),
        )
        .await;
    eventually(
        "our claim expired and gone",
        Duration::from_secs(40),
        || async {
            !cluster
                .claims()
                .await
                .iter()
                .any(|c| c.name_any() == "ours")
        },
    )
    .await;
    let claims = cluster.claims().await;
    let foreign = claims
        .iter()
        .find(|c| c.name_any() == "foreign")
        .expect("the other provider's claim is still there");
    assert!(
        foreign.metadata.deletion_timestamp.is_none(),
        "not deleted: {foreign:?}"
    );
    assert!(
        foreign
            .metadata
            .finalizers
            .as_ref()
            .is_none_or(Vec::is_empty),
        "not taken over (no finalizer, no launch): {foreign:?}"
    );
    assert!(
        !cluster
            .kwok
            .instances()
            .iter()
            .any(|i| i.node_claim_name == "foreign"),
        "no instance launched for it"
    );
    adapter.stop().await;
}

/// Upstream termination suite ("should wait for volume attachments to be
/// deleted before terminating the instance" and the AwaitingVolumeDetachment
/// event): after the drain, a node whose drained pods' volume is still
/// attached keeps its instance, says why on the node and in the claim's
/// VolumesDetached condition, and goes once the attachment is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminating_node_waits_for_its_volumes_to_detach() {
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    scaled_out(&cluster, 1).await;
    let victim = cluster.claims().await.remove(0);
    let node_name = victim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("registered");
    let attachments = Api::<VolumeAttachment>::all(cluster.client.clone());
    let attachment: VolumeAttachment = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": "csi-data-0"},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node_name,
                 "source": {"persistentVolumeName": "pv-data-0"}}
    }))
    .expect("attachment");
    attachments
        .create(&Default::default(), &attachment)
        .await
        .expect("attached");
    Api::<NodeClaim>::all(cluster.client.clone())
        .delete(&victim.name_any(), &DeleteParams::default())
        .await
        .expect("deleted");
    let waiting = |c: &NodeClaim| {
        c.conditions().iter().any(|k| {
            k.type_ == "VolumesDetached"
                && k.status == karpenter_api::ConditionStatus::Unknown
                && k.reason == "AwaitingVolumeDetachment"
        })
    };
    eventually(
        "the claim waiting for its volumes",
        Duration::from_secs(40),
        || async {
            cluster
                .claims()
                .await
                .iter()
                .any(|c| c.name_any() == victim.name_any() && waiting(c))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        cluster
            .kwok
            .instances()
            .iter()
            .any(|i| i.node_claim_name == victim.name_any()),
        "the instance stays while the volume is attached"
    );
    let events = cluster.events("AwaitingVolumeDetachment").await;
    assert!(
        events.iter().any(|e| e.message.as_deref()
            == Some("Awaiting deletion of bound volumeattachments (csi-data-0)")),
        "{events:?}"
    );
    attachments
        .delete("csi-data-0", &DeleteParams::default())
        .await
        .expect("detached");
    eventually(
        "the claim, its node and its instance gone",
        Duration::from_secs(40),
        || async {
            !cluster
                .claims()
                .await
                .iter()
                .any(|c| c.name_any() == victim.name_any())
                && !cluster
                    .kwok
                    .instances()
                    .iter()
                    .any(|i| i.node_claim_name == victim.name_any())
        },
    )
    .await;
    adapter.stop().await;
}
