//! NodePools into wire node pools, ready only when their node class is.

use karpenter_api::{ConditionsExt as _, NodePool};
use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as pb;

use crate::fields::{self, FieldError};
use crate::{Mode, NodeClasses, ObjectError, Source};

pub(crate) fn node_pool(
    source: &Source<'_, NodePool>,
    classes: &NodeClasses,
    mode: Mode,
) -> Result<pb::NodePool, ObjectError> {
    let pool = source.object;
    let name = pool.metadata.name.clone().unwrap_or_default();
    let error = |e: FieldError| ObjectError {
        id: source.id,
        kind: "NodePool",
        namespace: String::new(),
        name: name.clone(),
        field: e.field,
        message: e.message,
    };
    if name.is_empty() {
        return Err(error(FieldError::new("metadata.name", "is required")));
    }
    let spec = &pool.spec;
    let template = &spec.template.spec;
    let weight = spec.weight.unwrap_or(0);
    if !(0..=100).contains(&weight) {
        return Err(error(FieldError::new(
            "spec.weight",
            format!("must be between 1 and 100, got {weight}"),
        )));
    }
    let class_ref = &template.node_class_ref;
    let class_ready = class_ready(classes, &class_ref.kind, &class_ref.name, mode);
    let pool_not_ready = pool.status.as_ref().is_some_and(|s| {
        s.conditions
            .condition(karpenter_api::CONDITION_READY)
            .is_some_and(|c| c.status == karpenter_api::ConditionStatus::False)
    });
    let disruption = &spec.disruption;
    use pb::disruption::ConsolidationPolicy;
    let budgets = disruption
        .budgets
        .iter()
        .map(|b| pb::Budget {
            nodes: b.nodes.clone(),
            schedule: b.schedule.clone().unwrap_or_default(),
            duration: b
                .duration
                .as_ref()
                .map(|d| fields::std_duration(d.as_std())),
            reasons: b
                .reasons
                .iter()
                .flatten()
                .map(|r| {
                    (match r {
                        karpenter_api::nodepool::DisruptionReason::Empty => {
                            pb::DisruptionReason::Empty
                        }
                        karpenter_api::nodepool::DisruptionReason::Underutilized => {
                            pb::DisruptionReason::Underutilized
                        }
                        karpenter_api::nodepool::DisruptionReason::Drifted => {
                            pb::DisruptionReason::Drifted
                        }
                    }) as i32
                })
                .collect(),
        })
        .collect();
    let usage = pool
        .status
        .as_ref()
        .map(|s| fields::resources(Some(&s.resources), "status.resources"))
        .transpose()
        .map_err(error)?
        .flatten();
    Ok(pb::NodePool {
        weight,
        requirements: fields::karpenter_requirements(&template.requirements),
        labels: spec.template.metadata.labels.clone(),
        taints: fields::karpenter_taints(&template.taints),
        startup_taints: fields::karpenter_taints(&template.startup_taints),
        limits: fields::resources(Some(&spec.limits), "spec.limits")
            .map_err(error)?
            .filter(|l| !l.quantities.is_empty()),
        usage,
        disruption: Some(pb::Disruption {
            consolidation_policy: match disruption.consolidation_policy {
                karpenter_api::nodepool::ConsolidationPolicy::WhenEmpty => {
                    ConsolidationPolicy::WhenEmpty
                }
                karpenter_api::nodepool::ConsolidationPolicy::WhenEmptyOrUnderutilized => {
                    ConsolidationPolicy::WhenEmptyOrUnderutilized
                }
            } as i32,
            consolidate_after: disruption.consolidate_after().map(fields::std_duration),
            budgets,
        }),
        expire_after: template.expire_after.as_std().map(fields::std_duration),
        termination_grace_period: template
            .termination_grace_period
            .as_ref()
            .map(|d| fields::std_duration(d.as_std())),
        node_class_ref: Some(pb::NodeClassReference {
            group: class_ref.group.clone(),
            kind: class_ref.kind.clone(),
            name: class_ref.name.clone(),
        }),
        // A pool being deleted, or a static one (`spec.replicas`, kept at
        // its size by its own controller), takes no pending pods.
        ready: !pool_not_ready
            && class_ready
            && pool.metadata.deletion_timestamp.is_none()
            && spec.replicas.is_none(),
        instance_type_catalog: String::new(),
        template_hash: pool
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::NODE_POOL_HASH))
            .cloned()
            .unwrap_or_default(),
        name,
    })
}

/// Whether a pool's node class lets it launch: a class of the served kind
/// must exist and be ready (in manifests, one not given counts as ready);
/// a class of another kind is another provider's, never ready here.
fn class_ready(classes: &NodeClasses, kind: &str, name: &str, mode: Mode) -> bool {
    if classes.kind.is_empty() {
        return true;
    }
    if kind != classes.kind {
        return mode == Mode::Manifests;
    }
    match classes.ready.get(name) {
        Some(ready) => *ready,
        None => mode == Mode::Manifests,
    }
}
