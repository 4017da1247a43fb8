//! Karpenter's well-known label keys, and the old (beta) names Kubernetes
//! still accepts for some of them.

pub const NODE_POOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

/// Labels every provider's instance types define; a pod may require them even
/// when no node pool mentions them.
pub const WELL_KNOWN: &[&str] = &[
    NODE_POOL,
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    CAPACITY_TYPE,
    WINDOWS_BUILD,
];

/// Maps deprecated label names to the names Karpenter reasons about.
pub fn normalize(key: &str) -> &str {
    match key {
        "failure-domain.beta.kubernetes.io/zone" => ZONE,
        "failure-domain.beta.kubernetes.io/region" => REGION,
        "beta.kubernetes.io/arch" => ARCH,
        "beta.kubernetes.io/os" => OS,
        "beta.kubernetes.io/instance-type" => INSTANCE_TYPE,
        other => other,
    }
}
