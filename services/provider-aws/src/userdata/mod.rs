//! User data per AMI family, merged with the user's `spec.userData` so that
//! the node joins the cluster with the claim's labels and taints and the
//! kubelet settings capacity was planned with:
//!
//! ```text
//!   AL2023        MIME: the user's parts (shell scripts, NodeConfigs) first,
//!                 then Karpenter's nodeadm NodeConfig (nodeadm merges later
//!                 configs over earlier ones)
//!   AL2           MIME: the user's parts, then /etc/eks/bootstrap.sh
//!   Bottlerocket  the user's TOML with Karpenter's settings merged in
//!   Windows       PowerShell: the user's script, then Start-EKSBootstrap.ps1
//!   Custom        the user's data as it is
//! ```
//!
//! Labels the kubelet may not set on itself are left to registration
//! (`node_labels`); user data that cannot be read (a broken MIME archive,
//! invalid TOML) is an error, not something to guess around.

mod bottlerocket;
mod checks;
mod eksbootstrap;
pub mod mime;
mod nodeadm;

use std::collections::BTreeMap;

use karpenter_api::aws::labels as l;
use karpenter_api::ec2nodeclass::{AMIFamily, KubeletConfiguration};

use crate::cluster::ClusterDetails;

/// A taint the kubelet registers the node with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    /// `key=value:Effect`, or `key:Effect` without a value.
    pub fn flag(&self) -> String {
        if self.value.is_empty() {
            format!("{}:{}", self.key, self.effect)
        } else {
            format!("{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// The taint every node starts with until Karpenter registers it.
pub fn unregistered_taint() -> Taint {
    Taint {
        key: l::UNREGISTERED_TAINT_KEY.into(),
        value: String::new(),
        effect: "NoExecute".into(),
    }
}

/// Everything the user data of one launch template says.
#[derive(Debug, Clone)]
pub struct Bootstrap<'a> {
    pub cluster: &'a ClusterDetails,
    /// The claim's labels; `node_labels` picks what the kubelet may set.
    pub labels: BTreeMap<String, String>,
    /// The claim's taints and startup taints, and the unregistered taint.
    pub taints: Vec<Taint>,
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// The pods the instance types of this template were planned with.
    pub max_pods: i64,
    /// `instanceStorePolicy: RAID0`.
    pub raid0: bool,
    pub user_data: Option<&'a str>,
}

impl Bootstrap<'_> {
    /// The cluster DNS address: the user's first, else the one the service
    /// CIDR implies.
    fn cluster_dns(&self) -> Option<String> {
        self.kubelet
            .and_then(|k| k.cluster_dns.first().cloned())
            .or_else(|| self.cluster.dns_ip())
    }

    /// The user's data, when there is any.
    fn user(&self) -> Option<&str> {
        self.user_data.filter(|u| !u.trim().is_empty())
    }
}

/// Why user data could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    #[error(transparent)]
    Mime(#[from] mime::MimeError),
    #[error("user data is not valid TOML for Bottlerocket: {0}")]
    Toml(String),
    #[error("user data: {0}")]
    Invalid(String),
    /// A label, taint or kubelet setting that may not be written into user
    /// data; `field` is its path in the request.
    #[error("{field}: Invalid value: {value:?}: {detail}")]
    Field {
        field: String,
        value: String,
        detail: String,
    },
}

impl UserDataError {
    /// The request field at fault.
    pub fn field(&self) -> &str {
        match self {
            Self::Field { field, .. } => field,
            _ => "node_claim.node_class.spec.userData",
        }
    }
}

/// Label domains a kubelet may not label its own node with (the kubelet
/// refuses most keys there and the NodeRestriction admission plugin the
/// rest); registration sets them instead.
const KUBELET_FORBIDDEN_DOMAINS: [&str; 3] =
    ["kubernetes.io", "k8s.io", "node-restriction.kubernetes.io"];

/// The labels the kubelet registers the node with: the claim's, less those
/// in the `kubernetes.io` and `k8s.io` domains, as Karpenter drops them.
pub fn node_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(key, _)| {
            let Some((domain, _)) = key.split_once('/') else {
                return true;
            };
            !KUBELET_FORBIDDEN_DOMAINS
                .iter()
                .any(|forbidden| domain == *forbidden || domain.ends_with(&format!(".{forbidden}")))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The user data of `family`, not yet base64-encoded. Every label, taint
/// and kubelet setting written into it is checked first ([`checks`]).
pub fn render(family: AMIFamily, b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    checks::check(b)?;
    match family {
        AMIFamily::AL2023 => nodeadm::render(b),
        AMIFamily::AL2 => eksbootstrap::al2(b),
        AMIFamily::Bottlerocket => bottlerocket::render(b),
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => {
            Ok(eksbootstrap::windows(b))
        }
        AMIFamily::Custom => Ok(b.user_data.unwrap_or_default().to_string()),
    }
}

/// Checks that the user's data can be merged for `family` (for the node
/// class's status, before any launch needs it).
pub fn check(family: AMIFamily, user_data: Option<&str>) -> Result<(), UserDataError> {
    let Some(user) = user_data.filter(|u| !u.trim().is_empty()) else {
        return Ok(());
    };
    match family {
        AMIFamily::AL2023 => nodeadm::user_parts(user).map(|_| ()),
        AMIFamily::AL2 => eksbootstrap::user_parts(user).map(|_| ()),
        AMIFamily::Bottlerocket => bottlerocket::parse(user).map(|_| ()),
        AMIFamily::Windows2019
        | AMIFamily::Windows2022
        | AMIFamily::Windows2025
        | AMIFamily::Custom => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelet_sets_no_label_in_the_kubernetes_domains() {
        let labels: BTreeMap<String, String> = [
            "kubernetes.io/arch",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "node-restriction.kubernetes.io/team",
            "kops.k8s.io/instancegroup",
            "app.kubernetes.io/name",
            "karpenter.sh/nodepool",
            "karpenter.k8s.aws/ec2nodeclass",
            "example.com/team",
            "k8s.io.example.com/x",
            "mykubernetes.io/x",
            "plain",
        ]
        .iter()
        .map(|k| (k.to_string(), "v".to_string()))
        .collect();
        let kept: Vec<String> = node_labels(&labels).into_keys().collect();
        assert_eq!(
            kept,
            vec![
                "example.com/team",
                "k8s.io.example.com/x",
                "karpenter.k8s.aws/ec2nodeclass",
                "karpenter.sh/nodepool",
                "mykubernetes.io/x",
                "plain"
            ]
        );
    }
}
