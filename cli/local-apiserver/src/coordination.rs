//! Leases (`coordination.k8s.io`): `pkg/apis/coordination/validation`'s
//! `ValidateLease`, the same on create and update.

use karpenter_core::names::qualified_name;
use serde_json::Value;

use crate::validation::FieldError;

/// A Lease's spec rules: its duration positive, its transitions not
/// negative, a known strategy, a preferred holder only with a strategy.
pub fn lease(object: &Value) -> Vec<FieldError> {
    // The name (a DNS subdomain) is checked with the rest of the metadata.
    let mut errors = Vec::new();
    let spec = &object["spec"];
    let duration = &spec["leaseDurationSeconds"];
    if duration.as_i64().is_some_and(|d| d <= 0) {
        errors.push(FieldError::invalid(
            "spec.leaseDurationSeconds",
            duration.clone(),
            "must be greater than 0",
        ));
    }
    let transitions = &spec["leaseTransitions"];
    if transitions.as_i64().is_some_and(|t| t < 0) {
        errors.push(FieldError::invalid(
            "spec.leaseTransitions",
            transitions.clone(),
            "must be greater than or equal to 0",
        ));
    }
    // A strategy is Kubernetes' own, or a custom prefixed name.
    let strategy = spec["strategy"].as_str().unwrap_or_default();
    if strategy.contains('/') {
        for detail in qualified_name(strategy) {
            errors.push(FieldError::invalid("spec.strategy", strategy, &detail));
        }
    } else if !strategy.is_empty() && strategy != "OldestEmulationVersion" {
        errors.push(FieldError::not_supported(
            "spec.strategy",
            strategy,
            &["OldestEmulationVersion"],
        ));
    }
    if spec["preferredHolder"]
        .as_str()
        .is_some_and(|h| !h.is_empty())
        && strategy.is_empty()
    {
        errors.push(FieldError::forbidden(
            "spec.preferredHolder",
            "may only be specified if `strategy` is defined",
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(object: Value) -> Vec<String> {
        lease(&object).iter().map(FieldError::text).collect()
    }

    #[test]
    fn leases_are_checked_as_coordination_validation_does() {
        let holder = json!({"metadata": {"name": "holder"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0}});
        assert!(texts(holder).is_empty());
        assert_eq!(
            texts(
                json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}})
            ),
            [
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"
            ]
        );
        assert_eq!(
            texts(json!({"spec": {"preferredHolder": "a"}})),
            ["spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"]
        );
    }
}
