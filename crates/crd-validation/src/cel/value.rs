//! JSON to CEL values, the way kube-apiserver's `UnstructuredToVal` types
//! them from the schema: objects are maps with string keys, integers are
//! `int`, `type: number` is `double`, `format: date-time`/`date` strings are
//! timestamps, `format: duration` strings are durations, `format: byte`
//! strings are bytes. Strings and keys are borrowed, not copied.

use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelDuration, CelInt, CelList, CelMap, CelMapKey, CelNull,
    CelString, CelTimestamp, CelUInt,
};
use cel::common::value::Val;
use serde_json::Value as Json;
use std::collections::HashMap;

use crate::formats;
use crate::schema::{Schema, SchemaType};

/// Converts `v`, typed by `schema` where one applies. A resource root (the
/// object, or an embedded resource) shows only `name` and `generateName`
/// of its `metadata`, as the apiserver's CEL type for it declares.
pub(crate) fn to_val<'v>(
    v: &'v Json,
    schema: Option<&Schema>,
    resource_root: bool,
) -> Box<dyn Val + 'v> {
    match v {
        Json::Null => Box::new(CelNull),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => {
            let as_double = schema.is_some_and(|s| s.ty == Some(SchemaType::Number));
            if as_double {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            } else if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                let integer_schema = schema.is_some_and(|s| s.ty == Some(SchemaType::Integer));
                if integer_schema && f.fract() == 0.0 && f.abs() < 9.2e18 {
                    Box::new(CelInt::from(f as i64))
                } else {
                    Box::new(CelDouble::from(f))
                }
            }
        }
        Json::String(s) => string_val(s, schema),
        Json::Array(items) => {
            let item_schema = schema.and_then(|s| s.items.as_deref());
            let list: Vec<Box<dyn Val + 'v>> = items
                .iter()
                .map(|i| to_val(i, item_schema, item_schema.is_some_and(|s| s.embedded)))
                .collect();
            Box::new(CelList::from(list))
        }
        Json::Object(map) => {
            let mut out: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> =
                HashMap::with_capacity(map.len());
            for (k, child) in map {
                let child_schema = schema.and_then(|s| s.child(k));
                let val = if resource_root && k == "metadata" {
                    metadata_val(child)
                } else {
                    to_val(
                        child,
                        child_schema,
                        child_schema.is_some_and(|s| s.embedded),
                    )
                };
                out.insert(CelMapKey::from(k.as_str()), val);
            }
            Box::new(CelMap::from(out))
        }
    }
}

fn metadata_val(v: &Json) -> Box<dyn Val + '_> {
    let Some(map) = v.as_object() else {
        return to_val(v, None, false);
    };
    let mut out: HashMap<CelMapKey<'_>, Box<dyn Val + '_>> = HashMap::new();
    for key in ["name", "generateName"] {
        if let Some(Json::String(s)) = map.get(key) {
            out.insert(CelMapKey::from(key), Box::new(CelString::from(s.as_str())));
        }
    }
    Box::new(CelMap::from(out))
}

fn string_val<'v>(s: &'v str, schema: Option<&Schema>) -> Box<dyn Val + 'v> {
    let format = schema
        .filter(|sc| sc.ty == Some(SchemaType::String))
        .and_then(|sc| sc.format.as_deref());
    match format {
        Some("duration") => {
            if let Some(d) = formats::parse_duration(s) {
                return Box::new(CelDuration::from(d));
            }
        }
        Some("date-time") => {
            if let Some(t) = formats::parse_date_time(s) {
                return Box::new(CelTimestamp::from(t));
            }
        }
        Some("date") => {
            if let Some(t) = formats::parse_date(s) {
                return Box::new(CelTimestamp::from(t));
            }
        }
        Some("byte") => {
            if let Some(b) = formats::decode_base64(s) {
                return Box::new(CelBytes::from(b));
            }
        }
        _ => {}
    }
    Box::new(CelString::from(s))
}
