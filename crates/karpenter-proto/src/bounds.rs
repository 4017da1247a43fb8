//! What decoding a message will cost, measured on its wire bytes before it
//! is decoded, so a small request cannot make a service allocate without
//! bound.
//!
//! ```text
//!   wire bytes ──walk with the schema (FILE_DESCRIPTOR_SET)──▶ elements per field path,
//!                                                              estimated decoded bytes
//!      over a field's limit ──▶ INVALID_ARGUMENT naming the field
//!      estimate over EXPANSION × wire + SLACK ──▶ INVALID_ARGUMENT (amplification)
//!   otherwise ──▶ prost decodes it
//! ```
//!
//! Protobuf amplifies: an empty element is 2 bytes on the wire and a whole
//! struct once decoded (a `Pod` is about a kilobyte), so 4 MB of empty
//! pending pods decoded to 2.6 GB. Real objects carry names, requests and
//! labels, so their decoded size stays within a small multiple of their
//! wire size; the bound is set far above that multiple.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use prost::Message as _;

/// Decoded bytes allowed per wire byte (real snapshots stay under 16).
pub const EXPANSION: u64 = 48;
/// Decoded bytes allowed whatever the wire size (small requests).
pub const SLACK: u64 = 64 << 20;
/// Decoded bytes never allowed, whatever the wire size: four times the
/// estimate for the 150,000-pod benchmark snapshot (263 MiB).
pub const MAX_DECODED: u64 = 1 << 30;
/// Estimated decoded bytes per field a message type declares, per element.
const BYTES_PER_FIELD: u64 = 24;
/// Estimated decoded bytes of any element (allocation, vector slot).
const BYTES_PER_ELEMENT: u64 = 64;
/// Deepest nesting walked.
const MAX_DEPTH: usize = 64;

/// Most elements one field path may hold in one request: the documented
/// limits of the wire contract (well above Kubernetes' own scalability
/// limits of 150,000 pods and 5,000 nodes).
pub const FIELD_LIMITS: &[(&str, u64)] = &[
    ("cluster.pending_pods", 500_000),
    ("cluster.nodes", 50_000),
    ("cluster.nodes.pods", 1_000_000),
    ("cluster.node_pools", 10_000),
    ("cluster.instance_type_catalogs", 10_000),
    ("cluster.daemon_sets", 50_000),
    ("cluster.pod_disruption_budgets", 100_000),
    ("cluster.namespaces", 100_000),
];

/// Why a message was refused before decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    #[error("{field}: {count} elements, more than the {limit} allowed")]
    TooManyElements {
        field: String,
        count: u64,
        limit: u64,
    },
    #[error(
        "the message would take about {estimated} bytes once decoded from {wire} bytes, more than the {allowed} allowed (mostly {field})"
    )]
    Amplified {
        estimated: u64,
        wire: u64,
        allowed: u64,
        field: String,
    },
    #[error("not a valid protobuf message: {0}")]
    Malformed(String),
}

/// One field of a message type.
#[derive(Debug)]
struct FieldShape {
    name: String,
    /// The message type of the field (full name, no leading dot).
    message: Option<String>,
}

#[derive(Debug, Default)]
struct MessageShape {
    fields: HashMap<u32, FieldShape>,
}

#[derive(Debug, Default)]
struct Schema {
    messages: HashMap<String, MessageShape>,
}

fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let set =
            prost_types::FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).unwrap_or_default();
        let mut schema = Schema::default();
        for file in &set.file {
            let package = file.package.clone().unwrap_or_default();
            for message in &file.message_type {
                add(&mut schema, &package, message);
            }
        }
        schema
    })
}

fn add(schema: &mut Schema, scope: &str, message: &prost_types::DescriptorProto) {
    let name = format!("{scope}.{}", message.name.clone().unwrap_or_default());
    let mut shape = MessageShape::default();
    for field in &message.field {
        let is_message =
            field.r#type == Some(prost_types::field_descriptor_proto::Type::Message as i32);
        let message = is_message.then(|| {
            field
                .type_name
                .clone()
                .unwrap_or_default()
                .trim_start_matches('.')
                .to_owned()
        });
        if let Some(number) = field.number.and_then(|n| u32::try_from(n).ok()) {
            shape.fields.insert(
                number,
                FieldShape {
                    name: field.name.clone().unwrap_or_default(),
                    message,
                },
            );
        }
    }
    for nested in &message.nested_type {
        add(schema, &name, nested);
    }
    schema.messages.insert(name, shape);
}

/// What a message's wire bytes hold.
#[derive(Debug, Default)]
pub struct Measure {
    /// Elements (message values) per field path (`cluster.pending_pods`).
    pub elements: BTreeMap<String, u64>,
    /// Estimated bytes of the decoded message.
    pub estimated_bytes: u64,
    /// Estimated bytes per field path, to name the culprit.
    estimated_by_path: BTreeMap<String, u64>,
}

/// Measures `bytes` as the message `type_name` (full protobuf name).
pub fn measure(type_name: &str, bytes: &[u8]) -> Result<Measure, BoundsError> {
    let mut out = Measure::default();
    walk(schema(), type_name, bytes, "", 0, &mut out)?;
    Ok(out)
}

/// Refuses `bytes` if decoding them as `type_name` would cost more than
/// the bounds allow. Field limits are checked as elements are counted, so
/// a flood is refused at its limit, not after it was walked whole.
pub fn check(type_name: &str, bytes: &[u8]) -> Result<(), BoundsError> {
    let measured = measure(type_name, bytes)?;
    let wire = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    let allowed = wire
        .saturating_mul(EXPANSION)
        .saturating_add(SLACK)
        .min(MAX_DECODED);
    if measured.estimated_bytes > allowed {
        let field = measured
            .estimated_by_path
            .iter()
            .max_by_key(|(_, bytes)| **bytes)
            .map(|(path, _)| path.clone())
            .unwrap_or_default();
        return Err(BoundsError::Amplified {
            estimated: measured.estimated_bytes,
            wire,
            allowed,
            field,
        });
    }
    Ok(())
}

fn limit_of(path: &str) -> Option<u64> {
    FIELD_LIMITS
        .iter()
        .find(|(field, _)| *field == path)
        .map(|(_, limit)| *limit)
}

/// Adds `amount` to the entry for `path`, allocating the key only the
/// first time the path is seen; the new count.
fn bump(map: &mut BTreeMap<String, u64>, path: &str, amount: u64) -> u64 {
    match map.get_mut(path) {
        Some(value) => {
            *value = value.saturating_add(amount);
            *value
        }
        None => {
            map.insert(path.to_owned(), amount);
            amount
        }
    }
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, BoundsError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes
            .get(*at)
            .ok_or_else(|| BoundsError::Malformed("a varint runs past the end".into()))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(BoundsError::Malformed(
        "a varint longer than ten bytes".into(),
    ))
}

fn skip(bytes: &[u8], at: &mut usize, len: u64) -> Result<(), BoundsError> {
    let end = usize::try_from(len)
        .ok()
        .and_then(|len| at.checked_add(len))
        .filter(|end| *end <= bytes.len())
        .ok_or_else(|| BoundsError::Malformed("a field runs past the end".into()))?;
    *at = end;
    Ok(())
}

fn walk(
    schema: &Schema,
    type_name: &str,
    bytes: &[u8],
    path: &str,
    depth: usize,
    out: &mut Measure,
) -> Result<(), BoundsError> {
    if depth > MAX_DEPTH {
        return Err(BoundsError::Malformed(format!(
            "nested deeper than {MAX_DEPTH} at {path}"
        )));
    }
    let shape = schema.messages.get(type_name);
    let own = BYTES_PER_ELEMENT + BYTES_PER_FIELD * shape.map_or(0, |s| s.fields.len() as u64);
    out.estimated_bytes = out.estimated_bytes.saturating_add(own);
    bump(&mut out.estimated_by_path, path, own);
    // Child paths of this message, made once per field, not per element.
    let mut children: HashMap<u32, String> = HashMap::new();
    let mut at = 0;
    while at < bytes.len() {
        let key = varint(bytes, &mut at)?;
        let number = u32::try_from(key >> 3).unwrap_or(0);
        match key & 7 {
            0 => {
                varint(bytes, &mut at)?;
            }
            1 => skip(bytes, &mut at, 8)?,
            5 => skip(bytes, &mut at, 4)?,
            2 => {
                let len = varint(bytes, &mut at)?;
                let start = at;
                skip(bytes, &mut at, len)?;
                let field = shape.and_then(|s| s.fields.get(&number));
                match field {
                    Some(FieldShape {
                        name,
                        message: Some(message),
                    }) => {
                        let child = children.entry(number).or_insert_with(|| {
                            if path.is_empty() {
                                name.clone()
                            } else {
                                format!("{path}.{name}")
                            }
                        });
                        let count = bump(&mut out.elements, child, 1);
                        if let Some(limit) = limit_of(child)
                            && count > limit
                        {
                            return Err(BoundsError::TooManyElements {
                                field: child.clone(),
                                count,
                                limit,
                            });
                        }
                        walk(schema, message, &bytes[start..at], child, depth + 1, out)?;
                        if out.estimated_bytes > MAX_DECODED {
                            return Ok(());
                        }
                    }
                    // Strings, bytes and packed scalars: their length, and
                    // a slot each (a repeated string costs its String).
                    _ => {
                        out.estimated_bytes = out
                            .estimated_bytes
                            .saturating_add(len)
                            .saturating_add(BYTES_PER_FIELD);
                    }
                }
            }
            other => {
                return Err(BoundsError::Malformed(format!(
                    "wire type {other} (groups are not used) at {path}"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::v1 as sched;

    fn varint_bytes(mut value: u64, out: &mut Vec<u8>) {
        while value >= 0x80 {
            out.push((value as u8) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }

    /// A SolveRequest of `count` copies of `pod`, encoded without holding
    /// the decoded pods (which is what is being guarded against).
    fn solve_with_pods(pod: &sched::Pod, count: usize) -> Vec<u8> {
        let one = pod.encode_to_vec();
        let mut element = vec![0x0a];
        varint_bytes(one.len() as u64, &mut element);
        element.extend_from_slice(&one);
        let mut cluster = Vec::with_capacity(element.len() * count);
        for _ in 0..count {
            cluster.extend_from_slice(&element);
        }
        let mut request = vec![0x0a];
        varint_bytes(cluster.len() as u64, &mut request);
        request.extend_from_slice(&cluster);
        request
    }

    #[test]
    fn elements_are_counted_per_field_path() {
        let pod = sched::Pod {
            name: "a".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let bytes = solve_with_pods(&pod, 3);
        let decoded = sched::SolveRequest::decode(bytes.as_slice()).expect("valid");
        assert_eq!(decoded.cluster.map(|c| c.pending_pods.len()), Some(3));
        let measured = measure("karpenter.scheduler.v1.SolveRequest", &bytes).expect("measured");
        assert_eq!(measured.elements.get("cluster.pending_pods"), Some(&3));
        assert_eq!(measured.elements.get("cluster"), Some(&1));
        assert!(check("karpenter.scheduler.v1.SolveRequest", &bytes).is_ok());
    }

    #[test]
    fn megabytes_of_empty_pods_are_refused_before_decoding() {
        // 4 MB of empty pending pods (2 bytes each on the wire): past the
        // field's limit.
        let bytes = solve_with_pods(&sched::Pod::default(), 2_000_000);
        assert!(bytes.len() < 4_200_000);
        assert!(check("karpenter.scheduler.v1.SolveRequest", &bytes).is_err());
        // Fewer, within the field's limit, but still amplifying hundreds
        // of times: refused for what decoding them would take.
        let bytes = solve_with_pods(&sched::Pod::default(), 400_000);
        let refused = check("karpenter.scheduler.v1.SolveRequest", &bytes);
        assert!(
            matches!(&refused, Err(BoundsError::Amplified { field, .. }) if field == "cluster.pending_pods"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_field_over_its_limit_is_named() {
        let pod = sched::Pod {
            name: "a-pod-with-a-name-long-enough-to-be-real".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let bytes = solve_with_pods(&pod, 500_001);
        assert_eq!(
            check("karpenter.scheduler.v1.SolveRequest", &bytes),
            Err(BoundsError::TooManyElements {
                field: "cluster.pending_pods".into(),
                count: 500_001,
                limit: 500_000
            })
        );
    }

    #[test]
    fn broken_bytes_are_malformed_not_a_panic() {
        for bytes in [
            &[0x0a, 0xff][..],
            &[0x0a, 0x05, 0x01][..],
            &[0x0b][..],
            &[0x80; 12][..],
        ] {
            assert!(matches!(
                check("karpenter.scheduler.v1.SolveRequest", bytes),
                Err(BoundsError::Malformed(_))
            ));
        }
    }
}
