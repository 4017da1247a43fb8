//! NodePools into wire node pools, ready only when their node class is.

use karpenter_api::{ConditionsExt as _, NodePool};
use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as sched;

use crate::fields::{self, FieldError};
use crate::{Mode, NodeClasses, ObjectError, Source};

pub(crate) fn node_pool(
    source: &Source<'_, NodePool>,
    classes: &NodeClasses,
    mode: Mode,
) -> Result<sched::NodePool, ObjectError> {
    let pool = source.object;
    let (name, error) = crate::named(source.id, "NodePool", "", &pool.metadata)?;
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
    let ready = provisions(pool, classes, mode);
    let disruption = &spec.disruption;
    use sched::disruption::ConsolidationPolicy;
    let budgets = disruption
        .budgets
        .iter()
        .map(|b| sched::Budget {
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
                            sched::DisruptionReason::Empty
                        }
                        karpenter_api::nodepool::DisruptionReason::Underutilized => {
                            sched::DisruptionReason::Underutilized
                        }
                        karpenter_api::nodepool::DisruptionReason::Drifted => {
                            sched::DisruptionReason::Drifted
                        }
                        karpenter_api::nodepool::DisruptionReason::Unhealthy => {
                            sched::DisruptionReason::Unhealthy
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
        .map_err(&error)?
        .flatten();
    Ok(sched::NodePool {
        weight,
        requirements: fields::karpenter_requirements(&template.requirements),
        labels: spec.template.metadata.labels.clone(),
        taints: fields::karpenter_taints(&template.taints),
        startup_taints: fields::karpenter_taints(&template.startup_taints),
        limits: fields::resources(Some(&spec.limits), "spec.limits")
            .map_err(&error)?
            .filter(|l| !l.quantities.is_empty()),
        usage,
        disruption: Some(sched::Disruption {
            consolidation_policy: match disruption.consolidation_policy {
                karpenter_api::nodepool::ConsolidationPolicy::WhenEmpty => {
                    ConsolidationPolicy::WhenEmpty
                }
                karpenter_api::nodepool::ConsolidationPolicy::WhenEmptyOrUnderutilized => {
                    ConsolidationPolicy::WhenEmptyOrUnderutilized
                }
                karpenter_api::nodepool::ConsolidationPolicy::Balanced => {
                    ConsolidationPolicy::Balanced
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
        node_class_ref: Some(sched::NodeClassReference {
            group: class_ref.group.clone(),
            kind: class_ref.kind.clone(),
            name: class_ref.name.clone(),
        }),
        ready,
        instance_type_catalog: String::new(),
        template_hash: pool
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::NODE_POOL_HASH))
            .cloned()
            .unwrap_or_default(),
        replicas: pool.spec.replicas,
        name,
    })
}

/// Whether the pool takes pending pods. In a live cluster that is what its
/// controller wrote (`NodePool::provisions`), for a pool of the served node
/// class kind. Manifests have no controller: a pool is ready unless its
/// status says otherwise and its node class, when given, is ready; a pool
/// being deleted or static never is.
fn provisions(pool: &NodePool, classes: &NodeClasses, mode: Mode) -> bool {
    let class = &pool.spec.template.spec.node_class_ref;
    let served = classes.kind.is_empty() || class.kind == classes.kind;
    match mode {
        Mode::Live => served && pool.provisions(),
        Mode::Manifests => {
            let said_not_ready = pool
                .conditions()
                .condition(karpenter_api::CONDITION_READY)
                .is_some_and(|c| c.status == karpenter_api::ConditionStatus::False);
            let class_ready = !served || classes.ready.get(&class.name).copied().unwrap_or(true);
            !said_not_ready && class_ready && pool.takes_pending_pods()
        }
    }
}

/// The NodeClaim a static pool adds (Karpenter's static provisioning): its
/// template as it is (requirements, labels, taints, node class), no pods,
/// and no instance types chosen: the provider picks one at launch.
pub fn static_claim_plan(pool: &NodePool) -> sched::NodeClaimPlan {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let template = &pool.spec.template;
    let mut labels = template.metadata.labels.clone();
    labels.insert(labels::NODE_POOL.to_owned(), name.clone());
    let class_ref = &template.spec.node_class_ref;
    sched::NodeClaimPlan {
        node_pool: name,
        requirements: fields::karpenter_requirements(&template.spec.requirements),
        labels,
        taints: fields::karpenter_taints(&template.spec.taints),
        startup_taints: fields::karpenter_taints(&template.spec.startup_taints),
        node_class_ref: Some(sched::NodeClassReference {
            group: class_ref.group.clone(),
            kind: class_ref.kind.clone(),
            name: class_ref.name.clone(),
        }),
        ..Default::default()
    }
}
