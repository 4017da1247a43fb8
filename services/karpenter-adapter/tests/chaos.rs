//! The fault-injection suite: randomized, seeded schedules of workload
//! changes interleaved with the faults a production cluster has, run on two
//! adapter processes (the real binary, killed with SIGKILL) and two provider
//! replicas, then a quiet period, then the invariants an autoscaler must
//! never break.
//!
//! ```text
//!   adapter process a ──api proxy a──┐
//!   adapter process b ──api proxy b──┴─▶ local-apiserver ◀── recorder (pods,
//!        │        │                                             nodes, claims,
//!        │        └──▶ scheduler "Service" (balancer, 1 replica)   leases)
//!        └──▶ provider "Service" (balancer) ─▶ replica 0 ┐ one simulated cloud
//!                                             ─▶ replica 1 ┘ (provider-kwok,
//!                                                faults: unavailable, slow, ICE)
//! ```
//!
//! Invariants, checked after every schedule:
//! - every instance belongs to a NodeClaim and every claim to at most one
//!   instance, each Deployment runs all its replicas again;
//! - no NodePool ever exceeded its limits, counted as Karpenter counts them
//!   (claims being deleted hold nothing; sampled every 100 ms);
//! - no node was deleted while a pod bound to it was still running (pods
//!   leave through the Eviction API: an adapter never deletes a pod);
//! - no replica wrote while another held the lease;
//! - every interruption was acted on (its claim deleted) before it was
//!   acknowledged.
//!
//! `CHAOS_SCHEDULES` (default 2) schedules run with seeds 1, 2, ...;
//! `CHAOS_SEED=n` replays one; `CHAOS_RANDOM=1` draws the seeds (printed).
//! RELIABILITY.md has the soak's command and figures.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::balancer::Balancer;
use common::{Cluster, gate};
use futures_util::StreamExt as _;
use integration_tests::RunningService;
use integration_tests::api_faults::{Action, ApiFaultProxy, Fault, FaultId};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::{NodeClaim, NodePool};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use provider_kwok::{InterruptionRequest, OfferingPattern};
use serde_json::json;

const POOL_CPU_LIMIT: i64 = 48;
const STEPS: usize = 24;
const QUIET: Duration = Duration::from_secs(300);

/// splitmix64: small, seedable, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    fn secs(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.between(low * 1000, high * 1000))
    }
}

/// One adapter replica (a pod): its API path and its processes over time.
struct Slot {
    api: ApiFaultProxy,
    kubeconfig: PathBuf,
    child: Option<Child>,
    /// Each process: identity, started, killed.
    lives: Vec<(String, Instant, Option<Instant>)>,
    /// When a killed process comes back.
    restart_at: Option<Instant>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the recorder saw, in the API server's order (resourceVersion).
#[derive(Default)]
struct Record {
    /// (resourceVersion, event) for pods and nodes.
    history: Vec<(u64, Seen)>,
    /// Claims as observed.
    claims: BTreeMap<String, ClaimSeen>,
    /// Lease holders as observed: (when, holder).
    holders: Vec<(Instant, String)>,
    /// The most CPU (millicores) the pool's live instances had at once.
    peak_cpu_milli: i64,
}

/// What the recorder saw of a claim.
#[derive(Clone, Debug, Default)]
struct ClaimSeen {
    provider_id: String,
    /// Its deletionTimestamp (API time, whole seconds).
    deleting: Option<SystemTime>,
    /// When it was last observed not being deleted.
    live_seen: Option<SystemTime>,
}

#[derive(Clone, Debug)]
enum Seen {
    Pod {
        name: String,
        node: Option<String>,
        /// Terminating or finished: no longer running workload.
        gone: bool,
        deleted: bool,
    },
    NodeDeleted(String),
}

/// What a schedule's invariants were judged on.
#[derive(Debug)]
#[allow(dead_code)] // read through Debug, in the summary
struct Observed {
    writes: usize,
    lease_holders: usize,
    pod_events: usize,
    nodes_deleted: usize,
    acks: usize,
    peak_cpu: i64,
}

/// Faults and actions injected, by kind, for the summary.
type Tally = BTreeMap<&'static str, usize>;

enum Restore {
    Heal(usize),
    RemoveFault(usize, FaultId),
    ProviderUp(usize),
    SchedulerUp,
    CloudFast,
    ClearIce,
}

struct World {
    cluster: Cluster,
    providers: Balancer,
    scheduler: Balancer,
    _second_provider: RunningService,
    slots: Vec<Slot>,
    record: Arc<Mutex<Record>>,
    interruptions: BTreeMap<String, Vec<String>>,
    adapter_bin: PathBuf,
    logs: PathBuf,
    generation: u32,
    /// The recorder's tasks, ended with the world.
    recorders: Vec<tokio::task::AbortHandle>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.recorders
            .iter()
            .for_each(tokio::task::AbortHandle::abort);
    }
}

impl World {
    async fn start() -> World {
        let cluster = Cluster::start_with_node_delay(false, Duration::from_millis(300)).await;
        let second = gate::Gate {
            inner: cluster.kwok.clone(),
            holds: cluster.holds.clone(),
        };
        let second_provider = RunningService::start(move || second.service())
            .await
            .expect("second provider replica");
        let providers =
            Balancer::start(vec![cluster.kwok_service.grpc, second_provider.grpc]).await;
        let scheduler = Balancer::start(vec![cluster.scheduler.grpc]).await;
        let upstream = api_addr(&cluster);
        let mut slots = Vec::new();
        for name in ["a", "b"] {
            let api = ApiFaultProxy::start(upstream).await.expect("api proxy");
            let kubeconfig = cluster.dir.path().join(format!("kubeconfig-{name}"));
            api.write_kubeconfig(&kubeconfig).expect("kubeconfig");
            slots.push(Slot {
                api,
                kubeconfig,
                child: None,
                lives: Vec::new(),
                restart_at: None,
            });
        }
        let logs = cluster.dir.path().join("logs");
        std::fs::create_dir_all(&logs).expect("logs dir");
        let record = Arc::new(Mutex::new(Record::default()));
        let mut world = World {
            cluster,
            providers,
            scheduler,
            _second_provider: second_provider,
            slots,
            record,
            interruptions: BTreeMap::new(),
            adapter_bin: PathBuf::from(env!("CARGO_BIN_EXE_adapter")),
            logs,
            generation: 0,
            recorders: Vec::new(),
        };
        world.record_cluster();
        for slot in 0..world.slots.len() {
            world.spawn(slot);
        }
        world
    }

    /// Starts the slot's adapter process (a new pod: a new identity).
    fn spawn(&mut self, slot: usize) {
        self.generation += 1;
        let identity = format!("adapter-{slot}-{}", self.generation);
        let log = std::fs::File::create(self.logs.join(format!("{identity}.log"))).expect("log");
        let child = Command::new(&self.adapter_bin)
            .args([
                "--scheduler-address",
                &self.scheduler.url(),
                "--provider-address",
                &self.providers.url(),
                "--kubeconfig",
                &self.slots[slot].kubeconfig.display().to_string(),
                "--batch-idle-duration",
                "200ms",
                "--batch-max-duration",
                "2s",
                "--metrics-listen",
                "127.0.0.1:0",
                "--leader-election-lease-duration",
                "3s",
                "--leader-election-renew-deadline",
                "2s",
                "--leader-election-retry-period",
                "500ms",
            ])
            .env("POD_NAME", &identity)
            .env("LOG_LEVEL", "info")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("the adapter binary runs");
        let s = &mut self.slots[slot];
        s.child = Some(child);
        s.lives.push((identity, Instant::now(), None));
        s.restart_at = None;
    }

    /// SIGKILL; the process comes back after `down`.
    fn kill(&mut self, slot: usize, down: Duration) {
        let s = &mut self.slots[slot];
        if let Some(mut child) = s.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if let Some(life) = s.lives.last_mut() {
                life.2 = Some(Instant::now());
            }
            s.restart_at = Some(Instant::now() + down);
        }
    }

    /// Processes that exited on their own (a lost lease ends the process,
    /// as upstream's does) come back as their pod's restart would.
    fn restart_exited(&mut self) {
        for slot in 0..self.slots.len() {
            let exited = self.slots[slot]
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited {
                self.slots[slot].child = None;
                if let Some(life) = self.slots[slot].lives.last_mut() {
                    life.2 = Some(Instant::now());
                }
                self.spawn(slot);
            }
            let due = self.slots[slot]
                .restart_at
                .is_some_and(|at| Instant::now() >= at);
            if due && self.slots[slot].child.is_none() {
                self.spawn(slot);
            }
        }
    }

    /// Watches pods, nodes, claims and the lease, and samples the cloud.
    fn record_cluster(&mut self) {
        let client = self.cluster.client.clone();
        let record = self.record.clone();
        let handle = tokio::spawn(watch_into(
            Api::<Pod>::all(client.clone()),
            record.clone(),
            |r, rv, pod: &Pod, deleted| {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                r.history.push((
                    rv,
                    Seen::Pod {
                        name: pod.name_any(),
                        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                        gone: pod.metadata.deletion_timestamp.is_some()
                            || matches!(phase, Some("Succeeded" | "Failed")),
                        deleted,
                    },
                ));
            },
        ));
        self.recorders.push(handle.abort_handle());
        let handle = tokio::spawn(watch_into(
            Api::<Node>::all(client.clone()),
            record.clone(),
            |r, rv, node: &Node, deleted| {
                if deleted {
                    r.history.push((rv, Seen::NodeDeleted(node.name_any())));
                }
            },
        ));
        self.recorders.push(handle.abort_handle());
        let handle = tokio::spawn(watch_into(
            Api::<NodeClaim>::all(client.clone()),
            record.clone(),
            |r, _, claim: &NodeClaim, _| {
                let entry = r.claims.entry(claim.name_any()).or_default();
                if let Some(id) = claim.provider_id() {
                    entry.provider_id = id.to_owned();
                }
                match &claim.metadata.deletion_timestamp {
                    Some(at) => {
                        entry.deleting.get_or_insert(SystemTime::from(at.0));
                    }
                    None => entry.live_seen = Some(SystemTime::now()),
                }
            },
        ));
        self.recorders.push(handle.abort_handle());
        let handle = tokio::spawn(watch_into(
            Api::<Lease>::all(client),
            record.clone(),
            |r, _, lease: &Lease, _| {
                let holder = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default();
                if r.holders.last().is_none_or(|(_, h)| *h != holder) {
                    r.holders.push((Instant::now(), holder));
                }
            },
        ));
        self.recorders.push(handle.abort_handle());
        let kwok = self.cluster.kwok.clone();
        let sampler = tokio::spawn(async move {
            loop {
                let instances = kwok.instances();
                {
                    // Karpenter's usage: a claim being deleted counts
                    // nothing (its replacement may launch while it drains).
                    let mut r = record.lock().unwrap_or_else(|p| p.into_inner());
                    let cpu: i64 = instances
                        .iter()
                        .filter(|i| i.state != "terminated")
                        .filter(|i| {
                            r.claims
                                .get(&i.node_claim_name)
                                .is_none_or(|c| c.deleting.is_none())
                        })
                        .filter_map(|i| i.capacity.as_ref()?.quantities.get("cpu").copied())
                        .sum();
                    r.peak_cpu_milli = r.peak_cpu_milli.max(cpu);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        self.recorders.push(sampler.abort_handle());
    }

    async fn workload(&self) {
        let pool = Cluster::pool(
            "default",
            json!({"metadata": {"labels": {"chaos/generation": "0"}}}),
            json!({
                "limits": {"cpu": POOL_CPU_LIMIT.to_string()},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized",
                               "consolidateAfter": "5s",
                               "budgets": [{"nodes": "50%"}]}
            }),
        );
        self.cluster.node_pool(pool).await;
        self.cluster.deployment("web", 4, "1", json!({})).await;
        self.cluster.deployment("batch", 2, "2", json!({})).await;
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .expect("pdb");
        Api::<PodDisruptionBudget>::default_namespaced(self.cluster.client.clone())
            .create(&PostParams::default(), &pdb)
            .await
            .expect("pdb created");
    }

    /// One random step: a workload change or a fault.
    async fn step(
        &mut self,
        rng: &mut Rng,
        tally: &mut Tally,
        restores: &mut Vec<(Instant, Restore)>,
    ) {
        let slot = rng.below(2) as usize;
        let now = Instant::now();
        match rng.below(16) {
            0 | 1 => {
                self.cluster.scale("web", rng.between(1, 10) as i32).await;
                *tally.entry("scale web").or_default() += 1;
            }
            2 => {
                self.cluster.scale("batch", rng.between(0, 6) as i32).await;
                *tally.entry("scale batch").or_default() += 1;
            }
            3 => {
                let generation = rng.below(1_000_000).to_string();
                let _ = Api::<NodePool>::all(self.cluster.client.clone())
                    .patch(
                        "default",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"chaos/generation": generation}}}}})),
                    )
                    .await;
                *tally.entry("drift (template changed)").or_default() += 1;
            }
            4 => {
                let claims = self.cluster.claims().await;
                if !claims.is_empty() {
                    let claim = &claims[rng.below(claims.len() as u64) as usize];
                    let _ = Api::<NodeClaim>::all(self.cluster.client.clone())
                        .delete(&claim.name_any(), &DeleteParams::default())
                        .await;
                    *tally.entry("claim deleted").or_default() += 1;
                }
            }
            5 => {
                let instances = self.cluster.kwok.instances();
                if !instances.is_empty() {
                    let target = instances[rng.below(instances.len() as u64) as usize]
                        .provider_id
                        .clone();
                    let request = InterruptionRequest {
                        kind: "spot-interruption".into(),
                        provider_ids: vec![target.clone()],
                        state: String::new(),
                        detail: String::new(),
                    };
                    if let Ok(id) = self.cluster.kwok.interrupt(&request) {
                        self.interruptions.insert(id, vec![target]);
                        *tally.entry("spot interruption").or_default() += 1;
                    }
                }
            }
            6 => {
                self.kill(slot, rng.secs(0, 5));
                *tally.entry("adapter killed (SIGKILL)").or_default() += 1;
            }
            7 => {
                self.slots[slot].api.freeze_established();
                *tally
                    .entry("api: established connections frozen")
                    .or_default() += 1;
            }
            8 => {
                self.slots[slot].api.partition();
                restores.push((now + rng.secs(2, 8), Restore::Heal(slot)));
                *tally.entry("api: partition").or_default() += 1;
            }
            9 => {
                let fault = Fault::on("nodeclaims", Action::Hold).watches();
                let id = self.slots[slot].api.add(fault);
                restores.push((now + rng.secs(5, 20), Restore::RemoveFault(slot, id)));
                *tally.entry("api: NodeClaim watch stalled").or_default() += 1;
            }
            10 => {
                let (path, code) = match rng.below(3) {
                    0 => ("/eviction", 429),
                    1 => ("/nodeclaims", 500),
                    _ => ("/nodes", 503),
                };
                let mut fault = Fault::on(path, Action::Answer(code));
                fault.times = Some(rng.between(3, 20) as usize);
                let id = self.slots[slot].api.add(fault);
                restores.push((now + rng.secs(5, 10), Restore::RemoveFault(slot, id)));
                *tally.entry("api: 429/5xx answers").or_default() += 1;
            }
            11 => {
                let fault = Fault::on("/api", Action::Delay(Duration::from_millis(300)));
                let id = self.slots[slot].api.add(fault);
                restores.push((now + rng.secs(2, 6), Restore::RemoveFault(slot, id)));
                *tally.entry("api: slow answers").or_default() += 1;
            }
            12 => {
                let replica = rng.below(self.providers.replicas() as u64) as usize;
                self.providers.kill(replica);
                restores.push((now + rng.secs(2, 10), Restore::ProviderUp(replica)));
                *tally.entry("provider replica killed").or_default() += 1;
            }
            13 => match rng.below(3) {
                0 => {
                    let n = rng.between(2, 10) as usize;
                    self.cluster
                        .holds
                        .failing_calls
                        .store(n, std::sync::atomic::Ordering::SeqCst);
                    *tally.entry("cloud: calls failing").or_default() += 1;
                }
                1 => {
                    self.cluster
                        .holds
                        .slow_ms
                        .store(rng.between(200, 1500), std::sync::atomic::Ordering::SeqCst);
                    restores.push((now + rng.secs(3, 10), Restore::CloudFast));
                    *tally.entry("cloud: slow calls").or_default() += 1;
                }
                _ => {
                    let types = [
                        "c-1x-amd64-linux",
                        "c-2x-amd64-linux",
                        "c-4x-amd64-linux",
                        "c-8x-amd64-linux",
                    ];
                    let it = types[rng.below(types.len() as u64) as usize];
                    self.cluster.kwok.fail_offerings(OfferingPattern {
                        instance_type: Some(it.to_owned()),
                        ..OfferingPattern::default()
                    });
                    restores.push((now + rng.secs(5, 15), Restore::ClearIce));
                    *tally.entry("cloud: insufficient capacity").or_default() += 1;
                }
            },
            14 => {
                self.scheduler.kill(0);
                restores.push((now + rng.secs(1, 6), Restore::SchedulerUp));
                *tally.entry("scheduler killed").or_default() += 1;
            }
            _ => {
                self.cluster.scale("web", rng.between(4, 10) as i32).await;
                *tally.entry("scale web").or_default() += 1;
            }
        }
    }

    fn restore(&mut self, what: Restore) {
        match what {
            Restore::Heal(slot) => self.slots[slot].api.heal(),
            Restore::RemoveFault(slot, id) => self.slots[slot].api.remove(id),
            Restore::ProviderUp(replica) => self.providers.revive(replica),
            Restore::SchedulerUp => self.scheduler.revive(0),
            Restore::CloudFast => self
                .cluster
                .holds
                .slow_ms
                .store(0, std::sync::atomic::Ordering::SeqCst),
            Restore::ClearIce => self.cluster.kwok.clear_faults(),
        }
    }

    /// Whether the cluster has settled: every replica running, one instance
    /// per claim, every claim launched with a node, nothing deleting.
    async fn settled(&self) -> Result<(), String> {
        let web = self.replicas("web").await;
        let batch = self.replicas("batch").await;
        if !self.cluster.running("web", web).await || !self.cluster.running("batch", batch).await {
            return Err("pods not all running".into());
        }
        let claims = self.cluster.claims().await;
        let instances: Vec<_> = self
            .cluster
            .kwok
            .instances()
            .into_iter()
            .filter(|i| i.state != "terminated")
            .collect();
        if claims
            .iter()
            .any(|c| c.metadata.deletion_timestamp.is_some())
        {
            return Err("claims still deleting".into());
        }
        if claims.len() != instances.len() {
            return Err(format!(
                "{} claims, {} instances",
                claims.len(),
                instances.len()
            ));
        }
        // Drift has run its course: every claim has the pool's template.
        let generation = Api::<NodePool>::all(self.cluster.client.clone())
            .get("default")
            .await
            .ok()
            .and_then(|p| {
                p.spec
                    .template
                    .metadata
                    .labels
                    .get("chaos/generation")
                    .cloned()
            });
        if let Some(drifted) = claims
            .iter()
            .find(|c| common::label(*c, "chaos/generation").map(str::to_owned) != generation)
        {
            return Err(format!(
                "claim {} not yet replaced after drift",
                drifted.name_any()
            ));
        }
        let nodes: BTreeSet<String> = self
            .cluster
            .nodes()
            .await
            .iter()
            .map(|n| n.name_any())
            .collect();
        for claim in &claims {
            let launched = instances.iter().filter(|i| {
                Some(i.provider_id.as_str()) == claim.provider_id()
                    && i.node_claim_name == claim.name_any()
            });
            if launched.count() != 1 {
                return Err(format!(
                    "claim {} has no instance of its own",
                    claim.name_any()
                ));
            }
            let node = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            if !nodes.contains(&node) {
                return Err(format!("claim {} has no node", claim.name_any()));
            }
        }
        Ok(())
    }

    async fn replicas(&self, name: &str) -> usize {
        Api::<k8s_openapi::api::apps::v1::Deployment>::default_namespaced(
            self.cluster.client.clone(),
        )
        .get(name)
        .await
        .ok()
        .and_then(|d| d.spec.replicas)
        .unwrap_or(0)
        .max(0) as usize
    }

    /// How much the invariants were checked against.
    fn observed(&self) -> Observed {
        let record = self.record.lock().unwrap_or_else(|p| p.into_inner());
        Observed {
            writes: self.slots.iter().map(|s| s.api.writes().len()).sum(),
            lease_holders: record.holders.len(),
            pod_events: record
                .history
                .iter()
                .filter(|(_, s)| matches!(s, Seen::Pod { .. }))
                .count(),
            nodes_deleted: record
                .history
                .iter()
                .filter(|(_, s)| matches!(s, Seen::NodeDeleted(_)))
                .count(),
            acks: self
                .cluster
                .holds
                .acks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len(),
            peak_cpu: record.peak_cpu_milli / 1000,
        }
    }

    /// Every invariant broken over the whole run.
    fn violations(&self) -> Vec<String> {
        let record = self.record.lock().unwrap_or_else(|p| p.into_inner());
        let mut broken = Vec::new();
        if record.peak_cpu_milli > POOL_CPU_LIMIT * 1000 {
            broken.push(format!(
                "the pool's instances reached {} mCPU, over its limit of {POOL_CPU_LIMIT} CPU",
                record.peak_cpu_milli
            ));
        }
        broken.extend(nodes_deleted_under_pods(&record.history));
        for slot in &self.slots {
            for w in slot.api.writes() {
                let pod_delete = w.method == "DELETE"
                    && w.path.contains("/pods/")
                    && !w.path.contains("/eviction");
                if pod_delete && w.status < 300 {
                    broken.push(format!(
                        "an adapter deleted a pod instead of evicting it: {}",
                        w.path
                    ));
                }
            }
        }
        broken.extend(self.writes_without_the_lease(&record.holders));
        broken.extend(self.acknowledged_before_acted(&record.claims));
        broken
    }

    /// A write answered by the API server while its writer did not hold
    /// the lease (a second of slack each side for the observation).
    fn writes_without_the_lease(&self, holders: &[(Instant, String)]) -> Vec<String> {
        let slack = Duration::from_secs(1);
        let held = |identity: &str, from: Instant, to: Instant| {
            holders.iter().enumerate().any(|(i, (since, holder))| {
                let until = holders.get(i + 1).map(|(t, _)| *t);
                holder == identity && *since <= to && until.is_none_or(|u| u >= from)
            })
        };
        let mut broken = Vec::new();
        for slot in &self.slots {
            for w in slot.api.writes() {
                if w.status >= 300 || w.path.contains("/leases") {
                    continue;
                }
                let writer = slot
                    .lives
                    .iter()
                    .find(|(_, start, end)| *start <= w.sent && end.is_none_or(|e| e >= w.sent));
                let Some((identity, _, _)) = writer else {
                    continue;
                };
                let from = w.sent.checked_sub(slack).unwrap_or(w.sent);
                if !held(identity, from, w.answered + slack) {
                    broken.push(format!(
                        "{identity} wrote without the lease: {} {}",
                        w.method, w.path
                    ));
                }
            }
        }
        broken
    }

    /// An interruption acknowledged while the claim of its instance was
    /// not yet being deleted.
    fn acknowledged_before_acted(&self, claims: &BTreeMap<String, ClaimSeen>) -> Vec<String> {
        let acks = self
            .cluster
            .holds
            .acks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // A claim seen alive this long after the acknowledgement was not
        // being deleted when it was sent (observation takes milliseconds;
        // the slack is for a loaded machine).
        let observed_within = Duration::from_secs(5);
        let mut broken = Vec::new();
        for (id, at) in acks {
            let Some(targets) = self.interruptions.get(&id) else {
                continue;
            };
            for (claim, seen) in claims {
                if !targets.contains(&seen.provider_id) {
                    continue;
                }
                let deleted_after = seen.deleting.is_some_and(|d| d > at);
                let alive_after = seen.deleting.is_none()
                    && seen.live_seen.is_some_and(|l| l > at + observed_within);
                if deleted_after || alive_after {
                    broken.push(format!(
                        "interruption {id} acknowledged at {at:?} before claim {claim} was deleted ({seen:?})"
                    ));
                }
            }
        }
        broken
    }
}

fn api_addr(cluster: &Cluster) -> std::net::SocketAddr {
    let url = cluster.server.url();
    url.trim_start_matches("http://")
        .parse()
        .expect("api address")
}

/// Replays pods and nodes in the API server's order: a node deleted while
/// a pod bound to it still ran is a node deleted under its workload.
fn nodes_deleted_under_pods(history: &[(u64, Seen)]) -> Vec<String> {
    let mut ordered = history.to_vec();
    ordered.sort_by_key(|(rv, _)| *rv);
    let mut pods: BTreeMap<String, (Option<String>, bool)> = BTreeMap::new();
    let mut broken = Vec::new();
    for (_, seen) in ordered {
        match seen {
            Seen::Pod {
                name,
                deleted: true,
                ..
            } => {
                pods.remove(&name);
            }
            Seen::Pod {
                name, node, gone, ..
            } => {
                pods.insert(name, (node, gone));
            }
            Seen::NodeDeleted(node) => {
                for (pod, (bound, gone)) in &pods {
                    if bound.as_deref() == Some(node.as_str()) && !gone {
                        broken.push(format!("node {node} deleted while pod {pod} ran on it"));
                    }
                }
            }
        }
    }
    broken
}

/// Feeds a watch of one kind into the record, with each object's
/// resourceVersion.
async fn watch_into<K, F>(api: Api<K>, record: Arc<Mutex<Record>>, apply: F)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&mut Record, u64, &K, bool) + Send + 'static,
{
    // Backed off: a watch of a server that is gone must not spin.
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        let (object, deleted) = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
            Ok(watcher::Event::Delete(o)) => (o, true),
            _ => continue,
        };
        let rv = object
            .meta()
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        apply(
            &mut record.lock().unwrap_or_else(|p| p.into_inner()),
            rv,
            &object,
            deleted,
        );
    }
}

/// Copies the adapters' logs of a failed schedule out of the cluster's
/// temporary directory.
fn keep_logs(logs: &std::path::Path, seed: u64) -> PathBuf {
    let kept = std::env::temp_dir().join(format!("chaos-seed-{seed}"));
    let _ = std::fs::create_dir_all(&kept);
    for entry in std::fs::read_dir(logs).into_iter().flatten().flatten() {
        let _ = std::fs::copy(entry.path(), kept.join(entry.file_name()));
    }
    kept
}

/// What one schedule did and found.
struct Ran {
    tally: Tally,
    /// Broken invariants (a cluster that never settled is one).
    broken: Vec<String>,
}

/// Runs one schedule.
async fn schedule(seed: u64) -> Ran {
    let mut world = World::start().await;
    world.workload().await;
    let mut rng = Rng(seed);
    let mut tally = Tally::new();
    let mut restores: Vec<(Instant, Restore)> = Vec::new();
    for _ in 0..STEPS {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = restores.into_iter().partition(|(at, _)| *at <= now);
        restores = later;
        for (_, what) in due {
            world.restore(what);
        }
        world.restart_exited();
        world.step(&mut rng, &mut tally, &mut restores).await;
        tokio::time::sleep(rng.secs(1, 3)).await;
    }
    // Quiet: every fault ends, every replica is back.
    for (_, what) in restores {
        world.restore(what);
    }
    for slot in 0..world.slots.len() {
        world.slots[slot].api.heal();
    }
    world
        .cluster
        .holds
        .failing_calls
        .store(0, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + QUIET;
    let mut stable = 0;
    let mut last = String::new();
    while stable < 3 {
        world.restart_exited();
        for slot in &mut world.slots {
            if slot.child.is_none() {
                slot.restart_at = Some(Instant::now());
            }
        }
        match world.settled().await {
            Ok(()) => stable += 1,
            Err(why) => {
                stable = 0;
                last = why;
            }
        }
        if Instant::now() > deadline {
            let logs = keep_logs(&world.logs, seed);
            let why = format!(
                "seed {seed}: not settled {QUIET:?} after the faults ended: {last}\nlogs: {}",
                logs.display()
            );
            println!("{why}");
            return Ran {
                tally,
                broken: vec![why],
            };
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let mut broken = world.violations();
    let observed = world.observed();
    if observed.writes == 0 || observed.lease_holders == 0 || observed.pod_events == 0 {
        broken.push(format!(
            "the recorder saw too little to judge: {observed:?}"
        ));
    }
    let kills = tally.get("adapter killed (SIGKILL)").copied().unwrap_or(0);
    let faults: usize = tally.values().sum();
    let summary = format!(
        "seed {seed}: {STEPS} steps, {faults} actions and faults {tally:?}, {kills} kills; checked {observed:?}; {} violations",
        broken.len()
    );
    println!("{summary}");
    if broken.is_empty() {
        // Kept only when something broke.
        let _ = std::fs::remove_dir_all(&world.logs);
    } else {
        let logs = keep_logs(&world.logs, seed);
        for why in &mut broken {
            *why = format!("seed {seed}: {why} (logs: {})", logs.display());
        }
        println!("{}", broken.join("\n"));
    }
    Ran { tally, broken }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_fault_schedules_keep_every_invariant() {
    let seeds: Vec<u64> = match std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => {
            let count: u64 = std::env::var("CHAOS_SCHEDULES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(2);
            let base = if std::env::var("CHAOS_RANDOM").is_ok() {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
            } else {
                0
            };
            (1..=count).map(|n| base.wrapping_add(n)).collect()
        }
    };
    // Every schedule runs; the totals are the figures RELIABILITY.md gives.
    let mut totals = Tally::new();
    let mut broken = Vec::new();
    for &seed in &seeds {
        println!(
            "chaos schedule, seed {seed} (replay: CHAOS_SEED={seed} cargo nextest run -p karpenter-adapter --test chaos)"
        );
        let ran = schedule(seed).await;
        for (kind, n) in ran.tally {
            *totals.entry(kind).or_default() += n;
        }
        broken.extend(ran.broken);
    }
    println!(
        "chaos totals: {} schedules, {} faults and actions {totals:?}, {} violations",
        seeds.len(),
        totals.values().sum::<usize>(),
        broken.len()
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
