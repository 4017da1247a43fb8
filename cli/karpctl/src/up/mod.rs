//! `karpctl up`: the whole product on one machine.
//!
//! ```text
//!   karpctl up ──▶ local-apiserver --controllers   (the Kubernetes API, scheduler/kubelet stand-ins)
//!              ──▶ CRDs (NodePool, NodeClaim, EC2NodeClass; provider-kwok installs KWOKNodeClass)
//!              ──▶ scheduler                        (Solve, PlanDisruption)
//!              ──▶ provider-kwok                    (the simulated cloud, its admin API)
//!              ──▶ KWOKNodeClass "default"
//!              ──▶ adapter                          (Karpenter's controllers) ── /readyz ──▶ "ready"
//! ```
//!
//! Every service is its own process on free loopback ports, so several
//! clusters run side by side; their logs go to the state directory. The
//! command runs until SIGINT or SIGTERM, then stops what it started.
//! The services speak plain gRPC on loopback, or with `--tls` mutual TLS
//! with the certificates the chart would make ([`certificates`]), written
//! to `<state-dir>/tls`.
//! `--replay seed-001` plays seed 001's scenario against the cluster,
//! prints its timeline and stops.

pub mod certificates;
mod processes;
mod replay;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use processes::{BINARIES, Launch, Process, find_binary, loopback, start_ready};

use crate::CliError;

/// How long each service may take to start.
const START_WITHIN: Duration = Duration::from_secs(60);
/// How long a service may take to stop before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Where to write the kubeconfig (default: in the state directory).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Where the kubeconfig and the services' logs go (default: a new
    /// directory under the system's temporary directory).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Play a seed scenario against the new cluster, print its timeline
    /// and stop (`seed-001`: three nodes, a 1 CPU / 2Gi deployment scaled
    /// from 1 to 5 replicas).
    #[arg(long, value_name = "SCENARIO")]
    pub replay: Option<String>,
    /// Where the service binaries are (default: next to karpctl, then
    /// `PATH`).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Time from launch to a Ready node in the simulated cloud (a Go
    /// duration).
    #[arg(long, default_value = "2s")]
    pub node_delay: String,
    /// Mutual TLS between the services, with a CA and a certificate per
    /// service as the chart makes them (written to `<state-dir>/tls`;
    /// replace the files to rotate them, the services read them again).
    #[arg(long)]
    pub tls: bool,
}

/// Runs `karpctl up` to the end; the exit status.
pub fn run(args: &UpArgs) -> Result<u8, CliError> {
    if let Some(scenario) = &args.replay
        && !replay::SCENARIOS.contains(&scenario.as_str())
    {
        return Err(crate::InputError::file(
            "--replay",
            format!(
                "unknown scenario {scenario:?}; known: {}",
                replay::SCENARIOS.join(", ")
            ),
        )
        .into());
    }
    karpenter_core::duration::parse_go_duration(&args.node_delay)
        .map_err(|e| crate::InputError::file("--node-delay", format!("not a duration: {e}")))?;
    let runtime = tokio::runtime::Runtime::new()
        .context("starting the async runtime")
        .map_err(CliError::Other)?;
    runtime.block_on(up(args)).map_err(CliError::Other)
}

/// The running services, stopped in reverse order of start.
struct Cluster {
    processes: Vec<Process>,
    /// Where the services' logs go.
    logs: PathBuf,
}

impl Cluster {
    /// Starts a service ([`start_ready`], see [`Launch`] for the
    /// arguments) and keeps it with the cluster's processes, so that it is
    /// stopped with them; its ports.
    async fn start<const PORTS: usize>(
        &mut self,
        name: &'static str,
        binary: &Path,
        env: &[(&str, String)],
        args: &dyn Fn(&[u16; PORTS]) -> Vec<String>,
        ready_port: usize,
    ) -> anyhow::Result<[u16; PORTS]> {
        let launch = Launch {
            name,
            binary,
            env,
            logs: &self.logs,
            args,
            ready_port,
        };
        let (process, ports) = start_ready(&launch, START_WITHIN).await?;
        self.processes.push(process);
        Ok(ports)
    }

    async fn stop(mut self) {
        while let Some(process) = self.processes.pop() {
            process.stop(STOP_GRACE).await;
        }
    }

    /// The first service that exited, if one did.
    fn exited(&mut self) -> Option<String> {
        self.processes.iter_mut().find_map(|p| {
            p.exited()
                .map(|status| format!("{} exited ({status}); see {}", p.name, p.log.display()))
        })
    }
}

fn state_dir(args: &UpArgs) -> anyhow::Result<PathBuf> {
    let dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("karpctl-up-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

async fn up(args: &UpArgs) -> anyhow::Result<u8> {
    let binaries = BINARIES
        .iter()
        .map(|name| find_binary(name, args.bin_dir.as_deref()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dir = state_dir(args)?;
    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| dir.join("kubeconfig"));
    let mut cluster = Cluster {
        processes: Vec::new(),
        logs: dir.join("logs"),
    };
    eprintln!(
        "karpctl up: starting a local cluster (logs in {})",
        cluster.logs.display()
    );
    let started = start(args, &binaries, &dir, &kubeconfig, &mut cluster).await;
    let client = match started {
        Ok(client) => client,
        Err(error) => {
            cluster.stop().await;
            return Err(error);
        }
    };
    let outcome = match &args.replay {
        Some(scenario) => replay::run(scenario, &client).await.map(|()| 0),
        None => serve(&mut cluster).await,
    };
    cluster.stop().await;
    outcome
}

/// Starts every service and prints where things are; the API client.
async fn start(
    args: &UpArgs,
    binaries: &[PathBuf],
    dir: &Path,
    kubeconfig: &Path,
    cluster: &mut Cluster,
) -> anyhow::Result<kube::Client> {
    let tls = if args.tls {
        Some(certificates::issue(&dir.join("tls"))?)
    } else {
        None
    };
    let tls_flags = |service: usize| -> Vec<String> {
        tls.as_ref()
            .map(|files| files[service].flags())
            .unwrap_or_default()
    };
    let client = start_api(&binaries[0], kubeconfig, cluster).await?;

    let info = [("LOG_LEVEL", "info".to_owned())];
    let scheduler_args = |ports: &[u16; 2]| {
        let mut args = listen_args(ports[0], ports[1]);
        args.extend(tls_flags(1));
        args
    };
    let [scheduler_grpc, _] = cluster
        .start("scheduler", &binaries[1], &info, &scheduler_args, 1)
        .await?;

    let kwok_args = |ports: &[u16; 3]| {
        let mut kwok_args = listen_args(ports[0], ports[1]);
        kwok_args.extend([
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--admin-listen".into(),
            loopback(ports[2]).to_string(),
            "--install-crd".into(),
            "--node-delay".into(),
            args.node_delay.clone(),
        ]);
        kwok_args.extend(tls_flags(2));
        kwok_args
    };
    let [kwok_grpc, _, kwok_admin] = cluster
        .start("provider-kwok", &binaries[2], &info, &kwok_args, 1)
        .await?;
    default_node_class(&client).await?;

    let adapter_args = |ports: &[u16; 1]| {
        adapter_args(
            [scheduler_grpc, kwok_grpc, ports[0]],
            kubeconfig,
            tls.as_ref().map(|files| &files[0]),
        )
    };
    println!("kubeconfig: {}", kubeconfig.display());
    println!("kwok-admin: http://{}", loopback(kwok_admin));
    if tls.is_some() {
        println!(
            "tls: mutual; certificates in {}; scheduler https://{}, provider https://{}",
            dir.join("tls").display(),
            loopback(scheduler_grpc),
            loopback(kwok_grpc)
        );
    }
    let [adapter_http] = cluster
        .start("adapter", &binaries[3], &info, &adapter_args, 0)
        .await?;
    let pool = dir.join("nodepool.yaml");
    std::fs::write(&pool, NODE_POOL_EXAMPLE)
        .with_context(|| format!("writing {}", pool.display()))?;
    println!(
        "ready: Karpenter is reconciling (adapter metrics on http://{}/metrics)",
        loopback(adapter_http)
    );
    if args.replay.is_none() {
        println!("{}", next_steps(kubeconfig, &pool));
    }
    Ok(client)
}

/// Starts the local API server and installs the CRDs; a client of it.
async fn start_api(
    binary: &Path,
    kubeconfig: &Path,
    cluster: &mut Cluster,
) -> anyhow::Result<kube::Client> {
    let api_args = |ports: &[u16; 1]| -> Vec<String> {
        vec![
            "--port".into(),
            ports[0].to_string(),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--controllers".into(),
            "--log-level".into(),
            "warn".into(),
        ]
    };
    cluster
        .start("local-apiserver", binary, &[], &api_args, 0)
        .await?;
    let client = client(kubeconfig).await?;
    install_crds(&client).await?;
    Ok(client)
}

/// The adapter's flags, given the scheduler's and the provider's gRPC ports
/// and its own metrics port, with its certificate when the services speak
/// mutual TLS (it then checks the names the chart's certificates carry).
fn adapter_args(
    [scheduler, provider, metrics]: [u16; 3],
    kubeconfig: &Path,
    tls: Option<&certificates::Files>,
) -> Vec<String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut args: Vec<String> = vec![
        "--scheduler-address".into(),
        format!("{scheme}://{}", loopback(scheduler)),
        "--provider-address".into(),
        format!("{scheme}://{}", loopback(provider)),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--metrics-listen".into(),
        loopback(metrics).to_string(),
        "--cluster-name".into(),
        "karpctl-up".into(),
    ];
    if let Some(files) = tls {
        args.extend(files.flags());
        args.extend([
            "--scheduler-tls-server-name".into(),
            certificates::server_name("scheduler"),
            "--provider-tls-server-name".into(),
            certificates::server_name("provider"),
        ]);
    }
    args
}

fn listen_args(grpc: u16, http: u16) -> Vec<String> {
    vec![
        "--listen".into(),
        loopback(grpc).to_string(),
        "--metrics-listen".into(),
        loopback(http).to_string(),
    ]
}

/// A NodePool on the local cluster's node class, as Karpenter's getting
/// started writes one.
const NODE_POOL_EXAMPLE: &str = "\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.kwok.sh
        kind: KWOKNodeClass
        name: default
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: [\"amd64\"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: [\"on-demand\", \"spot\"]
      expireAfter: 720h
  limits:
    cpu: 1000
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
";

fn next_steps(kubeconfig: &Path, pool: &Path) -> String {
    format!(
        "\nNext, in another terminal:\n\
         \n  export KUBECONFIG={}\
         \n  kubectl apply -f {}\
         \n  kubectl create deployment inflate --image=public.ecr.aws/eks-distro/kubernetes/pause:3.7 --replicas 0\
         \n  kubectl set resources deployment inflate --requests=cpu=1\
         \n  kubectl scale deployment inflate --replicas 5\
         \n  kubectl get nodeclaims -w   # kubectl watches one kind at a time; then: kubectl get nodes\
         \n\nCtrl-C stops the cluster.",
        kubeconfig.display(),
        pool.display()
    )
}

async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let config = karpenter_kube::from_kubeconfig(kubeconfig).await?;
    Ok(karpenter_kube::client(config)?)
}

async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_api::crds() {
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => {
                return Err(error).with_context(|| {
                    format!(
                        "installing the CRD {}",
                        crd.metadata.name.unwrap_or_default()
                    )
                });
            }
        }
    }
    Ok(())
}

/// The `KWOKNodeClass` named `default`, once provider-kwok has installed
/// its CRD.
async fn default_node_class(client: &kube::Client) -> anyhow::Result<()> {
    let resource = ApiResource {
        group: "karpenter.kwok.sh".into(),
        version: "v1alpha1".into(),
        api_version: "karpenter.kwok.sh/v1alpha1".into(),
        kind: "KWOKNodeClass".into(),
        plural: "kwoknodeclasses".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let class: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
        "spec": {}
    }))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match api.create(&PostParams::default(), &class).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
            Err(error) if tokio::time::Instant::now() > deadline => {
                return Err(error).context("creating the KWOKNodeClass \"default\"");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Runs until SIGINT or SIGTERM (0) or until a service exits (1).
async fn serve(cluster: &mut Cluster) -> anyhow::Result<u8> {
    let signal = karpenter_runtime::shutdown_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            () = &mut signal => {
                eprintln!("karpctl up: stopping");
                return Ok(0);
            }
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                if let Some(why) = cluster.exited() {
                    bail!("{why}");
                }
            }
        }
    }
}
