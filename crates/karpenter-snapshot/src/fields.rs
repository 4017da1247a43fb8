//! Field-level conversions shared by every kind: quantities, requirements,
//! selectors, taints, times. Each error names the field's path.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use karpenter_core::requirements::Operator;
use karpenter_proto::convert::wire_operator;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

/// A field that cannot be understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, FieldError>;

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A resource list in wire units; `None` when absent.
pub fn resources(
    map: Option<&BTreeMap<String, Quantity>>,
    path: &str,
) -> Result<Option<types::ResourceList>> {
    let Some(map) = map else {
        return Ok(None);
    };
    let mut quantities = BTreeMap::new();
    for (name, Quantity(text)) in map {
        let value = karpenter_core::quantity::parse_resource(name, text).map_err(|e| {
            FieldError::new(join(path, name), format!("invalid quantity {text:?}: {e}"))
        })?;
        quantities.insert(name.clone(), value);
    }
    Ok(Some(types::ResourceList { quantities }))
}

pub fn operator(text: &str, path: &str) -> Result<types::Operator> {
    Operator::parse(text).map(wire_operator).ok_or_else(|| {
        FieldError::new(
            join(path, "operator"),
            format!("must be In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte, got {text:?}"),
        )
    })
}

pub fn requirement(r: &core::NodeSelectorRequirement, path: &str) -> Result<types::Requirement> {
    if r.key.is_empty() {
        return Err(FieldError::new(join(path, "key"), "is required"));
    }
    Ok(types::Requirement {
        key: r.key.clone(),
        operator: operator(&r.operator, path)? as i32,
        values: r.values.clone().unwrap_or_default(),
        min_values: None,
    })
}

pub fn requirements(
    list: Option<&Vec<core::NodeSelectorRequirement>>,
    path: &str,
) -> Result<Vec<types::Requirement>> {
    list.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| requirement(r, &format!("{path}[{i}]")))
        .collect()
}

pub fn node_selector_term(
    term: &core::NodeSelectorTerm,
    path: &str,
) -> Result<sched::NodeSelectorTerm> {
    Ok(sched::NodeSelectorTerm {
        match_expressions: requirements(
            term.match_expressions.as_ref(),
            &join(path, "matchExpressions"),
        )?,
        match_fields: requirements(term.match_fields.as_ref(), &join(path, "matchFields"))?,
    })
}

/// Node selector terms of objects other tools checked (PersistentVolumes):
/// an entry that cannot be used is left out rather than failing the pod.
pub fn lenient_terms(terms: &[core::NodeSelectorTerm]) -> Vec<sched::NodeSelectorTerm> {
    let lenient = |list: &Option<Vec<core::NodeSelectorRequirement>>| {
        list.iter()
            .flatten()
            .filter_map(|r| requirement(r, "").ok())
            .collect()
    };
    terms
        .iter()
        .map(|term| sched::NodeSelectorTerm {
            match_expressions: lenient(&term.match_expressions),
            match_fields: lenient(&term.match_fields),
        })
        .collect()
}

pub fn label_selector(
    selector: Option<&meta::LabelSelector>,
    path: &str,
) -> Result<Option<sched::LabelSelector>> {
    let Some(selector) = selector else {
        return Ok(None);
    };
    let mut match_expressions = Vec::new();
    let exprs = join(path, "matchExpressions");
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        let p = format!("{exprs}[{i}]");
        if !matches!(
            e.operator.as_str(),
            "In" | "NotIn" | "Exists" | "DoesNotExist"
        ) {
            return Err(FieldError::new(
                join(&p, "operator"),
                format!(
                    "must be In, NotIn, Exists or DoesNotExist, got {:?}",
                    e.operator
                ),
            ));
        }
        match_expressions.push(sched::LabelSelectorRequirement {
            key: e.key.clone(),
            operator: e.operator.clone(),
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(Some(sched::LabelSelector {
        match_labels: selector.match_labels.clone().unwrap_or_default(),
        match_expressions,
    }))
}

pub fn taint_effect(effect: &str, path: &str) -> Result<types::TaintEffect> {
    match effect {
        "NoSchedule" => Ok(types::TaintEffect::NoSchedule),
        "PreferNoSchedule" => Ok(types::TaintEffect::PreferNoSchedule),
        "NoExecute" => Ok(types::TaintEffect::NoExecute),
        other => Err(FieldError::new(
            path,
            format!("must be NoSchedule, PreferNoSchedule or NoExecute, got {other:?}"),
        )),
    }
}

/// A Node's taints.
pub fn node_taints(list: Option<&Vec<core::Taint>>, path: &str) -> Result<Vec<types::Taint>> {
    list.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let p = format!("{path}[{i}]");
            if t.key.is_empty() {
                return Err(FieldError::new(join(&p, "key"), "is required"));
            }
            Ok(types::Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: taint_effect(&t.effect, &join(&p, "effect"))? as i32,
            })
        })
        .collect()
}

/// A NodePool's or NodeClaim's taints.
pub fn karpenter_taints(list: &[karpenter_api::Taint]) -> Vec<types::Taint> {
    list.iter()
        .map(|t| types::Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: match t.effect {
                karpenter_api::TaintEffect::NoSchedule => types::TaintEffect::NoSchedule,
                karpenter_api::TaintEffect::PreferNoSchedule => {
                    types::TaintEffect::PreferNoSchedule
                }
                karpenter_api::TaintEffect::NoExecute => types::TaintEffect::NoExecute,
            } as i32,
        })
        .collect()
}

/// A NodePool's or NodeClaim's requirements.
pub fn karpenter_requirements(
    list: &[karpenter_api::NodeSelectorRequirementWithMinValues],
) -> Vec<types::Requirement> {
    list.iter()
        .map(|r| types::Requirement {
            key: r.key.clone(),
            operator: wire_operator(r.operator) as i32,
            values: r.values.clone(),
            min_values: r.min_values.and_then(|m| i32::try_from(m).ok()),
        })
        .collect()
}

pub fn timestamp(time: &meta::Time) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: time.0.as_second(),
        nanos: time.0.subsec_nanosecond(),
    }
}

pub fn optional_timestamp(time: Option<&meta::Time>) -> Option<prost_types::Timestamp> {
    time.map(timestamp)
}

pub fn std_duration(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

pub fn plus(t: &prost_types::Timestamp, d: &prost_types::Duration) -> prost_types::Timestamp {
    let mut seconds = t.seconds.saturating_add(d.seconds);
    let mut nanos = t.nanos.saturating_add(d.nanos);
    if nanos >= 1_000_000_000 {
        nanos -= 1_000_000_000;
        seconds = seconds.saturating_add(1);
    }
    prost_types::Timestamp { seconds, nanos }
}
