//! CapacityBuffers end to end (Karpenter's `capacitybuffer` controller and
//! its regression suite, gate `CapacityBuffer`, on provider-kwok): a buffer
//! gets capacity with no pod pending, its status says how it resolved and
//! where its room is, emptiness keeps the node that holds the room, real
//! pods take it and the buffer gets room again, and deleting the buffer
//! lets its node go. A buffer written at `v1alpha1` (Karpenter v1.15's
//! documented version) is the same object.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use k8s_openapi::api::core::v1::PodTemplate;
use karpenter_api::CapacityBuffer;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

const TYPE: &str = "c-2x-amd64-linux";

async fn create_template(cluster: &Cluster, name: &str, cpu: &str) {
    let template: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": name},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                      "resources": {"requests": {"cpu": cpu}}}]}
        }
    }))
    .expect("pod template");
    Api::<PodTemplate>::default_namespaced(cluster.client.clone())
        .create(&PostParams::default(), &template)
        .await
        .expect("pod template created");
}

async fn create_buffer(cluster: &Cluster, name: &str, spec: serde_json::Value) {
    let buffer: CapacityBuffer = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("buffer");
    Api::<CapacityBuffer>::default_namespaced(cluster.client.clone())
        .create(&PostParams::default(), &buffer)
        .await
        .expect("buffer created");
}

/// A buffer written at Cluster Autoscaler's and Karpenter v1.15's
/// documented version, `v1alpha1` (the CRD serves it beside `v1beta1`).
async fn create_v1alpha1_buffer(cluster: &Cluster, name: &str, spec: serde_json::Value) {
    let resource = kube::api::ApiResource {
        group: "autoscaling.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "autoscaling.x-k8s.io/v1alpha1".into(),
        kind: "CapacityBuffer".into(),
        plural: "capacitybuffers".into(),
    };
    let object: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1alpha1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec
    }))
    .expect("buffer");
    Api::<kube::api::DynamicObject>::namespaced_with(cluster.client.clone(), "default", &resource)
        .create(&PostParams::default(), &object)
        .await
        .expect("v1alpha1 buffer created");
}

/// `(type, status, reason)` of each condition of the buffer, and its replicas.
async fn buffer_status(
    cluster: &Cluster,
    name: &str,
) -> (Vec<(String, String, String)>, Option<i32>) {
    let Ok(buffer) = Api::<CapacityBuffer>::default_namespaced(cluster.client.clone())
        .get(name)
        .await
    else {
        return (Vec::new(), None);
    };
    let status = buffer.status.unwrap_or_default();
    let mut conditions: Vec<(String, String, String)> = status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), format!("{:?}", c.status), c.reason.clone()))
        .collect();
    conditions.sort();
    (conditions, status.replicas)
}

fn condition(type_: &str, status: &str, reason: &str) -> (String, String, String) {
    (type_.to_owned(), status.to_owned(), reason.to_owned())
}

async fn active_claims(cluster: &Cluster) -> usize {
    cluster
        .claims()
        .await
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buffer_holds_room_that_real_pods_take_and_that_goes_with_it() {
    let cluster = Cluster::start().await;
    let settings = cluster.settings(&["--feature-gates", "CapacityBuffer=true"]);
    let _adapter = cluster.adapter_with(settings, common::test_timing()).await;
    // One node type of 2 CPUs; consolidation as eager as it gets, so only
    // the buffer keeps its node.
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [TYPE]}]}}),
            json!({"disruption": {"consolidateAfter": "0s"}}),
        ))
        .await;
    create_template(&cluster, "headroom", "1").await;
    // Three pods of 1 CPU, capped at 1500m by its limit: one pod.
    create_buffer(
        &cluster,
        "headroom",
        json!({"podTemplateRef": {"name": "headroom"}, "replicas": 3, "limits": {"cpu": "1500m"}}),
    )
    .await;

    eventually("a node for the buffer", Duration::from_secs(60), || async {
        active_claims(&cluster).await == 1 && !cluster.nodes().await.is_empty()
    })
    .await;
    let fits = (
        vec![
            condition("Provisioning", "True", "FitsExistingCapacity"),
            condition("ReadyForProvisioning", "True", "Resolved"),
        ],
        Some(1),
    );
    eventually(
        "the buffer fits its node",
        Duration::from_secs(60),
        || async { buffer_status(&cluster, "headroom").await == fits },
    )
    .await;
    // Emptiness keeps the node: it holds the buffer's room.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(active_claims(&cluster).await, 1, "the buffer's node stays");

    // A real pod takes the room; the buffer gets a node again.
    cluster.deployment("app", 1, "1", json!({})).await;
    eventually("the app running", Duration::from_secs(60), || {
        cluster.running("app", 1)
    })
    .await;
    eventually(
        "room again for the buffer",
        Duration::from_secs(60),
        || async { active_claims(&cluster).await == 2 },
    )
    .await;

    // Without the buffer its node is empty, and goes.
    Api::<CapacityBuffer>::default_namespaced(cluster.client.clone())
        .delete("headroom", &DeleteParams::default())
        .await
        .expect("buffer deleted");
    eventually(
        "the empty node removed",
        Duration::from_secs(60),
        || async { active_claims(&cluster).await == 1 },
    )
    .await;
    assert!(cluster.running("app", 1).await, "the app stays running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buffer_that_names_nothing_says_why_and_gets_no_node() {
    let cluster = Cluster::start().await;
    let settings = cluster.settings(&["--feature-gates", "CapacityBuffer=true"]);
    let _adapter = cluster.adapter_with(settings, common::test_timing()).await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    create_buffer(
        &cluster,
        "missing",
        json!({"podTemplateRef": {"name": "nope"}, "replicas": 2}),
    )
    .await;
    create_v1alpha1_buffer(
        &cluster,
        "by-workload",
        json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 50}),
    )
    .await;
    let missing = vec![
        condition("Provisioning", "False", "NotReadyForProvisioning"),
        condition("ReadyForProvisioning", "False", "PodTemplateNotFound"),
    ];
    eventually(
        "the buffer is not ready",
        Duration::from_secs(30),
        || async { buffer_status(&cluster, "missing").await.0 == missing },
    )
    .await;
    assert_eq!(active_claims(&cluster).await, 0);
    // The workload appears: 50% of its 4 replicas, two pods of room.
    cluster.deployment("web", 4, "100m", json!({})).await;
    eventually(
        "the buffer follows its workload",
        Duration::from_secs(30),
        || async {
            let (conditions, replicas) = buffer_status(&cluster, "by-workload").await;
            replicas == Some(2)
                && conditions.contains(&condition("ReadyForProvisioning", "True", "Resolved"))
        },
    )
    .await;
}
