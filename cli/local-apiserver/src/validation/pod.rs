//! Pods: `ValidatePodCreate`, `ValidatePodUpdate` and
//! `ValidatePodStatusUpdate` (pkg/apis/core/validation).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use karpenter_core::names::{dns1123_label, dns1123_subdomain, qualified_name};
use karpenter_core::quantity::Quantity;
use serde_json::Value;

use super::FieldError;
use crate::json::{list, text};

const POD_UPDATE: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];

const DEADLINE_RANGE: &str = "must be between 1 and 2147483647, inclusive";

/// `ValidatePodCreate`: the spec, and what only an update may bring.
pub fn create(pod: &Value) -> Vec<FieldError> {
    let spec = &pod["spec"];
    let mut errors = spec_errors(spec);
    // Ephemeral containers come only through their subresource.
    if !list(&spec["ephemeralContainers"]).is_empty() {
        errors.push(FieldError::forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create",
        ));
    }
    if !text(spec, "nodeName").is_empty() && !list(&spec["schedulingGates"]).is_empty() {
        errors.push(FieldError::forbidden(
            "spec.nodeName",
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    errors
}

/// The spec part of `validatePodMetadataAndSpec` (create and update): the
/// `ValidatePodSpec` rules this server checks, then the pod-only ones.
fn spec_errors(spec: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let containers = list(&spec["containers"]);
    if containers.is_empty() {
        errors.push(FieldError::required("spec.containers", ""));
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, c) in containers.iter().enumerate() {
        let at = format!("spec.containers[{i}]");
        errors.extend(container(c, &at));
        let name = text(c, "name");
        if names.contains(&name) {
            errors.push(FieldError::duplicate(format!("{at}.name"), name));
        } else {
            names.push(name);
        }
    }
    // Init containers' names are unique among all of them.
    for (i, c) in list(&spec["initContainers"]).iter().enumerate() {
        let at = format!("spec.initContainers[{i}]");
        errors.extend(container(c, &at));
        let name = text(c, "name");
        if names.contains(&name) {
            errors.push(FieldError::duplicate(format!("{at}.name"), name));
        } else if !name.is_empty() {
            names.push(name);
        }
    }
    if let Some(policy) = spec["restartPolicy"].as_str() {
        if policy.is_empty() {
            errors.push(FieldError::required("spec.restartPolicy", ""));
        } else if !RESTART_POLICIES.contains(&policy) {
            errors.push(FieldError::not_supported(
                "spec.restartPolicy",
                policy,
                &RESTART_POLICIES,
            ));
        }
    }
    if let Some(deadline) = spec["activeDeadlineSeconds"].as_i64()
        && !(1..=i64::from(i32::MAX)).contains(&deadline)
    {
        errors.push(FieldError::invalid(
            "spec.activeDeadlineSeconds",
            deadline,
            DEADLINE_RANGE,
        ));
    }
    errors.extend(scheduling_gates(list(&spec["schedulingGates"])));
    // Pods only, not templates (kept so for backward compatibility).
    for field in ["containers", "initContainers"] {
        for (i, c) in list(&spec[field]).iter().enumerate() {
            errors.extend(image_whitespace(c, &format!("spec.{field}[{i}].image")));
        }
    }
    errors
}

/// `validateContainerCommon`: the name, the image and the resources.
fn container(c: &Value, at: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = text(c, "name");
    if name.is_empty() {
        errors.push(FieldError::required(format!("{at}.name"), ""));
    } else {
        for detail in dns1123_label(name) {
            errors.push(FieldError::invalid(format!("{at}.name"), name, &detail));
        }
    }
    if text(c, "image").is_empty() {
        errors.push(FieldError::required(format!("{at}.image"), ""));
    }
    errors.extend(resources(&c["resources"], &format!("{at}.resources")));
    errors
}

fn image_whitespace(c: &Value, at: &str) -> Option<FieldError> {
    let image = text(c, "image");
    (image.trim() != image)
        .then(|| FieldError::invalid(at, image, "must not have leading or trailing whitespace"))
}

/// `helper.IsOvercommitAllowed`: native resources but huge pages may be
/// requested below their limit; extended ones must request their limit.
fn overcommit_allowed(resource: &str) -> bool {
    let native = !resource.contains('/') || resource.contains("kubernetes.io/");
    native && !resource.starts_with("hugepages-")
}

/// `ValidateResourceRequirements`: no negative quantity, no request above
/// its limit.
fn resources(resources: &Value, at: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let parsed = |field: &str| -> Vec<(String, String, Option<Quantity>)> {
        resources[field]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, q)| {
                let shown = q.as_str().map_or_else(|| q.to_string(), str::to_owned);
                let quantity = Quantity::parse(&shown).ok();
                (name.clone(), shown, quantity)
            })
            .collect()
    };
    let (limits, requests) = (parsed("limits"), parsed("requests"));
    for (field, entries) in [("limits", &limits), ("requests", &requests)] {
        for (name, shown, q) in entries {
            if q.as_ref().is_some_and(|q| q.sign() < 0) {
                errors.push(FieldError::invalid(
                    format!("{at}.{field}[{name}]"),
                    shown.as_str(),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    for (name, shown, request) in &requests {
        let limit = limits.iter().find(|(n, _, _)| n == name);
        let Some((_, limit_shown, limit)) = limit else {
            if !overcommit_allowed(name) {
                errors.push(FieldError::required(
                    format!("{at}.limits"),
                    "Limit must be set for non overcommitable resources",
                ));
            }
            continue;
        };
        let order = match (request, limit) {
            (Some(r), Some(l)) => r.compare(l),
            _ => Ordering::Equal,
        };
        let detail = if order != Ordering::Equal && !overcommit_allowed(name) {
            format!("must be equal to {name} limit of {limit_shown}")
        } else if order == Ordering::Greater {
            format!("must be less than or equal to {name} limit of {limit_shown}")
        } else {
            continue;
        };
        errors.push(FieldError::invalid(
            format!("{at}.requests"),
            shown.as_str(),
            &detail,
        ));
    }
    errors
}

/// `validateSchedulingGates`: qualified names, each once.
fn scheduling_gates(gates: &[Value]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, gate) in gates.iter().enumerate() {
        let at = format!("spec.schedulingGates[{i}]");
        let name = text(gate, "name");
        for detail in qualified_name(name) {
            errors.push(FieldError::invalid(at.clone(), name, &detail));
        }
        if seen.contains(&name) {
            errors.push(FieldError::duplicate(at, name));
        }
        seen.push(name);
    }
    errors
}

/// `ValidatePodStatusUpdate`: a nominated node is a node name.
pub fn status_update(pod: &Value, old: &Value) -> Vec<FieldError> {
    let nominated = text(&pod["status"], "nominatedNodeName");
    if nominated.is_empty() || nominated == text(&old["status"], "nominatedNodeName") {
        return Vec::new();
    }
    dns1123_subdomain(nominated)
        .iter()
        .map(|detail| FieldError::invalid("status.nominatedNodeName", nominated, detail))
        .collect()
}

/// `ValidatePodUpdate`: the spec is checked again, then only images,
/// activeDeadlineSeconds (set, or lowered), added tolerations, removed
/// scheduling gates, a negative grace period set to 1 and, while gated,
/// the node selector and affinity may change. Some mistakes end the
/// checks early, as upstream's do.
pub fn update(pod: &Value, old: &Value) -> Vec<FieldError> {
    let (spec, before) = (&pod["spec"], &old["spec"]);
    let mut errors = spec_errors(spec);
    for field in ["containers", "initContainers"] {
        if !container_updates(spec, before, field, &mut errors) {
            return errors;
        }
    }
    if !active_deadline_update(spec, before, &mut errors) {
        return errors;
    }
    errors.extend(only_added_tolerations(
        list(&spec["tolerations"]),
        list(&before["tolerations"]),
    ));
    errors.extend(only_deleted_gates(
        list(&spec["schedulingGates"]),
        list(&before["schedulingGates"]),
    ));
    if semantic(spec) == semantic(before) {
        return errors;
    }
    let qos_before = old["status"]["qosClass"]
        .as_str()
        .unwrap_or_else(|| crate::store::qos_class(old));
    if qos_before != crate::store::qos_class(pod) {
        errors.push(FieldError::invalid(
            "metadata",
            pod["status"]["qosClass"].clone(),
            "Pod QOS is immutable",
        ));
    }
    let changes = forbidden_changes(before, &with_updatable_fields_of(before, spec));
    if !changes.is_empty() {
        errors.push(FieldError::forbidden(
            "spec",
            &format!("{POD_UPDATE}\n{}", changes.join("\n")),
        ));
    }
    errors
}

/// `ValidateContainerUpdates` of one list: the same containers, each with
/// an image. False when the checks stop here.
fn container_updates(spec: &Value, before: &Value, field: &str, out: &mut Vec<FieldError>) -> bool {
    let (now, then) = (list(&spec[field]), list(&before[field]));
    if now.len() != then.len() {
        out.push(FieldError::forbidden(
            format!("spec.{field}"),
            "pod updates may not add or remove containers",
        ));
        return false;
    }
    for (i, c) in now.iter().enumerate() {
        let at = format!("spec.{field}[{i}].image");
        if text(c, "image").is_empty() {
            out.push(FieldError::required(at.clone(), ""));
        }
        out.extend(image_whitespace(c, &at));
    }
    true
}

/// activeDeadlineSeconds may be set, or lowered, never raised nor
/// removed. False when the checks stop here.
fn active_deadline_update(spec: &Value, before: &Value, out: &mut Vec<FieldError>) -> bool {
    let field = "spec.activeDeadlineSeconds";
    let then = before["activeDeadlineSeconds"].as_i64();
    match spec["activeDeadlineSeconds"].as_i64() {
        Some(now) if !(1..=i64::from(i32::MAX)).contains(&now) => {
            out.push(FieldError::invalid(field, now, DEADLINE_RANGE));
            false
        }
        Some(now) if then.is_some_and(|then| then < now) => {
            out.push(FieldError::invalid(
                field,
                now,
                "must be less than or equal to previous value",
            ));
            false
        }
        None if then.is_some() => {
            out.push(FieldError::invalid(
                field,
                Value::Null,
                "must not update from a positive integer to nil value",
            ));
            true
        }
        _ => true,
    }
}

/// `validateOnlyAddedTolerations`: every old toleration is still there,
/// but for its tolerationSeconds.
fn only_added_tolerations(now: &[Value], then: &[Value]) -> Option<FieldError> {
    let same = |a: &Value, b: &Value| {
        ["key", "operator", "value", "effect"]
            .iter()
            .all(|f| text(a, f) == text(b, f))
    };
    let kept = then.iter().all(|t| now.iter().any(|n| same(t, n)));
    (!kept).then(|| {
        FieldError::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        )
    })
}

/// `validateOnlyDeletedSchedulingGates`: no gate a pod did not have.
fn only_deleted_gates(now: &[Value], then: &[Value]) -> Vec<FieldError> {
    let mut added: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, gate) in now.iter().enumerate() {
        added.insert(text(gate, "name"), i);
    }
    for gate in then {
        added.remove(text(gate, "name"));
    }
    let mut added: Vec<(&str, usize)> = added.into_iter().collect();
    added.sort_by_key(|(_, i)| *i);
    added
        .into_iter()
        .map(|(name, i)| {
            FieldError::forbidden(
                format!("spec.schedulingGates[{i}].name"),
                &format!("only deletion is allowed, but found new scheduling gate '{name}'"),
            )
        })
        .collect()
}

/// A value as apimachinery's semantic equality sees it: nulls, empty
/// lists and empty maps are the same as absent.
fn semantic(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .map(|v| semantic(v).unwrap_or(Value::Null))
                .collect(),
        )),
        Value::Object(map) => {
            let kept: serde_json::Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| semantic(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other.clone()),
    }
}

/// The new `spec` with what an update may change put back as it was
/// (upstream's "munged" spec): equal to the old one exactly when nothing
/// else changed. The lists have their old lengths (checked before).
fn with_updatable_fields_of(before: &Value, spec: &Value) -> Value {
    let mut munged = spec.clone();
    for field in ["containers", "initContainers"] {
        let containers = munged[field].as_array_mut().into_iter().flatten();
        for (i, c) in containers.enumerate() {
            if let Some(c) = c.as_object_mut() {
                c.insert("image".into(), before[field][i]["image"].clone());
            }
        }
    }
    for field in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        munged[field] = before[field].clone();
    }
    let grace = "terminationGracePeriodSeconds";
    if before[grace].as_i64().is_some_and(|s| s < 0) && munged[grace].as_i64() == Some(1) {
        munged[grace] = before[grace].clone();
    }
    // A gated pod may still be steered (this server lets the node selector
    // and affinity change freely while gated).
    if !list(&before["schedulingGates"]).is_empty() {
        munged["nodeSelector"] = before["nodeSelector"].clone();
        munged["affinity"] = before["affinity"].clone();
    }
    munged
}

/// The fields of `spec` an update changed that it may not, each `field:
/// before -> after`.
fn forbidden_changes(before: &Value, after: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let before = before.as_object().unwrap_or(&empty);
    let after = after.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| {
            let b = before.get(key).and_then(semantic);
            let a = after.get(key).and_then(semantic);
            (b != a).then(|| {
                let show = |v: Option<Value>| v.map_or("nil".to_owned(), |v| v.to_string());
                format!("  spec.{key}: {} -> {}", show(b), show(a))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(errors: Vec<FieldError>) -> Vec<String> {
        errors.iter().map(FieldError::text).collect()
    }

    fn pod(spec: Value) -> Value {
        json!({"spec": spec})
    }

    #[test]
    fn a_new_pod_s_containers_are_named_have_images_and_fit_their_limits() {
        assert_eq!(
            texts(create(&pod(json!({"containers": []})))),
            vec!["spec.containers: Required value"]
        );
        let errors = texts(create(&pod(json!({"containers": [
            {"image": " busybox"},
            {"name": "Bad_Name", "image": "x"},
            {"name": "c"}, {"name": "c", "image": "y"}]}))));
        assert_eq!(errors[0], "spec.containers[0].name: Required value");
        assert!(errors[1].starts_with(
            "spec.containers[1].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label"
        ));
        assert_eq!(
            errors[2..4],
            [
                "spec.containers[2].image: Required value",
                "spec.containers[3].name: Duplicate value: \"c\""
            ]
        );
        assert_eq!(
            errors[4],
            "spec.containers[0].image: Invalid value: \" busybox\": must not have leading or trailing whitespace"
        );
        let errors = texts(create(&pod(
            json!({"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "1", "example.com/gpu": "1"},
                          "requests": {"cpu": "2", "memory": "-1", "example.com/gpu": "2"}}}]}),
        )));
        assert_eq!(
            errors,
            vec![
                "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be equal to example.com/gpu limit of 1",
            ]
        );
    }

    #[test]
    fn a_new_pod_s_policies_deadlines_and_gates() {
        let base = |extra: Value| {
            let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
            if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
                s.extend(e.clone());
            }
            texts(create(&pod(spec)))
        };
        assert_eq!(
            base(json!({"restartPolicy": "Sometimes"})),
            vec![
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ]
        );
        assert_eq!(
            base(json!({"activeDeadlineSeconds": 0})),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"
            ]
        );
        assert_eq!(
            base(json!({"ephemeralContainers": [{"name": "d", "image": "i"}]})),
            vec!["spec.ephemeralContainers: Forbidden: cannot be set on create"]
        );
        assert_eq!(
            base(json!({"nodeName": "n", "schedulingGates": [{"name": "a/b"}, {"name": "a/b"}]})),
            vec![
                "spec.schedulingGates[1]: Duplicate value: \"a/b\"",
                "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
            ]
        );
        assert!(
            status_update(
                &json!({"status": {"nominatedNodeName": "Node1"}}),
                &json!({})
            )[0]
            .text()
            .starts_with(
                "status.nominatedNodeName: Invalid value: \"Node1\": a lowercase RFC 1123 subdomain"
            )
        );
    }

    #[test]
    fn a_pod_update_may_change_only_what_kube_apiserver_lets_it() {
        let old = json!({"spec": {
            "nodeName": "a",
            "containers": [{"name": "c", "image": "pause:3.9", "resources": {"requests": {"cpu": "1"}}}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "terminationGracePeriodSeconds": 30,
        }});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut new = old.clone();
            f(&mut new);
            update(&new, &old)
        };
        assert!(with(&|_| {}).is_empty(), "no change");
        assert!(with(&|p| p["spec"]["containers"][0]["image"] = json!("pause:3.10")).is_empty());
        assert_eq!(
            texts(with(&|p| p["spec"]["containers"][0]["image"] = json!(""))),
            vec!["spec.containers[0].image: Required value"; 2]
        );
        assert!(with(&|p| p["spec"]["activeDeadlineSeconds"] = json!(60)).is_empty());
        assert!(
            with(&|p| p["spec"]["tolerations"] = json!([
                {"key": "k", "operator": "Exists", "tolerationSeconds": 5},
                {"key": "x", "operator": "Exists"}]))
            .is_empty(),
            "tolerations may be added, their seconds changed"
        );
        assert_eq!(
            texts(with(&|p| p["spec"]["tolerations"] = json!([]))),
            vec![
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
            ]
        );
        assert_eq!(
            texts(with(&|p| p["spec"]["containers"] = json!([]))),
            vec![
                "spec.containers: Required value",
                "spec.containers: Forbidden: pod updates may not add or remove containers"
            ]
        );
        let moved = with(&|p| p["spec"]["nodeName"] = json!("b"));
        assert_eq!(moved.len(), 1);
        assert_eq!(
            (moved[0].field.as_str(), moved[0].reason),
            ("spec", "FieldValueForbidden")
        );
        assert!(moved[0].body.starts_with(
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
        ));
        assert!(
            moved[0].body.contains("spec.nodeName: \"a\" -> \"b\""),
            "{}",
            moved[0].body
        );
        assert_eq!(
            with(&|p| p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("2"))
                .len(),
            1,
            "resources change only through the resize subresource"
        );
        assert_eq!(
            with(&|p| p["spec"]["terminationGracePeriodSeconds"] = json!(5)).len(),
            1
        );
        // Empty and absent are the same.
        assert!(with(&|p| p["spec"]["volumes"] = json!([])).is_empty());
    }

    #[test]
    fn deadlines_may_be_lowered_and_gates_removed() {
        let old = json!({"spec": {"containers": [{"name": "c", "image": "i"}],
            "activeDeadlineSeconds": 30, "schedulingGates": [{"name": "g1"}, {"name": "g2"}]}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut new = old.clone();
            f(&mut new);
            texts(update(&new, &old))
        };
        assert!(with(&|p| p["spec"]["activeDeadlineSeconds"] = json!(10)).is_empty());
        assert_eq!(
            with(&|p| p["spec"]["activeDeadlineSeconds"] = json!(40)),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 40: must be less than or equal to previous value"
            ]
        );
        assert_eq!(
            with(&|p| p["spec"]["activeDeadlineSeconds"] = Value::Null),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"
            ]
        );
        assert!(
            with(&|p| {
                p["spec"]["schedulingGates"] = json!([{"name": "g2"}]);
                p["spec"]["nodeSelector"] = json!({"zone": "a"});
            })
            .is_empty()
        );
        assert_eq!(
            with(&|p| p["spec"]["schedulingGates"] = json!([{"name": "g1"}, {"name": "g3"}])),
            vec![
                "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'g3'"
            ]
        );
        let ungated = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        let mut selected = ungated.clone();
        selected["spec"]["nodeSelector"] = json!({"zone": "a"});
        assert_eq!(update(&selected, &ungated).len(), 1, "only while gated");
    }
}
