//! The kinds each API group of the input table serves, so a typo in a kind
//! (`NodePoool`, `Pood`) is refused as `kubectl apply` refuses it, while a
//! real kind planning does not use (Service, ConfigMap) is only skipped.

/// The kinds `group` serves, for the groups plan and disrupt read; `None`
/// for any other group (its documents are skipped, not judged).
pub fn served(group: &str) -> Option<&'static [&'static str]> {
    Some(match group {
        "" => &[
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "Namespace",
            "Node",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
            "Service",
            "ServiceAccount",
        ],
        "apps" => &[
            "ControllerRevision",
            "DaemonSet",
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
        ],
        "batch" => &["CronJob", "Job"],
        "policy" => &["Eviction", "PodDisruptionBudget"],
        "scheduling.k8s.io" => &["PriorityClass"],
        "storage.k8s.io" => &[
            "CSIDriver",
            "CSINode",
            "CSIStorageCapacity",
            "StorageClass",
            "VolumeAttachment",
        ],
        "karpenter.sh" => &["NodeClaim", "NodeOverlay", "NodePool"],
        "karpenter.k8s.aws" => &["EC2NodeClass"],
        "autoscaling.x-k8s.io" => &["CapacityBuffer"],
        _ => return None,
    })
}

/// Why `kind` cannot be a kind of `group`, if it cannot: the error names
/// the closest served kind when one is near.
pub fn unknown(group: &str, api_version: &str, kind: &str) -> Option<String> {
    let kinds = served(group)?;
    if kinds.contains(&kind) {
        return None;
    }
    let closest = kinds
        .iter()
        .map(|k| {
            (
                k,
                karpenter_core::hash::edit_distance(&k.to_lowercase(), &kind.to_lowercase()),
            )
        })
        .min_by_key(|(_, d)| *d)
        .filter(|(_, d)| *d <= 2.max(kind.len() / 3))
        .map(|(k, _)| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default();
    Some(format!("{api_version} has no kind {kind:?}{closest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_in_a_known_group_is_refused_with_the_closest_kind() {
        assert_eq!(
            unknown("karpenter.sh", "karpenter.sh/v1", "NodePoool").as_deref(),
            Some("karpenter.sh/v1 has no kind \"NodePoool\" (did you mean \"NodePool\"?)")
        );
        assert_eq!(
            unknown("", "v1", "Pood").as_deref(),
            Some("v1 has no kind \"Pood\" (did you mean \"Pod\"?)")
        );
        assert!(unknown("", "v1", "Service").is_none(), "a real kind");
        assert!(unknown("example.com", "example.com/v1", "Widget").is_none());
    }
}
