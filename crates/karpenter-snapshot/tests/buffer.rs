//! CapacityBuffers resolved and turned into virtual pods: ports of
//! Karpenter's `pkg/controllers/capacitybuffer` suite (the replica table,
//! the resolution cases) and of `pkg/state/virtualpods` (the pods built).

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplate;
use karpenter_api::CapacityBuffer;
use karpenter_api::capacitybuffer as cb;
use karpenter_snapshot::buffer::{MAX_VIRTUAL_PODS, Resolution, Workloads, resolve};
use karpenter_snapshot::{Mode, Objects, Source, build};
use serde_json::{Value, json};

fn from<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("valid object")
}

fn buffer(name: &str, spec: Value) -> CapacityBuffer {
    from(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": spec
    }))
}

/// A pod spec requesting one CPU (upstream's `cpuPod`).
fn cpu_pod_spec() -> Value {
    json!({
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "emptyDir": {}}
        ]
    })
}

fn pod_template(name: &str) -> PodTemplate {
    from(json!({
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "default", "generation": 3},
        "template": {"metadata": {"labels": {"app": name}}, "spec": cpu_pod_spec()}
    }))
}

fn deployment(name: &str, replicas: Option<i32>) -> Deployment {
    let mut spec = json!({
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": cpu_pod_spec()}
    });
    if let Some(replicas) = replicas {
        spec["replicas"] = json!(replicas);
    }
    from(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec
    }))
}

fn stateful_set(name: &str, replicas: i32) -> StatefulSet {
    from(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "serviceName": name,
            "template": {"metadata": {"labels": {"app": name}}, "spec": cpu_pod_spec()}
        }
    }))
}

fn replicas_of(resolution: &Resolution<'_>) -> i32 {
    match resolution {
        Resolution::Ready(resolved) => resolved.replicas,
        Resolution::NotReady { reason, message } => panic!("not ready: {reason}: {message}"),
    }
}

fn not_ready(resolution: &Resolution<'_>) -> (&'static str, String) {
    match resolution {
        Resolution::NotReady { reason, message } => (reason, message.clone()),
        Resolution::Ready(r) => panic!("ready with {} replicas", r.replicas),
    }
}

/// Upstream's DescribeTable of `status.replicas`.
#[test]
fn replicas_follow_upstreams_table() {
    let templates: Vec<PodTemplate> = ["pt-fixed", "pt-cap", "pt-loose", "pt-limit"]
        .into_iter()
        .map(pod_template)
        .collect();
    let deployments: Vec<Deployment> = ["d-pct-only", "d-repl", "d-pct", "d-cap"]
        .into_iter()
        .map(|name| deployment(name, Some(10)))
        .chain([deployment("d-min", Some(1))])
        .collect();
    let mut workloads = Workloads::default();
    templates.iter().for_each(|t| workloads.pod_template(t));
    deployments.iter().for_each(|d| workloads.deployment(d));
    let template = |name: &str| json!({"name": name});
    let scalable = |name: &str| json!({"kind": "Deployment", "name": name});
    let cases = [
        (
            "fixed replicas only",
            json!({"podTemplateRef": template("pt-fixed"), "replicas": 7}),
            7,
        ),
        (
            "replicas capped by binding limit",
            json!({"podTemplateRef": template("pt-cap"), "replicas": 10, "limits": {"cpu": "3"}}),
            3,
        ),
        (
            "non-binding limit does not reduce (podTemplateRef)",
            json!({"podTemplateRef": template("pt-loose"), "replicas": 3, "limits": {"cpu": "10"}}),
            3,
        ),
        (
            "limits only",
            json!({"podTemplateRef": template("pt-limit"), "limits": {"cpu": "5"}}),
            5,
        ),
        (
            "percentage only",
            json!({"scalableRef": scalable("d-pct-only"), "percentage": 20}),
            2,
        ),
        (
            "replicas > percentage",
            json!({"scalableRef": scalable("d-repl"), "replicas": 5, "percentage": 20}),
            5,
        ),
        (
            "percentage > replicas",
            json!({"scalableRef": scalable("d-pct"), "replicas": 5, "percentage": 80}),
            8,
        ),
        (
            "max of replicas and percentage capped by limit",
            json!({"scalableRef": scalable("d-cap"), "replicas": 5, "percentage": 80, "limits": {"cpu": "4"}}),
            4,
        ),
        (
            "percentage rounds up to a minimum of 1",
            json!({"scalableRef": scalable("d-min"), "percentage": 10}),
            1,
        ),
    ];
    for (name, spec, expected) in cases {
        let object = buffer("b", spec);
        assert_eq!(
            replicas_of(&resolve(&object, &workloads)),
            expected,
            "{name}"
        );
    }
}

#[test]
fn a_pod_template_resolves_with_its_name_and_generation() {
    let template = pod_template("test-template");
    let mut workloads = Workloads::default();
    workloads.pod_template(&template);
    let object = buffer(
        "b",
        json!({"podTemplateRef": {"name": "test-template"}, "replicas": 5}),
    );
    let Resolution::Ready(resolved) = resolve(&object, &workloads) else {
        panic!("not resolved");
    };
    assert_eq!(resolved.replicas, 5);
    assert_eq!(resolved.pod_template, Some(("test-template".to_owned(), 3)));
    assert_eq!(
        object.provisioning_strategy(),
        cb::ACTIVE_PROVISIONING_STRATEGY
    );
}

#[test]
fn missing_references_and_unsupported_kinds_are_not_ready() {
    let workloads = Workloads::default();
    let missing_template = buffer(
        "b",
        json!({"podTemplateRef": {"name": "nope"}, "replicas": 3}),
    );
    assert_eq!(
        not_ready(&resolve(&missing_template, &workloads)),
        (
            cb::REASON_POD_TEMPLATE_NOT_FOUND,
            "podtemplates \"nope\" not found".to_owned()
        )
    );
    let missing_workload = buffer(
        "b",
        json!({"scalableRef": {"kind": "Deployment", "name": "nope"}, "replicas": 3}),
    );
    assert_eq!(
        not_ready(&resolve(&missing_workload, &workloads)),
        (
            cb::REASON_SCALABLE_REF_NOT_FOUND,
            "deployments.apps \"nope\" not found".to_owned()
        )
    );
    let kind = buffer(
        "b",
        json!({"scalableRef": {"kind": "DaemonSet", "name": "x"}, "percentage": 20}),
    );
    assert_eq!(
        not_ready(&resolve(&kind, &workloads)).0,
        cb::REASON_RESOLUTION_FAILED
    );
    let group = buffer(
        "b",
        json!({"scalableRef": {"apiGroup": "batch", "kind": "Job", "name": "x"}, "percentage": 20}),
    );
    assert_eq!(
        not_ready(&resolve(&group, &workloads)),
        (
            cb::REASON_RESOLUTION_FAILED,
            "unsupported scalableRef API group \"batch\"".to_owned()
        )
    );
    let neither = buffer("b", json!({"replicas": 1}));
    assert_eq!(
        not_ready(&resolve(&neither, &workloads)).0,
        cb::REASON_RESOLUTION_FAILED
    );
}

#[test]
fn a_stateful_set_and_a_workload_without_replicas_resolve() {
    let set = stateful_set("s", 5);
    let unset = deployment("nil-replicas", None);
    let mut workloads = Workloads::default();
    workloads.stateful_set(&set);
    workloads.deployment(&unset);
    // 20% of 5 = 1.
    let object = buffer(
        "b",
        json!({"scalableRef": {"kind": "StatefulSet", "name": "s"}, "percentage": 20}),
    );
    assert_eq!(replicas_of(&resolve(&object, &workloads)), 1);
    // "should default to 1 replica when workload has nil Spec.Replicas".
    let object = buffer(
        "b",
        json!({"scalableRef": {"kind": "Deployment", "name": "nil-replicas"}, "percentage": 100}),
    );
    assert_eq!(replicas_of(&resolve(&object, &workloads)), 1);
}

/// The virtual pods a build adds: named `capacity-buffer-<name>-<i>`, the
/// template's labels, the lowest priority, no claimed volumes, pending;
/// none while the gate's caller leaves buffers out.
#[test]
fn a_ready_buffer_adds_its_virtual_pods_as_pending_pods() {
    let template = pod_template("headroom");
    let object = buffer(
        "headroom",
        json!({"podTemplateRef": {"name": "headroom"}, "replicas": 2}),
    );
    let objects = Objects {
        capacity_buffers: vec![Source {
            id: 0,
            object: &object,
        }],
        pod_templates: vec![Source {
            id: 1,
            object: &template,
        }],
        ..Objects::default()
    };
    let built = build(&objects, Mode::Live).expect("builds");
    let pending = &built.snapshot.pending_pods;
    let names: Vec<&str> = pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["capacity-buffer-headroom-1", "capacity-buffer-headroom-2"]
    );
    for pod in pending {
        assert_eq!(pod.namespace, "default");
        assert_eq!(pod.capacity_buffer, "default/headroom");
        assert_eq!(pod.priority, i32::MIN);
        assert_eq!(pod.labels.get("app").map(String::as_str), Some("headroom"));
        assert!(
            pod.volumes.is_empty(),
            "claimed volumes are dropped: {:?}",
            pod.volumes
        );
    }
    assert_eq!(pending[0].uid, "uid-headroom-1");
    assert_eq!(built.origins.pending_pods, [0, 0]);

    let without = Objects {
        pod_templates: vec![Source {
            id: 1,
            object: &template,
        }],
        ..Objects::default()
    };
    assert!(
        build(&without, Mode::Live)
            .expect("builds")
            .snapshot
            .pending_pods
            .is_empty()
    );
}

/// A buffer sized by a huge limit over a small request, and the buffers
/// after it, are planned with at most `MAX_VIRTUAL_PODS` pods in all, and
/// say so in manifest mode.
#[test]
fn huge_buffers_are_planned_with_a_bounded_number_of_pods() {
    let template = pod_template("tiny");
    let huge = buffer(
        "huge",
        json!({"podTemplateRef": {"name": "tiny"}, "limits": {"cpu": "2000000"}}),
    );
    let second = buffer(
        "second",
        json!({"podTemplateRef": {"name": "tiny"}, "replicas": 5}),
    );
    let objects = Objects {
        capacity_buffers: vec![
            Source {
                id: 0,
                object: &huge,
            },
            Source {
                id: 2,
                object: &second,
            },
        ],
        pod_templates: vec![Source {
            id: 1,
            object: &template,
        }],
        ..Objects::default()
    };
    let built = build(&objects, Mode::Manifests).expect("builds");
    assert_eq!(built.snapshot.pending_pods.len(), MAX_VIRTUAL_PODS as usize);
    let warned = |id: usize, text: &str| {
        built
            .warnings
            .iter()
            .any(|w| w.id == id && w.message.contains(text))
    };
    assert!(
        warned(0, "2000000 replicas: planned with 10000"),
        "{:?}",
        built.warnings
    );
    assert!(
        warned(2, "5 replicas: planned with 0"),
        "{:?}",
        built.warnings
    );
}
