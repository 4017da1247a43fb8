//! The adapter's figures for BENCHMARKS.md:
//!
//! ```sh
//! cargo bench -p karpenter-adapter --bench adapter -- latency   # pending → Create, pending → bound
//! cargo bench -p karpenter-adapter --bench adapter -- memory    # peak RSS, 20,000 pending pods, 4,000 nodes
//! # the regression check .ci/run makes (debug build, half the index):
//! cargo bench -p karpenter-adapter --bench adapter --profile dev -- memory --pods 10000 --nodes 2000 --max-peak-mib 140
//! cargo bench -p karpenter-adapter --bench adapter -- emptiness # last pod gone → claim deleted
//! cargo bench -p karpenter-adapter --bench adapter -- consolidation # 1,000 nodes consolidated
//! ```
//!
//! `latency` runs the local cluster in this process (local-apiserver with
//! its scheduler and kubelet stand-ins, the scheduler service,
//! provider-kwok with a 1 s node delay, the adapter with Karpenter's
//! default batch window) and scales ten deployments one after another,
//! each pod needing a new node. `memory` loads local-apiserver with 4,000
//! Nodes and 20,000 pending pods, runs the adapter binary as its own
//! process, and reads its peak resident memory once it has listed
//! everything and planned a batch.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::Cluster;
use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::json;

const ROUNDS: usize = 10;
const NODE_DELAY: Duration = Duration::from_secs(1);
const BATCH_IDLE: Duration = Duration::from_secs(1);

fn main() -> anyhow::Result<()> {
    let which = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "latency".to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match which.as_str() {
        "latency" => runtime.block_on(latency()),
        "memory" => runtime.block_on(memory::run(memory::Args::parse()?)),
        "emptiness" => runtime.block_on(emptiness()),
        "consolidation" => runtime.block_on(consolidation::run()),
        other => anyhow::bail!(
            "unknown benchmark {other:?}: latency, memory, emptiness or consolidation"
        ),
    }
}

fn percentile(values: &mut [Duration], p: f64) -> Duration {
    values.sort();
    let index = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(index).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// When the watch first saw each pod pending and bound.
#[derive(Default)]
struct Seen {
    pending: std::collections::HashMap<String, Instant>,
    bound: std::collections::HashMap<String, Instant>,
}

async fn latency() -> anyhow::Result<()> {
    let cluster = Cluster::start_with_node_delay(false, NODE_DELAY).await;
    let settings =
        cluster.settings(&["--batch-idle-duration", "1s", "--batch-max-duration", "10s"]);
    let adapter = cluster.adapter_with(settings, common::test_timing()).await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux"]}]}}),
            json!({}),
        ))
        .await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Seen::default()));
    let watching = {
        let seen = seen.clone();
        let pods: Api<Pod> = Api::default_namespaced(cluster.client.clone());
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(pods, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
                    continue;
                };
                let now = Instant::now();
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                let name = pod.name_any();
                if pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some()
                {
                    seen.bound.entry(name).or_insert(now);
                } else if karpenter_snapshot::provisionable(&pod) {
                    seen.pending.entry(name).or_insert(now);
                }
            }
        })
    };
    let mut to_create = Vec::new();
    let mut to_bound = Vec::new();
    for round in 0..ROUNDS {
        let app = format!("round-{round}");
        let arrivals_before = cluster.holds.arrivals.lock().map(|a| a.len()).unwrap_or(0);
        cluster.deployment(&app, 1, "3", json!({})).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let pod = loop {
            anyhow::ensure!(
                Instant::now() < deadline,
                "{app} was not bound within a minute"
            );
            let pods = cluster.pods(&app).await;
            if let Some(pod) = pods.first()
                && seen
                    .lock()
                    .map(|s| s.bound.contains_key(&pod.name_any()))
                    .unwrap_or(false)
            {
                break pod.name_any();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let pending = seen.pending[&pod];
        let bound = seen.bound[&pod];
        let created = cluster
            .holds
            .arrivals
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .get(arrivals_before)
            .map(|(_, at)| *at)
            .ok_or_else(|| anyhow::anyhow!("no Create for {app}"))?;
        to_create.push(
            created
                .saturating_duration_since(pending)
                .saturating_sub(BATCH_IDLE),
        );
        to_bound.push(
            bound
                .saturating_duration_since(pending)
                .saturating_sub(NODE_DELAY),
        );
    }
    watching.abort();
    adapter.stop().await;
    println!(
        "adapter latency over {ROUNDS} scale-outs (each pod needs a new node; batch idle {BATCH_IDLE:?}, kwok node delay {NODE_DELAY:?}):"
    );
    println!(
        "  pod pending -> Create called, minus the batch idle:  median {}  p90 {}",
        ms(percentile(&mut to_create, 0.5)),
        ms(percentile(&mut to_create, 0.9))
    );
    println!(
        "  pod pending -> bound, minus the node delay:         median {}  p90 {}",
        ms(percentile(&mut to_bound, 0.5)),
        ms(percentile(&mut to_bound, 0.9))
    );
    Ok(())
}

const EMPTINESS_ROUNDS: usize = 5;
const CONSOLIDATE_AFTER: Duration = Duration::from_secs(5);

/// A `/proc/<pid>/status` field in KiB (`VmHWM:`, `VmRSS:`).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Polls `check` every 20 ms for at most `within`; when it first held.
async fn when<F, Fut>(within: Duration, mut check: F) -> anyhow::Result<Instant>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return Ok(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("not within {within:?}")
}

/// Karpenter's default disruption timing (10 s polling, 15 s validation):
/// a node whose last pod left is deleted once `consolidateAfter` has
/// passed, the next poll has planned it and the validation has held.
async fn emptiness() -> anyhow::Result<()> {
    let cluster = Cluster::start_with_node_delay(false, NODE_DELAY).await;
    let settings = cluster.settings(&[]);
    let adapter = cluster
        .adapter_with(settings, karpenter_adapter::controllers::Timing::default())
        .await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux"]}]}}),
            json!({"disruption": {"consolidateAfter": format!("{}s", CONSOLIDATE_AFTER.as_secs()),
                                  "consolidationPolicy": "WhenEmpty"}}),
        ))
        .await;
    let mut to_deleted = Vec::new();
    for round in 0..EMPTINESS_ROUNDS {
        let app = format!("round-{round}");
        cluster.deployment(&app, 1, "3", json!({})).await;
        when(Duration::from_secs(60), || cluster.running(&app, 1)).await?;
        let claim = cluster
            .claims()
            .await
            .into_iter()
            .find(|c| c.metadata.deletion_timestamp.is_none())
            .and_then(|c| c.metadata.name)
            .ok_or_else(|| anyhow::anyhow!("no claim for {app}"))?;
        // Past the pod-event dedupe window, so the pod leaving restarts
        // the consolidateAfter clock as it would on a long-lived node.
        tokio::time::sleep(Duration::from_secs(11)).await;
        cluster.scale(&app, 0).await;
        let gone = when(Duration::from_secs(60), || async {
            cluster.pods(&app).await.is_empty()
        })
        .await?;
        let deleted = when(Duration::from_secs(120), || async {
            cluster.claims().await.iter().all(|c| {
                c.metadata.name.as_deref() != Some(claim.as_str())
                    || c.metadata.deletion_timestamp.is_some()
            })
        })
        .await?;
        to_deleted.push(
            deleted
                .saturating_duration_since(gone)
                .saturating_sub(CONSOLIDATE_AFTER),
        );
        when(Duration::from_secs(60), || async {
            cluster.claims().await.is_empty()
        })
        .await?;
    }
    adapter.stop().await;
    println!(
        "adapter emptiness over {EMPTINESS_ROUNDS} nodes (Karpenter's default 10 s polling and 15 s validation, consolidateAfter {CONSOLIDATE_AFTER:?}):"
    );
    println!(
        "  last pod gone -> claim deleted, minus consolidateAfter:  median {}  p90 {}",
        ms(percentile(&mut to_deleted, 0.5)),
        ms(percentile(&mut to_deleted, 0.9))
    );
    Ok(())
}

mod memory {
    //! 4,000 Nodes and 20,000 pending pods in local-apiserver (loaded from
    //! a state file), the adapter binary as its own process.

    use std::time::{Duration, Instant};

    use integration_tests::RunningService;
    use local_apiserver::{Config, LocalApiServer};
    use serde_json::{Value, json};

    /// `--pods N --nodes M` (20,000 and 4,000 by default); with
    /// `--max-peak-mib X`, a peak above X MiB fails the run (the
    /// regression check).
    pub struct Args {
        pods: usize,
        nodes: usize,
        max_peak_mib: Option<f64>,
    }

    impl Args {
        pub fn parse() -> anyhow::Result<Self> {
            let mut args = Args {
                pods: 20_000,
                nodes: 4_000,
                max_peak_mib: None,
            };
            let mut given = std::env::args().skip(1);
            while let Some(flag) = given.next() {
                let mut value = || {
                    given
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
                };
                match flag.as_str() {
                    "--pods" => args.pods = value()?.parse()?,
                    "--nodes" => args.nodes = value()?.parse()?,
                    "--max-peak-mib" => args.max_peak_mib = Some(value()?.parse()?),
                    _ => {}
                }
            }
            Ok(args)
        }
    }

    fn state(args: &Args) -> Value {
        let mut items: Vec<Value> = karpenter_api::crds()
            .into_iter()
            .map(|crd| serde_json::to_value(crd).unwrap_or_default())
            .collect();
        if let Ok(crd) = serde_yaml::from_str::<Value>(provider_kwok::NODE_CLASS_CRD) {
            items.push(crd);
        }
        items.push(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
        );
        items.push(json!({
            "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default"}, "spec": {}
        }));
        items.push(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"limits": {"cpu": "64"}, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}
        }));
        for i in 0..args.nodes {
            let name = format!("existing-{i:05}");
            items.push(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                    "node.kubernetes.io/instance-type": "m5.xlarge",
                    "topology.kubernetes.io/zone": format!("us-west-2{}", ["a", "b", "c"][i % 3])}},
                "spec": {"providerID": format!("aws:///us-west-2a/i-{i:017x}"),
                         "taints": [{"key": "example.com/reserved", "effect": "NoSchedule"}]},
                "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                           "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
                           "conditions": [{"type": "Ready", "status": "True"}]}
            }));
        }
        for i in 0..args.pods {
            let app = format!("app-{:03}", i % 200);
            items.push(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{app}-{i:05}"), "namespace": "default", "uid": format!("pod-{i:08}"),
                             "labels": {"app": app, "pod-template-hash": "5d8f7c9b6"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-5d8f7c9b6"),
                                                  "uid": format!("rs-{:03}", i % 200), "controller": true}]},
                "spec": {"containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                         "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}],
                         "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                             "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": app}}}]},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                           "reason": "Unschedulable", "message": "0/4000 nodes are available"}]}
            }));
        }
        json!({"items": items})
    }

    pub async fn run(args: Args) -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let state_file = dir.path().join("state.json");
        std::fs::write(&state_file, serde_json::to_vec(&state(&args))?)?;
        let kubeconfig = dir.path().join("kubeconfig");
        let server = LocalApiServer::start(Config {
            kubeconfig: Some(kubeconfig.clone()),
            state_file: Some(state_file),
            ..Config::default()
        })
        .await?;
        let config = karpenter_kube::from_kubeconfig(&kubeconfig).await?;
        let client = karpenter_kube::client(config)?;
        let kwok = provider_kwok::KwokProvider::new(
            provider_kwok::load_catalog(None)?,
            Some(client.clone()),
            provider_kwok::Options::default(),
        );
        let kwok_service =
            RunningService::start(move || kwok.service(karpenter_runtime::Metrics::new("kwok")))
                .await?;
        let scheduler = RunningService::start(|| {
            karpenter_scheduler::service(
                karpenter_runtime::Metrics::new("scheduler"),
                karpenter_scheduler::Limits::default(),
            )
        })
        .await?;
        let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(dir.path().join("adapter.log"))?;
        let started = Instant::now();
        let mut adapter = std::process::Command::new(env!("CARGO_BIN_EXE_adapter"))
            .args(["--scheduler-address", &scheduler.url()])
            .args(["--provider-address", &kwok_service.url()])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
            .env("LOG_LEVEL", "info")
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let pid = adapter.id();
        let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], metrics_port));
        let mut planned_at = None;
        let deadline = Instant::now() + Duration::from_secs(300);
        while Instant::now() < deadline {
            if let Some(body) = super::common::http_get(metrics, "/metrics")
                .await
                .map(|(_, b)| b)
                && body.lines().any(|l| {
                    l.starts_with("karpenter_scheduler_scheduling_duration_seconds_count")
                        && !l.ends_with(" 0")
                })
            {
                planned_at.get_or_insert(started.elapsed());
            }
            if let Some(at) = planned_at
                && started.elapsed() > at + Duration::from_secs(10)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let peak = super::status_kib(pid, "VmHWM:").unwrap_or(0);
        let now = super::status_kib(pid, "VmRSS:").unwrap_or(0);
        let _ = adapter.kill();
        let _ = adapter.wait();
        drop(server);
        let planned = planned_at
            .ok_or_else(|| anyhow::anyhow!("the adapter never planned a batch; see its log"))?;
        println!(
            "adapter memory with {} nodes and {} pending pods in the index:",
            args.nodes, args.pods
        );
        println!(
            "  first batch planned {:.1} s after start",
            planned.as_secs_f64()
        );
        println!(
            "  peak RSS {:.1} MiB, RSS 10 s later {:.1} MiB",
            peak as f64 / 1024.0,
            now as f64 / 1024.0
        );
        let peak_mib = peak as f64 / 1024.0;
        match args.max_peak_mib {
            Some(max) if peak_mib > max => anyhow::bail!(
                "peak RSS {peak_mib:.1} MiB is above the bound of {max} MiB: a memory regression (see BENCHMARKS.md)"
            ),
            Some(max) => println!("  within the bound of {max} MiB"),
            None => {}
        }
        Ok(())
    }
}

mod consolidation {
    //! A 1,000-node kwok cluster consolidated by the adapter binary (its
    //! own process, Karpenter's default timing and budget of 10%).
    //!
    //! Three deployments of 1,000 1.2-CPU pods fill 1,000 4-CPU nodes, one
    //! pod of each per node (two of them held one per node by a host
    //! port). The pool then also allows 2-CPU nodes, and those two
    //! deployments are scaled to zero, leaving every node a third used;
    //! consolidation packs the remaining pods onto fewer nodes.

    use std::time::{Duration, Instant};

    use kube::ResourceExt;
    use serde_json::json;

    use super::common::{Cluster, http_get};

    const NODES: i32 = 1_000;

    /// A host port keeps the deployment's pods one per node (cheaper for
    /// local-apiserver's scheduler stand-in than anti-affinity).
    fn one_per_node(port: i32) -> serde_json::Value {
        json!({"containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
            "resources": {"requests": {"cpu": "1200m"}},
            "ports": [{"containerPort": port, "hostPort": port}]}]})
    }

    /// A node-claim template restricted to on-demand instances of `types`.
    fn requirements(types: &[&str]) -> serde_json::Value {
        json!({"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]}})
    }

    /// The adapter's cost gauge `estimate`, from its metrics page.
    fn cost(metrics: &str, estimate: &str) -> Option<f64> {
        let prefix =
            format!("karpenter_disruption_cluster_cost_per_hour{{estimate=\"{estimate}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.parse().ok())
    }

    /// Live (not deleting) claims and whether any is deleting.
    async fn claims(cluster: &Cluster) -> (usize, bool) {
        let claims = cluster.claims().await;
        let deleting = claims
            .iter()
            .any(|c| c.metadata.deletion_timestamp.is_some());
        let live = claims.len()
            - claims
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_some())
                .count();
        (live, deleting)
    }

    pub async fn run() -> anyhow::Result<()> {
        let cluster = Cluster::start_with_node_delay(false, Duration::from_millis(200)).await;
        let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], metrics_port));
        let log = std::fs::File::create(cluster.dir.path().join("adapter.log"))?;
        let mut adapter = std::process::Command::new(env!("CARGO_BIN_EXE_adapter"))
            .args(["--scheduler-address", &cluster.scheduler.url()])
            .args(["--provider-address", &cluster.kwok_service.url()])
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["--metrics-listen", &metrics.to_string()])
            .env("LOG_LEVEL", "info")
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let pid = adapter.id();
        let outcome = consolidate(&cluster, pid, metrics).await;
        let _ = adapter.kill();
        let _ = adapter.wait();
        outcome
    }

    async fn consolidate(
        cluster: &Cluster,
        pid: u32,
        metrics: std::net::SocketAddr,
    ) -> anyhow::Result<()> {
        cluster
            .node_pool(Cluster::pool(
                "default",
                requirements(&["c-4x-amd64-linux"]),
                json!({"disruption": {"consolidateAfter": "0s"}}),
            ))
            .await;
        let filled = Instant::now();
        cluster
            .deployment("spread-a", NODES, "1200m", one_per_node(8001))
            .await;
        cluster
            .deployment("spread-b", NODES, "1200m", one_per_node(8002))
            .await;
        cluster.deployment("stays", NODES, "1200m", json!({})).await;
        let n = NODES as usize;
        while !(cluster.running("spread-a", n).await
            && cluster.running("spread-b", n).await
            && cluster.running("stays", n).await)
        {
            anyhow::ensure!(
                filled.elapsed() < Duration::from_secs(1_800),
                "the pods were not all running within 30 minutes"
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let (nodes_before, _) = claims(cluster).await;
        println!(
            "filled {nodes_before} nodes with {} pods in {:.0} s",
            3 * n,
            filled.elapsed().as_secs_f64()
        );
        // Consolidation may choose the smaller type too (widening the
        // requirements drifts nothing).
        kube::Api::<karpenter_api::NodePool>::all(cluster.client.clone())
            .patch(
                "default",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"template":
                    requirements(&["c-2x-amd64-linux", "c-4x-amd64-linux"])}})),
            )
            .await?;
        // Peak memory from here on: the consolidation's, not the fill's.
        let rss_before = super::status_kib(pid, "VmRSS:").unwrap_or(0);
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
        cluster.scale("spread-a", 0).await;
        cluster.scale("spread-b", 0).await;
        let started = Instant::now();
        while !(cluster.pods("spread-a").await.is_empty()
            && cluster.pods("spread-b").await.is_empty())
        {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(300),
                "the scaled-down pods did not go"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        // The first plan after the scale-down: what the nodes cost now.
        let mut before = None;
        let mut lower_bound = None;
        let mut settled_since: Option<(Instant, usize)> = None;
        let done = loop {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(3_600),
                "consolidation did not finish within an hour"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
            let page = http_get(metrics, "/metrics")
                .await
                .map(|(_, body)| body)
                .unwrap_or_default();
            let (current, planned) = (cost(&page, "current"), cost(&page, "planned"));
            if before.is_none() && current.is_some() {
                before = current;
            }
            lower_bound = cost(&page, "lower_bound").or(lower_bound);
            let (live, deleting) = claims(cluster).await;
            let idle = !deleting
                && current
                    .zip(planned)
                    .is_some_and(|(c, p)| (c - p).abs() < 1e-9)
                && cluster.running("stays", n).await;
            // Done once nothing is planned or deleting for two full polls.
            settled_since = match settled_since {
                Some((at, count)) if idle && count == live => Some((at, count)),
                _ if idle => Some((Instant::now(), live)),
                _ => None,
            };
            if let Some((at, _)) = settled_since
                && at.elapsed() > Duration::from_secs(25)
            {
                break at;
            }
        };
        let page = http_get(metrics, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default();
        let after = cost(&page, "current");
        let (nodes_after, _) = claims(cluster).await;
        let mut types: std::collections::BTreeMap<String, usize> = Default::default();
        for claim in cluster.claims().await {
            let t = claim
                .labels()
                .get("node.kubernetes.io/instance-type")
                .cloned()
                .unwrap_or_default();
            *types.entry(t).or_default() += 1;
        }
        let peak = super::status_kib(pid, "VmHWM:").unwrap_or(0);
        let decisions: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("karpenter_voluntary_disruption_decisions_total{"))
            .collect();
        let dollars = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{v:.2}"));
        println!(
            "adapter consolidation of a {nodes_before}-node kwok cluster ({n} pods of 1.2 CPU left, one per 4-CPU node):"
        );
        println!(
            "  cost per hour: before {}  after {}  lower bound {}",
            dollars(before),
            dollars(after),
            dollars(lower_bound)
        );
        println!("  nodes: before {nodes_before}  after {nodes_after} {types:?}");
        println!(
            "  wall time from scale-down until nothing is left to do: {:.0} s",
            done.duration_since(started).as_secs_f64()
        );
        println!(
            "  adapter RSS: {:.1} MiB when scaled down (after the fill), peak {:.1} MiB during consolidation, {:.1} MiB at the end",
            rss_before as f64 / 1024.0,
            peak as f64 / 1024.0,
            super::status_kib(pid, "VmRSS:").unwrap_or(0) as f64 / 1024.0
        );
        for line in decisions {
            println!("  {line}");
        }
        Ok(())
    }
}
