//! `scheduler`: serves `karpenter.scheduler.v1.Scheduler` over gRPC.

use clap::Parser;

// Solving builds and drops many small objects (requirements, claims,
// topology counts); mimalloc serves that churn far faster than the system
// allocator (BENCHMARKS.md measures Solve with it, as this binary runs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "scheduler",
    version = karpenter_runtime::build_info::version(),
    about = "Karpenter-compatible scheduling decisions over gRPC (stateless)"
)]
struct Args {
    #[command(flatten)]
    service: karpenter_runtime::ServiceArgs,
    /// Largest request accepted, in bytes.
    #[arg(long, env = "MAX_REQUEST_BYTES", default_value_t = karpenter_scheduler::DEFAULT_MAX_REQUEST_BYTES)]
    max_request_bytes: usize,
    /// Longest a call may compute, in seconds (a shorter client deadline wins).
    #[arg(long, env = "MAX_CALL_SECONDS", default_value_t = karpenter_scheduler::DEFAULT_MAX_CALL_SECONDS)]
    max_call_seconds: f64,
    /// Calls computing at once (default: one per CPU).
    #[arg(long, env = "CONCURRENT_CALLS")]
    concurrent_calls: Option<usize>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    karpenter_runtime::run_service("karpenter-scheduler", &args.service, |metrics| async move {
        anyhow::ensure!(
            args.max_call_seconds.is_finite() && args.max_call_seconds > 0.0,
            "--max-call-seconds must be a positive number of seconds"
        );
        let defaults = karpenter_scheduler::Limits::default();
        let limits = karpenter_scheduler::Limits {
            max_request_bytes: args.max_request_bytes,
            max_call: std::time::Duration::from_secs_f64(args.max_call_seconds),
            concurrent_calls: args.concurrent_calls.unwrap_or(defaults.concurrent_calls),
        };
        Ok(karpenter_scheduler::service(metrics, limits))
    })
    .await
}
