//! Between the wire types and `karpenter-core`'s domain types, for the
//! pieces every service shares: requirements, resources, taints,
//! tolerations, label selectors.
//!
//! ```text
//!   types::Requirement ──requirements(field, list)──▶ core Requirements   (bad input: InvalidField naming the path)
//!   core Requirements ──requirement_list──▶ Vec<types::Requirement>
//!   types::ResourceList ◀──────────────────────▶ core Resources
//!   sched::Pod ──pod_requests──▶ core Resources   (Kubernetes' effective requests)
//!   types::Taint / sched::Toleration ──────────────▶ core Taint / Toleration
//!   sched::LabelSelector ───────────────────────▶ core LabelSelector
//! ```

use std::collections::BTreeSet;

use karpenter_core::requirements::{Operator, Requirement, Requirements};
use karpenter_core::resources::{ResourceMap, Resources};
use karpenter_core::selector::{LabelSelector, SelectorOp};
use karpenter_core::taints::{Effect, Taint, Toleration};

use crate::scheduler::v1 as sched;
use crate::types::v1 as types;

/// A request field that cannot be understood, with its path
/// (`cluster.pending_pods[3].requirements[0].operator`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidField {
    pub field: String,
    pub message: String,
}

impl InvalidField {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// `Ok` when the string `name` of `field` is set; else the error `{field}.{name}: must not be
/// empty`.
pub fn non_empty(field: &str, name: &str, value: &str) -> Result<(), InvalidField> {
    if value.is_empty() {
        return Err(InvalidField::new(
            format!("{field}.{name}"),
            "must not be empty",
        ));
    }
    Ok(())
}

pub fn operator(field: &str, value: i32) -> Result<Operator, InvalidField> {
    Ok(match types::Operator::try_from(value) {
        Ok(types::Operator::In) => Operator::In,
        Ok(types::Operator::NotIn) => Operator::NotIn,
        Ok(types::Operator::Exists) => Operator::Exists,
        Ok(types::Operator::DoesNotExist) => Operator::DoesNotExist,
        Ok(types::Operator::Gt) => Operator::Gt,
        Ok(types::Operator::Lt) => Operator::Lt,
        Ok(types::Operator::Gte) => Operator::Gte,
        Ok(types::Operator::Lte) => Operator::Lte,
        _ => {
            return Err(InvalidField::new(
                format!("{field}.operator"),
                format!("unknown operator {value}"),
            ));
        }
    })
}

pub fn wire_operator(op: Operator) -> types::Operator {
    match op {
        Operator::In => types::Operator::In,
        Operator::NotIn => types::Operator::NotIn,
        Operator::Exists => types::Operator::Exists,
        Operator::DoesNotExist => types::Operator::DoesNotExist,
        Operator::Gt => types::Operator::Gt,
        Operator::Lt => types::Operator::Lt,
        Operator::Gte => types::Operator::Gte,
        Operator::Lte => types::Operator::Lte,
    }
}

pub fn requirement(field: &str, r: &types::Requirement) -> Result<Requirement, InvalidField> {
    non_empty(field, "key", &r.key)?;
    let op = operator(field, r.operator)?;
    let requirement = Requirement::new(&r.key, op, r.values.iter().cloned())
        .map_err(|e| InvalidField::new(format!("{field}.values"), e.to_string()))?;
    let min_values = match r.min_values {
        Some(min) if !(1..=50).contains(&min) => {
            return Err(InvalidField::new(
                format!("{field}.min_values"),
                format!("must be between 1 and 50, got {min}"),
            ));
        }
        Some(min) => {
            let min = min as usize;
            if op == Operator::In && r.values.len() < min {
                return Err(InvalidField::new(
                    format!("{field}.min_values"),
                    format!(
                        "requirement {} In has {} values, fewer than minValues {min}",
                        r.key,
                        r.values.len()
                    ),
                ));
            }
            Some(min)
        }
        None => None,
    };
    Ok(requirement.with_min_values(min_values))
}

pub fn requirements(
    field: &str,
    list: &[types::Requirement],
) -> Result<Requirements, InvalidField> {
    let mut result = Requirements::new();
    for (i, r) in list.iter().enumerate() {
        result.add(requirement(&format!("{field}[{i}]"), r)?);
    }
    Ok(result)
}

/// Requirements as wire expressions (a bounded requirement may need two).
pub fn requirement_list(requirements: &Requirements) -> Vec<types::Requirement> {
    let mut out = Vec::new();
    for requirement in requirements.iter() {
        for (index, (key, op, values)) in requirement.to_expressions().into_iter().enumerate() {
            out.push(types::Requirement {
                key,
                operator: wire_operator(op) as i32,
                values,
                min_values: if index == 0 {
                    requirement.min_values().map(|m| m as i32)
                } else {
                    None
                },
            });
        }
    }
    out
}

/// Quantities as they come, unchecked (an absent list is empty).
pub fn resources(list: Option<&types::ResourceList>) -> Resources {
    list.map_or_else(Resources::default, |list| {
        Resources::from_map(&list.quantities)
    })
}

/// Kubernetes' effective pod requests: the larger of (containers + sidecars)
/// and the peak during init, plus overhead. A resource with only a limit is
/// requested at its limit, as the API server defaults it.
pub fn pod_requests(pod: &sched::Pod) -> Resources {
    let mut total = effective(pod, |c| {
        let mut requests = resources(c.requests.as_ref());
        if let Some(limits) = &c.limits {
            for (name, quantity) in &limits.quantities {
                let has_request = c
                    .requests
                    .as_ref()
                    .is_some_and(|r| r.quantities.contains_key(name));
                if !has_request {
                    requests.set(name, *quantity);
                }
            }
        }
        requests
    });
    total.add(&resources(pod.overhead.as_ref()));
    total.pods = 1;
    total
}

/// Kubernetes' effective pod limits, summed as the requests are (the
/// kubelet's `PodLimits`): what a node's pods may use at most, where they
/// say so.
pub fn pod_limits(pod: &sched::Pod) -> Resources {
    let mut total = effective(pod, |c| resources(c.limits.as_ref()));
    // The overhead counts toward a resource only where a limit is set.
    let overhead = resources(pod.overhead.as_ref());
    for name in overhead.names().map(str::to_owned).collect::<Vec<_>>() {
        let limit = total.get(&name);
        if limit > 0 {
            total.set(&name, limit.saturating_add(overhead.get(&name)));
        }
    }
    total
}

/// One per-container quantity of a pod, as Kubernetes totals it: the larger
/// of (containers + sidecars) and the peak during init (the overhead is the
/// caller's).
fn effective(pod: &sched::Pod, container: impl Fn(&sched::Container) -> Resources) -> Resources {
    let mut total = Resources::default();
    for c in &pod.containers {
        total.add(&container(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in &pod.init_containers {
        let quantities = container(c);
        if c.restart_policy_always {
            total.add(&quantities);
            sidecars.add(&quantities);
            init_peak.max_with(&sidecars);
        } else {
            init_peak.max_with(&quantities.plus(&sidecars));
        }
    }
    total.max_with(&init_peak);
    total
}

/// Quantities, none of them negative.
pub fn checked_resources(
    field: &str,
    list: Option<&types::ResourceList>,
) -> Result<Resources, InvalidField> {
    if let Some(list) = list {
        for (name, quantity) in &list.quantities {
            if *quantity < 0 {
                return Err(InvalidField::new(
                    format!("{field}.quantities[{name}]"),
                    format!("must not be negative, got {quantity}"),
                ));
            }
        }
    }
    Ok(resources(list))
}

pub fn resource_list(resources: &Resources) -> types::ResourceList {
    types::ResourceList {
        quantities: resources.to_map(),
    }
}

/// Which of the catalogs (by `names`) a pool plans with: the one its
/// `instance_type_catalog` names, or the first when it names none.
pub fn pool_catalog_index<'a>(
    names: impl IntoIterator<Item = &'a str>,
    pool_catalog: &str,
) -> Option<usize> {
    let mut names = names.into_iter();
    if pool_catalog.is_empty() {
        return names.next().map(|_| 0);
    }
    names.position(|name| name == pool_catalog)
}

/// What a node of the type offers pods: capacity minus its overheads (see
/// `karpenter_core::resources::allocatable`).
pub fn allocatable(it: &types::InstanceType) -> ResourceMap {
    let empty = ResourceMap::new();
    let capacity = it.capacity.as_ref().map_or(&empty, |c| &c.quantities);
    let overheads = it.overhead.iter().flat_map(|o| {
        [&o.kube_reserved, &o.system_reserved, &o.eviction_threshold]
            .into_iter()
            .flatten()
            .map(|list| &list.quantities)
    });
    karpenter_core::resources::allocatable(capacity, overheads)
}

fn effect(field: &str, value: i32) -> Result<Effect, InvalidField> {
    match types::TaintEffect::try_from(value) {
        Ok(types::TaintEffect::NoSchedule) => Ok(Effect::NoSchedule),
        Ok(types::TaintEffect::PreferNoSchedule) => Ok(Effect::PreferNoSchedule),
        Ok(types::TaintEffect::NoExecute) => Ok(Effect::NoExecute),
        _ => Err(InvalidField::new(
            format!("{field}.effect"),
            format!("must be NoSchedule, PreferNoSchedule or NoExecute, got {value}"),
        )),
    }
}

pub fn wire_effect(effect: Effect) -> types::TaintEffect {
    match effect {
        Effect::NoSchedule => types::TaintEffect::NoSchedule,
        Effect::PreferNoSchedule => types::TaintEffect::PreferNoSchedule,
        Effect::NoExecute => types::TaintEffect::NoExecute,
    }
}

pub fn taints(field: &str, list: &[types::Taint]) -> Result<Vec<Taint>, InvalidField> {
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let field = format!("{field}[{i}]");
            non_empty(&field, "key", &t.key)?;
            Ok(Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: effect(&field, t.effect)?,
            })
        })
        .collect()
}

pub fn taint_list(taints: &[Taint]) -> Vec<types::Taint> {
    taints
        .iter()
        .map(|t| types::Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: wire_effect(t.effect) as i32,
        })
        .collect()
}

pub fn tolerations(
    field: &str,
    list: &[sched::Toleration],
) -> Result<Vec<Toleration>, InvalidField> {
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let field = format!("{field}[{i}]");
            let exists = matches!(
                sched::toleration::TolerationOperator::try_from(t.operator),
                Ok(sched::toleration::TolerationOperator::Exists)
            );
            let effect = if t.effect == 0 {
                None
            } else {
                Some(effect(&field, t.effect)?)
            };
            Ok(Toleration {
                key: t.key.clone(),
                exists,
                value: t.value.clone(),
                effect,
            })
        })
        .collect()
}

pub fn label_selector(
    field: &str,
    selector: &sched::LabelSelector,
) -> Result<LabelSelector, InvalidField> {
    let mut result = LabelSelector::default();
    for (key, value) in &selector.match_labels {
        result.require(key, value);
    }
    for (i, e) in selector.match_expressions.iter().enumerate() {
        let values: BTreeSet<String> = e.values.iter().cloned().collect();
        let op = match e.operator.as_str() {
            "In" => SelectorOp::In(values),
            "NotIn" => SelectorOp::NotIn(values),
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            other => {
                return Err(InvalidField::new(
                    format!("{field}.match_expressions[{i}].operator"),
                    format!("must be In, NotIn, Exists or DoesNotExist, got {other:?}"),
                ));
            }
        };
        result.expressions.push((e.key.clone(), op));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: types::Operator, values: &[&str]) -> types::Requirement {
        types::Requirement {
            key: key.to_owned(),
            operator: op as i32,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn requirements_round_trip_through_the_wire() {
        let list = vec![
            req(
                "kubernetes.io/arch",
                types::Operator::In,
                &["amd64", "arm64"],
            ),
            req(
                "karpenter.k8s.aws/instance-cpu",
                types::Operator::Gt,
                &["4"],
            ),
        ];
        let parsed = requirements("r", &list).unwrap_or_else(|e| panic!("{e}"));
        let again = requirements("r", &requirement_list(&parsed)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.to_string(), again.to_string());
    }

    #[test]
    fn bad_requirements_name_their_field() {
        let unknown = types::Requirement {
            operator: 42,
            ..req("k", types::Operator::In, &["v"])
        };
        assert_eq!(
            requirements("claim.requirements", &[unknown]).map_err(|e| e.field),
            Err("claim.requirements[0].operator".to_owned())
        );
        let no_value = req("k", types::Operator::Gt, &[]);
        assert_eq!(
            requirements("r", &[no_value]).map_err(|e| e.field),
            Err("r[0].values".to_owned())
        );
    }

    fn list(pairs: &[(&str, i64)]) -> Option<types::ResourceList> {
        Some(types::ResourceList {
            quantities: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        })
    }

    fn container(requests: &[(&str, i64)], limits: &[(&str, i64)]) -> sched::Container {
        sched::Container {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        }
    }

    /// The kubelet's PodLimits: containers and sidecars summed, the init
    /// peak if larger, the overhead only where a limit is set; a limit
    /// without a request is also the request.
    #[test]
    fn limits_are_totalled_as_kubernetes_totals_them() {
        let mut sidecar = container(&[("cpu", 100)], &[("cpu", 200)]);
        sidecar.restart_policy_always = true;
        let pod = sched::Pod {
            containers: vec![
                container(&[("cpu", 500)], &[("cpu", 1000), ("memory", 1 << 30)]),
                container(&[], &[("cpu", 1000)]),
            ],
            init_containers: vec![sidecar, container(&[], &[("cpu", 4000)])],
            overhead: list(&[("cpu", 50), ("memory", 1 << 20), ("ephemeral-storage", 7)]),
            ..Default::default()
        };
        let limits = pod_limits(&pod);
        // max(1000 + 1000 + 200, 4000 + 200) + 50 overhead.
        assert_eq!(limits.cpu, 4250);
        assert_eq!(limits.memory, (1 << 30) + (1 << 20));
        assert_eq!(limits.ephemeral_storage, 0, "no limit set: no overhead");
        assert_eq!(limits.pods, 0);
        let requests = pod_requests(&pod);
        // max(500 + 1000 (its limit) + 100, 4000 + 100) + 50.
        assert_eq!(requests.cpu, 4150);
        assert_eq!(requests.ephemeral_storage, 7);
        assert_eq!(requests.pods, 1);
    }
}
