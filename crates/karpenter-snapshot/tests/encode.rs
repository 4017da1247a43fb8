//! A snapshot whose pods stay placed (shared with the caller's prepared
//! pods) encodes to the same request as the snapshot built with its pods
//! copied in.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_snapshot::{ClusterRequest, Mode, Objects, Source, build, build_placed};
use serde_json::{Value, json};

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
}

fn pod(name: &str, node: Option<&str>, extra: Value) -> Pod {
    let mut value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": {"app": "web"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "startTime": "2026-01-01T00:00:00Z",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    });
    if let Some(node) = node {
        value["spec"]["nodeName"] = json!(node);
        value["status"] = json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"});
    }
    if let (Value::Object(into), Value::Object(from)) = (&mut value, extra) {
        for (key, extra) in from {
            match (into.get_mut(&key), extra) {
                (Some(Value::Object(slot)), Value::Object(fields)) => slot.extend(fields),
                (_, extra) => {
                    into.insert(key, extra);
                }
            }
        }
    }
    object(value)
}

fn node(name: &str) -> Node {
    object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                               "topology.kubernetes.io/zone": "zone-a"}},
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

/// Everything a finished pod takes from other objects and the clock:
/// priority from a class (and a negative one), a claim's volume, a
/// do-not-disrupt for good and one for a while; pods on the first and last
/// of three nodes (the middle one has none); a DaemonSet's pod, which the
/// DaemonSet counts as; a PDB whose status is computed from the pods.
struct Cluster {
    pods: Vec<Pod>,
    nodes: Vec<Node>,
    classes: Vec<PriorityClass>,
    claim: PersistentVolumeClaim,
    storage: StorageClass,
    daemon_set: DaemonSet,
    budget: PodDisruptionBudget,
}

fn cluster() -> Cluster {
    let class = |name: &str, value: i32| -> PriorityClass {
        object(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": name}, "value": value}),
        )
    };
    let daemon_owner = json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": "agent", "uid": "uid-agent", "controller": true}], "labels": {"app": "agent"}});
    Cluster {
        pods: vec![
            pod(
                "high",
                None,
                json!({"spec": {"priorityClassName": "high", "containers": [{"name": "c"}]}}),
            ),
            pod(
                "low",
                None,
                json!({"spec": {"priorityClassName": "low", "containers": [{"name": "c"}]}}),
            ),
            pod(
                "data",
                None,
                json!({"spec": {"containers": [{"name": "c"}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}),
            ),
            pod(
                "kept",
                Some("node-a"),
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
            pod(
                "kept-a-while",
                Some("node-c"),
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "90m"}}}),
            ),
            pod(
                "agent-a",
                Some("node-a"),
                json!({"metadata": daemon_owner, "spec": {"priorityClassName": "high"}}),
            ),
        ],
        nodes: ["node-a", "node-b", "node-c"].map(node).to_vec(),
        classes: vec![class("high", 1000), class("low", -5)],
        claim: object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default"}, "spec": {"storageClassName": "zonal"}})),
        storage: object(
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "topology.kubernetes.io/zone", "values": ["zone-a"]}]}]}),
        ),
        daemon_set: object(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default", "uid": "uid-agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"priorityClassName": "high", "containers": [{"name": "c"}]}}}})),
        budget: object(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        ),
    }
}

fn sources<T>(items: &[T]) -> Vec<Source<'_, T>> {
    items
        .iter()
        .enumerate()
        .map(|(id, object)| Source { id, object })
        .collect()
}

/// The request encoded both ways, decoded.
fn both_ways<R: ClusterRequest + Default>(
    with_cluster: impl Fn(Option<sched::ClusterSnapshot>) -> R,
) -> (R, R) {
    let cluster = cluster();
    let prepared: Vec<_> = sources(&cluster.pods)
        .iter()
        .map(|source| karpenter_snapshot::prepare_object(source, Mode::Live))
        .collect();
    let objects = Objects {
        prepared_pods: sources(&prepared),
        nodes: sources(&cluster.nodes),
        priority_classes: sources(&cluster.classes),
        persistent_volume_claims: vec![Source {
            id: 0,
            object: &cluster.claim,
        }],
        storage_classes: vec![Source {
            id: 0,
            object: &cluster.storage,
        }],
        daemon_sets: vec![Source {
            id: 0,
            object: &cluster.daemon_set,
        }],
        pod_disruption_budgets: vec![Source {
            id: 0,
            object: &cluster.budget,
        }],
        now: Some(prost_types::Timestamp {
            seconds: 1_767_225_600 + 60,
            nanos: 0,
        }),
        ..Objects::default()
    };
    let copied = build(&objects, Mode::Live).expect("live builds");
    let placed = build_placed(&objects, Mode::Live).expect("live builds");
    assert!(placed.snapshot.pending_pods.is_empty(), "pods stay placed");
    assert_eq!(placed.pending_pod_count(), copied.pending_pod_count());
    let spliced = placed.encode_request(&with_cluster(None)).expect("encodes");
    let whole = with_cluster(Some(copied.snapshot)).encode_to_vec();
    assert_eq!(spliced.len(), whole.len(), "the same length either way");
    let decode = |bytes: &[u8]| R::decode(bytes).expect("decodes");
    (decode(&spliced), decode(&whole))
}

#[test]
fn a_solve_request_from_placed_pods_decodes_to_the_copied_snapshot() {
    let (spliced, whole) = both_ways(|cluster| sched::SolveRequest {
        cluster,
        options: Some(sched::SchedulingOptions {
            feature_gates: [("SpotToSpotConsolidation".to_owned(), true)].into(),
            ..Default::default()
        }),
    });
    assert_eq!(spliced, whole);
    let cluster = whole.cluster.expect("a cluster");
    // The fixture exercises what it says it does.
    let priorities: Vec<i32> = cluster.pending_pods.iter().map(|p| p.priority).collect();
    assert_eq!(priorities, [1000, -5, 0]);
    assert_eq!(cluster.pending_pods[2].volumes.len(), 1);
    let on_nodes: Vec<usize> = cluster.nodes.iter().map(|n| n.pods.len()).collect();
    assert_eq!(on_nodes, [2, 0, 1]);
    assert!(cluster.nodes[0].pods.iter().any(|p| p.do_not_disrupt));
    assert!(cluster.nodes[2].pods[0].do_not_disrupt_until.is_some());
    let template = cluster.daemon_sets[0].template.as_ref().expect("template");
    assert_eq!(template.name, "agent-a", "the running pod");
    assert_eq!(template.priority, 1000, "finished like the others");
    assert_eq!(cluster.pod_disruption_budgets[0].expected_pods, 5);
}

#[test]
fn a_plan_disruption_request_from_placed_pods_decodes_to_the_copied_snapshot() {
    let (spliced, whole) = both_ways(|cluster| sched::PlanDisruptionRequest {
        cluster,
        options: None,
    });
    assert_eq!(spliced, whole);
    assert!(whole.cluster.is_some_and(|c| !c.nodes.is_empty()));
}
