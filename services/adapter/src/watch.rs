//! Watchers feed the index; its owner task publishes snapshots.
//!
//! ```text
//!   watcher(kind) ×13 ──Update──▶ mpsc ──▶ owner task: Index::apply, versions += changed
//!                                              └─▶ watch::Sender<Published> (bursts coalesced)
//! ```
//!
//! Controllers hold a `watch::Receiver<Published>`; a snapshot is an
//! `Arc<Index>` that later events never change.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_api::{NodeClaim, NodePool};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::index::{self, Changed, Entry, Index, PodEntry, Update};

/// Per-kind change counters; a controller compares them with what it saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub pods: u64,
    pub nodes: u64,
    pub node_pools: u64,
    pub node_claims: u64,
    pub node_classes: u64,
    pub other: u64,
}

impl Versions {
    fn bump(&mut self, changed: Changed) {
        self.pods += u64::from(changed.pods);
        self.nodes += u64::from(changed.nodes);
        self.node_pools += u64::from(changed.node_pools);
        self.node_claims += u64::from(changed.node_claims);
        self.node_classes += u64::from(changed.node_classes);
        self.other += u64::from(changed.other);
    }
}

/// A snapshot of the index and the change counters it was taken at.
#[derive(Clone, Debug, Default)]
pub struct Published {
    pub index: Arc<Index>,
    pub versions: Versions,
}

/// Starts one watcher per kind and the owner task on `tasks` (dropping
/// the set stops them); returns the snapshots.
pub fn start(
    client: kube::Client,
    node_class: ApiResource,
    tasks: &mut JoinSet<()>,
) -> watch::Receiver<Published> {
    let (updates, received) = mpsc::channel::<Update>(UPDATE_BACKLOG);
    let (publish, snapshots) = watch::channel(Published::default());
    let u = &updates;
    let c = &client;
    spawn_watch::<PodEntry>(tasks, Api::all(c.clone()), u.clone(), Update::Pod);
    spawn_watch::<Node>(tasks, Api::all(c.clone()), u.clone(), Update::Node);
    spawn_watch::<NodePool>(tasks, Api::all(c.clone()), u.clone(), Update::NodePool);
    spawn_watch::<NodeClaim>(tasks, Api::all(c.clone()), u.clone(), Update::NodeClaim);
    spawn_watch::<DaemonSet>(tasks, Api::all(c.clone()), u.clone(), Update::DaemonSet);
    let pdbs = Update::PodDisruptionBudget;
    spawn_watch::<PodDisruptionBudget>(tasks, Api::all(c.clone()), u.clone(), pdbs);
    spawn_watch::<Namespace>(tasks, Api::all(c.clone()), u.clone(), Update::Namespace);
    let classes = Update::PriorityClass;
    spawn_watch::<PriorityClass>(tasks, Api::all(c.clone()), u.clone(), classes);
    let claims = Update::PersistentVolumeClaim;
    spawn_watch::<PersistentVolumeClaim>(tasks, Api::all(c.clone()), u.clone(), claims);
    let volumes = Update::PersistentVolume;
    spawn_watch::<PersistentVolume>(tasks, Api::all(c.clone()), u.clone(), volumes);
    let storage = Update::StorageClass;
    spawn_watch::<StorageClass>(tasks, Api::all(c.clone()), u.clone(), storage);
    spawn_watch::<CSINode>(tasks, Api::all(c.clone()), u.clone(), Update::CsiNode);
    let node_classes: Api<DynamicObject> = Api::all_with(client, &node_class);
    tasks.spawn(forward(
        watcher::watcher(node_classes, watcher::Config::default()),
        updates,
        Update::NodeClass,
    ));
    tasks.spawn(own(received, publish));
    snapshots
}

fn spawn_watch<E>(
    tasks: &mut JoinSet<()>,
    api: Api<E::Object>,
    updates: mpsc::Sender<Update>,
    wrap: fn(Event<E>) -> Update,
) where
    E: Entry + Send + 'static,
    E::Object: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    tasks.spawn(forward(
        watcher::watcher(api, watcher::Config::default()),
        updates,
        wrap,
    ));
}

/// Forwards one watcher's events, as the store keeps them; a watch error
/// is logged and the watcher (which retries with backoff itself) goes on.
async fn forward<E, S>(stream: S, updates: mpsc::Sender<Update>, wrap: fn(Event<E>) -> Update)
where
    E: Entry,
    S: futures_util::Stream<Item = Result<Event<E::Object>, watcher::Error>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    let mut backoff = Duration::from_millis(100);
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                backoff = Duration::from_millis(100);
                if updates.send(wrap(index::keep(event))).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "watch failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Updates waiting for the owner. Small, so a relist of many objects waits
/// in the API server's pages rather than in the adapter's memory.
const UPDATE_BACKLOG: usize = 256;

/// Publishes are at least this far apart: a burst of events becomes one
/// snapshot, and a lone event is published at once.
const MIN_PUBLISH_INTERVAL: Duration = Duration::from_millis(10);

/// The owner task: applies updates and publishes what changed.
async fn own(mut received: mpsc::Receiver<Update>, publish: watch::Sender<Published>) {
    let mut index = Index::default();
    let mut versions = Versions::default();
    let mut last_publish = tokio::time::Instant::now();
    while let Some(first) = received.recv().await {
        let mut changed = index.apply(first);
        let not_before = last_publish + MIN_PUBLISH_INTERVAL;
        loop {
            while let Ok(update) = received.try_recv() {
                changed.merge(index.apply(update));
            }
            if tokio::time::Instant::now() >= not_before {
                break;
            }
            match tokio::time::timeout_at(not_before, received.recv()).await {
                Ok(Some(update)) => changed.merge(index.apply(update)),
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let listed_before = publish.borrow().index.listed();
        if changed.any() || index.listed() != listed_before {
            versions.bump(changed);
            let snapshot = Published {
                index: Arc::new(index.clone()),
                versions,
            };
            if publish.send(snapshot).is_err() {
                return;
            }
            last_publish = tokio::time::Instant::now();
        }
    }
}
