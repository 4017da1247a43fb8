//! OpenAPI schema generation for the CRDs: patterns, CEL rules, and the transform that turns
//! schemars output into a Kubernetes *structural* schema.
//!
//! The types derive [`schemars::JsonSchema`]; Kubernetes-specific keywords are attached with
//! `#[schemars(extend(...))]` (patterns, defaults, list types) and `#[schemars(transform = ...)]`
//! (CEL rules, via [`add_rules`]). [`structural_schema_for`] then runs schemars with
//! inlined sub-schemas and applies [`normalize`], which:
//!
//! * drops `nullable`, `title`, `const: null` and other keywords that `Option<T>` and doc comments
//!   produce but Karpenter's CRDs do not have (an omitted optional field is simply absent);
//! * folds `anyOf: [T, null]` into `T` and `type: [T, "null"]` into `T`;
//! * folds documented unit enums (`oneOf` of single-value `enum`s) into one `enum`.
//!
//! [`check_structural`] verifies the result (every node typed, no `$ref`/`oneOf`/`allOf`, `anyOf`
//! only inside `x-kubernetes-int-or-string`), and is run by the tests for every CRD.

use std::collections::BTreeMap;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value, json};

use crate::labels;

/// Regular expressions used in the CRDs. They are Go RE2 syntax, copied in meaning from Karpenter.
pub mod patterns {
    // The pieces several patterns share, written once. They are macros
    // because `concat!` joins only literals, and the patterns must stay
    // `&str` constants.
    /// A resource quantity, unanchored.
    macro_rules! quantity {
        () => {
            r"(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?"
        };
    }
    /// A non-empty label value (the name part of a qualified name), unanchored.
    macro_rules! label_value {
        () => {
            r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
        };
    }
    /// A DNS subdomain (the prefix of a qualified name), unanchored.
    macro_rules! dns_subdomain {
        () => {
            r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
        };
    }
    /// A Go duration made of s/m/h parts, unanchored.
    macro_rules! go_duration {
        () => {
            r"([0-9]+(s|m|h))+"
        };
    }

    /// A Kubernetes resource quantity (`100m`, `1.5Gi`, `2`).
    pub const QUANTITY: &str = concat!("^", quantity!(), "$");
    /// A kubelet eviction threshold: a percentage or a quantity.
    pub const EVICTION_THRESHOLD: &str = concat!(
        r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||",
        quantity!(),
        ")$"
    );
    /// A qualified label key (`prefix/name`), also used for taint keys and values.
    pub const QUALIFIED_NAME: &str =
        concat!("^(", dns_subdomain!(), r"(\/))?", label_value!(), "$");
    /// A label value (may be empty).
    pub const LABEL_VALUE: &str = concat!("^(", label_value!(), ")?$");
    /// A Go duration made of s/m/h parts, or `Never`.
    pub const DURATION_OR_NEVER: &str = concat!("^(", go_duration!(), "|Never)$");
    /// A Go duration made of s/m/h parts.
    pub const DURATION: &str = concat!("^", go_duration!(), "$");
    /// Budget `nodes`: a percentage up to 100% or an absolute count.
    pub const BUDGET_NODES: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
    /// Budget `schedule`: a cron macro or five cron fields.
    pub const BUDGET_SCHEDULE: &str = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";
    /// Budget `duration`: hours and/or minutes, with the `0s` that Go's formatter appends.
    pub const BUDGET_DURATION: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";
    /// An API group (no slash).
    pub const API_GROUP: &str = r"^[^/]*$";
    /// A condition reason (CamelCase, may be empty).
    pub const CONDITION_REASON: &str = r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$";
    /// A condition type (`Ready`, `example.com/Foo`).
    pub const CONDITION_TYPE: &str = concat!("^(", dns_subdomain!(), "/)?(", label_value!(), ")$");
    /// An EC2 subnet ID.
    pub const SUBNET_ID: &str = "subnet-[0-9a-z]+";
    /// An EC2 security-group ID.
    pub const SECURITY_GROUP_ID: &str = "sg-[0-9a-z]+";
    /// An EC2 AMI ID.
    pub const AMI_ID: &str = "ami-[0-9a-z]+";
    /// An EC2 capacity-reservation ID.
    pub const CAPACITY_RESERVATION_ID: &str = "^cr-[0-9a-z]+$";
    /// A 12-digit AWS account ID.
    pub const AWS_ACCOUNT_ID: &str = "^[0-9]{12}$";
    /// An EBS volume size in Gi, G, Ti or T within EBS limits.
    pub const VOLUME_SIZE: &str = r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$";
}

/// One `x-kubernetes-validations` entry.
pub fn rule(rule: &str, message: &str) -> Value {
    json!({ "message": message, "rule": rule })
}

/// Appends CEL rules to a schema's `x-kubernetes-validations`.
pub fn add_rules(schema: &mut Schema, rules: impl IntoIterator<Item = Value>) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let entry = obj
        .entry("x-kubernetes-validations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = entry {
        list.extend(rules);
    }
}

/// Runs `f` on a nested sub-schema reached through `path` (property names; `"[]"` steps into
/// array items). Missing steps are ignored, which the CRD tests would catch.
pub fn with_subschema(schema: &mut Schema, path: &[&str], f: impl FnOnce(&mut Map<String, Value>)) {
    let mut node = match schema.as_object_mut() {
        Some(obj) => obj,
        None => return,
    };
    for step in path {
        let next = if *step == "[]" {
            node.get_mut("items")
        } else {
            node.get_mut("properties").and_then(|p| p.get_mut(*step))
        };
        node = match next.and_then(Value::as_object_mut) {
            Some(obj) => obj,
            None => return,
        };
    }
    f(node);
}

// --- Reusable schemas for `#[schemars(schema_with = ...)]` --------------------------------------

/// The item schema of a resource list: an integer or a quantity string.
fn quantity_item() -> Value {
    json!({
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "pattern": patterns::QUANTITY,
        "x-kubernetes-int-or-string": true,
    })
}

/// `map[ResourceName]Quantity`, int-or-string values with the quantity pattern.
pub fn resource_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "additionalProperties": quantity_item() })
}

/// A single int-or-string quantity.
pub fn quantity(_: &mut SchemaGenerator) -> Schema {
    let Value::Object(map) = quantity_item() else {
        return Schema::default();
    };
    Schema::from(map)
}

/// `map[string]string`.
pub fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "additionalProperties": { "type": "string" } })
}

/// An RFC 3339 timestamp (`metav1.Time`).
pub fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

// --- Label-domain CEL rules shared by NodePool and NodeClaim -----------------------------------

/// The CEL expression for "the domain part of `x`".
fn domain_of(x: &str) -> String {
    format!("{x}.find(\"^([^/]+)\")")
}

fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Which label-domain rules to emit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LabelRuleTarget {
    /// Keys of `spec.template.metadata.labels` (rule applies to every key `x` of the map).
    TemplateLabels,
    /// A requirement key in a NodePool (the string itself, `self`).
    NodePoolRequirementKey,
    /// A requirement key in a NodeClaim (the NodePool label is allowed there).
    NodeClaimRequirementKey,
    /// A requirement key in a NodeOverlay (Karpenter's core CRD: the
    /// karpenter.sh domain and the hostname only; selecting by NodePool is
    /// the point of the NodePool label there).
    NodeOverlayRequirementKey,
}

/// The label-domain rules from Karpenter (karpenter.sh, hostname, karpenter.sh/nodepool and, for
/// the AWS provider, karpenter.k8s.aws). Since Karpenter v1.9 (sigs PR #2586) the kubernetes.io
/// and k8s.io domains carry no rule.
pub(crate) fn label_domain_rules(target: LabelRuleTarget) -> Vec<Value> {
    let is_map = target == LabelRuleTarget::TemplateLabels;
    let v = if is_map { "x" } else { "self" };
    let d = domain_of(v);
    let wrap = |expr: String| {
        if is_map {
            format!("self.all(x, {expr})")
        } else {
            expr
        }
    };
    let mut rules = vec![rule(
        &wrap(format!(
            "{v} in {} || !{d}.endsWith(\"karpenter.sh\")",
            quoted_list(&[labels::CAPACITY_TYPE, labels::NODE_POOL])
        )),
        "label domain \"karpenter.sh\" is restricted",
    )];
    let overlay = target == LabelRuleTarget::NodeOverlayRequirementKey;
    if target != LabelRuleTarget::NodeClaimRequirementKey && !overlay {
        rules.push(rule(
            &wrap(format!("{v} != \"{}\"", labels::NODE_POOL)),
            "label \"karpenter.sh/nodepool\" is restricted",
        ));
    }
    rules.push(rule(
        &wrap(format!("{v} != \"{}\"", labels::HOSTNAME)),
        "label \"kubernetes.io/hostname\" is restricted",
    ));
    if overlay {
        return rules;
    }
    rules.push(rule(
        &wrap(format!(
            "{v} in {} || !{d}.endsWith(\"karpenter.k8s.aws\")",
            quoted_list(crate::aws::labels::AWS_WELL_KNOWN_LABELS)
        )),
        "label domain \"karpenter.k8s.aws\" is restricted",
    ));
    rules
}

// --- Generation and normalization ----------------------------------------------------------------

/// Generates the schema of `T` with sub-schemas inlined and normalizes it (see the module docs).
pub fn structural_schema_for<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    normalize(&mut value);
    value
}

fn is_null_branch(v: &Value) -> bool {
    let Some(obj) = v.as_object() else {
        return false;
    };
    obj.get("type") == Some(&json!("null"))
        || obj.get("enum") == Some(&json!([null]))
        || (obj.contains_key("const") && obj.get("const") == Some(&Value::Null))
}

/// Merges `from` into `into`: keys missing in `into` are copied, CEL rules and `required` lists
/// are concatenated.
fn merge_into(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (key, value) in from {
        match (key.as_str(), into.get_mut(&key)) {
            ("x-kubernetes-validations" | "required", Some(Value::Array(existing))) => {
                if let Value::Array(extra) = value {
                    let mut merged = extra;
                    for item in existing.drain(..) {
                        if !merged.contains(&item) {
                            merged.push(item);
                        }
                    }
                    *existing = merged;
                }
            }
            (_, Some(_)) => {}
            (_, None) => {
                into.insert(key, value);
            }
        }
    }
}

/// Rewrites schemars output into the shape Kubernetes expects (see the module docs).
pub fn normalize(value: &mut Value) {
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    for key in ["title", "nullable", "$schema", "examples", "deprecated"] {
        obj.remove(key);
    }
    if obj.get("const") == Some(&Value::Null) {
        obj.remove("const");
    } else if let Some(constant) = obj.remove("const") {
        obj.insert("enum".into(), Value::Array(vec![constant]));
    }
    if let Some(Value::Array(types)) = obj.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let single = types.remove(0);
            obj.insert("type".into(), single);
        }
    }
    if let Some(Value::Array(any_of)) = obj.get("anyOf") {
        let non_null: Vec<Value> = any_of
            .iter()
            .filter(|b| !is_null_branch(b))
            .cloned()
            .collect();
        if non_null.len() == 1 && any_of.len() == 2 {
            obj.remove("anyOf");
            if let Some(Value::Object(branch)) = non_null.into_iter().next() {
                merge_into(obj, branch);
            }
            // The merged branch may itself need normalizing.
            normalize(value);
            return;
        }
    }
    if let Some(Value::Array(one_of)) = obj.get("oneOf") {
        let mut values = Vec::new();
        let all_string_enums = one_of.iter().all(|branch| {
            let Some(b) = branch.as_object() else {
                return false;
            };
            let single = b
                .get("enum")
                .and_then(Value::as_array)
                .filter(|e| e.len() == 1)
                .and_then(|e| e.first().cloned())
                .or_else(|| b.get("const").cloned());
            match single {
                Some(v @ Value::String(_)) => {
                    values.push(v);
                    true
                }
                _ => false,
            }
        });
        if all_string_enums && !values.is_empty() {
            obj.remove("oneOf");
            obj.insert("type".into(), json!("string"));
            obj.insert("enum".into(), Value::Array(values));
        }
    }
    if let Some(Value::Array(required)) = obj.get_mut("required") {
        required.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        required.dedup();
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for prop in props.values_mut() {
            normalize(prop);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub @ Value::Object(_)) = obj.get_mut(key) {
            normalize(sub);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = obj.get_mut(key) {
            for branch in branches {
                normalize(branch);
            }
        }
    }
}

/// Checks the Kubernetes structural-schema rules that schemars output can break.
///
/// # Errors
/// Returns every violation, each with its JSON path.
pub fn check_structural(value: &Value) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    check_node(value, "$", &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn check_node(value: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(obj) = value.as_object() else {
        problems.push(format!("{path}: schema is not an object"));
        return;
    };
    for forbidden in [
        "$ref",
        "oneOf",
        "allOf",
        "not",
        "nullable",
        "definitions",
        "$defs",
        "const",
    ] {
        if obj.contains_key(forbidden) {
            problems.push(format!("{path}: has `{forbidden}`"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    match obj.get("type") {
        Some(Value::String(_)) => {}
        Some(other) => problems.push(format!(
            "{path}: type must be a single string, found {other}"
        )),
        None if int_or_string || preserve => {}
        None => problems.push(format!("{path}: missing type")),
    }
    if obj.contains_key("anyOf") && !int_or_string {
        problems.push(format!("{path}: anyOf outside x-kubernetes-int-or-string"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, prop) in props {
            check_node(prop, &format!("{path}.{name}"), problems);
        }
    }
    match obj.get("items") {
        Some(items @ Value::Object(_)) => check_node(items, &format!("{path}[]"), problems),
        Some(_) => problems.push(format!("{path}: items must be a single schema")),
        None if obj.get("type") == Some(&json!("array")) => {
            problems.push(format!("{path}: array without items"))
        }
        None => {}
    }
    match obj.get("additionalProperties") {
        Some(extra @ Value::Object(_)) => check_node(extra, &format!("{path}.*"), problems),
        Some(other) => problems.push(format!(
            "{path}: additionalProperties must be a schema, found {other}"
        )),
        None => {}
    }
}

/// Every `(json path, rule, message)` in a schema, in document order.
pub fn collect_rules(value: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    collect(value, "", &mut out);
    out
}

fn collect(value: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    let Some(obj) = value.as_object() else {
        return;
    };
    if let Some(Value::Array(rules)) = obj.get("x-kubernetes-validations") {
        for r in rules {
            let text = |k: &str| {
                r.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            out.push((path.to_string(), text("rule"), text("message")));
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        let sorted: BTreeMap<&String, &Value> = props.iter().collect();
        for (name, prop) in sorted {
            collect(prop, &format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = obj.get("items") {
        collect(items, &format!("{path}[]"), out);
    }
    if let Some(extra) = obj.get("additionalProperties") {
        collect(extra, &format!("{path}.*"), out);
    }
}

/// Every `pattern` in a schema with its JSON path.
pub fn collect_patterns(value: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    collect_pattern(value, "", &mut out);
    out
}

fn collect_pattern(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    let Some(obj) = value.as_object() else {
        return;
    };
    if let Some(Value::String(p)) = obj.get("pattern") {
        out.push((path.to_string(), p.clone()));
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, prop) in props {
            collect_pattern(prop, &format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = obj.get("items") {
        collect_pattern(items, &format!("{path}[]"), out);
    }
    if let Some(extra) = obj.get("additionalProperties") {
        collect_pattern(extra, &format!("{path}.*"), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_wrappers_fold_away() {
        let mut v = json!({
            "description": "d",
            "anyOf": [{ "type": "object", "properties": { "a": { "type": ["string", "null"], "nullable": true } } },
                      { "enum": [null], "nullable": true }],
            "x-kubernetes-validations": [{ "rule": "r1", "message": "m1" }],
        });
        normalize(&mut v);
        assert_eq!(
            v,
            json!({
                "description": "d",
                "x-kubernetes-validations": [{ "rule": "r1", "message": "m1" }],
                "type": "object",
                "properties": { "a": { "type": "string" } },
            })
        );
    }

    #[test]
    fn documented_enums_fold_into_enum() {
        let mut v = json!({ "oneOf": [
            { "type": "string", "const": "A", "description": "a" },
            { "type": "string", "enum": ["B"], "description": "b" },
        ]});
        normalize(&mut v);
        assert_eq!(v, json!({ "type": "string", "enum": ["A", "B"] }));
    }

    #[test]
    fn structural_check_reports_paths() {
        let bad = json!({ "type": "object", "properties": { "a": { "oneOf": [] } } });
        let problems = check_structural(&bad).err().unwrap_or_default();
        assert!(
            problems.iter().any(|p| p.starts_with("$.a: has `oneOf`")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("$.a: missing type")),
            "{problems:?}"
        );
    }
}
