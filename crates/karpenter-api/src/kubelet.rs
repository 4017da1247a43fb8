//! `EC2NodeClass.spec.kubelet` as Karpenter v1.15 takes it: any field of the
//! kubelet's own configuration file, kept as written.
//!
//! ```text
//!   Kubelet (raw, what the API server stores: any object)
//!     └─ parse() ─▶ KubeletConfiguration (typed view)   or   KubeletErrors
//!          - every field the kubelet knows, of the JSON type it takes
//!          - registerWithTaints is Karpenter's own (from the claim's taints)
//!          - eviction maps: known signals, 0-100% or a quantity
//!          - evictionSoft and evictionSoftGracePeriod name the same signals
//!          - kubeReserved/systemReserved: cpu, memory, ephemeral-storage, pid
//!          - imageGC percents 0-100, high above low; counts not negative
//!          - maxPods: a count, or (NodeClassCEL) a CEL expression as a string;
//!            a reserved value that is not a quantity is an expression too
//! ```
//!
//! The API server accepts anything here since v1.15 (the CRD keeps unknown
//! fields); the provider reports what `parse` refuses as the node class's
//! `ValidationSucceeded=False` (`InvalidKubeletConfiguration`), and nodes of
//! that class are not launched. Nested objects (`authentication`,
//! `logging`, ...) are checked to be objects, not field by field.

use std::collections::BTreeMap;

pub use karpenter_core::kubelet::MAPPED_FIELDS;
use karpenter_core::kubelet::{EVICTION_SIGNALS, FieldKind, RESERVED_RESOURCES, field_kind};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::common::{empty, nullable};
use crate::duration::GoDuration;

/// The raw `spec.kubelet` object, as written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct Kubelet(pub Map<String, Value>);

impl JsonSchema for Kubelet {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Kubelet".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Kubelet configuration for the nodes: any field of the kubelet's configuration file (kubelet.config.k8s.io/v1beta1 KubeletConfiguration). Karpenter validates it and reports problems in the ValidationSucceeded condition. With the NodeClassCEL feature gate, maxPods and kubeReserved/systemReserved values may be CEL expressions.",
            "type": "object",
            "additionalProperties": { "x-kubernetes-preserve-unknown-fields": true },
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

/// The kubelet settings Karpenter reads, parsed from [`Kubelet`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// IP addresses of the cluster DNS servers.
    #[serde(
        default,
        rename = "clusterDNS",
        skip_serializing_if = "empty",
        deserialize_with = "nullable"
    )]
    pub cluster_dns: Vec<String>,
    /// The maximum number of pods per node, when given as a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    /// `maxPods` given as a CEL expression (NodeClassCEL).
    #[serde(skip)]
    pub max_pods_expression: Option<String>,
    /// Pods per CPU core; the effective limit is the lower of this and `maxPods`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    /// Reserved for the OS and system daemons; a value that is not a
    /// quantity is a CEL expression.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub system_reserved: BTreeMap<String, String>,
    /// Reserved for Kubernetes components; as `system_reserved`.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub eviction_hard: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub eviction_soft: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub eviction_soft_grace_period: BTreeMap<String, GoDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i32>,
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i32>,
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    /// Every other field, as written (AL2023 passes them to its kubelet).
    #[serde(skip)]
    pub passthrough: BTreeMap<String, Value>,
}

impl KubeletConfiguration {
    /// Whether any value is a CEL expression.
    pub fn has_expressions(&self) -> bool {
        !self.expressions().is_empty()
    }

    /// Each CEL expression with the field it is in (`spec.kubelet.maxPods`,
    /// `spec.kubelet.kubeReserved[cpu]`).
    pub fn expressions(&self) -> Vec<(String, &str)> {
        let mut out = Vec::new();
        if let Some(expression) = &self.max_pods_expression {
            out.push(("spec.kubelet.maxPods".to_owned(), expression.as_str()));
        }
        for (field, map) in [
            ("kubeReserved", &self.kube_reserved),
            ("systemReserved", &self.system_reserved),
        ] {
            for (key, value) in map {
                if is_expression(value) {
                    out.push((format!("spec.kubelet.{field}[{key}]"), value.as_str()));
                }
            }
        }
        out
    }

    /// The fields beyond [`MAPPED_FIELDS`] that are set.
    pub fn unmapped_fields(&self) -> Vec<&str> {
        self.passthrough.keys().map(String::as_str).collect()
    }
}

/// A reserved value that is not a quantity is a CEL expression.
pub fn is_expression(value: &str) -> bool {
    karpenter_core::quantity::canonical(value).is_err()
}

/// One thing [`Kubelet::parse`] refused: the field (`spec.kubelet.maxPods`,
/// `spec.kubelet.evictionHard[memory.available]`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletProblem {
    pub field: String,
    pub message: String,
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> KubeletProblem {
    KubeletProblem {
        field: field.into(),
        message: message.into(),
    }
}

/// What [`Kubelet::parse`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletErrors(pub Vec<KubeletProblem>);

impl std::fmt::Display for KubeletErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for KubeletErrors {}

impl Kubelet {
    /// The typed settings, or every problem found.
    pub fn parse(&self) -> Result<KubeletConfiguration, KubeletErrors> {
        let mut problems = Vec::new();
        let mut mapped = Map::new();
        let mut passthrough = BTreeMap::new();
        let mut max_pods_expression = None;
        for (name, value) in &self.0 {
            let field = format!("spec.kubelet.{name}");
            if name == "registerWithTaints" {
                problems.push(problem(
                    field,
                    "set by Karpenter from the NodeClaim's taints and startup taints; it may not be set here",
                ));
                continue;
            }
            if name == "maxPods" && value.is_string() {
                max_pods_expression = value.as_str().map(str::to_owned);
                continue;
            }
            let Some(kind) = field_kind(name) else {
                problems.push(problem(
                    field,
                    format!("unknown field {name:?}: not a kubelet configuration field"),
                ));
                continue;
            };
            if let Err(message) = check_kind(value, kind).and_then(|()| grace_periods(name, value))
            {
                problems.push(problem(field, message));
                continue;
            }
            if MAPPED_FIELDS.contains(&name.as_str()) {
                mapped.insert(name.clone(), value.clone());
            } else {
                passthrough.insert(name.clone(), value.clone());
            }
        }
        if !problems.is_empty() {
            return Err(KubeletErrors(problems));
        }
        let mut config: KubeletConfiguration = serde_json::from_value(Value::Object(mapped))
            .map_err(|e| KubeletErrors(vec![problem("spec.kubelet", e.to_string())]))?;
        config.max_pods_expression = max_pods_expression;
        config.passthrough = passthrough;
        let problems = semantic_problems(&config, &self.0);
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(KubeletErrors(problems))
        }
    }
}

/// `evictionSoftGracePeriod`'s values are non-negative durations.
fn grace_periods(name: &str, value: &Value) -> Result<(), String> {
    if name != "evictionSoftGracePeriod" {
        return Ok(());
    }
    let bad = value.as_object().into_iter().flatten().find(|(_, v)| {
        v.as_str()
            .is_none_or(|text| text.parse::<GoDuration>().is_err())
    });
    match bad {
        Some((signal, v)) => Err(format!(
            "[{signal}] {v} is not a non-negative duration (e.g. \"1m30s\")"
        )),
        None => Ok(()),
    }
}

/// Whether `value` is written as the kubelet reads a field of `kind`.
fn check_kind(value: &Value, kind: FieldKind) -> Result<(), String> {
    let each = |values: Option<Vec<&Value>>, test: fn(&Value) -> bool, what: &str| match values {
        Some(values) if values.iter().all(|v| test(v)) => Ok(()),
        _ => Err(format!("must be {what}")),
    };
    let list = value.as_array().map(|a| a.iter().collect::<Vec<_>>());
    let map = value.as_object().map(|m| m.values().collect::<Vec<_>>());
    let is_string_list = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
    match kind {
        FieldKind::Bool if value.is_boolean() => Ok(()),
        FieldKind::Bool => Err("must be a boolean".into()),
        FieldKind::Int if value.is_i64() || value.is_u64() => Ok(()),
        FieldKind::Int => Err("must be a whole number".into()),
        FieldKind::Float if value.is_number() => Ok(()),
        FieldKind::Float => Err("must be a number".into()),
        FieldKind::String if value.is_string() => Ok(()),
        FieldKind::String => Err("must be a string".into()),
        FieldKind::Duration => match value.as_str().map(str::parse::<GoDuration>) {
            Some(Ok(_)) => Ok(()),
            _ => Err("must be a duration (e.g. \"1m30s\")".into()),
        },
        FieldKind::StringList => each(list, Value::is_string, "a list of strings"),
        FieldKind::IntList => each(list, Value::is_i64, "a list of whole numbers"),
        FieldKind::StringMap => each(map, Value::is_string, "an object of strings"),
        FieldKind::BoolMap => each(map, Value::is_boolean, "an object of booleans"),
        FieldKind::StringListMap => each(map, is_string_list, "an object of string lists"),
        FieldKind::Object if value.is_object() => Ok(()),
        FieldKind::Object => Err("must be an object".into()),
        FieldKind::ObjectList => each(list, Value::is_object, "a list of objects"),
    }
}

/// The rules beyond JSON types that Karpenter holds the mapped fields to.
fn semantic_problems(k: &KubeletConfiguration, raw: &Map<String, Value>) -> Vec<KubeletProblem> {
    let mut problems = Vec::new();
    let mut refuse = |field: &str, message: String| {
        problems.push(problem(format!("spec.kubelet.{field}"), message));
    };
    let thresholds = [
        ("evictionHard", k.eviction_hard.clone()),
        ("evictionSoft", k.eviction_soft.clone()),
        (
            "evictionMinimumReclaim",
            string_map(raw, "evictionMinimumReclaim"),
        ),
    ];
    for (field, map) in &thresholds {
        for (signal, value) in map {
            if !EVICTION_SIGNALS.contains(&signal.as_str()) {
                refuse(
                    field,
                    format!("{signal:?} is not one of {}", EVICTION_SIGNALS.join(", ")),
                );
            } else if !is_threshold(value) {
                refuse(
                    &format!("{field}[{signal}]"),
                    format!(
                        "{value:?} is neither a percentage from 0% to 100% nor a non-negative quantity"
                    ),
                );
            }
        }
    }
    for signal in k.eviction_soft_grace_period.keys() {
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            refuse(
                "evictionSoftGracePeriod",
                format!("{signal:?} is not one of {}", EVICTION_SIGNALS.join(", ")),
            );
        }
    }
    for signal in k.eviction_soft.keys() {
        if !k.eviction_soft_grace_period.contains_key(signal) {
            refuse(
                "evictionSoft",
                format!("{signal:?} has no matching evictionSoftGracePeriod"),
            );
        }
    }
    for signal in k.eviction_soft_grace_period.keys() {
        if !k.eviction_soft.contains_key(signal) {
            refuse(
                "evictionSoftGracePeriod",
                format!("{signal:?} has no matching evictionSoft"),
            );
        }
    }
    for (field, map) in [
        ("kubeReserved", &k.kube_reserved),
        ("systemReserved", &k.system_reserved),
    ] {
        for (key, value) in map {
            if !RESERVED_RESOURCES.contains(&key.as_str()) {
                refuse(
                    field,
                    format!("{key:?} is not one of {}", RESERVED_RESOURCES.join(", ")),
                );
            } else if value.trim_start().starts_with('-') {
                refuse(
                    &format!("{field}[{key}]"),
                    "cannot be a negative resource quantity".into(),
                );
            } else if value.trim().is_empty() {
                refuse(&format!("{field}[{key}]"), "must not be empty".into());
            }
        }
    }
    for (field, value) in [
        (
            "imageGCHighThresholdPercent",
            k.image_gc_high_threshold_percent,
        ),
        (
            "imageGCLowThresholdPercent",
            k.image_gc_low_threshold_percent,
        ),
    ] {
        if value.is_some_and(|v| !(0..=100).contains(&v)) {
            refuse(field, "must be between 0 and 100".into());
        }
    }
    if let (Some(high), Some(low)) = (
        k.image_gc_high_threshold_percent,
        k.image_gc_low_threshold_percent,
    ) && high <= low
    {
        refuse(
            "imageGCHighThresholdPercent",
            "must be greater than imageGCLowThresholdPercent".into(),
        );
    }
    for (field, value) in [
        ("maxPods", k.max_pods),
        ("podsPerCore", k.pods_per_core),
        ("evictionMaxPodGracePeriod", k.eviction_max_pod_grace_period),
    ] {
        if value.is_some_and(|v| v < 0) {
            refuse(field, "must not be negative".into());
        }
    }
    if k.max_pods_expression
        .as_deref()
        .is_some_and(|e| e.trim().is_empty())
    {
        refuse("maxPods", "an expression must not be empty".into());
    }
    problems
}

/// The string object `field` of `raw` (already checked to be one).
fn string_map(raw: &Map<String, Value>, field: &str) -> BTreeMap<String, String> {
    raw.get(field)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// An eviction threshold: `0%` to `100%`, or a non-negative quantity.
fn is_threshold(value: &str) -> bool {
    match value.strip_suffix('%') {
        Some(percent) => percent
            .parse::<f64>()
            .is_ok_and(|p| (0.0..=100.0).contains(&p)),
        None => !value.starts_with('-') && karpenter_core::quantity::canonical(value).is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<KubeletConfiguration, KubeletErrors> {
        serde_json::from_value::<Kubelet>(value)
            .expect("an object")
            .parse()
    }

    fn fields(result: Result<KubeletConfiguration, KubeletErrors>) -> Vec<String> {
        result
            .expect_err("refused")
            .0
            .into_iter()
            .map(|p| p.field)
            .collect()
    }

    #[test]
    fn any_kubelet_field_of_the_right_type_is_taken() {
        let config = parse(json!({
            "maxPods": 58,
            "kubeReserved": {"cpu": "100m"},
            "shutdownGracePeriod": "30s",
            "featureGates": {"InPlacePodVerticalScaling": true},
            "logging": {"format": "json"},
            "cpuManagerPolicy": "static"
        }))
        .expect("valid");
        assert_eq!(config.max_pods, Some(58));
        assert_eq!(
            config.unmapped_fields(),
            [
                "cpuManagerPolicy",
                "featureGates",
                "logging",
                "shutdownGracePeriod"
            ]
        );
        assert!(!config.has_expressions());
    }

    #[test]
    fn what_the_kubelet_would_not_take_is_refused_naming_the_field() {
        assert_eq!(
            fields(parse(json!({"notAField": 1}))),
            ["spec.kubelet.notAField"]
        );
        assert_eq!(
            fields(parse(
                json!({"shutdownGracePeriod": 30, "cgroupsPerQOS": "yes"})
            )),
            [
                "spec.kubelet.shutdownGracePeriod",
                "spec.kubelet.cgroupsPerQOS"
            ]
        );
        assert_eq!(
            fields(parse(json!({"registerWithTaints": []}))),
            ["spec.kubelet.registerWithTaints"]
        );
        assert_eq!(
            fields(parse(
                json!({"evictionHard": {"memory.available": "5%' && reboot '"}})
            )),
            ["spec.kubelet.evictionHard[memory.available]"]
        );
        assert_eq!(
            fields(parse(json!({"evictionHard": {"cpu.available": "5%"}}))),
            ["spec.kubelet.evictionHard"]
        );
        assert_eq!(
            fields(parse(json!({"evictionSoft": {"memory.available": "5%"}}))),
            ["spec.kubelet.evictionSoft"],
            "a soft threshold needs its grace period"
        );
        assert_eq!(
            fields(parse(
                json!({"evictionSoftGracePeriod": {"memory.available": "soon"}})
            )),
            ["spec.kubelet.evictionSoftGracePeriod"]
        );
        assert_eq!(
            fields(parse(
                json!({"kubeReserved": {"gpu": "1"}, "systemReserved": {"cpu": "-1"}})
            )),
            [
                "spec.kubelet.kubeReserved",
                "spec.kubelet.systemReserved[cpu]"
            ]
        );
        assert_eq!(
            fields(parse(
                json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60})
            )),
            ["spec.kubelet.imageGCHighThresholdPercent"]
        );
        assert_eq!(
            fields(parse(json!({"maxPods": -1}))),
            ["spec.kubelet.maxPods"]
        );
        assert_eq!(
            fields(parse(json!({"maxPods": " "}))),
            ["spec.kubelet.maxPods"]
        );
    }

    #[test]
    fn strings_where_numbers_or_quantities_go_are_expressions() {
        let config = parse(json!({
            "maxPods": "110",
            "kubeReserved": {"cpu": "100m", "memory": "max_pods * 11 + 255"}
        }))
        .expect("valid");
        assert_eq!(config.max_pods, None);
        let expressions: Vec<String> = config.expressions().into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            expressions,
            ["spec.kubelet.maxPods", "spec.kubelet.kubeReserved[memory]"],
            "even \"110\" is an expression in maxPods; a quantity is not"
        );
    }
}
