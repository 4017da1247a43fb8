//! [`FieldError`]s beyond the plain constructors: a bad value printed by
//! the caller (invalid or not supported), immutable fields, and label
//! selectors.

use crd_validation::go_quote;
use serde_json::Value;

use crate::validation::FieldError;

/// `field.Invalid` with a value printed by the caller (a Go struct dump,
/// or `OmitValueType` when `printed` is empty).
pub fn invalid_printed(field: &str, printed: &str, detail: &str) -> FieldError {
    let mut body = String::from("Invalid value");
    for part in [printed, detail] {
        if !part.is_empty() {
            body.push_str(": ");
            body.push_str(part);
        }
    }
    FieldError {
        field: field.to_owned(),
        reason: "FieldValueInvalid",
        body,
    }
}

/// `field.NotSupported` with the bad value printed by the caller (a list
/// as JSON, say), the supported values quoted as Go quotes them.
pub fn not_supported_printed(field: &str, printed: &str, supported: &[&str]) -> FieldError {
    let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
    FieldError {
        field: field.to_owned(),
        reason: "FieldValueNotSupported",
        body: format!(
            "Unsupported value: {printed}: supported values: {}",
            quoted.join(", ")
        ),
    }
}

/// `ValidateImmutableField`: `Invalid value: <new>: field is immutable`
/// when `new` differs from `old` (absent and null being the same).
pub fn immutable(field: &str, new: &Value, old: &Value) -> Option<FieldError> {
    (new != old).then(|| FieldError::invalid(field, new.clone(), "field is immutable"))
}

/// `metav1validation.ValidateLabelSelector`: label keys and values of
/// `matchLabels`, and each requirement's operator, key and values.
pub fn label_selector(selector: &Value, path: &str) -> Vec<FieldError> {
    use karpenter_core::names::{label_value, qualified_name};
    let mut errors = Vec::new();
    let Some(selector) = selector.as_object() else {
        return errors;
    };
    let labels_path = format!("{path}.matchLabels");
    for (key, value) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for detail in qualified_name(key) {
            errors.push(FieldError::invalid(&labels_path, key.as_str(), &detail));
        }
        let value = value.as_str().unwrap_or_default();
        for detail in label_value(value) {
            errors.push(FieldError::invalid(&labels_path, value, &detail));
        }
    }
    let requirements = selector.get("matchExpressions").and_then(Value::as_array);
    for (i, req) in requirements.into_iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values: Vec<&Value> = req["values"].as_array().into_iter().flatten().collect();
        match req["operator"].as_str().unwrap_or_default() {
            "In" | "NotIn" if values.is_empty() => errors.push(FieldError::required(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(FieldError::forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(FieldError::invalid(
                format!("{at}.operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = req["key"].as_str().unwrap_or_default();
        for detail in qualified_name(key) {
            errors.push(FieldError::invalid(format!("{at}.key"), key, &detail));
        }
        for (j, value) in values.iter().enumerate() {
            let value = value.as_str().unwrap_or_default();
            for detail in label_value(value) {
                errors.push(FieldError::invalid(
                    format!("{at}.values[{j}]"),
                    value,
                    &detail,
                ));
            }
        }
    }
    errors
}
