//! Violations (what is wrong with an object) and compile errors (what is
//! wrong with a CRD), printed the way kube-apiserver prints its
//! `field.Error`s: `<path>: <Type>[: <value>][: <detail>]`.

use std::fmt;

use serde_json::Value as Json;

/// The `field.ErrorType` of a violation. Its [`Display`](fmt::Display) is the
/// apiserver's wording (`Invalid value`, `Required value`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// `Required value`: a required field is missing.
    Required,
    /// `Invalid value`: the value does not satisfy a constraint.
    Invalid,
    /// `Invalid value` raised for a value of the wrong type (`field.TypeInvalid`).
    /// Printed like [`Invalid`](Self::Invalid), but it blocks CEL rules.
    TypeInvalid,
    /// `Unsupported value`: the value is not one of an `enum`.
    NotSupported,
    /// `Duplicate value`: a `set` or `map` list repeats an item or key.
    Duplicate,
    /// `Forbidden`: the field may not be set here.
    Forbidden,
    /// `Too long`: a string is longer than `maxLength`.
    TooLong,
    /// `Too many`: a list or object has more than `maxItems` / `maxProperties`.
    TooMany,
    /// `Internal error`.
    Internal,
}

impl ViolationKind {
    /// The apiserver's `ErrorType.String()`.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::Required => "Required value",
            ViolationKind::Invalid | ViolationKind::TypeInvalid => "Invalid value",
            ViolationKind::NotSupported => "Unsupported value",
            ViolationKind::Duplicate => "Duplicate value",
            ViolationKind::Forbidden => "Forbidden",
            ViolationKind::TooLong => "Too long",
            ViolationKind::TooMany => "Too many",
            ViolationKind::Internal => "Internal error",
        }
    }

    /// Whether the apiserver skips the CEL rules when the object has a
    /// violation of this kind (`hasBlockingErr`).
    pub fn blocks_rules(self) -> bool {
        matches!(
            self,
            ViolationKind::NotSupported
                | ViolationKind::Required
                | ViolationKind::TooLong
                | ViolationKind::TooMany
                | ViolationKind::TypeInvalid
        )
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The offending value a violation reports, as the apiserver prints it.
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    /// Not printed (`Required value`, `Forbidden`, `Too long`, ...).
    Omitted,
    /// A JSON value, printed the way Go prints the decoded value: strings
    /// quoted, numbers bare, objects as `map[string]interface {}{...}`.
    Json(Json),
}

impl BadValue {
    /// A string value (printed quoted).
    pub fn string(s: impl Into<String>) -> Self {
        BadValue::Json(Json::String(s.into()))
    }

    /// An integer value (printed bare).
    pub fn int(i: i64) -> Self {
        BadValue::Json(Json::from(i))
    }
}

/// Where a violation comes from, for tools that want to group or explain them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `apiVersion` / `kind` / `metadata` checks.
    Metadata,
    /// The OpenAPI v3 structural schema (type, enum, pattern, ...).
    Schema,
    /// `x-kubernetes-list-type` `set` / `map` uniqueness.
    ListType,
    /// `x-kubernetes-embedded-resource` objects (`apiVersion`, `kind`, `metadata`).
    EmbeddedResource,
    /// An `x-kubernetes-validations` rule; the rule's source text.
    Rule(String),
    /// The note that rules were skipped because of blocking violations.
    RulesSkipped,
}

/// One problem with an object, as kube-apiserver would report it.
///
/// `Display` gives the apiserver's line, e.g.
/// `spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// The field path, like `spec.template.spec.requirements[0].operator`.
    /// `<nil>` for violations about the whole object (the apiserver's nil path).
    pub path: String,
    /// The apiserver's error type.
    pub kind: ViolationKind,
    /// The offending value, if the apiserver prints one.
    pub value: BadValue,
    /// The detail message (what the rule or constraint says).
    pub detail: String,
    /// What raised the violation.
    pub source: Source,
}

impl Violation {
    pub(crate) fn new(
        path: impl Into<String>,
        kind: ViolationKind,
        value: BadValue,
        detail: impl Into<String>,
        source: Source,
    ) -> Self {
        let path = path.into();
        Violation {
            // The apiserver prints a nil field path (the object itself) as `<nil>`.
            path: if path.is_empty() {
                "<nil>".to_string()
            } else {
                path
            },
            kind,
            value,
            detail: detail.into(),
            source,
        }
    }

    /// The message after the path: `Invalid value: 0: ...` (the apiserver's
    /// `ErrorBody`).
    pub fn body(&self) -> String {
        let mut s = String::from(self.kind.as_str());
        let print_value = !matches!(
            self.kind,
            ViolationKind::Required
                | ViolationKind::Forbidden
                | ViolationKind::TooLong
                | ViolationKind::Internal
        );
        if print_value && let BadValue::Json(v) = &self.value {
            s.push_str(": ");
            s.push_str(&go_value(v));
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.body())
    }
}

/// Why a CRD could not be loaded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompileError {
    /// The document is not a `CustomResourceDefinition` or misses a field.
    #[error("{path}: {message}")]
    Malformed { path: String, message: String },
    /// A schema construct is invalid (a `pattern` that is not a regular
    /// expression, a `default` of the wrong shape, ...).
    #[error("{path}: Invalid value: {value}: {message}")]
    InvalidSchema {
        path: String,
        value: String,
        message: String,
    },
    /// An `x-kubernetes-validations` rule (or its `messageExpression` or
    /// `fieldPath`) does not compile: the apiserver rejects such a CRD.
    #[error("{path}: Invalid value: {}: {message}", go_quote(expression))]
    Rule {
        /// Path of the offending field in the CRD, e.g.
        /// `spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule`.
        path: String,
        /// The offending text: the rule, its `messageExpression` or its `fieldPath`.
        expression: String,
        /// Why it was rejected, e.g. `compilation failed: ERROR: <input>:1:6: undefined field 'foo'`.
        message: String,
    },
    /// The CRD YAML/JSON could not be parsed.
    #[error("cannot parse CRD: {0}")]
    Parse(String),
}

/// Why an object could not be validated at all (as opposed to violations).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValidateError {
    /// The requested version is not defined by the CRD.
    #[error("version {version:?} is not defined by {crd}")]
    UnknownVersion { crd: String, version: String },
    /// The requested version is defined but not served.
    #[error("version {version:?} of {crd} is not served")]
    NotServed { crd: String, version: String },
    /// The object's `apiVersion` is missing or not a string.
    #[error("object has no apiVersion")]
    NoApiVersion,
}

/// Go's `strconv.Quote`: double-quoted, with Go escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a `float64` (`strconv.FormatFloat(f, 'g', -1, 64)` with
/// Go's exponent form: `1e+06`, `0.5`, `1.5e-07`).
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Shortest round-trip digits from Rust's `{:e}`: "1.5e-7", "1e6".
    let sci = format!("{f:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    // strconv.FormatFloat(f, 'g', -1, 64): the exponent form is used when
    // the exponent is < -4 or >= 6 (the precision Go uses for shortest).
    if !(-4..6).contains(&exp) {
        return go_exp(mantissa, exp);
    }
    format!("{f}")
}

fn go_exp(mantissa: &str, exp: i32) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// How Go prints a decoded JSON value in a `field.Error`: `%v` for numbers
/// and booleans, `%q` for strings, `%#v` for objects and arrays.
pub fn go_value(v: &Json) -> String {
    match v {
        Json::Null => "null".to_string(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => go_number(n),
        Json::String(s) => go_quote(s),
        Json::Array(_) | Json::Object(_) => go_sharp_v(v),
    }
}

fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        go_float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}{"a":1}`).
pub fn go_sharp_v(v: &Json) -> String {
    match v {
        Json::Null => "interface {}(nil)".to_string(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => go_number(n),
        Json::String(s) => go_quote(s),
        Json::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Json::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| {
                    let v = map.get(k.as_str()).map(go_sharp_v).unwrap_or_default();
                    format!("{}:{}", go_quote(k), v)
                })
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_like_go() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(1.5e-7), "1.5e-07");
        assert_eq!(go_float(0.0001), "0.0001");
    }

    #[test]
    fn values_print_like_go() {
        assert_eq!(go_value(&json!("a\"b")), r#""a\"b""#);
        assert_eq!(go_value(&json!(3)), "3");
        assert_eq!(
            go_value(&json!({"name": "a", "n": 1})),
            r#"map[string]interface {}{"n":1, "name":"a"}"#
        );
        assert_eq!(go_value(&json!(["a", 1])), r#"[]interface {}{"a", 1}"#);
    }

    #[test]
    fn bodies_omit_values_where_the_apiserver_does() {
        let v = Violation::new(
            "spec.x",
            ViolationKind::Required,
            BadValue::Omitted,
            "",
            Source::Schema,
        );
        assert_eq!(v.to_string(), "spec.x: Required value");
        let v = Violation::new(
            "spec.x",
            ViolationKind::TooLong,
            BadValue::string("abc"),
            "may not be more than 2 bytes",
            Source::Schema,
        );
        assert_eq!(
            v.to_string(),
            "spec.x: Too long: may not be more than 2 bytes"
        );
    }
}
