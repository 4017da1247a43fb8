//! What kube-apiserver refuses in objects before any schema is involved,
//! worded as apimachinery words it (the messages clients see):
//!
//! - every object: label keys (qualified names) and values;
//! - Nodes: taints unique by key and effect (reported under
//!   `metadata.taints`, as kube-apiserver's `ValidateNode` names the path);
//!   `spec.providerID` set once.

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

const QUALIFIED_NAME: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes[0].is_ascii_alphanumeric()
                && !bytes[0].is_ascii_uppercase()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && !bytes[bytes.len() - 1].is_ascii_uppercase()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        })
}

/// apimachinery's `IsQualifiedName`: what is wrong with a label key.
fn qualified_name_errors(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    let mut errors = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errors.push("prefix part must be non-empty".to_owned());
        } else {
            if prefix.len() > 253 {
                errors.push("prefix part must be no more than 253 characters".to_owned());
            }
            if !is_dns1123_subdomain(prefix) {
                errors.push(format!("prefix part {DNS1123_SUBDOMAIN}"));
            }
        }
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_qualified_name_part(name) {
        errors.push(format!("name part {QUALIFIED_NAME}"));
    }
    errors
}

/// apimachinery's `IsValidLabelValue`.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errors.push(LABEL_VALUE.to_owned());
    }
    errors
}

/// `metadata.labels` of any object.
pub fn labels(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(labels) = object["metadata"]["labels"].as_object() else {
        return errors;
    };
    for (key, value) in labels {
        for detail in qualified_name_errors(key) {
            errors.push(FieldError::invalid("metadata.labels", key, &detail));
        }
        let value = value.as_str().unwrap_or_default();
        for detail in label_value_errors(value) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
