//! `provider-kwok`: the simulated cloud provider over gRPC.
//!
//! ```sh
//! provider-kwok --listen 127.0.0.1:50052 --metrics-listen 127.0.0.1:8082 \
//!   --kubeconfig kubeconfig --admin-listen 127.0.0.1:8090 [--catalog catalog.yaml]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use provider_kwok::{KwokProvider, Options};

#[derive(Debug, Parser)]
#[command(
    name = "provider-kwok",
    version = karpenter_runtime::build_info::version(),
    about = "A simulated cloud provider: instances become Node objects in a cluster"
)]
struct Args {
    #[command(flatten)]
    service: karpenter_runtime::ServiceArgs,
    /// The cluster to create Nodes in (without a kubeconfig and outside a
    /// cluster: instances only).
    #[command(flatten)]
    kube: karpenter_kube::KubeArgs,
    /// An InstanceTypeCatalog file (default: the built-in kwok-shaped catalog).
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Delay from Create to a Ready Node (Go duration).
    #[arg(long, default_value = "2s")]
    node_delay: String,
    /// Where to serve the admin HTTP API (fault injection, interruptions).
    #[arg(long)]
    admin_listen: Option<SocketAddr>,
    /// Apply the KWOKNodeClass CRD to the cluster on start.
    #[arg(long)]
    install_crd: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let service_args = args.service.clone();
    karpenter_runtime::run_service(
        "karpenter-provider-kwok",
        &service_args,
        |metrics| async move {
            let provider = provider(args).await?;
            Ok(provider.service(metrics))
        },
    )
    .await
}

/// The provider its flags describe, with its admin API serving when asked.
async fn provider(args: Args) -> anyhow::Result<KwokProvider> {
    let catalog =
        provider_kwok::load_catalog(args.catalog.as_deref()).context("loading the catalog")?;
    let node_delay = karpenter_core::duration::parse_go_duration(&args.node_delay)
        .context("--node-delay is not a duration")?;
    let client = match karpenter_kube::config(&args.kube).await? {
        Some(config) => Some(karpenter_kube::client(config)?),
        None => {
            tracing::warn!("no kubeconfig and not in a cluster: instances will not become Nodes");
            None
        }
    };
    if args.install_crd {
        let client = client
            .clone()
            .context("--install-crd needs a cluster (--kubeconfig or in-cluster)")?;
        install_crd(client).await?;
    }
    let provider = KwokProvider::new(
        catalog,
        client,
        Options {
            node_delay,
            redelivery: Duration::from_secs(10),
        },
    );
    if let Some(addr) = args.admin_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .context("binding --admin-listen")?;
        let router = provider_kwok::admin_router(provider.clone());
        tracing::info!(%addr, "admin API");
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "admin API stopped");
            }
        });
    }
    Ok(provider)
}

async fn install_crd(client: kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(provider_kwok::NODE_CLASS_CRD).context("parsing the CRD")?;
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client);
    api.patch(
        "kwoknodeclasses.karpenter.kwok.sh",
        &kube::api::PatchParams::apply("provider-kwok").force(),
        &kube::api::Patch::Apply(&crd),
    )
    .await
    .context("applying the KWOKNodeClass CRD")?;
    Ok(())
}
