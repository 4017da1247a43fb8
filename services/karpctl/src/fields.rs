//! Typed reads from untyped manifests, each failing with the document and
//! the field path.

use std::collections::BTreeMap;

use karpenter_proto::scheduler::v1 as pb;
use serde_json::{Map, Value};

use crate::input::{Document, InputError};

/// Reads fields of one document, naming it in errors.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    pub doc: &'a Document,
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl<'a> Reader<'a> {
    pub fn new(doc: &'a Document) -> Self {
        Reader { doc }
    }

    pub fn err(&self, field: impl Into<String>, message: impl Into<String>) -> InputError {
        self.doc.error(field, message)
    }

    /// `v[key]`, treating `null` as absent.
    pub fn get<'v>(&self, v: &'v Value, key: &str) -> Option<&'v Value> {
        v.get(key).filter(|x| !x.is_null())
    }

    pub fn object<'v>(
        &self,
        v: Option<&'v Value>,
        path: &str,
    ) -> Result<Option<&'v Map<String, Value>>, InputError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(other) => Err(self.err(path, format!("must be an object, got {}", short(other)))),
        }
    }

    pub fn array<'v>(&self, v: Option<&'v Value>, path: &str) -> Result<&'v [Value], InputError> {
        match v {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(other) => Err(self.err(path, format!("must be a list, got {}", short(other)))),
        }
    }

    /// A string; numbers and booleans are accepted as their text (YAML
    /// users write `"5"` and `5` interchangeably).
    pub fn string(&self, v: Option<&Value>, path: &str) -> Result<Option<String>, InputError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(self.err(path, format!("must be a string, got {}", short(other)))),
        }
    }

    pub fn string_or_empty(&self, v: Option<&Value>, path: &str) -> Result<String, InputError> {
        Ok(self.string(v, path)?.unwrap_or_default())
    }

    pub fn strings(&self, v: Option<&Value>, path: &str) -> Result<Vec<String>, InputError> {
        let mut out = Vec::new();
        for (i, item) in self.array(v, path)?.iter().enumerate() {
            out.push(self.string_or_empty(Some(item), &format!("{path}[{i}]"))?);
        }
        Ok(out)
    }

    pub fn int(&self, v: Option<&Value>, path: &str) -> Result<Option<i64>, InputError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.err(path, format!("must be an integer, got {n}"))),
            Some(Value::String(s)) => s
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.err(path, format!("must be an integer, got {s:?}"))),
            Some(other) => Err(self.err(path, format!("must be an integer, got {}", short(other)))),
        }
    }

    pub fn int32(&self, v: Option<&Value>, path: &str) -> Result<Option<i32>, InputError> {
        match self.int(v, path)? {
            None => Ok(None),
            Some(i) => i32::try_from(i)
                .map(Some)
                .map_err(|_| self.err(path, format!("{i} is out of range"))),
        }
    }

    pub fn bool(&self, v: Option<&Value>, path: &str) -> Result<Option<bool>, InputError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
            Some(other) => Err(self.err(path, format!("must be a boolean, got {}", short(other)))),
        }
    }

    pub fn string_map(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<BTreeMap<String, String>, InputError> {
        let mut out = BTreeMap::new();
        if let Some(map) = self.object(v, path)? {
            for (k, value) in map {
                let value = self.string_or_empty(Some(value), &join(path, k))?;
                out.insert(k.clone(), value);
            }
        }
        Ok(out)
    }

    pub fn hash_map(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<BTreeMap<String, String>, InputError> {
        Ok(self.string_map(v, path)?.into_iter().collect())
    }

    /// A resource list (`{cpu: 1, memory: 2Gi}`) in wire units.
    pub fn resources(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<Option<pb::ResourceList>, InputError> {
        let Some(map) = self.object(v, path)? else {
            return Ok(None);
        };
        let mut quantities = BTreeMap::new();
        for (name, value) in map {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                other => other.to_string(),
            };
            let q = karpenter_core::quantity::parse_resource(name, &text).map_err(|e| {
                self.err(join(path, name), format!("invalid quantity {text:?}: {e}"))
            })?;
            quantities.insert(name.clone(), q);
        }
        Ok(Some(pb::ResourceList { quantities }))
    }

    pub fn name(&self) -> String {
        self.doc
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }

    pub fn require_name(&self) -> Result<String, InputError> {
        let name = self.name();
        if name.is_empty() {
            return Err(self.err("metadata.name", "is required"));
        }
        Ok(name)
    }

    pub fn namespace(&self) -> String {
        self.doc
            .value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_string()
    }

    pub fn timestamp(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<Option<prost_types::Timestamp>, InputError> {
        let Some(text) = self.string(v, path)? else {
            return Ok(None);
        };
        let parsed = chrono::DateTime::parse_from_rfc3339(&text)
            .map_err(|e| self.err(path, format!("invalid RFC 3339 time {text:?}: {e}")))?;
        Ok(Some(prost_types::Timestamp {
            seconds: parsed.timestamp(),
            nanos: i32::try_from(parsed.timestamp_subsec_nanos()).unwrap_or(0),
        }))
    }

    pub fn duration(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<Option<prost_types::Duration>, InputError> {
        let Some(text) = self.string(v, path)? else {
            return Ok(None);
        };
        let d = karpenter_core::duration::parse_go_duration(&text)
            .map_err(|e| self.err(path, format!("invalid duration {text:?}: {e}")))?;
        Ok(Some(std_duration(d)))
    }

    /// A duration that may be `Never` (returned as `None`); absent gives `default`.
    pub fn nillable_duration(
        &self,
        v: Option<&Value>,
        path: &str,
        default: Option<std::time::Duration>,
    ) -> Result<Option<prost_types::Duration>, InputError> {
        match self.string(v, path)? {
            None => Ok(default.map(std_duration)),
            Some(text) if text == "Never" => Ok(None),
            Some(_) => self.duration(v, path),
        }
    }
}

pub fn std_duration(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 40 {
        format!(
            "{}...",
            &text[..text
                .char_indices()
                .nth(37)
                .map(|(i, _)| i)
                .unwrap_or(text.len())]
        )
    } else {
        text
    }
}

pub fn taint_effect(effect: &str) -> Option<pb::TaintEffect> {
    match effect {
        "NoSchedule" => Some(pb::TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(pb::TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(pb::TaintEffect::NoExecute),
        _ => None,
    }
}

pub fn effect_name(effect: i32) -> &'static str {
    match pb::TaintEffect::try_from(effect) {
        Ok(pb::TaintEffect::NoSchedule) => "NoSchedule",
        Ok(pb::TaintEffect::PreferNoSchedule) => "PreferNoSchedule",
        Ok(pb::TaintEffect::NoExecute) => "NoExecute",
        _ => "",
    }
}

pub fn operator(op: &str) -> Option<pb::Operator> {
    match op {
        "In" => Some(pb::Operator::In),
        "NotIn" => Some(pb::Operator::NotIn),
        "Exists" => Some(pb::Operator::Exists),
        "DoesNotExist" => Some(pb::Operator::DoesNotExist),
        "Gt" => Some(pb::Operator::Gt),
        "Lt" => Some(pb::Operator::Lt),
        "Gte" => Some(pb::Operator::Gte),
        "Lte" => Some(pb::Operator::Lte),
        _ => None,
    }
}

pub fn operator_name(op: i32) -> &'static str {
    match pb::Operator::try_from(op) {
        Ok(pb::Operator::In) => "In",
        Ok(pb::Operator::NotIn) => "NotIn",
        Ok(pb::Operator::Exists) => "Exists",
        Ok(pb::Operator::DoesNotExist) => "DoesNotExist",
        Ok(pb::Operator::Gt) => "Gt",
        Ok(pb::Operator::Lt) => "Lt",
        Ok(pb::Operator::Gte) => "Gte",
        Ok(pb::Operator::Lte) => "Lte",
        _ => "",
    }
}

impl Reader<'_> {
    pub fn taints(&self, v: Option<&Value>, path: &str) -> Result<Vec<pb::Taint>, InputError> {
        let mut out = Vec::new();
        for (i, t) in self.array(v, path)?.iter().enumerate() {
            let path = format!("{path}[{i}]");
            let key = self.string_or_empty(self.get(t, "key"), &join(&path, "key"))?;
            if key.is_empty() {
                return Err(self.err(join(&path, "key"), "is required"));
            }
            let effect_text =
                self.string_or_empty(self.get(t, "effect"), &join(&path, "effect"))?;
            let effect = taint_effect(&effect_text).ok_or_else(|| {
                self.err(
                    join(&path, "effect"),
                    format!(
                        "must be NoSchedule, PreferNoSchedule or NoExecute, got {effect_text:?}"
                    ),
                )
            })?;
            out.push(pb::Taint {
                key,
                value: self.string_or_empty(self.get(t, "value"), &join(&path, "value"))?,
                effect: effect as i32,
            });
        }
        Ok(out)
    }

    /// Node-selector requirements (`key`, `operator`, `values`, and
    /// Karpenter's `minValues`).
    pub fn requirements(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<Vec<pb::Requirement>, InputError> {
        let mut out = Vec::new();
        for (i, r) in self.array(v, path)?.iter().enumerate() {
            out.push(self.requirement(r, &format!("{path}[{i}]"))?);
        }
        Ok(out)
    }

    pub fn requirement(&self, r: &Value, path: &str) -> Result<pb::Requirement, InputError> {
        let key = self.string_or_empty(self.get(r, "key"), &join(path, "key"))?;
        if key.is_empty() {
            return Err(self.err(join(path, "key"), "is required"));
        }
        let op_text = self.string_or_empty(self.get(r, "operator"), &join(path, "operator"))?;
        let op = operator(&op_text).ok_or_else(|| {
            self.err(
                join(path, "operator"),
                format!(
                    "must be In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte, got {op_text:?}"
                ),
            )
        })?;
        let values = self.strings(self.get(r, "values"), &join(path, "values"))?;
        let min_values = self.int32(self.get(r, "minValues"), &join(path, "minValues"))?;
        Ok(pb::Requirement {
            key,
            operator: op as i32,
            values,
            min_values,
        })
    }

    pub fn label_selector(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<Option<pb::LabelSelector>, InputError> {
        let Some(map) = self.object(v, path)? else {
            return Ok(None);
        };
        let value = Value::Object(map.clone());
        let match_labels =
            self.hash_map(self.get(&value, "matchLabels"), &join(path, "matchLabels"))?;
        let mut match_expressions = Vec::new();
        let exprs_path = join(path, "matchExpressions");
        for (i, e) in self
            .array(self.get(&value, "matchExpressions"), &exprs_path)?
            .iter()
            .enumerate()
        {
            let p = format!("{exprs_path}[{i}]");
            let operator = self.string_or_empty(self.get(e, "operator"), &join(&p, "operator"))?;
            if !matches!(
                operator.as_str(),
                "In" | "NotIn" | "Exists" | "DoesNotExist"
            ) {
                return Err(self.err(
                    join(&p, "operator"),
                    format!("must be In, NotIn, Exists or DoesNotExist, got {operator:?}"),
                ));
            }
            match_expressions.push(pb::LabelSelectorRequirement {
                key: self.string_or_empty(self.get(e, "key"), &join(&p, "key"))?,
                operator,
                values: self.strings(self.get(e, "values"), &join(&p, "values"))?,
            });
        }
        Ok(Some(pb::LabelSelector {
            match_labels,
            match_expressions,
        }))
    }

    /// A node selector term (`matchExpressions`, `matchFields`).
    pub fn node_selector_term(
        &self,
        v: &Value,
        path: &str,
    ) -> Result<pb::NodeSelectorTerm, InputError> {
        Ok(pb::NodeSelectorTerm {
            match_expressions: self.requirements(
                self.get(v, "matchExpressions"),
                &join(path, "matchExpressions"),
            )?,
            match_fields: self
                .requirements(self.get(v, "matchFields"), &join(path, "matchFields"))?,
        })
    }

    pub fn node_selector_terms(
        &self,
        v: Option<&Value>,
        path: &str,
    ) -> Result<Vec<pb::NodeSelectorTerm>, InputError> {
        let mut out = Vec::new();
        for (i, term) in self.array(v, path)?.iter().enumerate() {
            out.push(self.node_selector_term(term, &format!("{path}[{i}]"))?);
        }
        Ok(out)
    }

    /// Whether the object's `Ready` condition is `False`.
    pub fn not_ready(&self) -> bool {
        self.doc
            .value
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|conditions| {
                conditions.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Ready")
                        && c.get("status").and_then(Value::as_str) == Some("False")
                })
            })
    }
}
