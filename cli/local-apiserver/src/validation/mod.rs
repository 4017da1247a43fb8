//! What kube-apiserver's registry strategies refuse in built-in objects
//! before any schema is involved, worded as apimachinery's `field.Error`s
//! word it (the messages and causes clients see):
//!
//! ```text
//!   every kind ── meta: name / generateName (the kind's name rule), labels,
//!                 annotations, owner references, finalizers; on update the
//!                 fields an update may not change
//!   pods ──────── pod: containers, resources, restart policy, deadlines and
//!                 gates on create; what ValidatePodUpdate lets change;
//!                 pods/status' nominated node
//!   nodes ─────── node: taints, podCIDRs, capacity; on update providerID,
//!                 podCIDRs and externalID set once, unique addresses
//! ```
//!
//! Custom resources get their `ObjectMeta` checked by `crd-validation`;
//! only what it leaves out (owner references, conflicting finalizers, the
//! update rules) is checked here.

mod meta;
mod node;
mod pod;

use crd_validation::go_quote;
use serde_json::Value;

use crate::resources::ResourceInfo;

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

/// A bad value as `ErrorBody` prints it: a string quoted as Go quotes it,
/// a number or a boolean as is, nothing as `null`, a struct or a list as
/// JSON.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        other => other.to_string(),
    }
}

/// `: detail` when there is one.
fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

impl FieldError {
    fn new(field: impl Into<String>, reason: &'static str, body: String) -> Self {
        Self {
            field: field.into(),
            reason,
            body,
        }
    }

    /// `field.Invalid`.
    pub fn invalid(field: impl Into<String>, value: impl Into<Value>, detail: &str) -> Self {
        let head = format!("Invalid value: {}", render(&value.into()));
        Self::new(field, "FieldValueInvalid", with_detail(head, detail))
    }

    /// `field.Required`.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let body = with_detail("Required value".to_owned(), detail);
        Self::new(field, "FieldValueRequired", body)
    }

    /// `field.Forbidden`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        let body = with_detail("Forbidden".to_owned(), detail);
        Self::new(field, "FieldValueForbidden", body)
    }

    /// `field.Duplicate`.
    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        let body = format!("Duplicate value: {}", render(&value.into()));
        Self::new(field, "FieldValueDuplicate", body)
    }

    /// `field.NotSupported`, listing the supported values.
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let field: String = field.into();
        crate::field_errors::not_supported_printed(&field, &go_quote(value), supported)
    }

    /// `field.TooLong` of a total size in bytes.
    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        let body = format!("Too long: may not be more than {max_bytes} bytes");
        Self::new(field, "FieldValueTooLong", body)
    }

    /// `field: body`, as the Status message lists it.
    pub fn text(&self) -> String {
        format!("{}: {}", self.field, self.body)
    }
}

/// Every rule the strategy of `res` applies to `obj` on create (`old` is
/// `None`) or on an update of the object or of its `sub`resource.
pub fn object(
    res: &ResourceInfo,
    obj: &Value,
    old: Option<&Value>,
    sub: Option<&str>,
) -> Vec<FieldError> {
    let mut errors = if res.crd.is_none() {
        meta::object_meta(obj, meta::name_rule(&res.group, &res.plural))
    } else {
        meta::custom_resource_meta(obj)
    };
    if let Some(old) = old {
        errors.extend(meta::object_meta_update(obj, old));
    }
    if res.crd.is_some() || !res.group.is_empty() {
        return errors;
    }
    match (res.plural.as_str(), old, sub) {
        ("pods", None, _) => errors.extend(pod::create(obj)),
        ("pods", Some(old), Some("status")) => errors.extend(pod::status_update(obj, old)),
        ("pods", Some(old), _) => errors.extend(pod::update(obj, old)),
        ("nodes", None, _) => errors.extend(node::create(obj)),
        // nodeStatusStrategy validates the update only.
        ("nodes", Some(old), Some("status")) => errors.extend(node::update(obj, old)),
        ("nodes", Some(old), _) => {
            errors.extend(node::create(obj));
            errors.extend(node::update(obj, old));
        }
        _ => {}
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_render_as_field_error_body_does() {
        assert_eq!(
            FieldError::invalid("spec.x", "a", "bad").text(),
            "spec.x: Invalid value: \"a\": bad"
        );
        assert_eq!(
            FieldError::invalid("spec.x", 30, "field is immutable").body,
            "Invalid value: 30: field is immutable"
        );
        assert_eq!(
            FieldError::invalid("spec.x", Value::Null, "").body,
            "Invalid value: null"
        );
        assert_eq!(
            FieldError::invalid("a", json!(["x", "y"]), "d").body,
            "Invalid value: [\"x\",\"y\"]: d"
        );
        assert_eq!(FieldError::required("a", "").body, "Required value");
        assert_eq!(FieldError::forbidden("a", "no").body, "Forbidden: no");
        assert_eq!(
            FieldError::not_supported("a", "x", &["A", "B"]).body,
            "Unsupported value: \"x\": supported values: \"A\", \"B\""
        );
        assert_eq!(
            FieldError::too_long("a", 262_144).body,
            "Too long: may not be more than 262144 bytes"
        );
    }
}
