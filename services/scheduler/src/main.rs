//! `scheduler`: serves `karpenter.scheduler.v1.Scheduler` over gRPC.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "scheduler",
    about = "Karpenter-compatible scheduling decisions over gRPC (stateless)"
)]
struct Args {
    #[command(flatten)]
    service: karpenter_runtime::ServiceArgs,
    /// Largest request accepted, in bytes.
    #[arg(long, env = "MAX_REQUEST_BYTES", default_value_t = karpenter_scheduler::DEFAULT_MAX_REQUEST_BYTES)]
    max_request_bytes: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    karpenter_runtime::init_tracing(&args.service.log_level, args.service.log_json);
    let metrics = karpenter_runtime::Metrics::new("karpenter_scheduler");
    let service = karpenter_scheduler::service(metrics, args.max_request_bytes);
    karpenter_runtime::serve(&args.service, service).await
}
