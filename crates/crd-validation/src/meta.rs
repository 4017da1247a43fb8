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
            out.push(meta_violation(
                path.to_string(),
                ViolationKind::Invalid,
                BadValue::Json(other.clone()),
                "must be an object".to_string(),
            ));
            return;
        }
    };
    let string_field = |key: &str, out: &mut Vec<Violation>| -> Option<String> {
        match meta.get(key) {
            None | Some(Json::Null) => None,
            Some(Json::String(s)) => Some(s.clone()),
            Some(other) => {
                out.push(meta_violation(
                    format!("{path}.{key}"),
                    ViolationKind::Invalid,
                    BadValue::Json(other.clone()),
                    "must be a string".to_string(),
                ));
                None
            }
        }
    };

    let generate_name = string_field("generateName", out).unwrap_or_default();
    if !generate_name.is_empty() {
        for msg in name_rule.check(&generate_name, true) {
            out.push(meta_violation(
                format!("{path}.generateName"),
                ViolationKind::Invalid,
                BadValue::string(&generate_name),
                msg,
            ));
        }
    }
    let name = string_field("name", out).unwrap_or_default();
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
        for msg in name_rule.check(&name, false) {
            out.push(meta_violation(
                format!("{path}.name"),
                ViolationKind::Invalid,
                BadValue::string(&name),
                msg,
            ));
        }
    }

    let namespace = string_field("namespace", out).unwrap_or_default();
    if namespaced {
        if namespace.is_empty() {
            out.push(meta_violation(
                format!("{path}.namespace"),
                ViolationKind::Required,
                BadValue::Omitted,
                String::new(),
            ));
        } else {
            for msg in dns1123_label(&namespace) {
                out.push(meta_violation(
                    format!("{path}.namespace"),
                    ViolationKind::Invalid,
                    BadValue::string(&namespace),
                    msg,
                ));
            }
        }
    } else if !namespace.is_empty() {
        out.push(meta_violation(
            format!("{path}.namespace"),
            ViolationKind::Forbidden,
            BadValue::Omitted,
            "not allowed on this type".to_string(),
        ));
    }

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

    validate_string_map(
        meta.get("labels"),
        &format!("{path}.labels"),
        out,
        |k, v, p, out| {
            for msg in qualified_name(k) {
                out.push(meta_violation(
                    p.to_string(),
                    ViolationKind::Invalid,
                    BadValue::string(k),
                    msg,
                ));
            }
            for msg in label_value(v) {
                out.push(meta_violation(
                    p.to_string(),
                    ViolationKind::Invalid,
                    BadValue::string(v),
                    msg,
                ));
            }
        },
    );

    let mut total = 0usize;
    validate_string_map(
        meta.get("annotations"),
        &format!("{path}.annotations"),
        out,
        |k, v, p, out| {
            total += k.len() + v.len();
            for msg in qualified_name(&k.to_lowercase()) {
                out.push(meta_violation(
                    p.to_string(),
                    ViolationKind::Invalid,
                    BadValue::string(k),
                    msg,
                ));
            }
        },
    );
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push(meta_violation(
            format!("{path}.annotations"),
            ViolationKind::TooLong,
            BadValue::Omitted,
            format!("may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }

    if let Some(finalizers) = meta.get("finalizers") {
        let fpath = format!("{path}.finalizers");
        match finalizers {
            Json::Array(items) => {
                for f in items {
                    let Some(f) = f.as_str() else {
                        out.push(meta_violation(
                            fpath.clone(),
                            ViolationKind::Invalid,
                            BadValue::Json(f.clone()),
                            "must be a string".to_string(),
                        ));
                        continue;
                    };
                    let errs = qualified_name(f);
                    let had_errors = !errs.is_empty();
                    for msg in errs {
                        out.push(meta_violation(
                            fpath.clone(),
                            ViolationKind::Invalid,
                            BadValue::string(f),
                            msg,
                        ));
                    }
                    let standard = matches!(f, "kubernetes" | "orphan" | "foregroundDeletion");
                    if !had_errors && !standard && !f.contains('/') {
                        out.push(meta_violation(
                            fpath.clone(),
                            ViolationKind::Invalid,
                            BadValue::string(f),
                            "name is neither a standard finalizer name nor is it fully qualified"
                                .to_string(),
                        ));
                    }
                }
            }
            Json::Null => {}
            other => out.push(meta_violation(
                fpath,
                ViolationKind::Invalid,
                BadValue::Json(other.clone()),
                "must be a list of strings".to_string(),
            )),
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
                    other => out.push(meta_violation(
                        format!("{path}[{k}]"),
                        ViolationKind::Invalid,
                        BadValue::Json(other.clone()),
                        "must be a string".to_string(),
                    )),
                }
            }
        }
        Some(other) => out.push(meta_violation(
            path.to_string(),
            ViolationKind::Invalid,
            BadValue::Json(other.clone()),
            "must be a map of strings".to_string(),
        )),
    }
}

/// The fields of `ObjectMeta`; anything else in `metadata` is unknown.
pub(crate) const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Checks an `x-kubernetes-embedded-resource` object: `apiVersion` and
/// `kind` are required, `metadata` is an `ObjectMeta`.
pub(crate) fn validate_embedded(obj: &Map<String, Json>, path: &str, out: &mut Vec<Violation>) {
    let push = |out: &mut Vec<Violation>, p: String, kind, value, detail: &str| {
        out.push(Violation::new(
            p,
            kind,
            value,
            detail,
            Source::EmbeddedResource,
        ));
    };
    let child = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    for key in ["apiVersion", "kind"] {
        if !obj.contains_key(key) {
            push(
                out,
                child(key),
                ViolationKind::Required,
                BadValue::Omitted,
                "must not be empty",
            );
        }
    }
    for (k, v) in obj {
        match k.as_str() {
            "apiVersion" => match v.as_str() {
                None => push(
                    out,
                    child(k),
                    ViolationKind::Invalid,
                    BadValue::Json(v.clone()),
                    "must be a string",
                ),
                Some("") => push(
                    out,
                    child(k),
                    ViolationKind::Invalid,
                    BadValue::string(""),
                    "must not be empty",
                ),
                Some(av) => {
                    if av.matches('/').count() > 1 {
                        push(
                            out,
                            child(k),
                            ViolationKind::Invalid,
                            BadValue::string(av),
                            &format!("unexpected GroupVersion string: {av}"),
                        );
                    }
                }
            },
            "kind" => match v.as_str() {
                None => push(
                    out,
                    child(k),
                    ViolationKind::Invalid,
                    BadValue::Json(v.clone()),
                    "must be a string",
                ),
                Some("") => push(
                    out,
                    child(k),
                    ViolationKind::Invalid,
                    BadValue::string(""),
                    "must not be empty",
                ),
                Some(kind) => {
                    let errs = dns1035_label(&kind.to_lowercase());
                    if !errs.is_empty() {
                        push(
                            out,
                            child(k),
                            ViolationKind::Invalid,
                            BadValue::string(kind),
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                errs.join(",")
                            ),
                        );
                    }
                }
            },
            "metadata" => {
                let namespaced = v
                    .get("namespace")
                    .and_then(Json::as_str)
                    .is_some_and(|n| !n.is_empty());
                let mut errs = Vec::new();
                validate_object_meta(
                    Some(v),
                    &child("metadata"),
                    namespaced,
                    NameRule::PathSegment,
                    &mut errs,
                );
                for mut e in errs {
                    e.source = Source::EmbeddedResource;
                    out.push(e);
                }
            }
            _ => {}
        }
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
