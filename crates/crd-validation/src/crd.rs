//! Reading a `CustomResourceDefinition` and compiling its versions.

use serde_json::Value as Json;

use crate::cel::{RuleSite, compile_rule};
use crate::error::CompileError;
use crate::schema::{self, ListType, Schema};

/// Whether objects live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `scope: Namespaced`.
    Namespaced,
    /// `scope: Cluster`.
    Cluster,
}

/// `spec.names`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Names {
    /// `NodePool`.
    pub kind: String,
    /// `nodepools`.
    pub plural: String,
    /// `nodepool`.
    pub singular: String,
    /// `NodePoolList`.
    pub list_kind: String,
    /// Short names (`ec2nc`).
    pub short_names: Vec<String>,
    /// Categories (`karpenter`).
    pub categories: Vec<String>,
}

/// One entry of `spec.versions`.
#[derive(Debug)]
pub struct Version {
    /// `v1`.
    pub name: String,
    /// Whether the API serves it.
    pub served: bool,
    /// Whether it is the storage version.
    pub storage: bool,
    /// Whether it has the `status` subresource (writes to the main resource
    /// then ignore `status`).
    pub status_subresource: bool,
    /// The `scale` subresource's `specReplicasPath`, if any.
    pub scale_spec_replicas_path: Option<String>,
    /// Whether the version is deprecated, and its warning.
    pub deprecation_warning: Option<String>,
    pub(crate) schema: Option<Schema>,
}

impl Version {
    /// How many `x-kubernetes-validations` rules this version's schema
    /// has, all compiled.
    pub fn rule_count(&self) -> usize {
        fn count(s: &Schema) -> usize {
            s.rules.len()
                + s.all_of.iter().map(|a| a.rules.len()).sum::<usize>()
                + s.properties.iter().map(|(_, p)| count(p)).sum::<usize>()
                + s.additional_schema().map_or(0, count)
                + s.items.as_deref().map_or(0, count)
        }
        self.schema.as_ref().map_or(0, count)
    }

    /// Whether this version has an `openAPIV3Schema`.
    pub fn has_schema(&self) -> bool {
        self.schema.is_some()
    }
}

/// A parsed CRD.
#[derive(Debug)]
pub(crate) struct Crd {
    pub name: String,
    pub group: String,
    pub names: Names,
    pub scope: Scope,
    pub versions: Vec<Version>,
}

fn malformed(path: &str, message: &str) -> CompileError {
    CompileError::Malformed {
        path: path.to_string(),
        message: message.to_string(),
    }
}

fn str_at<'a>(v: &'a Json, path: &str, field: &str) -> Result<&'a str, CompileError> {
    v.get(field)
        .and_then(Json::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| malformed(&format!("{path}.{field}"), "Required value"))
}

fn strings(v: Option<&Json>) -> Vec<String> {
    v.and_then(Json::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn parse(doc: &Json) -> Result<Crd, CompileError> {
    match doc.get("kind").and_then(Json::as_str) {
        Some("CustomResourceDefinition") => {}
        other => {
            return Err(malformed(
                "kind",
                &format!("must be CustomResourceDefinition, got {other:?}"),
            ));
        }
    }
    let name = doc
        .pointer("/metadata/name")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string();
    let spec = doc
        .get("spec")
        .ok_or_else(|| malformed("spec", "Required value"))?;
    let group = str_at(spec, "spec", "group")?.to_string();
    let names_v = spec
        .get("names")
        .ok_or_else(|| malformed("spec.names", "Required value"))?;
    let names = Names {
        kind: str_at(names_v, "spec.names", "kind")?.to_string(),
        plural: str_at(names_v, "spec.names", "plural")?.to_string(),
        singular: names_v
            .get("singular")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
        list_kind: names_v
            .get("listKind")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
        short_names: strings(names_v.get("shortNames")),
        categories: strings(names_v.get("categories")),
    };
    let scope = match spec.get("scope").and_then(Json::as_str) {
        Some("Namespaced") => Scope::Namespaced,
        Some("Cluster") => Scope::Cluster,
        _ => {
            return Err(malformed(
                "spec.scope",
                "Unsupported value: supported values: \"Cluster\", \"Namespaced\"",
            ));
        }
    };
    // apiextensions.k8s.io/v1beta1 had one schema for all versions.
    let shared_schema = spec.pointer("/validation/openAPIV3Schema");
    let shared_subresources = spec.get("subresources");
    let versions_v = spec
        .get("versions")
        .and_then(Json::as_array)
        .ok_or_else(|| malformed("spec.versions", "Required value"))?;
    let mut versions = Vec::with_capacity(versions_v.len());
    for (i, v) in versions_v.iter().enumerate() {
        let vpath = format!("spec.versions[{i}]");
        let vname = str_at(v, &vpath, "name")?.to_string();
        let (schema_v, schema_path) = match v.pointer("/schema/openAPIV3Schema") {
            Some(s) => (Some(s), format!("{vpath}.schema.openAPIV3Schema")),
            None => (shared_schema, "spec.validation.openAPIV3Schema".to_string()),
        };
        let schema = match schema_v {
            Some(s) => {
                let mut parsed = schema::parse(s, &schema_path)?;
                compile_rules(&mut parsed, &schema_path, true, None)?;
                Some(parsed)
            }
            None => None,
        };
        let subresources = v.get("subresources").or(shared_subresources);
        versions.push(Version {
            name: vname,
            served: v.get("served").and_then(Json::as_bool).unwrap_or(false),
            storage: v.get("storage").and_then(Json::as_bool).unwrap_or(false),
            status_subresource: subresources.is_some_and(|s| s.get("status").is_some()),
            scale_spec_replicas_path: subresources
                .and_then(|s| s.pointer("/scale/specReplicasPath"))
                .and_then(Json::as_str)
                .map(str::to_string),
            deprecation_warning: if v.get("deprecated").and_then(Json::as_bool) == Some(true) {
                Some(
                    v.get("deprecationWarning")
                        .and_then(Json::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| {
                            format!(
                                "{group}/{} {} is deprecated",
                                v["name"].as_str().unwrap_or_default(),
                                names.kind
                            )
                        }),
                )
            } else {
                None
            },
            schema,
        });
    }
    Ok(Crd {
        name,
        group,
        names,
        scope,
        versions,
    })
}

/// Compiles the rules of `node` and below, and marks which nodes have rules.
fn compile_rules(
    node: &mut Schema,
    path: &str,
    resource_root: bool,
    uncorrelatable: Option<&str>,
) -> Result<(), CompileError> {
    let is_root = resource_root || node.embedded;
    let site = RuleSite {
        schema: node,
        resource_root: is_root,
        uncorrelatable,
    };
    let rules = node
        .rule_specs
        .iter()
        .map(|spec| compile_rule(spec, &site))
        .collect::<Result<Vec<_>, _>>()?;
    let all_of_rules = node
        .all_of
        .iter()
        .map(|sub| {
            sub.rule_specs
                .iter()
                .map(|spec| compile_rule(spec, &site))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut has_rules = !rules.is_empty() || all_of_rules.iter().any(|r| !r.is_empty());
    node.rules = rules;
    for (sub, r) in node.all_of.iter_mut().zip(all_of_rules) {
        sub.rules = r;
    }

    let child_uncorrelatable = if node.map_type_atomic {
        Some(path.to_string())
    } else {
        uncorrelatable.map(str::to_string)
    };
    for (name, p) in node.properties.iter_mut() {
        let ppath = format!("{path}.properties[{name}]");
        compile_rules(p, &ppath, false, child_uncorrelatable.as_deref())?;
        has_rules |= p.has_rules;
    }
    if let schema::Additional::Schema(ap) = &mut node.additional {
        let apath = format!("{path}.additionalProperties");
        compile_rules(ap, &apath, false, child_uncorrelatable.as_deref())?;
        has_rules |= ap.has_rules;
    }
    let list_type = node.list_type;
    if let Some(items) = node.items.as_deref_mut() {
        let ipath = format!("{path}.items");
        let items_uncorrelatable = if list_type == Some(ListType::Map) {
            uncorrelatable.map(str::to_string)
        } else {
            Some(ipath.clone())
        };
        compile_rules(items, &ipath, false, items_uncorrelatable.as_deref())?;
        has_rules |= items.has_rules;
    }
    node.has_rules = has_rules;
    Ok(())
}
