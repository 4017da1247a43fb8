//! Evictions with a UID precondition reach the API server as it reads them:
//! a pod replaced under the same name is not evicted in place of the one
//! meant (kube-client's own `evict` sends the precondition where the API
//! server never looks, and this test fails with it).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use local_apiserver::{Config, LocalApiServer};

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "pause"}]}
    }))
    .expect("pod")
}

#[tokio::test]
async fn an_eviction_for_a_replaced_pod_does_not_evict_its_successor() {
    let server = LocalApiServer::start(Config::default())
        .await
        .expect("server starts");
    let config = kube::Config::new(server.url().parse().expect("url"));
    let client = karpenter_kube::client(config).expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let first = pods
        .create(&PostParams::default(), &pod("web-0"))
        .await
        .expect("created");
    let first_uid = first.metadata.uid.clone();
    pods.delete("web-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleted");
    let second = pods
        .create(&PostParams::default(), &pod("web-0"))
        .await
        .expect("recreated");
    assert_ne!(second.metadata.uid, first_uid);

    let stale = karpenter_kube::evict_pod(&pods, "web-0", first_uid.as_deref()).await;
    assert!(
        matches!(&stale, Err(kube::Error::Api(s)) if s.code == 409),
        "{stale:?}"
    );
    let kept = pods
        .get("web-0")
        .await
        .expect("the successor is still there");
    assert!(kept.metadata.deletion_timestamp.is_none());

    karpenter_kube::evict_pod(&pods, "web-0", second.metadata.uid.as_deref())
        .await
        .expect("the pod meant is evicted");
}
