//! Kubernetes' protobuf request bodies, decoded into the JSON objects they
//! stand for. Typed clients (`kubectl create deployment`, `kubectl run`,
//! `kubectl drain`'s evictions, client-go) send them.
//!
//! ```text
//!   "k8s\0" + runtime.Unknown{ typeMeta{apiVersion, kind}, raw }
//!        raw ──(descriptor of <group>.<version>.<Kind>)──▶ DynamicMessage ──▶ JSON
//! ```
//!
//! The schemas are Kubernetes' own `generated.proto` files (see
//! `proto/README.md`), compiled at build time; a few apimachinery messages
//! have a JSON form of their own (Quantity, Time, IntOrString, raw JSON).

use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage as _,
    Value as ProtoValue,
};
use serde_json::{Map, Value, json};

use super::store::ApiError;

/// The magic prefix of a protobuf-encoded object.
pub const MAGIC: &[u8] = b"k8s\0";

const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes_descriptor.bin"));

/// Go's zero `time.Time`, which gogo-protobuf writes for an unset timestamp.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

fn pool() -> Option<&'static DescriptorPool> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).ok())
        .as_ref()
}

/// The protobuf package of an API version: `apps/v1` is `api.apps.v1`,
/// `coordination.k8s.io/v1` is `api.coordination.v1`,
/// `rbac.authorization.k8s.io/v1` is `api.rbac.v1`.
fn package(api_version: &str) -> Option<String> {
    match api_version.split_once('/') {
        None => Some(format!("api.core.{api_version}")),
        Some(("apiextensions.k8s.io", version)) => Some(format!(
            "apiextensions_apiserver.pkg.apis.apiextensions.{version}"
        )),
        Some(("meta.k8s.io", version)) => Some(format!("apimachinery.pkg.apis.meta.{version}")),
        Some(("rbac.authorization.k8s.io", version)) => Some(format!("api.rbac.{version}")),
        Some((group, version)) => {
            let short = group.strip_suffix(".k8s.io").unwrap_or(group);
            (!short.contains('.')).then(|| format!("api.{short}.{version}"))
        }
    }
}

/// The options kinds of meta/v1 that clients send under the version of
/// the resource they act on (client-go's `DeleteOptions` is `v1` for a
/// Secret, `apps/v1` for a Deployment).
const META_OPTIONS: &[&str] = &[
    "DeleteOptions",
    "CreateOptions",
    "UpdateOptions",
    "PatchOptions",
    "GetOptions",
    "ListOptions",
];

fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let pool = pool()?;
    let name = if META_OPTIONS.contains(&kind) {
        format!("apimachinery.pkg.apis.meta.v1.{kind}")
    } else {
        format!("{}.{kind}", package(api_version)?)
    };
    pool.get_message_by_name(&name)
}

/// Decodes a protobuf request body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(format!(
            "the body of the request could not be decoded as protobuf: {why}"
        ))
    };
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("no k8s magic prefix".into()))?;
    let unknown_type = pool()
        .and_then(|p| p.get_message_by_name("apimachinery.pkg.runtime.Unknown"))
        .ok_or_else(|| ApiError::internal("the protobuf schemas did not load"))?;
    let unknown = DynamicMessage::decode(unknown_type, rest).map_err(|e| bad(e.to_string()))?;
    let type_meta = match unknown.get_field_by_name("typeMeta").as_deref() {
        Some(ProtoValue::Message(m)) => m.clone(),
        _ => return Err(bad("no typeMeta".into())),
    };
    let text = |m: &DynamicMessage, name: &str| {
        m.get_field_by_name(name)
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let api_version = text(&type_meta, "apiVersion");
    let kind = text(&type_meta, "kind");
    let encoding = text(&unknown, "contentEncoding");
    if !encoding.is_empty() {
        return Err(ApiError::unsupported_media(format!(
            "protobuf content encoding {encoding:?} is not supported"
        )));
    }
    let descriptor = message_for(&api_version, &kind).ok_or_else(|| {
        ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - no protobuf schema for {api_version} {kind}; send application/json"
        ))
    })?;
    let raw = unknown
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let message = DynamicMessage::decode(descriptor, raw).map_err(|e| bad(e.to_string()))?;
    let mut object = message_json(&message);
    if let Value::Object(fields) = &mut object {
        fields.insert("apiVersion".into(), json!(api_version));
        fields.insert("kind".into(), json!(kind));
    }
    Ok(object)
}

/// A message as Kubernetes' JSON has it. gogo-protobuf writes every
/// non-pointer string even when empty, where JSON omits it, so empty
/// strings are dropped.
fn message_json(message: &DynamicMessage) -> Value {
    if let Some(special) = special_json(message) {
        return special;
    }
    let mut out = Map::new();
    for (field, value) in message.fields() {
        if let Some(v) = field_json(value) {
            out.insert(field.name().to_owned(), v);
        }
    }
    Value::Object(out)
}

fn field_json(value: &ProtoValue) -> Option<Value> {
    match value {
        ProtoValue::String(s) if s.is_empty() => None,
        ProtoValue::Message(m) if is_zero_time(m) => None,
        ProtoValue::List(items) if items.is_empty() => None,
        ProtoValue::Map(entries) if entries.is_empty() => None,
        ProtoValue::Map(entries) => {
            let mut out = Map::new();
            for (key, v) in entries {
                let key = match key {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                out.insert(key, scalar_json(v));
            }
            Some(Value::Object(out))
        }
        ProtoValue::List(items) => Some(Value::Array(items.iter().map(scalar_json).collect())),
        other => Some(scalar_json(other)),
    }
}

fn scalar_json(value: &ProtoValue) -> Value {
    match value {
        ProtoValue::Bool(b) => json!(b),
        ProtoValue::I32(n) => json!(n),
        ProtoValue::I64(n) => json!(n),
        ProtoValue::U32(n) => json!(n),
        ProtoValue::U64(n) => json!(n),
        ProtoValue::F32(n) => json!(n),
        ProtoValue::F64(n) => json!(n),
        ProtoValue::String(s) => json!(s),
        ProtoValue::Bytes(b) => json!(BASE64.encode(b)),
        ProtoValue::EnumNumber(n) => json!(n),
        ProtoValue::Message(m) => message_json(m),
        ProtoValue::List(items) => Value::Array(items.iter().map(scalar_json).collect()),
        ProtoValue::Map(_) => Value::Null,
    }
}

fn is_zero_time(message: &DynamicMessage) -> bool {
    matches!(
        message.descriptor().full_name(),
        "apimachinery.pkg.apis.meta.v1.Time" | "apimachinery.pkg.apis.meta.v1.MicroTime"
    ) && message
        .get_field_by_name("seconds")
        .and_then(|v| v.as_i64())
        .is_none_or(|s| s == GO_ZERO_TIME_SECONDS)
}

/// The apimachinery messages whose JSON is not an object of their fields.
fn special_json(message: &DynamicMessage) -> Option<Value> {
    let int = |name: &str| {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_i64().or_else(|| v.as_i32().map(i64::from)))
            .unwrap_or_default()
    };
    let text = |name: &str| {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let raw_json = |name: &str| {
        let raw = message
            .get_field_by_name(name)
            .and_then(|v| v.as_bytes().cloned())
            .unwrap_or_default();
        serde_json::from_slice(&raw).unwrap_or(Value::Null)
    };
    Some(match message.descriptor().full_name() {
        "apimachinery.pkg.api.resource.Quantity"
        | "apimachinery.pkg.api.resource.QuantityValue" => {
            json!(text("string"))
        }
        "apimachinery.pkg.apis.meta.v1.Time" => {
            let at = chrono::DateTime::from_timestamp(int("seconds"), 0)?;
            json!(at.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        }
        "apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let nanos = u32::try_from(int("nanos")).unwrap_or(0);
            let at = chrono::DateTime::from_timestamp(int("seconds"), nanos)?;
            json!(at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        }
        "apimachinery.pkg.apis.meta.v1.Duration" => {
            let nanos = u64::try_from(int("duration")).unwrap_or(0);
            json!(karpenter_core::duration::format_go_duration(
                std::time::Duration::from_nanos(nanos)
            ))
        }
        "apimachinery.pkg.util.intstr.IntOrString" => {
            if int("type") == 1 {
                json!(text("strVal"))
            } else {
                json!(int("intVal"))
            }
        }
        "apimachinery.pkg.runtime.RawExtension"
        | "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON" => raw_json("raw"),
        "apimachinery.pkg.apis.meta.v1.FieldsV1" => raw_json("Raw"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    fn message(name: &str) -> DynamicMessage {
        DynamicMessage::new(pool().unwrap().get_message_by_name(name).unwrap())
    }

    fn body(api_version: &str, kind: &str, raw: &DynamicMessage) -> Vec<u8> {
        let mut type_meta = message("apimachinery.pkg.runtime.TypeMeta");
        type_meta.set_field_by_name("apiVersion", ProtoValue::String(api_version.into()));
        type_meta.set_field_by_name("kind", ProtoValue::String(kind.into()));
        let mut unknown = message("apimachinery.pkg.runtime.Unknown");
        unknown.set_field_by_name("typeMeta", ProtoValue::Message(type_meta));
        unknown.set_field_by_name("raw", ProtoValue::Bytes(raw.encode_to_vec().into()));
        [MAGIC.to_vec(), unknown.encode_to_vec()].concat()
    }

    fn with(mut m: DynamicMessage, fields: Vec<(&str, ProtoValue)>) -> DynamicMessage {
        for (name, value) in fields {
            m.set_field_by_name(name, value);
        }
        m
    }

    fn quantity(s: &str) -> ProtoValue {
        ProtoValue::Message(with(
            message("apimachinery.pkg.api.resource.Quantity"),
            vec![("string", ProtoValue::String(s.into()))],
        ))
    }

    #[test]
    fn delete_options_read_under_the_resources_version() {
        let preconditions = with(
            message("apimachinery.pkg.apis.meta.v1.Preconditions"),
            vec![("uid", ProtoValue::String("u-1".into()))],
        );
        let options = with(
            message("apimachinery.pkg.apis.meta.v1.DeleteOptions"),
            vec![
                ("propagationPolicy", ProtoValue::String("Background".into())),
                ("preconditions", ProtoValue::Message(preconditions)),
            ],
        );
        for api_version in ["v1", "apps/v1"] {
            let json = decode(&body(api_version, "DeleteOptions", &options)).unwrap();
            assert_eq!(json["propagationPolicy"], "Background", "{api_version}");
            assert_eq!(json["preconditions"]["uid"], "u-1", "{api_version}");
        }
    }

    #[test]
    fn a_deployment_from_kubectl_create_reads_as_its_json() {
        let requests = ProtoValue::Map(
            [(MapKey::String("cpu".into()), quantity("1"))]
                .into_iter()
                .collect(),
        );
        let container = with(
            message("api.core.v1.Container"),
            vec![
                ("name", ProtoValue::String("pause".into())),
                ("image", ProtoValue::String("pause:3.7".into())),
                ("workingDir", ProtoValue::String(String::new())),
                (
                    "resources",
                    ProtoValue::Message(with(
                        message("api.core.v1.ResourceRequirements"),
                        vec![("requests", requests)],
                    )),
                ),
            ],
        );
        let labels = ProtoValue::Map(
            [(
                MapKey::String("app".into()),
                ProtoValue::String("inflate".into()),
            )]
            .into_iter()
            .collect(),
        );
        let zero_time = with(
            message("apimachinery.pkg.apis.meta.v1.Time"),
            vec![("seconds", ProtoValue::I64(GO_ZERO_TIME_SECONDS))],
        );
        let deployment = with(
            message("api.apps.v1.Deployment"),
            vec![
                (
                    "metadata",
                    ProtoValue::Message(with(
                        message("apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                        vec![
                            ("name", ProtoValue::String("inflate".into())),
                            ("namespace", ProtoValue::String(String::new())),
                            ("creationTimestamp", ProtoValue::Message(zero_time)),
                            ("labels", labels),
                        ],
                    )),
                ),
                (
                    "spec",
                    ProtoValue::Message(with(
                        message("api.apps.v1.DeploymentSpec"),
                        vec![
                            ("replicas", ProtoValue::I32(0)),
                            (
                                "template",
                                ProtoValue::Message(with(
                                    message("api.core.v1.PodTemplateSpec"),
                                    vec![(
                                        "spec",
                                        ProtoValue::Message(with(
                                            message("api.core.v1.PodSpec"),
                                            vec![(
                                                "containers",
                                                ProtoValue::List(vec![ProtoValue::Message(
                                                    container,
                                                )]),
                                            )],
                                        )),
                                    )],
                                )),
                            ),
                        ],
                    )),
                ),
            ],
        );
        let decoded = decode(&body("apps/v1", "Deployment", &deployment)).unwrap();
        assert_eq!(
            decoded,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "inflate", "labels": {"app": "inflate"}},
                "spec": {"replicas": 0, "template": {"spec": {"containers": [
                    {"name": "pause", "image": "pause:3.7", "resources": {"requests": {"cpu": "1"}}}
                ]}}}
            })
        );
    }

    #[test]
    fn int_or_string_and_bytes_keep_their_json_forms() {
        let int_or_string = |kind: i64, int: i32, s: &str| {
            ProtoValue::Message(with(
                message("apimachinery.pkg.util.intstr.IntOrString"),
                vec![
                    ("type", ProtoValue::I64(kind)),
                    ("intVal", ProtoValue::I32(int)),
                    ("strVal", ProtoValue::String(s.into())),
                ],
            ))
        };
        let pdb = with(
            message("api.policy.v1.PodDisruptionBudget"),
            vec![(
                "spec",
                ProtoValue::Message(with(
                    message("api.policy.v1.PodDisruptionBudgetSpec"),
                    vec![
                        ("minAvailable", int_or_string(0, 2, "")),
                        ("maxUnavailable", int_or_string(1, 0, "50%")),
                    ],
                )),
            )],
        );
        let decoded = decode(&body("policy/v1", "PodDisruptionBudget", &pdb)).unwrap();
        assert_eq!(
            decoded["spec"],
            json!({"minAvailable": 2, "maxUnavailable": "50%"})
        );
        let secret = with(
            message("api.core.v1.Secret"),
            vec![(
                "data",
                ProtoValue::Map(
                    [(
                        MapKey::String("k".into()),
                        ProtoValue::Bytes(b"hello".to_vec().into()),
                    )]
                    .into_iter()
                    .collect(),
                ),
            )],
        );
        let decoded = decode(&body("v1", "Secret", &secret)).unwrap();
        assert_eq!(decoded["data"], json!({"k": "aGVsbG8="}));
    }

    #[test]
    fn every_stored_builtin_kind_has_a_schema() {
        for info in crate::resources::builtins() {
            let version = &info.versions[0];
            let api_version = if info.group.is_empty() {
                version.clone()
            } else {
                format!("{}/{version}", info.group)
            };
            assert!(
                message_for(&api_version, &info.kind).is_some(),
                "{api_version} {}",
                info.kind
            );
        }
        let eviction = message_for("policy/v1", "Eviction").unwrap();
        assert!(eviction.get_field_by_name("deleteOptions").is_some());
    }

    #[test]
    fn garbage_and_unknown_kinds_are_refused_not_crashed_on() {
        assert!(decode(b"k8s\0\xff\xff\xff").is_err());
        assert!(decode(b"not protobuf").is_err());
        let widget = message("api.core.v1.ConfigMap");
        assert!(decode(&body("example.com/v1", "Widget", &widget)).is_err());
    }
}
