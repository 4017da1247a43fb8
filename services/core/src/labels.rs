//! Well-known label, annotation, taint, finalizer and tag keys, and the label-domain rules.
//!
//! Karpenter reserves a few label domains (`kubernetes.io`, `k8s.io`, `karpenter.sh`,
//! `karpenter.k8s.aws`): users may not set labels in them on a NodePool template or use them as
//! requirement keys, except for the *well-known* labels listed here, which Karpenter knows how to
//! satisfy (zone, instance type, capacity type, the `karpenter.k8s.aws/instance-*` family, ...).
//! Sub-domains in [`LABEL_DOMAIN_EXCEPTIONS`] (`node.kubernetes.io`, `kops.k8s.io`, ...) are
//! allowed because the kubelet does not set them.
//!
//! The same rules are enforced by the API server through the CEL rules in the generated CRDs; the
//! functions here let the scheduler and adapter apply them without a round trip.
//!
//! Two well-known sets exist on purpose: [`NEUTRAL_WELL_KNOWN_LABELS`] are the ones every
//! provider's instance types define (the scheduler's baseline; a provider adds its own), and
//! [`WELL_KNOWN_LABELS`] adds the AWS provider's.

use std::fmt;

/// API group of NodePool and NodeClaim.
pub const KARPENTER_GROUP: &str = "karpenter.sh";
/// API group of EC2NodeClass.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";
/// Group used for compatibility annotations.
pub const COMPATIBILITY_GROUP: &str = "compatibility.karpenter.sh";

// --- Kubernetes well-known node labels --------------------------------------------------------

/// Availability zone of the node.
pub const TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// Region of the node.
pub const TOPOLOGY_REGION: &str = "topology.kubernetes.io/region";
/// Instance type of the node.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// CPU architecture (`amd64`, `arm64`).
pub const ARCH: &str = "kubernetes.io/arch";
/// Operating system (`linux`, `windows`).
pub const OS: &str = "kubernetes.io/os";
/// Host name of the node; restricted, Karpenter never sets it.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// Windows build number.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
/// Label every namespace carries with its own name.
pub const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
/// Pod annotation ranking which pods a ReplicaSet removes first.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Taint on a node that is cordoned (`spec.unschedulable`).
pub const UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";
/// Deprecated alias of [`TOPOLOGY_ZONE`].
pub const FAILURE_DOMAIN_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// Deprecated alias of [`TOPOLOGY_REGION`].
pub const FAILURE_DOMAIN_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// Deprecated alias of [`ARCH`].
pub const BETA_ARCH: &str = "beta.kubernetes.io/arch";
/// Deprecated alias of [`OS`].
pub const BETA_OS: &str = "beta.kubernetes.io/os";
/// Deprecated alias of [`INSTANCE_TYPE`].
pub const BETA_INSTANCE_TYPE: &str = "beta.kubernetes.io/instance-type";

// --- Karpenter labels, annotations, taints, finalizers -----------------------------------------

/// Name of the NodePool that owns a NodeClaim / Node.
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
/// Capacity type of the node: [`CAPACITY_TYPE_SPOT`], [`CAPACITY_TYPE_ON_DEMAND`] or [`CAPACITY_TYPE_RESERVED`].
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Set to `"true"` once the node has registered with the cluster.
pub const REGISTERED: &str = "karpenter.sh/registered";
/// Set to `"true"` once the node is initialized (ready, startup taints gone, resources registered).
pub const INITIALIZED: &str = "karpenter.sh/initialized";
/// Annotation on a pod or node that blocks voluntary disruption.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Annotation with the hash of the NodePool template a NodeClaim was made from.
pub const NODE_POOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// Annotation with the version of the hashing scheme behind [`NODE_POOL_HASH`].
pub const NODE_POOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// Annotation recording when a NodeClaim must be terminated by (terminationGracePeriod).
pub const NODE_CLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// Annotation marking which provider a resource is compatible with.
pub const PROVIDER_COMPATIBILITY: &str = "compatibility.karpenter.sh/provider";
/// Finalizer that keeps NodeClaims and Nodes until the instance is gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// Taint key put on nodes that Karpenter is disrupting (effect `NoSchedule`).
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// Taint key put on nodes until they register (effect `NoExecute`).
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// On a node: its kubelet registered it with its taints, so registration
/// does not copy the claim's taints onto it.
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";

/// Spot capacity.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// On-demand capacity.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity from a capacity reservation.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// The amd64 architecture.
pub const ARCH_AMD64: &str = "amd64";
/// The arm64 architecture.
pub const ARCH_ARM64: &str = "arm64";

// --- AWS provider labels, annotations and tags -------------------------------------------------

/// Capacity reservation the instance was launched into.
pub const AWS_CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// Type of that capacity reservation (`default`, `capacity-block`).
pub const AWS_CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// Hypervisor (`nitro`, `xen`).
pub const AWS_INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// Whether the instance encrypts traffic in transit.
pub const AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// Instance category (`c`, `m`, `r`, `t`, ...).
pub const AWS_INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// Whether the instance type is a "flex" type.
pub const AWS_INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
/// Instance family (`m5`, `t4g`, ...).
pub const AWS_INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// Instance generation (`5`, `6`, ...).
pub const AWS_INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// Local NVMe storage in GiB.
pub const AWS_INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// Instance size (`large`, `2xlarge`, ...).
pub const AWS_INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// Number of vCPUs.
pub const AWS_INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// CPU manufacturer (`intel`, `amd`, `aws`).
pub const AWS_INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// Sustained clock speed in MHz.
pub const AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// Memory in MiB.
pub const AWS_INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// EBS bandwidth in Mbps.
pub const AWS_INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// Network bandwidth in Mbps.
pub const AWS_INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// GPU name (`t4`, `a100`, ...).
pub const AWS_INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// GPU manufacturer (`nvidia`, `amd`).
pub const AWS_INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// Number of GPUs.
pub const AWS_INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// GPU memory in MiB.
pub const AWS_INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// Accelerator name (`inferentia`, ...).
pub const AWS_INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// Accelerator manufacturer.
pub const AWS_INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// Number of accelerators.
pub const AWS_INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// Tenancies an instance type can be launched with (`default`, `dedicated`).
pub const AWS_INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
/// Name of the EC2NodeClass a NodeClaim / Node was launched with.
pub const AWS_EC2_NODE_CLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Availability-zone ID (`use1-az1`).
pub const AWS_TOPOLOGY_ZONE_ID: &str = "topology.k8s.aws/zone-id";

/// Annotation with the hash of the EC2NodeClass spec a NodeClaim was launched with.
pub const AWS_EC2_NODE_CLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// Annotation with the version of the hashing scheme behind [`AWS_EC2_NODE_CLASS_HASH`].
pub const AWS_EC2_NODE_CLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Annotation set once the instance carries all of Karpenter's tags.
pub const AWS_INSTANCE_TAGGED: &str = "karpenter.k8s.aws/tagged";
/// Annotation with the name of the instance profile Karpenter manages for a node class.
pub const AWS_INSTANCE_PROFILE_NAME: &str = "karpenter.k8s.aws/instance-profile-name";
/// Annotation marking that the cluster-name tag has been added to old instances.
pub const AWS_CLUSTER_NAME_TAGGED: &str = "compatibility.karpenter.k8s.aws/cluster-name-tagged";
/// Finalizer on EC2NodeClasses.
pub const AWS_TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";

/// EC2 tag naming the NodeClaim of an instance.
pub const TAG_NODE_CLAIM: &str = "karpenter.sh/nodeclaim";
/// EC2 tag naming the NodePool of an instance (same key as the label).
pub const TAG_NODE_POOL: &str = NODE_POOL;
/// EC2 tag naming the EC2NodeClass of an instance (same key as the label).
pub const TAG_NODE_CLASS: &str = AWS_EC2_NODE_CLASS;
/// EC2 tag with the EKS cluster name.
pub const TAG_EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
/// EC2 `Name` tag.
pub const TAG_NAME: &str = "Name";

// --- Extended resources -------------------------------------------------------------------------

/// NVIDIA GPUs.
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
/// AMD GPUs.
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
/// AWS Neuron devices.
pub const RESOURCE_AWS_NEURON: &str = "aws.amazon.com/neuron";
/// AWS Neuron cores.
pub const RESOURCE_AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
/// Habana Gaudi accelerators.
pub const RESOURCE_HABANA_GAUDI: &str = "habana.ai/gaudi";
/// Branch ENIs for security groups for pods.
pub const RESOURCE_AWS_POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
/// Private IPv4 addresses (Windows).
pub const RESOURCE_PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";
/// Elastic Fabric Adapters.
pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";

// --- Label-domain rules -------------------------------------------------------------------------

/// Label domains users may not use, except for well-known labels and the exceptions below.
pub const RESTRICTED_LABEL_DOMAINS: &[&str] =
    &["kubernetes.io", "k8s.io", KARPENTER_GROUP, AWS_GROUP];

/// Sub-domains of the restricted domains that are nevertheless allowed.
pub const LABEL_DOMAIN_EXCEPTIONS: &[&str] = &[
    "kops.k8s.io",
    "node.kubernetes.io",
    "node-restriction.kubernetes.io",
];

/// Label domains Kubernetes and Karpenter reserve whatever the provider.
pub const NEUTRAL_RESTRICTED_LABEL_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io", KARPENTER_GROUP];

/// Labels that may never be set, even though their domain would otherwise allow it.
pub const RESTRICTED_LABELS: &[&str] = &[HOSTNAME];

/// The `karpenter.k8s.aws/*` labels that describe an instance type (and so may be used in
/// requirements and node-pool template labels).
pub const AWS_WELL_KNOWN_LABELS: &[&str] = &[
    AWS_EC2_NODE_CLASS,
    AWS_CAPACITY_RESERVATION_ID,
    AWS_CAPACITY_RESERVATION_TYPE,
    AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    AWS_INSTANCE_CATEGORY,
    AWS_INSTANCE_CAPABILITY_FLEX,
    AWS_INSTANCE_HYPERVISOR,
    AWS_INSTANCE_FAMILY,
    AWS_INSTANCE_GENERATION,
    AWS_INSTANCE_LOCAL_NVME,
    AWS_INSTANCE_SIZE,
    AWS_INSTANCE_CPU,
    AWS_INSTANCE_CPU_MANUFACTURER,
    AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    AWS_INSTANCE_MEMORY,
    AWS_INSTANCE_EBS_BANDWIDTH,
    AWS_INSTANCE_NETWORK_BANDWIDTH,
    AWS_INSTANCE_GPU_NAME,
    AWS_INSTANCE_GPU_MANUFACTURER,
    AWS_INSTANCE_GPU_COUNT,
    AWS_INSTANCE_GPU_MEMORY,
    AWS_INSTANCE_ACCELERATOR_NAME,
    AWS_INSTANCE_ACCELERATOR_MANUFACTURER,
    AWS_INSTANCE_ACCELERATOR_COUNT,
    AWS_INSTANCE_TENANCY,
];

/// Labels every provider's instance types define; a pod may require them even when no node pool
/// mentions them.
pub const NEUTRAL_WELL_KNOWN_LABELS: &[&str] = &[
    NODE_POOL,
    TOPOLOGY_ZONE,
    TOPOLOGY_REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    CAPACITY_TYPE,
    WINDOWS_BUILD,
];

/// Labels in the restricted domains that Karpenter understands and users may constrain.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    NODE_POOL,
    CAPACITY_TYPE,
    TOPOLOGY_ZONE,
    TOPOLOGY_REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    WINDOWS_BUILD,
    AWS_TOPOLOGY_ZONE_ID,
    AWS_EC2_NODE_CLASS,
    AWS_CAPACITY_RESERVATION_ID,
    AWS_CAPACITY_RESERVATION_TYPE,
    AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    AWS_INSTANCE_CATEGORY,
    AWS_INSTANCE_CAPABILITY_FLEX,
    AWS_INSTANCE_HYPERVISOR,
    AWS_INSTANCE_FAMILY,
    AWS_INSTANCE_GENERATION,
    AWS_INSTANCE_LOCAL_NVME,
    AWS_INSTANCE_SIZE,
    AWS_INSTANCE_CPU,
    AWS_INSTANCE_CPU_MANUFACTURER,
    AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    AWS_INSTANCE_MEMORY,
    AWS_INSTANCE_EBS_BANDWIDTH,
    AWS_INSTANCE_NETWORK_BANDWIDTH,
    AWS_INSTANCE_GPU_NAME,
    AWS_INSTANCE_GPU_MANUFACTURER,
    AWS_INSTANCE_GPU_COUNT,
    AWS_INSTANCE_GPU_MEMORY,
    AWS_INSTANCE_ACCELERATOR_NAME,
    AWS_INSTANCE_ACCELERATOR_MANUFACTURER,
    AWS_INSTANCE_ACCELERATOR_COUNT,
    AWS_INSTANCE_TENANCY,
];

/// Deprecated label keys and the well-known label each one means.
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    (FAILURE_DOMAIN_BETA_ZONE, TOPOLOGY_ZONE),
    (FAILURE_DOMAIN_BETA_REGION, TOPOLOGY_REGION),
    (BETA_ARCH, ARCH),
    (BETA_OS, OS),
    (BETA_INSTANCE_TYPE, INSTANCE_TYPE),
];

/// The domain (prefix before `/`) of a label key, or `""` when it has none.
pub fn label_domain(key: &str) -> &str {
    key.split_once('/').map_or("", |(domain, _)| domain)
}

/// Maps a deprecated alias (e.g. `failure-domain.beta.kubernetes.io/zone`) to its well-known key;
/// other keys are returned unchanged.
pub fn normalize_label(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, canonical)| canonical)
}

/// Whether `key` is one of the [`WELL_KNOWN_LABELS`].
pub fn is_well_known_label(key: &str) -> bool {
    WELL_KNOWN_LABELS.contains(&key)
}

/// Whether `domain` is `suffix` or a sub-domain of it (`a.kubernetes.io` is in `kubernetes.io`;
/// `evilkubernetes.io` is not).
pub fn in_domain(domain: &str, suffix: &str) -> bool {
    domain == suffix
        || domain
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with('.'))
}

/// Whether `key` lies in one of `restricted_domains` (or is [`RESTRICTED_LABELS`]) and not in a
/// [`LABEL_DOMAIN_EXCEPTIONS`] sub-domain. Well-known labels are the caller's to exempt.
pub fn in_restricted_domain(key: &str, restricted_domains: &[&str]) -> bool {
    if RESTRICTED_LABELS.contains(&key) {
        return true;
    }
    let domain = label_domain(key);
    if LABEL_DOMAIN_EXCEPTIONS
        .iter()
        .any(|exception| in_domain(domain, exception))
    {
        return false;
    }
    restricted_domains
        .iter()
        .any(|restricted| in_domain(domain, restricted))
}

/// Whether Karpenter must not put `key` on a node itself: well-known labels (the cloud provider or
/// kubelet sets those), labels in restricted domains, and [`RESTRICTED_LABELS`].
pub fn is_restricted_node_label(key: &str) -> bool {
    is_well_known_label(key) || in_restricted_domain(key, RESTRICTED_LABEL_DOMAINS)
}

/// A label key that users may not use in a NodePool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label {key} is restricted; use a well known label (e.g. {TOPOLOGY_ZONE}, {INSTANCE_TYPE}, {CAPACITY_TYPE}) or a custom label outside the restricted domains {domains}", domains = RestrictedDomains)]
pub struct RestrictedLabelError {
    /// The rejected key.
    pub key: String,
}

struct RestrictedDomains;

impl fmt::Display for RestrictedDomains {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&RESTRICTED_LABEL_DOMAINS.join(", "))
    }
}

/// Checks that a user may use `key` as a NodePool label or requirement key.
///
/// # Errors
/// Returns [`RestrictedLabelError`] for keys in restricted domains that are not well known.
pub fn check_label_allowed(key: &str) -> Result<(), RestrictedLabelError> {
    if is_well_known_label(key) || !is_restricted_node_label(key) {
        Ok(())
    } else {
        Err(RestrictedLabelError {
            key: key.to_string(),
        })
    }
}

/// The label key that records a node class on a node: `<group>/<lowercased kind>`
/// (e.g. `karpenter.k8s.aws/ec2nodeclass`).
pub fn node_class_label_key(group: &str, kind: &str) -> String {
    format!("{group}/{}", kind.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_labels_are_allowed() {
        for key in [
            TOPOLOGY_ZONE,
            INSTANCE_TYPE,
            CAPACITY_TYPE,
            NODE_POOL,
            AWS_INSTANCE_FAMILY,
            ARCH,
        ] {
            assert_eq!(check_label_allowed(key), Ok(()), "{key}");
        }
    }

    #[test]
    fn restricted_domains_are_rejected_except_exceptions() {
        assert!(check_label_allowed("kubernetes.io/custom").is_err());
        assert!(check_label_allowed("foo.k8s.io/bar").is_err());
        assert!(check_label_allowed("karpenter.sh/custom").is_err());
        assert!(check_label_allowed("karpenter.k8s.aws/custom").is_err());
        assert!(check_label_allowed(HOSTNAME).is_err());
        assert_eq!(check_label_allowed("node.kubernetes.io/custom"), Ok(()));
        assert_eq!(check_label_allowed("kops.k8s.io/instancegroup"), Ok(()));
        assert_eq!(
            check_label_allowed("node-restriction.kubernetes.io/team"),
            Ok(())
        );
        assert_eq!(check_label_allowed("example.com/team"), Ok(()));
        assert_eq!(check_label_allowed("team"), Ok(()));
        assert_eq!(check_label_allowed("evilkubernetes.io/x"), Ok(()));
        let message = check_label_allowed("karpenter.sh/custom")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("karpenter.sh/custom is restricted"),
            "{message}"
        );
    }

    #[test]
    fn karpenter_does_not_set_well_known_or_restricted_labels() {
        assert!(is_restricted_node_label(TOPOLOGY_ZONE));
        assert!(is_restricted_node_label(HOSTNAME));
        assert!(!is_restricted_node_label("example.com/team"));
    }

    #[test]
    fn helpers() {
        assert_eq!(label_domain("karpenter.sh/nodepool"), "karpenter.sh");
        assert_eq!(label_domain("team"), "");
        assert_eq!(normalize_label(FAILURE_DOMAIN_BETA_ZONE), TOPOLOGY_ZONE);
        assert_eq!(normalize_label("example.com/x"), "example.com/x");
        assert_eq!(
            node_class_label_key(AWS_GROUP, "EC2NodeClass"),
            AWS_EC2_NODE_CLASS
        );
    }
}
