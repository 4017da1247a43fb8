//! Manifests to a [`pb::ClusterSnapshot`]: what the scheduler sees.
//!
//! | kind | becomes |
//! | --- | --- |
//! | Pod | a pending pod, or a pod on its node's [`pb::StateNode`] |
//! | Deployment, ReplicaSet, StatefulSet, Job | `replicas` (Job: `parallelism`) pending pods `<name>-<i>` |
//! | DaemonSet | a daemon set (overhead on every node it selects) |
//! | Node | an existing state node |
//! | NodeClaim | an in-flight state node, unless a Node has its `status.nodeName` |
//! | NodePool (v1; older versions converted first) | a node pool |
//! | EC2NodeClass | only its readiness (a pool whose class is not ready is not ready) |
//! | PodDisruptionBudget | a budget; without `status.disruptionsAllowed`, computed from the input's pods ([`disruptions_allowed`]) |
//! | Namespace, PriorityClass, PVC/PV/StorageClass | as Kubernetes uses them |
//! | InstanceTypeCatalog | instance types and offerings |
//!
//! Nodes and NodeClaims carry what disruption needs: the claim's name, pool,
//! readiness, price (from the catalogs), and a [`pb::NodeClaimDisruptionState`]
//! from the claim's conditions (`Drifted`, `Consolidatable`, `Initialized`),
//! `status.lastPodEventTime`, expiry (`spec.expireAfter`, else the pool's),
//! `karpenter.sh/do-not-disrupt` on the node or claim, the node's `Ready`
//! condition and the `karpenter.sh/disrupted` taint.
//!
//! Other kinds are skipped with a warning.

use std::collections::{BTreeMap, BTreeSet};

use karpenter_proto::scheduler::v1 as pb;
use serde_json::Value;

use crate::catalog;
use crate::fields::{Reader, join};
use crate::input::{Document, InputError};
use crate::podspec::{self, PodContext, PodSource};

use karpenter_core::labels;

/// Name of the catalog made from InstanceTypeCatalog documents.
pub const MANIFEST_CATALOG: &str = "manifests";

/// Where each snapshot entry came from, to map scheduler errors back.
#[derive(Debug, Default, Clone)]
pub struct Origins {
    pub pending_pods: Vec<String>,
    pub nodes: Vec<String>,
    pub node_pools: Vec<String>,
    pub daemon_sets: Vec<String>,
    pub pod_disruption_budgets: Vec<String>,
}

impl Origins {
    /// `cluster.pending_pods[3].containers[0]` -> the document of that pod.
    pub fn locate(&self, field: &str) -> Option<&str> {
        let rest = field.strip_prefix("cluster.")?;
        let (collection, rest) = rest.split_once('[')?;
        let (index, _) = rest.split_once(']')?;
        let index: usize = index.parse().ok()?;
        let list = match collection {
            "pending_pods" => &self.pending_pods,
            "nodes" => &self.nodes,
            "node_pools" => &self.node_pools,
            "daemon_sets" => &self.daemon_sets,
            "pod_disruption_budgets" => &self.pod_disruption_budgets,
            _ => return None,
        };
        list.get(index).map(String::as_str)
    }
}

/// A node class document, for `--provider`.
#[derive(Debug, Clone)]
pub struct NodeClassDoc {
    pub value: Value,
    pub ready: bool,
}

/// The snapshot and what was learned building it.
#[derive(Debug, Default)]
pub struct Built {
    pub snapshot: pb::ClusterSnapshot,
    pub origins: Origins,
    pub warnings: Vec<String>,
    /// Whether any InstanceTypeCatalog document was given.
    pub has_catalog: bool,
    /// EC2NodeClass (or other node class) documents by name.
    pub node_classes: BTreeMap<String, NodeClassDoc>,
}

fn is_old_karpenter(doc: &Document) -> bool {
    matches!(
        (doc.group(), doc.version()),
        ("karpenter.sh", "v1alpha5" | "v1beta1") | ("karpenter.k8s.aws", "v1alpha1" | "v1beta1")
    )
}

/// Converts v1alpha5/v1beta1 Karpenter documents to v1 (with notes as
/// warnings); other documents pass through.
pub fn upgrade(
    docs: Vec<Document>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Document>, InputError> {
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        if !is_old_karpenter(&doc) {
            out.push(doc);
            continue;
        }
        let conversion =
            karpenter_convert::convert(&doc.value).map_err(|e| match e.as_field() {
                Some(f) => doc.error(f.path.clone(), f.message.clone()),
                None => doc.error("", e.to_string()),
            })?;
        for note in &conversion.notes {
            let path = if note.path.is_empty() {
                String::new()
            } else {
                format!("{}: ", note.path)
            };
            warnings.push(format!(
                "{}: converted from {}: {path}{}: {}",
                doc.origin,
                doc.api_version(),
                note.kind,
                note.message
            ));
        }
        for value in conversion.documents {
            let mut origin = doc.origin.clone();
            origin.kind = value
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            out.push(Document { origin, value });
        }
    }
    Ok(out)
}

/// Builds the snapshot from (already upgraded) documents.
pub fn build(docs: &[Document]) -> Result<Built, InputError> {
    let mut built = Built::default();
    let mut ctx = PodContext::default();
    let mut namespaces: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut catalog_types: Vec<pb::InstanceType> = Vec::new();
    let mut catalog_names: BTreeMap<String, String> = BTreeMap::new();

    // Pass 1: what other objects refer to.
    for doc in docs {
        let r = Reader::new(doc);
        match (doc.group(), doc.kind()) {
            (_, catalog::KIND) => {
                built.has_catalog = true;
                for it in catalog::instance_types(doc)? {
                    if let Some(first) =
                        catalog_names.insert(it.name.clone(), doc.origin.to_string())
                    {
                        return Err(doc.error(
                            "instanceTypes",
                            format!("instance type {:?} is already defined in {first}", it.name),
                        ));
                    }
                    catalog_types.push(it);
                }
            }
            ("scheduling.k8s.io", "PriorityClass") => {
                let name = r.require_name()?;
                let value = r
                    .int32(r.get(&doc.value, "value"), "value")?
                    .ok_or_else(|| r.err("value", "is required"))?;
                if r.bool(r.get(&doc.value, "globalDefault"), "globalDefault")?
                    .unwrap_or(false)
                {
                    ctx.default_priority = Some((name.clone(), value));
                }
                ctx.priority_classes.insert(name, value);
            }
            ("", "PersistentVolumeClaim") => {
                let key = format!("{}/{}", r.namespace(), r.require_name()?);
                ctx.claims
                    .insert(key, doc.value.get("spec").cloned().unwrap_or(Value::Null));
            }
            ("", "PersistentVolume") => {
                ctx.volumes.insert(r.require_name()?, doc.value.clone());
            }
            ("storage.k8s.io", "StorageClass") => {
                let name = r.require_name()?;
                let default = doc
                    .value
                    .pointer("/metadata/annotations/storageclass.kubernetes.io~1is-default-class")
                    .and_then(Value::as_str)
                    == Some("true");
                if default {
                    ctx.default_storage_class = Some(name.clone());
                }
                ctx.storage_classes.insert(name, doc.value.clone());
            }
            ("", "Namespace") => {
                let name = r.require_name()?;
                let labels =
                    r.string_map(doc.value.pointer("/metadata/labels"), "metadata.labels")?;
                namespaces.insert(name, labels);
            }
            ("karpenter.k8s.aws", "EC2NodeClass") => {
                built.node_classes.insert(
                    r.require_name()?,
                    NodeClassDoc {
                        value: doc.value.clone(),
                        ready: !r.not_ready(),
                    },
                );
            }
            _ => {}
        }
    }
    if built.has_catalog {
        built
            .snapshot
            .instance_type_catalogs
            .push(pb::InstanceTypeCatalog {
                name: MANIFEST_CATALOG.to_string(),
                instance_types: catalog_types,
            });
    }

    // Pass 2: nodes first, so that bound pods find them.
    let mut node_index: BTreeMap<String, usize> = BTreeMap::new();
    let mut pool_expiries: Vec<PoolExpiry> = Vec::new();
    let mut provider_index: BTreeMap<String, usize> = BTreeMap::new();
    for doc in docs
        .iter()
        .filter(|d| d.group().is_empty() && d.kind() == "Node")
    {
        let node = node(doc)?;
        if node_index.contains_key(&node.name) {
            return Err(doc.error(
                "metadata.name",
                format!("node {:?} is defined twice", node.name),
            ));
        }
        node_index.insert(node.name.clone(), built.snapshot.nodes.len());
        if !node.provider_id.is_empty() {
            provider_index.insert(node.provider_id.clone(), built.snapshot.nodes.len());
        }
        built.snapshot.nodes.push(node);
        built.origins.nodes.push(doc.origin.to_string());
    }
    for doc in docs
        .iter()
        .filter(|d| d.group() == "karpenter.sh" && d.kind() == "NodeClaim")
    {
        pool_expiries.extend(node_claim(
            doc,
            &mut built,
            &mut node_index,
            &provider_index,
        )?);
    }

    // Pass 3: everything else.
    let mut pdb_status: Vec<PdbStatus> = Vec::new();
    let mut seen_pods: BTreeSet<(String, String)> = BTreeSet::new();
    for doc in docs {
        let r = Reader::new(doc);
        match (doc.group(), doc.kind()) {
            (_, catalog::KIND)
            | ("scheduling.k8s.io", "PriorityClass")
            | ("", "PersistentVolumeClaim" | "PersistentVolume" | "Namespace" | "Node")
            | ("storage.k8s.io", "StorageClass")
            | ("karpenter.k8s.aws", "EC2NodeClass")
            | ("karpenter.sh", "NodeClaim") => {}
            ("karpenter.sh", "NodePool") => {
                let pool = node_pool(&r, &built.node_classes)?;
                if built
                    .snapshot
                    .node_pools
                    .iter()
                    .any(|p| p.name == pool.name)
                {
                    return Err(r.err(
                        "metadata.name",
                        format!("node pool {:?} is defined twice", pool.name),
                    ));
                }
                built.snapshot.node_pools.push(pool);
                built.origins.node_pools.push(doc.origin.to_string());
            }
            ("", "Pod") => {
                let Some(pod) = plain_pod(&r, &ctx)? else {
                    continue;
                };
                namespaces.entry(pod.namespace.clone()).or_default();
                if !seen_pods.insert((pod.namespace.clone(), pod.name.clone())) {
                    return Err(r.err(
                        "metadata.name",
                        format!("pod {}/{} is defined twice", pod.namespace, pod.name),
                    ));
                }
                if pod.node_name.is_empty() {
                    built.snapshot.pending_pods.push(pod);
                    built.origins.pending_pods.push(doc.origin.to_string());
                } else if let Some(&i) = node_index.get(&pod.node_name) {
                    built.snapshot.nodes[i].pods.push(pod);
                } else {
                    built.warnings.push(format!(
                        "{}: spec.nodeName: node {:?} is not in the input; the pod is ignored",
                        doc.origin, pod.node_name
                    ));
                }
            }
            ("apps", "Deployment" | "ReplicaSet" | "StatefulSet") | ("batch", "Job") => {
                for pod in workload(&r, &ctx)? {
                    namespaces.entry(pod.namespace.clone()).or_default();
                    if !seen_pods.insert((pod.namespace.clone(), pod.name.clone())) {
                        return Err(r.err(
                            "metadata.name",
                            format!(
                                "pod {}/{} (expanded from this workload) is defined twice",
                                pod.namespace, pod.name
                            ),
                        ));
                    }
                    built.snapshot.pending_pods.push(pod);
                    built.origins.pending_pods.push(doc.origin.to_string());
                }
            }
            ("apps", "DaemonSet") => {
                let name = r.require_name()?;
                let namespace = r.namespace();
                let spec = template_spec(&r)?;
                let template = podspec::pod(
                    &r,
                    &PodSource {
                        namespace: namespace.clone(),
                        name: name.clone(),
                        metadata: doc.value.pointer("/spec/template/metadata"),
                        metadata_path: "spec.template.metadata",
                        spec,
                        spec_path: "spec.template.spec",
                        owner_kind: "DaemonSet".into(),
                        owner_name: name.clone(),
                        claim_templates: BTreeMap::new(),
                    },
                    &ctx,
                )?;
                namespaces.entry(namespace.clone()).or_default();
                built.snapshot.daemon_sets.push(pb::DaemonSet {
                    namespace,
                    name,
                    template: Some(template),
                });
                built.origins.daemon_sets.push(doc.origin.to_string());
            }
            ("policy", "PodDisruptionBudget") => {
                let (budget, status) = pdb(&r)?;
                pdb_status.push(status);
                built.snapshot.pod_disruption_budgets.push(budget);
                built
                    .origins
                    .pod_disruption_budgets
                    .push(doc.origin.to_string());
            }
            (_, "") => {
                built
                    .warnings
                    .push(format!("{}: skipped: the document has no kind", doc.origin));
            }
            (_, kind) => {
                built.warnings.push(format!(
                    "{}: skipped: kind {kind} ({}) is not used by plan",
                    doc.origin,
                    doc.api_version()
                ));
            }
        }
    }

    for expiry in pool_expiries {
        let expire_after = built
            .snapshot
            .node_pools
            .iter()
            .find(|p| p.name == expiry.pool)
            .and_then(|p| p.expire_after);
        if let (Some(d), Some(disruption)) = (
            expire_after,
            built.snapshot.nodes[expiry.node].disruption.as_mut(),
        ) {
            disruption.expiration_time = Some(plus(&expiry.created, &d));
        }
    }
    for (budget, status) in built
        .snapshot
        .pod_disruption_budgets
        .iter_mut()
        .zip(pdb_status)
    {
        let pods = built
            .snapshot
            .pending_pods
            .iter()
            .chain(built.snapshot.nodes.iter().flat_map(|n| n.pods.iter()));
        let (allowed, expected) = disruptions_allowed(budget, pods);
        if !status.allowed_given {
            budget.disruptions_allowed = allowed;
        }
        if !status.expected_given {
            budget.expected_pods = expected;
        }
    }

    for (name, mut labels) in namespaces {
        labels.insert(labels::NAMESPACE_NAME.to_string(), name.clone());
        built.snapshot.namespaces.push(pb::Namespace {
            name,
            labels: labels.into_iter().collect(),
        });
    }
    Ok(built)
}

/// Sets what depends on the catalogs: node prices, and capacity of
/// in-flight claims that report none (from their instance type).
pub fn fill_from_catalogs(snapshot: &mut pb::ClusterSnapshot) {
    let types: BTreeMap<&str, &pb::InstanceType> = snapshot
        .instance_type_catalogs
        .iter()
        .flat_map(|c| c.instance_types.iter())
        .map(|it| (it.name.as_str(), it))
        .collect();
    let mut updates = Vec::new();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        let Some(it) = types.get(node.instance_type.as_str()) else {
            continue;
        };
        let price = it
            .offerings
            .iter()
            .find(|o| o.zone == node.zone && o.capacity_type == node.capacity_type)
            .map(|o| o.price);
        let capacity = it.capacity.clone();
        let allocatable = pb::ResourceList {
            quantities: karpenter_proto::convert::allocatable(it),
        };
        updates.push((i, price, capacity, allocatable));
    }
    for (i, price, capacity, allocatable) in updates {
        let node = &mut snapshot.nodes[i];
        if let Some(price) = price
            && node.price == 0.0
        {
            node.price = price;
        }
        if node
            .allocatable
            .as_ref()
            .is_none_or(|a| a.quantities.is_empty())
        {
            node.allocatable = Some(allocatable);
        }
        if node
            .capacity
            .as_ref()
            .is_none_or(|c| c.quantities.is_empty())
        {
            node.capacity = capacity;
        }
    }
}

fn template_spec<'a>(r: &Reader<'a>) -> Result<&'a Value, InputError> {
    r.doc
        .value
        .pointer("/spec/template/spec")
        .filter(|v| !v.is_null())
        .ok_or_else(|| r.err("spec.template.spec", "is required"))
}

fn owner(r: &Reader<'_>) -> Result<(String, String), InputError> {
    let refs = r.array(
        r.doc.value.pointer("/metadata/ownerReferences"),
        "metadata.ownerReferences",
    )?;
    for (i, o) in refs.iter().enumerate() {
        let p = format!("metadata.ownerReferences[{i}]");
        if r.bool(r.get(o, "controller"), &join(&p, "controller"))?
            .unwrap_or(false)
        {
            return Ok((
                r.string_or_empty(r.get(o, "kind"), &join(&p, "kind"))?,
                r.string_or_empty(r.get(o, "name"), &join(&p, "name"))?,
            ));
        }
    }
    Ok((String::new(), String::new()))
}

fn plain_pod(r: &Reader<'_>, ctx: &PodContext) -> Result<Option<pb::Pod>, InputError> {
    let name = r.require_name()?;
    let phase = r.string_or_empty(r.doc.value.pointer("/status/phase"), "status.phase")?;
    if matches!(phase.as_str(), "Succeeded" | "Failed") {
        return Ok(None);
    }
    let spec = r
        .doc
        .value
        .get("spec")
        .filter(|v| !v.is_null())
        .ok_or_else(|| r.err("spec", "is required"))?;
    let (owner_kind, owner_name) = owner(r)?;
    let mut pod = podspec::pod(
        r,
        &PodSource {
            namespace: r.namespace(),
            name,
            metadata: r.doc.value.get("metadata"),
            metadata_path: "metadata",
            spec,
            spec_path: "spec",
            owner_kind,
            owner_name,
            claim_templates: BTreeMap::new(),
        },
        ctx,
    )?;
    pod.phase = if phase.is_empty() {
        if pod.node_name.is_empty() {
            "Pending".into()
        } else {
            "Running".into()
        }
    } else {
        phase
    };
    pod.nominated_node_name = r.string_or_empty(
        r.doc.value.pointer("/status/nominatedNodeName"),
        "status.nominatedNodeName",
    )?;
    Ok(Some(pod))
}

fn workload(r: &Reader<'_>, ctx: &PodContext) -> Result<Vec<pb::Pod>, InputError> {
    let name = r.require_name()?;
    let namespace = r.namespace();
    let kind = r.doc.kind();
    let spec = r.doc.value.get("spec").cloned().unwrap_or(Value::Null);
    let count = if kind == "Job" {
        r.int(r.get(&spec, "parallelism"), "spec.parallelism")?
            .unwrap_or(1)
    } else {
        r.int(r.get(&spec, "replicas"), "spec.replicas")?
            .unwrap_or(1)
    };
    if !(0..=100_000).contains(&count) {
        let field = if kind == "Job" {
            "spec.parallelism"
        } else {
            "spec.replicas"
        };
        return Err(r.err(field, format!("must be between 0 and 100000, got {count}")));
    }
    let template_spec = template_spec(r)?;
    let mut claim_templates = BTreeMap::new();
    if kind == "StatefulSet" {
        for (i, t) in r
            .array(
                r.get(&spec, "volumeClaimTemplates"),
                "spec.volumeClaimTemplates",
            )?
            .iter()
            .enumerate()
        {
            let p = format!("spec.volumeClaimTemplates[{i}]");
            let vname =
                r.string_or_empty(t.pointer("/metadata/name"), &format!("{p}.metadata.name"))?;
            claim_templates.insert(vname, t.get("spec").cloned().unwrap_or(Value::Null));
        }
    }
    // Pods of a Deployment are controlled by its ReplicaSet.
    let owner_kind = if kind == "Deployment" {
        "ReplicaSet"
    } else {
        kind
    };
    let mut pods = Vec::new();
    for i in 0..count {
        let mut pod = podspec::pod(
            r,
            &PodSource {
                namespace: namespace.clone(),
                name: format!("{name}-{i}"),
                metadata: r.doc.value.pointer("/spec/template/metadata"),
                metadata_path: "spec.template.metadata",
                spec: template_spec,
                spec_path: "spec.template.spec",
                owner_kind: owner_kind.to_string(),
                owner_name: name.clone(),
                claim_templates: claim_templates.clone(),
            },
            ctx,
        )?;
        pod.uid = format!("{namespace}/{name}-{i}");
        pod.node_name.clear();
        pod.phase = "Pending".into();
        pod.creation_timestamp = None;
        pods.push(pod);
    }
    Ok(pods)
}

/// Which PodDisruptionBudget status fields the manifest gave (the others
/// are computed from the pods of the input).
struct PdbStatus {
    allowed_given: bool,
    expected_given: bool,
}

/// `N` or `P%` of `total`, a percentage rounded up (as the disruption
/// controller does); `None` when the text is neither.
pub fn int_or_percent(text: &str, total: i32) -> Option<i32> {
    match text.strip_suffix('%') {
        Some(p) => {
            let p: i64 = p.trim().parse().ok().filter(|p| *p >= 0)?;
            let scaled = (p * i64::from(total.max(0)) + 99) / 100;
            i32::try_from(scaled).ok()
        }
        None => text.trim().parse().ok().filter(|n: &i32| *n >= 0),
    }
}

fn pdb(r: &Reader<'_>) -> Result<(pb::PodDisruptionBudget, PdbStatus), InputError> {
    let v = &r.doc.value;
    let spec = v.get("spec").cloned().unwrap_or(Value::Null);
    let min_available = r.string_or_empty(r.get(&spec, "minAvailable"), "spec.minAvailable")?;
    let max_unavailable =
        r.string_or_empty(r.get(&spec, "maxUnavailable"), "spec.maxUnavailable")?;
    if !min_available.is_empty() && !max_unavailable.is_empty() {
        return Err(r.err(
            "spec",
            "minAvailable and maxUnavailable are mutually exclusive",
        ));
    }
    for (field, text) in [
        ("spec.minAvailable", &min_available),
        ("spec.maxUnavailable", &max_unavailable),
    ] {
        if !text.is_empty() && int_or_percent(text, 100).is_none() {
            return Err(r.err(
                field,
                format!("must be a non-negative integer or a percentage, got {text:?}"),
            ));
        }
    }
    let allowed = r.int32(
        v.pointer("/status/disruptionsAllowed"),
        "status.disruptionsAllowed",
    )?;
    let expected = r.int32(v.pointer("/status/expectedPods"), "status.expectedPods")?;
    let budget = pb::PodDisruptionBudget {
        namespace: r.namespace(),
        name: r.require_name()?,
        selector: r.label_selector(r.get(&spec, "selector"), "spec.selector")?,
        min_available,
        max_unavailable,
        disruptions_allowed: allowed.unwrap_or(0),
        expected_pods: expected.unwrap_or(0),
        unhealthy_pod_eviction_policy: r
            .string(
                r.get(&spec, "unhealthyPodEvictionPolicy"),
                "spec.unhealthyPodEvictionPolicy",
            )?
            .unwrap_or_else(|| "IfHealthyBudget".into()),
    };
    Ok((
        budget,
        PdbStatus {
            allowed_given: allowed.is_some(),
            expected_given: expected.is_some(),
        },
    ))
}

/// What the disruption controller would put in a budget's status, from the
/// pods of the input: `(disruptionsAllowed, expectedPods)`.
///
/// The budget covers the pods of its namespace its selector matches (none
/// without a selector). Expected are those not being deleted (for the pods
/// a workload was expanded into, its replicas); healthy are those bound to
/// a node, running (or with no phase) and not being deleted.
/// `minAvailable` (a percentage of the expected pods, rounded up) must stay
/// healthy; `maxUnavailable` (likewise) may be missing from the expected
/// pods. Never below 0.
pub fn disruptions_allowed<'a>(
    budget: &pb::PodDisruptionBudget,
    pods: impl IntoIterator<Item = &'a pb::Pod>,
) -> (i32, i32) {
    let Some(selector) = budget
        .selector
        .as_ref()
        .and_then(|s| karpenter_proto::convert::label_selector("selector", s).ok())
    else {
        return (0, 0);
    };
    let (mut expected, mut healthy) = (0i32, 0i32);
    for pod in pods {
        if pod.namespace != budget.namespace || pod.terminating {
            continue;
        }
        let labels: BTreeMap<String, String> = pod
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !selector.matches(&labels) {
            continue;
        }
        expected = expected.saturating_add(1);
        if !pod.node_name.is_empty() && matches!(pod.phase.as_str(), "Running" | "") {
            healthy = healthy.saturating_add(1);
        }
    }
    let desired_healthy = if !budget.min_available.is_empty() {
        int_or_percent(&budget.min_available, expected).unwrap_or(expected)
    } else if !budget.max_unavailable.is_empty() {
        expected.saturating_sub(int_or_percent(&budget.max_unavailable, expected).unwrap_or(0))
    } else {
        0
    };
    (healthy.saturating_sub(desired_healthy).max(0), expected)
}

fn label(labels: &BTreeMap<String, String>, key: &str) -> String {
    labels.get(key).cloned().unwrap_or_default()
}

fn node(doc: &Document) -> Result<pb::StateNode, InputError> {
    let r = Reader::new(doc);
    let v = &doc.value;
    let name = r.require_name()?;
    let labels = r.hash_map(v.pointer("/metadata/labels"), "metadata.labels")?;
    let annotations = r.string_map(v.pointer("/metadata/annotations"), "metadata.annotations")?;
    let all_taints = r.taints(v.pointer("/spec/taints"), "spec.taints")?;
    let (startup_taints, taints): (Vec<_>, Vec<_>) = all_taints
        .into_iter()
        .partition(|t| t.key == labels::UNREGISTERED_TAINT_KEY);
    let registered = startup_taints.is_empty();
    let capacity = r.resources(v.pointer("/status/capacity"), "status.capacity")?;
    let allocatable = r
        .resources(v.pointer("/status/allocatable"), "status.allocatable")?
        .or_else(|| capacity.clone());
    // Without the karpenter.sh/initialized label (and, later, a NodeClaim
    // condition) a registered node counts as initialized: manifests
    // straight from a user's repository rarely carry either.
    let initialized = match labels.get(labels::INITIALIZED).map(String::as_str) {
        Some(value) => value == "true",
        None => registered,
    };
    let disruption = pb::NodeClaimDisruptionState {
        do_not_disrupt: annotations.get(labels::DO_NOT_DISRUPT).map(String::as_str) == Some("true"),
        disrupting: taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY),
        node_not_ready: node_not_ready(v),
        ..Default::default()
    };
    Ok(pb::StateNode {
        node_claim_name: String::new(),
        provider_id: r.string_or_empty(v.pointer("/spec/providerID"), "spec.providerID")?,
        node_pool: label(&labels, labels::NODE_POOL),
        capacity_type: label(&labels, labels::CAPACITY_TYPE),
        zone: label(&labels, labels::TOPOLOGY_ZONE),
        instance_type: label(&labels, labels::INSTANCE_TYPE),
        labels,
        taints,
        startup_taints,
        capacity,
        allocatable,
        pods: Vec::new(),
        has_node: true,
        registered,
        initialized,
        marked_for_deletion: deleting(v),
        unschedulable: r
            .bool(v.pointer("/spec/unschedulable"), "spec.unschedulable")?
            .unwrap_or(false),
        price: 0.0,
        creation_timestamp: r.timestamp(
            v.pointer("/metadata/creationTimestamp"),
            "metadata.creationTimestamp",
        )?,
        disruption: Some(disruption),
        name,
    })
}

/// Whether the object has a (non-null) `metadata.deletionTimestamp`.
fn deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// A node's `Ready` condition is not `True`. A node that reports no
/// conditions at all (no status in the manifest) counts as ready.
fn node_not_ready(v: &Value) -> bool {
    match v.pointer("/status/conditions").and_then(Value::as_array) {
        None => false,
        Some(conditions) if conditions.is_empty() => false,
        Some(_) => condition_status(v, "Ready") != Some("True"),
    }
}

fn condition<'v>(v: &'v Value, kind: &str) -> Option<&'v Value> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

fn condition_status<'v>(v: &'v Value, kind: &str) -> Option<&'v str> {
    condition(v, kind)?.get("status")?.as_str()
}

/// A NodeClaim whose expiry comes from its NodePool's template (the claim
/// sets no `spec.expireAfter`): resolved once the pools are read.
struct PoolExpiry {
    node: usize,
    created: prost_types::Timestamp,
    pool: String,
}

fn plus(t: &prost_types::Timestamp, d: &prost_types::Duration) -> prost_types::Timestamp {
    let mut seconds = t.seconds.saturating_add(d.seconds);
    let mut nanos = t.nanos.saturating_add(d.nanos);
    if nanos >= 1_000_000_000 {
        nanos -= 1_000_000_000;
        seconds = seconds.saturating_add(1);
    }
    prost_types::Timestamp { seconds, nanos }
}

fn node_claim(
    doc: &Document,
    built: &mut Built,
    node_index: &mut BTreeMap<String, usize>,
    provider_index: &BTreeMap<String, usize>,
) -> Result<Option<PoolExpiry>, InputError> {
    let r = Reader::new(doc);
    let v = &doc.value;
    let name = r.require_name()?;
    let mut labels = r.hash_map(v.pointer("/metadata/labels"), "metadata.labels")?;
    let requirements = r.requirements(v.pointer("/spec/requirements"), "spec.requirements")?;
    for req in &requirements {
        if req.operator == pb::Operator::In as i32 && req.values.len() == 1 {
            labels
                .entry(req.key.clone())
                .or_insert_with(|| req.values[0].clone());
        }
    }
    let taints = r.taints(v.pointer("/spec/taints"), "spec.taints")?;
    let mut startup_taints = r.taints(v.pointer("/spec/startupTaints"), "spec.startupTaints")?;
    let node_name = r.string_or_empty(v.pointer("/status/nodeName"), "status.nodeName")?;
    let provider_id = r.string_or_empty(v.pointer("/status/providerID"), "status.providerID")?;
    let annotations = r.string_map(v.pointer("/metadata/annotations"), "metadata.annotations")?;
    let creation = r.timestamp(
        v.pointer("/metadata/creationTimestamp"),
        "metadata.creationTimestamp",
    )?;
    let expire_after_set = v.pointer("/spec/expireAfter").is_some_and(|e| !e.is_null());
    let expire_after =
        r.nillable_duration(v.pointer("/spec/expireAfter"), "spec.expireAfter", None)?;
    let conditions = r.array(v.pointer("/status/conditions"), "status.conditions")?;
    let mut transition_times = BTreeMap::new();
    for (i, c) in conditions.iter().enumerate() {
        let p = format!("status.conditions[{i}]");
        let kind = r.string_or_empty(r.get(c, "type"), &join(&p, "type"))?;
        r.string(r.get(c, "status"), &join(&p, "status"))?;
        let time = r.timestamp(
            r.get(c, "lastTransitionTime"),
            &join(&p, "lastTransitionTime"),
        )?;
        transition_times.insert(kind, time);
    }
    let since = |kind: &str| {
        if condition_status(v, kind) == Some("True") {
            transition_times.get(kind).cloned().flatten()
        } else {
            None
        }
    };
    let drifted_reason = if condition_status(v, "Drifted") == Some("True") {
        condition(v, "Drifted")
            .and_then(|c| c.get("reason"))
            .and_then(Value::as_str)
            .filter(|reason| !reason.is_empty())
            .unwrap_or("Drifted")
            .to_string()
    } else {
        String::new()
    };
    let claim_initialized = condition_status(v, "Initialized").map(|s| s == "True");
    let disruption = pb::NodeClaimDisruptionState {
        drifted_reason,
        drifted_time: since("Drifted"),
        consolidatable: condition_status(v, "Consolidatable") == Some("True"),
        last_pod_event_time: r.timestamp(
            v.pointer("/status/lastPodEventTime"),
            "status.lastPodEventTime",
        )?,
        initialized_time: since("Initialized"),
        do_not_disrupt: annotations.get(labels::DO_NOT_DISRUPT).map(String::as_str) == Some("true"),
        expiration_time: match (&creation, &expire_after) {
            (Some(c), Some(d)) => Some(plus(c, d)),
            _ => None,
        },
        node_pool_hash: annotations
            .get(labels::NODE_POOL_HASH)
            .cloned()
            .unwrap_or_default(),
        disrupting: false,
        node_not_ready: false,
        nominated: false,
        termination_grace_period: r.duration(
            v.pointer("/spec/terminationGracePeriod"),
            "spec.terminationGracePeriod",
        )?,
    };
    let pool_expiry = |node: usize, pool: &str| {
        creation
            .filter(|_| !expire_after_set && !pool.is_empty())
            .map(|created| PoolExpiry {
                node,
                created,
                pool: pool.to_string(),
            })
    };
    let existing = node_index.get(&node_name).copied().or_else(|| {
        provider_index
            .get(&provider_id)
            .copied()
            .filter(|_| !provider_id.is_empty())
    });
    if let Some(i) = existing {
        let node = &mut built.snapshot.nodes[i];
        node.node_claim_name = name;
        if node.node_pool.is_empty() {
            node.node_pool = label(&labels, labels::NODE_POOL);
        }
        if creation.is_some() {
            node.creation_timestamp = creation;
        }
        let labelled = node.labels.get(labels::INITIALIZED).map(String::as_str);
        node.initialized = match (labelled, claim_initialized) {
            (Some("true"), _) | (_, Some(true)) => true,
            (None, None) => node.initialized,
            _ => false,
        };
        node.marked_for_deletion |= deleting(v);
        let from_node = node.disruption.take().unwrap_or_default();
        node.disruption = Some(pb::NodeClaimDisruptionState {
            do_not_disrupt: disruption.do_not_disrupt || from_node.do_not_disrupt,
            disrupting: from_node.disrupting,
            node_not_ready: from_node.node_not_ready,
            ..disruption
        });
        return Ok(pool_expiry(i, &node.node_pool.clone()));
    }
    if node_index.contains_key(&name) {
        return Err(r.err(
            "metadata.name",
            format!("a node named {name:?} already exists"),
        ));
    }
    startup_taints.push(pb::Taint {
        key: labels::UNREGISTERED_TAINT_KEY.to_string(),
        value: String::new(),
        effect: pb::TaintEffect::NoExecute as i32,
    });
    let capacity = r.resources(v.pointer("/status/capacity"), "status.capacity")?;
    let allocatable = r
        .resources(v.pointer("/status/allocatable"), "status.allocatable")?
        .or_else(|| capacity.clone());
    let node_pool = label(&labels, labels::NODE_POOL);
    let index = built.snapshot.nodes.len();
    let expiry = pool_expiry(index, &node_pool);
    let state = pb::StateNode {
        name: name.clone(),
        node_claim_name: name.clone(),
        provider_id,
        node_pool,
        capacity_type: label(&labels, labels::CAPACITY_TYPE),
        zone: label(&labels, labels::TOPOLOGY_ZONE),
        instance_type: label(&labels, labels::INSTANCE_TYPE),
        labels,
        taints,
        startup_taints,
        capacity,
        allocatable,
        pods: Vec::new(),
        has_node: false,
        registered: false,
        initialized: claim_initialized == Some(true),
        marked_for_deletion: deleting(v),
        unschedulable: false,
        price: 0.0,
        creation_timestamp: creation,
        disruption: Some(disruption),
    };
    node_index.insert(name, index);
    built.snapshot.nodes.push(state);
    built.origins.nodes.push(doc.origin.to_string());
    Ok(expiry)
}

fn node_pool(
    r: &Reader<'_>,
    node_classes: &BTreeMap<String, NodeClassDoc>,
) -> Result<pb::NodePool, InputError> {
    let v = &r.doc.value;
    let name = r.require_name()?;
    let spec = v
        .get("spec")
        .filter(|s| !s.is_null())
        .ok_or_else(|| r.err("spec", "is required"))?;
    let tspec = spec
        .pointer("/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    let tp = "spec.template.spec";
    let weight = r.int32(r.get(spec, "weight"), "spec.weight")?.unwrap_or(0);
    if !(0..=100).contains(&weight) {
        return Err(r.err(
            "spec.weight",
            format!("must be between 1 and 100, got {weight}"),
        ));
    }
    let class_ref = r
        .get(&tspec, "nodeClassRef")
        .cloned()
        .unwrap_or(Value::Null);
    let crp = join(tp, "nodeClassRef");
    let node_class_ref = pb::NodeClassReference {
        group: r.string_or_empty(r.get(&class_ref, "group"), &join(&crp, "group"))?,
        kind: r.string_or_empty(r.get(&class_ref, "kind"), &join(&crp, "kind"))?,
        name: r.string_or_empty(r.get(&class_ref, "name"), &join(&crp, "name"))?,
    };
    let class_ready = node_class_ref.kind != "EC2NodeClass"
        || node_classes
            .get(&node_class_ref.name)
            .is_none_or(|c| c.ready);

    let disruption_v = r.get(spec, "disruption").cloned().unwrap_or(Value::Null);
    use pb::disruption::ConsolidationPolicy;
    let consolidation_policy = match r
        .string_or_empty(
            r.get(&disruption_v, "consolidationPolicy"),
            "spec.disruption.consolidationPolicy",
        )?
        .as_str()
    {
        "" | "WhenEmptyOrUnderutilized" => ConsolidationPolicy::WhenEmptyOrUnderutilized,
        "WhenEmpty" => ConsolidationPolicy::WhenEmpty,
        other => {
            return Err(r.err(
                "spec.disruption.consolidationPolicy",
                format!("must be WhenEmpty or WhenEmptyOrUnderutilized, got {other:?}"),
            ));
        }
    };
    let consolidate_after = r.nillable_duration(
        r.get(&disruption_v, "consolidateAfter"),
        "spec.disruption.consolidateAfter",
        Some(std::time::Duration::ZERO),
    )?;
    let mut budgets = Vec::new();
    match r.get(&disruption_v, "budgets") {
        None => budgets.push(pb::Budget {
            nodes: "10%".into(),
            ..Default::default()
        }),
        Some(list) => {
            for (i, b) in r
                .array(Some(list), "spec.disruption.budgets")?
                .iter()
                .enumerate()
            {
                let p = format!("spec.disruption.budgets[{i}]");
                let nodes = r
                    .string(r.get(b, "nodes"), &join(&p, "nodes"))?
                    .unwrap_or_else(|| "10%".into());
                let count = nodes.strip_suffix('%').unwrap_or(&nodes);
                if count.parse::<u32>().is_err() {
                    return Err(r.err(
                        join(&p, "nodes"),
                        format!("must be a count or a percentage, got {nodes:?}"),
                    ));
                }
                let schedule = r.string_or_empty(r.get(b, "schedule"), &join(&p, "schedule"))?;
                let duration = r.duration(r.get(b, "duration"), &join(&p, "duration"))?;
                if schedule.is_empty() != duration.is_none() {
                    return Err(r.err(p.clone(), "schedule and duration must be set together"));
                }
                let mut reasons = Vec::new();
                for (j, reason) in r
                    .strings(r.get(b, "reasons"), &join(&p, "reasons"))?
                    .iter()
                    .enumerate()
                {
                    reasons.push(match reason.as_str() {
                        "Empty" => pb::DisruptionReason::Empty,
                        "Underutilized" => pb::DisruptionReason::Underutilized,
                        "Drifted" => pb::DisruptionReason::Drifted,
                        "Expired" => pb::DisruptionReason::Expired,
                        other => {
                            return Err(r.err(
                                format!("{p}.reasons[{j}]"),
                                format!("must be Empty, Underutilized, Drifted or Expired, got {other:?}"),
                            ));
                        }
                    } as i32);
                }
                budgets.push(pb::Budget {
                    nodes,
                    schedule,
                    duration,
                    reasons,
                });
            }
        }
    }
    let usage = r.resources(v.pointer("/status/resources"), "status.resources")?;
    Ok(pb::NodePool {
        weight,
        requirements: r.requirements(r.get(&tspec, "requirements"), &join(tp, "requirements"))?,
        labels: r.hash_map(
            spec.pointer("/template/metadata/labels"),
            "spec.template.metadata.labels",
        )?,
        taints: r.taints(r.get(&tspec, "taints"), &join(tp, "taints"))?,
        startup_taints: r.taints(r.get(&tspec, "startupTaints"), &join(tp, "startupTaints"))?,
        limits: r.resources(r.get(spec, "limits"), "spec.limits")?,
        usage,
        disruption: Some(pb::Disruption {
            consolidation_policy: consolidation_policy as i32,
            consolidate_after,
            budgets,
        }),
        expire_after: r.nillable_duration(
            r.get(&tspec, "expireAfter"),
            &join(tp, "expireAfter"),
            Some(std::time::Duration::from_secs(720 * 3600)),
        )?,
        termination_grace_period: r.duration(
            r.get(&tspec, "terminationGracePeriod"),
            &join(tp, "terminationGracePeriod"),
        )?,
        node_class_ref: Some(node_class_ref),
        ready: !r.not_ready() && class_ready,
        instance_type_catalog: String::new(),
        template_hash: r.string_or_empty(
            v.pointer("/metadata/annotations/karpenter.sh~1nodepool-hash"),
            "metadata.annotations.karpenter.sh/nodepool-hash",
        )?,
        name,
    })
}
