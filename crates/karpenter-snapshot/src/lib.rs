//! Typed Kubernetes objects into the scheduler's `ClusterSnapshot`.
//!
//! ```text
//!   k8s-openapi Pod, Node, DaemonSet, PDB, Namespace, PriorityClass,   ┐
//!   PVC / PV / StorageClass, (Deployment, ReplicaSet, StatefulSet, Job) │  Objects ──build(mode)──▶ Built
//!   karpenter-api NodePool, NodeClaim; node-class readiness; catalogs  ┘                            ├─ snapshot (sched::ClusterSnapshot)
//!                                                                                                   ├─ origins (entry → source object)
//!                                                                                                   ├─ warnings
//!                                                                                                   └─ skipped (live mode: bad objects)
//! ```
//!
//! Two modes, because a file of manifests and a running cluster say
//! different things with the same objects:
//!
//! | | [`Mode::Manifests`] (`karpctl plan`) | [`Mode::Live`] (the adapter) |
//! |---|---|---|
//! | pending pod | any pod without `spec.nodeName` | `PodScheduled=False, reason=Unschedulable`, no node, not nominated, not gated, not terminal, not a DaemonSet's or a Node's |
//! | workloads | Deployments, ReplicaSets, StatefulSets, Jobs expand into `replicas` pods | never expanded: their pods are in the cluster |
//! | node initialized | the `karpenter.sh/initialized` label, else registered | the label or the NodeClaim's `Initialized` condition only |
//! | a bad object | the first one is the error | it is skipped and reported in [`Built::skipped`]; the rest is built |
//!
//! Node classes are whatever kind the provider serves: the caller says
//! which kind that is and which of its objects are ready.

#![forbid(unsafe_code)]

pub mod buffer;
mod fields;
mod node;
mod nodepool;
pub mod overlay;
mod pdb;
mod placed;
mod pod;
pub mod spread;
mod volumes;
mod workload;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_api::{CapacityBuffer, NodeClaim, NodePool};
use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

pub use fields::{FieldError, karpenter_requirements, karpenter_taints};
pub use nodepool::static_claim_plan;
pub use pdb::{disruptions_allowed, int_or_percent};
pub use placed::{ClusterRequest, PlacedPod, PlacedPods};
pub use pod::{
    DoNotDisrupt, PreparedObject, PreparedPod, do_not_disrupt, do_not_disrupt_of,
    parse_do_not_disrupt, prepare_object, provisionable,
};

/// How objects are read: see the [crate docs](crate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Manifests,
    Live,
}

/// An object and the caller's name for where it came from (a document of a
/// file, an index entry), so errors and snapshot entries can be traced back.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a, T> {
    pub id: usize,
    pub object: &'a T,
}

/// The node-class kind the provider serves and the readiness of each
/// object of it, by name.
#[derive(Clone, Debug, Default)]
pub struct NodeClasses {
    pub group: String,
    pub kind: String,
    /// Name → ready. A pool whose class is missing or not ready is not ready;
    /// in manifest mode a class that is not given counts as ready (manifests
    /// straight from a repository rarely carry every class).
    pub ready: BTreeMap<String, bool>,
}

/// Everything a snapshot is built from.
#[derive(Default)]
pub struct Objects<'a> {
    pub pods: Vec<Source<'a, Pod>>,
    /// Pods read beforehand by [`prepare_object`] (in this build's mode),
    /// finished here like `pods`.
    pub prepared_pods: Vec<Source<'a, PreparedObject>>,
    pub nodes: Vec<Source<'a, Node>>,
    pub node_claims: Vec<Source<'a, NodeClaim>>,
    pub node_pools: Vec<Source<'a, NodePool>>,
    pub daemon_sets: Vec<Source<'a, DaemonSet>>,
    pub pod_disruption_budgets: Vec<Source<'a, PodDisruptionBudget>>,
    pub namespaces: Vec<Source<'a, Namespace>>,
    pub priority_classes: Vec<Source<'a, PriorityClass>>,
    pub persistent_volume_claims: Vec<Source<'a, PersistentVolumeClaim>>,
    pub persistent_volumes: Vec<Source<'a, PersistentVolume>>,
    pub storage_classes: Vec<Source<'a, StorageClass>>,
    /// Each node's attachable-volume limits per CSI driver.
    pub csi_nodes: Vec<Source<'a, CSINode>>,
    /// Expanded into pods in manifest mode only.
    pub deployments: Vec<Source<'a, Deployment>>,
    pub replica_sets: Vec<Source<'a, ReplicaSet>>,
    pub stateful_sets: Vec<Source<'a, StatefulSet>>,
    pub jobs: Vec<Source<'a, Job>>,
    /// CapacityBuffers (given only with the `CapacityBuffer` gate on): each
    /// ready one adds its virtual pods to the pending pods.
    pub capacity_buffers: Vec<Source<'a, CapacityBuffer>>,
    /// The PodTemplates buffers name.
    pub pod_templates: Vec<Source<'a, PodTemplate>>,
    /// The scheduler's default topology spread constraints
    /// (`--scheduler-config`), applied to pods without constraints of their
    /// own, with selectors deduced from `services` and the pods' ReplicaSets
    /// and StatefulSets ([`spread`]).
    pub scheduler_config: Option<&'a spread::SchedulerConfig>,
    /// Read only with default constraints configured.
    pub services: Vec<Source<'a, Service>>,
    pub node_classes: NodeClasses,
    /// The provider's repair policies, when repair is planned (the
    /// `NodeRepair` gate on, not `--legacy-node-repair`): each node's
    /// conditions are resolved against them at [`Objects::now`].
    pub repair_policies: Option<&'a karpenter_api::repair::Policies>,
    /// Instance types; every pool uses the one named in
    /// [`Objects::pool_catalogs`], else the first.
    pub catalogs: Vec<sched::InstanceTypeCatalog>,
    /// Pool name → catalog name.
    pub pool_catalogs: BTreeMap<String, String>,
    /// The time decisions are made at (ages, expiry, do-not-disrupt
    /// durations).
    pub now: Option<prost_types::Timestamp>,
    /// Manifest mode: the NodeClaims (by source id) whose manifest gives no
    /// `spec.expireAfter`; their expiry follows their pool's template, as
    /// Karpenter copies it at creation.
    pub claims_expiring_with_pool: BTreeSet<usize>,
}

/// An object that could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name:?}: {field}: {message}", name = qualified(namespace, name))]
pub struct ObjectError {
    /// The [`Source::id`] of the object.
    pub id: usize,
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// The field at fault (`spec.containers[0].resources.requests.cpu`);
    /// empty for the object as a whole.
    pub field: String,
    pub message: String,
}

impl ObjectError {
    /// The error `e` of the object `kind` `namespace/name`, source `id`.
    pub(crate) fn at(
        id: usize,
        kind: &'static str,
        namespace: &str,
        name: &str,
        e: crate::fields::FieldError,
    ) -> Self {
        Self {
            id,
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            field: e.field,
            message: e.message,
        }
    }
}

/// The name every object must have, and the reporter of errors in the object `kind`
/// `namespace/name` (source `id`): how each object reader starts.
pub(crate) fn named(
    id: usize,
    kind: &'static str,
    namespace: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Result<(String, impl Fn(fields::FieldError) -> ObjectError + use<>), ObjectError> {
    let name = meta.name.clone().unwrap_or_default();
    let error = {
        let (namespace, name) = (namespace.to_owned(), name.clone());
        move |e| ObjectError::at(id, kind, &namespace, &name, e)
    };
    if name.is_empty() {
        return Err(error(fields::FieldError::new(
            "metadata.name",
            "is required",
        )));
    }
    Ok((name, error))
}

fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Which source object each snapshot entry came from.
#[derive(Clone, Debug, Default)]
pub struct Origins {
    pub pending_pods: Vec<usize>,
    pub nodes: Vec<usize>,
    pub node_pools: Vec<usize>,
    pub daemon_sets: Vec<usize>,
    pub pod_disruption_budgets: Vec<usize>,
}

impl Origins {
    /// The source of the entry a scheduler field path names
    /// (`cluster.pending_pods[3].containers[0]` → the pod's source).
    pub fn locate(&self, field: &str) -> Option<usize> {
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
        list.get(index).copied()
    }
}

/// A note about the input that does not stop the build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub id: usize,
    pub message: String,
}

/// The snapshot and what was learned building it.
#[derive(Debug, Default)]
pub struct Built {
    pub snapshot: sched::ClusterSnapshot,
    /// Pods not yet in `snapshot` ([`build_placed`]); empty after [`build`].
    pub pods: PlacedPods,
    pub origins: Origins,
    pub warnings: Vec<Warning>,
    /// Live mode: objects left out because they could not be understood.
    pub skipped: Vec<ObjectError>,
}

/// Builds the snapshot. In manifest mode the first object that cannot be
/// understood is the error; in live mode it is skipped and reported.
pub fn build(objects: &Objects<'_>, mode: Mode) -> Result<Built, ObjectError> {
    let mut built = build_placed(objects, mode)?;
    built.materialize();
    Ok(built)
}

/// [`build`], with the pods left in [`Built::pods`]: for a caller that
/// encodes the snapshot ([`Built::encode_request`]) and keeps its pods
/// prepared, so they are not copied.
pub fn build_placed(objects: &Objects<'_>, mode: Mode) -> Result<Built, ObjectError> {
    let mut builder = Builder {
        mode,
        built: Built::default(),
        unbound_daemon_pods: Vec::new(),
    };
    builder.built.snapshot.now = objects.now;
    builder.built.snapshot.instance_type_catalogs = objects.catalogs.clone();
    let context = pod::PodContext::new(objects, &mut builder)?;
    let mut namespaces = builder.namespaces(objects)?;

    let mut nodes = builder.add_nodes(objects)?;
    let mut pool_expiries = Vec::new();
    for source in &objects.node_claims {
        if node::foreign_claim(source.object, &objects.node_classes, mode) {
            node::disown(source.object, &nodes, &mut builder.built);
            continue;
        }
        let from_pool = objects.claims_expiring_with_pool.contains(&source.id);
        let claim = node::node_claim(source, mode, from_pool, &mut nodes, &mut builder.built);
        if let Some(expiry) = builder.keep(claim)?.flatten() {
            pool_expiries.push(expiry);
        }
    }
    for source in &objects.node_pools {
        let pool = nodepool::node_pool(source, &objects.node_classes, mode);
        if let Some(mut pool) = builder.keep(pool)? {
            pool.instance_type_catalog = objects
                .pool_catalogs
                .get(&pool.name)
                .cloned()
                .unwrap_or_default();
            builder.add_pool(source, pool)?;
        }
    }
    node::apply_pool_expiries(&mut builder.built.snapshot, pool_expiries);
    node::apply_volume_limits(&mut builder.built.snapshot, &objects.csi_nodes);

    let mut seen_pods = BTreeSet::new();
    for source in &objects.pods {
        let prepared = pod::prepare_object(source, mode);
        builder.place_prepared(source.id, &prepared, &context, &nodes, &mut seen_pods)?;
    }
    for source in &objects.prepared_pods {
        builder.place_prepared(source.id, source.object, &context, &nodes, &mut seen_pods)?;
    }
    if mode == Mode::Manifests {
        for (id, pod) in workload::expand(objects, &context)? {
            builder.place_pod(id, pod.into(), &nodes, &mut seen_pods, "workload")?;
        }
    }
    builder.place_buffers(objects, &context, &nodes, &mut seen_pods)?;
    builder.add_daemon_sets(objects, &context)?;
    let mut given = Vec::new();
    for source in &objects.pod_disruption_budgets {
        if let Some((budget, status)) = builder.keep(pdb::pdb(source))? {
            builder.built.snapshot.pod_disruption_budgets.push(budget);
            builder.built.origins.pod_disruption_budgets.push(source.id);
            given.push(status);
        }
    }
    pdb::fill_status(
        &mut builder.built.snapshot.pod_disruption_budgets,
        builder.built.pods.bases(),
        &given,
    );

    for pod in builder.all_pods() {
        namespaces.entry(pod).or_default();
    }
    for (name, mut ns_labels) in namespaces {
        ns_labels.insert(labels::NAMESPACE_NAME.to_string(), name.clone());
        builder.built.snapshot.namespaces.push(sched::Namespace {
            name,
            labels: ns_labels,
        });
    }
    Ok(builder.built)
}

impl Builder {
    /// The nodes, each with its repair state when repair policies are given.
    fn add_nodes(&mut self, objects: &Objects<'_>) -> Result<node::Nodes, ObjectError> {
        let mut nodes = node::Nodes::default();
        // Each node's reboots for repair, kept on its claim.
        let reboot_history = if objects.repair_policies.is_some() {
            node::reboot_history(&objects.node_claims)
        } else {
            BTreeMap::new()
        };
        for source in &objects.nodes {
            let repair = objects.repair_policies.map(|policies| node::RepairInput {
                policies,
                now: objects.now.map_or(0, |t| t.seconds),
                history: &reboot_history,
            });
            if let Some(state) = self.keep(node::node(source, self.mode, repair))? {
                nodes.add(&mut self.built, source.id, state)?;
            }
        }
        Ok(nodes)
    }

    /// The DaemonSets, each with the newest of its running pods (whose
    /// spec is what a new node would get) once the pods are placed.
    fn add_daemon_sets(
        &mut self,
        objects: &Objects<'_>,
        context: &pod::PodContext,
    ) -> Result<(), ObjectError> {
        let mut daemon_sets = Vec::new();
        {
            let placed = self.built.pods.on_nodes.iter().flatten();
            let running = workload::newest_daemon_pods(placed.chain(&self.unbound_daemon_pods));
            for source in &objects.daemon_sets {
                let meta = &source.object.metadata;
                let namespace = pod::namespace_of(meta);
                let name = meta.name.as_deref().unwrap_or_default();
                let pod = running
                    .get(&(namespace.as_str(), name))
                    .map(|placed| placed.to_pod());
                daemon_sets.push((source.id, workload::daemon_set(source, context, pod)));
            }
        }
        for (id, ds) in daemon_sets {
            if let Some(ds) = self.keep(ds)? {
                self.built.snapshot.daemon_sets.push(ds);
                self.built.origins.daemon_sets.push(id);
            }
        }
        Ok(())
    }
}

/// The state of one build.
pub(crate) struct Builder {
    mode: Mode,
    built: Built,
    /// DaemonSet pods without a node: not provisioned for, but a candidate
    /// for the newest pod its DaemonSet counts as.
    unbound_daemon_pods: Vec<PlacedPod>,
}

impl Builder {
    /// `Ok(Some)` for a good object; a bad one is the error in manifest mode
    /// and `Ok(None)` (recorded as skipped) in live mode.
    pub(crate) fn keep<T>(
        &mut self,
        result: Result<T, ObjectError>,
    ) -> Result<Option<T>, ObjectError> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(error) if self.mode == Mode::Live => {
                self.built.skipped.push(error);
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    pub(crate) fn warn(&mut self, id: usize, message: String) {
        self.built.warnings.push(Warning { id, message });
    }

    fn namespaces(
        &mut self,
        objects: &Objects<'_>,
    ) -> Result<BTreeMap<String, BTreeMap<String, String>>, ObjectError> {
        let mut out = BTreeMap::new();
        for source in &objects.namespaces {
            let meta = &source.object.metadata;
            let name = meta.name.clone().unwrap_or_default();
            if name.is_empty() {
                let error = ObjectError {
                    id: source.id,
                    kind: "Namespace",
                    namespace: String::new(),
                    name,
                    field: "metadata.name".into(),
                    message: "is required".into(),
                };
                self.keep::<()>(Err(error))?;
                continue;
            }
            out.insert(name, meta.labels.clone().unwrap_or_default());
        }
        Ok(out)
    }

    fn add_pool(
        &mut self,
        source: &Source<'_, NodePool>,
        pool: sched::NodePool,
    ) -> Result<(), ObjectError> {
        if self
            .built
            .snapshot
            .node_pools
            .iter()
            .any(|p| p.name == pool.name)
        {
            let error = ObjectError {
                id: source.id,
                kind: "NodePool",
                namespace: String::new(),
                name: pool.name.clone(),
                field: "metadata.name".into(),
                message: format!("node pool {:?} is defined twice", pool.name),
            };
            self.keep::<()>(Err(error))?;
            return Ok(());
        }
        self.built.snapshot.node_pools.push(pool);
        self.built.origins.node_pools.push(source.id);
        Ok(())
    }

    /// A pod goes to its node, or is pending.
    /// Finishes a prepared Pod object and places it.
    fn place_prepared(
        &mut self,
        id: usize,
        prepared: &PreparedObject,
        context: &pod::PodContext,
        nodes: &node::Nodes,
        seen: &mut BTreeSet<(String, String)>,
    ) -> Result<(), ObjectError> {
        let prepared = match prepared {
            Ok(Some(prepared)) => prepared,
            Ok(None) => return Ok(()),
            Err(error) => {
                let error = ObjectError {
                    id,
                    ..error.clone()
                };
                return self.keep::<()>(Err(error)).map(|_| ());
            }
        };
        let finished = pod::finish_object(id, prepared, context);
        match self.keep(finished)? {
            Some(pod) => self.place_pod(id, pod, nodes, seen, "Pod"),
            None => Ok(()),
        }
    }

    fn place_pod(
        &mut self,
        id: usize,
        placed: PlacedPod,
        nodes: &node::Nodes,
        seen: &mut BTreeSet<(String, String)>,
        what: &str,
    ) -> Result<(), ObjectError> {
        let pod = placed.base();
        if !seen.insert((pod.namespace.clone(), pod.name.clone())) {
            let error = ObjectError {
                id,
                kind: "Pod",
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                field: "metadata.name".into(),
                message: if what == "workload" || what == "CapacityBuffer" {
                    format!(
                        "pod {}/{} (expanded from this {what}) is defined twice",
                        pod.namespace, pod.name
                    )
                } else {
                    format!("pod {}/{} is defined twice", pod.namespace, pod.name)
                },
            };
            return self.keep::<()>(Err(error)).map(|_| ());
        }
        if pod.node_name.is_empty() && pod.owner_kind == "DaemonSet" {
            if self.mode == Mode::Manifests {
                self.warn(
                    id,
                    "a DaemonSet's pod is not provisioned for: its DaemonSet counts as overhead on every node it selects".into(),
                );
            }
            self.unbound_daemon_pods.push(placed);
        } else if pod.node_name.is_empty() {
            self.built.pods.pending.push(placed);
            self.built.origins.pending_pods.push(id);
        } else if let Some(i) = nodes.index_of(&pod.node_name) {
            self.built.pods.push_on_node(i, placed);
        } else if self.mode == Mode::Manifests {
            self.warn(
                id,
                format!(
                    "spec.nodeName: node {:?} is not in the input; the pod is ignored",
                    pod.node_name
                ),
            );
        }
        Ok(())
    }

    /// Every ready buffer's virtual pods, pending. A buffer that is not
    /// ready adds none (in manifest mode, with a warning saying why).
    fn place_buffers(
        &mut self,
        objects: &Objects<'_>,
        context: &pod::PodContext,
        nodes: &node::Nodes,
        seen: &mut BTreeSet<(String, String)>,
    ) -> Result<(), ObjectError> {
        if objects.capacity_buffers.is_empty() {
            return Ok(());
        }
        let workloads = buffer::Workloads::from_objects(objects);
        let mut room = buffer::MAX_VIRTUAL_PODS;
        for source in &objects.capacity_buffers {
            let object = source.object;
            let resolved = match buffer::resolve(object, &workloads) {
                buffer::Resolution::Ready(resolved) => resolved,
                buffer::Resolution::NotReady { reason, message } => {
                    if self.mode == Mode::Manifests {
                        self.warn(
                            source.id,
                            format!("not ready for provisioning ({reason}): {message}"),
                        );
                    }
                    continue;
                }
            };
            if self.mode == Mode::Manifests && resolved.replicas > room {
                self.warn(
                    source.id,
                    format!(
                        "{} replicas: planned with {room} (at most {} virtual pods over all buffers)",
                        resolved.replicas,
                        buffer::MAX_VIRTUAL_PODS
                    ),
                );
            }
            let (namespace, name) = (
                pod::namespace_of(&object.metadata),
                object.metadata.name.clone().unwrap_or_default(),
            );
            let pods = buffer::virtual_pods(object, &resolved, room, context)
                .map_err(|e| ObjectError::at(source.id, "CapacityBuffer", &namespace, &name, e));
            let pods = self.keep(pods)?.unwrap_or_default();
            room = room.saturating_sub(i32::try_from(pods.len()).unwrap_or(i32::MAX));
            for pod in pods {
                self.place_pod(
                    source.id,
                    PlacedPod::from(pod),
                    nodes,
                    seen,
                    "CapacityBuffer",
                )?;
            }
        }
        Ok(())
    }

    fn all_pods(&self) -> Vec<String> {
        self.built
            .pods
            .bases()
            .map(|p| p.namespace.clone())
            .chain(
                self.built
                    .snapshot
                    .daemon_sets
                    .iter()
                    .map(|d| d.namespace.clone()),
            )
            .collect()
    }
}

/// Fills in what depends on the catalogs: node prices, capacity of
/// in-flight claims that report none, and the volume limits of nodes no
/// CSINode gives (from their instance type). A node's
/// type is looked up in its pool's catalog first (overlaid prices apply to
/// the nodes a pool already has), then in the first catalog that has it.
pub fn fill_from_catalogs(snapshot: &mut sched::ClusterSnapshot) {
    let by_catalog: BTreeMap<&str, BTreeMap<&str, &types::InstanceType>> = snapshot
        .instance_type_catalogs
        .iter()
        .map(|c| {
            let types = c.instance_types.iter().map(|it| (it.name.as_str(), it));
            (c.name.as_str(), types.collect())
        })
        .collect();
    let mut first: BTreeMap<&str, &types::InstanceType> = BTreeMap::new();
    for it in snapshot
        .instance_type_catalogs
        .iter()
        .flat_map(|c| c.instance_types.iter())
    {
        first.entry(it.name.as_str()).or_insert(it);
    }
    let pool_catalog: BTreeMap<&str, &str> = snapshot
        .node_pools
        .iter()
        .map(|p| (p.name.as_str(), p.instance_type_catalog.as_str()))
        .collect();
    let mut updates = Vec::new();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        let name = node.instance_type.as_str();
        let in_pool = pool_catalog
            .get(node.node_pool.as_str())
            .and_then(|catalog| by_catalog.get(catalog))
            .and_then(|types| types.get(name));
        let Some(it) = in_pool.or_else(|| first.get(name)) else {
            continue;
        };
        let price = it
            .offerings
            .iter()
            .find(|o| o.zone == node.zone && o.capacity_type == node.capacity_type)
            .map(|o| o.price);
        let allocatable = types::ResourceList {
            quantities: karpenter_proto::convert::allocatable(it),
        };
        let limits = it.volume_attachment_limits.clone();
        updates.push((i, price, it.capacity.clone(), allocatable, limits));
    }
    for (i, price, capacity, allocatable, limits) in updates {
        let node = &mut snapshot.nodes[i];
        // A CSINode's own count wins over the type's.
        if node.volume_limits.is_empty() {
            node.volume_limits = limits;
        }
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
