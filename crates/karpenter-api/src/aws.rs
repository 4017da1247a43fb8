//! The keys the AWS provider's API defines: the EC2NodeClass group, its labels, annotations,
//! finalizer, EC2 tags and the AWS extended resources.
//!
//! They live beside the EC2NodeClass type because the API owns them (the NodePool CRD's CEL rules
//! restrict the `karpenter.k8s.aws` domain, as upstream's AWS chart does); provider-aws uses them
//! and announces its domain and well-known labels in `Info`, which is how every other crate learns
//! them. `karpenter-core` knows no cloud.

/// [`karpenter_core::labels`] with the AWS keys: provider-aws reads both through one name.
pub mod labels {
    pub use karpenter_core::labels::*;

    /// API group of EC2NodeClass, and the label domain the AWS provider reserves.
    pub const AWS_GROUP: &str = "karpenter.k8s.aws";

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

    /// EC2 tag naming the EC2NodeClass of an instance (same key as the label).
    pub const TAG_NODE_CLASS: &str = AWS_EC2_NODE_CLASS;
    /// EC2 tag with the EKS cluster name.
    pub const TAG_EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
    /// EC2 `Name` tag.
    pub const TAG_NAME: &str = "Name";

    /// AWS Neuron devices.
    pub const RESOURCE_AWS_NEURON: &str = "aws.amazon.com/neuron";
    /// AWS Neuron cores.
    pub const RESOURCE_AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
    /// Branch ENIs for security groups for pods.
    pub const RESOURCE_AWS_POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
    /// Private IPv4 addresses (Windows).
    pub const RESOURCE_PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";
    /// Elastic Fabric Adapters.
    pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";
}
