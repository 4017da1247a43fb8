//! What custom resources get from apiextensions-apiserver beyond schema
//! validation (`customresource_handler.go`, `registry/customresource`):
//! the request's group/version check, the type meta and scale checks of
//! the validator, the `/scale` view through the CRD's paths, defaults
//! applied on read, and the CRD's own validation.

use crd_validation::go_value;
use serde_json::{Value, json};

use crate::field_errors::invalid_printed;
use crate::resources::ResourceInfo;
use crate::store::ApiError;
use crate::validation::FieldError;

/// The request handler's check of the body's `apiVersion` against the
/// endpoint's (a wrong kind is left to validation, which names it).
pub fn check_group_version(res: &ResourceInfo, version: &str, obj: &Value) -> Result<(), ApiError> {
    let expected = res.api_version(version);
    match obj["apiVersion"].as_str().filter(|a| !a.is_empty()) {
        Some(given) if given != expected => Err(ApiError::bad_request(format!(
            "the API version in the data ({given}) does not match the expected API version ({expected})"
        ))),
        _ => Ok(()),
    }
}

/// A body the API types cannot hold (a label that is not a string, a
/// `spec` that is not an object) is refused as decoding refuses it.
pub fn decodable(res: &ResourceInfo, version: &str, obj: &Value) -> Result<(), ApiError> {
    crate::store::check_shape(obj).map_err(|e| {
        let what = e
            .message
            .strip_prefix("the body of the request is not a valid object: ")
            .unwrap_or(&e.message);
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {what}",
            kind = res.kind
        ))
    })
}

/// The version an object is stored as (its `apiVersion`'s), else the
/// resource's first.
fn stored_version(res: &ResourceInfo, obj: &Value) -> String {
    obj["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit_once('/'))
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| res.versions.first().cloned().unwrap_or_default())
}

/// Defaults of the CRD's current schema on an object read from storage (a
/// default added to the CRD later shows on objects stored before it), as
/// the apiserver's storage decoder applies them. Objects without a name
/// (watch bookmarks) are left alone.
pub fn default_on_read(res: &ResourceInfo, version: &str, obj: &mut Value) {
    if let Some(crd) = &res.crd
        && obj["metadata"]["name"].is_string()
    {
        let _ = crd.validator.apply_defaults(version, obj);
    }
}

/// Validates a custom resource as the registry's strategy does: type meta
/// and schema (only `status` on a status write), CEL rules, and the scale
/// subresource's replicas and selector paths. Errors name the object's own
/// kind (`SomethingElse.example.com "w" is invalid: kind: ...`).
pub fn validate(
    res: &ResourceInfo,
    obj: &mut Value,
    old: Option<&Value>,
    status_write: bool,
) -> Result<(), ApiError> {
    let Some(crd) = &res.crd else {
        return Ok(());
    };
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let version = stored_version(res, obj);
    let outcome = if status_write {
        crd.validator.validate_status(&version, obj, old)
    } else {
        crd.validator.validate(&version, obj, old)
    }
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut errors: Vec<FieldError> = outcome
        .violations
        .iter()
        .map(|v| FieldError {
            field: v.path.clone(),
            reason: reason(v.kind),
            body: v.body(),
        })
        .collect();
    let type_meta_wrong = outcome
        .violations
        .iter()
        .any(|v| v.path == "kind" || v.path == "apiVersion");
    if !type_meta_wrong && let Some(paths) = ScalePaths::of(res, &version) {
        if !status_write {
            errors.extend(paths.check_spec(obj));
        }
        errors.extend(paths.check_status(obj));
    }
    if errors.is_empty() {
        return Ok(());
    }
    let mut named = res.clone();
    if let Some(kind) = obj["kind"].as_str().filter(|k| !k.is_empty()) {
        named.kind = kind.to_string();
    }
    Err(ApiError::invalid_fields(&named, &name, &errors))
}

/// The `StatusCause` reason of a violation's kind.
fn reason(kind: crd_validation::ViolationKind) -> &'static str {
    use crd_validation::ViolationKind as K;
    match kind {
        K::Required => "FieldValueRequired",
        K::Invalid | K::TypeInvalid => "FieldValueInvalid",
        K::NotSupported => "FieldValueNotSupported",
        K::Duplicate => "FieldValueDuplicate",
        K::Forbidden => "FieldValueForbidden",
        K::TooLong => "FieldValueTooLong",
        K::TooMany => "FieldValueTooMany",
        K::Internal => "InternalError",
    }
}

/// The paths of a CRD version's `scale` subresource.
pub struct ScalePaths {
    spec_replicas: String,
    status_replicas: String,
    label_selector: Option<String>,
}

/// `.spec.replicas` as the keys `["spec", "replicas"]`.
fn keys(path: &str) -> Vec<&str> {
    path.trim_start_matches('.').split('.').collect()
}

fn at<'a>(obj: &'a Value, path: &str) -> &'a Value {
    keys(path).iter().fold(obj, |v, k| &v[*k])
}

/// Go's `%T` of a decoded JSON value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `%v` of a decoded JSON value (a string bare).
fn go_plain(v: &Value) -> String {
    v.as_str().map_or_else(|| go_value(v), str::to_string)
}

impl ScalePaths {
    /// The scale subresource of `version` (or the CRD's top-level one).
    pub fn of(res: &ResourceInfo, version: &str) -> Option<Self> {
        let spec = &res.crd.as_ref()?.definition["spec"];
        let per_version = spec["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == version)
            .map(|v| &v["subresources"]["scale"])
            .filter(|s| s.is_object());
        let scale = per_version.unwrap_or(&spec["subresources"]["scale"]);
        Some(ScalePaths {
            spec_replicas: scale["specReplicasPath"].as_str()?.to_string(),
            status_replicas: scale["statusReplicasPath"].as_str()?.to_string(),
            label_selector: scale["labelSelectorPath"].as_str().map(str::to_string),
        })
    }

    /// `unstructured.NestedInt64` checked as the validator does.
    fn replicas(path: &str, obj: &Value) -> Option<FieldError> {
        let v = at(obj, path);
        let (value, detail) = match v {
            Value::Null => return None,
            Value::Number(n) if n.is_i64() => {
                let n = n.as_i64().unwrap_or_default();
                if n < 0 {
                    (n, "should be a non-negative integer".to_string())
                } else if n > i64::from(i32::MAX) {
                    (n, format!("should be less than or equal to {}", i32::MAX))
                } else {
                    return None;
                }
            }
            other => (
                0,
                format!(
                    "{path} accessor error: {} is of the type {}, expected int64",
                    go_plain(other),
                    go_type(other)
                ),
            ),
        };
        Some(invalid_printed(path, &value.to_string(), &detail))
    }

    /// `ValidateScaleSpec`.
    fn check_spec(&self, obj: &Value) -> Vec<FieldError> {
        Self::replicas(&self.spec_replicas, obj)
            .into_iter()
            .collect()
    }

    /// `ValidateScaleStatus`: the status replicas, and the label selector
    /// a string.
    fn check_status(&self, obj: &Value) -> Vec<FieldError> {
        let mut errors: Vec<FieldError> = Self::replicas(&self.status_replicas, obj)
            .into_iter()
            .collect();
        if let Some(path) = &self.label_selector {
            let v = at(obj, path);
            if !v.is_null() && !v.is_string() {
                errors.push(invalid_printed(
                    path,
                    "\"\"",
                    &format!(
                        "{path} accessor error: {} is of the type {}, expected string",
                        go_plain(v),
                        go_type(v)
                    ),
                ));
            }
        }
        errors
    }

    /// The `autoscaling/v1` Scale of a custom resource.
    pub fn scale(&self, obj: &Value) -> Value {
        let selector = self
            .label_selector
            .as_deref()
            .and_then(|p| at(obj, p).as_str())
            .unwrap_or_default();
        json!({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"], "uid": obj["metadata"]["uid"],
                         "resourceVersion": obj["metadata"]["resourceVersion"], "creationTimestamp": obj["metadata"]["creationTimestamp"]},
            "spec": {"replicas": at(obj, &self.spec_replicas).as_i64().unwrap_or(0)},
            "status": {"replicas": at(obj, &self.status_replicas).as_i64().unwrap_or(0), "selector": selector},
        })
    }

    /// Writes `replicas` at the spec replicas path, creating the objects
    /// on the way.
    pub fn set_replicas(&self, obj: &mut Value, replicas: i64) {
        let mut node = obj;
        for key in keys(&self.spec_replicas) {
            if !node.is_object() {
                *node = json!({});
            }
            node = &mut node[key];
        }
        *node = json!(replicas);
    }
}

/// The version of `obj` to read its scale paths from.
pub fn scale_paths_of(res: &ResourceInfo, obj: &Value) -> Option<ScalePaths> {
    ScalePaths::of(res, &stored_version(res, obj))
}

/// What is wrong with a CRD itself, as apiextensions validates it (its
/// `spec.names` defaulted first): its name is `plural.group`, then the
/// group, names, versions and schemas.
pub fn definition_errors(name: &str, crd: &mut Value) -> Vec<FieldError> {
    crd_validation::default_names(crd);
    let mut errors = Vec::new();
    let expected = format!(
        "{}.{}",
        crd["spec"]["names"]["plural"].as_str().unwrap_or_default(),
        crd["spec"]["group"].as_str().unwrap_or_default()
    );
    if name != expected {
        errors.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    errors.extend(
        crd_validation::validate_definition(crd)
            .iter()
            .map(|v| FieldError {
                field: v.path.clone(),
                reason: reason(v.kind),
                body: v.body(),
            }),
    );
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_paths_are_read_and_written() {
        let paths = ScalePaths {
            spec_replicas: ".spec.size".into(),
            status_replicas: ".status.count".into(),
            label_selector: Some(".status.selector".into()),
        };
        let mut obj = json!({"metadata": {"name": "w"}, "status": {"count": 2, "selector": "a=b"}});
        paths.set_replicas(&mut obj, 4);
        let scale = paths.scale(&obj);
        assert_eq!(scale["spec"]["replicas"], 4);
        assert_eq!(scale["status"], json!({"replicas": 2, "selector": "a=b"}));
        obj["spec"]["size"] = json!(-1);
        assert_eq!(
            paths.check_spec(&obj)[0].text(),
            ".spec.size: Invalid value: -1: should be a non-negative integer"
        );
        obj["spec"]["size"] = json!("x");
        assert_eq!(
            paths.check_spec(&obj)[0].text(),
            ".spec.size: Invalid value: 0: .spec.size accessor error: x is of the type string, expected int64"
        );
    }
}
