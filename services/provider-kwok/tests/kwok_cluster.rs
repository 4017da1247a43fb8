//! The local cluster end to end: local-apiserver with its workload
//! controller and scheduler stand-in, provider-kwok over gRPC creating
//! Nodes through `kube::Client`, and a Deployment whose pods wait as
//! Unschedulable until provider-kwok's Nodes appear, then bind.

use std::time::Duration;

use integration_tests::RunningService;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::provider::v1::cloud_provider_client::CloudProviderClient;
use karpenter_proto::types::v1 as types;
use kube::api::{Api, ListParams, PostParams};
use local_apiserver::{Config, LocalApiServer};
use prost::Message;
use provider_kwok::{InterruptionRequest, KwokProvider, OfferingPattern, Options};
use serde_json::json;
use tokio_stream::StreamExt;

struct Env {
    _dir: tempfile::TempDir,
    _server: LocalApiServer,
    client: kube::Client,
    provider: KwokProvider,
    grpc: CloudProviderClient<tonic::transport::Channel>,
    _svc: RunningService,
}

async fn env() -> Env {
    env_with(false).await
}

/// With `tls`, the server speaks HTTPS and the provider's client comes from
/// the kubeconfig it writes (trusting its CA), as the binary builds it.
async fn env_with(tls: bool) -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let server = LocalApiServer::start(Config {
        controllers: true,
        tls,
        kubeconfig: Some(kubeconfig.clone()),
        ..Config::default()
    })
    .await
    .expect("server");
    let config = karpenter_kube::config(&karpenter_kube::KubeArgs {
        kubeconfig: Some(kubeconfig),
    })
    .await
    .expect("kubeconfig")
    .expect("a cluster");
    let client = karpenter_kube::client(config).expect("client");
    let provider = KwokProvider::new(
        provider_kwok::load_catalog(None).expect("catalog"),
        Some(client.clone()),
        Options {
            node_delay: Duration::from_millis(300),
            redelivery: Duration::from_millis(200),
        },
    );
    let p = provider.clone();
    let svc =
        RunningService::start(move || p.service(karpenter_runtime::Metrics::new("kwok_test")))
            .await
            .expect("provider serves");
    let grpc = CloudProviderClient::connect(svc.url())
        .await
        .expect("connect");
    Env {
        _dir: dir,
        _server: server,
        client,
        provider,
        grpc,
        _svc: svc,
    }
}

fn claim(name: &str, cpu_millis: i64, reqs: Vec<types::Requirement>) -> pv::CreateRequest {
    pv::CreateRequest {
        node_claim: Some(pv::NodeClaim {
            name: name.into(),
            node_pool: "default".into(),
            requirements: reqs,
            resources: Some(types::ResourceList {
                quantities: [("cpu".to_string(), cpu_millis), ("pods".to_string(), 3)]
                    .into_iter()
                    .collect(),
            }),
            labels: [("karpenter.sh/nodepool".to_string(), "default".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        }),
    }
}

fn req(key: &str, values: &[&str]) -> types::Requirement {
    types::Requirement {
        key: key.into(),
        operator: types::Operator::In as i32,
        values: values.iter().map(|s| s.to_string()).collect(),
        min_values: None,
    }
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..150 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_pods_bind_once_provider_kwok_nodes_appear() {
    let mut e = env().await;
    // The KWOKNodeClass CRD installs like any CRD.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(e.client.clone());
    crds.create(
        &PostParams::default(),
        &serde_yaml::from_str(provider_kwok::NODE_CLASS_CRD).expect("crd"),
    )
    .await
    .expect("crd created");

    let deploys: Api<Deployment> = Api::default_namespaced(e.client.clone());
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "app"}},
                 "template": {"metadata": {"labels": {"app": "app"}},
                              "spec": {"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}
    }))
    .expect("deployment");
    deploys
        .create(&PostParams::default(), &d)
        .await
        .expect("deployment created");
    let pods: Api<Pod> = Api::default_namespaced(e.client.clone());
    eventually("3 unschedulable pods", || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=app"))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            list.len() == 3
                && list.iter().all(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| {
                                c.type_ == "PodScheduled"
                                    && c.status == "False"
                                    && c.reason.as_deref() == Some("Unschedulable")
                            })
                        })
                })
        }
    })
    .await;

    // What the adapter will do: launch a claim for the pending pods.
    let created = e
        .grpc
        .create(claim(
            "default-abcde",
            3000,
            vec![
                req("topology.kubernetes.io/zone", &["us-west-2a"]),
                req("kubernetes.io/arch", &["amd64"]),
            ],
        ))
        .await
        .expect("create")
        .into_inner()
        .instance
        .expect("instance");
    assert_eq!(created.instance_type, "c-4x-amd64-linux");
    assert_eq!(created.capacity_type, "spot", "spot is cheaper");
    assert_eq!(created.provider_id, "kwok://default-abcde");
    // Idempotent by claim name.
    let again = e
        .grpc
        .create(claim("default-abcde", 3000, vec![]))
        .await
        .expect("retry")
        .into_inner()
        .instance
        .expect("instance");
    assert_eq!(again.provider_id, created.provider_id);

    let nodes: Api<Node> = Api::all(e.client.clone());
    // The Node is written, then its status: wait for both (under load the
    // first read could fall between them).
    eventually("the node with its status", || {
        let nodes = nodes.clone();
        async move {
            nodes
                .get_opt("default-abcde")
                .await
                .ok()
                .flatten()
                .and_then(|n| n.status)
                .is_some_and(|s| s.allocatable.is_some())
        }
    })
    .await;
    let node = nodes.get("default-abcde").await.expect("node");
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("node.kubernetes.io/instance-type")
            .map(String::as_str),
        Some("c-4x-amd64-linux")
    );
    assert_eq!(
        labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("us-west-2a")
    );
    assert_eq!(
        labels.get("karpenter.sh/capacity-type").map(String::as_str),
        Some("spot")
    );
    assert_eq!(
        labels.get("karpenter.sh/nodepool").map(String::as_str),
        Some("default")
    );
    assert_eq!(
        node.spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .as_deref(),
        Some("kwok://default-abcde")
    );
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "karpenter.sh/unregistered" && t.effect == "NoExecute"),
        "a new node waits for Karpenter's registration: {taints:?}"
    );
    // What the adapter's registration does: lift the taint.
    nodes
        .patch(
            "default-abcde",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"taints": []}})),
        )
        .await
        .expect("registered");
    let alloc = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default();
    assert_eq!(alloc.get("cpu").map(|q| q.0.as_str()), Some("3900m"));

    eventually("pods bound and running on the kwok node", || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=app"))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            list.len() == 3
                && list.iter().all(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("default-abcde")
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
        }
    })
    .await;
    let got = e
        .grpc
        .get(pv::GetRequest {
            provider_id: "kwok://default-abcde".into(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(got.instance.map(|i| i.state).as_deref(), Some("running"));

    // Deleting the instance removes the Node; its pods go back to pending.
    e.grpc
        .delete(pv::DeleteRequest {
            provider_id: "kwok://default-abcde".into(),
        })
        .await
        .expect("delete");
    let gone = e
        .grpc
        .get(pv::GetRequest {
            provider_id: "kwok://default-abcde".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    eventually("node removed and pods pending again", || {
        let (nodes, pods) = (nodes.clone(), pods.clone());
        async move {
            let node_gone = nodes
                .get_opt("default-abcde")
                .await
                .ok()
                .flatten()
                .is_none();
            let list = pods
                .list(&ListParams::default().labels("app=app"))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            node_gone
                && list.len() == 3
                && list
                    .iter()
                    .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_written_over_https_with_the_kubeconfigs_ca() {
    let mut e = env_with(true).await;
    e.grpc
        .create(claim("secure", 1000, vec![]))
        .await
        .expect("launch");
    let nodes: Api<Node> = Api::all(e.client.clone());
    eventually("the node over HTTPS", || {
        let nodes = nodes.clone();
        async move { nodes.get("secure").await.is_ok() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_capacity_falls_back_then_exhausts_with_details() {
    let mut e = env().await;
    let zone_a = || {
        vec![
            req("topology.kubernetes.io/zone", &["us-west-2a"]),
            req("node.kubernetes.io/instance-type", &["c-4x-amd64-linux"]),
        ]
    };
    e.provider.fail_offerings(OfferingPattern {
        instance_type: Some("c-4x-amd64-linux".into()),
        zone: Some("us-west-2a".into()),
        capacity_type: Some("spot".into()),
    });
    let i = e
        .grpc
        .create(claim("fallback", 1000, zone_a()))
        .await
        .expect("falls back")
        .into_inner()
        .instance
        .expect("instance");
    assert_eq!(i.capacity_type, "on-demand");
    // The failed offering is reported unavailable for a while.
    let types = e
        .grpc
        .get_instance_types(pv::GetInstanceTypesRequest::default())
        .await
        .expect("types")
        .into_inner()
        .instance_types;
    let c4 = types
        .iter()
        .find(|t| t.name == "c-4x-amd64-linux")
        .expect("type");
    assert!(
        c4.offerings
            .iter()
            .any(|o| o.zone == "us-west-2a" && o.capacity_type == "spot" && !o.available)
    );

    e.provider.fail_offerings(OfferingPattern {
        instance_type: Some("c-4x-amd64-linux".into()),
        ..Default::default()
    });
    let err = e
        .grpc
        .create(claim("exhausted", 1000, zone_a()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    let status = tonic_types::pb::Status::decode(err.details()).expect("google.rpc.Status");
    let ice =
        pv::InsufficientCapacity::decode(status.details[0].value.as_slice()).expect("details");
    assert_eq!(ice.offerings.len(), 2, "{ice:?}");
    e.provider.clear_faults();
    e.grpc
        .create(claim("exhausted", 1000, zone_a()))
        .await
        .expect("capacity is back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interruptions_are_redelivered_until_acknowledged() {
    let mut e = env().await;
    let mut stream = e
        .grpc
        .watch_interruptions(pv::WatchInterruptionsRequest::default())
        .await
        .expect("watch")
        .into_inner();
    let id = e
        .provider
        .interrupt(&InterruptionRequest {
            kind: "spot-interruption".into(),
            provider_ids: vec!["kwok://n1".into()],
            state: String::new(),
            detail: "two-minute warning".into(),
        })
        .expect("queued");
    let first = stream.next().await.expect("event").expect("ok");
    assert_eq!(first.id, id);
    assert_eq!(
        first.kind,
        pv::interruption_event::Kind::SpotInterruption as i32
    );
    assert_eq!(first.provider_ids, ["kwok://n1"]);
    let again = tokio::time::timeout(Duration::from_secs(2), stream.next())
        .await
        .expect("redelivered")
        .expect("event")
        .expect("ok");
    assert_eq!(again.id, id);
    e.grpc
        .acknowledge_interruption(pv::AcknowledgeInterruptionRequest { id: id.clone() })
        .await
        .expect("ack");
    // Drain anything already in flight, then nothing more comes.
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await {}
    assert!(
        tokio::time::timeout(Duration::from_millis(600), stream.next())
            .await
            .is_err(),
        "acknowledged events stop"
    );
}

#[tokio::test]
async fn admin_http_injects_faults_and_interruptions() {
    let provider = KwokProvider::new(
        provider_kwok::load_catalog(None).expect("catalog"),
        None,
        Options::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, provider_kwok::admin_router(provider)).await;
    });
    let send = |method: &'static str, path: &'static str, body: &'static str| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    };
    let r = send(
        "POST",
        "/faults/insufficient-capacity",
        r#"{"zone":"us-west-2a"}"#,
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 204"), "{r}");
    let r = send(
        "POST",
        "/interruptions",
        r#"{"kind":"rebalance-recommendation","providerIds":["kwok://x"]}"#,
    )
    .await;
    assert!(
        r.starts_with("HTTP/1.1 200") && r.contains("kwok-event-1"),
        "{r}"
    );
    let r = send("POST", "/interruptions", r#"{"kind":"nope"}"#).await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let r = send("GET", "/instances", "").await;
    assert!(r.contains(r#"{"instances":[]}"#), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_node_classes_and_claims_are_refused_not_crashed_on() {
    let mut e = env().await;
    let with_delay = |name: &str, delay: serde_json::Value| {
        let mut request = claim(name, 1000, vec![]);
        if let Some(c) = request.node_claim.as_mut() {
            c.node_class = Some(pv::NodeClass {
                spec_json: json!({"nodeRegistrationDelay": delay}).to_string(),
                ..Default::default()
            });
        }
        request
    };
    // A delay past what any clock can add (it used to panic the provider).
    for delay in [json!("6000000000000000h"), json!("soon"), json!(3)] {
        let err = e
            .grpc
            .create(with_delay("hostile", delay.clone()))
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{delay}");
        assert!(
            err.message().contains("nodeRegistrationDelay"),
            "{delay}: {}",
            err.message()
        );
    }
    // An operator the provider does not know no longer matches every type.
    let mut unknown = claim("unknown-operator", 1000, vec![]);
    if let Some(c) = unknown.node_claim.as_mut() {
        c.requirements = vec![types::Requirement {
            operator: 42,
            ..req("kubernetes.io/arch", &["s390x"])
        }];
    }
    let err = e.grpc.create(unknown).await.expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    // The provider still serves.
    e.grpc
        .create(with_delay("fine", json!("1s")))
        .await
        .expect("a valid claim launches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_names_repair_policies_and_hash_keys_and_a_changed_class_drifts() {
    let mut e = env().await;
    let info = e
        .grpc
        .info(pv::InfoRequest::default())
        .await
        .expect("info")
        .into_inner();
    let ready: Vec<(&str, &str, &str, i64, pv::RepairAction)> = info
        .repair_policies
        .iter()
        .map(|p| {
            (
                p.condition_type.as_str(),
                p.condition_status.as_str(),
                p.reason_regex.as_str(),
                p.toleration.as_ref().map_or(0, |d| d.seconds),
                p.action(),
            )
        })
        .collect();
    let (replace, reboot) = (pv::RepairAction::Replace, pv::RepairAction::Reboot);
    assert_eq!(
        ready,
        [
            ("Ready", "False", "", 600, replace),
            ("Ready", "Unknown", "", 600, replace),
            ("Ready", "False", "^RebootRequired$", 300, reboot),
        ]
    );
    assert!(!info.node_class_hash_annotation.is_empty());

    let class = |spec: serde_json::Value| pv::NodeClass {
        name: "default".into(),
        spec_json: spec.to_string(),
        ..Default::default()
    };
    let launched_with = e
        .grpc
        .resolve_node_class(pv::ResolveNodeClassRequest {
            node_class: Some(class(
                json!({"imageID": "img-1", "nodeRegistrationDelay": "1s"}),
            )),
        })
        .await
        .expect("resolve")
        .into_inner();
    let mut request = claim("drifty", 1000, vec![]);
    let node_claim = request.node_claim.as_mut().expect("claim");
    node_claim.node_class = Some(class(
        json!({"imageID": "img-1", "nodeRegistrationDelay": "1s"}),
    ));
    let instance = e
        .grpc
        .create(request.clone())
        .await
        .expect("launch")
        .into_inner()
        .instance
        .expect("instance");
    let drifted = |node_class: pv::NodeClass| {
        let mut node_claim = request.node_claim.clone().expect("claim");
        node_claim.node_class = Some(node_class);
        pv::IsDriftedRequest {
            node_claim: Some(node_claim),
            provider_id: instance.provider_id.clone(),
            image_id: instance.image_id.clone(),
            node_class_hash: launched_with.hash.clone(),
            node_class_hash_version: launched_with.hash_version.clone(),
        }
    };
    let reason = |r: tonic::Response<pv::IsDriftedResponse>| r.into_inner().reason;
    // Same spec, keys in another order: not drifted.
    let same = class(json!({"nodeRegistrationDelay": "1s", "imageID": "img-1"}));
    assert_eq!(
        reason(e.grpc.is_drifted(drifted(same)).await.expect("drift")),
        ""
    );
    let changed = class(json!({"imageID": "img-1", "nodeRegistrationDelay": "5s"}));
    assert_eq!(
        reason(e.grpc.is_drifted(drifted(changed)).await.expect("drift")),
        "NodeClassDrift"
    );
    e.grpc
        .finalize_node_class(pv::FinalizeNodeClassRequest {
            node_class: Some(class(json!({}))),
        })
        .await
        .expect("nothing to release, but it answers");
}
