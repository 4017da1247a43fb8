//! Just enough OpenAPI v3 for `kubectl`: per group-version documents whose
//! PATCH operations carry `x-kubernetes-group-version-kind` and the
//! `fieldValidation` parameter (so kubectl asks the server to validate), and,
//! for custom resources, the CRD's schema (what `kubectl explain` prints).
//! Built-in kinds have paths but no schemas: kubectl then computes strategic
//! merge patches from its compiled-in types, exactly as it does against a
//! real server whose OpenAPI it cannot use.

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
        if let Some(crd) = &r.crd {
            let schema = crd.definition["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["name"] == version)
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
