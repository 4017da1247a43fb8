//! `ObjectMeta` checks the apiserver makes on every custom resource (and on
//! the `metadata` of embedded resources), with apimachinery's messages.

use serde_json::{Map, Value as Json};

use crate::error::{BadValue, Source, Violation, ViolationKind};

pub use karpenter_core::names::{
    NameRule, dns1035_label, dns1123_label, dns1123_subdomain, label_value, path_segment_name,
    qualified_name,
};

/// The most bytes all annotations of an object may take.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn meta_violation(path: String, kind: ViolationKind, value: BadValue, detail: String) -> Violation {
    Violation::new(path, kind, value, detail, Source::Metadata)
}

/// A field whose value is not of the type metadata needs there (`detail`: "must be ...").
fn wrong_type(path: impl Into<String>, value: &Json, detail: &str) -> Violation {
    meta_violation(
        path.into(),
        ViolationKind::Invalid,
        BadValue::Json(value.clone()),
        detail.to_string(),
    )
}

/// `ValidateObjectMetaAccessor`: name, generateName, namespace, generation,
/// labels, annotations and finalizers. `namespaced` is the CRD's scope, or
/// for embedded resources whether a namespace is set.
pub(crate) fn validate_object_meta(
    meta: Option<&Json>,
    path: &str,
    namespaced: bool,
    name_rule: NameRule,
    out: &mut Vec<Violation>,
) {
    let empty = Map::new();
    let meta = match meta {
        None | Some(Json::Null) => &empty,
        Some(Json::Object(m)) => m,
        Some(other) => {
            out.push(wrong_type(path, other, "must be an object"));
            return;
        }
    };
    validate_names(meta, path, name_rule, out);
    validate_namespace(meta, path, namespaced, out);
    if let Some(g) = meta.get("generation").and_then(Json::as_i64)
        && g < 0
    {
        out.push(meta_violation(
            format!("{path}.generation"),
            ViolationKind::Invalid,
            BadValue::int(g),
            "must be greater than or equal to 0".to_string(),
        ));
    }
    validate_labels(meta.get("labels"), &format!("{path}.labels"), out);
    validate_annotations(meta.get("annotations"), &format!("{path}.annotations"), out);
    if let Some(finalizers) = meta.get("finalizers") {
        validate_finalizers(finalizers, &format!("{path}.finalizers"), out);
    }
}

/// `meta[key]` if it is a string; any other non-null value is reported.
fn string_field(
    meta: &Map<String, Json>,
    path: &str,
    key: &str,
    out: &mut Vec<Violation>,
) -> Option<String> {
    match meta.get(key) {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(s.clone()),
        Some(other) => {
            out.push(wrong_type(
                format!("{path}.{key}"),
                other,
                "must be a string",
            ));
            None
        }
    }
}

/// One `Invalid` violation of the string `value` at `path` per message.
fn push_invalid(out: &mut Vec<Violation>, path: &str, value: &str, messages: Vec<String>) {
    for msg in messages {
        out.push(meta_violation(
            path.to_string(),
            ViolationKind::Invalid,
            BadValue::string(value),
            msg,
        ));
    }
}

/// `name` and `generateName`: one of them is required, and each must follow
/// the resource's naming rule (a prefix may end in a dash).
fn validate_names(
    meta: &Map<String, Json>,
    path: &str,
    name_rule: NameRule,
    out: &mut Vec<Violation>,
) {
    let generate_name = string_field(meta, path, "generateName", out).unwrap_or_default();
    if !generate_name.is_empty() {
        let errs = name_rule.check(&generate_name, true);
        push_invalid(out, &format!("{path}.generateName"), &generate_name, errs);
    }
    let name = string_field(meta, path, "name", out).unwrap_or_default();
    if name.is_empty() {
        if generate_name.is_empty() {
            out.push(meta_violation(
                format!("{path}.name"),
                ViolationKind::Required,
                BadValue::Omitted,
                "name or generateName is required".to_string(),
            ));
        }
    } else {
        let errs = name_rule.check(&name, false);
        push_invalid(out, &format!("{path}.name"), &name, errs);
    }
}

/// `namespace`: required (a DNS label) on namespaced types, forbidden on
/// cluster-scoped ones.
fn validate_namespace(
    meta: &Map<String, Json>,
    path: &str,
    namespaced: bool,
    out: &mut Vec<Violation>,
) {
    let namespace = string_field(meta, path, "namespace", out).unwrap_or_default();
    let npath = format!("{path}.namespace");
    if namespaced {
        if namespace.is_empty() {
            out.push(meta_violation(
                npath,
                ViolationKind::Required,
                BadValue::Omitted,
                String::new(),
            ));
        } else {
            push_invalid(out, &npath, &namespace, dns1123_label(&namespace));
        }
    } else if !namespace.is_empty() {
        out.push(meta_violation(
            npath,
            ViolationKind::Forbidden,
            BadValue::Omitted,
            "not allowed on this type".to_string(),
        ));
    }
}

/// `labels`: qualified-name keys and label values.
fn validate_labels(labels: Option<&Json>, path: &str, out: &mut Vec<Violation>) {
    validate_string_map(labels, path, out, |k, v, p, out| {
        push_invalid(out, p, k, qualified_name(k));
        push_invalid(out, p, v, label_value(v));
    });
}

/// `annotations`: keys are qualified names (in any case), and all of them
/// together may take at most `TOTAL_ANNOTATION_SIZE_LIMIT` bytes.
fn validate_annotations(annotations: Option<&Json>, path: &str, out: &mut Vec<Violation>) {
    let mut total = 0usize;
    validate_string_map(annotations, path, out, |k, v, p, out| {
        total += k.len() + v.len();
        push_invalid(out, p, k, qualified_name(&k.to_lowercase()));
    });
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push(meta_violation(
            path.to_string(),
            ViolationKind::TooLong,
            BadValue::Omitted,
            format!("may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
}

/// `finalizers`: a list of qualified names, each either one of the standard
/// finalizers or with a domain prefix.
fn validate_finalizers(finalizers: &Json, fpath: &str, out: &mut Vec<Violation>) {
    let items = match finalizers {
        Json::Array(items) => items,
        Json::Null => return,
        other => {
            out.push(wrong_type(fpath, other, "must be a list of strings"));
            return;
        }
    };
    for f in items {
        let Some(f) = f.as_str() else {
            out.push(wrong_type(fpath, f, "must be a string"));
            continue;
        };
        let errs = qualified_name(f);
        let had_errors = !errs.is_empty();
        push_invalid(out, fpath, f, errs);
        let standard = matches!(f, "kubernetes" | "orphan" | "foregroundDeletion");
        if !had_errors && !standard && !f.contains('/') {
            out.push(meta_violation(
                fpath.to_string(),
                ViolationKind::Invalid,
                BadValue::string(f),
                "name is neither a standard finalizer name nor is it fully qualified".to_string(),
            ));
        }
    }
}

fn validate_string_map(
    v: Option<&Json>,
    path: &str,
    out: &mut Vec<Violation>,
    mut each: impl FnMut(&str, &str, &str, &mut Vec<Violation>),
) {
    match v {
        None | Some(Json::Null) => {}
        Some(Json::Object(m)) => {
            for (k, val) in m {
                match val {
                    Json::String(s) => each(k, s, path, out),
                    other => out.push(wrong_type(
                        format!("{path}[{k}]"),
                        other,
                        "must be a string",
                    )),
                }
            }
        }
        Some(other) => out.push(wrong_type(path, other, "must be a map of strings")),
    }
}

/// Checks an `x-kubernetes-embedded-resource` object: `apiVersion` and
/// `kind` are required, `metadata` is an `ObjectMeta`.
pub(crate) fn validate_embedded(obj: &Map<String, Json>, path: &str, out: &mut Vec<Violation>) {
    let child = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    for key in ["apiVersion", "kind"] {
        if !obj.contains_key(key) {
            out.push(embedded_violation(
                child(key),
                ViolationKind::Required,
                BadValue::Omitted,
                "must not be empty",
            ));
        }
    }
    for (k, v) in obj {
        match k.as_str() {
            "apiVersion" | "kind" => validate_type_field(k, v, child(k), out),
            "metadata" => validate_embedded_meta(v, &child("metadata"), out),
            _ => {}
        }
    }
}

fn embedded_violation(
    path: String,
    kind: ViolationKind,
    value: BadValue,
    detail: impl Into<String>,
) -> Violation {
    Violation::new(path, kind, value, detail, Source::EmbeddedResource)
}

/// An embedded resource's `apiVersion` or `kind`: a non-empty string that
/// is a group/version (at most one `/`) or, in any case, a DNS-1035 label.
fn validate_type_field(key: &str, v: &Json, path: String, out: &mut Vec<Violation>) {
    let s = match v.as_str() {
        None => {
            let bad = BadValue::Json(v.clone());
            out.push(embedded_violation(
                path,
                ViolationKind::Invalid,
                bad,
                "must be a string",
            ));
            return;
        }
        Some("") => {
            let bad = BadValue::string("");
            out.push(embedded_violation(
                path,
                ViolationKind::Invalid,
                bad,
                "must not be empty",
            ));
            return;
        }
        Some(s) => s,
    };
    let problem = if key == "apiVersion" {
        (s.matches('/').count() > 1).then(|| format!("unexpected GroupVersion string: {s}"))
    } else {
        let errs = dns1035_label(&s.to_lowercase());
        (!errs.is_empty()).then(|| {
            format!(
                "may have mixed case, but should otherwise match: {}",
                errs.join(",")
            )
        })
    };
    if let Some(detail) = problem {
        let bad = BadValue::string(s);
        out.push(embedded_violation(
            path,
            ViolationKind::Invalid,
            bad,
            detail,
        ));
    }
}

/// An embedded resource's `metadata`: an `ObjectMeta` (namespaced when it
/// names a namespace), its violations attributed to the embedded resource.
fn validate_embedded_meta(v: &Json, path: &str, out: &mut Vec<Violation>) {
    let namespaced = v
        .get("namespace")
        .and_then(Json::as_str)
        .is_some_and(|n| !n.is_empty());
    let mut errs = Vec::new();
    validate_object_meta(Some(v), path, namespaced, NameRule::PathSegment, &mut errs);
    for mut e in errs {
        e.source = Source::EmbeddedResource;
        out.push(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain_messages_match_apimachinery() {
        assert!(dns1123_subdomain("default").is_empty());
        assert_eq!(
            dns1123_subdomain("Default"),
            vec!["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string()]
        );
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name("karpenter.sh/nodepool").is_empty());
        assert_eq!(
            qualified_name("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert!(!label_value("-bad").is_empty());
        assert!(label_value("").is_empty());
    }
}
