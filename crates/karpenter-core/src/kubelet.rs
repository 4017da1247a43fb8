//! The kubelet's own names that node settings may use: the resources
//! `systemReserved` and `kubeReserved` reserve, and the eviction signals
//! `evictionHard`, `evictionSoft` and `evictionSoftGracePeriod` name. One
//! list each for the EC2NodeClass schema, the manifest converter and the
//! provider's user-data checks; and every field of the kubelet's
//! configuration file with how it is written, for the node class's
//! `spec.kubelet`, which takes any of them since Karpenter v1.15.

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

/// The fields Karpenter reads and every AMI family applies; others are
/// passed to AL2023's kubelet as they are (and a v1beta1 manifest's other
/// fields are noted by the converter).
pub const MAPPED_FIELDS: [&str; 12] = [
    "clusterDNS",
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
];

/// How a field of the kubelet's configuration file is written in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Bool,
    /// A whole number.
    Int,
    Float,
    String,
    /// A Go duration string (`"1m30s"`).
    Duration,
    StringList,
    IntList,
    /// An object of strings.
    StringMap,
    /// An object of booleans.
    BoolMap,
    /// An object of string lists.
    StringListMap,
    /// A nested object (checked as an object, not field by field).
    Object,
    /// A list of objects.
    ObjectList,
}

/// Every field of the kubelet's configuration file
/// (`kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`), by its JSON
/// name: what `EC2NodeClass.spec.kubelet` may hold since Karpenter v1.15.
pub const CONFIGURATION_FIELDS: [(&str, FieldKind); 128] = [
    ("kind", FieldKind::String),
    ("apiVersion", FieldKind::String),
    ("enableServer", FieldKind::Bool),
    ("staticPodPath", FieldKind::String),
    ("podLogsDir", FieldKind::String),
    ("syncFrequency", FieldKind::Duration),
    ("fileCheckFrequency", FieldKind::Duration),
    ("httpCheckFrequency", FieldKind::Duration),
    ("staticPodURL", FieldKind::String),
    ("staticPodURLHeader", FieldKind::StringListMap),
    ("address", FieldKind::String),
    ("port", FieldKind::Int),
    ("readOnlyPort", FieldKind::Int),
    ("tlsCertFile", FieldKind::String),
    ("tlsPrivateKeyFile", FieldKind::String),
    ("tlsCipherSuites", FieldKind::StringList),
    ("tlsCurvePreferences", FieldKind::IntList),
    ("tlsMinVersion", FieldKind::String),
    ("rotateCertificates", FieldKind::Bool),
    ("serverTLSBootstrap", FieldKind::Bool),
    ("authentication", FieldKind::Object),
    ("authorization", FieldKind::Object),
    ("registryPullQPS", FieldKind::Int),
    ("registryBurst", FieldKind::Int),
    ("imagePullCredentialsVerificationPolicy", FieldKind::String),
    (
        "preloadedImagesVerificationAllowlist",
        FieldKind::StringList,
    ),
    ("eventRecordQPS", FieldKind::Int),
    ("eventBurst", FieldKind::Int),
    ("enableDebuggingHandlers", FieldKind::Bool),
    ("enableContentionProfiling", FieldKind::Bool),
    ("healthzPort", FieldKind::Int),
    ("healthzBindAddress", FieldKind::String),
    ("oomScoreAdj", FieldKind::Int),
    ("clusterDomain", FieldKind::String),
    ("clusterDNS", FieldKind::StringList),
    ("streamingConnectionIdleTimeout", FieldKind::Duration),
    ("nodeStatusUpdateFrequency", FieldKind::Duration),
    ("nodeStatusReportFrequency", FieldKind::Duration),
    ("nodeLeaseDurationSeconds", FieldKind::Int),
    ("imageMinimumGCAge", FieldKind::Duration),
    ("imageMaximumGCAge", FieldKind::Duration),
    ("imageGCHighThresholdPercent", FieldKind::Int),
    ("imageGCLowThresholdPercent", FieldKind::Int),
    ("volumeStatsAggPeriod", FieldKind::Duration),
    ("kubeletCgroups", FieldKind::String),
    ("systemCgroups", FieldKind::String),
    ("cgroupRoot", FieldKind::String),
    ("cgroupsPerQOS", FieldKind::Bool),
    ("cgroupDriver", FieldKind::String),
    ("cpuManagerPolicy", FieldKind::String),
    ("singleProcessOOMKill", FieldKind::Bool),
    ("cpuManagerPolicyOptions", FieldKind::StringMap),
    ("cpuManagerReconcilePeriod", FieldKind::Duration),
    ("draManagerReconcilePeriod", FieldKind::Duration),
    ("memoryManagerPolicy", FieldKind::String),
    ("topologyManagerPolicy", FieldKind::String),
    ("topologyManagerScope", FieldKind::String),
    ("topologyManagerPolicyOptions", FieldKind::StringMap),
    ("qosReserved", FieldKind::StringMap),
    ("runtimeRequestTimeout", FieldKind::Duration),
    ("hairpinMode", FieldKind::String),
    ("maxPods", FieldKind::Int),
    ("podCIDR", FieldKind::String),
    ("podPidsLimit", FieldKind::Int),
    ("resolvConf", FieldKind::String),
    ("runOnce", FieldKind::Bool),
    ("cpuCFSQuota", FieldKind::Bool),
    ("cpuCFSQuotaPeriod", FieldKind::Duration),
    ("nodeStatusMaxImages", FieldKind::Int),
    ("maxOpenFiles", FieldKind::Int),
    ("contentType", FieldKind::String),
    ("kubeAPIQPS", FieldKind::Int),
    ("kubeAPIBurst", FieldKind::Int),
    ("serializeImagePulls", FieldKind::Bool),
    ("maxParallelImagePulls", FieldKind::Int),
    ("evictionHard", FieldKind::StringMap),
    ("evictionSoft", FieldKind::StringMap),
    ("evictionSoftGracePeriod", FieldKind::StringMap),
    ("evictionPressureTransitionPeriod", FieldKind::Duration),
    ("evictionMaxPodGracePeriod", FieldKind::Int),
    ("evictionMinimumReclaim", FieldKind::StringMap),
    ("mergeDefaultEvictionSettings", FieldKind::Bool),
    ("podsPerCore", FieldKind::Int),
    ("enableControllerAttachDetach", FieldKind::Bool),
    ("protectKernelDefaults", FieldKind::Bool),
    ("makeIPTablesUtilChains", FieldKind::Bool),
    ("iptablesMasqueradeBit", FieldKind::Int),
    ("iptablesDropBit", FieldKind::Int),
    ("featureGates", FieldKind::BoolMap),
    ("failSwapOn", FieldKind::Bool),
    ("memorySwap", FieldKind::Object),
    ("containerLogMaxSize", FieldKind::String),
    ("containerLogMaxFiles", FieldKind::Int),
    ("containerLogMaxWorkers", FieldKind::Int),
    ("containerLogMonitorInterval", FieldKind::Duration),
    (
        "configMapAndSecretChangeDetectionStrategy",
        FieldKind::String,
    ),
    ("systemReserved", FieldKind::StringMap),
    ("kubeReserved", FieldKind::StringMap),
    ("reservedSystemCPUs", FieldKind::String),
    ("showHiddenMetricsForVersion", FieldKind::String),
    ("systemReservedCgroup", FieldKind::String),
    ("kubeReservedCgroup", FieldKind::String),
    ("enforceNodeAllocatable", FieldKind::StringList),
    ("allowedUnsafeSysctls", FieldKind::StringList),
    ("volumePluginDir", FieldKind::String),
    ("providerID", FieldKind::String),
    ("kernelMemcgNotification", FieldKind::Bool),
    ("logging", FieldKind::Object),
    ("enableSystemLogHandler", FieldKind::Bool),
    ("enableSystemLogQuery", FieldKind::Bool),
    ("shutdownGracePeriod", FieldKind::Duration),
    ("shutdownGracePeriodCriticalPods", FieldKind::Duration),
    ("shutdownGracePeriodByPodPriority", FieldKind::ObjectList),
    ("crashLoopBackOff", FieldKind::Object),
    ("reservedMemory", FieldKind::ObjectList),
    ("enableProfilingHandler", FieldKind::Bool),
    ("enableDebugFlagsHandler", FieldKind::Bool),
    ("seccompDefault", FieldKind::Bool),
    ("memoryThrottlingFactor", FieldKind::Float),
    ("memoryReservationPolicy", FieldKind::String),
    ("registerWithTaints", FieldKind::ObjectList),
    ("registerNode", FieldKind::Bool),
    ("tracing", FieldKind::Object),
    ("localStorageCapacityIsolation", FieldKind::Bool),
    ("containerRuntimeEndpoint", FieldKind::String),
    ("imageServiceEndpoint", FieldKind::String),
    ("failCgroupV1", FieldKind::Bool),
    ("userNamespaces", FieldKind::Object),
];

/// How the field `name` of the kubelet's configuration is written; `None`
/// for a name the kubelet does not know.
pub fn field_kind(name: &str) -> Option<FieldKind> {
    CONFIGURATION_FIELDS
        .iter()
        .find(|(field, _)| *field == name)
        .map(|(_, kind)| *kind)
}
