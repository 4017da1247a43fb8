//! The DaemonSet controller and the taint manager of the controller
//! stand-ins.
//!
//! ```text
//!   DaemonSet × Node it should run on ──▶ Pod pinned by node affinity
//!                                          (matchFields metadata.name), bound by the scheduler stand-in
//!   Pod on a Node with a NoExecute taint it does not tolerate ──▶ deleted
//! ```
//!
//! A daemon pod tolerates what kube-controller-manager adds to every
//! daemon pod (not-ready, unreachable, the pressure taints, unschedulable);
//! other taints only if its template does. Resources are the scheduler's
//! business, as in a real cluster.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::controllers::{node_selected, owned_by, pod_from_template, tolerates};
use super::store::{DeleteOptions, ListOptions, Store};

const CM: &str = "kube-controller-manager";

/// What kube-controller-manager adds to every daemon pod.
fn daemon_tolerations() -> Vec<Value> {
    let mut out: Vec<Value> = [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]
    .iter()
    .map(|k| json!({"key": k, "operator": "Exists", "effect": "NoExecute"}))
    .collect();
    for key in [
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
    ] {
        out.push(json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}));
    }
    out
}

/// The template's pod spec with the daemon tolerations added.
fn daemon_spec(ds: &Value) -> Value {
    let mut spec = ds["spec"]["template"]["spec"].clone();
    let mut tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for t in daemon_tolerations() {
        if !tolerations.contains(&t) {
            tolerations.push(t);
        }
    }
    spec["tolerations"] = Value::Array(tolerations);
    spec
}

/// Whether the daemon should run on `node`: its selector and required
/// affinity match, and it tolerates the node's NoSchedule and NoExecute
/// taints.
fn should_run(spec: &Value, node: &Value) -> bool {
    if node["metadata"].get("deletionTimestamp").is_some() {
        return false;
    }
    let pod = json!({"spec": spec});
    node_selected(&pod, node)
        && node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
            .all(|t| tolerates(&pod, t))
}

/// The node a daemon pod is for: its binding, else its pinning affinity.
fn target_node(pod: &Value) -> Option<String> {
    if let Some(n) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Some(n.to_owned());
    }
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()?
        .iter()
        .flat_map(|t| t["matchFields"].as_array().cloned().unwrap_or_default())
        .find(|f| f["key"] == "metadata.name")
        .and_then(|f| f["values"][0].as_str().map(str::to_owned))
}

/// One pass of the DaemonSet controller.
pub fn reconcile_daemon_sets(store: &Store, nodes: &[Value], pods: &[Value]) {
    let (Some(ds_r), Some(pods_r)) = (
        store.resource("apps", "v1", "daemonsets"),
        store.resource("", "v1", "pods"),
    ) else {
        return;
    };
    let daemon_sets = store
        .list(&ds_r, None, &ListOptions::default())
        .map(|(items, _, _)| items)
        .unwrap_or_default();
    for ds in daemon_sets {
        if ds["metadata"].get("deletionTimestamp").is_some() {
            continue;
        }
        let ns = ds["metadata"]["namespace"].as_str().unwrap_or_default();
        let uid = ds["metadata"]["uid"].as_str().unwrap_or_default();
        let spec = daemon_spec(&ds);
        let wanted: BTreeSet<String> = nodes
            .iter()
            .filter(|n| should_run(&spec, n))
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        let owned: Vec<&Value> = owned_by(pods, uid)
            .into_iter()
            .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
            .collect();
        let mut running: BTreeSet<String> = BTreeSet::new();
        for pod in &owned {
            let target = target_node(pod);
            match target {
                Some(node) if wanted.contains(&node) && !running.contains(&node) => {
                    running.insert(node);
                }
                // Its node is gone, no longer selected, or has a daemon already.
                _ => {
                    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
                    let _ = store.delete(&pods_r, ns, pod_name, &DeleteOptions::default());
                }
            }
        }
        for node in wanted.difference(&running) {
            let _ = store.create(&pods_r, ns, daemon_pod(&ds, &spec, node), CM);
        }
        update_status(store, &ds, &owned, &wanted);
    }
}

fn daemon_pod(ds: &Value, spec: &Value, node: &str) -> Value {
    let mut spec = spec.clone();
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]
    });
    pod_from_template(ds, spec)
}

fn update_status(store: &Store, ds: &Value, owned: &[&Value], wanted: &BTreeSet<String>) {
    let Some(ds_r) = store.resource("apps", "v1", "daemonsets") else {
        return;
    };
    let scheduled = owned
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| wanted.contains(n))
        })
        .count();
    let ready = owned.iter().filter(|p| super::store::is_ready(p)).count();
    let status = json!({
        "desiredNumberScheduled": wanted.len(), "currentNumberScheduled": scheduled,
        "numberMisscheduled": 0, "numberReady": ready, "numberAvailable": ready,
        "updatedNumberScheduled": scheduled, "observedGeneration": ds["metadata"]["generation"],
    });
    let differs = [
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberReady",
        "observedGeneration",
    ]
    .iter()
    .any(|k| ds["status"][k] != status[k]);
    if differs {
        let ns = ds["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = ds["metadata"]["name"].as_str().unwrap_or_default();
        let _ = store.modify(&ds_r, ns, name, Some("status"), CM, |old| {
            let mut new = old.clone();
            new["status"] = status;
            Ok(new)
        });
    }
}

/// Whether a NoExecute taint still lets the pod stay: tolerated for good,
/// or within the toleration's `tolerationSeconds` since the taint's
/// `timeAdded` (a taint without one counts as just added).
fn may_stay(pod: &Value, taint: &Value, now: chrono::DateTime<chrono::Utc>) -> bool {
    let matching: Vec<&Value> = pod["spec"]["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| tolerates(&json!({"spec": {"tolerations": [t]}}), taint))
        .collect();
    if matching.is_empty() {
        return false;
    }
    if matching.iter().any(|t| t["tolerationSeconds"].is_null()) {
        return true;
    }
    let Some(added) = taint["timeAdded"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    else {
        return true;
    };
    let longest = matching
        .iter()
        .filter_map(|t| t["tolerationSeconds"].as_i64())
        .max()
        .unwrap_or(0)
        .max(0);
    now < crate::store::seconds_after(added.with_timezone(&chrono::Utc), longest)
}

/// The taint manager: pods bound to a node with a NoExecute taint they do
/// not tolerate are deleted.
pub fn evict_for_no_execute(store: &Store, nodes: &[Value], pods: &[Value]) {
    let Some(pods_r) = store.resource("", "v1", "pods") else {
        return;
    };
    let now = chrono::Utc::now();
    for node in nodes {
        let taints: Vec<&Value> = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["effect"] == "NoExecute")
            .collect();
        if taints.is_empty() {
            continue;
        }
        let node_name = node["metadata"]["name"].as_str().unwrap_or_default();
        for pod in pods.iter().filter(|p| p["spec"]["nodeName"] == node_name) {
            if pod["metadata"].get("deletionTimestamp").is_some() {
                continue;
            }
            if taints.iter().all(|t| may_stay(pod, t, now)) {
                continue;
            }
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            tracing::info!(
                pod = name,
                node = node_name,
                "taint manager: evicting a pod that does not tolerate a NoExecute taint"
            );
            let _ = store.delete(&pods_r, ns, name, &DeleteOptions::default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    }

    #[test]
    fn daemons_follow_selectors_and_taints_and_tolerate_what_kubernetes_adds() {
        let ds = json!({"spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{"name": "agent"}]}}}});
        let spec = daemon_spec(&ds);
        let linux = json!({"kubernetes.io/os": "linux"});
        assert!(should_run(&spec, &node("a", linux.clone(), json!([]))));
        assert!(!should_run(
            &spec,
            &node("b", json!({"kubernetes.io/os": "windows"}), json!([]))
        ));
        assert!(should_run(
            &spec,
            &node(
                "c",
                linux.clone(),
                json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])
            )
        ));
        assert!(!should_run(
            &spec,
            &node(
                "d",
                linux,
                json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}])
            )
        ));
        let pod = daemon_pod(
            &json!({"metadata": {"name": "agent", "namespace": "kube-system", "uid": "u1"}, "spec": ds["spec"]}),
            &spec,
            "a",
        );
        assert_eq!(target_node(&pod).as_deref(), Some("a"));
        assert_eq!(pod["metadata"]["generateName"], "agent-");
    }

    #[test]
    fn no_execute_taints_evict_unless_tolerated_and_toleration_seconds_run_out() {
        let now = chrono::Utc::now();
        let taint = json!({"key": "example.com/broken", "effect": "NoExecute",
                           "timeAdded": (now - chrono::Duration::seconds(60)).to_rfc3339()});
        let plain = json!({"spec": {}});
        assert!(!may_stay(&plain, &taint, now));
        let forever =
            json!({"spec": {"tolerations": [{"key": "example.com/broken", "operator": "Exists"}]}});
        assert!(may_stay(&forever, &taint, now));
        let briefly = json!({"spec": {"tolerations": [{"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]}});
        assert!(!may_stay(&briefly, &taint, now));
        let longer = json!({"spec": {"tolerations": [{"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}});
        assert!(may_stay(&longer, &taint, now));
    }
}
