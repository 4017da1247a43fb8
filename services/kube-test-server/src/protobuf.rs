//! Enough of Kubernetes' protobuf encoding for the kubectl commands that send
//! it (`kubectl create namespace | configmap | secret` use typed clients):
//!
//! ```text
//!   "k8s\0" + runtime.Unknown{ typeMeta{apiVersion, kind}, raw }
//!   raw = Namespace | ConfigMap | Secret { metadata: ObjectMeta, ... }
//! ```
//!
//! Other kinds answer 415, and the client should send JSON.

use serde_json::{Map, Value, json};

use super::store::ApiError;

/// The magic prefix of a protobuf-encoded object.
pub const MAGIC: &[u8] = b"k8s\0";

type Fields<'a> = Vec<(u64, Field<'a>)>;

enum Field<'a> {
    Varint,
    Bytes(&'a [u8]),
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(out);
        }
    }
    None
}

fn fields(buf: &[u8]) -> Option<Fields<'_>> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (num, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(buf, &mut pos)?;
                out.push((num, Field::Varint));
            }
            1 => pos += 8,
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let bytes = buf.get(pos..pos.checked_add(len)?)?;
                pos += len;
                out.push((num, Field::Bytes(bytes)));
            }
            5 => pos += 4,
            _ => return None,
        }
    }
    Some(out)
}

fn string(b: &[u8]) -> Option<String> {
    String::from_utf8(b.to_vec()).ok()
}

fn bytes_of<'a>(f: &'a Fields<'a>, num: u64) -> impl Iterator<Item = &'a [u8]> + 'a {
    f.iter().filter_map(move |(n, v)| match v {
        Field::Bytes(b) if *n == num => Some(*b),
        _ => None,
    })
}

fn first_string(f: &Fields<'_>, num: u64) -> Option<String> {
    bytes_of(f, num).next().and_then(string)
}

/// A `map<string, string>` (or bytes, base64-encoded as JSON has them).
fn map(f: &Fields<'_>, num: u64, base64: bool) -> Option<Value> {
    let mut out = Map::new();
    for entry in bytes_of(f, num) {
        let kv = fields(entry)?;
        let k = first_string(&kv, 1).unwrap_or_default();
        let v = bytes_of(&kv, 2).next().unwrap_or_default();
        out.insert(k, json!(if base64 { encode_base64(v) } else { string(v)? }));
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

fn encode_base64(data: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn object_meta(buf: &[u8]) -> Option<Value> {
    let f = fields(buf)?;
    let mut meta = Map::new();
    for (num, key) in [
        (1, "name"),
        (2, "generateName"),
        (3, "namespace"),
        (6, "resourceVersion"),
    ] {
        if let Some(s) = first_string(&f, num).filter(|s| !s.is_empty()) {
            meta.insert(key.into(), json!(s));
        }
    }
    for (num, key) in [(11, "labels"), (12, "annotations")] {
        if let Some(m) = map(&f, num, false) {
            meta.insert(key.into(), m);
        }
    }
    let finalizers: Vec<String> = bytes_of(&f, 14).filter_map(string).collect();
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), json!(finalizers));
    }
    Some(Value::Object(meta))
}

/// Decodes a protobuf request body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let unsupported = |what: &str| {
        ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (protobuf is decoded for Namespace, ConfigMap and Secret only, not {what})"
        ))
    };
    let bad = || ApiError::bad_request("the body of the request could not be decoded as protobuf");
    let rest = body.strip_prefix(MAGIC).ok_or_else(bad)?;
    let unknown = fields(rest).ok_or_else(bad)?;
    let type_meta = fields(bytes_of(&unknown, 1).next().unwrap_or_default()).ok_or_else(bad)?;
    let api_version = first_string(&type_meta, 1).unwrap_or_default();
    let kind = first_string(&type_meta, 2).unwrap_or_default();
    let raw = fields(bytes_of(&unknown, 2).next().unwrap_or_default()).ok_or_else(bad)?;
    let metadata = object_meta(bytes_of(&raw, 1).next().unwrap_or_default()).ok_or_else(bad)?;
    let mut obj = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata});
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => {
            if let Some(spec) = bytes_of(&raw, 2).next().and_then(fields) {
                let finalizers: Vec<String> = bytes_of(&spec, 1).filter_map(string).collect();
                if !finalizers.is_empty() {
                    obj["spec"] = json!({"finalizers": finalizers});
                }
            }
        }
        ("v1", "ConfigMap") => {
            if let Some(d) = map(&raw, 2, false) {
                obj["data"] = d;
            }
            if let Some(d) = map(&raw, 3, true) {
                obj["binaryData"] = d;
            }
        }
        ("v1", "Secret") => {
            if let Some(d) = map(&raw, 2, true) {
                obj["data"] = d;
            }
            if let Some(t) = first_string(&raw, 3) {
                obj["type"] = json!(t);
            }
            if let Some(d) = map(&raw, 4, false) {
                obj["stringData"] = d;
            }
        }
        _ => return Err(unsupported(&format!("{api_version} {kind}"))),
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u64, data: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, data.len() as u8];
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn decodes_a_configmap() {
        let meta = [
            field(1, b"cm"),
            field(11, &[field(1, b"app"), field(2, b"web")].concat()),
        ]
        .concat();
        let raw = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"v")].concat()),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let obj = decode(&body).unwrap();
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": {"app": "web"}}, "data": {"k": "v"}})
        );
        assert_eq!(encode_base64(b"hello"), "aGVsbG8=");
    }
}
