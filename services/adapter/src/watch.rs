//! Watchers feed the index; its owner task publishes snapshots.
//!
//! ```text
//!   watcher(kind) ×13 ──Update──▶ mpsc ──▶ owner task: Index::apply, versions += changed
//!                                              └─▶ watch::Sender<Published> (at most every 50 ms)
//! ```
//!
//! Controllers hold a `watch::Receiver<Published>`; a snapshot is an
//! `Arc<Index>` that later events never change.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_api::{NodeClaim, NodePool};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};

use crate::index::{Changed, Index, Update};

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

/// Starts one watcher per kind and the owner task; returns the snapshots.
pub fn start(client: kube::Client, node_class: ApiResource) -> watch::Receiver<Published> {
    let (updates, received) = mpsc::channel::<Update>(4096);
    let (publish, snapshots) = watch::channel(Published::default());
    spawn_watch::<Pod>(Api::all(client.clone()), updates.clone(), Update::Pod);
    spawn_watch::<Node>(Api::all(client.clone()), updates.clone(), Update::Node);
    spawn_watch::<NodePool>(Api::all(client.clone()), updates.clone(), Update::NodePool);
    spawn_watch::<NodeClaim>(Api::all(client.clone()), updates.clone(), Update::NodeClaim);
    spawn_watch::<DaemonSet>(Api::all(client.clone()), updates.clone(), Update::DaemonSet);
    spawn_watch::<PodDisruptionBudget>(
        Api::all(client.clone()),
        updates.clone(),
        Update::PodDisruptionBudget,
    );
    spawn_watch::<Namespace>(Api::all(client.clone()), updates.clone(), Update::Namespace);
    spawn_watch::<PriorityClass>(
        Api::all(client.clone()),
        updates.clone(),
        Update::PriorityClass,
    );
    spawn_watch::<PersistentVolumeClaim>(
        Api::all(client.clone()),
        updates.clone(),
        Update::PersistentVolumeClaim,
    );
    spawn_watch::<PersistentVolume>(
        Api::all(client.clone()),
        updates.clone(),
        Update::PersistentVolume,
    );
    spawn_watch::<StorageClass>(
        Api::all(client.clone()),
        updates.clone(),
        Update::StorageClass,
    );
    spawn_watch::<CSINode>(Api::all(client.clone()), updates.clone(), Update::CsiNode);
    let classes: Api<DynamicObject> = Api::all_with(client, &node_class);
    tokio::spawn(forward(
        watcher::watcher(classes, watcher::Config::default()),
        updates,
        Update::NodeClass,
    ));
    tokio::spawn(own(received, publish));
    snapshots
}

fn spawn_watch<K>(api: Api<K>, updates: mpsc::Sender<Update>, wrap: fn(Event<K>) -> Update)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    tokio::spawn(forward(
        watcher::watcher(api, watcher::Config::default()),
        updates,
        wrap,
    ));
}

/// Forwards one watcher's events; a watch error is logged and the watcher
/// (which retries with backoff itself) goes on.
async fn forward<K, S>(stream: S, updates: mpsc::Sender<Update>, wrap: fn(Event<K>) -> Update)
where
    S: futures_util::Stream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    let mut backoff = Duration::from_millis(100);
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                backoff = Duration::from_millis(100);
                if updates.send(wrap(event)).await.is_err() {
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

/// The owner task: applies updates and publishes, at most every 50 ms.
async fn own(mut received: mpsc::Receiver<Update>, publish: watch::Sender<Published>) {
    let mut index = Index::default();
    let mut versions = Versions::default();
    while let Some(first) = received.recv().await {
        let mut changed = index.apply(first);
        // Take whatever else is queued, then publish once.
        let deadline = tokio::time::Instant::now() + Duration::from_millis(50);
        loop {
            match tokio::time::timeout_at(deadline, received.recv()).await {
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
        }
    }
}
