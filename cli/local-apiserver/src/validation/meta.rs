//! `ObjectMeta`, as apimachinery's `ValidateObjectMetaAccessor` and
//! `ValidateObjectMetaAccessorUpdate` check it for every kind.

use std::collections::BTreeSet;

use crd_validation::go_quote;
use karpenter_core::names::{NameRule, label_value, qualified_name};
use serde_json::Value;

use super::FieldError;
use crate::json::{list, strings, text};

/// The most bytes all annotations of an object may take, keys included.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

const ORPHAN: &str = "orphan";
const FOREGROUND_DELETION: &str = "foregroundDeletion";

/// The name rule of a built-in kind (its strategy's `ValidateNameFunc`).
pub fn name_rule(group: &str, plural: &str) -> NameRule {
    match (group, plural) {
        ("", "namespaces") => NameRule::Dns1123Label,
        ("", "services") => NameRule::Dns1035Label,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        // Core v1 events get the legacy event rules only (no ObjectMeta
        // name rule); events.k8s.io/v1 ones are DNS subdomains.
        ("", "events") => NameRule::PathSegment,
        _ => NameRule::Dns1123Subdomain,
    }
}

/// The metadata of a built-in object on create (the name generated from a
/// `generateName` already): every rule but the namespace's, which the URL
/// gave and the store checked.
pub fn object_meta(obj: &Value, rule: NameRule) -> Vec<FieldError> {
    let meta = &obj["metadata"];
    let mut errors = names(meta, rule);
    errors.extend(labels(obj));
    errors.extend(annotations(meta));
    errors.extend(owner_references(meta));
    errors.extend(finalizers(meta));
    errors
}

/// What `crd-validation` leaves out of a custom resource's metadata (it
/// checks names, annotations and finalizer names itself); labels stay here
/// so their errors read the same for every kind.
pub fn custom_resource_meta(obj: &Value) -> Vec<FieldError> {
    let meta = &obj["metadata"];
    let mut errors = labels(obj);
    errors.extend(owner_references(meta));
    errors.extend(conflicting_finalizers(meta));
    errors
}

fn names(meta: &Value, rule: NameRule) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let generate_name = text(meta, "generateName");
    if !generate_name.is_empty() {
        for detail in rule.check(generate_name, true) {
            errors.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                &detail,
            ));
        }
    }
    let name = text(meta, "name");
    if name.is_empty() {
        errors.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for detail in rule.check(name, false) {
            errors.push(FieldError::invalid("metadata.name", name, &detail));
        }
    }
    errors
}

/// `metadata.labels`: keys are qualified names, values label values.
pub fn labels(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(labels) = object["metadata"]["labels"].as_object() else {
        return errors;
    };
    for (key, value) in labels {
        for detail in qualified_name(key) {
            errors.push(FieldError::invalid(
                "metadata.labels",
                key.as_str(),
                &detail,
            ));
        }
        let value = value.as_str().unwrap_or_default();
        for detail in label_value(value) {
            errors.push(FieldError::invalid("metadata.labels", value, &detail));
        }
    }
    errors
}

/// `metadata.annotations`: keys are qualified names whatever their case,
/// and all of them take at most 256 KiB.
fn annotations(meta: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(annotations) = meta["annotations"].as_object() else {
        return errors;
    };
    let mut total = 0usize;
    for (key, value) in annotations {
        total = total.saturating_add(key.len() + value.as_str().map_or(0, str::len));
        for detail in qualified_name(&key.to_lowercase()) {
            errors.push(FieldError::invalid(
                "metadata.annotations",
                key.as_str(),
                &detail,
            ));
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errors.push(FieldError::too_long(
            "metadata.annotations",
            TOTAL_ANNOTATION_SIZE_LIMIT,
        ));
    }
    errors
}

/// `metadata.ownerReferences`: each names its owner fully, an Event owns
/// nothing, and at most one is the controller.
fn owner_references(meta: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let refs = list(&meta["ownerReferences"]);
    let mut controller: Option<String> = None;
    for (i, reference) in refs.iter().enumerate() {
        errors.extend(owner_reference(
            reference,
            &format!("metadata.ownerReferences[{i}]"),
        ));
        if reference["controller"].as_bool() != Some(true) {
            continue;
        }
        let this = format!("{}/{}", text(reference, "kind"), text(reference, "name"));
        match &controller {
            Some(first) => errors.push(FieldError::invalid(
                "metadata.ownerReferences",
                Value::Array(refs.to_vec()),
                &format!(
                    "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"
                ),
            )),
            None => controller = Some(this),
        }
    }
    errors
}

fn owner_reference(reference: &Value, at: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let api_version = text(reference, "apiVersion");
    // `schema.ParseGroupVersion`: `<version>` or `<group>/<version>`.
    let group_version = match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [version] => Some(("", *version)),
        [group, version] if !version.is_empty() => Some((*group, *version)),
        _ => None,
    };
    if api_version.is_empty() {
        errors.push(FieldError::required(format!("{at}.apiVersion"), ""));
    } else if group_version.is_none() {
        errors.push(FieldError::invalid(
            format!("{at}.apiVersion"),
            api_version,
            "must be <group>/<version> or <version>",
        ));
    }
    for field in ["kind", "name", "uid"] {
        if text(reference, field).is_empty() {
            errors.push(FieldError::required(format!("{at}.{field}"), ""));
        }
    }
    let kind = text(reference, "kind");
    if group_version == Some(("", "v1")) && kind == "Event" {
        errors.push(FieldError::invalid(
            at,
            reference.clone(),
            &format!("/v1, Kind={kind} is disallowed from being an owner"),
        ));
    }
    errors
}

fn finalizer_names(meta: &Value) -> Vec<&str> {
    strings(&meta["finalizers"]).collect()
}

/// `metadata.finalizers`: qualified names, not both orphan and
/// foregroundDeletion.
fn finalizers(meta: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for finalizer in finalizer_names(meta) {
        for detail in qualified_name(finalizer) {
            errors.push(FieldError::invalid(
                "metadata.finalizers",
                finalizer,
                &detail,
            ));
        }
    }
    errors.extend(conflicting_finalizers(meta));
    errors
}

fn conflicting_finalizers(meta: &Value) -> Option<FieldError> {
    let names = finalizer_names(meta);
    (names.contains(&ORPHAN) && names.contains(&FOREGROUND_DELETION)).then(|| {
        FieldError::invalid(
            "metadata.finalizers",
            meta["finalizers"].clone(),
            &format!("finalizer {ORPHAN} and {FOREGROUND_DELETION} cannot be both set"),
        )
    })
}

/// Two timestamps the same instant (`Semantic.DeepEqual` of `metav1.Time`).
fn same_time(a: &Value, b: &Value) -> bool {
    let instant = |v: &Value| {
        v.as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    };
    match (instant(a), instant(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

/// What an update may not do to the metadata (the store has already put
/// back what `rest.BeforeUpdate` restores: name, namespace, creation
/// time, a uid left out, a deletion already under way).
pub fn object_meta_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let (meta, before) = (&new["metadata"], &old["metadata"]);
    let mut errors = Vec::new();
    if before.get("deletionTimestamp").is_some() {
        let had: BTreeSet<&str> = finalizer_names(before).into_iter().collect();
        let added: BTreeSet<&str> = finalizer_names(meta)
            .into_iter()
            .filter(|f| !had.contains(f))
            .collect();
        if !added.is_empty() {
            // Go's %#v of the sorted list.
            let quoted: Vec<String> = added.iter().map(|f| go_quote(f)).collect();
            errors.push(FieldError::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    quoted.join(", ")
                ),
            ));
        }
    }
    if meta["uid"] != before["uid"] {
        errors.push(immutable("metadata.uid", &meta["uid"]));
    }
    if !same_time(&meta["deletionTimestamp"], &before["deletionTimestamp"]) {
        errors.push(immutable(
            "metadata.deletionTimestamp",
            &meta["deletionTimestamp"],
        ));
    }
    let grace = "deletionGracePeriodSeconds";
    if meta[grace].as_i64() != before[grace].as_i64() {
        errors.push(immutable(
            "metadata.deletionGracePeriodSeconds",
            &meta[grace],
        ));
    }
    errors
}

fn immutable(field: &str, value: &Value) -> FieldError {
    FieldError::invalid(field, value.clone(), "field is immutable")
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

    fn meta_errors(meta: Value) -> Vec<String> {
        object_meta(&json!({"metadata": meta}), NameRule::Dns1123Subdomain)
            .iter()
            .map(FieldError::text)
            .collect()
    }

    fn update_errors(new: &Value, old: &Value) -> Vec<String> {
        object_meta_update(new, old)
            .iter()
            .map(FieldError::text)
            .collect()
    }

    #[test]
    fn names_and_generated_names_follow_the_kind_s_rule() {
        assert!(meta_errors(json!({"name": "a.b-c", "generateName": "a-"})).is_empty());
        let errors = meta_errors(json!({"name": "Bad_x1234", "generateName": "Bad_"}));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with(
            "metadata.generateName: Invalid value: \"Bad_\": a lowercase RFC 1123 subdomain"
        ));
        assert_eq!(
            meta_errors(json!({})),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert_eq!(name_rule("", "namespaces"), NameRule::Dns1123Label);
        assert_eq!(
            name_rule("rbac.authorization.k8s.io", "clusterroles"),
            NameRule::PathSegment
        );
    }

    #[test]
    fn annotations_owner_references_and_finalizers() {
        let big = "b".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        assert_eq!(
            meta_errors(json!({"name": "c", "annotations": {"a": big}})),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
        assert!(
            meta_errors(json!({"name": "c", "annotations": {"Example.COM/Upper": "x"}})).is_empty()
        );
        assert!(meta_errors(json!({"name": "c", "annotations": {"a b": "x"}})).len() == 1);
        let errors = meta_errors(json!({"name": "c", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"},
            {"apiVersion": "a/b/c", "kind": "Pod"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "2", "controller": true},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "s", "uid": "3", "controller": true},
        ]}));
        assert!(errors[0].starts_with("metadata.ownerReferences[0]: Invalid value: {"));
        assert!(errors[0].ends_with(": /v1, Kind=Event is disallowed from being an owner"));
        assert_eq!(
            errors[1..4],
            [
                "metadata.ownerReferences[1].apiVersion: Invalid value: \"a/b/c\": must be <group>/<version> or <version>",
                "metadata.ownerReferences[1].name: Required value",
                "metadata.ownerReferences[1].uid: Required value",
            ]
        );
        assert!(errors[4].ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/r and ReplicaSet/s"
        ));
        assert_eq!(
            meta_errors(json!({"name": "c", "finalizers": ["orphan", "foregroundDeletion"]})),
            vec![
                "metadata.finalizers: Invalid value: [\"orphan\",\"foregroundDeletion\"]: finalizer orphan and foregroundDeletion cannot be both set"
            ]
        );
    }

    #[test]
    fn an_update_may_not_add_finalizers_to_a_deleted_object_nor_move_its_deletion() {
        let old = json!({"metadata": {"uid": "u", "finalizers": ["x/a"],
            "deletionTimestamp": "2020-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0}});
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!(["x/a", "z/c", "y/b"]);
        new["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00+00:00");
        assert_eq!(
            update_errors(&new, &old),
            vec![
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"y/b\", \"z/c\"}"
            ]
        );
        let alive = json!({"metadata": {"uid": "u"}});
        let mut new = alive.clone();
        new["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
        new["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        new["metadata"]["uid"] = json!("v");
        assert_eq!(
            update_errors(&new, &alive),
            vec![
                "metadata.uid: Invalid value: \"v\": field is immutable",
                "metadata.deletionTimestamp: Invalid value: \"2020-01-01T00:00:00Z\": field is immutable",
                "metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable",
            ]
        );
    }
}
