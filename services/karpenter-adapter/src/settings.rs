//! The adapter's settings, named as Karpenter's (flags, or the environment
//! variables a Karpenter deployment already sets), and the deprecated
//! `karpenter-global-settings` ConfigMap keys of Karpenter before v0.32.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Settings of one adapter process.
#[derive(Debug, Clone, clap::Args)]
pub struct Settings {
    /// The cluster's name (tags, events); required with provider-aws.
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster_name: String,
    /// The API server endpoint nodes join (passed on to the provider).
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "")]
    pub cluster_endpoint: String,
    /// How long a batch waits for more pending pods (a Go duration).
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = go_duration)]
    pub batch_idle_duration: Duration,
    /// The longest a batch stays open (a Go duration).
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = go_duration)]
    pub batch_max_duration: Duration,
    /// Feature gates, `Name=true,Other=false` (unlisted gates keep their
    /// defaults; unknown names are ignored, as Karpenter does).
    #[arg(long, env = "FEATURE_GATES", default_value = "", value_parser = feature_gates)]
    pub feature_gates: FeatureGates,
    /// With the `NodeRepair` gate: repair unhealthy nodes as Karpenter did
    /// before v1.15 (its own controller, replace only, forceful, no
    /// budgets, a 20% breaker) instead of as a disruption method.
    #[arg(long, env = "LEGACY_NODE_REPAIR", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub legacy_node_repair: bool,
    /// kube-scheduler's default topology spread constraints, the document
    /// itself (YAML or JSON): `{podTopologySpread: {defaultConstraints:
    /// [...]}}`; applied while planning to pods without constraints of
    /// their own, each with a selector deduced as kube-scheduler does.
    #[arg(long, env = "SCHEDULER_CONFIG", default_value = "", value_parser = scheduler_config)]
    pub scheduler_config: SchedulerConfig,
    /// Requests per second the Kubernetes client may make.
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200)]
    pub kube_client_qps: u32,
    /// Requests the Kubernetes client may make in a burst.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300)]
    pub kube_client_burst: u32,
    /// The scheduler service (`http://host:port`; `https://` with TLS).
    #[arg(long, env = "SCHEDULER_ADDRESS")]
    pub scheduler_address: String,
    /// The cloud provider service (`http://host:port`; `https://` with TLS).
    #[arg(long, env = "PROVIDER_ADDRESS")]
    pub provider_address: String,
    /// The name the scheduler's certificate must carry, when it is not the
    /// host of `--scheduler-address` (an address by IP, a proxy).
    #[arg(long, env = "SCHEDULER_TLS_SERVER_NAME")]
    pub scheduler_tls_server_name: Option<String>,
    /// The name the provider's certificate must carry, when it is not the
    /// host of `--provider-address`.
    #[arg(long, env = "PROVIDER_TLS_SERVER_NAME")]
    pub provider_tls_server_name: Option<String>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, env = "METRICS_LISTEN_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_listen: SocketAddr,
    /// Log level (`debug`, `info`, `error`) or a filter (`info,adapter=debug`).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Where logs go: `stdout`, `stderr` or a file path.
    #[arg(long, env = "LOG_OUTPUT_PATHS", default_value = "stdout")]
    pub log_output_paths: String,
    /// Log as JSON lines (Karpenter's format; `false` for text).
    #[arg(long, env = "LOG_JSON", default_value_t = true, action = clap::ArgAction::Set)]
    pub log_json: bool,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "karpenter-leader-election"
    )]
    pub leader_election_name: String,
    /// Namespace of the Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,
    /// How long a lease lasts without renewal before a standby may take it,
    /// as the standby observes (controller-runtime's `LeaseDuration`).
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = go_duration)]
    pub leader_election_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops acting;
    /// shorter than the lease duration.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = go_duration)]
    pub leader_election_renew_deadline: Duration,
    /// How often a replica tries to take or renew the lease; shorter than
    /// the renew deadline.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = go_duration)]
    pub leader_election_retry_period: Duration,
    /// Leave pods with Dynamic Resource Allocation requests unplanned (each
    /// gets a `FailedScheduling` event) and DaemonSets with them out of the
    /// overhead, as Karpenter does by default. `false` plans such pods on
    /// their other requests: devices are not simulated here.
    #[arg(long, env = "IGNORE_DRA_REQUESTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub ignore_dra_requests: bool,
    /// Leave out the cluster-state metrics Karpenter leaves out with it:
    /// `karpenter_pods_state`, `karpenter_pods_startup_duration_seconds`
    /// and the node pools' `usage` and `limit` gauges (for very large
    /// clusters, where one series per pod is too many).
    #[arg(long, env = "DISABLE_CLUSTER_STATE_OBSERVABILITY", default_value_t = false, action = clap::ArgAction::Set)]
    pub disable_cluster_state_observability: bool,
    /// Act without electing a leader (a single replica).
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value_t = false)]
    pub disable_leader_election: bool,
    /// This replica's identity in the Lease (default: the host name).
    #[arg(long, env = "POD_NAME", default_value = "")]
    pub identity: String,
    /// Whether a NodePool's `minValues` may be relaxed when they cannot be
    /// met (`BestEffort`) or not (`Strict`).
    #[arg(long, env = "MIN_VALUES_POLICY", value_enum, default_value = "Strict")]
    pub min_values_policy: MinValuesPolicy,
    /// Whether pods' preferences are honoured (`Respect`) or ignored.
    #[arg(long, env = "PREFERENCE_POLICY", value_enum, default_value = "Respect")]
    pub preference_policy: PreferencePolicy,
    #[command(flatten)]
    pub kube: karpenter_kube::KubeArgs,
    /// TLS to the scheduler and the provider (`https://` addresses): their
    /// certificates verified against `--tls-ca`, this adapter's own
    /// presented for mutual TLS.
    #[command(flatten)]
    pub tls: karpenter_runtime::TlsArgs,
}

/// `MIN_VALUES_POLICY`; the values are the scheduler's wire numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MinValuesPolicy {
    #[value(name = "Strict")]
    Strict = 1,
    #[value(name = "BestEffort")]
    BestEffort = 2,
}

/// `PREFERENCE_POLICY`; the values are the scheduler's wire numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreferencePolicy {
    #[value(name = "Respect")]
    Respect = 1,
    #[value(name = "Ignore")]
    Ignore = 2,
}

fn go_duration(text: &str) -> Result<Duration, String> {
    karpenter_core::duration::parse_go_duration(text).map_err(|e| e.to_string())
}

pub use karpenter_core::feature_gates::FeatureGates;
pub use karpenter_snapshot::spread::SchedulerConfig;

/// `--scheduler-config`, checked as kube-scheduler checks it.
pub fn scheduler_config(text: &str) -> Result<SchedulerConfig, String> {
    SchedulerConfig::parse(text)
}

/// `Name=true,Other=false` over Karpenter's defaults
/// ([`karpenter_core::feature_gates`]); a name that is not a gate is kept
/// aside and warned about at start-up, as a newer Karpenter's values may
/// name gates this adapter does not have.
pub fn feature_gates(text: &str) -> Result<FeatureGates, String> {
    FeatureGates::parse(text).map_err(|e| format!("feature gate {e}"))
}

/// A key of the pre-v0.32 `karpenter-global-settings` ConfigMap and the
/// setting that replaced it.
pub struct LegacyKey {
    pub key: &'static str,
    pub env: &'static str,
}

/// The ConfigMap keys seed 000 shows and what they became.
pub const LEGACY_KEYS: &[LegacyKey] = &[
    LegacyKey {
        key: "aws.clusterName",
        env: "CLUSTER_NAME",
    },
    LegacyKey {
        key: "aws.clusterEndpoint",
        env: "CLUSTER_ENDPOINT",
    },
    LegacyKey {
        key: "batchIdleDuration",
        env: "BATCH_IDLE_DURATION",
    },
    LegacyKey {
        key: "batchMaxDuration",
        env: "BATCH_MAX_DURATION",
    },
    LegacyKey {
        key: "aws.interruptionQueueName",
        env: "INTERRUPTION_QUEUE",
    },
    LegacyKey {
        key: "featureGates.driftEnabled",
        env: "FEATURE_GATES",
    },
];

/// The name of the deprecated settings ConfigMap.
pub const LEGACY_CONFIG_MAP: &str = "karpenter-global-settings";

impl Settings {
    /// Applies the deprecated ConfigMap's values to settings still at their
    /// defaults (flags and environment win); returns a warning per key read.
    pub fn apply_legacy(
        &mut self,
        data: &BTreeMap<String, String>,
        explicit: &[&str],
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        for legacy in LEGACY_KEYS {
            let Some(value) = data.get(legacy.key) else {
                continue;
            };
            warnings.push(format!(
                "ConfigMap {LEGACY_CONFIG_MAP} key {:?} is deprecated; set {} instead",
                legacy.key, legacy.env
            ));
            if explicit.contains(&legacy.env) {
                continue;
            }
            match legacy.env {
                "CLUSTER_NAME" => self.cluster_name = value.clone(),
                "CLUSTER_ENDPOINT" => self.cluster_endpoint = value.clone(),
                "BATCH_IDLE_DURATION" => {
                    if let Ok(d) = go_duration(value) {
                        self.batch_idle_duration = d;
                    }
                }
                "BATCH_MAX_DURATION" => {
                    if let Ok(d) = go_duration(value) {
                        self.batch_max_duration = d;
                    }
                }
                // Drift is always on in v1; the queue is the provider's.
                _ => {}
            }
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_override_only_what_they_name() {
        let gates = feature_gates("NodeRepair=true, Unknown=false").expect("valid");
        assert_eq!(gates.unknown(), ["Unknown"]);
        assert!(gates.enabled("NodeRepair"));
        assert!(gates.enabled("ReservedCapacity"), "default kept");
        assert!(!gates.enabled("SpotToSpotConsolidation"));
        assert!(feature_gates("NodeRepair=yes").is_err());
        assert!(feature_gates("NodeRepair").is_err());
        assert_eq!(feature_gates("").expect("empty"), FeatureGates::default());
    }

    #[derive(clap::Parser)]
    struct Args {
        #[command(flatten)]
        settings: Settings,
    }

    #[test]
    fn the_old_settings_config_map_is_read_with_a_warning_naming_the_new_setting() {
        use clap::Parser as _;
        let mut settings = Args::try_parse_from([
            "adapter",
            "--scheduler-address",
            "http://127.0.0.1:1",
            "--provider-address",
            "http://127.0.0.1:2",
        ])
        .expect("settings")
        .settings;
        let data: BTreeMap<String, String> = [
            ("aws.clusterName", "sample-1-22"),
            ("batchIdleDuration", "3s"),
            ("batchMaxDuration", "20s"),
            ("unrelated", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let warnings = settings.apply_legacy(&data, &["BATCH_MAX_DURATION"]);
        assert_eq!(settings.cluster_name, "sample-1-22");
        assert_eq!(settings.batch_idle_duration, Duration::from_secs(3));
        assert_eq!(
            settings.batch_max_duration,
            Duration::from_secs(10),
            "an explicit setting wins over the ConfigMap"
        );
        assert_eq!(warnings.len(), 3);
        assert!(
            warnings[0].contains("\"aws.clusterName\" is deprecated; set CLUSTER_NAME instead")
        );
    }
}
