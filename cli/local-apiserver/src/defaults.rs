//! What kube-apiserver does to a built-in object before it stores it, on
//! every create and update: quantities in canonical string form (`cpu: 1`
//! is stored as `"1"`, `1000m` as `"1"`) and the defaults of the API types
//! (a pod's `dnsPolicy`, a container's `terminationMessagePath`, a
//! Deployment's strategy, ...), so every client reads back what it would
//! read from a real cluster.
//!
//! ```text
//!   pods ─────────────── pod spec defaults + admission (priority, default tolerations)
//!   deployments, replicasets, statefulsets, daemonsets, jobs ── own defaults
//!        └─ spec.template.spec ── pod spec defaults
//!   every resource list ── canonical quantities
//! ```

use serde_json::{Value, json};

use super::store::ApiError;

/// Applies the defaults and canonical forms of a built-in `group/plural`.
/// A quantity that does not parse is refused, naming its field.
pub fn apply(group: &str, plural: &str, obj: &mut Value) -> Result<(), ApiError> {
    match (group, plural) {
        ("", "pods") => {
            pod_spec(&mut obj["spec"], "spec")?;
            requests_from_limits(&mut obj["spec"]);
            pod_admission(&mut obj["spec"]);
        }
        ("", "nodes") => {
            for field in ["capacity", "allocatable"] {
                quantities(&mut obj["status"][field], &format!("status.{field}"))?;
            }
        }
        ("", "persistentvolumeclaims") => {
            quantities(
                &mut obj["spec"]["resources"]["requests"],
                "spec.resources.requests",
            )?;
            quantities(&mut obj["status"]["capacity"], "status.capacity")?;
        }
        ("", "persistentvolumes") => quantities(&mut obj["spec"]["capacity"], "spec.capacity")?,
        ("", "services") => service(obj),
        ("apps", "deployments") => {
            default(&mut obj["spec"], "replicas", json!(1));
            default(&mut obj["spec"], "revisionHistoryLimit", json!(10));
            default(&mut obj["spec"], "progressDeadlineSeconds", json!(600));
            let strategy = &mut obj["spec"]["strategy"];
            default(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                default(
                    &mut strategy["rollingUpdate"],
                    "maxUnavailable",
                    json!("25%"),
                );
                default(&mut strategy["rollingUpdate"], "maxSurge", json!("25%"));
            }
            template(obj)?;
        }
        ("apps", "replicasets") => {
            default(&mut obj["spec"], "replicas", json!(1));
            template(obj)?;
        }
        ("apps", "statefulsets") => {
            default(&mut obj["spec"], "replicas", json!(1));
            default(&mut obj["spec"], "revisionHistoryLimit", json!(10));
            default(
                &mut obj["spec"],
                "podManagementPolicy",
                json!("OrderedReady"),
            );
            let strategy = &mut obj["spec"]["updateStrategy"];
            default(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                default(&mut strategy["rollingUpdate"], "partition", json!(0));
            }
            let retention = &mut obj["spec"]["persistentVolumeClaimRetentionPolicy"];
            default(retention, "whenDeleted", json!("Retain"));
            default(retention, "whenScaled", json!("Retain"));
            template(obj)?;
        }
        ("apps", "daemonsets") => {
            default(&mut obj["spec"], "revisionHistoryLimit", json!(10));
            let strategy = &mut obj["spec"]["updateStrategy"];
            default(strategy, "type", json!("RollingUpdate"));
            if strategy["type"] == "RollingUpdate" {
                default(&mut strategy["rollingUpdate"], "maxUnavailable", json!(1));
                default(&mut strategy["rollingUpdate"], "maxSurge", json!(0));
            }
            template(obj)?;
        }
        ("batch", "jobs") => {
            let spec = &mut obj["spec"];
            default(spec, "parallelism", json!(1));
            let indexed = spec["completionMode"] == "Indexed";
            if spec["completions"].is_null() && indexed {
                spec["completions"] = spec["parallelism"].clone();
            } else if spec["completions"].is_null() && spec["parallelism"] != json!(0) {
                spec["completions"] = json!(1);
            }
            default(spec, "backoffLimit", json!(6));
            default(spec, "completionMode", json!("NonIndexed"));
            default(spec, "suspend", json!(false));
            default(spec, "manualSelector", json!(false));
            default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
            template(obj)?;
        }
        _ => {}
    }
    Ok(())
}

/// Sets `obj[key]` unless it is there; a `null` object becomes one.
fn default(obj: &mut Value, key: &str, value: Value) {
    if !obj.is_object() {
        *obj = json!({});
    }
    if obj[key].is_null() {
        obj[key] = value;
    }
}

fn template(obj: &mut Value) -> Result<(), ApiError> {
    if obj["spec"]["template"].is_object() {
        pod_spec(&mut obj["spec"]["template"]["spec"], "spec.template.spec")?;
    }
    Ok(())
}

/// `SetDefaults_PodSpec` and its containers, for pods and pod templates.
fn pod_spec(spec: &mut Value, path: &str) -> Result<(), ApiError> {
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "securityContext", json!({}));
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        let Some(containers) = spec[list].as_array_mut() else {
            continue;
        };
        for (i, c) in containers.iter_mut().enumerate() {
            container(c, &format!("{path}.{list}[{i}]"))?;
        }
    }
    quantities(&mut spec["overhead"], &format!("{path}.overhead"))?;
    resources(spec, path)
}

/// `resources.requests` and `resources.limits` of a pod spec or a
/// container (at `path`), as quantities are stored.
fn resources(owner: &mut Value, path: &str) -> Result<(), ApiError> {
    for field in ["requests", "limits"] {
        quantities(
            &mut owner["resources"][field],
            &format!("{path}.resources.{field}"),
        )?;
    }
    Ok(())
}

fn container(c: &mut Value, path: &str) -> Result<(), ApiError> {
    default(c, "terminationMessagePath", json!("/dev/termination-log"));
    default(c, "terminationMessagePolicy", json!("File"));
    let image = c["image"].as_str().unwrap_or_default();
    // A tag of `latest`, or none, is pulled every time.
    let tag = image
        .rsplit_once('@')
        .map(|_| "digest")
        .or_else(|| {
            image
                .rsplit_once(':')
                .filter(|(_, t)| !t.contains('/'))
                .map(|(_, t)| t)
        })
        .unwrap_or("latest");
    let pull = if tag == "latest" {
        "Always"
    } else {
        "IfNotPresent"
    };
    default(c, "imagePullPolicy", json!(pull));
    default(c, "resources", json!({}));
    if let Some(ports) = c["ports"].as_array_mut() {
        for port in ports {
            default(port, "protocol", json!("TCP"));
        }
    }
    resources(c, path)
}

/// `SetDefaults_Pod`: a container's limit without a request requests the
/// limit (pods only, not templates).
fn requests_from_limits(spec: &mut Value) {
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec[list].as_array_mut() else {
            continue;
        };
        for c in containers {
            let Some(limits) = c["resources"]["limits"].as_object().cloned() else {
                continue;
            };
            for (name, limit) in limits {
                if c["resources"]["requests"][&name].is_null() {
                    default(&mut c["resources"], "requests", json!({}));
                    c["resources"]["requests"][&name] = limit;
                }
            }
        }
    }
}

/// What a pod alone gets: service links, and from admission its priority,
/// its service account and the not-ready / unreachable tolerations of
/// five minutes.
fn pod_admission(spec: &mut Value) {
    default(spec, "priority", json!(0));
    if spec["priorityClassName"].is_null() {
        default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
    default(spec, "enableServiceLinks", json!(true));
    default(spec, "serviceAccountName", json!("default"));
    let account = spec["serviceAccountName"].clone();
    default(spec, "serviceAccount", account);
    let tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    let mut added = tolerations.clone();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = tolerations.iter().any(|t| {
            (t["key"] == key || (t["key"].is_null() && t["operator"] == "Exists"))
                && (t["effect"].is_null() || t["effect"] == "NoExecute")
        });
        if !tolerated {
            added.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    spec["tolerations"] = Value::Array(added);
}

/// A service's cluster IP: stable for its namespace and name, in
/// kube-apiserver's default service range (10.96.0.0/12), so that updates
/// keep it and clients waiting for one (`helm install --wait`) see it.
fn cluster_ip(namespace: &str, name: &str) -> String {
    let mut hash: u32 = 2_166_136_261;
    for byte in namespace.bytes().chain([b'/']).chain(name.bytes()) {
        hash = (hash ^ u32::from(byte)).wrapping_mul(16_777_619);
    }
    // 10.96.0.0/12 less the network, the API server's .1 and broadcast.
    let offset = 2 + hash % ((1 << 20) - 3);
    let ip = (10u32 << 24) | (96 << 16) | offset;
    format!(
        "{}.{}.{}.{}",
        ip >> 24,
        (ip >> 16) & 0xff,
        (ip >> 8) & 0xff,
        ip & 0xff
    )
}

fn service(obj: &mut Value) {
    let namespace = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let spec = &mut obj["spec"];
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    if spec["type"] != json!("ExternalName") {
        default(spec, "clusterIP", json!(cluster_ip(&namespace, &name)));
        let ip = spec["clusterIP"].clone();
        default(spec, "clusterIPs", json!([ip]));
        default(spec, "ipFamilies", json!(["IPv4"]));
        default(spec, "ipFamilyPolicy", json!("SingleStack"));
        default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec["ports"].as_array_mut() {
        for port in ports {
            default(port, "protocol", json!("TCP"));
            if port["targetPort"].is_null() {
                port["targetPort"] = port["port"].clone();
            }
        }
    }
}

/// Every value of a resource list in canonical form; numbers become the
/// strings kube-apiserver writes for them.
fn quantities(list: &mut Value, path: &str) -> Result<(), ApiError> {
    let Some(map) = list.as_object_mut() else {
        return Ok(());
    };
    for (name, value) in map.iter_mut() {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(ApiError::bad_request(format!(
                    "{path}[{name}]: quantities must be strings or numbers, not {other}"
                )));
            }
        };
        let canonical = karpenter_core::quantity::canonical(&text).map_err(|e| {
            ApiError::bad_request(format!("{path}[{name}]: Invalid value: {text:?}: {e}"))
        })?;
        *value = json!(canonical);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_001s_deployment_is_stored_as_kube_apiserver_stores_it() {
        let mut deployment = json!({
            "metadata": {"name": "inflate"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "inflate"}},
                "template": {"metadata": {"labels": {"app": "inflate"}}, "spec": {
                    "containers": [{"name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                        "resources": {"requests": {"cpu": 1, "memory": "1.5Gi"}}}]}}}
        });
        apply("apps", "deployments", &mut deployment).unwrap();
        let spec = &deployment["spec"];
        assert_eq!(spec["replicas"], 0);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["dnsPolicy"], "ClusterFirst");
        assert_eq!(pod["securityContext"], json!({}));
        assert!(pod["priority"].is_null(), "admission runs on pods only");
        let container = &pod["containers"][0];
        assert_eq!(
            container["resources"]["requests"],
            json!({"cpu": "1", "memory": "1536Mi"})
        );
        assert_eq!(container["imagePullPolicy"], "IfNotPresent");
        assert_eq!(container["terminationMessagePath"], "/dev/termination-log");
    }

    #[test]
    fn pods_get_admission_defaults_and_limits_become_requests() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "nginx",
            "resources": {"limits": {"cpu": "500m", "memory": 1073741824}}}],
            "tolerations": [{"operator": "Exists"}]}});
        apply("", "pods", &mut pod).unwrap();
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["resources"]["limits"]["memory"], "1073741824");
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1073741824"})
        );
        assert_eq!(pod["spec"]["enableServiceLinks"], true);
        assert_eq!(pod["spec"]["priority"], 0);
        // Tolerating everything already tolerates not-ready and unreachable.
        assert_eq!(pod["spec"]["tolerations"].as_array().map(Vec::len), Some(1));
        let mut plain = json!({"spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
        apply("", "pods", &mut plain).unwrap();
        assert_eq!(
            plain["spec"]["tolerations"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(
            plain["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
    }

    #[test]
    fn a_bad_quantity_names_its_field() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "lots"}}}]}});
        let err = apply("", "pods", &mut pod).unwrap_err();
        assert!(
            err.status()["message"]
                .as_str()
                .unwrap_or_default()
                .contains("spec.containers[0].resources.requests[cpu]"),
            "{:?}",
            err.status()
        );
    }
}
