//! The `local-apiserver` command line: serve until told to stop, write a
//! kubeconfig that `kubectl` uses unchanged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::{Config, LocalApiServer};
use anyhow::Context;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "local-apiserver",
    about = "An in-memory Kubernetes API server for tests"
)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "kubeconfig")]
    kubeconfig: PathBuf,
    /// Load objects from this file on start, save them there on shutdown.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// Events kept for watches that resume from an older resourceVersion.
    #[arg(long, default_value_t = 20_000)]
    history: usize,
    /// Seconds between bookmarks on idle watches.
    #[arg(long, default_value_t = 5)]
    bookmark_seconds: u64,
    /// Run the workload controller (Deployments, ReplicaSets), the
    /// scheduler stand-in (binds pods, marks the rest Unschedulable) and the
    /// kubelet stand-in (bound pods become Running and Ready).
    #[arg(long)]
    controllers: bool,
    /// Serve HTTPS with a self-signed certificate (written as ca.crt next
    /// to the kubeconfig, which refers to it) instead of HTTP.
    #[arg(long)]
    tls: bool,
    /// Log filter (RUST_LOG syntax).
    #[arg(long, default_value = "info")]
    log_level: String,
}

/// Parses the command line and serves until Ctrl-C or SIGTERM.
pub async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&args.log_level))
        .with_writer(std::io::stderr)
        .init();
    let server = LocalApiServer::start(Config {
        listen: SocketAddr::from(([127, 0, 0, 1], args.port)),
        kubeconfig: Some(args.kubeconfig.clone()),
        history: args.history,
        bookmark_interval: Duration::from_secs(args.bookmark_seconds.max(1)),
        state_file: args.state_file.clone(),
        controllers: args.controllers,
        tls: args.tls,
    })
    .await
    .context("starting local-apiserver")?;
    tracing::info!(url = %server.url(), kubeconfig = %args.kubeconfig.display(), "serving");
    println!("{}", server.url());
    stopped().await?;
    server.stop().await.context("stopping")?;
    Ok(())
}

/// Ctrl-C or SIGTERM (what `karpctl up` and Kubernetes send).
async fn stopped() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("listening for SIGTERM")?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.context("waiting for ctrl-c")?,
            _ = term.recv() => {}
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.context("waiting for ctrl-c")
    }
}
