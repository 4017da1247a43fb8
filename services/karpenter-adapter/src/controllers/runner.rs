//! Runs a per-object controller over index snapshots, as controller-runtime
//! runs a reconciler over its work queue:
//!
//! ```text
//!   snapshot ──keys()──▶ (key, fingerprint) ──changed or due?──▶ reconcile(key, snapshot)  (one task per key)
//!                                                                   │ Ok(requeue) → due again after it
//!                                                                   └ Err       → due again after backoff
//! ```
//!
//! A key is reconciled when its fingerprint (the versions of the objects it
//! reads) changes, when its requeue or backoff comes due, and again right
//! after a run during which it changed. The same key never runs twice at
//! once; different keys run concurrently up to a limit. A reconcile that
//! panics fails like any other (its key backs off and runs again), so one
//! bad object never leaves its key in flight for good.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures_util::FutureExt as _;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::error::{Error, Result};
use crate::metrics::{
    AdapterMetrics, CONTROLLER, ControllerLabels, QueueLabels, ReconcileResultLabels,
};
use crate::state::index::{Index, Key};
use crate::state::watch::{Published, Versions};

use crate::controllers::Requeue;

/// A controller that reconciles one object at a time.
pub trait Reconciler: Send + Sync + 'static {
    /// The controller's name (logs, spans).
    const NAME: &'static str;

    /// A counter that moves whenever something this controller reads changed.
    fn relevant(versions: &Versions) -> u64;

    /// The objects to reconcile in this snapshot, each with a fingerprint of
    /// what its reconcile reads (see [`fingerprint`]).
    fn keys(&self, index: &Index) -> Vec<(Key, u64)>;

    /// Brings one object closer to what it should be.
    fn reconcile(
        &self,
        key: Key,
        index: Arc<Index>,
    ) -> impl Future<Output = Result<Requeue>> + Send;
}

/// A fingerprint of resource versions (and anything else that, changed,
/// should run a reconcile again).
pub fn fingerprint<'a>(parts: impl IntoIterator<Item = Option<&'a str>>) -> u64 {
    let mut hasher = DefaultHasher::new();
    for part in parts {
        part.hash(&mut hasher);
    }
    hasher.finish()
}

#[derive(Default)]
struct Queue {
    /// Fingerprints last reconciled.
    seen: HashMap<Key, u64>,
    in_flight: HashSet<Key>,
    /// Keys that changed while in flight.
    dirty: HashSet<Key>,
    due: HashMap<Key, Instant>,
    failures: HashMap<Key, u32>,
}

/// Runs `reconciler` until the snapshots end.
pub async fn run<R: Reconciler>(
    reconciler: Arc<R>,
    mut snapshots: watch::Receiver<Published>,
    concurrency: usize,
    metrics: Arc<AdapterMetrics>,
) {
    if snapshots.wait_for(|p| p.index.listed()).await.is_err() {
        return;
    }
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let labels = ControllerLabels::of(R::NAME);
    let queue_labels = QueueLabels::of(R::NAME);
    metrics
        .max_concurrent_reconciles
        .get_or_create(&labels)
        .set(i64::try_from(concurrency.max(1)).unwrap_or(i64::MAX));
    let mut queue = Queue::default();
    let mut tasks: JoinSet<(Key, Result<Requeue>)> = JoinSet::new();
    // The relevant version the keys were last computed at. Compared on
    // every pass, not only when the change notification is the branch
    // that woke the loop: a change that lands while a reconcile finishes
    // is still seen.
    let mut keys_at: Option<u64> = None;
    loop {
        let current = snapshots.borrow_and_update().clone();
        let now = Instant::now();
        let mut start: Vec<Key> = Vec::new();
        let relevant = R::relevant(&current.versions);
        if keys_at != Some(relevant) {
            let keys = reconciler.keys(&current.index);
            let present: HashSet<&Key> = keys.iter().map(|(k, _)| k).collect();
            queue.failures.retain(|k, _| present.contains(k));
            queue.seen.retain(|k, _| present.contains(k));
            for (key, print) in &keys {
                if queue.seen.get(key) != Some(print) {
                    queue.seen.insert(key.clone(), *print);
                    start.push(key.clone());
                }
            }
            keys_at = Some(relevant);
        }
        // Due keys run even if their object is gone: the reconcile sees that.
        start.extend(
            queue
                .due
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(k, _)| k.clone()),
        );
        for key in start {
            metrics.workqueue_adds.get_or_create(&queue_labels).inc();
            if queue.in_flight.contains(&key) {
                queue.dirty.insert(key);
                continue;
            }
            queue.due.remove(&key);
            queue.in_flight.insert(key.clone());
            spawn(
                &mut tasks,
                &reconciler,
                &permits,
                key,
                &current.index,
                &metrics,
            );
        }
        let next_due = queue.due.values().min().copied();
        tokio::select! {
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                finish(&mut queue, joined, R::NAME, &metrics);
                while let Some(joined) = tasks.try_join_next() {
                    finish(&mut queue, joined, R::NAME, &metrics);
                }
            }
            () = sleep_until(next_due) => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn spawn<R: Reconciler>(
    tasks: &mut JoinSet<(Key, Result<Requeue>)>,
    reconciler: &Arc<R>,
    permits: &Arc<Semaphore>,
    key: Key,
    index: &Arc<Index>,
    metrics: &Arc<AdapterMetrics>,
) {
    let reconciler = reconciler.clone();
    let permits = permits.clone();
    let index = index.clone();
    let metrics = metrics.clone();
    let span = tracing::info_span!(
        "reconcile",
        controller = R::NAME,
        namespace = %key.0,
        name = %key.1
    );
    tasks.spawn(
        async move {
            // Waiting for a worker is the controller's queue depth.
            let depth = metrics
                .workqueue_depth
                .get_or_create(&QueueLabels::of(R::NAME))
                .clone();
            depth.inc();
            let _permit = permits.acquire_owned().await;
            depth.dec();
            let labels = ControllerLabels::of(R::NAME);
            let workers = metrics.active_workers.get_or_create(&labels).clone();
            workers.inc();
            let started = Instant::now();
            let reconcile = CONTROLLER.scope(R::NAME, reconciler.reconcile(key.clone(), index));
            let result = match std::panic::AssertUnwindSafe(reconcile).catch_unwind().await {
                Ok(result) => result,
                Err(panic) => {
                    metrics.reconcile_panics.get_or_create(&labels).inc();
                    Err(Error::Panicked(panic_message(panic.as_ref())))
                }
            };
            workers.dec();
            let seconds = started.elapsed().as_secs_f64();
            metrics
                .reconcile_time
                .get_or_create(&labels)
                .observe(seconds);
            (key, result)
        }
        .instrument(span),
    );
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

fn finish(
    queue: &mut Queue,
    joined: std::result::Result<(Key, Result<Requeue>), tokio::task::JoinError>,
    name: &str,
    metrics: &AdapterMetrics,
) {
    let (key, result) = match joined {
        Ok(done) => done,
        Err(error) => {
            // Only cancellation ends a task without a key (panics are
            // caught inside it), and the runner never cancels its tasks.
            tracing::error!(controller = name, %error, "a reconcile task ended without a result");
            return;
        }
    };
    queue.in_flight.remove(&key);
    let now = Instant::now();
    let outcome = match &result {
        Ok(None) => "success",
        Ok(Some(_)) => "requeue_after",
        Err(_) => "error",
    };
    metrics
        .reconcile_total
        .get_or_create(&ReconcileResultLabels {
            controller: name.to_owned(),
            result: outcome.to_owned(),
        })
        .inc();
    if result.is_err() {
        metrics
            .reconcile_errors
            .get_or_create(&ControllerLabels::of(name))
            .inc();
        metrics
            .workqueue_retries
            .get_or_create(&QueueLabels::of(name))
            .inc();
    }
    match result {
        Ok(requeue) => {
            queue.failures.remove(&key);
            if let Some(after) = requeue {
                queue.due.insert(key.clone(), now + after);
            }
        }
        Err(error) => {
            let failures = queue.failures.entry(key.clone()).or_insert(0);
            *failures += 1;
            let backoff = error.backoff(*failures);
            if error.is_conflict() {
                tracing::debug!(controller = name, name = %key.1, %error, "conflict; reading again");
            } else {
                tracing::warn!(controller = name, namespace = %key.0, name = %key.1, %error, retry_in = ?backoff, "reconcile failed");
            }
            queue.due.insert(key.clone(), now + backoff);
        }
    }
    if queue.dirty.remove(&key) {
        queue.due.insert(key, now);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    /// Panics the first time it reconciles its one key.
    #[derive(Default)]
    struct PanicsOnce {
        calls: AtomicU32,
    }

    impl Reconciler for PanicsOnce {
        const NAME: &'static str = "panics-once";

        fn relevant(versions: &Versions) -> u64 {
            versions.node_claims
        }

        fn keys(&self, _index: &Index) -> Vec<(Key, u64)> {
            vec![((String::new(), "a".to_owned()), 1)]
        }

        async fn reconcile(&self, _key: Key, _index: Arc<Index>) -> Result<Requeue> {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("a bug in the first pass");
            }
            Ok(None)
        }
    }

    #[tokio::test]
    async fn a_panicked_reconcile_runs_again_after_a_backoff() {
        let published = Published {
            index: Arc::new(Index::listed_for_tests(Index::default())),
            versions: Versions::default(),
        };
        let (_publish, snapshots) = watch::channel(published);
        let reconciler = Arc::new(PanicsOnce::default());
        let registry = karpenter_runtime::Metrics::new("karpenter");
        let metrics = AdapterMetrics::register(&registry);
        let running = tokio::spawn(run(reconciler.clone(), snapshots, 4, metrics));
        let deadline = Instant::now() + Duration::from_secs(10);
        while reconciler.calls.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        running.abort();
        assert_eq!(
            reconciler.calls.load(Ordering::SeqCst),
            2,
            "the key is reconciled again, with nothing changed, after its panic"
        );
        // controller-runtime's metrics, unprefixed, per controller.
        let text = registry.encode().unwrap_or_else(|e| panic!("{e}"));
        for line in [
            "controller_runtime_reconcile_total{controller=\"panics-once\",result=\"error\"} 1",
            "controller_runtime_reconcile_total{controller=\"panics-once\",result=\"success\"} 1",
            "controller_runtime_reconcile_panics_total{controller=\"panics-once\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"panics-once\"} 1",
            "controller_runtime_max_concurrent_reconciles{controller=\"panics-once\"} 4",
            "controller_runtime_active_workers{controller=\"panics-once\"} 0",
            "controller_runtime_reconcile_time_seconds_count{controller=\"panics-once\"} 2",
            "workqueue_retries_total{name=\"panics-once\",controller=\"panics-once\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "one end for both registries");
    }
}
