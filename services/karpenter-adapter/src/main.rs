//! The adapter binary: settings from flags and Karpenter's environment
//! variables, then [`karpenter_adapter::run::run`] until SIGTERM.

#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::Parser;
use karpenter_adapter::run::{Options, run};
use karpenter_adapter::settings::Settings;

#[derive(Parser)]
#[command(
    name = "adapter",
    version = karpenter_runtime::build_info::version(),
    about = "Watches the cluster and carries out the scheduler's plans through the cloud provider (Karpenter v1 semantics)"
)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let level = match cli.settings.log_level.as_str() {
        "" => "info",
        other => other,
    };
    let _telemetry = karpenter_runtime::init_tracing_output(
        "karpenter-adapter",
        level,
        cli.settings.log_json,
        &cli.settings.log_output_paths,
    )
    .context("setting up logs (LOG_OUTPUT_PATHS) and traces (OTEL_*)")?;
    let http = tokio::net::TcpListener::bind(cli.settings.metrics_listen)
        .await
        .with_context(|| format!("binding {}", cli.settings.metrics_listen))?;
    tracing::info!(metrics = %http.local_addr()?, "adapter starting");
    if !cli.settings.ignore_dra_requests {
        tracing::warn!(
            "IGNORE_DRA_REQUESTS=false: pods with Dynamic Resource Allocation requests are planned on their other requests; their devices are not simulated"
        );
    }
    for name in cli.settings.feature_gates.unknown() {
        tracing::warn!(
            gate = %name,
            known = %karpenter_core::feature_gates::names().join(", "),
            "FEATURE_GATES names a gate this adapter does not have; it is ignored"
        );
    }
    let election = karpenter_adapter::leader::Timing::new(
        cli.settings.leader_election_lease_duration,
        cli.settings.leader_election_renew_deadline,
        cli.settings.leader_election_retry_period,
    )
    .map_err(anyhow::Error::msg)?;
    run(
        cli.settings,
        Options {
            election,
            ..Options::default()
        },
        http,
        karpenter_runtime::shutdown_signal(),
    )
    .await
}
