//! What kube-apiserver refuses in objects before any schema is involved,
//! worded as apimachinery words it (the messages clients see):
//!
//! - every object: label keys (qualified names) and values;
//! - Nodes: taints unique by key and effect (reported under
//!   `metadata.taints`, as kube-apiserver's `ValidateNode` names the path);
//!   `spec.providerID` set once.
//! - Pods: after creation an update may change only what
//!   `ValidatePodUpdate` lets it (container images, activeDeadlineSeconds,
//!   added tolerations, a negative grace period to 1, removed scheduling
//!   gates and, while gated, the node selector and affinity); the node a
//!   pod is bound to changes only through its binding.

use karpenter_core::names::{label_value, qualified_name};
use serde_json::Value;

/// One refused field, as `field.Error` renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `metadata.labels`, `metadata.taints[1]`.
    pub field: String,
    /// `FieldValueInvalid`, `FieldValueForbidden`, `FieldValueDuplicate`.
    pub reason: &'static str,
    /// The error without its field (`Invalid value: "x": ...`).
    pub body: String,
}

impl FieldError {
    fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            field: field.to_owned(),
            reason: "FieldValueInvalid",
            body: format!("Invalid value: {value:?}: {detail}"),
        }
    }

    /// `field: body`, as the Status message lists it.
    pub fn text(&self) -> String {
        format!("{}: {}", self.field, self.body)
    }
}

/// `metadata.labels` of any object.
pub fn labels(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(labels) = object["metadata"]["labels"].as_object() else {
        return errors;
    };
    for (key, value) in labels {
        for detail in qualified_name(key) {
            errors.push(FieldError::invalid("metadata.labels", key, &detail));
        }
        let value = value.as_str().unwrap_or_default();
        for detail in label_value(value) {
            errors.push(FieldError::invalid("metadata.labels", value, &detail));
        }
    }
    errors
}

/// A Node's own rules, on create (`old` is `None`) and update.
pub fn node(object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, taint) in object["spec"]["taints"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let key = taint["key"].as_str().unwrap_or_default();
        let effect = taint["effect"].as_str().unwrap_or_default();
        if seen.contains(&(key, effect)) {
            let value = taint["value"].as_str().unwrap_or_default();
            errors.push(FieldError {
                field: format!("metadata.taints[{i}]"),
                reason: "FieldValueDuplicate",
                body: format!(
                    "Duplicate value: core.Taint{{Key:{key:?}, Value:{value:?}, Effect:{effect:?}, TimeAdded:(*v1.Time)(nil)}}: taints must be unique by key and effect pair"
                ),
            });
        } else {
            seen.push((key, effect));
        }
    }
    if let Some(old) = old {
        let before = old["spec"]["providerID"].as_str().unwrap_or_default();
        let after = object["spec"]["providerID"].as_str().unwrap_or_default();
        if !before.is_empty() && before != after {
            errors.push(FieldError {
                field: "spec.providerID".to_owned(),
                reason: "FieldValueForbidden",
                body: "Forbidden: node updates may not change providerID except from \"\" to valid"
                    .to_owned(),
            });
        }
    }
    errors
}

const POD_UPDATE: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

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

/// `spec` of the old pod with what an update may change taken from the
/// new one; equal to the new spec exactly when the update is allowed.
fn pod_spec_with_allowed_changes(old: &Value, new: &Value) -> Value {
    let mut merged = old.clone();
    for list in ["containers", "initContainers"] {
        if let (Some(before), Some(after)) = (merged[list].as_array_mut(), new[list].as_array())
            && before.len() == after.len()
        {
            for (b, a) in before.iter_mut().zip(after) {
                b["image"] = a["image"].clone();
            }
        }
    }
    merged["activeDeadlineSeconds"] = new["activeDeadlineSeconds"].clone();
    let kept = |field: &str| {
        let after = new[field].as_array().map(Vec::as_slice).unwrap_or_default();
        old[field]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .all(|t| after.contains(t))
    };
    if kept("tolerations") {
        merged["tolerations"] = new["tolerations"].clone();
    }
    if old["terminationGracePeriodSeconds"]
        .as_i64()
        .is_some_and(|s| s < 0)
        && new["terminationGracePeriodSeconds"].as_i64() == Some(1)
    {
        merged["terminationGracePeriodSeconds"] = new["terminationGracePeriodSeconds"].clone();
    }
    let gated = old["schedulingGates"]
        .as_array()
        .is_some_and(|gates| !gates.is_empty());
    // Gates may only be removed.
    let gates_removed = new["schedulingGates"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .all(|g| {
            old["schedulingGates"]
                .as_array()
                .is_some_and(|o| o.contains(g))
        });
    if gates_removed {
        merged["schedulingGates"] = new["schedulingGates"].clone();
    }
    if gated {
        merged["nodeSelector"] = new["nodeSelector"].clone();
        merged["affinity"] = new["affinity"].clone();
    }
    merged
}

/// The fields of `spec` an update changed that it may not, each `field:
/// before -> after`.
fn forbidden_changes(allowed: &Value, new: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let before = allowed.as_object().unwrap_or(&empty);
    let after = new.as_object().unwrap_or(&empty);
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

/// A Pod update's own rules (`ValidatePodUpdate`).
pub fn pod_update(object: &Value, old: &Value) -> Vec<FieldError> {
    let allowed = pod_spec_with_allowed_changes(&old["spec"], &object["spec"]);
    let changes = forbidden_changes(&allowed, &object["spec"]);
    if changes.is_empty() {
        return Vec::new();
    }
    vec![FieldError {
        field: "spec".to_owned(),
        reason: "FieldValueForbidden",
        body: format!("Forbidden: {POD_UPDATE}\n{}", changes.join("\n")),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // apimachinery's words, as kube-apiserver sends them.
    const QUALIFIED_NAME: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

    #[test]
    fn label_keys_and_values_are_checked_as_apimachinery_does() {
        let ok = json!({"metadata": {"labels": {
            "app": "web", "example.com/tier": "", "karpenter.sh/nodepool": "default",
            "a.b-c_d": "x.y-z_0"}}});
        assert!(labels(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"bad key!": "ok"}}});
        assert_eq!(
            labels(&bad)[0].text(),
            format!("metadata.labels: Invalid value: \"bad key!\": name part {QUALIFIED_NAME}")
        );
        let bad = json!({"metadata": {"labels": {"Example.com/x": "ok"}}});
        assert_eq!(
            labels(&bad)[0].text(),
            format!(
                "metadata.labels: Invalid value: \"Example.com/x\": prefix part {DNS1123_SUBDOMAIN}"
            )
        );
        let bad = json!({"metadata": {"labels": {"k": "-starts-with-a-dash"}}});
        assert_eq!(
            labels(&bad)[0].text(),
            format!("metadata.labels: Invalid value: \"-starts-with-a-dash\": {LABEL_VALUE}")
        );
        let long = "v".repeat(64);
        let bad = json!({"metadata": {"labels": {"k": long}}});
        assert_eq!(
            labels(&bad)[0].body,
            format!("Invalid value: \"{long}\": must be no more than 63 characters")
        );
        let bad = json!({"metadata": {"labels": {"a/b/c": "x"}}});
        assert!(
            labels(&bad)[0]
                .body
                .contains("with an optional DNS subdomain prefix")
        );
        let bad = json!({"metadata": {"labels": {"/x": "x"}}});
        assert!(
            labels(&bad)[0]
                .body
                .ends_with("prefix part must be non-empty")
        );
    }

    #[test]
    fn node_taints_are_unique_by_key_and_effect_and_the_provider_id_is_set_once() {
        let node = json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"},
            {"key": "a", "effect": "NoExecute"},
            {"key": "a", "value": "v", "effect": "NoSchedule"}]}});
        let errors = node_errors(&node, None);
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].text(),
            "metadata.taints[2]: Duplicate value: core.Taint{Key:\"a\", Value:\"v\", Effect:\"NoSchedule\", TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and effect pair"
        );
        let before = json!({"spec": {"providerID": ""}});
        let after = json!({"spec": {"providerID": "kwok://n"}});
        assert!(
            node_errors(&after, Some(&before)).is_empty(),
            "from \"\" to valid"
        );
        let changed = json!({"spec": {"providerID": "kwok://other"}});
        assert_eq!(
            node_errors(&changed, Some(&after))[0].text(),
            "spec.providerID: Forbidden: node updates may not change providerID except from \"\" to valid"
        );
        assert!(node_errors(&after, Some(&after)).is_empty());
    }

    fn node_errors(object: &Value, old: Option<&Value>) -> Vec<FieldError> {
        node(object, old)
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
            pod_update(&new, &old)
        };
        assert!(with(&|_| {}).is_empty(), "no change");
        assert!(with(&|p| p["spec"]["containers"][0]["image"] = json!("pause:3.10")).is_empty());
        assert!(with(&|p| p["spec"]["activeDeadlineSeconds"] = json!(60)).is_empty());
        assert!(
            with(&|p| p["spec"]["tolerations"]
                .as_array_mut()
                .expect("list")
                .push(json!({"key": "x", "operator": "Exists"})))
            .is_empty(),
            "tolerations may be added"
        );
        assert!(
            with(&|p| p["spec"]["tolerations"] = json!([])).len() == 1,
            "not removed"
        );
        let moved = with(&|p| p["spec"]["nodeName"] = json!("b"));
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].field, "spec");
        assert_eq!(moved[0].reason, "FieldValueForbidden");
        assert!(
            moved[0].body.starts_with(
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
            ),
            "{}",
            moved[0].body
        );
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
    fn a_gated_pod_may_lose_gates_and_gain_a_node_selector() {
        let old = json!({"spec": {
            "containers": [{"name": "c", "image": "i"}],
            "schedulingGates": [{"name": "g1"}, {"name": "g2"}],
        }});
        let mut new = old.clone();
        new["spec"]["schedulingGates"] = json!([{"name": "g2"}]);
        new["spec"]["nodeSelector"] = json!({"zone": "a"});
        assert!(pod_update(&new, &old).is_empty());
        let mut added = old.clone();
        added["spec"]["schedulingGates"] = json!([{"name": "g1"}, {"name": "g2"}, {"name": "g3"}]);
        assert_eq!(pod_update(&added, &old).len(), 1, "gates may not be added");
        let ungated = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        let mut selected = ungated.clone();
        selected["spec"]["nodeSelector"] = json!({"zone": "a"});
        assert_eq!(pod_update(&selected, &ungated).len(), 1, "only while gated");
    }
}
