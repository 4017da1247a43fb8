//! What kube-apiserver refuses in a `CustomResourceDefinition` itself
//! (apiextensions' `ValidateCustomResourceDefinition`), beyond what
//! compiling its schemas and rules catches: the group, the names, the
//! versions and the structural shape of the schemas.
//!
//! Paths follow the internal API the apiserver validates: a v1 CRD whose
//! versions all have the same schema is validated with that schema moved
//! to the top level (`spec.validation.openAPIV3Schema`), as the v1 to
//! internal conversion does.

use karpenter_core::names::{dns1035_label, dns1123_subdomain};
use serde_json::Value as Json;

use crate::error::{BadValue, Source, Violation, ViolationKind, go_quote};

fn violation(path: String, kind: ViolationKind, value: BadValue, detail: String) -> Violation {
    Violation::new(path, kind, value, detail, Source::Metadata)
}

fn invalid(path: &str, value: &str, detail: String) -> Violation {
    violation(
        path.to_string(),
        ViolationKind::Invalid,
        BadValue::string(value),
        detail,
    )
}

fn required(path: &str, detail: &str) -> Violation {
    violation(
        path.to_string(),
        ViolationKind::Required,
        BadValue::Omitted,
        detail.to_string(),
    )
}

fn str_of<'a>(v: &'a Json, key: &str) -> &'a str {
    v.get(key).and_then(Json::as_str).unwrap_or_default()
}

/// The violations of a CRD's `spec` (`spec.names` defaulted first, as the
/// apiserver defaults `singular` and `listKind` before validating).
pub fn validate_definition(crd: &Json) -> Vec<Violation> {
    let mut out = Vec::new();
    let spec = crd.get("spec").unwrap_or(&Json::Null);
    group(str_of(spec, "group"), &mut out);
    match str_of(spec, "scope") {
        "" => out.push(required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => out.push(violation(
            "spec.scope".into(),
            ViolationKind::NotSupported,
            BadValue::string(other),
            "supported values: \"Cluster\", \"Namespaced\"".into(),
        )),
    }
    versions(spec, &mut out);
    names(spec.get("names").unwrap_or(&Json::Null), &mut out);
    out
}

fn group(group: &str, out: &mut Vec<Violation>) {
    if group.is_empty() {
        out.push(required("spec.group", ""));
        return;
    }
    let errs = dns1123_subdomain(group);
    if !errs.is_empty() {
        out.push(invalid("spec.group", group, errs.join(",")));
    } else if !group.contains('.') {
        out.push(invalid(
            "spec.group",
            group,
            "should be a domain with at least one dot".into(),
        ));
    }
}

/// How the apiserver prints `spec.versions` as a bad value (a Go struct
/// dump; the fields past the flags are left out here).
fn versions_value(versions: &[Json]) -> String {
    let items: Vec<String> = versions
        .iter()
        .map(|v| {
            format!(
                "apiextensions.CustomResourceDefinitionVersion{{Name:{}, Served:{}, Storage:{}, ...}}",
                go_quote(str_of(v, "name")),
                v.get("served").and_then(Json::as_bool).unwrap_or(false),
                v.get("storage").and_then(Json::as_bool).unwrap_or(false),
            )
        })
        .collect();
    format!(
        "[]apiextensions.CustomResourceDefinitionVersion{{{}}}",
        items.join(", ")
    )
}

fn versions(spec: &Json, out: &mut Vec<Violation>) {
    let list = spec
        .get("versions")
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let whole = |detail: &str| {
        violation(
            "spec.versions".into(),
            ViolationKind::Invalid,
            BadValue::Omitted,
            format!("{}: {detail}", versions_value(list)),
        )
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, v) in list.iter().enumerate() {
        let name = str_of(v, "name");
        if seen.contains(&name) {
            unique = false;
        }
        seen.push(name);
        let errs = dns1035_label(name);
        if !errs.is_empty() {
            out.push(invalid(
                &format!("spec.versions[{i}].name"),
                name,
                errs.join(","),
            ));
        }
    }
    schemas(spec, list, out);
    if !unique {
        out.push(whole("must contain unique version names"));
    }
    let storage = list
        .iter()
        .filter(|v| v.get("storage").and_then(Json::as_bool) == Some(true))
        .count();
    if storage != 1 {
        out.push(whole(
            "must have exactly one version marked as storage version",
        ));
    }
}

/// Every version needs a schema (v1); the schemas must be structural.
fn schemas(spec: &Json, list: &[Json], out: &mut Vec<Violation>) {
    let of = |v: &Json| v.pointer("/schema/openAPIV3Schema").cloned();
    if let Some(top) = spec.pointer("/validation/openAPIV3Schema") {
        structural(top, "spec.validation.openAPIV3Schema", Level::Root, out);
        return;
    }
    let all: Vec<Option<Json>> = list.iter().map(of).collect();
    let identical = !all.is_empty() && all.iter().all(|s| s.is_some() && *s == all[0]);
    if identical && let Some(Some(schema)) = all.first() {
        structural(schema, "spec.validation.openAPIV3Schema", Level::Root, out);
        return;
    }
    for (i, schema) in all.iter().enumerate() {
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match schema {
            Some(s) => structural(s, &path, Level::Root, out),
            None => out.push(required(&path, "schemas are required")),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Field,
    Item,
}

/// `structuralschema.ValidateStructural`, its type rules: every node has a
/// `type` (unless it is int-or-string, an embedded resource or keeps
/// unknown fields), and an array has `items`.
fn structural(s: &Json, path: &str, level: Level, out: &mut Vec<Violation>) {
    let Some(obj) = s.as_object() else { return };
    let flag = |k: &str| obj.get(k).and_then(Json::as_bool) == Some(true);
    let ty = obj.get("type").and_then(Json::as_str).unwrap_or_default();
    let untyped_ok = flag("x-kubernetes-int-or-string")
        || flag("x-kubernetes-embedded-resource")
        || flag("x-kubernetes-preserve-unknown-fields");
    if ty.is_empty() && !untyped_ok {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Field => "must not be empty for specified object fields",
            Level::Item => "must not be empty for specified array items",
        };
        out.push(required(&format!("{path}.type"), detail));
    }
    if ty == "array" && obj.get("items").is_none() {
        out.push(required(&format!("{path}.items"), "must be specified"));
    }
    if let Some(props) = obj.get("properties").and_then(Json::as_object) {
        for (k, p) in props {
            structural(p, &format!("{path}.properties[{k}]"), Level::Field, out);
        }
    }
    if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
        structural(
            ap,
            &format!("{path}.additionalProperties"),
            Level::Field,
            out,
        );
    }
    if let Some(items) = obj.get("items").filter(|i| i.is_object()) {
        structural(items, &format!("{path}.items"), Level::Item, out);
    }
}

/// `ValidateCustomResourceDefinitionNames` and the names the spec requires.
fn names(names: &Json, out: &mut Vec<Violation>) {
    for (key, label) in [
        ("plural", "plural"),
        ("singular", "singular"),
        ("kind", "kind"),
        ("listKind", "listKind"),
    ] {
        if str_of(names, key).is_empty() {
            out.push(required(&format!("spec.names.{label}"), ""));
        }
    }
    for key in ["plural", "singular"] {
        let v = str_of(names, key);
        let errs = dns1035_label(v);
        if !v.is_empty() && !errs.is_empty() {
            out.push(invalid(&format!("spec.names.{key}"), v, errs.join(",")));
        }
    }
    for key in ["kind", "listKind"] {
        let v = str_of(names, key);
        let errs = dns1035_label(&v.to_lowercase());
        if !v.is_empty() && !errs.is_empty() {
            out.push(invalid(
                &format!("spec.names.{key}"),
                v,
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    errs.join(",")
                ),
            ));
        }
    }
    for key in ["shortNames", "categories"] {
        let list = names.get(key).and_then(Json::as_array);
        for (i, v) in list.into_iter().flatten().enumerate() {
            let v = v.as_str().unwrap_or_default();
            let errs = dns1035_label(v);
            if !errs.is_empty() {
                out.push(invalid(
                    &format!("spec.names.{key}[{i}]"),
                    v,
                    errs.join(","),
                ));
            }
        }
    }
    let kind = str_of(names, "kind");
    if !kind.is_empty() && kind == str_of(names, "listKind") {
        out.push(invalid(
            "spec.names.listKind",
            kind,
            "kind and listKind may not be the same".into(),
        ));
    }
}

/// Fills in `spec.names.singular` (the kind in lower case) and
/// `spec.names.listKind` (the kind + `List`) when absent, as the
/// apiextensions v1 defaults do.
pub fn default_names(crd: &mut Json) {
    let Some(names) = crd.pointer_mut("/spec/names").and_then(Json::as_object_mut) else {
        return;
    };
    let kind = names
        .get("kind")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string();
    if kind.is_empty() {
        return;
    }
    if names
        .get("singular")
        .and_then(Json::as_str)
        .is_none_or(str::is_empty)
    {
        names.insert("singular".into(), Json::String(kind.to_lowercase()));
    }
    if names
        .get("listKind")
        .and_then(Json::as_str)
        .is_none_or(str::is_empty)
    {
        names.insert("listKind".into(), Json::String(format!("{kind}List")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(spec: Json) -> Json {
        let mut c = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "kind": "Widget"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object"}}}]
            }
        });
        if let (Some(base), Some(extra)) = (c["spec"].as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        default_names(&mut c);
        c
    }

    fn texts(c: &Json) -> Vec<String> {
        validate_definition(c)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_plain_crd_is_valid_once_its_names_are_defaulted() {
        let c = crd(json!({}));
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert!(texts(&c).is_empty(), "{:?}", texts(&c));
    }

    #[test]
    fn groups_names_versions_and_schemas_are_checked() {
        assert_eq!(
            texts(&crd(json!({"group": "example"}))),
            ["spec.group: Invalid value: \"example\": should be a domain with at least one dot"]
        );
        let two = json!({"versions": [
            {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}
        ]});
        let t = texts(&crd(two));
        assert!(
            t[0].ends_with("must have exactly one version marked as storage version"),
            "{t:?}"
        );
        let untyped = json!({"versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"properties": {"spec": {"type": "object", "properties": {"a": {}}}}}}}]});
        assert_eq!(
            texts(&crd(untyped)),
            [
                "spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root",
                "spec.validation.openAPIV3Schema.properties[spec].properties[a].type: Required value: must not be empty for specified object fields"
            ]
        );
        let same = json!({"names": {"plural": "wid_gets", "kind": "Widget", "listKind": "Widget"}});
        let t = texts(&crd(same));
        assert!(
            t[0].starts_with("spec.names.plural: Invalid value: \"wid_gets\": a DNS-1035 label"),
            "{t:?}"
        );
        assert_eq!(
            t[1],
            "spec.names.listKind: Invalid value: \"Widget\": kind and listKind may not be the same"
        );
    }
}
