//! Peers that go away or misbehave: the adapter stays ready (readiness is
//! about the process; peer health is a metric), launches nothing twice,
//! and carries on once they are back; an API server that
//! stops answering (a fault proxy on loopback between the adapter and
//! local-apiserver) never leaves two leaders acting, and a lagging watch
//! never launches the same capacity twice.

mod common;

use std::time::Duration;

use common::{Adapter, Cluster, eventually};
use integration_tests::api_faults::{Action, ApiFaultProxy, Fault};
use kube::ResourceExt;
use serde_json::json;

/// Finding 7 of the fault review: a provider that is down (or a cloud that
/// denies every call) used to make every adapter replica NotReady, and
/// their PodDisruptionBudget then blocked draining the nodes they run on.
/// Readiness is now the process's own; the peer's state is a metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_provider_that_is_down_leaves_the_adapter_ready_and_nothing_launches_twice() {
    let mut cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    eventually("ready", Duration::from_secs(20), || adapter.ready()).await;
    let address = cluster.stop_provider().await;
    eventually(
        "the provider reported down in karpenter_peer_up",
        Duration::from_secs(20),
        || async {
            adapter
                .metrics()
                .await
                .contains("karpenter_peer_up{peer=\"provider\"} 0")
        },
    )
    .await;
    assert!(adapter.ready().await, "still ready without its provider");
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
    eventually(
        "the provider reported up again",
        Duration::from_secs(20),
        || async {
            adapter
                .metrics()
                .await
                .contains("karpenter_peer_up{peer=\"provider\"} 1")
        },
    )
    .await;
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

/// The API server's address, for a fault proxy in front of it.
fn api_addr(cluster: &Cluster) -> std::net::SocketAddr {
    cluster.server.addr
}

/// An adapter that reaches the API server through `proxy`.
async fn proxied_adapter(cluster: &Cluster, proxy: &ApiFaultProxy, identity: &str) -> Adapter {
    let kubeconfig = cluster.dir.path().join(format!("kubeconfig-{identity}"));
    proxy.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let kubeconfig = kubeconfig.display().to_string();
    let settings = cluster.settings(&["--kubeconfig", &kubeconfig, "--identity", identity]);
    cluster.adapter_with(settings, common::test_timing()).await
}

/// Finding 1 of the fault review (split brain): a leader whose connection
/// to the API server stops answering, without closing, steps down before a
/// standby can take the lease, so its garbage collection, still able to
/// reach the provider, never sees the new leader's instances as orphans.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_the_api_steps_down_before_a_standby_leads_and_kills_nothing() {
    let cluster = Cluster::start().await;
    let proxy = ApiFaultProxy::start(api_addr(&cluster))
        .await
        .expect("proxy");
    let old = proxied_adapter(&cluster, &proxy, "old-leader").await;
    eventually("the first adapter leads", Duration::from_secs(20), || {
        old.leads()
    })
    .await;
    let settings = cluster.settings(&["--identity", "standby"]);
    let standby = cluster.adapter_with(settings, common::test_timing()).await;
    eventually("the standby is ready", Duration::from_secs(20), || {
        standby.ready()
    })
    .await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster.deployment("inflate", 2, "1", json!({})).await;
    eventually("two pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 2)
    })
    .await;

    // The old leader's API connections, open and new, stop answering; the
    // provider still answers it.
    proxy.partition();
    eventually("the standby leads", Duration::from_secs(30), || {
        standby.leads()
    })
    .await;
    cluster.scale("inflate", 8).await;
    eventually("eight pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 8)
    })
    .await;
    // Garbage collection runs every 0.5 s and collects orphans older than
    // 2 s: a leader acting on its frozen index would have killed the new
    // instances by now.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let claims = cluster.claims().await;
    let instances = cluster.kwok.instances();
    for claim in &claims {
        assert!(
            instances
                .iter()
                .any(|i| i.node_claim_name == claim.name_any()),
            "the instance of {} was terminated under its pods",
            claim.name_any()
        );
    }
    assert!(cluster.running("inflate", 8).await, "every pod still runs");
    assert!(
        !old.leads().await,
        "the cut-off adapter no longer reports leading"
    );
    standby.stop().await;
    old.kill();
}

/// Finding 2 (runaway launches): with the NodeClaim watch stalled, each
/// batch used to create the same capacity again; the claims created are
/// now counted from the moment the API answered their creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_node_claim_watch_launches_the_capacity_once() {
    let cluster = Cluster::start().await;
    let proxy = ApiFaultProxy::start(api_addr(&cluster))
        .await
        .expect("proxy");
    let stalled = proxy.add(Fault::on("/nodeclaims", Action::Hold).watches());
    let adapter = proxied_adapter(&cluster, &proxy, "lagging").await;
    eventually("the adapter leads", Duration::from_secs(20), || {
        adapter.leads()
    })
    .await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster.deployment("inflate", 3, "1", json!({})).await;
    eventually("claims created", Duration::from_secs(30), || async {
        !cluster.claims().await.is_empty()
    })
    .await;
    let first = cluster.claims().await.len();
    // Provisioning used to wait 10 s for its claims to appear, then plan
    // again: 25 s is two more batches.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let names: Vec<String> = cluster
        .claims()
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(
        names.len(),
        first,
        "no claim created again while the watch lagged: {names:?}"
    );
    proxy.remove(stalled);
    eventually("pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 3)
    })
    .await;
    let claims = cluster.claims().await;
    assert_eq!(claims.len(), first, "nothing launched twice");
    assert_eq!(
        cluster.kwok.instances().len(),
        first,
        "one instance per claim"
    );
    adapter.stop().await;
}

/// A pool with one running pod whose PodDisruptionBudget allows no
/// eviction (so a drain of its node holds); the node's name.
async fn one_pod_no_eviction_allowed(cluster: &Cluster) -> String {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::{Api, PostParams};

    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "inflate"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "inflate"}}}
    }))
    .expect("pdb");
    Api::<PodDisruptionBudget>::default_namespaced(cluster.client.clone())
        .create(&PostParams::default(), &pdb)
        .await
        .expect("pdb");
    cluster.nodes().await[0].name_any()
}

/// Finding 8 (races): a Node deleted by hand is tainted by termination
/// before its claim's deletion reaches the index; with the NodeClaim watch
/// stalled, disruption's cleanup of leftover taints must not take the taint
/// off again (it releases only nodes that are not being deleted), or pods
/// could land on a node being drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_nodes_taint_stays_while_the_claim_watch_lags() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, DeleteParams};

    let cluster = Cluster::start().await;
    let proxy = ApiFaultProxy::start(api_addr(&cluster))
        .await
        .expect("proxy");
    let adapter = proxied_adapter(&cluster, &proxy, "racing").await;
    let node_name = one_pod_no_eviction_allowed(&cluster).await;
    let stalled = proxy.add(Fault::on("/nodeclaims", Action::Hold).watches());
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    nodes
        .delete(&node_name, &DeleteParams::default())
        .await
        .expect("node deleted");
    let tainted = |node: &Node| {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
    };
    eventually(
        "the deleted node tainted",
        Duration::from_secs(20),
        || async { nodes.get(&node_name).await.is_ok_and(|n| tainted(&n)) },
    )
    .await;
    // Disruption polls every second: it has had several chances.
    for _ in 0..40 {
        let node = nodes.get(&node_name).await.expect("still draining");
        assert!(
            tainted(&node),
            "the taint of a node being deleted was removed"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    proxy.remove(stalled);
    adapter.stop().await;
}

/// Found by the fault suite (an interruption acknowledged before its claim
/// was deleted): a leader whose NodeClaim watch lags does not know a claim
/// its predecessor launched, matched the spot interruption of that claim's
/// instance against nothing and acknowledged it, so the node would have
/// died without a drain. An interruption the index cannot place is now
/// matched against the API server's own list before it is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interruption_for_a_claim_a_lagging_index_does_not_know_is_acted_on() {
    let cluster = Cluster::start().await;
    let first = cluster
        .adapter_with(
            cluster.settings(&["--identity", "first"]),
            common::test_timing(),
        )
        .await;
    eventually("the first adapter leads", Duration::from_secs(20), || {
        first.leads()
    })
    .await;
    // The standby lists the cluster now, before the claim exists, and its
    // NodeClaim watch then passes nothing.
    let proxy = ApiFaultProxy::start(api_addr(&cluster))
        .await
        .expect("proxy");
    proxy.add(Fault::on("/nodeclaims", Action::Hold).watches());
    let standby = proxied_adapter(&cluster, &proxy, "standby").await;
    eventually("the standby is ready", Duration::from_secs(20), || {
        standby.ready()
    })
    .await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let claim = cluster.claims().await.remove(0);
    let provider_id = claim.provider_id().expect("launched").to_owned();
    first.stop().await;
    eventually("the standby leads", Duration::from_secs(30), || {
        standby.leads()
    })
    .await;
    let request = provider_kwok::InterruptionRequest {
        kind: "spot-interruption".into(),
        provider_ids: vec![provider_id],
        state: String::new(),
        detail: String::new(),
    };
    let id = cluster
        .kwok
        .interrupt(&request)
        .expect("interruption queued");
    eventually(
        "the interrupted claim deleted",
        Duration::from_secs(30),
        || async {
            let acknowledged = !cluster.kwok.unacknowledged().contains(&id);
            let deleting = cluster
                .claims()
                .await
                .iter()
                .find(|c| c.name_any() == claim.name_any())
                .is_none_or(|c| c.metadata.deletion_timestamp.is_some());
            assert!(
                !acknowledged || deleting,
                "the interruption was acknowledged while its claim lived"
            );
            deleting
        },
    )
    .await;
    standby.stop().await;
}
