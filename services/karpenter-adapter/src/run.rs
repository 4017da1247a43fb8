//! Wires one adapter process: the Kubernetes client, the scheduler and
//! provider clients, the watchers and their index, leader election, the
//! controllers, and the HTTP server for `/metrics`, `/healthz`, `/readyz`.
//!
//! Watchers start before the election, so a standby replica that takes
//! over has its index listed already. Controllers run only while this
//! replica leads; losing the lease ends the process (its restart makes it a
//! standby), as controller-runtime does. The controllers are supervised: if
//! one ends (a panic, a loop that returned), every controller is stopped,
//! the lease is given up and the process exits with the reason, rather
//! than leading with a controller missing.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use karpenter_proto::provider::v1 as pv;
use kube::api::{Api, ApiResource};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::clients::Clients;
use crate::controllers::capacitybuffer::CapacityBuffers;
use crate::controllers::node::health::{NodeHealth, provider_policies};
use crate::controllers::node::reboot::NodeClaimReboot;
use crate::controllers::node::termination::Termination;
use crate::controllers::nodeclaim::consistency::Consistency;
use crate::controllers::nodeclaim::disruption::ClaimDisruption;
use crate::controllers::nodeclaim::expiration::Expiration;
use crate::controllers::nodeclaim::lifecycle::Lifecycle;
use crate::controllers::nodeclaim::pod_events::PodEvents;
use crate::controllers::nodeclass::NodeClasses;
use crate::controllers::nodeoverlay::NodeOverlays;
use crate::controllers::nodepool::NodePools;
use crate::controllers::nodepool_static::StaticPools;
use crate::controllers::runner;
use crate::controllers::{
    Context, Timing, disruption, interruption, nodeclaim::gc, observability, provisioning,
};
use crate::events::Recorder;
use crate::leader::Elector;
use crate::metrics::{AdapterMetrics, PeerLabels};
use crate::settings::{LEGACY_CONFIG_MAP, LEGACY_KEYS, Settings};
use crate::state::nominations::Nominations;
use crate::state::watch::Published;

/// Reconciles of one controller that run at once.
const CONCURRENCY: usize = 64;

/// How long the controllers' client waits for any answer from the API
/// server (watches are closed by the server after
/// [`crate::state::watch::WATCH_TIMEOUT_SECONDS`]).
const API_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What a running adapter needs besides its settings.
#[derive(Default)]
pub struct Options {
    pub timing: Timing,
    pub election: crate::leader::Timing,
}

/// The provider's answer to `Info`, retried until the provider is up.
async fn provider_info(clients: &Clients) -> pv::InfoResponse {
    let mut wait = Duration::from_millis(200);
    loop {
        match clients.info().await {
            Ok(info) => return info,
            Err(status) => {
                tracing::warn!(error = %status.message(), code = ?status.code(), "the provider does not answer Info yet; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
        }
    }
}

fn node_class_resource(info: &pv::InfoResponse) -> anyhow::Result<ApiResource> {
    let gvk = info
        .node_class
        .as_ref()
        .context("the provider's Info names no node-class kind")?;
    if gvk.kind.is_empty() || info.node_class_resource.is_empty() {
        bail!("the provider's Info names no node-class kind or resource");
    }
    let api_version = if gvk.group.is_empty() {
        gvk.version.clone()
    } else {
        format!("{}/{}", gvk.group, gvk.version)
    };
    Ok(ApiResource {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        api_version,
        kind: gvk.kind.clone(),
        plural: info.node_class_resource.clone(),
    })
}

/// Reads the pre-v0.32 settings ConfigMap, if there is one, warning about
/// each key it still uses.
async fn apply_legacy_settings(client: &kube::Client, namespace: &str, settings: &mut Settings) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Ok(Some(map)) = api.get_opt(LEGACY_CONFIG_MAP).await else {
        return;
    };
    let data: BTreeMap<String, String> = map.data.unwrap_or_default();
    let explicit: Vec<&str> = LEGACY_KEYS
        .iter()
        .map(|k| k.env)
        .filter(|env| std::env::var_os(env).is_some())
        .collect();
    for warning in settings.apply_legacy(&data, &explicit) {
        tracing::warn!("{warning}");
    }
}

fn identity(settings: &Settings) -> String {
    if !settings.identity.is_empty() {
        return settings.identity.clone();
    }
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "adapter".to_owned());
    format!("{host}_{}", std::process::id())
}

/// Runs the adapter until `shutdown` resolves (Ok) or it stops leading
/// (an error: the process should exit and come back as a standby).
pub async fn run(
    mut settings: Settings,
    options: Options,
    http: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut config = karpenter_kube::config(&settings.kube)
        .await?
        .context("no cluster to talk to: pass --kubeconfig (or KUBECONFIG), or run in a pod")?;
    // Named in the API server's audit log, as client-go's clients are.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("karpenter-adapter/", env!("CARGO_PKG_VERSION"))),
    ));
    let lease_client = crate::leader::lease_client(config.clone(), options.election)?;
    // A call that gets no answer fails instead of hanging (a connection
    // dropped without a reset); watches end server-side well before this.
    config.read_timeout = Some(API_READ_TIMEOUT);
    config.reset_reader_on_write = true;
    let client = karpenter_kube::rate_limited_client(
        config,
        settings.kube_client_qps,
        settings.kube_client_burst,
    )?;
    let namespace = if settings.leader_election_namespace.is_empty() {
        client.default_namespace().to_owned()
    } else {
        settings.leader_election_namespace.clone()
    };
    apply_legacy_settings(&client, &namespace, &mut settings).await;
    let tls = settings.tls.client()?;
    let clients = Clients::new(
        crate::clients::Peer {
            address: &settings.scheduler_address,
            tls_server_name: settings.scheduler_tls_server_name.as_deref(),
        },
        crate::clients::Peer {
            address: &settings.provider_address,
            tls_server_name: settings.provider_tls_server_name.as_deref(),
        },
        tls,
    )?;

    let registry = karpenter_runtime::Metrics::new("karpenter");
    let metrics = AdapterMetrics::register(&registry);
    let reconciling = Arc::new(AtomicBool::new(false));
    // Ready is about this process alone: it has listed the cluster. A
    // standby is ready too, so that a rollout or a drain (the PDB counts
    // ready replicas) can go on while one replica leads. Peers are not part
    // of it: a scheduler or provider that is down (or a cloud that denies
    // every call) would make every replica unready at once, and the PDB
    // would then block draining the nodes they run on. Peer health is the
    // `karpenter_peer_up` gauge.
    let synced = Arc::new(AtomicBool::new(false));
    let readiness: karpenter_runtime::Readiness = {
        let synced = synced.clone();
        Arc::new(move || synced.load(Ordering::SeqCst))
    };
    // Every task of this adapter lives in `tasks`: when `run` ends, or its
    // future is dropped, they all stop.
    let mut tasks = JoinSet::new();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut http_stopped = stopped.clone();
    tasks.spawn(async move {
        let served = karpenter_runtime::serve_http(http, registry, readiness, async move {
            let _ = http_stopped.wait_for(|s| *s).await;
        })
        .await;
        if let Err(error) = served {
            tracing::error!(%error, "the metrics and probes server failed");
        }
    });
    tasks.spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let peers = Peers {
        client,
        lease_client,
        clients,
    };
    let state = State {
        metrics,
        reconciling,
        synced,
        stopped,
    };
    lead(settings, options, peers, state, &namespace, &mut tasks).await
}

/// The adapter's peers: the API server and the two gRPC services.
struct Peers {
    client: kube::Client,
    /// The lease's own client (see [`crate::leader::lease_client`]).
    lease_client: kube::Client,
    clients: Clients,
}

/// What the process reports and listens to while it runs.
struct State {
    metrics: Arc<AdapterMetrics>,
    /// Whether this replica reconciles (leads, index listed).
    reconciling: Arc<AtomicBool>,
    /// Whether the index has listed the cluster (leader or standby).
    synced: Arc<AtomicBool>,
    /// Becomes true on shutdown.
    stopped: tokio::sync::watch::Receiver<bool>,
}

/// Waits for the provider and the lease, then runs the controllers until
/// shutdown or the lease is lost.
async fn lead(
    settings: Settings,
    options: Options,
    peers: Peers,
    state: State,
    namespace: &str,
    tasks: &mut JoinSet<()>,
) -> anyhow::Result<()> {
    let Peers {
        client,
        lease_client,
        clients,
    } = peers;
    let State {
        metrics,
        reconciling,
        synced,
        mut stopped,
    } = state;
    let stop = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    tokio::pin!(stop);
    spawn_peer_probe(&clients, &metrics, tasks);
    let info = tokio::select! {
        info = provider_info(&clients) => info,
        () = &mut stop => return Ok(()),
    };
    let node_class = node_class_resource(&info)?;
    tracing::info!(provider = %info.provider_name, node_class = %node_class.kind, "connected to the provider");
    clients.measure_provider_calls(metrics.clone(), &info.provider_name);
    let watching = crate::state::index::Watching {
        gates: &settings.feature_gates,
        default_spread: !settings.scheduler_config.is_empty(),
    };
    let (snapshots, writes) =
        crate::state::watch::start(client.clone(), node_class.clone(), &watching, tasks);
    spawn_synced_flag(&snapshots, synced, tasks);

    let elector = Elector::new(
        lease_client,
        namespace,
        &settings.leader_election_name,
        &identity(&settings),
        options.election,
    );
    let election = !settings.disable_leader_election;
    metrics.set_leading(&settings.leader_election_name, false);
    let acquired = if election {
        tokio::select! {
            since = elector.acquire() => Some(since),
            () = &mut stop => return Ok(()),
        }
    } else {
        None
    };
    metrics.set_leading(&settings.leader_election_name, true);
    let label_rules = karpenter_core::labels::LabelRules::neutral().with_provider(
        info.restricted_label_domains.iter().map(String::as_str),
        info.well_known_labels.iter().map(String::as_str),
    );
    let info_policies = info.repair_policies.clone();
    let ctx = Context {
        client: client.clone(),
        clients,
        label_rules: Arc::new(label_rules),
        info: Arc::new(info),
        node_class,
        settings: Arc::new(settings.clone()),
        recorder: Recorder::new(client),
        metrics: metrics.clone(),
        timing: options.timing,
        nominations: Nominations::default(),
        created_claims: Default::default(),
        writes,
        evictions: Default::default(),
        deletion_costs: Default::default(),
        repair_policies: planned_repair(&settings, &info_policies),
        scheduling_times: Default::default(),
    };
    let mut controllers = Controllers::default();
    spawn_controllers(&ctx, &snapshots, &mut controllers);
    // The lease is renewed from the moment it was taken, while the index
    // is still listing too: a long first list must not let it lapse.
    let holding = async {
        match acquired {
            Some(since) => elector.hold(since).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(holding);
    let outcome = supervise(
        &mut controllers,
        holding,
        stop,
        snapshots.clone(),
        &reconciling,
    )
    .await;
    // Every controller has stopped before the lease can pass to another
    // replica: none acts on this replica's index once another leads.
    reconciling.store(false, Ordering::SeqCst);
    controllers.stop().await;
    ctx.deletion_costs.stop();
    metrics.set_leading(&settings.leader_election_name, false);
    if let Err(error) = &outcome {
        tracing::error!(%error, "stopped leading");
    }
    tasks.abort_all();
    if election {
        elector.release().await;
    }
    outcome
}

/// Sets `synced` (what `/readyz` answers) once the index has listed the
/// cluster.
fn spawn_synced_flag(
    snapshots: &tokio::sync::watch::Receiver<Published>,
    synced: Arc<AtomicBool>,
    tasks: &mut JoinSet<()>,
) {
    let mut listed = snapshots.clone();
    tasks.spawn(async move {
        if listed.wait_for(|p| p.index.listed()).await.is_ok() {
            synced.store(true, Ordering::SeqCst);
        }
    });
}

/// Asks the peers' health every 5 s; `karpenter_peer_up` reports it.
fn spawn_peer_probe(clients: &Clients, metrics: &Arc<AdapterMetrics>, tasks: &mut JoinSet<()>) {
    let clients = clients.clone();
    let metrics = metrics.clone();
    tasks.spawn(async move {
        loop {
            clients.probe().await;
            let (scheduler, provider) = clients.up();
            for (peer, up) in [("scheduler", scheduler), ("provider", provider)] {
                let labels = PeerLabels {
                    peer: peer.to_owned(),
                };
                metrics.peer_up.get_or_create(&labels).set(i64::from(up));
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
}

/// Leads until shutdown (Ok), the lease is lost or a controller ends (an
/// error); the replica reconciles once its index has listed the cluster.
async fn supervise(
    controllers: &mut Controllers,
    mut holding: std::pin::Pin<&mut impl Future<Output = ()>>,
    mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    mut snapshots: watch::Receiver<Published>,
    reconciling: &AtomicBool,
) -> anyhow::Result<()> {
    let listing = async move {
        let _ = snapshots.wait_for(|p| p.index.listed()).await;
    };
    tokio::pin!(listing);
    let mut listing_done = false;
    loop {
        tokio::select! {
            () = &mut listing, if !listing_done => {
                listing_done = true;
                reconciling.store(true, Ordering::SeqCst);
                tracing::info!("reconciling");
            }
            () = &mut holding => return Err(anyhow::anyhow!("lost the leader lease")),
            () = &mut stop => return Ok(()),
            name = controllers.any_ended() => {
                return Err(anyhow::anyhow!("the {name} controller stopped"));
            }
        }
    }
}

/// The controller tasks of a leading replica, by name.
#[derive(Default)]
struct Controllers {
    tasks: JoinSet<()>,
    names: std::collections::HashMap<tokio::task::Id, &'static str>,
}

impl Controllers {
    fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self
            .tasks
            .spawn(crate::metrics::CONTROLLER.scope(name, task));
        self.names.insert(handle.id(), name);
    }

    /// Resolves with the name of the first controller that ends, however
    /// it ends (none is meant to while the replica leads).
    async fn any_ended(&mut self) -> &'static str {
        match self.tasks.join_next_with_id().await {
            Some(Ok((id, ()))) => self.names.get(&id).copied().unwrap_or("unknown"),
            Some(Err(error)) => {
                let name = self.names.get(&error.id()).copied().unwrap_or("unknown");
                if error.is_panic() {
                    tracing::error!(controller = name, "a controller panicked");
                }
                name
            }
            None => std::future::pending().await,
        }
    }

    /// Stops every controller and waits until each has.
    async fn stop(&mut self) {
        self.tasks.shutdown().await;
    }
}

/// Karpenter's controllers, each a supervised task.
fn spawn_controllers(
    ctx: &Context,
    snapshots: &watch::Receiver<Published>,
    tasks: &mut Controllers,
) {
    let c = ctx;
    let s = snapshots;
    tasks.spawn("provisioner", provisioning::run(c.clone(), s.clone()));
    tasks.spawn("garbagecollection", gc::run(c.clone(), s.clone()));
    tasks.spawn("disruption", disruption::run(c.clone(), s.clone()));
    tasks.spawn("interruption", interruption::run(c.clone(), s.clone()));
    tasks.spawn("observability", observability::run(c.clone(), s.clone()));
    let lifecycle = Arc::new(Lifecycle { ctx: c.clone() });
    tasks.spawn(
        "nodeclaim.lifecycle",
        runner::run(lifecycle, s.clone(), CONCURRENCY, c.metrics.clone()),
    );
    let claim_disruption = Arc::new(ClaimDisruption { ctx: c.clone() });
    let run = runner::run(claim_disruption, s.clone(), CONCURRENCY, c.metrics.clone());
    tasks.spawn("nodeclaim.disruption", run);
    let pod_events = Arc::new(PodEvents::new(c.clone()));
    tasks.spawn(
        "pod.events",
        runner::run(pod_events, s.clone(), CONCURRENCY, c.metrics.clone()),
    );
    let expiration = Arc::new(Expiration { ctx: c.clone() });
    tasks.spawn(
        "nodeclaim.expiration",
        runner::run(expiration, s.clone(), CONCURRENCY, c.metrics.clone()),
    );
    let consistency = Arc::new(Consistency { ctx: c.clone() });
    tasks.spawn(
        "nodeclaim.consistency",
        runner::run(consistency, s.clone(), CONCURRENCY, c.metrics.clone()),
    );
    if c.settings
        .feature_gates
        .enabled(karpenter_core::feature_gates::NODE_REPAIR)
    {
        if c.settings.legacy_node_repair {
            let health = Arc::new(NodeHealth::new(c.clone()));
            tasks.spawn(
                "node.health",
                runner::run(health, s.clone(), CONCURRENCY, c.metrics.clone()),
            );
        } else {
            let reboot = Arc::new(NodeClaimReboot { ctx: c.clone() });
            tasks.spawn(
                "nodeclaim.reboot",
                runner::run(reboot, s.clone(), CONCURRENCY, c.metrics.clone()),
            );
        }
    }
    let termination = Arc::new(Termination { ctx: c.clone() });
    tasks.spawn(
        "node.termination",
        runner::run(termination, s.clone(), CONCURRENCY, c.metrics.clone()),
    );
    let pools = Arc::new(NodePools { ctx: c.clone() });
    tasks.spawn(
        "nodepool",
        runner::run(pools, s.clone(), CONCURRENCY, c.metrics.clone()),
    );
    let classes = Arc::new(NodeClasses { ctx: c.clone() });
    tasks.spawn(
        "nodeclass",
        runner::run(classes, s.clone(), CONCURRENCY, c.metrics.clone()),
    );
    if c.settings
        .feature_gates
        .enabled(karpenter_core::feature_gates::STATIC_CAPACITY)
    {
        let static_pools = Arc::new(StaticPools::new(c.clone()));
        tasks.spawn(
            "nodepool.static",
            runner::run(static_pools, s.clone(), 1, c.metrics.clone()),
        );
    }
    if c.settings
        .feature_gates
        .enabled(karpenter_core::feature_gates::NODE_OVERLAY)
    {
        let overlays = Arc::new(NodeOverlays { ctx: c.clone() });
        tasks.spawn(
            "nodeoverlay",
            runner::run(overlays, s.clone(), 1, c.metrics.clone()),
        );
    }
    if c.settings
        .feature_gates
        .enabled(karpenter_core::feature_gates::CAPACITY_BUFFER)
    {
        let buffers = Arc::new(CapacityBuffers { ctx: c.clone() });
        tasks.spawn(
            "capacitybuffer",
            runner::run(buffers, s.clone(), CONCURRENCY, c.metrics.clone()),
        );
    }
}

/// The repair policies the snapshot resolves nodes against: with the
/// `NodeRepair` gate on and repair planned as a disruption method (not
/// `--legacy-node-repair`).
fn planned_repair(
    settings: &Settings,
    policies: &[pv::RepairPolicy],
) -> Option<Arc<karpenter_api::repair::Policies>> {
    let gate = settings
        .feature_gates
        .enabled(karpenter_core::feature_gates::NODE_REPAIR);
    (gate && !settings.legacy_node_repair).then(|| Arc::new(provider_policies(policies)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_controller_that_panics_or_returns_is_reported_by_name() {
        let mut controllers = Controllers::default();
        controllers.spawn("steady", std::future::pending());
        controllers.spawn("provisioner", async { panic!("a bug") });
        assert_eq!(controllers.any_ended().await, "provisioner");
        controllers.spawn("garbagecollection", async {});
        assert_eq!(controllers.any_ended().await, "garbagecollection");
        controllers.stop().await;
    }
}
