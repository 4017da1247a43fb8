//! Reading objects as the server does: leniently, a missing or mistyped
//! field reading as empty (validation says what is wrong with it).

use serde_json::Value;

/// The string `value[key]`; empty when it is not one.
pub fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_default()
}

/// The array `value`; empty when it is not one.
pub fn list(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The strings of the array `value` (other entries are skipped).
pub fn strings(value: &Value) -> impl Iterator<Item = &str> {
    list(value).iter().filter_map(Value::as_str)
}
