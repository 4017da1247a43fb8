//! The structural schema of one CRD version, parsed once from its
//! `openAPIV3Schema` with everything validation needs precompiled: `pattern`
//! regular expressions and `x-kubernetes-validations` CEL programs.

use regex::Regex;
use serde_json::Value as Json;

use crate::cel::{CompiledRule, RuleSpec};
use crate::error::CompileError;
use crate::re2;

/// The `type` of a schema node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SchemaType {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl SchemaType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SchemaType::Object => "object",
            SchemaType::Array => "array",
            SchemaType::String => "string",
            SchemaType::Integer => "integer",
            SchemaType::Number => "number",
            SchemaType::Boolean => "boolean",
        }
    }

    fn parse(s: &str) -> Option<SchemaType> {
        Some(match s {
            "object" => SchemaType::Object,
            "array" => SchemaType::Array,
            "string" => SchemaType::String,
            "integer" => SchemaType::Integer,
            "number" => SchemaType::Number,
            "boolean" => SchemaType::Boolean,
            _ => return None,
        })
    }
}

/// `additionalProperties`.
#[derive(Debug, Default)]
pub(crate) enum Additional {
    /// Not set: unknown properties are pruned.
    #[default]
    Unset,
    /// `true` (anything) or `false` (nothing).
    Bool(bool),
    /// A schema every additional property must satisfy (a map).
    Schema(Box<Schema>),
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    Map,
}

/// A compiled `pattern`.
#[derive(Debug)]
pub(crate) struct Pattern {
    pub source: String,
    pub regex: Regex,
}

/// One node of a structural schema.
#[derive(Debug, Default)]
pub(crate) struct Schema {
    pub ty: Option<SchemaType>,
    pub nullable: bool,
    pub format: Option<String>,
    pub properties: Vec<(String, Schema)>,
    pub additional: Additional,
    pub items: Option<Box<Schema>>,
    pub required: Vec<String>,
    pub enum_values: Option<Vec<Json>>,
    pub pattern: Option<Pattern>,
    pub max_length: Option<u64>,
    pub min_length: Option<u64>,
    pub max_items: Option<u64>,
    pub min_items: Option<u64>,
    pub max_properties: Option<u64>,
    pub min_properties: Option<u64>,
    pub maximum: Option<f64>,
    pub minimum: Option<f64>,
    pub exclusive_maximum: bool,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    pub default: Option<Json>,
    pub preserve_unknown: bool,
    pub int_or_string: bool,
    pub embedded: bool,
    pub list_type: Option<ListType>,
    pub list_map_keys: Vec<String>,
    pub map_type_atomic: bool,
    /// The rules as written, compiled into `rules` by a second pass.
    pub rule_specs: Vec<RuleSpec>,
    pub rules: Vec<CompiledRule>,
    /// Whether this node or a node below it has CEL rules.
    pub has_rules: bool,
}

impl Schema {
    /// The schema of property `name`.
    pub(crate) fn prop(&self, name: &str) -> Option<&Schema> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
    }

    /// The schema of additional properties, if this node is a map.
    pub(crate) fn additional_schema(&self) -> Option<&Schema> {
        match &self.additional {
            Additional::Schema(s) => Some(s),
            _ => None,
        }
    }

    /// The schema of a child field: a declared property, else the
    /// `additionalProperties` schema.
    pub(crate) fn child(&self, name: &str) -> Option<&Schema> {
        self.prop(name).or_else(|| self.additional_schema())
    }

    /// Whether a field not declared in `properties` is kept (not pruned).
    pub(crate) fn keeps_unknown(&self) -> bool {
        self.preserve_unknown || matches!(self.additional, Additional::Bool(true))
    }

    /// The `type` as the apiserver prints it in CEL violations (`sts.Type`).
    pub(crate) fn type_name(&self) -> &'static str {
        self.ty.map(SchemaType::as_str).unwrap_or("")
    }
}

/// Parses an `openAPIV3Schema`. `path` is the schema's path in the CRD,
/// for error messages.
pub(crate) fn parse(v: &Json, path: &str) -> Result<Schema, CompileError> {
    let obj = v.as_object().ok_or_else(|| CompileError::Malformed {
        path: path.to_string(),
        message: "must be an object".to_string(),
    })?;
    let mut s = Schema::default();
    let invalid = |field: &str, value: &Json, message: &str| CompileError::InvalidSchema {
        path: format!("{path}.{field}"),
        value: crate::error::go_value(value),
        message: message.to_string(),
    };
    for (key, value) in obj {
        match key.as_str() {
            "type" => {
                let t = value
                    .as_str()
                    .ok_or_else(|| invalid("type", value, "must be a string"))?;
                s.ty = Some(SchemaType::parse(t).ok_or_else(|| {
                    invalid(
                        "type",
                        value,
                        "must be one of \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
                    )
                })?);
            }
            "nullable" => s.nullable = value.as_bool().unwrap_or(false),
            "format" => s.format = value.as_str().map(str::to_string),
            "properties" => {
                let props = value
                    .as_object()
                    .ok_or_else(|| invalid("properties", value, "must be an object"))?;
                for (name, p) in props {
                    let child = parse(p, &format!("{path}.properties[{name}]"))?;
                    s.properties.push((name.clone(), child));
                }
            }
            "additionalProperties" => {
                s.additional = match value {
                    Json::Bool(b) => Additional::Bool(*b),
                    Json::Object(_) => Additional::Schema(Box::new(parse(
                        value,
                        &format!("{path}.additionalProperties"),
                    )?)),
                    _ => {
                        return Err(invalid(
                            "additionalProperties",
                            value,
                            "must be a boolean or a schema",
                        ));
                    }
                }
            }
            "items" => {
                s.items = Some(Box::new(parse(value, &format!("{path}.items"))?));
            }
            "required" => {
                s.required = string_list(value)
                    .ok_or_else(|| invalid("required", value, "must be a list of strings"))?;
            }
            "enum" => {
                s.enum_values = Some(
                    value
                        .as_array()
                        .ok_or_else(|| invalid("enum", value, "must be a list"))?
                        .clone(),
                );
            }
            "pattern" => {
                let src = value
                    .as_str()
                    .ok_or_else(|| invalid("pattern", value, "must be a string"))?;
                let regex = re2::compile_uncached(src).map_err(|e| {
                    invalid(
                        "pattern",
                        value,
                        &format!("must be a valid regular expression, but isn't: {e}"),
                    )
                })?;
                s.pattern = Some(Pattern {
                    source: src.to_string(),
                    regex,
                });
            }
            "maxLength" => {
                s.max_length = Some(count(value, || {
                    invalid(key, value, "must be a non-negative integer")
                })?)
            }
            "minLength" => {
                s.min_length = Some(count(value, || {
                    invalid(key, value, "must be a non-negative integer")
                })?)
            }
            "maxItems" => {
                s.max_items = Some(count(value, || {
                    invalid(key, value, "must be a non-negative integer")
                })?)
            }
            "minItems" => {
                s.min_items = Some(count(value, || {
                    invalid(key, value, "must be a non-negative integer")
                })?)
            }
            "maxProperties" => {
                s.max_properties = Some(count(value, || {
                    invalid(key, value, "must be a non-negative integer")
                })?)
            }
            "minProperties" => {
                s.min_properties = Some(count(value, || {
                    invalid(key, value, "must be a non-negative integer")
                })?)
            }
            "maximum" => {
                s.maximum = Some(number(value, || invalid(key, value, "must be a number"))?)
            }
            "minimum" => {
                s.minimum = Some(number(value, || invalid(key, value, "must be a number"))?)
            }
            "multipleOf" => {
                let m = number(value, || invalid(key, value, "must be a number"))?;
                if m <= 0.0 {
                    return Err(invalid(key, value, "must be greater than zero"));
                }
                s.multiple_of = Some(m);
            }
            "exclusiveMaximum" => s.exclusive_maximum = value.as_bool().unwrap_or(false),
            "exclusiveMinimum" => s.exclusive_minimum = value.as_bool().unwrap_or(false),
            "allOf" | "anyOf" | "oneOf" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| invalid(key, value, "must be a list of schemas"))?;
                let mut parsed = Vec::with_capacity(list.len());
                for (i, sub) in list.iter().enumerate() {
                    parsed.push(parse(sub, &format!("{path}.{key}[{i}]"))?);
                }
                match key.as_str() {
                    "allOf" => s.all_of = parsed,
                    "anyOf" => s.any_of = parsed,
                    _ => s.one_of = parsed,
                }
            }
            "not" => s.not = Some(Box::new(parse(value, &format!("{path}.not"))?)),
            "default" => s.default = Some(value.clone()),
            "x-kubernetes-preserve-unknown-fields" => {
                s.preserve_unknown = value.as_bool().unwrap_or(false)
            }
            "x-kubernetes-int-or-string" => s.int_or_string = value.as_bool().unwrap_or(false),
            "x-kubernetes-embedded-resource" => s.embedded = value.as_bool().unwrap_or(false),
            "x-kubernetes-list-type" => {
                s.list_type = Some(match value.as_str() {
                    Some("atomic") => ListType::Atomic,
                    Some("set") => ListType::Set,
                    Some("map") => ListType::Map,
                    _ => {
                        return Err(CompileError::InvalidSchema {
                            path: format!("{path}.x-kubernetes-list-type"),
                            value: crate::error::go_value(value),
                            message: "supported values: \"atomic\", \"set\", \"map\"".to_string(),
                        });
                    }
                })
            }
            "x-kubernetes-list-map-keys" => {
                s.list_map_keys = string_list(value)
                    .ok_or_else(|| invalid(key, value, "must be a list of strings"))?;
            }
            "x-kubernetes-map-type" => s.map_type_atomic = value.as_str() == Some("atomic"),
            "x-kubernetes-validations" => {
                let list = value
                    .as_array()
                    .ok_or_else(|| invalid(key, value, "must be a list"))?;
                for (i, rule) in list.iter().enumerate() {
                    s.rule_specs.push(RuleSpec::parse(
                        rule,
                        &format!("{path}.x-kubernetes-validations[{i}]"),
                    )?);
                }
            }
            // Documentation and other extensions do not affect validation.
            _ => {}
        }
    }
    if s.list_type == Some(ListType::Map) && s.list_map_keys.is_empty() {
        return Err(CompileError::InvalidSchema {
            path: format!("{path}.x-kubernetes-list-map-keys"),
            value: "[]string(nil)".to_string(),
            message: "must not be empty if x-kubernetes-list-type is map".to_string(),
        });
    }
    Ok(s)
}

fn string_list(v: &Json) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_str().map(str::to_string))
        .collect()
}

fn count(v: &Json, err: impl Fn() -> CompileError) -> Result<u64, CompileError> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    match v.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 => Ok(f as u64),
        _ => Err(err()),
    }
}

fn number(v: &Json, err: impl Fn() -> CompileError) -> Result<f64, CompileError> {
    v.as_f64().ok_or_else(err)
}
