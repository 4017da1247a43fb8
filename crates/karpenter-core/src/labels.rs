//! Well-known label, annotation, taint, finalizer and tag keys of Kubernetes and Karpenter, and
//! the label-domain rules.
//!
//! Karpenter reserves its own label domain (`karpenter.sh` and its sub-domains) and
//! `kubernetes.io/hostname`: users may not set labels there on a NodePool template or use them as
//! requirement keys, except for the *well-known* labels, which Karpenter knows how to satisfy
//! (zone, instance type, capacity type, ...). Since Karpenter v1.9 (sigs PR #2586) the
//! `kubernetes.io` and `k8s.io` domains are no longer restricted: a pool may set
//! `example.kubernetes.io/team`, and pods may select on it.
//!
//! A provider reserves its own domain and adds its own well-known labels (the AWS provider
//! `karpenter.k8s.aws` and its `instance-*` family): it announces them in its `Info`, and
//! [`LabelRules`] joins them to the neutral ones here. Nothing here knows a cloud.
//!
//! The same rules are enforced by the API server through the CEL rules in the generated CRDs; the
//! functions here let the scheduler and adapter apply them without a round trip.

/// API group of NodePool and NodeClaim.
pub const KARPENTER_GROUP: &str = "karpenter.sh";
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
/// A pod's cost to evict as the user sets it for Karpenter (v1.15), read
/// before `POD_DELETION_COST`.
pub const DISRUPTION_COST: &str = "karpenter.sh/disruption-cost";
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
/// Annotation on a Node or NodeClaim (`"true"`) that keeps node repair away
/// from it, whatever its conditions.
pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
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
/// Taint (`NoSchedule`) on a node being rebooted for repair: no new pods
/// while it drains and restarts; it counts as disrupted for budgets.
pub const REBOOTING_TAINT_KEY: &str = "karpenter.sh/rebooting";
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

/// Cloud tag naming the NodeClaim of an instance.
pub const TAG_NODE_CLAIM: &str = "karpenter.sh/nodeclaim";
/// Cloud tag naming the NodePool of an instance (same key as the label).
pub const TAG_NODE_POOL: &str = NODE_POOL;

// --- Extended resources -------------------------------------------------------------------------

/// NVIDIA GPUs.
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
/// AMD GPUs.
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
/// Habana Gaudi accelerators.
pub const RESOURCE_HABANA_GAUDI: &str = "habana.ai/gaudi";

// --- Label-domain rules -------------------------------------------------------------------------

/// Label domains Karpenter reserves whatever the provider.
pub const NEUTRAL_RESTRICTED_LABEL_DOMAINS: &[&str] = &[KARPENTER_GROUP];

/// Labels that may never be set, even though their domain would otherwise allow it.
pub const RESTRICTED_LABELS: &[&str] = &[HOSTNAME];

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

/// Whether `domain` is `suffix` or a sub-domain of it (`a.kubernetes.io` is in `kubernetes.io`;
/// `evilkubernetes.io` is not).
pub fn in_domain(domain: &str, suffix: &str) -> bool {
    domain == suffix
        || domain
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with('.'))
}

/// Whether `key` lies in one of `restricted_domains` (or is [`RESTRICTED_LABELS`]). Well-known
/// labels are the caller's to exempt.
pub fn in_restricted_domain<D: AsRef<str>>(key: &str, restricted_domains: &[D]) -> bool {
    if RESTRICTED_LABELS.contains(&key) {
        return true;
    }
    let domain = label_domain(key);
    restricted_domains
        .iter()
        .any(|restricted| in_domain(domain, restricted.as_ref()))
}

/// The label-domain rules of a cluster: Kubernetes' and Karpenter's
/// restricted domains and well-known labels, plus those the provider
/// announces (its `Info`), as upstream's providers extend
/// `RestrictedLabelDomains` and `WellKnownLabels`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRules {
    restricted_domains: Vec<String>,
    well_known: std::collections::BTreeSet<String>,
}

impl Default for LabelRules {
    fn default() -> Self {
        Self::neutral()
    }
}

impl LabelRules {
    /// The rules of Kubernetes and Karpenter alone.
    pub fn neutral() -> Self {
        Self {
            restricted_domains: NEUTRAL_RESTRICTED_LABEL_DOMAINS
                .iter()
                .map(|d| (*d).to_owned())
                .collect(),
            well_known: NEUTRAL_WELL_KNOWN_LABELS
                .iter()
                .map(|l| (*l).to_owned())
                .collect(),
        }
    }

    /// These rules with a provider's restricted domains and well-known labels.
    pub fn with_provider<'a>(
        mut self,
        restricted_domains: impl IntoIterator<Item = &'a str>,
        well_known: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        for domain in restricted_domains {
            if !self.restricted_domains.iter().any(|d| d == domain) {
                self.restricted_domains.push(domain.to_owned());
            }
        }
        self.well_known
            .extend(well_known.into_iter().map(str::to_owned));
        self
    }

    /// Whether `key` is a well-known label: one Karpenter (or the provider)
    /// knows how to satisfy.
    pub fn is_well_known(&self, key: &str) -> bool {
        self.well_known.contains(key)
    }

    /// Whether Karpenter must not put `key` on a node itself: well-known
    /// labels (the provider or kubelet sets those), labels in restricted
    /// domains, and [`RESTRICTED_LABELS`].
    pub fn is_restricted_node_label(&self, key: &str) -> bool {
        self.is_well_known(key) || self.in_restricted_domain(key)
    }

    /// [`in_restricted_domain`] over these rules' domains.
    fn in_restricted_domain(&self, key: &str) -> bool {
        in_restricted_domain(key, &self.restricted_domains)
    }

    /// Checks that a user may use `key` as a NodePool label or requirement key.
    ///
    /// # Errors
    /// Returns [`RestrictedLabelError`] for keys in restricted domains that are not well known.
    pub fn check_allowed(&self, key: &str) -> Result<(), RestrictedLabelError> {
        if self.is_well_known(key) || !self.in_restricted_domain(key) {
            Ok(())
        } else {
            Err(RestrictedLabelError {
                key: key.to_string(),
                domains: self.restricted_domains.join(", "),
            })
        }
    }
}

/// A label key that users may not use in a NodePool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "label {key} is restricted; use a well known label (e.g. {TOPOLOGY_ZONE}, {INSTANCE_TYPE}, {CAPACITY_TYPE}) or a custom label outside the restricted domains {domains}"
)]
pub struct RestrictedLabelError {
    /// The rejected key.
    pub key: String,
    /// The restricted domains, comma-separated.
    pub domains: String,
}

/// The label key that records a node class on a node: `<group>/<lowercased kind>`
/// (e.g. `karpenter.k8s.aws/ec2nodeclass`).
pub fn node_class_label_key(group: &str, kind: &str) -> String {
    format!("{group}/{}", kind.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aws() -> LabelRules {
        LabelRules::neutral()
            .with_provider(["karpenter.k8s.aws"], ["karpenter.k8s.aws/instance-family"])
    }

    #[test]
    fn well_known_labels_are_allowed() {
        for key in [TOPOLOGY_ZONE, INSTANCE_TYPE, CAPACITY_TYPE, NODE_POOL, ARCH] {
            assert_eq!(LabelRules::neutral().check_allowed(key), Ok(()), "{key}");
        }
        assert_eq!(
            aws().check_allowed("karpenter.k8s.aws/instance-family"),
            Ok(())
        );
    }

    /// Karpenter v1.9+ (sigs PR #2586): only Karpenter's and the provider's
    /// domains (and hostname) are restricted; `kubernetes.io` and `k8s.io`
    /// keys are custom labels like any other.
    #[test]
    fn only_karpenters_and_the_providers_domains_are_restricted() {
        let rules = aws();
        assert!(rules.check_allowed("karpenter.sh/custom").is_err());
        assert!(rules.check_allowed("sub.karpenter.sh/custom").is_err());
        assert!(rules.check_allowed("karpenter.k8s.aws/custom").is_err());
        assert!(rules.check_allowed(HOSTNAME).is_err());
        assert_eq!(rules.check_allowed("kubernetes.io/custom"), Ok(()));
        assert_eq!(rules.check_allowed("foo.k8s.io/bar"), Ok(()));
        assert_eq!(rules.check_allowed("node.kubernetes.io/custom"), Ok(()));
        assert_eq!(rules.check_allowed("kops.k8s.io/instancegroup"), Ok(()));
        assert_eq!(
            rules.check_allowed("node-restriction.kubernetes.io/team"),
            Ok(())
        );
        assert_eq!(rules.check_allowed("example.com/team"), Ok(()));
        assert_eq!(rules.check_allowed("team"), Ok(()));
        assert_eq!(rules.check_allowed("evilkarpenter.sh/x"), Ok(()));
        let message = rules
            .check_allowed("karpenter.sh/custom")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("karpenter.sh/custom is restricted")
                && message.ends_with("karpenter.sh, karpenter.k8s.aws"),
            "{message}"
        );
    }

    #[test]
    fn another_providers_domain_is_not_restricted() {
        let neutral = LabelRules::neutral();
        assert_eq!(neutral.check_allowed("karpenter.k8s.aws/custom"), Ok(()));
        assert!(!neutral.is_well_known("karpenter.k8s.aws/instance-family"));
        let kwok =
            neutral.with_provider(["karpenter.kwok.sh"], ["karpenter.kwok.sh/instance-size"]);
        assert!(kwok.check_allowed("karpenter.kwok.sh/custom").is_err());
        assert_eq!(
            kwok.check_allowed("karpenter.kwok.sh/instance-size"),
            Ok(())
        );
        assert_eq!(kwok.check_allowed("karpenter.k8s.aws/custom"), Ok(()));
    }

    #[test]
    fn karpenter_does_not_set_well_known_or_restricted_labels() {
        let rules = LabelRules::neutral();
        assert!(rules.is_restricted_node_label(TOPOLOGY_ZONE));
        assert!(rules.is_restricted_node_label(HOSTNAME));
        assert!(!rules.is_restricted_node_label("example.com/team"));
    }

    #[test]
    fn helpers() {
        assert_eq!(label_domain("karpenter.sh/nodepool"), "karpenter.sh");
        assert_eq!(label_domain("team"), "");
        assert_eq!(normalize_label(FAILURE_DOMAIN_BETA_ZONE), TOPOLOGY_ZONE);
        assert_eq!(normalize_label("example.com/x"), "example.com/x");
        assert_eq!(
            node_class_label_key("karpenter.k8s.aws", "EC2NodeClass"),
            "karpenter.k8s.aws/ec2nodeclass"
        );
    }
}
