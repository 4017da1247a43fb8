//! Watchers feed the index; its owner task publishes snapshots.
//!
//! ```text
//!   watcher(kind) ×13 ──Update──▶ mpsc ──▶ owner task: Index::apply, versions += changed
//!                                              └─▶ watch::Sender<Published> (bursts coalesced)
//! ```
//!
//! Controllers hold a `watch::Receiver<Published>`; a snapshot is an
//! `Arc<Index>` that later events never change. The adapter's own creates
//! of NodeClaims reach the owner too ([`Writes`]): a snapshot shows a claim
//! from the moment it was created, whatever the watch's lag.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use karpenter_api::NodeClaim;
use kube::api::{Api, ApiResource};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::state::index::{self, Changed, Entry, Index, Key, Update};

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

/// The adapter's own writes, told to the index owner so snapshots show
/// them before the watch does.
#[derive(Clone, Debug)]
pub struct Writes {
    updates: mpsc::Sender<Update>,
}

impl Writes {
    /// A NodeClaim this adapter created (the API's answer). Until the watch
    /// shows it, snapshots hold this copy, so a lagging NodeClaim watch can
    /// never make provisioning (or the pool limits) miss capacity it has
    /// already asked for, as Karpenter's cluster state records a claim the
    /// moment it is created.
    pub async fn created(&self, claim: NodeClaim) {
        // Only fails once the owner has stopped, with the adapter.
        let _ = self.updates.send(Update::NodeClaimCreated(claim)).await;
    }
}

/// Starts one watcher per kind and the owner task on `tasks` (dropping
/// the set stops them); returns the snapshots and the handle the adapter
/// tells its own writes through.
pub fn start(
    client: kube::Client,
    node_class: ApiResource,
    watching: &index::Watching<'_>,
    tasks: &mut JoinSet<()>,
) -> (watch::Receiver<Published>, Writes) {
    let (updates, received) = mpsc::channel::<Update>(UPDATE_BACKLOG);
    let (publish, snapshots) = watch::channel(Published::default());
    index::start_watches(&client, &node_class, watching, &updates, tasks);
    tasks.spawn(own(received, publish));
    (snapshots, Writes { updates })
}

/// Seconds after which the API server ends a watch (the watcher then
/// resumes it from its last resourceVersion): shorter than the client's
/// read timeout, so a quiet watch is never mistaken for a dead connection.
pub const WATCH_TIMEOUT_SECONDS: u32 = 45;

fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS)
}

/// Starts a watcher of `api` (a Kubernetes kind, or the provider's
/// node-class kind known only at run time) forwarding to `updates`.
pub(crate) fn spawn_watch<E>(
    tasks: &mut JoinSet<()>,
    api: Api<E::Object>,
    updates: mpsc::Sender<Update>,
    wrap: fn(Event<E>) -> Update,
) where
    E: Entry + Send + 'static,
    E::Object:
        kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tasks.spawn(forward(
        watcher::watcher(api, watch_config()),
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

/// How long a claim this adapter created is shown without the watch
/// having shown it (and how long a watched deletion is remembered): far
/// beyond any healthy watch's lag, short enough that a claim created and
/// deleted before its watch events arrived is not counted for long.
const UNSEEN_FOR_AT_MOST: Duration = Duration::from_secs(300);

/// How often the owner drops what it has remembered too long.
const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// Claims this adapter created that the NodeClaim watch has not shown
/// yet, and claims whose deletion it showed recently (a create answered
/// after its own deletion was watched must not bring the claim back).
#[derive(Default)]
struct Unseen {
    created: HashMap<Key, (NodeClaim, Instant)>,
    deleted: HashMap<Key, Instant>,
}

fn claim_key(claim: &NodeClaim) -> Key {
    (
        String::new(),
        claim.metadata.name.clone().unwrap_or_default(),
    )
}

impl Unseen {
    /// Looks at an update before the index applies it; `None` drops it.
    fn filter(&mut self, index: &Index, update: Update) -> Option<Update> {
        match &update {
            // A relist confirms a claim only once it is done (`after_relist`):
            // a relist that fails half-way must not have forgotten it.
            Update::NodeClaim(Event::Apply(claim)) => {
                self.created.remove(&claim_key(claim));
            }
            Update::NodeClaim(Event::Delete(claim)) => {
                let key = claim_key(claim);
                self.created.remove(&key);
                self.deleted.insert(key, Instant::now());
            }
            Update::NodeClaimCreated(claim) => {
                let key = claim_key(claim);
                if index.node_claims.named(&key.1).is_some() || self.deleted.contains_key(&key) {
                    return None;
                }
                self.created.insert(key, (claim.clone(), Instant::now()));
            }
            _ => {}
        }
        Some(update)
    }

    /// After a relist replaced the claims: created claims the list holds
    /// are confirmed; those it did not hold yet (it may predate them) are
    /// shown again.
    fn after_relist(&mut self, index: &mut Index) -> Changed {
        let mut changed = Changed::default();
        self.created
            .retain(|key, _| index.node_claims.named(&key.1).is_none());
        for (claim, _) in self.created.values() {
            changed.merge(index.apply(Update::NodeClaimCreated(claim.clone())));
        }
        changed
    }

    /// Forgets what was remembered too long; a created claim still unseen
    /// is taken out of the index.
    fn prune(&mut self, index: &mut Index) -> Changed {
        let mut changed = Changed::default();
        self.deleted
            .retain(|_, at| at.elapsed() < UNSEEN_FOR_AT_MOST);
        let expired: Vec<Key> = self
            .created
            .iter()
            .filter(|(_, (_, at))| at.elapsed() >= UNSEEN_FOR_AT_MOST)
            .map(|(key, _)| key.clone())
            .collect();
        for key in expired {
            self.created.remove(&key);
            tracing::warn!(nodeclaim = %key.1, "the NodeClaim watch never showed a claim this adapter created; no longer counting it");
            changed.merge(index.apply(Update::NodeClaimForgotten(key)));
        }
        changed
    }
}

/// The index with the owner's bookkeeping of its own writes.
struct Owned {
    index: Index,
    unseen: Unseen,
}

impl Owned {
    fn apply(&mut self, update: Update) -> Changed {
        let relist_done = matches!(update, Update::NodeClaim(Event::InitDone));
        let Some(update) = self.unseen.filter(&self.index, update) else {
            return Changed::default();
        };
        let mut changed = self.index.apply(update);
        if relist_done {
            changed.merge(self.unseen.after_relist(&mut self.index));
        }
        changed
    }
}

/// The owner task: applies updates and publishes what changed.
async fn own(mut received: mpsc::Receiver<Update>, publish: watch::Sender<Published>) {
    let mut owned = Owned {
        index: Index::default(),
        unseen: Unseen::default(),
    };
    let mut versions = Versions::default();
    let mut last_publish = tokio::time::Instant::now();
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut changed = tokio::select! {
            first = received.recv() => match first {
                Some(first) => owned.apply(first),
                None => return,
            },
            _ = prune.tick() => owned.unseen.prune(&mut owned.index),
        };
        let not_before = last_publish + MIN_PUBLISH_INTERVAL;
        loop {
            while let Ok(update) = received.try_recv() {
                changed.merge(owned.apply(update));
            }
            if tokio::time::Instant::now() >= not_before {
                break;
            }
            match tokio::time::timeout_at(not_before, received.recv()).await {
                Ok(Some(update)) => changed.merge(owned.apply(update)),
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let index = &owned.index;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::node_claim;
    use serde_json::json;

    fn claim(name: &str) -> NodeClaim {
        node_claim(json!({"metadata": {"name": name, "resourceVersion": "1"}}))
    }

    fn owned() -> Owned {
        Owned {
            index: Index::listed_for_tests(Index::default()),
            unseen: Unseen::default(),
        }
    }

    #[test]
    fn a_created_claim_is_shown_until_a_watch_or_a_finished_relist_shows_it() {
        let mut owned = owned();
        assert!(
            owned
                .apply(Update::NodeClaimCreated(claim("a")))
                .node_claims
        );
        assert!(owned.index.node_claims.named("a").is_some());
        // A relist that started before the create does not hold it.
        owned.apply(Update::NodeClaim(Event::Init));
        owned.apply(Update::NodeClaim(Event::InitDone));
        assert!(owned.index.node_claims.named("a").is_some(), "shown again");
        // A relist that fails half-way (a new one starts) does not confirm it.
        owned.apply(Update::NodeClaim(Event::Init));
        owned.apply(Update::NodeClaim(Event::InitApply(claim("a"))));
        owned.apply(Update::NodeClaim(Event::Init));
        owned.apply(Update::NodeClaim(Event::InitDone));
        assert!(owned.index.node_claims.named("a").is_some(), "still shown");
        // A finished relist holding it confirms it.
        owned.apply(Update::NodeClaim(Event::Init));
        owned.apply(Update::NodeClaim(Event::InitApply(claim("a"))));
        owned.apply(Update::NodeClaim(Event::InitDone));
        assert!(owned.unseen.created.is_empty());
    }

    #[test]
    fn a_create_answered_after_its_deletion_was_watched_is_not_shown() {
        let mut owned = owned();
        owned.apply(Update::NodeClaim(Event::Apply(claim("a"))));
        owned.apply(Update::NodeClaim(Event::Delete(claim("a"))));
        assert!(
            !owned
                .apply(Update::NodeClaimCreated(claim("a")))
                .node_claims
        );
        assert!(owned.index.node_claims.named("a").is_none());
    }
}
