//! What a node needs to join its cluster: the API server endpoint, the CA
//! bundle, the service CIDR (hence the cluster DNS address and IP family)
//! and the Kubernetes version (hence the EKS-optimized AMIs).
//!
//! ```text
//!   --cluster-endpoint / --cluster-ca-bundle /     each set field wins
//!   --service-cidr / --kubernetes-version  ─────┐
//!   eks:DescribeCluster(cluster name) ──────────┴─▶ ClusterDetails (cached once complete;
//!                                                   asked again while a field is missing)
//! ```
//!
//! Without an endpoint, a CA bundle or a service CIDR no node can join, so
//! node classes are reported not ready and nothing launches.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::aws::{Clients, Settings};
use crate::error::Error;

/// How often DescribeCluster is asked again while details are missing.
const RETRY_EVERY: Duration = Duration::from_secs(30);

/// The cluster as nodes see it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClusterDetails {
    pub name: String,
    pub endpoint: String,
    /// Base64 of the PEM CA bundle.
    pub ca_bundle: String,
    /// The service CIDR, e.g. `172.20.0.0/16`.
    pub service_cidr: String,
    /// Kubernetes minor version, e.g. `1.31`.
    pub version: String,
}

impl ClusterDetails {
    /// The cluster DNS service address the EKS AMIs derive from the service
    /// CIDR: `.10` of an IPv4 range, `::a` of an IPv6 one.
    pub fn dns_ip(&self) -> Option<String> {
        let (network, _) = self.service_cidr.split_once('/')?;
        match network.parse::<IpAddr>().ok()? {
            IpAddr::V4(_) => {
                let (prefix, _) = network.rsplit_once('.')?;
                Some(format!("{prefix}.10"))
            }
            IpAddr::V6(_) => Some(format!("{network}a")),
        }
    }

    /// Whether the cluster serves IPv6 (its service CIDR is IPv6).
    pub fn ipv6(&self) -> bool {
        self.service_cidr
            .split_once('/')
            .and_then(|(network, _)| network.parse::<IpAddr>().ok())
            .is_some_and(|ip| ip.is_ipv6())
    }

    /// What nodes cannot do without, named as the settings that give it.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if self.endpoint.is_empty() {
            missing.push("the API server endpoint (CLUSTER_ENDPOINT)");
        }
        if self.ca_bundle.is_empty() {
            missing.push("the CA bundle (CLUSTER_CA_BUNDLE)");
        }
        if self.dns_ip().is_none() {
            missing.push("the service CIDR (SERVICE_CIDR)");
        }
        if self.version.is_empty() {
            missing.push("the Kubernetes version (KUBERNETES_VERSION)");
        }
        missing
    }
}

/// The details, discovered once and kept.
pub struct Cluster {
    clients: Clients,
    settings: Settings,
    known: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    details: Option<ClusterDetails>,
    asked: Option<Instant>,
    /// Why the last DescribeCluster failed, for the node class condition.
    error: Option<String>,
}

impl Cluster {
    pub fn new(clients: Clients, settings: Settings) -> Self {
        Self {
            clients,
            settings,
            known: Mutex::new(Known::default()),
        }
    }

    /// The details as well as they are known; the error says why
    /// DescribeCluster could not fill what the settings leave out.
    pub async fn details(&self) -> (ClusterDetails, Option<String>) {
        let mut known = self.known.lock().await;
        let complete = known
            .details
            .as_ref()
            .is_some_and(|d| d.missing().is_empty());
        let due = known.asked.is_none_or(|at| at.elapsed() >= RETRY_EVERY);
        if !complete && due {
            known.asked = Some(Instant::now());
            let discovered = self.describe().await;
            let (from_eks, error) = match discovered {
                Ok(details) => (details, None),
                Err(error) => {
                    tracing::warn!(%error, "eks:DescribeCluster failed; using the configured cluster details");
                    (ClusterDetails::default(), Some(error.to_string()))
                }
            };
            known.details = Some(self.with_overrides(from_eks));
            known.error = error;
        }
        let details = known
            .details
            .clone()
            .unwrap_or_else(|| self.with_overrides(ClusterDetails::default()));
        (details, known.error.clone())
    }

    /// What DescribeCluster says, with every configured field in its place.
    fn with_overrides(&self, from_eks: ClusterDetails) -> ClusterDetails {
        let pick = |configured: &Option<String>, discovered: String| {
            configured
                .clone()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or(discovered)
        };
        ClusterDetails {
            name: self.settings.cluster_name.clone(),
            endpoint: pick(&self.settings.cluster_endpoint, from_eks.endpoint),
            ca_bundle: pick(&self.settings.cluster_ca_bundle, from_eks.ca_bundle),
            service_cidr: pick(&self.settings.service_cidr, from_eks.service_cidr),
            version: pick(&self.settings.kubernetes_version, from_eks.version),
        }
    }

    async fn describe(&self) -> Result<ClusterDetails, Error> {
        let out = self
            .clients
            .eks
            .describe_cluster()
            .name(&self.settings.cluster_name)
            .send()
            .await
            .map_err(|e| Error::aws("eks:DescribeCluster", &e))?;
        let Some(cluster) = out.cluster() else {
            return Ok(ClusterDetails::default());
        };
        let network = cluster.kubernetes_network_config();
        Ok(ClusterDetails {
            name: self.settings.cluster_name.clone(),
            endpoint: cluster.endpoint().unwrap_or_default().to_string(),
            ca_bundle: cluster
                .certificate_authority()
                .and_then(|c| c.data())
                .unwrap_or_default()
                .to_string(),
            service_cidr: network
                .and_then(|n| n.service_ipv4_cidr().or(n.service_ipv6_cidr()))
                .unwrap_or_default()
                .to_string(),
            version: cluster.version().unwrap_or_default().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cidr(cidr: &str) -> ClusterDetails {
        ClusterDetails {
            service_cidr: cidr.into(),
            ..ClusterDetails::default()
        }
    }

    #[test]
    fn cluster_dns_follows_the_service_cidr() {
        assert_eq!(
            with_cidr("172.20.0.0/16").dns_ip().as_deref(),
            Some("172.20.0.10")
        );
        assert_eq!(
            with_cidr("10.100.0.0/16").dns_ip().as_deref(),
            Some("10.100.0.10")
        );
        assert_eq!(
            with_cidr("fd12:3456:789a::/108").dns_ip().as_deref(),
            Some("fd12:3456:789a::a")
        );
        assert!(with_cidr("fd12:3456:789a::/108").ipv6());
        assert!(!with_cidr("10.100.0.0/16").ipv6());
        assert_eq!(with_cidr("").dns_ip(), None);
        assert_eq!(with_cidr("not a cidr").dns_ip(), None);
    }

    #[test]
    fn every_missing_detail_is_named() {
        let missing = ClusterDetails::default().missing();
        assert_eq!(missing.len(), 4, "{missing:?}");
        let complete = ClusterDetails {
            name: "c".into(),
            endpoint: "https://api".into(),
            ca_bundle: "Q0E=".into(),
            service_cidr: "10.100.0.0/16".into(),
            version: "1.31".into(),
        };
        assert!(complete.missing().is_empty());
    }
}
