//! `provider-aws`: serves `karpenter.provider.v1.CloudProvider` over the AWS APIs.

use std::time::Duration;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "provider-aws",
    version = karpenter_runtime::build_info::version(),
    about = "Karpenter's AWS cloud provider over gRPC"
)]
struct Args {
    #[command(flatten)]
    service: karpenter_runtime::ServiceArgs,
    /// Name of the EKS cluster.
    #[arg(long, env = "CLUSTER_NAME")]
    cluster_name: String,
    /// AWS region (on EKS the pod identity webhook sets AWS_REGION);
    /// AWS_DEFAULT_REGION is read when it is not set. Required: launching
    /// in a region nobody chose would be launching in the wrong account's
    /// capacity.
    #[arg(long, env = "AWS_REGION")]
    region: Option<String>,
    /// Endpoint for every AWS API (moto, a proxy); the SDK default otherwise.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    endpoint_url: Option<String>,
    /// API server endpoint written into user data (default: the cluster's,
    /// from eks:DescribeCluster).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    cluster_endpoint: Option<String>,
    /// Base64 cluster CA bundle written into user data (default: the
    /// cluster's).
    #[arg(long, env = "CLUSTER_CA_BUNDLE")]
    cluster_ca_bundle: Option<String>,
    /// The cluster's service CIDR, for the cluster DNS address and IP family
    /// (default: the cluster's).
    #[arg(long, env = "SERVICE_CIDR")]
    service_cidr: Option<String>,
    /// Kubernetes minor version, for the EKS-optimized AMIs (default: the
    /// cluster's).
    #[arg(long, env = "KUBERNETES_VERSION")]
    kubernetes_version: Option<String>,
    /// SQS queue name or URL of interruption events.
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    interruption_queue: Option<String>,
    /// VM memory overhead, as a fraction of memory.
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = 0.075)]
    vm_memory_overhead_percent: f64,
    /// ENIs kept out of the pod-density computation.
    #[arg(long, env = "RESERVED_ENIS", default_value_t = 0)]
    reserved_enis: i32,
    /// Assume AWS services without a VPC endpoint are unreachable: the
    /// Pricing API is not called and on-demand prices are estimated from
    /// vCPU and memory (Karpenter uses tables built into its binary).
    #[arg(long, env = "ISOLATED_VPC", default_value_t = false, action = clap::ArgAction::Set)]
    isolated_vpc: bool,
    /// provider-aws's feature gates, `Name=true,...` (Karpenter's
    /// `AWS_FEATURE_GATES`): `NodeClassCEL` (default false). Names that are
    /// not gates are ignored with a warning.
    #[arg(long, env = "AWS_FEATURE_GATES", default_value = "")]
    aws_feature_gates: String,
    /// Seconds between price refreshes.
    #[arg(long, env = "PRICING_REFRESH_SECONDS", default_value_t = 12 * 60 * 60)]
    pricing_refresh_seconds: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let service_args = args.service.clone();
    karpenter_runtime::run_service(
        "karpenter-provider-aws",
        &service_args,
        |metrics| async move {
            let settings = settings(args)?;
            Ok(provider_aws::service(settings, metrics).await)
        },
    )
    .await
}

/// The provider's settings from its flags, refusing what it cannot run
/// without.
fn settings(args: Args) -> anyhow::Result<provider_aws::Settings> {
    // Everything the provider makes is tagged with the cluster's name, and
    // its IAM policy is scoped by it: there is no sensible default.
    anyhow::ensure!(
        !args.cluster_name.trim().is_empty(),
        "the cluster's name is required: --cluster-name or CLUSTER_NAME (the chart's settings.clusterName)"
    );
    let region = args
        .region
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    let Some(region) = region else {
        anyhow::bail!(
            "the AWS region is required: --region, AWS_REGION or AWS_DEFAULT_REGION (the chart's aws.region)"
        );
    };
    let mut settings = provider_aws::Settings::new(args.cluster_name, region);
    settings.endpoint_url = args.endpoint_url;
    settings.cluster_endpoint = args.cluster_endpoint;
    settings.cluster_ca_bundle = args.cluster_ca_bundle;
    settings.service_cidr = args.service_cidr;
    settings.kubernetes_version = args.kubernetes_version;
    settings.interruption_queue = args.interruption_queue;
    settings.vm_memory_overhead_percent = args.vm_memory_overhead_percent;
    settings.reserved_enis = args.reserved_enis;
    settings.isolated_vpc = args.isolated_vpc;
    settings.pricing_refresh = Duration::from_secs(args.pricing_refresh_seconds.max(60));
    let gates = karpenter_core::feature_gates::FeatureGates::parse_over(
        provider_aws::kubelet::FEATURE_GATE_DEFAULTS,
        &args.aws_feature_gates,
    )
    .map_err(|e| anyhow::anyhow!("AWS_FEATURE_GATES: {e}"))?;
    for name in gates.unknown() {
        tracing::warn!(gate = %name, "AWS_FEATURE_GATES names a gate provider-aws does not have; ignored");
    }
    settings.node_class_cel = gates.enabled(provider_aws::kubelet::NODE_CLASS_CEL);
    settings.reboot_for_repair = gates.enabled(provider_aws::kubelet::REBOOT_FOR_REPAIR);
    Ok(settings)
}
