//! Peers that go away: the adapter reports not ready, launches nothing
//! twice, and carries on once they are back.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use kube::ResourceExt;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_provider_that_is_down_makes_the_adapter_unready_and_nothing_launches_twice() {
    let mut cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    eventually("ready", Duration::from_secs(20), || adapter.ready()).await;
    let address = cluster.stop_provider().await;
    eventually(
        "/readyz failing while the provider is down",
        Duration::from_secs(20),
        || async { !adapter.ready().await },
    )
    .await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster.deployment("inflate", 3, "1", json!({})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        cluster.kwok.instances().is_empty(),
        "nothing launched without a provider"
    );

    cluster.restart_provider(address).await;
    eventually("ready again", Duration::from_secs(20), || adapter.ready()).await;
    eventually("pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 3)
    })
    .await;
    let claims = cluster.claims().await;
    let instances = cluster.kwok.instances();
    assert_eq!(claims.len(), instances.len(), "one instance per claim");
    for claim in &claims {
        assert!(
            instances
                .iter()
                .any(|i| i.node_claim_name == claim.name_any()),
            "{} launched once",
            claim.name_any()
        );
    }
    adapter.stop().await;
}
