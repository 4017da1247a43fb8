//! NodeClaims from the scheduler's plans, shaped as Karpenter's provisioner
//! shapes them, and the wire form of a NodeClaim for the provider.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_REGISTERED};
use karpenter_api::nodeclaim::{NodeClaimSpec, ResourceRequirements};
use karpenter_api::{
    NodeClaim, NodePool, NodeSelectorOperator, NodeSelectorRequirementWithMinValues,
};
use karpenter_core::labels;
use karpenter_core::requirements::Operator;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use crate::objects::conditions::Conditions;

/// Annotation recording that a claim's minValues were relaxed.
pub const MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

/// The node-class label of a claim: `<group>/<lower kind>` = name.
pub fn node_class_label(pool: &NodePool) -> (String, String) {
    let r = &pool.spec.template.spec.node_class_ref;
    (
        labels::node_class_label_key(&r.group, &r.kind),
        r.name.clone(),
    )
}

fn operator(op: i32) -> Option<NodeSelectorOperator> {
    Some(match karpenter_proto::convert::operator("", op).ok()? {
        Operator::In => NodeSelectorOperator::In,
        Operator::NotIn => NodeSelectorOperator::NotIn,
        Operator::Exists => NodeSelectorOperator::Exists,
        Operator::DoesNotExist => NodeSelectorOperator::DoesNotExist,
        Operator::Gt => NodeSelectorOperator::Gt,
        Operator::Lt => NodeSelectorOperator::Lt,
        Operator::Gte => NodeSelectorOperator::Gte,
        Operator::Lte => NodeSelectorOperator::Lte,
    })
}

/// A wire requirement in the CRD's terms.
fn requirement(r: &types::Requirement) -> Option<NodeSelectorRequirementWithMinValues> {
    Some(NodeSelectorRequirementWithMinValues {
        key: r.key.clone(),
        operator: operator(r.operator)?,
        values: r.values.clone(),
        min_values: r.min_values.map(i64::from),
    })
}

/// What a claim is built from besides its plan.
pub struct Template<'a> {
    pub pool: &'a NodePool,
    /// Labels the provider's instance types define (not written at creation:
    /// the provider sets them at launch).
    pub provider_well_known: &'a [String],
    /// The node class's hash annotations (provider keys), copied onto the claim.
    pub node_class_hash: BTreeMap<String, String>,
}

/// The NodeClaim a plan asks for (created with `generateName`).
pub fn node_claim(plan: &sched::NodeClaimPlan, template: &Template<'_>) -> NodeClaim {
    let pool = template.pool;
    let pool_name = pool.name_any();
    let spec = &pool.spec.template.spec;
    let well_known: BTreeSet<&str> = labels::NEUTRAL_WELL_KNOWN_LABELS
        .iter()
        .copied()
        .chain(template.provider_well_known.iter().map(String::as_str))
        .collect();

    let mut claim_labels = pool.spec.template.metadata.labels.clone();
    for (key, value) in &plan.labels {
        // Well-known labels come from the provider at launch; restricted
        // ones are never Karpenter's to set.
        let restricted =
            labels::in_restricted_domain(key, labels::NEUTRAL_RESTRICTED_LABEL_DOMAINS);
        if !well_known.contains(key.as_str())
            && !restricted
            && key != labels::REGISTERED
            && key != labels::INITIALIZED
        {
            claim_labels.insert(key.clone(), value.clone());
        }
    }
    claim_labels.insert(labels::NODE_POOL.to_owned(), pool_name.clone());
    let (class_key, class_name) = node_class_label(pool);
    claim_labels.insert(class_key, class_name);

    let mut annotations = pool.spec.template.metadata.annotations.clone();
    annotations.insert(labels::NODE_POOL_HASH.to_owned(), pool.spec.template_hash());
    annotations.insert(
        labels::NODE_POOL_HASH_VERSION.to_owned(),
        karpenter_api::hash::NODE_POOL_HASH_VERSION.to_owned(),
    );
    annotations.insert(
        MIN_VALUES_RELAXED.to_owned(),
        plan.min_values_relaxed.to_string(),
    );
    annotations.extend(template.node_class_hash.clone());
    use karpenter_api::nodeoverlay::{CAPACITY_OVERLAY_APPLIED, PRICE_OVERLAY_APPLIED};
    for (applied, key) in [
        (plan.price_overlay_applied, PRICE_OVERLAY_APPLIED),
        (plan.capacity_overlay_applied, CAPACITY_OVERLAY_APPLIED),
    ] {
        if applied {
            annotations.insert(key.to_owned(), "true".to_owned());
        }
    }

    // The instance types the plan allows, written sorted as upstream does.
    // A plan that names none (a static pool's template) keeps its own
    // instance-type requirement: the provider picks within it.
    let mut requirements: Vec<NodeSelectorRequirementWithMinValues> = plan
        .requirements
        .iter()
        .filter(|r| {
            let replaced = r.key == labels::INSTANCE_TYPE && !plan.instance_types.is_empty();
            !replaced
                && ![labels::HOSTNAME, labels::REGISTERED, labels::INITIALIZED]
                    .contains(&r.key.as_str())
        })
        .filter_map(requirement)
        .collect();
    if !plan.instance_types.is_empty() {
        let mut types = plan.instance_types.clone();
        types.sort();
        types.dedup();
        let min_values = plan
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .and_then(|r| r.min_values)
            .map(i64::from);
        requirements.push(NodeSelectorRequirementWithMinValues {
            key: labels::INSTANCE_TYPE.to_owned(),
            operator: NodeSelectorOperator::In,
            values: types,
            min_values,
        });
    }
    requirements.sort_by(|a, b| a.key.cmp(&b.key));

    let requests = quantities(plan.requests.as_ref());

    let owner = OwnerReference {
        api_version: "karpenter.sh/v1".to_owned(),
        kind: "NodePool".to_owned(),
        name: pool_name.clone(),
        uid: pool.uid().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };
    let mut claim = NodeClaim::new(
        "",
        NodeClaimSpec {
            taints: spec.taints.clone(),
            startup_taints: spec.startup_taints.clone(),
            requirements,
            resources: ResourceRequirements { requests },
            node_class_ref: spec.node_class_ref.clone(),
            termination_grace_period: spec.termination_grace_period.clone(),
            expire_after: spec.expire_after.clone(),
        },
    );
    claim.metadata = ObjectMeta {
        generate_name: Some(format!("{pool_name}-")),
        labels: Some(claim_labels),
        annotations: Some(annotations),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    };
    claim
}

/// The node class as the provider receives it.
pub fn wire_node_class(object: &DynamicObject) -> pv::NodeClass {
    pv::NodeClass {
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
        generation: object.meta().generation.unwrap_or(0),
        spec_json: object
            .data
            .get("spec")
            .map(|s| s.to_string())
            .unwrap_or_else(|| "{}".to_owned()),
        status_json: object
            .data
            .get("status")
            .map(|s| s.to_string())
            .unwrap_or_default(),
        annotations: object.annotations().clone(),
    }
}

/// A NodeClaim as the provider's `Create` receives it.
pub fn wire_claim(claim: &NodeClaim, node_class: Option<&DynamicObject>) -> pv::NodeClaim {
    let spec = &claim.spec;
    let requirements = karpenter_snapshot::karpenter_requirements(&spec.requirements);
    let quantities = spec
        .resources
        .requests
        .iter()
        .filter_map(|(name, Quantity(text))| {
            karpenter_core::quantity::parse_resource(name, text)
                .ok()
                .map(|v| (name.clone(), v))
        })
        .collect();
    pv::NodeClaim {
        name: claim.name_any(),
        node_pool: claim
            .labels()
            .get(labels::NODE_POOL)
            .cloned()
            .unwrap_or_default(),
        labels: claim.labels().clone(),
        annotations: claim.annotations().clone(),
        requirements,
        resources: Some(types::ResourceList { quantities }),
        taints: karpenter_snapshot::karpenter_taints(&spec.taints),
        startup_taints: karpenter_snapshot::karpenter_taints(&spec.startup_taints),
        node_class: node_class.map(wire_node_class),
        instance_types: Vec::new(),
        uid: claim.uid().unwrap_or_default(),
    }
}

/// A wire resource list as Kubernetes quantities.
pub fn quantities(list: Option<&types::ResourceList>) -> BTreeMap<String, Quantity> {
    list.map(|l| {
        l.quantities
            .iter()
            .map(|(name, value)| {
                (
                    name.clone(),
                    Quantity(karpenter_core::quantity::format(name, *value)),
                )
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The dependents of a claim's `Ready` condition.
pub const CLAIM_CONDITIONS: &[&str] = &[
    CONDITION_LAUNCHED,
    CONDITION_REGISTERED,
    CONDITION_INITIALIZED,
];

/// The time by which every pod of the claim's node is deleted, as written
/// in the claim's annotation (RFC 3339).
pub fn termination_deadline(claim: &NodeClaim) -> Option<k8s_openapi::jiff::Timestamp> {
    claim
        .annotations()
        .get(labels::NODE_CLAIM_TERMINATION_TIMESTAMP)
        .and_then(|t| t.parse().ok())
}

/// The claim's conditions, materialized as Karpenter does.
pub fn claim_conditions(claim: &mut NodeClaim) -> Conditions<'_> {
    let generation = claim.metadata.generation.unwrap_or(0);
    let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let status = claim.status.get_or_insert_with(Default::default);
    Conditions::new(
        &mut status.conditions,
        generation,
        created,
        CLAIM_CONDITIONS,
    )
}

/// How long since a condition last changed (zero when absent).
pub fn since_transition(claim: &NodeClaim, type_: &str) -> std::time::Duration {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| elapsed(c.last_transition_time.0))
        .unwrap_or_default()
}

/// Time since `at` (zero for a time in the future).
pub fn elapsed(at: Timestamp) -> std::time::Duration {
    let seconds = Timestamp::now().duration_since(at).as_secs_f64();
    std::time::Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or_default()
}

/// The zone and capacity type labels of an object, for metrics.
pub fn zone_and_capacity(
    object_labels: &std::collections::BTreeMap<String, String>,
) -> (String, String) {
    (
        object_labels
            .get(labels::TOPOLOGY_ZONE)
            .cloned()
            .unwrap_or_default(),
        object_labels
            .get(labels::CAPACITY_TYPE)
            .cloned()
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool() -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "uid": "pool-uid"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"example.com/note": "x"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "requirements": [],
                    "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                    "terminationGracePeriod": "1h"
                }
            }}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn req(key: &str, op: types::Operator, values: &[&str]) -> types::Requirement {
        types::Requirement {
            key: key.into(),
            operator: op as i32,
            values: values.iter().map(|v| (*v).into()).collect(),
            min_values: None,
        }
    }

    // A static pool's template names no instance types: the claim keeps the
    // pool's own instance-type requirement (found by the static drift e2e:
    // without it the provider launched any type and the claim drifted at
    // once).
    #[test]
    fn a_plan_without_instance_types_keeps_the_templates_requirement() {
        let plan = sched::NodeClaimPlan {
            node_pool: "default".into(),
            requirements: vec![req(labels::INSTANCE_TYPE, types::Operator::In, &["c-2x"])],
            ..Default::default()
        };
        let claim = node_claim(
            &plan,
            &Template {
                pool: &pool(),
                provider_well_known: &[],
                node_class_hash: BTreeMap::new(),
            },
        );
        let types = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .expect("the template's instance types");
        assert_eq!(types.values, ["c-2x"]);
    }

    #[test]
    fn a_plan_becomes_a_claim_shaped_as_karpenter_shapes_it() {
        let pool = pool();
        let plan = sched::NodeClaimPlan {
            node_pool: "default".into(),
            instance_types: vec!["m-4x".into(), "c-2x".into()],
            requirements: vec![
                req(labels::TOPOLOGY_ZONE, types::Operator::In, &["z1"]),
                req(
                    labels::INSTANCE_TYPE,
                    types::Operator::In,
                    &["c-2x", "m-4x", "x"],
                ),
                req("example.com/rack", types::Operator::In, &["r1"]),
                req("example.com/size", types::Operator::Gte, &["4"]),
            ],
            labels: [
                (labels::TOPOLOGY_ZONE.to_owned(), "z1".to_owned()),
                ("example.com/rack".to_owned(), "r1".to_owned()),
            ]
            .into_iter()
            .collect(),
            requests: Some(types::ResourceList {
                quantities: [("cpu".to_owned(), 1500), ("pods".to_owned(), 2)]
                    .into_iter()
                    .collect(),
            }),
            min_values_relaxed: true,
            ..Default::default()
        };
        let claim = node_claim(
            &plan,
            &Template {
                pool: &pool,
                provider_well_known: &[],
                node_class_hash: [(
                    "karpenter.kwok.sh/kwoknodeclass-hash".to_owned(),
                    "42".to_owned(),
                )]
                .into_iter()
                .collect(),
            },
        );
        assert_eq!(claim.metadata.generate_name.as_deref(), Some("default-"));
        let claim_labels = claim.labels();
        assert_eq!(claim_labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            claim_labels.get("example.com/rack").map(String::as_str),
            Some("r1")
        );
        assert_eq!(
            claim_labels.get(labels::NODE_POOL).map(String::as_str),
            Some("default")
        );
        assert_eq!(
            claim_labels
                .get("karpenter.kwok.sh/kwoknodeclass")
                .map(String::as_str),
            Some("default")
        );
        assert!(
            !claim_labels.contains_key(labels::TOPOLOGY_ZONE),
            "the provider sets it"
        );
        let annotations = claim.annotations();
        assert_eq!(
            annotations.get(MIN_VALUES_RELAXED).map(String::as_str),
            Some("true")
        );
        assert_eq!(
            annotations.get(labels::NODE_POOL_HASH),
            Some(&pool.spec.template_hash())
        );
        assert_eq!(
            annotations
                .get("karpenter.kwok.sh/kwoknodeclass-hash")
                .map(String::as_str),
            Some("42")
        );
        let owner = &claim.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.uid.as_str(),
                owner.block_owner_deletion
            ),
            ("NodePool", "pool-uid", Some(true))
        );
        let types = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .expect("instance types");
        assert_eq!(types.values, ["c-2x", "m-4x"], "the plan's options, sorted");
        let size = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == "example.com/size")
            .expect("bound");
        // The CRD takes Gte as it is since Karpenter v1.15.
        assert_eq!(
            (size.operator, size.values.clone()),
            (NodeSelectorOperator::Gte, vec!["4".to_owned()])
        );
        assert_eq!(
            claim.spec.resources.requests.get("cpu"),
            Some(&Quantity("1500m".into()))
        );
        assert_eq!(claim.spec.taints.len(), 1);
        assert!(claim.spec.termination_grace_period.is_some());

        let wire = wire_claim(&claim, None);
        assert_eq!(
            wire.resources.expect("resources").quantities.get("cpu"),
            Some(&1500)
        );
        assert_eq!(wire.node_pool, "default");
    }
}
