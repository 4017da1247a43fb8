//! The cluster index: every object the adapter reasons about, kept from
//! watch events by one task, read by controllers as consistent snapshots.
//!
//! ```text
//!   watcher(Pod) ─┐                          ┌─▶ Arc<Index> (snapshot) ─▶ provisioner
//!   watcher(Node) ├─ Update ─▶ Index::apply ─┤                           ─▶ lifecycle, termination, ...
//!   ...          ─┘   (one owner task)       └─▶ what changed (kinds)
//! ```
//!
//! Each kind is a [`Store`]: a persistent (structurally shared) ordered
//! map, so a snapshot is a handful of reference counts, and a change the
//! owner makes while snapshots are alive copies the few tree nodes on the
//! path to the key, not the map: every reconcile in flight shares one
//! cluster state, and a burst of them costs what changed, not a copy of
//! the index each. Relists replace a store atomically (`Init` ..
//! `InitDone`), as a reflector does. Nothing here does I/O, so
//! the index is tested with synthetic events.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use imbl::OrdMap;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::{CapacityBuffer, NodeClaim, NodeOverlay, NodePool};
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};

pub use crate::state::pod_entry::PodEntry;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

/// How a store keeps a watched object: most kinds as they are (slimmed),
/// Pods as a [`PodEntry`]. The watcher tasks convert, so what waits in the
/// owner's channel is already small.
pub trait Entry: Sized {
    type Object: Resource;
    fn keep(object: Self::Object) -> Self;
    fn metadata(&self) -> &ObjectMeta;
}

impl<K: Resource + Clone> Entry for K {
    type Object = K;
    fn keep(object: K) -> K {
        slim(object)
    }
    fn metadata(&self) -> &ObjectMeta {
        self.meta()
    }
}

impl Entry for PodEntry {
    type Object = Pod;
    fn keep(object: Pod) -> PodEntry {
        PodEntry::new(slim(object))
    }
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// A watch event with its object as a store keeps it.
pub fn keep<E: Entry>(event: Event<E::Object>) -> Event<E> {
    match event {
        Event::Apply(object) => Event::Apply(E::keep(object)),
        Event::Delete(object) => Event::Delete(E::keep(object)),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(E::keep(object)),
        Event::InitDone => Event::InitDone,
    }
}

/// One kind's objects.
#[derive(Debug)]
pub struct Store<K> {
    objects: OrdMap<Key, Arc<K>>,
    /// Objects of a relist in progress, swapped in at `InitDone`.
    relist: Option<OrdMap<Key, Arc<K>>>,
    /// The first list has completed.
    synced: bool,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Self {
            objects: OrdMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        // A snapshot never carries a relist in progress.
        Self {
            objects: self.objects.clone(),
            relist: None,
            synced: self.synced,
        }
    }
}

fn key<K: Entry>(object: &K) -> Key {
    let meta = object.metadata();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Drops what the adapter never reads and what makes objects large.
fn slim<K: Resource>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    if let Some(annotations) = object.meta_mut().annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    object
}

impl<K: Entry> Store<K> {
    /// Applies one watch event; whether the visible objects changed.
    pub fn apply(&mut self, event: Event<K>) -> bool {
        match event {
            Event::Apply(object) => {
                self.objects.insert(key(&object), Arc::new(object));
                true
            }
            Event::Delete(object) => self.objects.remove(&key(&object)).is_some(),
            Event::Init => {
                self.relist = Some(OrdMap::new());
                false
            }
            Event::InitApply(object) => {
                self.relist
                    .get_or_insert_with(OrdMap::new)
                    .insert(key(&object), Arc::new(object));
                false
            }
            Event::InitDone => {
                self.objects = self.relist.take().unwrap_or_default();
                self.synced = true;
                true
            }
        }
    }
}

impl<K> Store<K> {
    /// Removes one object outside of a watch event; whether it was there.
    fn remove(&mut self, key: &Key) -> bool {
        self.objects.remove(key).is_some()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Arc<K>> {
        self.objects.get(&(namespace.to_owned(), name.to_owned()))
    }

    /// A cluster-scoped object by name.
    pub fn named(&self, name: &str) -> Option<&Arc<K>> {
        self.get("", name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<K>> {
        self.objects.values()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn synced(&self) -> bool {
        self.synced
    }
}

/// Which kinds an update touched, so controllers wake only for theirs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changed {
    pub pods: bool,
    pub nodes: bool,
    pub node_pools: bool,
    pub node_claims: bool,
    pub node_classes: bool,
    pub other: bool,
}

impl Changed {
    pub fn any(&self) -> bool {
        self.pods
            || self.nodes
            || self.node_pools
            || self.node_claims
            || self.node_classes
            || self.other
    }

    pub fn merge(&mut self, other: Changed) {
        self.pods |= other.pods;
        self.nodes |= other.nodes;
        self.node_pools |= other.node_pools;
        self.node_claims |= other.node_claims;
        self.node_classes |= other.node_classes;
        self.other |= other.other;
    }
}

/// Lookups derived from the stores, built on first use in a snapshot and
/// dropped when their kind changes.
#[derive(Clone, Debug, Default)]
struct Lookups {
    nodes_by_provider_id: OnceLock<Arc<HashMap<String, Vec<Arc<Node>>>>>,
    claims_by_provider_id: OnceLock<Arc<HashMap<String, Vec<Arc<NodeClaim>>>>>,
    pods_by_node: OnceLock<Arc<HashMap<String, Vec<Arc<PodEntry>>>>>,
}

/// Declares the watched kinds once: each line gives the [`Update`]
/// variant, the [`Index`] store, what a store keeps, which [`Changed`] flag
/// a change raises (so which controllers wake), and how it is watched
/// (`typed`: a Kubernetes kind; `node_class`: the provider's node-class
/// kind, known only at run time; `when WANT`: a typed kind watched only
/// when the settings need it, [`Watching`]'s `WANT`). From it come the
/// `Update` enum, the `Index` fields, applying an update, `listed`, and the
/// watches started.
macro_rules! watched_kinds {
    ($($(#[$doc:meta])* $variant:ident => $field:ident: $entry:ty, wakes $wake:ident, $($how:ident)+;)*) => {
        /// A watch event of one kind, or the adapter's own write told ahead
        /// of the watch. (Pods and Nodes are large; an update is moved once,
        /// into the owner's channel, so boxing would only add an allocation
        /// per event.)
        #[derive(Debug)]
        #[allow(clippy::large_enum_variant)]
        pub enum Update {
            $($variant(Event<$entry>),)*
            /// A NodeClaim this adapter has just created, as the API answered the
            /// create: shown before its watch event arrives (see
            /// [`crate::state::watch::Writes`]), so planning counts it at once.
            NodeClaimCreated(NodeClaim),
            /// Takes a created claim back out if the watch never showed it.
            NodeClaimForgotten(Key),
        }

        /// Every object the adapter reasons about.
        #[derive(Clone, Debug, Default)]
        pub struct Index {
            lookups: Lookups,
            $($(#[$doc])* pub $field: Store<$entry>,)*
        }

        impl Index {
            /// Applies a watch event to its store; what it changed.
            fn apply_watched(&mut self, update: Update) -> Changed {
                let mut changed = Changed::default();
                match update {
                    $(Update::$variant(e) => changed.$wake = self.$field.apply(e),)*
                    Update::NodeClaimCreated(claim) => {
                        changed.node_claims =
                            self.node_claims.apply(Event::Apply(Entry::keep(claim)));
                    }
                    Update::NodeClaimForgotten(key) => {
                        changed.node_claims = self.node_claims.remove(&key);
                    }
                }
                changed
            }

            /// Every store has completed its first list.
            pub fn listed(&self) -> bool {
                true $(&& self.$field.synced())*
            }

            /// The end of a first list, for every kind (tests build indexes
            /// that look listed from it).
            #[cfg(test)]
            fn every_init_done() -> Vec<Update> {
                vec![$(Update::$variant(Event::InitDone),)*]
            }
        }

        /// Starts one watcher per kind, each forwarding to `updates`.
        pub(crate) fn start_watches(
            client: &kube::Client,
            node_class: &kube::api::ApiResource,
            watching: &Watching<'_>,
            updates: &tokio::sync::mpsc::Sender<Update>,
            tasks: &mut tokio::task::JoinSet<()>,
        ) {
            $(watched_kinds!(@watch $($how)+, $entry, $variant, client, node_class, watching, updates, tasks);)*
        }
    };
    (@watch when $want:ident, $entry:ty, $variant:ident, $client:ident, $class:ident, $watching:ident, $updates:ident, $tasks:ident) => {
        // A kind only some settings need (an alpha kind's CRD may not even
        // be installed) is watched only then; otherwise its store is listed
        // and empty.
        if $watching.$want() {
            watched_kinds!(@watch typed, $entry, $variant, $client, $class, $watching, $updates, $tasks);
        } else {
            let updates = $updates.clone();
            $tasks.spawn(async move {
                // Only fails once the owner has stopped, with the adapter.
                let _ = updates.send(Update::$variant(Event::InitDone)).await;
            });
        }
    };
    (@watch $how:ident, $entry:ty, $variant:ident, $client:ident, $class:ident, $watching:ident, $updates:ident, $tasks:ident) => {
        crate::state::watch::spawn_watch::<$entry>(
            $tasks,
            watched_kinds!(@api $how, $client, $class),
            $updates.clone(),
            Update::$variant,
        );
    };
    (@api typed, $client:ident, $class:ident) => {
        kube::Api::all($client.clone())
    };
    (@api node_class, $client:ident, $class:ident) => {
        kube::Api::all_with($client.clone(), $class)
    };
}

watched_kinds! {
    Pod => pods: PodEntry, wakes pods, typed;
    Node => nodes: Node, wakes nodes, typed;
    NodePool => node_pools: NodePool, wakes node_pools, typed;
    NodeClaim => node_claims: NodeClaim, wakes node_claims, typed;
    /// Objects of the node-class kind the provider serves.
    NodeClass => node_classes: DynamicObject, wakes node_classes, node_class;
    DaemonSet => daemon_sets: DaemonSet, wakes other, typed;
    PodDisruptionBudget => pod_disruption_budgets: PodDisruptionBudget, wakes other, typed;
    Namespace => namespaces: Namespace, wakes other, typed;
    PriorityClass => priority_classes: PriorityClass, wakes other, typed;
    PersistentVolumeClaim => persistent_volume_claims: PersistentVolumeClaim, wakes other, typed;
    PersistentVolume => persistent_volumes: PersistentVolume, wakes other, typed;
    StorageClass => storage_classes: StorageClass, wakes other, typed;
    CsiNode => csi_nodes: CSINode, wakes other, typed;
    /// NodeOverlays (gate `NodeOverlay`): they change the pools' catalogs.
    NodeOverlay => node_overlays: NodeOverlay, wakes node_pools, when node_overlays;
    /// CapacityBuffers and what they name (gate `CapacityBuffer`): their
    /// virtual pods are planned with the pending pods.
    CapacityBuffer => capacity_buffers: CapacityBuffer, wakes other, when capacity_buffers;
    PodTemplate => pod_templates: PodTemplate, wakes other, when capacity_buffers;
    Deployment => deployments: Deployment, wakes other, when capacity_buffers;
    /// Buffers' workloads, and the controllers default spread constraints
    /// deduce selectors from.
    StatefulSet => stateful_sets: StatefulSet, wakes other, when workload_owners;
    ReplicaSet => replica_sets: ReplicaSet, wakes other, when workload_owners;
    /// Services, for default spread constraints' selectors.
    Service => services: Service, wakes other, when default_spread;
}

/// Which of the optional kinds the settings need watched.
pub struct Watching<'a> {
    pub gates: &'a karpenter_core::feature_gates::FeatureGates,
    /// `--scheduler-config` sets default topology spread constraints.
    pub default_spread: bool,
}

impl Watching<'_> {
    fn node_overlays(&self) -> bool {
        self.gates
            .enabled(karpenter_core::feature_gates::NODE_OVERLAY)
    }

    fn capacity_buffers(&self) -> bool {
        self.gates
            .enabled(karpenter_core::feature_gates::CAPACITY_BUFFER)
    }

    fn default_spread(&self) -> bool {
        self.default_spread
    }

    fn workload_owners(&self) -> bool {
        self.capacity_buffers() || self.default_spread
    }
}

impl Index {
    pub fn apply(&mut self, update: Update) -> Changed {
        let changed = self.apply_watched(update);
        if changed.nodes {
            self.lookups.nodes_by_provider_id = OnceLock::new();
        }
        if changed.node_claims {
            self.lookups.claims_by_provider_id = OnceLock::new();
        }
        if changed.pods {
            self.lookups.pods_by_node = OnceLock::new();
        }
        changed
    }

    /// Karpenter's cluster-state "synced": listed, and every NodeClaim of
    /// the provider's node-class kind has launched (has a provider ID), so
    /// in-flight capacity is known and a batch cannot launch twice for the
    /// same pods.
    pub fn synced(&self, node_class_kind: &str) -> bool {
        self.listed()
            && self.node_claims.iter().all(|claim| {
                claim.spec.node_class_ref.kind != node_class_kind
                    || claim.provider_id().is_some_and(|id| !id.is_empty())
                    || claim.meta().deletion_timestamp.is_some()
            })
    }

    /// The NodeClaims launched as `provider_id` (one, unless something
    /// is badly wrong).
    pub fn claims_for_provider_id(&self, provider_id: &str) -> &[Arc<NodeClaim>] {
        let map = self.lookups.claims_by_provider_id.get_or_init(|| {
            let mut map: HashMap<String, Vec<Arc<NodeClaim>>> = HashMap::new();
            for claim in self.node_claims.iter() {
                if let Some(id) = claim.provider_id().filter(|id| !id.is_empty()) {
                    map.entry(id.to_owned()).or_default().push(claim.clone());
                }
            }
            Arc::new(map)
        });
        map.get(provider_id).map_or(&[], Vec::as_slice)
    }

    /// The NodeClaims an interruption names with `provider_id`: those
    /// launched as it, or, when it is partial (a provider that could not
    /// learn every part of it, as AWS's zone when describing the instance
    /// failed), those whose provider ID names the same instance, as the
    /// provider proto's `InterruptionEvent` lets a provider send.
    pub fn claims_for_interrupted(&self, provider_id: &str) -> Vec<Arc<NodeClaim>> {
        let exact = self.claims_for_provider_id(provider_id);
        if !exact.is_empty() {
            return exact.to_vec();
        }
        self.node_claims
            .iter()
            .filter(|claim| names_instance_of(provider_id, claim))
            .cloned()
            .collect()
    }

    /// The NodeClaim launched as `provider_id`, when exactly one is.
    pub fn claim_for_provider_id(&self, provider_id: &str) -> Option<&Arc<NodeClaim>> {
        match self.claims_for_provider_id(provider_id) {
            [claim] => Some(claim),
            _ => None,
        }
    }

    /// The NodeClaim of a Node (by its `spec.providerID`), when exactly
    /// one claim has it.
    pub fn claim_of(&self, node: &Node) -> Option<&Arc<NodeClaim>> {
        let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
        self.claim_for_provider_id(provider_id)
    }

    /// The Nodes whose `spec.providerID` is `provider_id`.
    pub fn nodes_for_provider_id(&self, provider_id: &str) -> &[Arc<Node>] {
        let map = self.lookups.nodes_by_provider_id.get_or_init(|| {
            let mut map: HashMap<String, Vec<Arc<Node>>> = HashMap::new();
            for node in self.nodes.iter() {
                if let Some(id) = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .filter(|id| !id.is_empty())
                {
                    map.entry(id.to_owned()).or_default().push(node.clone());
                }
            }
            Arc::new(map)
        });
        map.get(provider_id).map_or(&[], Vec::as_slice)
    }

    /// The Node of a claim, when exactly one has its provider ID.
    pub fn node_of(&self, claim: &NodeClaim) -> Option<&Arc<Node>> {
        match self.nodes_for_provider_id(claim.provider_id().unwrap_or_default()) {
            [node] => Some(node),
            _ => None,
        }
    }

    /// How many of the pods bound to `node` must move when it goes.
    pub fn reschedulable_pods_on(&self, node: &str) -> usize {
        self.pods_on(node)
            .iter()
            .filter(|p| p.is_reschedulable())
            .count()
    }

    /// How many pods must move when `claim`'s node goes (none before it
    /// has a node).
    pub fn reschedulable_pods_of(&self, claim: &NodeClaim) -> usize {
        self.node_of(claim)
            .map_or(0, |node| self.reschedulable_pods_on(&node.name_any()))
    }

    /// Pods bound to `node`.
    pub fn pods_on(&self, node: &str) -> &[Arc<PodEntry>] {
        let map = self.lookups.pods_by_node.get_or_init(|| {
            let mut map: HashMap<String, Vec<Arc<PodEntry>>> = HashMap::new();
            for pod in self.pods.iter() {
                if let Some(name) = pod.node_name.as_deref() {
                    map.entry(name.to_owned()).or_default().push(pod.clone());
                }
            }
            Arc::new(map)
        });
        map.get(node).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
impl Index {
    /// `index` with every store's first list completed.
    pub(crate) fn listed_for_tests(mut index: Index) -> Index {
        for update in Self::every_init_done() {
            index.apply(update);
        }
        index
    }
}

/// The instance a provider ID names: its last path segment
/// (`aws:///us-west-2a/i-0abc` and `aws:///i-0abc` name `i-0abc`).
pub fn instance_id(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or_default()
}

/// Whether an interruption's `provider_id` names the claim's instance:
/// the same provider ID, or a partial one naming the same instance.
pub fn names_instance_of(provider_id: &str, claim: &NodeClaim) -> bool {
    let Some(launched) = claim.provider_id().filter(|id| !id.is_empty()) else {
        return false;
    };
    let instance = instance_id(provider_id);
    launched == provider_id || (!instance.is_empty() && instance_id(launched) == instance)
}

/// Name of an object, for logs and keys.
pub fn name_of<K: Resource>(object: &K) -> String {
    object.name_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::node_claim;
    use serde_json::json;

    /// A pod as a watcher task hands it over.
    fn pod(name: &str, node: Option<&str>) -> PodEntry {
        Entry::keep(
            serde_json::from_value::<Pod>(json!({
                "metadata": {"name": name, "namespace": "default", "managedFields": [{"manager": "kubectl"}]},
                "spec": {"containers": [{"name": "c"}], "nodeName": node}
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn claim(name: &str, provider_id: Option<&str>) -> NodeClaim {
        node_claim(json!({"metadata": {"name": name}, "status": {"providerID": provider_id}}))
    }

    fn list_all(index: &mut Index) {
        *index = Index::listed_for_tests(std::mem::take(index));
    }

    #[test]
    fn a_relist_replaces_the_store_at_once() {
        let mut index = Index::default();
        index.apply(Update::Pod(Event::Init));
        index.apply(Update::Pod(Event::InitApply(pod("a", None))));
        assert!(index.pods.is_empty(), "nothing visible before InitDone");
        assert!(index.apply(Update::Pod(Event::InitDone)).pods);
        assert_eq!(index.pods.len(), 1);
        // A later relist without "a" removes it, and keeps "b".
        index.apply(Update::Pod(Event::Init));
        index.apply(Update::Pod(Event::InitApply(pod("b", Some("n1")))));
        assert!(
            index.pods.get("default", "a").is_some(),
            "old state until done"
        );
        index.apply(Update::Pod(Event::InitDone));
        assert!(index.pods.get("default", "a").is_none());
        assert_eq!(index.pods_on("n1").len(), 1);
    }

    #[test]
    fn snapshots_do_not_see_later_events() {
        let mut index = Index::default();
        index.apply(Update::Pod(Event::Apply(pod("a", None))));
        let snapshot = index.clone();
        index.apply(Update::Pod(Event::Apply(pod("b", None))));
        index.apply(Update::Pod(Event::Delete(pod("a", None))));
        assert_eq!(snapshot.pods.len(), 1);
        assert!(snapshot.pods.get("default", "a").is_some());
        assert!(index.pods.get("default", "a").is_none());
    }

    #[test]
    fn objects_are_kept_without_managed_fields() {
        let mut index = Index::default();
        index.apply(Update::Pod(Event::Apply(pod("a", None))));
        let kept = index.pods.get("default", "a").expect("kept");
        assert!(kept.metadata.managed_fields.is_none());
    }

    #[test]
    fn an_interruption_without_the_zone_finds_the_claim_by_its_instance() {
        let mut index = Index::default();
        index.apply(Update::NodeClaim(Event::Apply(claim(
            "a",
            Some("aws:///us-west-2a/i-0abc"),
        ))));
        index.apply(Update::NodeClaim(Event::Apply(claim(
            "b",
            Some("aws:///us-west-2b/i-0def"),
        ))));
        let names = |provider_id: &str| -> Vec<String> {
            index
                .claims_for_interrupted(provider_id)
                .iter()
                .map(|c| name_of(c.as_ref()))
                .collect()
        };
        assert_eq!(names("aws:///us-west-2a/i-0abc"), ["a"]);
        assert_eq!(
            names("aws:///i-0abc"),
            ["a"],
            "the zone could not be learnt"
        );
        assert!(names("aws:///i-0fff").is_empty());
        assert!(names("").is_empty());
    }

    #[test]
    fn synced_waits_for_every_list_and_every_launch() {
        let mut index = Index::default();
        index.apply(Update::NodeClaim(Event::Apply(claim("launching", None))));
        assert!(!index.synced("KWOKNodeClass"), "nothing listed yet");
        list_all(&mut index);
        index.apply(Update::NodeClaim(Event::Apply(claim("launching", None))));
        assert!(
            !index.synced("KWOKNodeClass"),
            "a claim without a provider ID is still launching"
        );
        assert!(
            index.synced("EC2NodeClass"),
            "claims of other kinds are not ours to wait for"
        );
        index.apply(Update::NodeClaim(Event::Apply(claim(
            "launching",
            Some("kwok://x"),
        ))));
        assert!(index.synced("KWOKNodeClass"));
        assert_eq!(
            index
                .claim_for_provider_id("kwok://x")
                .map(|c| name_of(c.as_ref())),
            Some("launching".to_owned())
        );
    }
}
