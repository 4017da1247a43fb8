//! Manifests to a [`sched::ClusterSnapshot`]: what the scheduler sees.
//!
//! Documents are read into typed objects (k8s-openapi kinds and the
//! Karpenter v1 types; older Karpenter versions converted first), each
//! error naming the document and the field, then `karpenter-snapshot`
//! builds the snapshot in manifest mode:
//!
//! | kind | becomes |
//! | --- | --- |
//! | Pod | a pending pod, or a pod on its node's state node |
//! | Deployment, ReplicaSet, StatefulSet, Job | `replicas` (Job: `parallelism`) pending pods `<name>-<i>` |
//! | DaemonSet | a daemon set (overhead on every node it selects) |
//! | Node | an existing state node |
//! | NodeClaim | an in-flight state node, unless a Node has its `status.nodeName` |
//! | NodePool | a node pool |
//! | EC2NodeClass | only its readiness (a pool whose class is not ready is not ready) |
//! | PodDisruptionBudget | a budget; without `status.disruptionsAllowed`, computed from the input's pods |
//! | Namespace, PriorityClass, PVC/PV/StorageClass | as Kubernetes uses them |
//! | CSINode | its node's attachable-volume limits per CSI driver |
//! | InstanceTypeCatalog | instance types and offerings |
//! | NodeOverlay (`v1alpha1`) | with the `NodeOverlay` gate, prices and capacity of the instance types it selects, per pool |
//! | CapacityBuffer (`v1beta1`, `v1alpha1`) | with the `CapacityBuffer` gate, its virtual pods (pending, `capacity-buffer-<name>-<i>`) |
//! | PodTemplate | what a buffer's `podTemplateRef` names |
//! | Service | with `--scheduler-config` default constraints, the selectors they deduce |
//!
//! Other kinds are skipped with a warning.

use std::collections::BTreeMap;

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_snapshot::spread::SchedulerConfig;
use karpenter_snapshot::{Mode, NodeClasses, Objects, Source, prepare_object};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::catalog;
use crate::input::{Document, InputError};

/// Name of the catalog made from InstanceTypeCatalog documents.
pub const MANIFEST_CATALOG: &str = "manifests";

/// A node class document, for `--provider`.
#[derive(Debug, Clone)]
pub struct NodeClassDoc {
    pub value: Value,
    pub ready: bool,
}

/// The snapshot and what was learned building it.
#[derive(Debug, Default)]
pub struct Built {
    pub snapshot: sched::ClusterSnapshot,
    /// Which document each snapshot entry came from.
    pub origins: karpenter_snapshot::Origins,
    /// Each document's origin, by position.
    pub documents: Vec<String>,
    pub warnings: Vec<String>,
    /// Whether any InstanceTypeCatalog document was given.
    pub has_catalog: bool,
    /// EC2NodeClass documents by name.
    pub node_classes: BTreeMap<String, NodeClassDoc>,
    /// NodeOverlay documents, with their position (applied with the
    /// `NodeOverlay` gate once the instance types are known).
    pub node_overlays: Vec<(usize, karpenter_api::NodeOverlay)>,
    /// Static NodePools (`spec.replicas`), for `StaticCapacity`.
    pub static_pools: Vec<karpenter_api::NodePool>,
}

impl Built {
    /// The document a scheduler field path (`cluster.pending_pods[3]...`)
    /// points into.
    pub fn locate(&self, field: &str) -> Option<&str> {
        let id = self.origins.locate(field)?;
        self.documents.get(id).map(String::as_str)
    }
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

/// The typed objects of a document set, each with its document's position.
#[derive(Default)]
struct Typed {
    /// Pods are read into wire form at once: 20,000 typed Pods alongside
    /// their JSON would double the peak memory of a large plan.
    pods: Vec<(usize, karpenter_snapshot::PreparedObject)>,
    nodes: Vec<(usize, k8s_openapi::api::core::v1::Node)>,
    node_claims: Vec<(usize, karpenter_api::NodeClaim)>,
    node_pools: Vec<(usize, karpenter_api::NodePool)>,
    daemon_sets: Vec<(usize, k8s_openapi::api::apps::v1::DaemonSet)>,
    pdbs: Vec<(usize, k8s_openapi::api::policy::v1::PodDisruptionBudget)>,
    namespaces: Vec<(usize, k8s_openapi::api::core::v1::Namespace)>,
    priority_classes: Vec<(usize, k8s_openapi::api::scheduling::v1::PriorityClass)>,
    pvcs: Vec<(usize, k8s_openapi::api::core::v1::PersistentVolumeClaim)>,
    pvs: Vec<(usize, k8s_openapi::api::core::v1::PersistentVolume)>,
    storage_classes: Vec<(usize, k8s_openapi::api::storage::v1::StorageClass)>,
    deployments: Vec<(usize, k8s_openapi::api::apps::v1::Deployment)>,
    replica_sets: Vec<(usize, k8s_openapi::api::apps::v1::ReplicaSet)>,
    stateful_sets: Vec<(usize, k8s_openapi::api::apps::v1::StatefulSet)>,
    jobs: Vec<(usize, k8s_openapi::api::batch::v1::Job)>,
    capacity_buffers: Vec<(usize, karpenter_api::CapacityBuffer)>,
    pod_templates: Vec<(usize, k8s_openapi::api::core::v1::PodTemplate)>,
    services: Vec<(usize, k8s_openapi::api::core::v1::Service)>,
    csi_nodes: Vec<(usize, k8s_openapi::api::storage::v1::CSINode)>,
    /// NodeClaims whose manifest gives no `spec.expireAfter`.
    claims_expiring_with_pool: std::collections::BTreeSet<usize>,
}

/// The document as a typed object, or an error naming the field at fault;
/// it is consumed, so a large manifest set is never held as JSON and typed
/// objects at once.
fn typed<T: DeserializeOwned>(doc: Document) -> Result<T, InputError> {
    serde_path_to_error::deserialize(&doc.value).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        doc.error(field, e.into_inner().to_string())
    })
}

fn sources<T>(list: &[(usize, T)]) -> Vec<Source<'_, T>> {
    list.iter()
        .map(|(id, object)| Source { id: *id, object })
        .collect()
}

/// The documents sorted by kind, typed; instance types from catalog
/// documents; EC2NodeClasses with their readiness.
struct Read {
    objects: Typed,
    catalog_types: Vec<types::InstanceType>,
    /// Instance type name → the document that defined it.
    catalog_names: BTreeMap<String, String>,
    classes: NodeClasses,
}

impl Read {
    fn add_catalog(&mut self, doc: &Document) -> Result<(), InputError> {
        for it in catalog::instance_types(doc)? {
            if let Some(first) = self
                .catalog_names
                .insert(it.name.clone(), doc.origin.to_string())
            {
                return Err(doc.error(
                    "instanceTypes",
                    format!("instance type {:?} is already defined in {first}", it.name),
                ));
            }
            self.catalog_types.push(it);
        }
        Ok(())
    }

    fn add_node_class(&mut self, doc: &Document, built: &mut Built) -> Result<(), InputError> {
        let name = doc
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            return Err(doc.error("metadata.name", "is required"));
        }
        let ready = !not_ready(&doc.value);
        self.classes.ready.insert(name.clone(), ready);
        built.node_classes.insert(
            name,
            NodeClassDoc {
                value: doc.value.clone(),
                ready,
            },
        );
        Ok(())
    }
}

/// Sorts the documents by kind; a kind no API group serves is an error, a
/// known kind planning does not use is a warning.
/// Services are read only when `services` (default spread constraints are
/// configured); otherwise they are skipped like any kind planning does not use.
fn read_documents(
    docs: Vec<Document>,
    built: &mut Built,
    services: bool,
) -> Result<Read, InputError> {
    let mut read = Read {
        objects: Typed::default(),
        catalog_types: Vec::new(),
        catalog_names: BTreeMap::new(),
        classes: NodeClasses {
            group: karpenter_api::aws::labels::AWS_GROUP.into(),
            kind: "EC2NodeClass".into(),
            ready: BTreeMap::new(),
        },
    };
    for (id, doc) in docs.into_iter().enumerate() {
        let (group, kind) = (doc.group().to_owned(), doc.kind().to_owned());
        match (group.as_str(), kind.as_str()) {
            (_, catalog::KIND) => {
                built.has_catalog = true;
                read.add_catalog(&doc)?;
            }
            ("", "Pod") => {
                let pod = typed(doc)?;
                let source = Source { id, object: &pod };
                read.objects
                    .pods
                    .push((id, prepare_object(&source, Mode::Manifests)));
            }
            ("", "Node") => read.objects.nodes.push((id, typed(doc)?)),
            ("", "Namespace") => read.objects.namespaces.push((id, typed(doc)?)),
            ("", "PersistentVolumeClaim") => read.objects.pvcs.push((id, typed(doc)?)),
            ("", "PersistentVolume") => read.objects.pvs.push((id, typed(doc)?)),
            ("", "PodTemplate") => read.objects.pod_templates.push((id, typed(doc)?)),
            ("", "Service") if services => read.objects.services.push((id, typed(doc)?)),
            ("autoscaling.x-k8s.io", "CapacityBuffer") => {
                read.objects.capacity_buffers.push((id, typed(doc)?));
            }
            ("scheduling.k8s.io", "PriorityClass") => {
                read.objects.priority_classes.push((id, typed(doc)?));
            }
            ("storage.k8s.io", "CSINode") => read.objects.csi_nodes.push((id, typed(doc)?)),
            ("storage.k8s.io", "StorageClass") => {
                read.objects.storage_classes.push((id, typed(doc)?));
            }
            ("apps", "Deployment") => read.objects.deployments.push((id, typed(doc)?)),
            ("apps", "ReplicaSet") => read.objects.replica_sets.push((id, typed(doc)?)),
            ("apps", "StatefulSet") => read.objects.stateful_sets.push((id, typed(doc)?)),
            ("apps", "DaemonSet") => read.objects.daemon_sets.push((id, typed(doc)?)),
            ("batch", "Job") => read.objects.jobs.push((id, typed(doc)?)),
            ("policy", "PodDisruptionBudget") => read.objects.pdbs.push((id, typed(doc)?)),
            ("karpenter.sh", "NodePool") => read.objects.node_pools.push((id, typed(doc)?)),
            ("karpenter.sh", "NodeClaim") => {
                if doc
                    .value
                    .pointer("/spec/expireAfter")
                    .is_none_or(Value::is_null)
                {
                    read.objects.claims_expiring_with_pool.insert(id);
                }
                read.objects.node_claims.push((id, typed(doc)?));
            }
            ("karpenter.k8s.aws", "EC2NodeClass") => read.add_node_class(&doc, built)?,
            ("karpenter.sh", "NodeOverlay") => built.node_overlays.push((id, typed(doc)?)),
            // As `kubectl apply` refuses them: no kind, or a kind its API
            // group does not serve (a typo such as NodePoool).
            (_, "") => return Err(doc.error("kind", "is required")),
            (group, kind) => {
                if let Some(reason) = crate::kinds::unknown(group, doc.api_version(), kind) {
                    return Err(doc.error("kind", reason));
                }
                built.warnings.push(format!(
                    "{}: skipped: kind {kind} ({}) is not used for planning",
                    doc.origin,
                    doc.api_version()
                ));
            }
        }
    }
    Ok(read)
}

/// Builds the snapshot from (already upgraded) documents, at `now`;
/// CapacityBuffers add their virtual pods when `buffers` (the gate) is on;
/// pods without spread constraints get `scheduler_config`'s defaults.
pub fn build(
    docs: Vec<Document>,
    now: prost_types::Timestamp,
    buffers: bool,
    scheduler_config: &SchedulerConfig,
) -> Result<Built, InputError> {
    let mut built = Built {
        documents: docs.iter().map(|d| d.origin.to_string()).collect(),
        ..Built::default()
    };
    let Read {
        objects,
        catalog_types,
        classes,
        ..
    } = read_documents(docs, &mut built, !scheduler_config.is_empty())?;
    built.static_pools = objects
        .node_pools
        .iter()
        .filter(|(_, pool)| pool.spec.is_static())
        .map(|(_, pool)| pool.clone())
        .collect();
    let mut catalogs = Vec::new();
    if built.has_catalog {
        catalogs.push(sched::InstanceTypeCatalog {
            name: MANIFEST_CATALOG.to_string(),
            instance_types: catalog_types,
        });
    }
    let input = Objects {
        pods: Vec::new(),
        prepared_pods: sources(&objects.pods),
        nodes: sources(&objects.nodes),
        node_claims: sources(&objects.node_claims),
        node_pools: sources(&objects.node_pools),
        daemon_sets: sources(&objects.daemon_sets),
        pod_disruption_budgets: sources(&objects.pdbs),
        namespaces: sources(&objects.namespaces),
        priority_classes: sources(&objects.priority_classes),
        persistent_volume_claims: sources(&objects.pvcs),
        persistent_volumes: sources(&objects.pvs),
        storage_classes: sources(&objects.storage_classes),
        csi_nodes: sources(&objects.csi_nodes),
        deployments: sources(&objects.deployments),
        replica_sets: sources(&objects.replica_sets),
        stateful_sets: sources(&objects.stateful_sets),
        jobs: sources(&objects.jobs),
        capacity_buffers: if buffers {
            sources(&objects.capacity_buffers)
        } else {
            Vec::new()
        },
        pod_templates: sources(&objects.pod_templates),
        scheduler_config: Some(scheduler_config),
        services: sources(&objects.services),
        node_classes: classes,
        catalogs,
        pool_catalogs: BTreeMap::new(),
        now: Some(now),
        claims_expiring_with_pool: objects.claims_expiring_with_pool.clone(),
        // Repair policies are a provider's (its Info); offline there is none.
        repair_policies: None,
    };
    if !buffers && !objects.capacity_buffers.is_empty() {
        built.warnings.push(format!(
            "notice: {} CapacityBuffer document(s) ignored: the CapacityBuffer feature gate is off (--feature-gates CapacityBuffer=true)",
            objects.capacity_buffers.len()
        ));
    }
    let result = karpenter_snapshot::build(&input, Mode::Manifests).map_err(|e| InputError {
        location: built.documents[e.id].clone(),
        field: e.field,
        message: e.message,
    })?;
    built.snapshot = result.snapshot;
    built.origins = result.origins;
    let documents = &built.documents;
    built.warnings.extend(
        result
            .warnings
            .into_iter()
            .map(|w| format!("{}: {}", documents[w.id], w.message)),
    );
    Ok(built)
}

/// A manifest file's whole text to a snapshot: its documents read, older
/// Karpenter versions converted, the snapshot built at `now`.
pub fn from_text(name: &str, text: &str, now: prost_types::Timestamp) -> Result<Built, InputError> {
    let docs = crate::input::parse_source(&crate::input::Source {
        name: name.to_owned(),
        text: text.to_owned(),
    })?;
    let mut warnings = Vec::new();
    let docs = upgrade(docs, &mut warnings)?;
    let mut built = build(docs, now, false, &SchedulerConfig::default())?;
    warnings.append(&mut built.warnings);
    built.warnings = warnings;
    Ok(built)
}

/// A `Ready` condition that is `False` (no status: ready, as manifests from
/// a repository have none).
fn not_ready(value: &Value) -> bool {
    value
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("False")
        })
}
