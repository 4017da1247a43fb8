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
    for (key, value) in obj {
        let k = Keyword { path, key, value };
        match key.as_str() {
            "type" | "nullable" | "format" | "enum" | "pattern" | "default" => {
                parse_value_keyword(&mut s, &k)?
            }
            "properties" | "additionalProperties" | "items" | "required" => {
                parse_structure_keyword(&mut s, &k)?
            }
            "maxLength" | "minLength" | "maxItems" | "minItems" | "maxProperties"
            | "minProperties" | "maximum" | "minimum" | "multipleOf" | "exclusiveMaximum"
            | "exclusiveMinimum" => parse_bound_keyword(&mut s, &k)?,
            "allOf" | "anyOf" | "oneOf" | "not" => parse_combinator_keyword(&mut s, &k)?,
            _ if key.starts_with("x-kubernetes-") => parse_extension_keyword(&mut s, &k)?,
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

/// One keyword of a schema node, with what its errors need.
struct Keyword<'a> {
    /// The path of the schema node.
    path: &'a str,
    key: &'a str,
    value: &'a Json,
}

impl Keyword<'_> {
    /// The keyword's value is not what the keyword takes.
    fn invalid(&self, message: &str) -> CompileError {
        CompileError::InvalidSchema {
            path: format!("{}.{}", self.path, self.key),
            value: crate::error::go_value(self.value),
            message: message.to_string(),
        }
    }

    /// The path of a subschema under this keyword (`suffix` is e.g. `[0]`).
    fn sub_path(&self, suffix: &str) -> String {
        format!("{}.{}{suffix}", self.path, self.key)
    }

    fn bool(&self) -> bool {
        self.value.as_bool().unwrap_or(false)
    }

    fn count(&self) -> Result<u64, CompileError> {
        count(self.value, || {
            self.invalid("must be a non-negative integer")
        })
    }

    fn number(&self) -> Result<f64, CompileError> {
        number(self.value, || self.invalid("must be a number"))
    }

    fn string_list(&self) -> Result<Vec<String>, CompileError> {
        string_list(self.value).ok_or_else(|| self.invalid("must be a list of strings"))
    }
}

/// What a value may be: `type`, `nullable`, `format`, `enum`, `pattern`
/// and `default`.
fn parse_value_keyword(s: &mut Schema, k: &Keyword<'_>) -> Result<(), CompileError> {
    let value = k.value;
    match k.key {
        "type" => {
            let t = value
                .as_str()
                .ok_or_else(|| k.invalid("must be a string"))?;
            s.ty = Some(SchemaType::parse(t).ok_or_else(|| {
                k.invalid(
                    "must be one of \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
                )
            })?);
        }
        "nullable" => s.nullable = k.bool(),
        "format" => s.format = value.as_str().map(str::to_string),
        "enum" => {
            s.enum_values = Some(
                value
                    .as_array()
                    .ok_or_else(|| k.invalid("must be a list"))?
                    .clone(),
            );
        }
        "pattern" => {
            let src = value
                .as_str()
                .ok_or_else(|| k.invalid("must be a string"))?;
            let regex = re2::compile_uncached(src).map_err(|e| {
                k.invalid(&format!(
                    "must be a valid regular expression, but isn't: {e}"
                ))
            })?;
            s.pattern = Some(Pattern {
                source: src.to_string(),
                regex,
            });
        }
        "default" => s.default = Some(value.clone()),
        _ => {}
    }
    Ok(())
}

/// The shape of objects and arrays: `properties`, `additionalProperties`,
/// `items` and `required`.
fn parse_structure_keyword(s: &mut Schema, k: &Keyword<'_>) -> Result<(), CompileError> {
    let value = k.value;
    match k.key {
        "properties" => {
            let props = value
                .as_object()
                .ok_or_else(|| k.invalid("must be an object"))?;
            for (name, p) in props {
                let child = parse(p, &k.sub_path(&format!("[{name}]")))?;
                s.properties.push((name.clone(), child));
            }
        }
        "additionalProperties" => {
            s.additional = match value {
                Json::Bool(b) => Additional::Bool(*b),
                Json::Object(_) => Additional::Schema(Box::new(parse(value, &k.sub_path(""))?)),
                _ => return Err(k.invalid("must be a boolean or a schema")),
            }
        }
        "items" => s.items = Some(Box::new(parse(value, &k.sub_path(""))?)),
        "required" => s.required = k.string_list()?,
        _ => {}
    }
    Ok(())
}

/// Sizes and numeric bounds.
fn parse_bound_keyword(s: &mut Schema, k: &Keyword<'_>) -> Result<(), CompileError> {
    match k.key {
        "maxLength" => s.max_length = Some(k.count()?),
        "minLength" => s.min_length = Some(k.count()?),
        "maxItems" => s.max_items = Some(k.count()?),
        "minItems" => s.min_items = Some(k.count()?),
        "maxProperties" => s.max_properties = Some(k.count()?),
        "minProperties" => s.min_properties = Some(k.count()?),
        "maximum" => s.maximum = Some(k.number()?),
        "minimum" => s.minimum = Some(k.number()?),
        "multipleOf" => {
            let m = k.number()?;
            if m <= 0.0 {
                return Err(k.invalid("must be greater than zero"));
            }
            s.multiple_of = Some(m);
        }
        "exclusiveMaximum" => s.exclusive_maximum = k.bool(),
        "exclusiveMinimum" => s.exclusive_minimum = k.bool(),
        _ => {}
    }
    Ok(())
}

/// `allOf`, `anyOf`, `oneOf` (lists of subschemas) and `not`.
fn parse_combinator_keyword(s: &mut Schema, k: &Keyword<'_>) -> Result<(), CompileError> {
    if k.key == "not" {
        s.not = Some(Box::new(parse(k.value, &k.sub_path(""))?));
        return Ok(());
    }
    let list = k
        .value
        .as_array()
        .ok_or_else(|| k.invalid("must be a list of schemas"))?;
    let mut parsed = Vec::with_capacity(list.len());
    for (i, sub) in list.iter().enumerate() {
        parsed.push(parse(sub, &k.sub_path(&format!("[{i}]")))?);
    }
    match k.key {
        "allOf" => s.all_of = parsed,
        "anyOf" => s.any_of = parsed,
        _ => s.one_of = parsed,
    }
    Ok(())
}

/// The `x-kubernetes-*` extensions: field handling, list and map
/// semantics, and CEL rules (compiled later, in a second pass).
fn parse_extension_keyword(s: &mut Schema, k: &Keyword<'_>) -> Result<(), CompileError> {
    let value = k.value;
    match k.key {
        "x-kubernetes-preserve-unknown-fields" => s.preserve_unknown = k.bool(),
        "x-kubernetes-int-or-string" => s.int_or_string = k.bool(),
        "x-kubernetes-embedded-resource" => s.embedded = k.bool(),
        "x-kubernetes-list-type" => {
            s.list_type = Some(match value.as_str() {
                Some("atomic") => ListType::Atomic,
                Some("set") => ListType::Set,
                Some("map") => ListType::Map,
                _ => return Err(k.invalid("supported values: \"atomic\", \"set\", \"map\"")),
            })
        }
        "x-kubernetes-list-map-keys" => s.list_map_keys = k.string_list()?,
        "x-kubernetes-map-type" => s.map_type_atomic = value.as_str() == Some("atomic"),
        "x-kubernetes-validations" => {
            let list = value
                .as_array()
                .ok_or_else(|| k.invalid("must be a list"))?;
            for (i, rule) in list.iter().enumerate() {
                s.rule_specs
                    .push(RuleSpec::parse(rule, &k.sub_path(&format!("[{i}]")))?);
            }
        }
        // Other extensions do not affect validation.
        _ => {}
    }
    Ok(())
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
