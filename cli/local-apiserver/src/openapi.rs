//! Just enough OpenAPI v3 for `kubectl`: per group-version documents whose
//! PATCH operations carry `x-kubernetes-group-version-kind` and the
//! `fieldValidation` parameter (so kubectl asks the server to validate), and,
//! for custom resources, the CRD's schema (what `kubectl explain` prints).
//! Built-in kinds get their schemas from k8s-openapi (so `kubectl explain
//! pods` works); their PATCH operations declare no request body, so kubectl
//! computes strategic merge patches from its compiled-in types, as it does
//! against a server whose OpenAPI lacks patch metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::resources::ResourceInfo;

/// `api/v1`, `apis/karpenter.sh/v1`: every served group-version.
pub fn group_versions(resources: &[Arc<ResourceInfo>]) -> BTreeMap<String, Vec<Arc<ResourceInfo>>> {
    let mut out: BTreeMap<String, Vec<Arc<ResourceInfo>>> = BTreeMap::new();
    for r in resources {
        for v in &r.versions {
            let key = if r.group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{}/{v}", r.group)
            };
            out.entry(key).or_default().push(r.clone());
        }
    }
    out
}

/// `/openapi/v3`: the index.
pub fn index(resources: &[Arc<ResourceInfo>], rv: u64) -> Value {
    let paths: serde_json::Map<String, Value> = group_versions(resources)
        .into_keys()
        .map(|gv| {
            let url = format!("/openapi/v3/{gv}?hash={rv:016X}");
            (gv, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

fn reverse_domain(group: &str) -> String {
    let mut parts: Vec<&str> = group.split('.').collect();
    parts.reverse();
    parts.join(".")
}

fn object_meta() -> Value {
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Name must be unique within a namespace."},
            "namespace": {"type": "string", "description": "Namespace defines the space within which each name must be unique."},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": "Map of string keys and values that can be used to organize and categorize (scope and select) objects."},
            "annotations": {"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": "Annotations is an unstructured key value map stored with a resource."},
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Must be empty before the object is deleted from the registry."},
            "generateName": {"type": "string", "description": "GenerateName is an optional prefix, used by the server, to generate a unique name."},
            "uid": {"type": "string", "description": "UID is the unique in time and space value for this object."},
            "resourceVersion": {"type": "string", "description": "An opaque value that represents the internal version of this object."},
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description": "CreationTimestamp is a timestamp representing the server time when this object was created."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description": "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."},
            "ownerReferences": {"type": "array", "items": {"type": "object"}, "description": "List of objects depended by this object."}
        }
    })
}

/// The document of one group-version.
pub fn document(gv: &str, resources: &[Arc<ResourceInfo>]) -> Value {
    let version = gv.rsplit('/').next().unwrap_or_default();
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
        object_meta(),
    );
    for r in resources {
        let gvk = json!([{"group": r.group, "version": version, "kind": r.kind}]);
        let field_validation = json!({"name": "fieldValidation", "in": "query", "description": "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields.", "schema": {"type": "string", "uniqueItems": true}});
        let op = |action: &str| {
            json!({
                "x-kubernetes-group-version-kind": gvk[0],
                "x-kubernetes-action": action,
                "parameters": [field_validation],
                "responses": {"200": {"description": "OK"}},
            })
        };
        let base = if r.namespaced {
            format!("/{gv}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("/{gv}/{}", r.plural)
        };
        paths.insert(
            base.clone(),
            json!({"get": op("list"), "post": op("post"), "parameters": [field_validation]}),
        );
        paths.insert(format!("{base}/{{name}}"), json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete"), "parameters": [field_validation]}));
        if r.crd.is_none() {
            let defs = builtin_definitions();
            let name = defs.iter().find_map(|(name, def)| {
                let gvk = &def["x-kubernetes-group-version-kind"][0];
                (gvk["group"] == r.group.as_str() && gvk["kind"] == r.kind.as_str())
                    .then(|| name.clone())
            });
            if let Some(name) = name {
                reachable(&name, defs, &mut schemas);
            }
        }
        if let Some(crd) = &r.crd {
            let schema = crd
                .version(version)
                .map(|v| v["schema"]["openAPIV3Schema"].clone())
                .unwrap_or_else(|| json!({"type": "object"}));
            let mut schema = if schema.is_object() {
                schema
            } else {
                json!({"type": "object"})
            };
            schema["x-kubernetes-group-version-kind"] = gvk.clone();
            if !schema["properties"].is_object() {
                schema["properties"] = json!({});
            }
            schema["properties"]["metadata"] = json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"});
            for (f, d) in [
                (
                    "apiVersion",
                    "APIVersion defines the versioned schema of this representation of an object.",
                ),
                (
                    "kind",
                    "Kind is a string value representing the REST resource this object represents.",
                ),
            ] {
                if schema["properties"][f].is_null() {
                    schema["properties"][f] = json!({"type": "string", "description": d});
                }
            }
            schemas.insert(
                format!("{}.{version}.{}", reverse_domain(&r.group), r.kind),
                schema,
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// OpenAPI v3 schemas of the built-in kinds, from k8s-openapi's types
/// (`io.k8s.api.core.v1.Pod`, ...), each kind tagged with its
/// `x-kubernetes-group-version-kind`. Built once.
fn builtin_definitions() -> &'static serde_json::Map<String, Value> {
    static DEFS: std::sync::OnceLock<serde_json::Map<String, Value>> = std::sync::OnceLock::new();
    DEFS.get_or_init(|| {
        use k8s_openapi::api;
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
        let mut generator =
            schemars::SchemaGenerator::new(schemars::generate::SchemaSettings::openapi3());
        let mut kinds: Vec<(String, &str, &str, &str)> = Vec::new();
        macro_rules! kind {
            ($t:ty, $g:expr, $k:expr) => {{
                let _ = generator.subschema_for::<$t>();
                kinds.push((
                    <$t as schemars::JsonSchema>::schema_name().into_owned(),
                    $g,
                    "v1",
                    $k,
                ));
            }};
        }
        kind!(api::core::v1::Namespace, "", "Namespace");
        kind!(api::core::v1::Pod, "", "Pod");
        kind!(api::core::v1::Node, "", "Node");
        kind!(api::core::v1::Event, "", "Event");
        kind!(api::core::v1::ConfigMap, "", "ConfigMap");
        kind!(api::core::v1::Secret, "", "Secret");
        kind!(api::core::v1::ServiceAccount, "", "ServiceAccount");
        kind!(api::core::v1::PersistentVolume, "", "PersistentVolume");
        kind!(
            api::core::v1::PersistentVolumeClaim,
            "",
            "PersistentVolumeClaim"
        );
        kind!(api::core::v1::PodTemplate, "", "PodTemplate");
        kind!(api::core::v1::Service, "", "Service");
        kind!(
            api::core::v1::ReplicationController,
            "",
            "ReplicationController"
        );
        kind!(api::apps::v1::Deployment, "apps", "Deployment");
        kind!(api::apps::v1::ReplicaSet, "apps", "ReplicaSet");
        kind!(api::apps::v1::StatefulSet, "apps", "StatefulSet");
        kind!(api::apps::v1::DaemonSet, "apps", "DaemonSet");
        kind!(api::batch::v1::Job, "batch", "Job");
        kind!(
            api::policy::v1::PodDisruptionBudget,
            "policy",
            "PodDisruptionBudget"
        );
        kind!(api::coordination::v1::Lease, "coordination.k8s.io", "Lease");
        kind!(api::events::v1::Event, "events.k8s.io", "Event");
        kind!(
            api::scheduling::v1::PriorityClass,
            "scheduling.k8s.io",
            "PriorityClass"
        );
        kind!(
            api::storage::v1::StorageClass,
            "storage.k8s.io",
            "StorageClass"
        );
        kind!(api::storage::v1::CSINode, "storage.k8s.io", "CSINode");
        kind!(
            apiext::CustomResourceDefinition,
            "apiextensions.k8s.io",
            "CustomResourceDefinition"
        );
        let mut defs = generator.take_definitions(true);
        for (name, group, version, kind) in kinds {
            if let Some(Value::Object(def)) = defs.get_mut(&name) {
                def.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": group, "version": version, "kind": kind}]),
                );
            }
        }
        defs
    })
}

/// The definition named `name` and every definition it references.
fn reachable(
    name: &str,
    defs: &serde_json::Map<String, Value>,
    out: &mut serde_json::Map<String, Value>,
) {
    if out.contains_key(name) {
        return;
    }
    let Some(def) = defs.get(name) else { return };
    out.insert(name.to_string(), def.clone());
    let mut refs = Vec::new();
    collect_refs(def, &mut refs);
    for r in refs {
        reachable(&r, defs, out);
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if k == "$ref" {
                    if let Some(name) = child
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    {
                        out.push(name.to_string());
                    }
                } else {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_refs(i, out)),
        _ => {}
    }
}
