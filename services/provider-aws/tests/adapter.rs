//! The whole product on AWS's API: a pending pod in kube-test-server, the
//! adapter batching it, the scheduler planning a node, provider-aws
//! launching an EC2 instance in moto. The test plays the kubelet (it
//! creates the Node with the instance's providerID, as a real node joining
//! would); the adapter registers it and the pod binds. Deleting the
//! NodeClaim then drains the node and terminates the instance.

mod common;

use std::time::Duration;

use clap::Parser;
use common::{CLUSTER, World};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_adapter::run::Options;
use karpenter_adapter::settings::Settings;
use karpenter_api::NodeClaim;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube_test_server::{Config, KubeTestServer};
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    settings: Settings,
}

async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn create<K>(api: &Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let object: K = serde_json::from_value(value).expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("created");
}

/// The Node a kubelet joining with Karpenter's user data would register.
fn joining_node(claim: &NodeClaim) -> Node {
    let status = claim.status.clone().unwrap_or_default();
    let provider_id = status.provider_id.clone().unwrap_or_default();
    let instance = provider_id
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let name = format!("ip-{instance}");
    let mut labels = claim.metadata.labels.clone().unwrap_or_default();
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider_id,
                 "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
        "status": {"capacity": status.capacity, "allocatable": status.allocatable,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}
    }))
    .expect("node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_pod_gets_an_ec2_instance_in_moto_and_binds_to_its_node() {
    let world = World::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let _server = KubeTestServer::start(Config {
        controllers: true,
        kubeconfig: Some(kubeconfig.clone()),
        ..Config::default()
    })
    .await
    .expect("kube-test-server");
    let config = karpenter_kube::from_kubeconfig(&kubeconfig)
        .await
        .expect("kubeconfig");
    let client = karpenter_kube::client(config).expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    let scheduler = integration_tests::RunningService::start(|| {
        karpenter_scheduler::service(
            karpenter_runtime::Metrics::new("scheduler"),
            karpenter_scheduler::Limits::default(),
        )
    })
    .await
    .expect("scheduler");

    // Seed 003's node class and a pool of one small instance type.
    let node_classes = Api::<DynamicObject>::all_with(
        client.clone(),
        &kube::api::ApiResource {
            group: "karpenter.k8s.aws".into(),
            version: "v1".into(),
            api_version: "karpenter.k8s.aws/v1".into(),
            kind: "EC2NodeClass".into(),
            plural: "ec2nodeclasses".into(),
        },
    );
    create(
        &node_classes,
        json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"amiFamily": "AL2023", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "role": common::NODE_ROLE,
                     "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
                     "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}]}
        }),
    )
    .await;
    create(&Api::<karpenter_api::NodePool>::all(client.clone()), json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"metadata": {"labels": {"team": "web"}}, "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}
    }))
    .await;

    let args = Args::try_parse_from([
        "adapter",
        "--scheduler-address",
        &scheduler.url(),
        "--provider-address",
        &world.service.url(),
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--cluster-name",
        CLUSTER,
        "--batch-idle-duration",
        "200ms",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .expect("settings");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let adapter = tokio::spawn(karpenter_adapter::run::run(
        args.settings,
        Options::default(),
        listener,
        async move {
            let _ = stopped.await;
        },
    ));

    create(&Api::<Deployment>::default_namespaced(client.clone()), json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "inflate"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "inflate"}},
                 "template": {"metadata": {"labels": {"app": "inflate"}}, "spec": {"terminationGracePeriodSeconds": 2, "containers": [
                     {"name": "pause", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                      "resources": {"requests": {"cpu": "1"}}}]}}}
    }))
    .await;

    let claims = Api::<NodeClaim>::all(client.clone());
    let claim = eventually(
        "the claim is launched in moto",
        Duration::from_secs(60),
        || {
            let claims = claims.clone();
            async move {
                let list = claims.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .is_some_and(|id| id.starts_with("aws:///"))
                })
            }
        },
    )
    .await;
    let provider_id = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    let instance_id = provider_id
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let described = world
        .setup
        .ec2
        .describe_instances()
        .instance_ids(&instance_id)
        .send()
        .await
        .expect("describe");
    let instance = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .next()
        .expect("the instance exists in moto");
    assert_eq!(
        instance.instance_type().map(|t| t.as_str()),
        Some("m5.large")
    );
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("web"));

    let nodes = Api::<Node>::all(client.clone());
    nodes
        .create(&PostParams::default(), &joining_node(&claim))
        .await
        .expect("the kubelet registers");
    let pods = Api::<Pod>::default_namespaced(client.clone());
    let bound_to = eventually(
        "the pod binds to the new node",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels("app=inflate"))
                    .await
                    .ok()?;
                list.items
                    .first()
                    .and_then(|p| p.spec.as_ref()?.node_name.clone())
            }
        },
    )
    .await;
    let node = nodes.get(&bound_to).await.expect("node");
    assert_eq!(
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some(provider_id.as_str())
    );
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints.iter().all(|t| t.key != "karpenter.sh/unregistered"),
        "{taints:?}"
    );

    // Deleting the claim drains the node and terminates the instance.
    let name = claim.metadata.name.clone().unwrap_or_default();
    claims
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete claim");
    eventually("the claim is gone", Duration::from_secs(90), || {
        let claims = claims.clone();
        let name = name.clone();
        async move { claims.get_opt(&name).await.ok()?.is_none().then_some(()) }
    })
    .await;
    let ec2 = world.setup.ec2.clone();
    let state = ec2
        .describe_instances()
        .instance_ids(&instance_id)
        .send()
        .await
        .expect("describe")
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| {
            i.state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_owned())
        })
        .next();
    assert!(
        matches!(state.as_deref(), Some("shutting-down" | "terminated")),
        "{state:?}"
    );
    let _ = stop.send(());
    let _ = adapter.await;
}
