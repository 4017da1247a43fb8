//! Provisioning and the claim lifecycle end to end: pending pods become
//! NodeClaims, instances, registered and initialized Nodes, and bound pods.

mod common;

use std::time::Duration;

use common::{Cluster, condition, eventually, label};
use karpenter_core::labels;
use kube::ResourceExt;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_pods_get_nodes_that_carry_the_pools_labels_and_taints() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({
                "metadata": {"labels": {"team": "checkout"}, "annotations": {"example.com/owner": "a"}},
                "spec": {"taints": [{"key": "dedicated", "value": "checkout", "effect": "NoSchedule"}]}
            }),
            json!({}),
        ))
        .await;
    cluster
        .deployment(
            "inflate",
            5,
            "1",
            json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "checkout", "effect": "NoSchedule"}]}),
        )
        .await;
    eventually(
        "5 pods running on new nodes",
        Duration::from_secs(60),
        || cluster.running("inflate", 5),
    )
    .await;

    let claims = cluster.claims().await;
    assert!(!claims.is_empty());
    for claim in &claims {
        for condition_type in ["Launched", "Registered", "Initialized", "Ready"] {
            assert_eq!(
                condition(claim, condition_type).as_deref(),
                Some("True"),
                "{} {condition_type}: {:?}",
                claim.name_any(),
                claim.status
            );
        }
        assert_eq!(label(claim, labels::NODE_POOL), Some("default"));
        assert!(claim.name_any().starts_with("default-"));
        assert!(
            claim
                .finalizers()
                .contains(&labels::TERMINATION_FINALIZER.to_owned())
        );
        let owner = &claim.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("NodePool", "default")
        );
    }
    let nodes = cluster.nodes().await;
    assert_eq!(nodes.len(), claims.len(), "one node per claim");
    for node in &nodes {
        assert_eq!(label(node, "team"), Some("checkout"));
        assert_eq!(label(node, labels::NODE_POOL), Some("default"));
        assert_eq!(label(node, labels::REGISTERED), Some("true"));
        assert_eq!(label(node, labels::INITIALIZED), Some("true"));
        assert_eq!(
            node.annotations()
                .get("example.com/owner")
                .map(String::as_str),
            Some("a")
        );
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "dedicated" && t.value.as_deref() == Some("checkout"))
        );
        assert!(
            !taints
                .iter()
                .any(|t| t.key == labels::UNREGISTERED_TAINT_KEY),
            "registration lifts the unregistered taint"
        );
        assert!(
            node.finalizers()
                .contains(&labels::TERMINATION_FINALIZER.to_owned())
        );
        assert_eq!(node.owner_references()[0].kind, "NodeClaim");
    }
    assert!(
        adapter.ready().await,
        "ready while reconciling with both peers up"
    );
    let metrics = adapter.metrics().await;
    assert!(
        metrics.contains("karpenter_nodeclaims_created_total{"),
        "{metrics}"
    );
    assert!(
        metrics.contains("karpenter_nodes_created_total{"),
        "{metrics}"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_pool_limits_stop_provisioning() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    // One 1-CPU pod per node (host port), at most 2 CPUs of nodes.
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}]}}),
            json!({"limits": {"cpu": "4"}}),
        ))
        .await;
    cluster
        .deployment(
            "ports",
            4,
            "1",
            json!({"containers": [{"name": "app", "image": "pause", "ports": [{"containerPort": 80, "hostPort": 80}],
                                   "resources": {"requests": {"cpu": "1"}}}]}),
        )
        .await;
    eventually("two nodes, the limit", Duration::from_secs(30), || async {
        cluster.nodes().await.len() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cluster.claims().await.len(), 2, "no claim past the limit");
    let pending = cluster
        .pods("ports")
        .await
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .count();
    assert_eq!(pending, 2, "two pods wait for the limit to be raised");
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_heavier_pool_is_used_first() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "light",
            json!({"metadata": {"labels": {"pool": "light"}}}),
            json!({"weight": 10}),
        ))
        .await;
    cluster
        .node_pool(Cluster::pool(
            "heavy",
            json!({"metadata": {"labels": {"pool": "heavy"}}}),
            json!({"weight": 50}),
        ))
        .await;
    cluster.deployment("inflate", 2, "1", json!({})).await;
    eventually("pods running", Duration::from_secs(30), || {
        cluster.running("inflate", 2)
    })
    .await;
    for node in cluster.nodes().await {
        assert_eq!(label(&node, "pool"), Some("heavy"));
        assert_eq!(label(&node, labels::NODE_POOL), Some("heavy"));
    }
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insufficient_capacity_deletes_the_claim_and_a_later_batch_launches() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster.kwok.fail_offerings(provider_kwok::OfferingPattern {
        instance_type: Some("c-4x-amd64-linux".into()),
        zone: None,
        capacity_type: None,
    });
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux"]}]}}),
            json!({}),
        ))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    // On the claim, and (Karpenter v1.15.1) on the pod it left pending.
    for kind in ["NodeClaim", "Pod"] {
        eventually(
            &format!("an InsufficientCapacityError event on the {kind}"),
            Duration::from_secs(30),
            || async {
                cluster
                    .events("InsufficientCapacityError")
                    .await
                    .iter()
                    .any(|e| {
                        e.type_.as_deref() == Some("Warning")
                            && e.involved_object.kind.as_deref() == Some(kind)
                            && (kind == "NodeClaim"
                                || e.involved_object
                                    .name
                                    .as_deref()
                                    .is_some_and(|n| n.starts_with("inflate-")))
                    })
            },
        )
        .await;
    }
    assert!(cluster.nodes().await.is_empty(), "nothing launched");
    // Capacity comes back: the pod is planned again and launches.
    cluster.kwok.clear_faults();
    eventually("the pod running", Duration::from_secs(40), || {
        cluster.running("inflate", 1)
    })
    .await;
    assert_eq!(cluster.claims().await.len(), 1, "the failed claim is gone");
    adapter.stop().await;
}

/// Upstream's NoCompatibleInstanceTypes: a ready pool whose requirements
/// leave none of its instance types says so on the NodePool.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_whose_requirements_match_no_instance_type_says_so() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no-such-type"]}]}}),
            json!({}),
        ))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually(
        "a NoCompatibleInstanceTypes warning on the pool",
        Duration::from_secs(30),
        || async {
            cluster
                .events("NoCompatibleInstanceTypes")
                .await
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.involved_object.kind.as_deref() == Some("NodePool")
                        && e.message.as_deref()
                            == Some("NodePool requirements filtered out all compatible available instance types")
                })
        },
    )
    .await;
    assert!(cluster.claims().await.is_empty(), "nothing launched");
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_without_its_node_class_is_not_ready_and_launches_nothing() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    let mut pool = Cluster::pool("missing", json!({}), json!({}));
    pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("nope");
    cluster.node_pool(pool).await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    let pools = kube::Api::<karpenter_api::NodePool>::all(cluster.client.clone());
    eventually(
        "NodeClassReady=False, NodeClassNotFound",
        Duration::from_secs(20),
        || {
            let pools = pools.clone();
            async move {
                pools.get("missing").await.is_ok_and(|p| {
                    p.conditions()
                        .iter()
                        .any(|c| c.type_ == "NodeClassReady" && c.reason == "NodeClassNotFound")
                        && p.conditions().iter().any(|c| {
                            c.type_ == "Ready" && c.status == karpenter_api::ConditionStatus::False
                        })
                })
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        cluster.claims().await.is_empty(),
        "nothing launched for a pool that is not ready"
    );
    adapter.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_with_an_unreadable_request_is_told_and_the_rest_provisioned() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    cluster.deployment("good", 2, "1", json!({})).await;
    cluster
        .deployment("huge", 1, "100000000000000000000", json!({}))
        .await;
    eventually("the good pods running", Duration::from_secs(30), || {
        cluster.running("good", 2)
    })
    .await;
    let events =
        kube::Api::<k8s_openapi::api::core::v1::Event>::default_namespaced(cluster.client.clone());
    eventually(
        "a FailedScheduling warning on the huge pod",
        Duration::from_secs(20),
        || {
            let events = events.clone();
            async move {
                events.list(&Default::default()).await.is_ok_and(|l| {
                    l.items.iter().any(|e| {
                        e.reason.as_deref() == Some("FailedScheduling")
                            && e.involved_object
                                .name
                                .as_deref()
                                .is_some_and(|n| n.starts_with("huge-"))
                    })
                })
            }
        },
    )
    .await;
    adapter.stop().await;
}

/// The value of the first sample of `metric` whose labels contain every
/// one of `labels` (`key="value"`).
fn sample(metrics: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(metric)?.strip_prefix('{')?;
        let (set, value) = rest.rsplit_once("} ")?;
        labels
            .iter()
            .all(|l| set.split(',').any(|p| p == *l))
            .then(|| value.parse().ok())?
    })
}

/// Karpenter's node metrics (`metrics.node`): each node's allocatable,
/// overhead, pod requests and limits by resource, its age, labelled with
/// its name, pool and well-known labels; the cluster's utilization.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_metrics_say_what_each_node_holds() {
    let cluster = Cluster::start().await;
    let adapter = cluster.adapter().await;
    cluster
        .node_pool(Cluster::pool("default", json!({}), json!({})))
        .await;
    let containers = json!({"containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}]});
    cluster.deployment("inflate", 1, "1", containers).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    let node = cluster.pods("inflate").await[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("bound");
    let on_node = format!("node_name=\"{node}\"");
    let cpu = [
        "resource_type=\"cpu\"",
        "nodepool=\"default\"",
        "managed=\"true\"",
        on_node.as_str(),
    ];
    eventually("the node's metrics", Duration::from_secs(30), || async {
        let metrics = adapter.metrics().await;
        sample(&metrics, "karpenter_nodes_total_pod_requests", &cpu) == Some(1.0)
            && sample(&metrics, "karpenter_nodes_total_pod_limits", &cpu) == Some(2.0)
    })
    .await;
    let metrics = adapter.metrics().await;
    let allocatable = sample(&metrics, "karpenter_nodes_allocatable", &cpu).expect("allocatable");
    assert!(allocatable >= 1.0, "{metrics}");
    assert!(sample(&metrics, "karpenter_nodes_system_overhead", &cpu).is_some());
    assert!(
        sample(
            &metrics,
            "karpenter_nodes_current_lifetime_seconds",
            &[on_node.as_str()]
        )
        .is_some()
    );
    assert!(
        metrics.contains("instance_type=\"") && metrics.contains("capacity_type=\""),
        "well-known labels: {metrics}"
    );
    let utilization = sample(
        &metrics,
        "karpenter_cluster_utilization_percent",
        &["resource_type=\"cpu\""],
    )
    .expect("utilization");
    assert!(
        (utilization - 100.0 / allocatable).abs() < 1e-6,
        "{utilization} {allocatable}"
    );
    // The provider calls as Karpenter's decorator counts them, by the
    // controller that made them; controller-runtime's and client-go's
    // metrics under their own names.
    let create = [
        "controller=\"nodeclaim.lifecycle\"",
        "method=\"Create\"",
        "provider=\"kwok\"",
    ];
    let creates = sample(
        &metrics,
        "karpenter_cloudprovider_duration_seconds_count",
        &create,
    );
    assert!(creates.is_some_and(|n| n >= 1.0), "{metrics}");
    let lifecycle = ["controller=\"nodeclaim.lifecycle\"", "result=\"success\""];
    assert!(
        sample(&metrics, "controller_runtime_reconcile_total", &lifecycle)
            .is_some_and(|n| n >= 1.0)
    );
    // The catalog as Karpenter's AWS provider reports it, for every
    // provider here; the cluster state synced; no pod ignored.
    let instance_type = metrics
        .lines()
        .find_map(|l| l.strip_prefix("karpenter_nodes_allocatable{"))
        .and_then(|l| l.split(',').find_map(|p| p.strip_prefix("instance_type=")))
        .expect("the node's instance type")
        .to_owned();
    let of_type = format!("instance_type={instance_type}");
    let cores = sample(
        &metrics,
        "karpenter_cloudprovider_instance_type_cpu_cores",
        &[&of_type],
    );
    assert!(cores.is_some_and(|c| c >= 1.0), "{metrics}");
    assert!(
        sample(
            &metrics,
            "karpenter_cloudprovider_instance_type_memory_bytes",
            &[&of_type]
        )
        .is_some()
    );
    let on_demand = [of_type.as_str(), "capacity_type=\"on-demand\""];
    let offered = sample(
        &metrics,
        "karpenter_cloudprovider_instance_type_offering_available",
        &on_demand,
    );
    assert_eq!(offered, Some(1.0), "{metrics}");
    assert!(
        sample(
            &metrics,
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            &on_demand
        )
        .is_some()
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "karpenter_cluster_state_unsynced_time_seconds 0.0"),
        "{metrics}"
    );
    // The pod's scheduling, as Karpenter's pod metrics time it.
    for histogram in [
        "karpenter_pods_scheduling_decision_duration_seconds_count",
        "karpenter_pods_bound_duration_seconds_count",
        "karpenter_pods_provisioning_bound_duration_seconds_count",
        "karpenter_pods_provisioning_startup_duration_seconds_count",
    ] {
        let count = metrics
            .lines()
            .find_map(|l| l.strip_prefix(histogram)?.strip_prefix(' '));
        assert_eq!(count, Some("1"), "{histogram} in:\n{metrics}");
    }
    assert!(
        metrics
            .lines()
            .any(|l| l == "karpenter_scheduler_ignored_pods_count 0"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "karpenter_scheduler_queue_depth 0"),
        "no batch waiting: {metrics}"
    );
    assert_eq!(
        sample(&metrics, "leader_election_master_status", &[]),
        Some(1.0),
        "{metrics}"
    );
    adapter.stop().await;
}

/// Karpenter's `DISABLE_CLUSTER_STATE_OBSERVABILITY`: the per-pod,
/// per-pool and per-node state metrics are left out; the cluster-state
/// gauges stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_state_observability_can_be_disabled() {
    let cluster = Cluster::start().await;
    let settings = cluster.settings(&["--disable-cluster-state-observability", "true"]);
    let adapter = cluster.adapter_with(settings, common::test_timing()).await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({}),
            json!({"limits": {"cpu": "100"}}),
        ))
        .await;
    cluster.deployment("inflate", 1, "1", json!({})).await;
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("inflate", 1)
    })
    .await;
    // The observability pass after the node registered has run once the
    // node count says so; it would have written the pod's state with it.
    eventually("the node counted", Duration::from_secs(30), || async {
        adapter
            .metrics()
            .await
            .lines()
            .any(|l| l == "karpenter_cluster_state_node_count 1")
    })
    .await;
    let metrics = adapter.metrics().await;
    for left_out in [
        "karpenter_pods_state{",
        "karpenter_nodepools_usage{",
        "karpenter_nodepools_limit{",
        "karpenter_nodes_allocatable{",
        "karpenter_cluster_utilization_percent{",
    ] {
        assert!(!metrics.contains(left_out), "{left_out} in:\n{metrics}");
    }
    adapter.stop().await;
}
