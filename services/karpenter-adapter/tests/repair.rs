//! Node repair end to end, on provider-kwok (`Ready` False or Unknown for 10
//! minutes replaces; `Ready=False` for `RebootRequired` reboots). As a
//! disruption method (v1.15, upstream's `disruption/repair` e2e suite): the
//! replacement comes first, the `Unhealthy` budget paces it, do-not-disrupt
//! does not hold it and do-not-repair does, a reboot brings the same node
//! back, and nothing is repaired while more than 20% of a pool is
//! unhealthy. With `--legacy-node-repair` (upstream's `legacyrepair`
//! suite): forceful, past PDBs, do-not-disrupt and budgets.

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn pool() -> serde_json::Value {
    Cluster::pool(
        "default",
        json!({"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}]}}),
        json!({"disruption": {"consolidateAfter": "Never"}}),
    )
}

/// Sets the node's `Ready` condition, as its kubelet (or the node
/// lifecycle controller) would, changed `minutes_ago`.
async fn set_ready(cluster: &Cluster, node: &str, status: &str, minutes_ago: i64) {
    set_ready_for(cluster, node, status, "KubeletNotReady", minutes_ago).await;
}

async fn set_ready_for(
    cluster: &Cluster,
    node: &str,
    status: &str,
    reason: &str,
    minutes_ago: i64,
) {
    let since = Timestamp::now() - SignedDuration::from_mins(minutes_ago);
    let since = since.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    Api::<Node>::all(cluster.client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Ready", "status": status, "reason": reason,
                "message": "container runtime is down",
                "lastHeartbeatTime": since, "lastTransitionTime": since}]}})),
        )
        .await
        .expect("node status patched");
}

async fn node_names(cluster: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .nodes()
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

fn repair_settings(cluster: &Cluster) -> karpenter_adapter::settings::Settings {
    cluster.settings(&["--feature-gates", "NodeRepair=true"])
}

fn legacy_settings(cluster: &Cluster) -> karpenter_adapter::settings::Settings {
    cluster.settings(&["--feature-gates", "NodeRepair=true", "--legacy-node-repair"])
}

/// An adapter with `settings`, `pool` applied and one `inflate` pod
/// running on a node of its own; that node's name.
async fn one_node_running_a_pod(
    cluster: &Cluster,
    settings: karpenter_adapter::settings::Settings,
    pool: serde_json::Value,
) -> (common::Adapter, String) {
    let adapter = cluster.adapter_with(settings, common::test_timing()).await;
    cluster.node_pool(pool).await;
    cluster.deployment("inflate", 1, "1500m", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let node = node_names(cluster).await.remove(0);
    (adapter, node)
}

/// Sets `annotation: "true"` on the node.
async fn annotate_node(cluster: &Cluster, node: &str, annotation: &str) {
    Api::<Node>::all(cluster.client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {annotation: "true"}}})),
        )
        .await
        .expect("node annotated");
}

/// Upstream's legacy suite: "should ignore do-not-disrupt on a node", past
/// a PDB allowing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_legacy_repair_an_unhealthy_node_is_replaced_whatever_holds_graceful_disruption() {
    let cluster = Cluster::start().await;
    let (adapter, sick) = one_node_running_a_pod(&cluster, legacy_settings(&cluster), pool()).await;
    // A PDB allowing no disruption and a do-not-disrupt node: neither holds
    // a repair back.
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "inflate"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "inflate"}}}
    }))
    .expect("pdb");
    Api::<PodDisruptionBudget>::default_namespaced(cluster.client.clone())
        .create(&PostParams::default(), &pdb)
        .await
        .expect("pdb created");
    annotate_node(&cluster, &sick, "karpenter.sh/do-not-disrupt").await;

    // NotReady for less than the toleration: nothing happens.
    set_ready(&cluster, &sick, "False", 5).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        node_names(&cluster).await,
        std::slice::from_ref(&sick),
        "still tolerated"
    );

    set_ready(&cluster, &sick, "False", 11).await;
    eventually(
        "the unhealthy node replaced and the pod running elsewhere",
        Duration::from_secs(90),
        || async {
            let names = node_names(&cluster).await;
            let pods = cluster.pods("inflate").await;
            names.len() == 1
                && names[0] != sick
                && cluster.running("inflate", 1).await
                && pods.iter().all(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(names[0].as_str())
                })
        },
    )
    .await;
    let metrics = adapter.metrics().await;
    assert!(
        metrics.lines().any(|l| {
            l.starts_with("karpenter_nodeclaims_unhealthy_disrupted_total{")
                && l.contains("condition=\"ready\"")
                && l.ends_with(" 1")
        }),
        "{metrics}"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_repaired_while_more_than_a_fifth_of_the_pool_is_unhealthy() {
    let cluster = Cluster::start().await;
    let adapter = cluster
        .adapter_with(repair_settings(&cluster), common::test_timing())
        .await;
    cluster.node_pool(pool()).await;
    // One pod per 2-vCPU node.
    cluster.deployment("inflate", 3, "1500m", json!({})).await;
    eventually("three pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 3)
    })
    .await;
    let before = node_names(&cluster).await;
    assert_eq!(before.len(), 3);

    // Two of three unhealthy is more than 20% (rounded up, one node). The
    // adapter is down meanwhile, so it never sees one without the other.
    adapter.stop().await;
    set_ready(&cluster, &before[0], "Unknown", 30).await;
    set_ready(&cluster, &before[1], "False", 30).await;
    let adapter = cluster
        .adapter_with(repair_settings(&cluster), common::test_timing())
        .await;
    let events = Api::<Event>::all(cluster.client.clone());
    eventually(
        "repair blocked, told on the node",
        Duration::from_secs(30),
        || async {
            events.list(&Default::default()).await.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some("NodeRepairBlocked")
                        && e.involved_object.kind.as_deref() == Some("Node")
                        && e.message.as_deref()
                            == Some("more than 20% of nodes in nodepool \"default\" are unhealthy")
                })
            })
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node_names(&cluster).await, before, "no node repaired");

    // One recovers: one of three is within the allowance, so it goes.
    set_ready(&cluster, &before[1], "True", 0).await;
    eventually(
        "the remaining unhealthy node replaced",
        Duration::from_secs(90),
        || async {
            let names = node_names(&cluster).await;
            names.len() == 3
                && !names.contains(&before[0])
                && names.contains(&before[1])
                && names.contains(&before[2])
                && cluster.running("inflate", 3).await
        },
    )
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_feature_gate_an_unhealthy_node_stays() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.node_pool(pool()).await;
    cluster.deployment("inflate", 1, "1500m", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let before = node_names(&cluster).await;
    set_ready(&cluster, &before[0], "False", 60).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        node_names(&cluster).await,
        before,
        "NodeRepair is off by default"
    );
    adapter.stop().await;
}

/// A pool whose `Unhealthy` budget is `nodes`.
fn pool_with_repair_budget(nodes: &str) -> serde_json::Value {
    let mut pool = pool();
    pool["spec"]["disruption"]["budgets"] =
        json!([{"nodes": "100%"}, {"nodes": nodes, "reasons": ["Unhealthy"]}]);
    pool
}

async fn claim_names(cluster: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .claims()
        .await
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    names
}

/// Upstream's repair e2e: "respects disruption budgets", "ignores the
/// do-not-disrupt annotation on the node", "repairs replace-first"; and the
/// unit port "should pre-spin a replacement and terminate the unhealthy
/// node only after the replacement is healthy".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repair_replaces_first_within_the_unhealthy_budget() {
    let cluster = Cluster::start().await;
    let (adapter, sick) = one_node_running_a_pod(
        &cluster,
        repair_settings(&cluster),
        pool_with_repair_budget("0"),
    )
    .await;
    annotate_node(&cluster, &sick, "karpenter.sh/do-not-disrupt").await;
    set_ready(&cluster, &sick, "False", 11).await;
    eventually(
        "the Unhealthy budget of 0 told on the node",
        Duration::from_secs(30),
        || async {
            cluster.events("DisruptionBlocked").await.iter().any(|e| {
                e.involved_object.name.as_deref() == Some(sick.as_str())
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("Unhealthy"))
            })
        },
    )
    .await;
    assert_eq!(node_names(&cluster).await, std::slice::from_ref(&sick));

    Api::<karpenter_api::NodePool>::all(cluster.client.clone())
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disruption": {"budgets": [
                {"nodes": "100%"}, {"nodes": "1", "reasons": ["Unhealthy"]}]}}})),
        )
        .await
        .expect("budget raised");
    // Replace-first: a second claim exists while the unhealthy node still
    // does, then the unhealthy one goes and the pod runs on the new node.
    eventually(
        "a replacement launched before the unhealthy node goes",
        Duration::from_secs(60),
        || async {
            claim_names(&cluster).await.len() == 2 && node_names(&cluster).await.contains(&sick)
        },
    )
    .await;
    eventually(
        "the unhealthy node replaced and the pod running elsewhere",
        Duration::from_secs(90),
        || async {
            let names = node_names(&cluster).await;
            names.len() == 1 && names[0] != sick && cluster.running("inflate", 1).await
        },
    )
    .await;
    let metrics = adapter.metrics().await;
    for expected in [
        (
            "karpenter_nodeclaims_unhealthy_disrupted_total{",
            "condition=\"ready\"",
        ),
        (
            "karpenter_nodeclaims_disrupted_total{",
            "reason=\"unhealthy\"",
        ),
        (
            "karpenter_voluntary_disruption_decisions_total{",
            "reason=\"unhealthy\"",
        ),
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(expected.0) && l.contains(expected.1) && l.ends_with(" 1")),
            "{expected:?} in {metrics}"
        );
    }
    adapter.stop().await;
}

/// Upstream's repair e2e: "does not repair a node carrying the
/// do-not-repair annotation".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn do_not_repair_keeps_an_unhealthy_node() {
    let cluster = Cluster::start().await;
    let (adapter, sick) = one_node_running_a_pod(&cluster, repair_settings(&cluster), pool()).await;
    annotate_node(&cluster, &sick, "karpenter.sh/do-not-repair").await;
    set_ready(&cluster, &sick, "False", 11).await;
    // Several disruption passes (one a second here): no replacement, and the
    // veto is silent, as Karpenter's (NodeRepairBlocked is the breaker's).
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(node_names(&cluster).await, std::slice::from_ref(&sick));
        assert_eq!(claim_names(&cluster).await.len(), 1, "no replacement");
    }
    assert!(cluster.events("NodeRepairBlocked").await.is_empty());
    // Without the veto the same node is repaired.
    let nodes = Api::<Node>::all(cluster.client.clone());
    let unveto = json!({"metadata": {"annotations": {"karpenter.sh/do-not-repair": null}}});
    nodes
        .patch(&sick, &PatchParams::default(), &Patch::Merge(&unveto))
        .await
        .expect("annotation removed");
    eventually(
        "repaired once vetoed no more",
        Duration::from_secs(90),
        || async { !node_names(&cluster).await.contains(&sick) },
    )
    .await;
    adapter.stop().await;
}

/// Upstream's reboot e2e ("should reboot the same EC2 instance in place",
/// on provider-kwok's simulated reboot): the node is not replaced; it
/// comes back with a new boot ID, its claim says `RebootSucceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reboot_policy_brings_the_same_node_back() {
    let cluster = Cluster::start().await;
    let (adapter, sick) = one_node_running_a_pod(&cluster, repair_settings(&cluster), pool()).await;
    let claims_before = claim_names(&cluster).await;
    let boot_id = |node: &Node| {
        node.status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.boot_id.clone())
            .unwrap_or_default()
    };
    let nodes = Api::<Node>::all(cluster.client.clone());
    let before = boot_id(&nodes.get(&sick).await.expect("node"));
    // Past the reboot policy's 5 minutes, within the fallback's 10.
    set_ready_for(&cluster, &sick, "False", "RebootRequired", 6).await;
    eventually("the reboot succeeded", Duration::from_secs(60), || async {
        cluster.claims().await.iter().any(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Rebooting"
                        && c.status == karpenter_api::ConditionStatus::False
                        && c.reason == "RebootSucceeded"
                })
            })
        })
    })
    .await;
    let node = nodes.get(&sick).await.expect("the same node");
    assert_ne!(boot_id(&node), before, "a new boot");
    assert!(karpenter_api::node::is_ready(&node));
    assert!(
        !node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/rebooting")),
        "the rebooting taint is off"
    );
    // Its pod was drained before the reboot (and got a node of its own);
    // the rebooted node's claim was not replaced.
    let claims_after = claim_names(&cluster).await;
    assert!(
        claims_before.iter().all(|c| claims_after.contains(c)),
        "{claims_before:?} kept in {claims_after:?}"
    );
    let metrics = adapter.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("karpenter_nodeclaims_reboots_total{")
                && l.contains("result=\"succeeded\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );
    eventually("the pod running again", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    adapter.stop().await;
}

/// Upstream's legacy suite: "should ignore node disruption budgets".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn legacy_repair_ignores_the_unhealthy_budget() {
    let cluster = Cluster::start().await;
    let (adapter, sick) = one_node_running_a_pod(
        &cluster,
        legacy_settings(&cluster),
        pool_with_repair_budget("0"),
    )
    .await;
    set_ready(&cluster, &sick, "False", 11).await;
    eventually(
        "the unhealthy node replaced",
        Duration::from_secs(90),
        || async {
            let names = node_names(&cluster).await;
            names.len() == 1 && names[0] != sick && cluster.running("inflate", 1).await
        },
    )
    .await;
    adapter.stop().await;
}
