//! PodDisruptionBudgets, with the status the disruption controller would
//! compute when the object carries none (manifests).

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use karpenter_proto::scheduler::v1 as sched;

use crate::fields::{self, FieldError};
use crate::pod::namespace_of;
use crate::{ObjectError, Source};

/// Which status fields the object gave (the others are computed).
pub(crate) struct GivenStatus {
    allowed: bool,
    expected: bool,
}

fn text(value: &Option<IntOrString>) -> String {
    match value {
        None => String::new(),
        Some(IntOrString::Int(i)) => i.to_string(),
        Some(IntOrString::String(s)) => s.clone(),
    }
}

pub(crate) fn pdb(
    source: &Source<'_, PodDisruptionBudget>,
) -> Result<(sched::PodDisruptionBudget, GivenStatus), ObjectError> {
    let object = source.object;
    let namespace = namespace_of(&object.metadata);
    let (name, error) = crate::named(
        source.id,
        "PodDisruptionBudget",
        &namespace,
        &object.metadata,
    )?;
    let spec = object.spec.clone().unwrap_or_default();
    let min_available = text(&spec.min_available);
    let max_unavailable = text(&spec.max_unavailable);
    if !min_available.is_empty() && !max_unavailable.is_empty() {
        return Err(error(FieldError::new(
            "spec",
            "minAvailable and maxUnavailable are mutually exclusive",
        )));
    }
    for (field, value) in [
        ("spec.minAvailable", &min_available),
        ("spec.maxUnavailable", &max_unavailable),
    ] {
        if !value.is_empty() && int_or_percent(value, 100).is_none() {
            return Err(error(FieldError::new(
                field,
                format!("must be a non-negative integer or a percentage, got {value:?}"),
            )));
        }
    }
    let status = object.status.clone().unwrap_or_default();
    let budget = sched::PodDisruptionBudget {
        namespace: namespace.clone(),
        name: name.clone(),
        selector: fields::label_selector(spec.selector.as_ref(), "spec.selector")
            .map_err(&error)?,
        min_available,
        max_unavailable,
        disruptions_allowed: status.disruptions_allowed.unwrap_or(0),
        expected_pods: status.expected_pods.unwrap_or(0),
        unhealthy_pod_eviction_policy: spec
            .unhealthy_pod_eviction_policy
            .unwrap_or_else(|| "IfHealthyBudget".into()),
    };
    Ok((
        budget,
        GivenStatus {
            allowed: status.disruptions_allowed.is_some(),
            expected: status.expected_pods.is_some(),
        },
    ))
}

/// Computes the status fields the objects did not give to `budgets`, from
/// the snapshot's `pods`.
pub(crate) fn fill_status<'a>(
    budgets: &mut [sched::PodDisruptionBudget],
    pods: impl Iterator<Item = &'a sched::Pod>,
    given: &[GivenStatus],
) {
    let pods: Vec<&sched::Pod> = pods.collect();
    for (budget, status) in budgets.iter_mut().zip(given) {
        let (allowed, expected) = disruptions_allowed(budget, pods.iter().copied());
        if !status.allowed {
            budget.disruptions_allowed = allowed;
        }
        if !status.expected {
            budget.expected_pods = expected;
        }
    }
}

/// `N` or `P%` of `total`, a percentage rounded up (as the disruption
/// controller does); `None` when the text is neither.
pub fn int_or_percent(text: &str, total: i32) -> Option<i32> {
    match text.strip_suffix('%') {
        Some(p) => {
            let p: i64 = p.trim().parse().ok().filter(|p| *p >= 0)?;
            let scaled = (p * i64::from(total.max(0)) + 99) / 100;
            i32::try_from(scaled).ok()
        }
        None => text.trim().parse().ok().filter(|n: &i32| *n >= 0),
    }
}

/// What the disruption controller would put in a budget's status, from
/// pods: `(disruptionsAllowed, expectedPods)`.
///
/// The budget covers the pods of its namespace its selector matches (none
/// without a selector). Expected are those not being deleted; healthy are
/// those bound to a node, running (or with no phase) and not being deleted.
/// `minAvailable` (a percentage of the expected pods, rounded up) must stay
/// healthy; `maxUnavailable` (likewise) may be missing. Never below 0.
pub fn disruptions_allowed<'a>(
    budget: &sched::PodDisruptionBudget,
    pods: impl IntoIterator<Item = &'a sched::Pod>,
) -> (i32, i32) {
    let Some(selector) = budget
        .selector
        .as_ref()
        .and_then(|s| karpenter_proto::convert::label_selector("selector", s).ok())
    else {
        return (0, 0);
    };
    let (mut expected, mut healthy) = (0i32, 0i32);
    for pod in pods {
        if pod.namespace != budget.namespace || pod.terminating || !selector.matches(&pod.labels) {
            continue;
        }
        expected = expected.saturating_add(1);
        if !pod.node_name.is_empty() && matches!(pod.phase.as_str(), "Running" | "") {
            healthy = healthy.saturating_add(1);
        }
    }
    let desired_healthy = if !budget.min_available.is_empty() {
        int_or_percent(&budget.min_available, expected).unwrap_or(expected)
    } else if !budget.max_unavailable.is_empty() {
        expected.saturating_sub(int_or_percent(&budget.max_unavailable, expected).unwrap_or(0))
    } else {
        0
    };
    (healthy.saturating_sub(desired_healthy).max(0), expected)
}
