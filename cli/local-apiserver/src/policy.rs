//! The `policy` group: what kube-apiserver refuses in a
//! PodDisruptionBudget (`pkg/apis/policy/validation`), and how it reads an
//! Eviction (`pkg/registry/core/pod/storage/eviction.go`).

use serde_json::Value;

use crate::field_errors::{invalid_printed, label_selector};
use crate::store::{ApiError, DeleteOptions, Propagation};
use crate::validation::FieldError;

/// A PodDisruptionBudget's own rules: its spec on create and update, its
/// status (counts not negative) on a write to `status`.
pub fn pdb(object: &Value, status_write: bool) -> Vec<FieldError> {
    if status_write {
        return pdb_status(&object["status"]);
    }
    let spec = &object["spec"];
    let mut errors = Vec::new();
    let min = &spec["minAvailable"];
    let max = &spec["maxUnavailable"];
    if !min.is_null() && !max.is_null() {
        // The apiserver prints the whole spec struct here.
        errors.push(invalid_printed(
            "spec",
            "policy.PodDisruptionBudgetSpec{...}",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for (value, path) in [(min, "spec.minAvailable"), (max, "spec.maxUnavailable")] {
        if !value.is_null() {
            errors.extend(int_or_percent(value, path));
        }
    }
    errors.extend(label_selector(&spec["selector"], "spec.selector"));
    if let Some(policy) = spec["unhealthyPodEvictionPolicy"].as_str()
        && !matches!(policy, "AlwaysAllow" | "IfHealthyBudget")
    {
        errors.push(FieldError::not_supported(
            "spec.unhealthyPodEvictionPolicy",
            policy,
            &["AlwaysAllow", "IfHealthyBudget"],
        ));
    }
    errors
}

/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`.
fn int_or_percent(value: &Value, path: &str) -> Vec<FieldError> {
    const NOT_PERCENT: &str = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')";
    match value {
        Value::String(s) => {
            let digits = s
                .strip_suffix('%')
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            match digits {
                None => vec![FieldError::invalid(path, value.clone(), NOT_PERCENT)],
                Some(d) if d.parse::<u64>().map_or(true, |p| p > 100) => {
                    vec![FieldError::invalid(
                        path,
                        value.clone(),
                        "must not be greater than 100%",
                    )]
                }
                Some(_) => Vec::new(),
            }
        }
        Value::Number(n) if n.as_i64().is_some_and(|i| i < 0) => {
            vec![FieldError::invalid(
                path,
                value.clone(),
                "must be greater than or equal to 0",
            )]
        }
        Value::Number(_) => Vec::new(),
        _ => vec![FieldError::invalid(
            path,
            value.clone(),
            "must be an integer or percentage (e.g '5%')",
        )],
    }
}

/// `ValidatePodDisruptionBudgetStatusUpdate` (policy/v1): no negative count.
fn pdb_status(status: &Value) -> Vec<FieldError> {
    [
        "disruptionsAllowed",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
    ]
    .into_iter()
    .filter_map(|field| {
        let v = &status[field];
        v.as_i64().filter(|n| *n < 0).map(|_| {
            FieldError::invalid(
                format!("status.{field}"),
                v.clone(),
                "must be greater than or equal to 0",
            )
        })
    })
    .collect()
}

/// An Eviction's body: its name must be the pod's, and its
/// `deleteOptions` say how the pod goes (grace period, preconditions).
/// `dryRun` is handled with the request's (the store is a scratch copy).
pub fn eviction(body: &Value, pod: &str) -> Result<DeleteOptions, ApiError> {
    if body["metadata"]["name"].as_str().unwrap_or_default() != pod {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let options = &body["deleteOptions"];
    let propagation = match options["propagationPolicy"].as_str() {
        Some("Orphan") => Propagation::Orphan,
        Some("Foreground") => Propagation::Foreground,
        _ if options["orphanDependents"] == true => Propagation::Orphan,
        _ => Propagation::Background,
    };
    Ok(DeleteOptions {
        uid: options["preconditions"]["uid"].as_str().map(str::to_owned),
        resource_version: options["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
        propagation,
        grace_period: options["gracePeriodSeconds"].as_i64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(pdb_object: Value, status_write: bool) -> Vec<String> {
        pdb(&pdb_object, status_write)
            .iter()
            .map(FieldError::text)
            .collect()
    }

    #[test]
    fn budgets_are_checked_as_the_policy_validation_does() {
        let spec = |s: Value| json!({"spec": s});
        assert!(texts(spec(json!({"minAvailable": "10%", "selector": {}})), false).is_empty());
        assert_eq!(
            texts(spec(json!({"minAvailable": -1})), false),
            ["spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            texts(spec(json!({"maxUnavailable": "101%"})), false),
            ["spec.maxUnavailable: Invalid value: \"101%\": must not be greater than 100%"]
        );
        assert!(
            texts(spec(json!({"minAvailable": "1.1%"})), false)[0]
                .contains("a valid percent string")
        );
        assert_eq!(
            texts(spec(json!({"minAvailable": 1, "maxUnavailable": 1})), false).len(),
            1
        );
        assert_eq!(
            texts(spec(json!({"unhealthyPodEvictionPolicy": "Never"})), false),
            [
                "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\""
            ]
        );
        assert_eq!(
            texts(json!({"status": {"expectedPods": -2}}), true),
            ["status.expectedPods: Invalid value: -2: must be greater than or equal to 0"]
        );
    }

    #[test]
    fn an_eviction_names_its_pod_and_carries_delete_options() {
        let body = json!({"metadata": {"name": "a"}, "deleteOptions": {"gracePeriodSeconds": 0, "preconditions": {"resourceVersion": "7"}}});
        let options = eviction(&body, "a").expect("valid");
        assert_eq!(options.grace_period, Some(0));
        assert_eq!(options.resource_version.as_deref(), Some("7"));
        assert_eq!(eviction(&body, "b").err().map(|e| e.code), Some(400));
        // kube-rs sends `delete_options`, which the apiserver does not know.
        let kube = json!({"metadata": {"name": "a"}, "delete_options": {"gracePeriodSeconds": 0}});
        assert_eq!(eviction(&kube, "a").ok().and_then(|o| o.grace_period), None);
    }
}
