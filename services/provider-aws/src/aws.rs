//! Settings and the SDK clients, all pointed at one endpoint when one is given
//! (`AWS_ENDPOINT_URL`, e.g. moto in the tests).

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_ec2::config::{Credentials, Region};

/// What the service needs to know about its cluster and account.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Name of the EKS cluster; tags every resource the provider makes.
    pub cluster_name: String,
    /// Region the instances run in.
    pub region: String,
    /// Overrides every AWS endpoint (moto, a proxy, a VPC endpoint).
    pub endpoint_url: Option<String>,
    /// Static credentials (tests); otherwise the SDK's default chain.
    pub credentials: Option<(String, String)>,
    /// Kubernetes minor version, for the EKS-optimized AMI SSM parameters;
    /// unset: the cluster's (`eks:DescribeCluster`).
    pub kubernetes_version: Option<String>,
    /// API server endpoint written into user data; unset: the cluster's.
    pub cluster_endpoint: Option<String>,
    /// Base64 cluster CA bundle written into user data; unset: the cluster's.
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's service CIDR (cluster DNS, IP family); unset: the
    /// cluster's.
    pub service_cidr: Option<String>,
    /// SQS queue name or URL of interruption events; none disables the stream.
    pub interruption_queue: Option<String>,
    /// Share of memory the hypervisor and OS take before the kubelet sees it.
    pub vm_memory_overhead_percent: f64,
    /// ENIs kept out of the pod-density computation.
    pub reserved_enis: i32,
    /// How often prices are refreshed.
    pub pricing_refresh: Duration,
    /// How long the instance-type catalog is cached.
    pub instance_types_ttl: Duration,
    /// Region of the Pricing API endpoint.
    pub pricing_region: String,
    /// Karpenter's `ISOLATED_VPC`: AWS services without a VPC endpoint are
    /// out of reach, so the Pricing API is never called and on-demand
    /// prices are the estimate from vCPU and memory.
    pub isolated_vpc: bool,
    /// Longest wait of one SQS long poll, in seconds (0..=20).
    pub interruption_wait_seconds: i32,
    /// Attempts per AWS call (throttling and 5xx are retried with backoff).
    pub max_attempts: u32,
    /// A launch template unused this long is deleted.
    pub launch_template_ttl: Duration,
    /// How often unused launch templates are looked for.
    pub janitor_interval: Duration,
    /// `AWS_FEATURE_GATES` `NodeClassCEL`: kubelet settings may be CEL
    /// expressions evaluated per instance type.
    pub node_class_cel: bool,
    /// `AWS_FEATURE_GATES` `RebootForRepair`: node repair may reboot an
    /// instance in place (`ec2:RebootInstances`) for the faults a reboot
    /// clears.
    pub reboot_for_repair: bool,
}

impl Settings {
    /// Settings for `cluster_name` in `region` with Karpenter's defaults.
    pub fn new(cluster_name: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            region: region.into(),
            endpoint_url: None,
            credentials: None,
            kubernetes_version: None,
            cluster_endpoint: None,
            cluster_ca_bundle: None,
            service_cidr: None,
            interruption_queue: None,
            vm_memory_overhead_percent: 0.075,
            reserved_enis: 0,
            pricing_refresh: Duration::from_secs(12 * 60 * 60),
            instance_types_ttl: Duration::from_secs(5 * 60),
            pricing_region: "us-east-1".into(),
            isolated_vpc: false,
            interruption_wait_seconds: 20,
            max_attempts: 5,
            launch_template_ttl: Duration::from_secs(10 * 60),
            janitor_interval: Duration::from_secs(60),
            node_class_cel: false,
            reboot_for_repair: false,
        }
    }
}

/// One client per AWS service the provider calls.
#[derive(Clone)]
pub struct Clients {
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub iam: aws_sdk_iam::Client,
    pub pricing: aws_sdk_pricing::Client,
    pub eks: aws_sdk_eks::Client,
}

impl Clients {
    pub async fn new(settings: &Settings) -> Self {
        let retry = RetryConfig::standard()
            .with_max_attempts(settings.max_attempts.max(1))
            .with_initial_backoff(Duration::from_millis(100))
            .with_max_backoff(Duration::from_secs(10));
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(settings.region.clone()))
            .retry_config(retry);
        if let Some(url) = &settings.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some((key, secret)) = &settings.credentials {
            loader = loader.credentials_provider(Credentials::new(
                key.clone(),
                secret.clone(),
                None,
                None,
                "static",
            ));
        }
        let shared = loader.load().await;
        let pricing = aws_sdk_pricing::config::Builder::from(&shared)
            .region(Region::new(settings.pricing_region.clone()))
            .build();
        Self {
            ec2: aws_sdk_ec2::Client::new(&shared),
            ssm: aws_sdk_ssm::Client::new(&shared),
            sqs: aws_sdk_sqs::Client::new(&shared),
            iam: aws_sdk_iam::Client::new(&shared),
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
            eks: aws_sdk_eks::Client::new(&shared),
        }
    }
}
