//! Disruption carried out end to end (upstream's consolidation and
//! emptiness e2e suites, on provider-kwok): empty nodes go away after
//! `consolidateAfter`, an underutilized node is replaced by a cheaper one
//! without losing its pods, a blocked node stays, and a disrupted taint no
//! command holds (a crash mid-command) is taken off.

mod common;

use std::time::Duration;

use common::{Cluster, eventually, label};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";

/// On-demand nodes of these instance types.
fn on_demand(types: &[&str]) -> serde_json::Value {
    json!({"spec": {"requirements": [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": INSTANCE_TYPE, "operator": "In", "values": types}]}})
}

/// 2 or 8 vCPUs, amd64, the `c` family.
fn small_and_large() -> serde_json::Value {
    on_demand(&["c-2x-amd64-linux", "c-8x-amd64-linux"])
}

async fn instance_types(cluster: &Cluster) -> Vec<String> {
    let mut types: Vec<String> = cluster
        .claims()
        .await
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| label(c, INSTANCE_TYPE).map(str::to_owned))
        .collect();
    types.sort();
    types
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn empty_nodes_go_away_after_consolidate_after() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            on_demand(&["c-2x-amd64-linux"]),
            json!({"disruption": {"consolidateAfter": "3s", "consolidationPolicy": "WhenEmpty"}}),
        ))
        .await;
    // One pod per 2-vCPU node.
    cluster.deployment("inflate", 3, "1500m", json!({})).await;
    eventually("three pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 3)
    })
    .await;
    assert_eq!(cluster.claims().await.len(), 3);
    // Busy nodes of a WhenEmpty pool say why consolidation leaves them.
    eventually(
        "an Unconsolidatable event on a busy node",
        Duration::from_secs(60),
        || async {
            event_messages(&cluster, "Unconsolidatable")
                .await
                .iter()
                .any(|m| {
                    m == "NodePool \"default\" has consolidation policy WhenEmpty, but node is not empty"
                })
        },
    )
    .await;
    cluster.scale("inflate", 0).await;
    eventually("every empty node gone", Duration::from_secs(90), || async {
        cluster.claims().await.is_empty() && cluster.nodes().await.is_empty()
    })
    .await;
    let metrics = adapter.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("karpenter_nodeclaims_disrupted_total{")
                && l.contains("reason=\"empty\"")),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "karpenter_voluntary_disruption_decisions_total{decision=\"delete\",reason=\"empty\",consolidation_type=\"empty\"}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "karpenter_voluntary_disruption_decisions_by_nodepool_total{nodepool=\"default\",decision=\"delete\",reason=\"empty\",consolidation_type=\"empty\"}"
        )),
        "{metrics}"
    );
    for budget in [
        "karpenter_nodepools_allowed_disruptions{nodepool=\"default\",reason=\"Empty\"}",
        "karpenter_nodepools_nodes_consuming_budgets{nodepool=\"default\",reason=\"Empty\"}",
        "karpenter_nodepools_cost_total{nodepool=\"default\"}",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(budget)),
            "{budget} in:\n{metrics}"
        );
    }
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_underutilized_node_is_replaced_by_a_cheaper_one_and_its_pods_move() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            small_and_large(),
            json!({"disruption": {"consolidateAfter": "2s"}}),
        ))
        .await;
    // Six 1-vCPU pods fit one 8-vCPU node, cheaper than six 2-vCPU ones.
    cluster.deployment("inflate", 6, "1", json!({})).await;
    eventually("six pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 6)
    })
    .await;
    assert_eq!(instance_types(&cluster).await, ["c-8x-amd64-linux"]);
    cluster.scale("inflate", 1).await;
    eventually(
        "the large node replaced by a small one",
        Duration::from_secs(120),
        || async {
            instance_types(&cluster).await == ["c-2x-amd64-linux"]
                && cluster.nodes().await.len() == 1
                && cluster.running("inflate", 1).await
        },
    )
    .await;
    let node = &cluster.nodes().await[0];
    assert_eq!(label(node, INSTANCE_TYPE), Some("c-2x-amd64-linux"));
    let pods = cluster.pods("inflate").await;
    assert_eq!(
        pods[0].spec.as_ref().and_then(|s| s.node_name.as_deref()),
        node.metadata.name.as_deref(),
        "the pod moved to the replacement"
    );
    let metrics = adapter.metrics().await;
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "karpenter_voluntary_disruption_decisions_total{decision=\"replace\",reason=\"underutilized\""
        )),
        "{metrics}"
    );
    let cost = |estimate: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "karpenter_disruption_cluster_cost_per_hour{{estimate=\"{estimate}\"}} "
                ))
            })
            .and_then(|v| v.parse::<f64>().ok())
    };
    let (current, lower) = (cost("current"), cost("lower_bound"));
    assert!(
        current.zip(lower).is_some_and(|(c, l)| l > 0.0 && l <= c),
        "cost gauges: {metrics}"
    );
    adapter.stop().await;
}

/// The messages of the events of `reason`.
async fn event_messages(cluster: &Cluster, reason: &str) -> Vec<String> {
    cluster
        .events(reason)
        .await
        .into_iter()
        .filter_map(|e| e.message)
        .collect()
}

/// Upstream's "should approve replacing an oversized node" under
/// `consolidationPolicy: Balanced`: the replacement goes ahead (three
/// quarters of the pool's cost saved for all of its one-pod disruption), and
/// the node and its claim carry ConsolidationCandidate and
/// ConsolidationApproved with the score, the threshold and K.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_balanced_pool_replaces_an_oversized_node_and_says_why() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            small_and_large(),
            json!({"disruption": {"consolidateAfter": "2s", "consolidationPolicy": "Balanced"}}),
        ))
        .await;
    cluster.deployment("inflate", 6, "1", json!({})).await;
    eventually("six pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 6)
    })
    .await;
    assert_eq!(instance_types(&cluster).await, ["c-8x-amd64-linux"]);
    cluster.scale("inflate", 1).await;
    eventually(
        "the large node replaced by a small one",
        Duration::from_secs(120),
        || async {
            instance_types(&cluster).await == ["c-2x-amd64-linux"]
                && cluster.nodes().await.len() == 1
                && cluster.running("inflate", 1).await
        },
    )
    .await;
    let candidates = event_messages(&cluster, "ConsolidationCandidate").await;
    assert!(
        candidates.iter().any(|m| m.starts_with(
            "Consolidation candidate: Underutilized: replace: nodepools=[default]: ["
        ) && m.contains("-> [1 replacement]")),
        "{candidates:?}"
    );
    let approved = event_messages(&cluster, "ConsolidationApproved").await;
    assert!(
        approved
            .iter()
            .any(|m| m.contains(">= threshold 0.50 (k: 2, savings ")),
        "{approved:?}"
    );
    // Karpenter's Balanced metrics: the move, and its score.
    let metrics = adapter.metrics().await;
    let labels = r#"decision="approved",nodepool="default",policy="Balanced""#;
    assert!(
        metrics.contains(&format!(
            "karpenter_consolidation_moves_total{{{labels}}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "karpenter_consolidation_score_count{{{labels}}} 1"
        )),
        "{metrics}"
    );
    adapter.stop().await;
}

/// Upstream's pod events for `karpenter.sh/do-not-disrupt`: a value that
/// is neither "true" nor a positive duration is ignored with a warning, a
/// duration says when it elapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn do_not_disrupt_durations_and_bad_values_are_explained_on_the_pod() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            small_and_large(),
            json!({"disruption": {"consolidateAfter": "2s"}}),
        ))
        .await;
    cluster.deployment("guarded", 1, "100m", json!({})).await;
    cluster.deployment("garbled", 1, "100m", json!({})).await;
    eventually("pods running", Duration::from_secs(60), || async {
        cluster.running("guarded", 1).await && cluster.running("garbled", 1).await
    })
    .await;
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::default_namespaced(cluster.client.clone());
    for (deployment, value) in [("guarded", "1h"), ("garbled", "forever")] {
        let name = cluster.pods(deployment).await[0]
            .metadata
            .name
            .clone()
            .unwrap_or_default();
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": value}}}),
            ),
        )
        .await
        .expect("annotated");
    }
    eventually(
        "both pods' events",
        Duration::from_secs(60),
        || async {
            let invalid = event_messages(&cluster, "InvalidDoNotDisruptAnnotation").await;
            let until = event_messages(&cluster, "DoNotDisruptUntil").await;
            invalid.iter().any(|m| {
                m.starts_with("Invalid karpenter.sh/do-not-disrupt annotation: failed to parse \"forever\" as a duration: ")
                    && m.ends_with(", ignoring annotation")
            }) && until
                .iter()
                .any(|m| m.starts_with("The karpenter.sh/do-not-disrupt grace period will elapse at "))
        },
    )
    .await;
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_do_not_disrupt_pod_keeps_its_node_until_it_goes() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            small_and_large(),
            json!({"disruption": {"consolidateAfter": "2s"}}),
        ))
        .await;
    cluster.deployment("inflate", 6, "1", json!({})).await;
    cluster.deployment("pinned", 1, "100m", json!({})).await;
    eventually("pods running", Duration::from_secs(60), || async {
        cluster.running("inflate", 6).await && cluster.running("pinned", 1).await
    })
    .await;
    assert_eq!(
        instance_types(&cluster).await,
        ["c-8x-amd64-linux"],
        "one batch, one node"
    );
    // Mark the pinned pod do-not-disrupt, then leave the node underused.
    let pinned = cluster.pods("pinned").await;
    let name = pinned[0].metadata.name.clone().unwrap_or_default();
    Api::<k8s_openapi::api::core::v1::Pod>::default_namespaced(cluster.client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
        )
        .await
        .expect("annotated");
    cluster.scale("inflate", 1).await;
    // A cheaper 2-vCPU node would hold both pods; the annotation keeps the
    // large one (the replacement above takes well under this long).
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        instance_types(&cluster).await,
        ["c-8x-amd64-linux"],
        "the node with a do-not-disrupt pod stays"
    );
    assert!(cluster.running("pinned", 1).await);
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(cluster.client.clone())
        .list(&Default::default())
        .await
        .expect("events");
    let blocked = events.items.iter().find(|e| {
        e.reason.as_deref() == Some("DisruptionBlocked")
            && e.involved_object.kind.as_deref() == Some("Node")
    });
    let message = blocked.and_then(|e| e.message.clone()).unwrap_or_default();
    assert!(
        message.starts_with("Pod ") && message.contains("karpenter.sh/do-not-disrupt"),
        "the node says why it stays: {message:?}"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_disrupted_taint_no_command_holds_is_removed() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool("default", small_and_large(), json!({})))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    // What a process that stopped between tainting and deleting leaves.
    let nodes = Api::<Node>::all(cluster.client.clone());
    let node = cluster.nodes().await.remove(0);
    let name = node.metadata.name.clone().unwrap_or_default();
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [
                {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}})),
        )
        .await
        .expect("tainted");
    eventually(
        "the leftover taint removed",
        Duration::from_secs(30),
        || async {
            nodes.get(&name).await.is_ok_and(|n| {
                !n.spec
                    .and_then(|s| s.taints)
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == "karpenter.sh/disrupted")
            })
        },
    )
    .await;
    assert!(cluster.running("inflate", 1).await, "nothing was drained");
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pdb_without_allowance_keeps_the_node_until_it_allows() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            small_and_large(),
            json!({"disruption": {"consolidateAfter": "2s"}}),
        ))
        .await;
    cluster.deployment("inflate", 6, "1", json!({})).await;
    eventually("six pods running", Duration::from_secs(60), || {
        cluster.running("inflate", 6)
    })
    .await;
    let pdbs = Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::default_namespaced(
        cluster.client.clone(),
    );
    let pdb = serde_json::from_value(json!({
        "metadata": {"name": "inflate"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "inflate"}}}
    }))
    .expect("pdb");
    pdbs.create(&Default::default(), &pdb)
        .await
        .expect("pdb created");
    cluster.scale("inflate", 1).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        instance_types(&cluster).await,
        ["c-8x-amd64-linux"],
        "the PDB allows no eviction, so the node stays"
    );
    pdbs.delete("inflate", &Default::default())
        .await
        .expect("pdb deleted");
    eventually(
        "replaced once nothing blocks",
        Duration::from_secs(90),
        || async {
            instance_types(&cluster).await == ["c-2x-amd64-linux"]
                && cluster.running("inflate", 1).await
        },
    )
    .await;
    adapter.stop().await;
}
