//! What no client may do to the server: numbers from a request at the edge
//! of their type are answered, never a panic (the server ships in
//! `karpctl up`, and its built-in controllers share its process).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use local_apiserver::{Config, LocalApiServer};

fn pod(name: &str, grace: i64) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "app", "image": "pause"}]}
    }))
    .expect("pod")
}

#[tokio::test]
async fn a_grace_period_of_any_size_is_answered() {
    let server = LocalApiServer::start(Config::default())
        .await
        .expect("server starts");
    let config = kube::Config::new(server.url().parse().expect("url"));
    let client = karpenter_kube::client(config).expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    // From the pod's own spec, and from the request's delete options.
    pods.create(&PostParams::default(), &pod("spec-grace", i64::MAX))
        .await
        .expect("created");
    pods.delete("spec-grace", &DeleteParams::default())
        .await
        .expect("a deletion with the spec's grace period is answered");
    pods.create(&PostParams::default(), &pod("option-grace", 30))
        .await
        .expect("created");
    let options = DeleteParams {
        grace_period_seconds: Some(u32::MAX),
        ..DeleteParams::default()
    };
    pods.delete("option-grace", &options)
        .await
        .expect("a deletion with a huge grace period is answered");
    let stored = pods.get("spec-grace").await.expect("still served");
    assert!(stored.metadata.deletion_timestamp.is_some());
}
