//! The controllers a real cluster runs that this project relies on, in
//! process against the store (`local-apiserver --controllers`):
//!
//! ```text
//!   Deployment ──▶ ReplicaSet (per pod template) ──▶ Pods       workload controller
//!   pending Pod ──fits a Ready node?──▶ binding                 scheduler stand-in
//!             └─ no ─▶ PodScheduled=False, reason=Unschedulable
//!   bound Pod ──▶ Running, Ready (no kubelet here)               kubelet stand-in
//!   Pod on a Node that is gone ──▶ deleted                       pod GC
//!   terminating Pod past its grace period ──▶ removed            kubelet stand-in
//!   DaemonSet ──▶ a pod per selected Node; NoExecute taints evict  (daemons.rs)
//! ```
//!
//! The scheduler checks what kube-scheduler's filters check for this
//! project: resource requests against allocatable, nodeSelector, required
//! node affinity, taints and tolerations, host ports, unschedulable nodes,
//! and (interpod.rs) pod affinity, anti-affinity and topology spread.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::ResourceInfo;
use super::json::{list, strings};
use super::store::{DeleteOptions, ListOptions, Store, is_ready, now, set_condition};

/// A quantity of resource `name` in wire units (millicores for CPU, bytes
/// for memory); one that does not parse counts as zero, as the stand-in
/// does not validate what it schedules.
pub fn parse_quantity(name: &str, q: &Value) -> i64 {
    let text = match q {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        _ => return 0,
    };
    karpenter_core::quantity::parse_resource(name, &text).unwrap_or(0)
}

/// A pod's effective requests (containers summed, init containers' max).
pub fn pod_requests(pod: &Value) -> BTreeMap<String, i64> {
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        for (k, v) in c["resources"]["requests"].as_object().into_iter().flatten() {
            let e = total.entry(k.clone()).or_default();
            *e = e.saturating_add(parse_quantity(k, v));
        }
    }
    for c in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for (k, v) in c["resources"]["requests"].as_object().into_iter().flatten() {
            let e = total.entry(k.clone()).or_default();
            *e = (*e).max(parse_quantity(k, v));
        }
    }
    for (k, v) in pod["spec"]["overhead"].as_object().into_iter().flatten() {
        let e = total.entry(k.clone()).or_default();
        *e = e.saturating_add(parse_quantity(k, v));
    }
    total.insert("pods".into(), 1);
    total
}

pub(crate) fn tolerates(pod: &Value, taint: &Value) -> bool {
    pod["spec"]["tolerations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| {
            let effect_ok = t["effect"]
                .as_str()
                .is_none_or(|e| e.is_empty() || Some(e) == taint["effect"].as_str());
            let key_ok = match t["key"].as_str() {
                None | Some("") => t["operator"].as_str() == Some("Exists"),
                Some(k) => Some(k) == taint["key"].as_str(),
            };
            let value_ok = t["operator"].as_str() == Some("Exists")
                || t["value"].as_str().unwrap_or_default()
                    == taint["value"].as_str().unwrap_or_default();
            effect_ok && key_ok && value_ok
        })
}

fn match_expression(labels: &serde_json::Map<String, Value>, e: &Value) -> bool {
    let key = e["key"].as_str().unwrap_or_default();
    let val = labels.get(key).and_then(Value::as_str);
    let values: Vec<&str> = strings(&e["values"]).collect();
    match e["operator"].as_str().unwrap_or_default() {
        "In" => val.is_some_and(|v| values.contains(&v)),
        "NotIn" => val.is_none_or(|v| !values.contains(&v)),
        "Exists" => val.is_some(),
        "DoesNotExist" => val.is_none(),
        "Gt" => val
            .and_then(|v| v.parse::<i64>().ok())
            .zip(values.first().and_then(|v| v.parse::<i64>().ok()))
            .is_some_and(|(a, b)| a > b),
        "Lt" => val
            .and_then(|v| v.parse::<i64>().ok())
            .zip(values.first().and_then(|v| v.parse::<i64>().ok()))
            .is_some_and(|(a, b)| a < b),
        _ => false,
    }
}

/// Whether the pod's nodeSelector and required node affinity select `node`.
pub(crate) fn node_selected(pod: &Value, node: &Value) -> bool {
    let empty = serde_json::Map::new();
    let labels = node["metadata"]["labels"].as_object().unwrap_or(&empty);
    let selector_matches = pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].as_array();
    let affinity_matches = terms.is_none_or(|terms| {
        terms.iter().any(|t| {
            t["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|e| match_expression(labels, e))
                && t["matchFields"].as_array().into_iter().flatten().all(|e| {
                    let mut m = serde_json::Map::new();
                    m.insert("metadata.name".into(), node["metadata"]["name"].clone());
                    match_expression(&m, e)
                })
        })
    });
    selector_matches && affinity_matches
}

/// Why `pod` cannot go on `node` (None when it fits), given the pods
/// already there.
pub fn unfit_reason(pod: &Value, node: &Value, on_node: &[&Value]) -> Option<String> {
    if !is_ready(node) {
        return Some("node(s) were not ready".into());
    }
    if node["spec"]["unschedulable"] == true {
        return Some("node(s) were unschedulable".into());
    }
    if !node_selected(pod, node) {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    for taint in node["spec"]["taints"].as_array().into_iter().flatten() {
        if matches!(
            taint["effect"].as_str(),
            Some("NoSchedule") | Some("NoExecute")
        ) && !tolerates(pod, taint)
        {
            return Some(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default()
            ));
        }
    }
    let ports = |p: &Value| -> BTreeSet<(i64, String)> {
        p["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
            .filter_map(|p| {
                p["hostPort"]
                    .as_i64()
                    .filter(|h| *h > 0)
                    .map(|h| (h, p["protocol"].as_str().unwrap_or("TCP").to_string()))
            })
            .collect()
    };
    let wanted = ports(pod);
    if !wanted.is_empty() && on_node.iter().any(|p| !ports(p).is_disjoint(&wanted)) {
        return Some("node(s) didn't have free ports for the requested pod ports".into());
    }
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for p in on_node {
        for (k, v) in pod_requests(p) {
            let e = used.entry(k).or_default();
            *e = e.saturating_add(v);
        }
    }
    for (k, v) in pod_requests(pod) {
        let alloc = node["status"]["allocatable"]
            .get(&k)
            .map_or(0, |q| parse_quantity(&k, q));
        if used.get(&k).copied().unwrap_or(0).saturating_add(v) > alloc {
            let name = match k.as_str() {
                "cpu" => "Insufficient cpu".to_string(),
                "memory" => "Insufficient memory".to_string(),
                "pods" => "Too many pods".to_string(),
                other => format!("Insufficient {other}"),
            };
            return Some(name);
        }
    }
    None
}

fn res(store: &Store, group: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
    store.resource(group, "v1", plural)
}

fn all(store: &Store, r: &ResourceInfo) -> Vec<Value> {
    store
        .list(r, None, &ListOptions::default())
        .map(|(i, _, _)| i)
        .unwrap_or_default()
}

/// The objects `uid` controls.
pub(crate) fn owned_by<'a>(objs: &'a [Value], uid: &str) -> Vec<&'a Value> {
    objs.iter()
        .filter(|o| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["uid"] == uid && r["controller"] == true)
        })
        .collect()
}

fn template_hash(template: &Value) -> String {
    // FNV-1a over the template's JSON, printed like pod-template-hash.
    let h = karpenter_core::hash::fnv1a_64(template.to_string().as_bytes());
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

fn owner_ref(o: &Value) -> Value {
    json!([{
        "apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
        "uid": o["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    }])
}

/// A pod of a workload controller (`owner`: a ReplicaSet or DaemonSet):
/// its template's metadata (the template's own name ignored, as the real
/// controllers do), named `<owner>-<random>`, owned by it, with `spec`.
pub(crate) fn pod_from_template(owner: &Value, spec: Value) -> Value {
    let mut meta = owner["spec"]["template"]["metadata"].clone();
    if !meta.is_object() {
        meta = json!({});
    }
    if let Some(m) = meta.as_object_mut() {
        m.remove("name");
    }
    meta["generateName"] = json!(format!(
        "{}-",
        owner["metadata"]["name"].as_str().unwrap_or_default()
    ));
    meta["namespace"] = owner["metadata"]["namespace"].clone();
    meta["ownerReferences"] = owner_ref(owner);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

fn is_terminating(o: &Value) -> bool {
    o["metadata"].get("deletionTimestamp").is_some()
}

/// A terminating pod whose grace period has run out.
fn grace_period_over(pod: &Value) -> bool {
    pod["metadata"]["deletionGracePeriodSeconds"]
        .as_i64()
        .is_some_and(|g| g > 0)
        && pod["metadata"]["deletionTimestamp"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|at| at <= chrono::Utc::now())
}

/// The field manager of the workload controllers' writes.
const CM: &str = "kube-controller-manager";

/// The kinds the workload controllers read and write.
struct Workloads {
    deployments: Arc<ResourceInfo>,
    replicasets: Arc<ResourceInfo>,
    pods: Arc<ResourceInfo>,
}

/// One pass of every controller, in the order a change flows down:
/// Deployments make ReplicaSets, ReplicaSets make Pods, DaemonSets make
/// Pods and taints evict them, then bound pods are tended (pod GC and the
/// kubelet) before pending ones are scheduled.
pub fn reconcile(store: &Store) {
    let (Some(deploys_r), Some(rs_r), Some(pods_r), Some(nodes_r)) = (
        res(store, "apps", "deployments"),
        res(store, "apps", "replicasets"),
        res(store, "", "pods"),
        res(store, "", "nodes"),
    ) else {
        return;
    };
    let kinds = Workloads {
        deployments: deploys_r,
        replicasets: rs_r,
        pods: pods_r.clone(),
    };
    let replicasets = all(store, &kinds.replicasets);
    for d in all(store, &kinds.deployments) {
        sync_deployment(store, &kinds, &replicasets, &d);
    }
    // Every ReplicaSet counts its pods from one list taken before any of
    // them creates or deletes one.
    let pods = all(store, &pods_r);
    for rs in all(store, &kinds.replicasets) {
        sync_replica_set(store, &kinds, &pods, &rs);
    }
    let nodes = all(store, &nodes_r);
    let pods = all(store, &pods_r);
    super::daemons::reconcile_daemon_sets(store, &nodes, &pods);
    super::daemons::evict_for_no_execute(store, &nodes, &pods);
    let pods = all(store, &pods_r);
    let mut by_node = tend_bound_pods(store, &pods_r, &nodes, &pods);
    schedule_pending(store, &pods_r, &nodes, &pods, &mut by_node);
}

/// The Deployment controller for one Deployment: a ReplicaSet per pod
/// template (named by its hash), the current one scaled to `replicas` and
/// the older ones to 0, and the Deployment's status from theirs.
fn sync_deployment(store: &Store, kinds: &Workloads, replicasets: &[Value], d: &Value) {
    if is_terminating(d) {
        return;
    }
    let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
    let uid = d["metadata"]["uid"].as_str().unwrap_or_default();
    let mut template = d["spec"]["template"].clone();
    let hash = template_hash(&template);
    template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
    let name = format!(
        "{}-{hash}",
        d["metadata"]["name"].as_str().unwrap_or_default()
    );
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    let owned = owned_by(replicasets, uid);
    let mut ready = 0;
    let mut total = 0;
    for rs in &owned {
        let rs_name = rs["metadata"]["name"].as_str().unwrap_or_default();
        let want = if rs_name == name { replicas } else { 0 };
        total += rs["status"]["replicas"].as_i64().unwrap_or(0);
        ready += rs["status"]["readyReplicas"].as_i64().unwrap_or(0);
        if rs["spec"]["replicas"].as_i64() != Some(want) {
            let _ = store.modify(&kinds.replicasets, ns, rs_name, None, CM, |old| {
                let mut new = old.clone();
                new["spec"]["replicas"] = json!(want);
                Ok(new)
            });
        }
    }
    if !owned.iter().any(|rs| rs["metadata"]["name"] == name) {
        let rs = new_replica_set(d, &name, &hash, template, replicas);
        let _ = store.create(&kinds.replicasets, ns, rs, CM);
    }
    let current = owned.iter().find(|rs| rs["metadata"]["name"] == name);
    let updated = current.map_or(0, |rs| rs["status"]["replicas"].as_i64().unwrap_or(0));
    let status = json!({
        "observedGeneration": d["metadata"]["generation"], "replicas": total, "updatedReplicas": updated,
        "readyReplicas": ready, "availableReplicas": ready, "unavailableReplicas": (replicas - ready).max(0),
    });
    if d["status"]["replicas"] != status["replicas"]
        || d["status"]["readyReplicas"] != status["readyReplicas"]
        || d["status"]["observedGeneration"] != status["observedGeneration"]
        || d["status"]["updatedReplicas"] != status["updatedReplicas"]
    {
        let dn = d["metadata"]["name"].as_str().unwrap_or_default();
        let _ = store.modify(&kinds.deployments, ns, dn, Some("status"), CM, |old| {
            let mut new = old.clone();
            new["status"] = status;
            Ok(new)
        });
    }
}

/// The ReplicaSet of Deployment `d` for its pod template (`template`,
/// already labelled with `hash`).
fn new_replica_set(d: &Value, name: &str, hash: &str, template: Value, replicas: i64) -> Value {
    let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
    let mut selector = d["spec"]["selector"].clone();
    selector["matchLabels"]["pod-template-hash"] = json!(hash);
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns, "labels": template["metadata"]["labels"], "ownerReferences": owner_ref(d)},
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    })
}

/// The ReplicaSet controller for one ReplicaSet: as many live pods as it
/// wants (`pods` is the list before this pass), then its status.
fn sync_replica_set(store: &Store, kinds: &Workloads, pods: &[Value], rs: &Value) {
    if is_terminating(rs) {
        return;
    }
    let ns = rs["metadata"]["namespace"].as_str().unwrap_or_default();
    let uid = rs["metadata"]["uid"].as_str().unwrap_or_default();
    let want = rs["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let live = || -> Vec<&Value> {
        owned_by(pods, uid)
            .into_iter()
            .filter(|p| !is_terminating(p))
            .collect()
    };
    let mut owned = live();
    if owned.len() < want {
        for _ in owned.len()..want {
            let pod = pod_from_template(rs, rs["spec"]["template"]["spec"].clone());
            let _ = store.create(&kinds.pods, ns, pod, CM);
        }
    } else if owned.len() > want {
        // Unscheduled first, then not ready, then newest.
        owned.sort_by_key(|p| {
            (
                p["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty()),
                is_ready(p),
                std::cmp::Reverse(
                    p["metadata"]["creationTimestamp"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
            )
        });
        for p in owned.iter().take(owned.len() - want) {
            let _ = store.delete(
                &kinds.pods,
                ns,
                p["metadata"]["name"].as_str().unwrap_or_default(),
                &DeleteOptions::default(),
            );
        }
    }
    // The status counts the pods as listed, not the ones just made or
    // deleted: the next pass sees those.
    let owned = live();
    let ready = owned.iter().filter(|p| is_ready(p)).count();
    if rs["status"]["replicas"].as_u64() != Some(owned.len() as u64)
        || rs["status"]["readyReplicas"].as_u64() != Some(ready as u64)
    {
        let name = rs["metadata"]["name"].as_str().unwrap_or_default();
        let _ = store.modify(&kinds.replicasets, ns, name, Some("status"), CM, |old| {
            let mut new = old.clone();
            new["status"] = json!({"replicas": owned.len(), "readyReplicas": ready, "availableReplicas": ready, "fullyLabeledReplicas": owned.len(), "observedGeneration": old["metadata"]["generation"]});
            Ok(new)
        });
    }
}

/// Pod GC and the kubelet over the bound pods: a pod whose node is gone
/// is deleted, one past its grace period is removed, a pending one on a
/// Ready node starts. Returns the pods that take room on each node (not
/// Succeeded or Failed), for the scheduler.
fn tend_bound_pods(
    store: &Store,
    pods_r: &ResourceInfo,
    nodes: &[Value],
    pods: &[Value],
) -> BTreeMap<String, Vec<Value>> {
    let node_names: BTreeSet<&str> = nodes
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    let mut by_node: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for p in pods {
        let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        match p["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            Some(n) if !node_names.contains(n) => {
                // Its node is gone: nobody will stop it gracefully.
                let _ = store.delete(pods_r, ns, name, &DeleteOptions::grace(Some(0)));
            }
            Some(n) => {
                let phase = p["status"]["phase"].as_str().unwrap_or("Pending");
                if !matches!(phase, "Succeeded" | "Failed") {
                    by_node.entry(n.to_string()).or_default().push(p.clone());
                }
                let node = nodes.iter().find(|x| x["metadata"]["name"] == n);
                if grace_period_over(p) {
                    // The kubelet: its containers have stopped; it lets the pod go.
                    let _ = store.delete(pods_r, ns, name, &DeleteOptions::grace(Some(0)));
                    continue;
                }
                if phase == "Pending" && !is_terminating(p) && node.is_some_and(is_ready) {
                    start_pod(store, pods_r, p, node.cloned().unwrap_or_default());
                }
            }
            None => {}
        }
    }
    by_node
}

/// The pods kube-scheduler would take up: unbound, not gated, live, for
/// the default scheduler, not finished; highest priority first.
fn pending_pods(pods: &[Value]) -> Vec<&Value> {
    let mut pending: Vec<&Value> = pods
        .iter()
        .filter(|p| p["spec"]["nodeName"].as_str().is_none_or(str::is_empty))
        // kube-scheduler leaves gated pods be (and binding one is refused).
        .filter(|p| {
            p["spec"]["schedulingGates"]
                .as_array()
                .is_none_or(Vec::is_empty)
        })
        .filter(|p| {
            !is_terminating(p)
                && p["spec"]["schedulerName"]
                    .as_str()
                    .is_none_or(|s| s == "default-scheduler")
        })
        .filter(|p| {
            !matches!(
                p["status"]["phase"].as_str(),
                Some("Succeeded") | Some("Failed")
            )
        })
        .collect();
    pending.sort_by_key(|p| std::cmp::Reverse(p["spec"]["priority"].as_i64().unwrap_or(0)));
    pending
}

/// The scheduler stand-in: each pending pod is bound to the first node it
/// fits (and counted there for the pods after it), or marked
/// Unschedulable with why no node would do.
fn schedule_pending(
    store: &Store,
    pods_r: &ResourceInfo,
    nodes: &[Value],
    pods: &[Value],
    by_node: &mut BTreeMap<String, Vec<Value>>,
) {
    for p in pending_pods(pods) {
        let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        match first_fit(p, nodes, by_node) {
            Ok(node) => {
                if store
                    .bind(pods_r, ns, name, &node, &serde_json::Map::new())
                    .is_ok()
                {
                    let mut bound = p.clone();
                    bound["spec"]["nodeName"] = json!(node);
                    by_node.entry(node).or_default().push(bound);
                }
            }
            Err(reasons) => {
                let message = unschedulable_message(nodes.len(), &reasons);
                mark_unschedulable(store, pods_r, p, &message);
            }
        }
    }
}

/// The first node, in list order, that `p` fits; otherwise how many nodes
/// refused it for each reason.
fn first_fit(
    p: &Value,
    nodes: &[Value],
    by_node: &BTreeMap<String, Vec<Value>>,
) -> Result<String, BTreeMap<String, usize>> {
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let placement = super::interpod::Placement {
        nodes,
        pods_by_node: by_node,
    };
    for n in nodes {
        let nn = n["metadata"]["name"].as_str().unwrap_or_default();
        let here: Vec<&Value> = by_node
            .get(nn)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        match unfit_reason(p, n, &here).or_else(|| placement.unfit(p, n)) {
            None => return Ok(nn.to_string()),
            Some(r) => *reasons.entry(r).or_default() += 1,
        }
    }
    Err(reasons)
}

/// kube-scheduler's FitError message (with the preemption postfilter's
/// note), reasons sorted by name as it sorts them.
fn unschedulable_message(node_count: usize, reasons: &BTreeMap<String, usize>) -> String {
    let detail: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(
        "0/{} nodes are available: {}. preemption: 0/{} nodes are available: {} Preemption is not helpful for scheduling.",
        node_count,
        if detail.is_empty() {
            "no nodes available to schedule pods".to_string()
        } else {
            detail.join(", ")
        },
        node_count,
        node_count
    )
}

/// Sets PodScheduled=False (Unschedulable) with `message`, unless the pod
/// already says so (no write, so no event, when nothing changed).
fn mark_unschedulable(store: &Store, pods_r: &ResourceInfo, p: &Value, message: &str) {
    let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = p["metadata"]["name"].as_str().unwrap_or_default();
    let current = list(&p["status"]["conditions"])
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned();
    if current
        .as_ref()
        .is_none_or(|c| c["status"] != "False" || c["message"] != message)
    {
        let _ = store.modify(pods_r, ns, name, Some("status"), "kube-scheduler", |old| {
            let mut new = old.clone();
            set_condition(&mut new, "PodScheduled", "False", "Unschedulable", message);
            Ok(new)
        });
    }
}

/// The kubelet's part: a pod bound to a Ready node starts and is Ready.
fn start_pod(store: &Store, pods_r: &ResourceInfo, pod: &Value, node: Value) {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let host_ip = list(&node["status"]["addresses"])
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .map_or(json!("10.0.0.1"), |a| a["address"].clone());
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let octet = uid
        .bytes()
        .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    let pod_ip = format!("10.244.{}.{}", (octet >> 8) % 250 + 1, octet % 250 + 1);
    let _ = store.modify(pods_r, ns, name, Some("status"), "kubelet", |old| {
        let mut new = old.clone();
        let t = now();
        new["status"]["phase"] = json!("Running");
        new["status"]["hostIP"] = host_ip;
        new["status"]["podIP"] = json!(pod_ip);
        new["status"]["startTime"] = json!(t);
        let statuses: Vec<Value> = old["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": t}}}))
            .collect();
        new["status"]["containerStatuses"] = json!(statuses);
        for cond in ["Initialized", "ContainersReady", "Ready"] {
            set_condition(&mut new, cond, "True", "", "");
        }
        Ok(new)
    });
}

/// Runs the controllers until the store's process ends: after every burst
/// of changes and at least every `period`.
pub async fn run(store: Arc<Store>, period: Duration) {
    let mut rx = store.subscribe_all();
    loop {
        reconcile(&store);
        let _ = tokio::time::timeout(period, rx.recv()).await;
        // Let a burst of writes land before the next pass.
        tokio::time::sleep(Duration::from_millis(20)).await;
        while rx.try_recv().is_ok() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("cpu", &json!("500m")), 500);
        assert_eq!(parse_quantity("memory", &json!("2Gi")), 2147483648);
        assert_eq!(parse_quantity("cpu", &json!(3)), 3000);
        assert_eq!(parse_quantity("memory", &json!("1e3")), 1000);
        assert_eq!(parse_quantity("memory", &json!("lots")), 0);
    }

    #[test]
    fn fit_checks_taints_selectors_and_resources() {
        let node = json!({"metadata": {"name": "n", "labels": {"zone": "a"}}, "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]}});
        let pod = |extra: Value| {
            let mut p = json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}], "tolerations": [{"key": "k", "operator": "Exists"}]}});
            super::super::patch::merge_patch(&mut p, &extra);
            p
        };
        assert_eq!(unfit_reason(&pod(json!({})), &node, &[]), None);
        assert!(
            unfit_reason(&pod(json!({"spec": {"tolerations": []}})), &node, &[])
                .is_some_and(|r| r.contains("untolerated taint"))
        );
        assert!(
            unfit_reason(
                &pod(json!({"spec": {"nodeSelector": {"zone": "b"}}})),
                &node,
                &[]
            )
            .is_some()
        );
        let big = pod(json!({}));
        assert_eq!(
            unfit_reason(&pod(json!({})), &node, &[&big, &big]),
            Some("Insufficient cpu".into())
        );
    }
}
