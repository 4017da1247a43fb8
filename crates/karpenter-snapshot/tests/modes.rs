//! The same objects read as manifests and as a live cluster.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_snapshot::{Mode, NodeClasses, Objects, Source, build};
use serde_json::{Value, json};

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
}

fn pod(name: &str, extra: Value) -> Pod {
    let mut value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
    });
    merge(&mut value, extra);
    object(value)
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, value) => *slot = value,
    }
}

fn unschedulable() -> Value {
    json!({"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}})
}

fn pool(class: &str) -> NodePool {
    object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": class},
            "requirements": []
        }}}
    }))
}

fn node(name: &str, labels: Value) -> Node {
    object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

fn kwok_classes(ready: &[(&str, bool)]) -> NodeClasses {
    NodeClasses {
        group: "karpenter.kwok.sh".into(),
        kind: "KWOKNodeClass".into(),
        ready: ready.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
    }
}

/// Whether the wire pod is do-not-disrupt at `now` (seconds), as the
/// scheduler reads it: for good, or until a time.
fn protected_at(pod: &sched::Pod, now: i64) -> bool {
    pod.do_not_disrupt
        || pod
            .do_not_disrupt_until
            .is_some_and(|until| (until.seconds, until.nanos) > (now, 0))
}

fn names(pods: &[sched::Pod]) -> Vec<&str> {
    pods.iter().map(|p| p.name.as_str()).collect()
}

#[test]
fn only_pods_kube_scheduler_gave_up_on_are_pending_in_a_live_cluster() {
    let pods = [
        pod("waiting", unschedulable()),
        pod("not-yet-tried", json!({"status": {"phase": "Pending"}})),
        pod(
            "gated",
            merge_all([
                unschedulable(),
                json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}]}}),
            ]),
        ),
        pod(
            "preempting",
            merge_all([
                unschedulable(),
                json!({"status": {"nominatedNodeName": "n1"}}),
            ]),
        ),
        pod(
            "daemon",
            merge_all([
                unschedulable(),
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]}}),
            ]),
        ),
        pod(
            "finished",
            json!({"status": {"phase": "Succeeded", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
        ),
        pod(
            "running",
            json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}),
        ),
    ];
    let nodes = [node("n1", json!({}))];
    let objects = Objects {
        pods: pods
            .iter()
            .enumerate()
            .map(|(id, object)| Source { id, object })
            .collect(),
        nodes: vec![Source {
            id: 100,
            object: &nodes[0],
        }],
        ..Objects::default()
    };
    let live = build(&objects, Mode::Live).expect("live");
    assert_eq!(names(&live.snapshot.pending_pods), ["waiting"]);
    assert_eq!(names(&live.snapshot.nodes[0].pods), ["running"]);

    let manifests = build(&objects, Mode::Manifests).expect("manifests");
    assert_eq!(
        names(&manifests.snapshot.pending_pods),
        ["waiting", "not-yet-tried", "gated", "preempting"],
        "in manifests every unbound, unfinished pod but a DaemonSet's is pending"
    );
    assert!(
        manifests
            .warnings
            .iter()
            .any(|w| w.id == 4 && w.message.contains("DaemonSet")),
        "{:?}",
        manifests.warnings
    );
}

fn merge_all<const N: usize>(values: [Value; N]) -> Value {
    let mut out = json!({});
    for v in values {
        merge(&mut out, v);
    }
    out
}

#[test]
fn workloads_expand_only_from_manifests() {
    let deployment: Deployment = object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "app", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "a"}},
                 "template": {"metadata": {"labels": {"app": "a"}},
                              "spec": {"containers": [{"name": "c"}]}}}
    }));
    let objects = Objects {
        deployments: vec![Source {
            id: 0,
            object: &deployment,
        }],
        ..Objects::default()
    };
    let manifests = build(&objects, Mode::Manifests).expect("manifests");
    assert_eq!(
        names(&manifests.snapshot.pending_pods),
        ["app-0", "app-1", "app-2"]
    );
    let live = build(&objects, Mode::Live).expect("live");
    assert!(
        live.snapshot.pending_pods.is_empty(),
        "its pods are in the cluster"
    );
}

#[test]
fn a_live_node_is_initialized_only_when_karpenter_says_so() {
    let plain = node("plain", json!({"karpenter.sh/nodepool": "default"}));
    let labelled = node(
        "labelled",
        json!({"karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true"}),
    );
    let by_claim = node("by-claim", json!({"karpenter.sh/nodepool": "default"}));
    let claim: NodeClaim = object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "by-claim", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                 "requirements": []},
        "status": {"nodeName": "by-claim", "providerID": "kwok://by-claim",
                   "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }));
    let nodes = [plain, labelled, by_claim];
    let objects = Objects {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(id, object)| Source { id, object })
            .collect(),
        node_claims: vec![Source {
            id: 10,
            object: &claim,
        }],
        ..Objects::default()
    };
    let initialized = |mode| -> Vec<(String, bool)> {
        build(&objects, mode)
            .expect("built")
            .snapshot
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.initialized))
            .collect()
    };
    assert_eq!(
        initialized(Mode::Live),
        [
            ("plain".to_owned(), false),
            ("labelled".to_owned(), true),
            ("by-claim".to_owned(), true),
        ]
    );
    assert_eq!(
        initialized(Mode::Manifests)[0],
        ("plain".to_owned(), true),
        "a registered node from a manifest counts as initialized"
    );
}

/// A pool with the `Ready` condition its controller wrote.
fn judged(class: &str, ready: bool) -> NodePool {
    let mut pool = pool(class);
    pool.status = Some(object(json!({"conditions": [{
        "type": "Ready", "status": if ready { "True" } else { "False" },
        "reason": if ready { "Ready" } else { "NodeClassNotFound" }, "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z"
    }]})));
    pool
}

#[test]
fn pools_take_pods_as_their_controller_says_live_and_as_their_classes_say_in_manifests() {
    let ready = judged("ready", true);
    let unjudged = pool("ready");
    let missing = pool("missing");
    let not_ready = judged("broken", false);
    // Upstream "should ignore NodePools that are deleting" and "should not
    // create NodeClaims for StaticNodePool".
    let mut deleting = judged("ready", true);
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    deleting.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let mut static_pool = judged("ready", true);
    static_pool.spec.replicas = Some(3);
    let ready_class = || kwok_classes(&[("ready", true)]);
    let ec2 = NodeClasses {
        kind: "EC2NodeClass".into(),
        ..kwok_classes(&[])
    };
    for (pool, classes, mode, want) in [
        (&deleting, ready_class(), Mode::Live, false),
        (&deleting, ready_class(), Mode::Manifests, false),
        (&static_pool, ready_class(), Mode::Live, false),
        (&static_pool, ready_class(), Mode::Manifests, false),
        (&ready, ready_class(), Mode::Live, true),
        (&unjudged, ready_class(), Mode::Live, false),
        (&unjudged, ready_class(), Mode::Manifests, true),
        (&missing, kwok_classes(&[]), Mode::Live, false),
        (&missing, kwok_classes(&[]), Mode::Manifests, true),
        (
            &not_ready,
            kwok_classes(&[("broken", false)]),
            Mode::Live,
            false,
        ),
        (
            &not_ready,
            kwok_classes(&[("broken", true)]),
            Mode::Manifests,
            false,
        ),
        (
            &pool("broken"),
            kwok_classes(&[("broken", false)]),
            Mode::Manifests,
            false,
        ),
        (&ready, ec2.clone(), Mode::Live, false),
        (&unjudged, ec2, Mode::Manifests, true),
    ] {
        let objects = Objects {
            node_pools: vec![Source {
                id: 0,
                object: pool,
            }],
            node_classes: classes.clone(),
            ..Objects::default()
        };
        let built = build(&objects, mode).expect("built");
        assert_eq!(
            built.snapshot.node_pools[0].ready, want,
            "{:?} in {mode:?} with {classes:?}",
            pool.spec.template.spec.node_class_ref.name
        );
    }
}

#[test]
fn a_bad_object_is_skipped_in_a_live_cluster_and_the_error_in_manifests() {
    let good = pod("good", unschedulable());
    let bad = pod(
        "bad",
        merge_all([
            unschedulable(),
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}),
        ]),
    );
    let objects = Objects {
        pods: vec![
            Source {
                id: 0,
                object: &bad,
            },
            Source {
                id: 1,
                object: &good,
            },
        ],
        ..Objects::default()
    };
    let live = build(&objects, Mode::Live).expect("live never fails");
    assert_eq!(names(&live.snapshot.pending_pods), ["good"]);
    assert_eq!(live.skipped.len(), 1);
    let skipped = &live.skipped[0];
    assert_eq!(
        (skipped.id, skipped.kind, skipped.name.as_str()),
        (0, "Pod", "bad")
    );
    assert_eq!(skipped.field, "spec.containers[0].resources.requests.cpu");

    let error = build(&objects, Mode::Manifests).expect_err("manifests stop");
    assert_eq!(error.field, "spec.containers[0].resources.requests.cpu");
}

#[test]
fn a_do_not_disrupt_duration_protects_until_it_has_passed() {
    let started = |annotation: &str| {
        pod(
            "p",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": annotation}},
                   "spec": {"nodeName": "n1"},
                   "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}}),
        )
    };
    let n1 = node("n1", json!({}));
    let start = 1_767_225_600; // 2026-01-01T00:00:00Z
    for (annotation, minutes_later, protected) in [
        ("true", 600, true),
        ("30m", 10, true),
        ("30m", 31, false),
        ("soon", 1, false),
        ("0s", 1, false),
    ] {
        let p = started(annotation);
        let objects = Objects {
            pods: vec![Source { id: 0, object: &p }],
            nodes: vec![Source { id: 1, object: &n1 }],
            now: Some(prost_types::Timestamp {
                seconds: start + minutes_later * 60,
                nanos: 0,
            }),
            ..Objects::default()
        };
        let built = build(&objects, Mode::Live).expect("built");
        assert_eq!(
            protected_at(&built.snapshot.nodes[0].pods[0], start + minutes_later * 60),
            protected,
            "{annotation} after {minutes_later} minutes"
        );
    }
}

/// Upstream "In-Flight Nodes › Taints": a node still starting is planned
/// onto as it will be, without the known ephemeral taints and its claim's
/// startup taints; an initialized node keeps every taint.
#[test]
fn a_starting_node_is_planned_without_ephemeral_and_startup_taints() {
    let taints = json!([
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule"},
        {"key": "readiness.k8s.io/network", "effect": "NoSchedule"},
        {"key": "example.com/agent-starting", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "value": "db", "effect": "NoSchedule"}
    ]);
    let with_taints = |name: &str| -> Node {
        let mut node = node(name, json!({"karpenter.sh/nodepool": "default"}));
        node.spec.get_or_insert_with(Default::default).taints =
            Some(serde_json::from_value(taints.clone()).expect("taints"));
        node
    };
    let claim = |name: &str, initialized: bool| -> NodeClaim {
        let conditions = if initialized {
            json!([{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        } else {
            json!([{"type": "Initialized", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        };
        object(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                     "requirements": [],
                     "taints": [{"key": "example.com/dedicated", "value": "db", "effect": "NoSchedule"}],
                     "startupTaints": [{"key": "example.com/agent-starting", "effect": "NoSchedule"}]},
            "status": {"nodeName": name, "providerID": format!("kwok://{name}"), "conditions": conditions}
        }))
    };
    let nodes = [with_taints("starting"), with_taints("ready")];
    let claims = [claim("starting", false), claim("ready", true)];
    let objects = Objects {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(id, object)| Source { id, object })
            .collect(),
        node_claims: claims
            .iter()
            .enumerate()
            .map(|(i, object)| Source { id: 10 + i, object })
            .collect(),
        ..Objects::default()
    };
    let built = build(&objects, Mode::Live).expect("built");
    let keys = |name: &str| -> Vec<String> {
        built
            .snapshot
            .nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.taints.iter().map(|t| t.key.clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(keys("starting"), ["example.com/dedicated"]);
    // An initialized node keeps them all; karpenter.sh/unregistered is
    // read as the node not being registered yet, not as a taint.
    assert_eq!(keys("ready").len(), 7, "{:?}", keys("ready"));
}

/// Upstream's "can replace nodes, considers PDB policy" marks pods
/// unhealthy with `Ready=False`: that is what lets an AlwaysAllow PDB let
/// them go, so the snapshot says so of exactly those pods.
#[test]
fn a_pod_whose_ready_condition_is_false_is_not_ready() {
    let with_ready = |name: &str, ready: Option<&str>| {
        let conditions = match ready {
            Some(status) => json!([{"type": "Ready", "status": status}]),
            None => json!([]),
        };
        pod(
            name,
            json!({"spec": {"nodeName": "n1"},
                   "status": {"phase": "Running", "conditions": conditions}}),
        )
    };
    let pods = [
        with_ready("unhealthy", Some("False")),
        with_ready("healthy", Some("True")),
        with_ready("unknown", None),
    ];
    let n1 = node("n1", json!({}));
    let objects = Objects {
        pods: pods
            .iter()
            .enumerate()
            .map(|(id, object)| Source { id, object })
            .collect(),
        nodes: vec![Source { id: 9, object: &n1 }],
        ..Objects::default()
    };
    for mode in [Mode::Live, Mode::Manifests] {
        let built = build(&objects, mode).expect("built");
        let not_ready: Vec<&str> = built.snapshot.nodes[0]
            .pods
            .iter()
            .filter(|p| p.not_ready)
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(not_ready, ["unhealthy"], "{mode:?}");
    }
}

/// Upstream "should handle resource zeroing of extended resources by
/// kubelet": until a node is initialized, what its kubelet reports as zero
/// or not at all comes from its claim; once initialized, the node's word
/// stands.
#[test]
fn a_starting_node_takes_resources_its_kubelet_has_not_reported_from_its_claim() {
    let reporting = |name: &str| -> Node {
        let mut node = node(name, json!({"karpenter.sh/nodepool": "default"}));
        node.status.get_or_insert_with(Default::default).allocatable = Some(object(
            json!({"cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "0"}),
        ));
        node
    };
    let claim = |name: &str, initialized: &str| -> NodeClaim {
        object(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                     "requirements": []},
            "status": {"nodeName": name, "providerID": format!("kwok://{name}"),
                       "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110", "nvidia.com/gpu": "1", "example.com/fpga": "2"},
                       "conditions": [{"type": "Initialized", "status": initialized, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
    };
    let nodes = [reporting("starting"), reporting("ready")];
    let claims = [claim("starting", "Unknown"), claim("ready", "True")];
    let objects = Objects {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(id, object)| Source { id, object })
            .collect(),
        node_claims: claims
            .iter()
            .enumerate()
            .map(|(i, object)| Source { id: 10 + i, object })
            .collect(),
        ..Objects::default()
    };
    let built = build(&objects, Mode::Live).expect("built");
    let allocatable = |name: &str, resource: &str| -> i64 {
        built
            .snapshot
            .nodes
            .iter()
            .find(|n| n.name == name)
            .and_then(|n| n.allocatable.as_ref())
            .and_then(|a| a.quantities.get(resource).copied())
            .unwrap_or(0)
    };
    assert_eq!(
        allocatable("starting", "nvidia.com/gpu"),
        1,
        "zeroed by the kubelet"
    );
    assert_eq!(
        allocatable("starting", "example.com/fpga"),
        2,
        "not reported yet"
    );
    assert_eq!(
        allocatable("starting", "cpu"),
        4000,
        "what the node reports wins"
    );
    assert_eq!(allocatable("ready", "nvidia.com/gpu"), 0);
    assert_eq!(allocatable("ready", "example.com/fpga"), 0);
}

/// Upstream "should ignore expired NodeClaims that are not managed by this
/// Karpenter instance": a claim of a node class kind another provider
/// serves is left out of a live snapshot and its Node is planned as an
/// unmanaged node, never a disruption candidate.
#[test]
fn another_providers_claims_are_not_managed_here() {
    let theirs_node = node("theirs", json!({"karpenter.sh/nodepool": "other"}));
    let theirs: NodeClaim = object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "theirs", "labels": {"karpenter.sh/nodepool": "other"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [], "expireAfter": "1s"},
        "status": {"nodeName": "theirs", "providerID": "kwok://theirs",
                   "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }));
    let nodes = [theirs_node];
    let objects = Objects {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(id, object)| Source { id, object })
            .collect(),
        node_claims: vec![Source {
            id: 10,
            object: &theirs,
        }],
        node_classes: kwok_classes(&[("default", true)]),
        ..Objects::default()
    };
    let live = build(&objects, Mode::Live).expect("built");
    assert_eq!(live.snapshot.nodes.len(), 1, "the node is still capacity");
    let node = &live.snapshot.nodes[0];
    assert_eq!(node.node_pool, "", "unmanaged");
    assert_eq!(node.node_claim_name, "");
    let manifests = build(&objects, Mode::Manifests).expect("built");
    assert_eq!(
        manifests.snapshot.nodes[0].node_pool, "other",
        "manifests are taken as given"
    );
}

/// The adapter reads each pod once and builds many snapshots from it: what
/// other objects and the clock decide (the PriorityClass's value, the
/// volume's zone, the do-not-disrupt duration) follows them at each build,
/// as if the pod were read again.
#[test]
fn a_pod_read_once_is_finished_by_each_build() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use k8s_openapi::api::storage::v1::StorageClass;
    use karpenter_snapshot::prepare_object;

    let p = pod(
        "p",
        merge_all([
            unschedulable(),
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "30m"}},
                   "spec": {"priorityClassName": "batch",
                            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
                   "status": {"startTime": "2026-01-01T00:00:00Z"}}),
        ]),
    );
    let prepared = prepare_object(&Source { id: 0, object: &p }, Mode::Live);
    let class = |value: i32| -> PriorityClass {
        object(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": "batch"}, "value": value}),
        )
    };
    let claim: PersistentVolumeClaim = object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"storageClassName": "zonal"}}));
    let storage: StorageClass = object(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["zone-a"]}]}]}));
    let start = 1_767_225_600; // 2026-01-01T00:00:00Z
    for (value, minutes_later, with_storage) in [(10, 5, false), (1000, 45, true)] {
        let class = class(value);
        let storage_classes = if with_storage {
            vec![Source {
                id: 3,
                object: &storage,
            }]
        } else {
            Vec::new()
        };
        let now = prost_types::Timestamp {
            seconds: start + minutes_later * 60,
            nanos: 0,
        };
        let mut objects = Objects {
            pods: vec![Source { id: 0, object: &p }],
            priority_classes: vec![Source {
                id: 1,
                object: &class,
            }],
            persistent_volume_claims: vec![Source {
                id: 2,
                object: &claim,
            }],
            storage_classes,
            now: Some(now),
            ..Objects::default()
        };
        let read_again = build(&objects, Mode::Live).expect("built");
        objects.pods = Vec::new();
        objects.prepared_pods = vec![Source {
            id: 0,
            object: &prepared,
        }];
        let read_once = build(&objects, Mode::Live).expect("built");
        let pod = &read_once.snapshot.pending_pods[0];
        assert_eq!(pod.priority, value);
        assert_eq!(protected_at(pod, now.seconds), minutes_later < 30);
        assert_eq!(
            pod.volumes[0].driver,
            if with_storage { "ebs.csi.aws.com" } else { "" }
        );
        assert_eq!(read_once.snapshot, read_again.snapshot);
    }
}

/// A pod that cannot be read once is skipped by every build that gets it,
/// with the same error as reading it there.
#[test]
fn a_pod_read_once_with_an_error_is_skipped_in_every_build() {
    let p = pod(
        "bad",
        merge_all([
            unschedulable(),
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}),
        ]),
    );
    let prepared = karpenter_snapshot::prepare_object(&Source { id: 7, object: &p }, Mode::Live);
    let built = build(
        &Objects {
            prepared_pods: vec![Source {
                id: 3,
                object: &prepared,
            }],
            ..Objects::default()
        },
        Mode::Live,
    )
    .expect("live builds skip");
    assert!(built.snapshot.pending_pods.is_empty());
    assert_eq!(built.skipped.len(), 1);
    assert_eq!(built.skipped[0].id, 3, "the id of this build's source");
    assert_eq!(built.skipped[0].name, "bad");
    assert!(
        built.skipped[0].field.contains("requests.cpu"),
        "{}",
        built.skipped[0]
    );
}

/// Karpenter takes a DaemonSet's overhead from its newest pod (admission may
/// have changed the requests: LimitRanges, VPA) with the template's required
/// node affinity put back in place of the per-node one the DaemonSet
/// controller wrote; without a pod, from the template. A pending pod of a
/// DaemonSet is never provisioned for.
#[test]
fn a_daemonset_counts_as_its_newest_pod_with_the_templates_node_affinity() {
    use k8s_openapi::api::apps::v1::DaemonSet;

    let ds: DaemonSet = object(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "default", "uid": "uid-agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                                           "nodeSelectorTerms": [{"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]}}},
                                       "containers": [{"name": "c", "resources": {"requests": {"cpu": "4", "memory": "4Gi"}}}]}}}
    }));
    let daemon_pod = |name: &str, cpu: &str, created: &str, node: &str| {
        pod(
            name,
            json!({
                "metadata": {"creationTimestamp": created,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                                  "uid": "uid-agent", "controller": true}]},
                "spec": {"nodeName": node,
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
                "status": {"phase": "Running"}
            }),
        )
    };
    let older = daemon_pod("agent-old", "3", "2026-01-01T00:00:00Z", "n1");
    let newer = daemon_pod("agent-new", "2", "2026-01-02T00:00:00Z", "n2");
    let mut pending = daemon_pod("agent-pending", "1", "2026-01-03T00:00:00Z", "");
    if let Some(spec) = pending.spec.as_mut() {
        spec.node_name = None;
    }
    let (n1, n2) = (node("n1", json!({})), node("n2", json!({})));
    let template_cpu = |objects: &Objects<'_>, mode: Mode| {
        let built = build(objects, mode).expect("built");
        assert!(
            built.snapshot.pending_pods.is_empty(),
            "a DaemonSet's pod is not provisioned for"
        );
        let template = built.snapshot.daemon_sets[0]
            .template
            .clone()
            .expect("template");
        let cpu = template.containers[0]
            .requests
            .as_ref()
            .expect("requests")
            .quantities["cpu"];
        (cpu, template.required_node_affinity)
    };
    for mode in [Mode::Manifests, Mode::Live] {
        let mut objects = Objects {
            daemon_sets: vec![Source { id: 0, object: &ds }],
            nodes: vec![Source { id: 1, object: &n1 }, Source { id: 2, object: &n2 }],
            ..Objects::default()
        };
        let (cpu, affinity) = template_cpu(&objects, mode);
        assert_eq!(cpu, 4000, "no pod yet: the template's requests");
        objects.pods = vec![
            Source {
                id: 3,
                object: &newer,
            },
            Source {
                id: 4,
                object: &older,
            },
        ];
        let (cpu, with_pods) = template_cpu(&objects, mode);
        assert_eq!(cpu, 2000, "the newest pod's requests");
        assert_eq!(
            with_pods, affinity,
            "the template's node affinity, not the pod's"
        );
        assert_eq!(with_pods[0].match_expressions[0].key, "foo");
        assert!(with_pods[0].match_fields.is_empty());
        // Upstream's "should account for overhead using daemonset pod spec
        // instead of daemonset spec": the newest pod the DaemonSet controls
        // counts whether or not it is bound yet.
        objects.pods.push(Source {
            id: 5,
            object: &pending,
        });
        let (cpu, _) = template_cpu(&objects, mode);
        assert_eq!(cpu, 1000, "the newest pod, still unbound, in {mode:?} mode");
        objects.pods = vec![Source {
            id: 5,
            object: &pending,
        }];
        let (cpu, _) = template_cpu(&objects, mode);
        assert_eq!(cpu, 1000, "a lone unbound pod in {mode:?} mode");
    }
}

/// Karpenter's `HasDRARequirements`: pod-level resource claims, or a claim
/// asked for by a container or an init container, mark the wire pod.
#[test]
fn a_pod_asking_for_dra_devices_is_marked() {
    let containers_with = |field: &str| json!({"spec": {field: [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]}});
    let cases = [
        ("plain", json!({}), false),
        (
            "pod-level",
            json!({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]}}),
            true,
        ),
        ("container", containers_with("containers"), true),
        (
            "init",
            merge_all([
                containers_with("initContainers"),
                json!({"spec": {"containers": [{"name": "main"}]}}),
            ]),
            true,
        ),
    ];
    for (name, extra, expected) in cases {
        let p = pod(name, merge_all([unschedulable(), extra]));
        let built = build(
            &Objects {
                pods: vec![Source { id: 0, object: &p }],
                ..Objects::default()
            },
            Mode::Live,
        )
        .expect("built");
        assert!(built.skipped.is_empty(), "{name}: {:?}", built.skipped);
        assert_eq!(
            built.snapshot.pending_pods[0].dra_requests, expected,
            "{name}"
        );
    }
}
