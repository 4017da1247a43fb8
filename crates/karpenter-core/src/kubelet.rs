//! The kubelet's own names that node settings may use: the resources
//! `systemReserved` and `kubeReserved` reserve, and the eviction signals
//! `evictionHard`, `evictionSoft` and `evictionSoftGracePeriod` name. One
//! list each for the EC2NodeClass schema, the manifest converter and the
//! provider's user-data checks.

/// The resources `systemReserved` and `kubeReserved` may name.
pub const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

/// The eviction signals the kubelet settings may name.
pub const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];
