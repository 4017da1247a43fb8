//! `karpenter.sh/v1` NodePool: a template for the nodes Karpenter may launch, with limits,
//! a scheduling weight and disruption settings.

use std::collections::BTreeMap;
use std::time::Duration;

use karpenter_core::labels::{self, LabelRules};
use kube::CustomResource;
use kube::core::DynamicObject;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};

use crate::common::{
    CONDITION_READY, Condition, ConditionsExt, NodeClassReference, NodeSelectorOperator,
    NodeSelectorRequirementWithMinValues, ResourceList, Taint, empty, nullable,
};
use crate::crd::Column;
use crate::duration::{GoDuration, NillableDuration};
use crate::nodeclaim::{NodeClaimSpec, ResourceRequirements, requirements_rules};
use crate::schema::{self, LabelRuleTarget, add_rules, label_domain_rules, patterns, rule};

/// NodePool condition: the NodePool passed the runtime validation.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// NodePool condition: the referenced node class exists and is ready.
pub const CONDITION_NODE_CLASS_READY: &str = "NodeClassReady";
/// NodePool condition: nodes launched from this NodePool register successfully.
pub const CONDITION_NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

/// Default node lifetime before expiry (`expireAfter`).
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";
/// Default disruption budget (`nodes`).
pub const DEFAULT_BUDGET_NODES: &str = "10%";

/// What `kubectl get nodepools` prints.
pub(crate) const PRINTER_COLUMNS: &[Column] = &[
    Column::text("NodeClass", ".spec.template.spec.nodeClassRef.name"),
    Column::text("Nodes", ".status.nodes"),
    Column::READY,
    Column::AGE,
    Column::integer("Weight", ".spec.weight").wide(),
    Column::text("CPU", ".status.resources.cpu").wide(),
    Column::text("Memory", ".status.resources.memory").wide(),
];

/// The desired state of a NodePool.
///
/// A NodePool launches nodes for pods that cannot be scheduled. Node properties come from the
/// template combined with the pods' scheduling constraints; one NodePool can launch many
/// different instance types.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    status = "NodePoolStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodePool is the Schema for the NodePools API",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = node_pool_spec_rules)]
pub struct NodePoolSpec {
    /// The template for the NodeClaims this NodePool launches. Launched NodeClaims are usually
    /// narrower than the template, because pod constraints are added to it.
    pub template: NodeClaimTemplate,
    /// When and how fast Karpenter may disrupt (consolidate, expire, replace) this NodePool's nodes.
    #[serde(default, deserialize_with = "nullable")]
    #[schemars(extend("default" = { "consolidateAfter": "0s" }))]
    pub disruption: Disruption,
    /// Upper bounds on the total resources of this NodePool's nodes. On a static NodePool only
    /// `nodes` may be set.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "schema::resource_list")]
    pub limits: ResourceList,
    /// Scheduling priority: NodePools with a higher weight are tried first; an unset weight
    /// counts as 0. Not supported on static NodePools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Alpha: the fixed number of nodes of a static NodePool. When set, the NodePool keeps this
    /// many nodes regardless of pending pods, ignores consolidation settings, and accepts only
    /// `limits.nodes`. A NodePool cannot switch between static and dynamic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

fn node_pool_spec_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "has(self.replicas) == has(oldSelf.replicas)",
                "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
            ),
            rule(
                "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
                "only 'limits.nodes' is supported on static NodePools",
            ),
            rule(
                "!has(self.replicas) || !has(self.weight)",
                "'weight' is not supported on static NodePools",
            ),
        ],
    );
}

impl NodePool {
    /// The conditions, empty without a status.
    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }

    /// Whether the NodePool is `Ready`: its `Ready` condition, which the
    /// nodepool controller writes from [`NodePool::readiness`], is True.
    pub fn is_ready(&self) -> bool {
        self.conditions().is_ready()
    }

    /// Whether Karpenter provisions new nodes for the NodePool: Ready, not
    /// being deleted, and not static (a static pool's own controller keeps
    /// it at `replicas`; it takes no pending pods).
    pub fn provisions(&self) -> bool {
        self.is_ready() && self.takes_pending_pods()
    }

    /// Whether the NodePool may take pending pods at all, ready or not: it
    /// is not being deleted and not static.
    pub fn takes_pending_pods(&self) -> bool {
        self.metadata.deletion_timestamp.is_none() && !self.spec.is_static()
    }

    /// The dependents of the `Ready` condition, as the nodepool controller
    /// writes them: `ValidationSucceeded` under the cluster's label `rules`
    /// and `NodeClassReady` for the pool's node class object `class`
    /// (`None` when it does not exist).
    pub fn readiness(&self, class: Option<&DynamicObject>, rules: &LabelRules) -> Readiness {
        Readiness {
            validation: self.validate_runtime(rules),
            node_class: NodeClassReadiness::of(class),
        }
    }

    /// What the API server's schema cannot check about a NodePool, label
    /// keys judged by `rules` (the provider's domains included); `Err` names
    /// the field at fault.
    pub fn validate_runtime(&self, rules: &LabelRules) -> Result<(), String> {
        let template = &self.spec.template;
        for key in template.metadata.labels.keys() {
            if key == labels::NODE_POOL {
                return Err(format!(
                    "spec.template.metadata.labels: {key} is set by Karpenter and may not be set"
                ));
            }
            rules
                .check_allowed(key)
                .map_err(|e| format!("spec.template.metadata.labels[{key}]: {e}"))?;
        }
        let spec = &template.spec;
        let mut seen = std::collections::BTreeSet::new();
        for (field, taint) in spec
            .taints
            .iter()
            .map(|t| ("taints", t))
            .chain(spec.startup_taints.iter().map(|t| ("startupTaints", t)))
        {
            if !seen.insert((taint.key.clone(), taint.effect.as_str())) {
                return Err(format!(
                    "spec.template.spec.{field}: duplicate taint {}:{}",
                    taint.key,
                    taint.effect.as_str()
                ));
            }
        }
        for (i, requirement) in spec.requirements.iter().enumerate() {
            let field = format!("spec.template.spec.requirements[{i}]");
            validate_requirement(&field, requirement, rules)?;
        }
        Ok(())
    }
}

fn validate_requirement(
    field: &str,
    requirement: &NodeSelectorRequirementWithMinValues,
    rules: &LabelRules,
) -> Result<(), String> {
    if requirement.key == labels::NODE_POOL {
        return Err(format!(
            "{field}.key: {} may not be required",
            labels::NODE_POOL
        ));
    }
    rules
        .check_allowed(&requirement.key)
        .map_err(|e| format!("{field}.key: {e}"))?;
    if requirement.operator == NodeSelectorOperator::In {
        if requirement.values.is_empty() {
            return Err(format!(
                "{field}.values: operator In needs at least one value"
            ));
        }
        if let Some(min) = requirement.min_values
            && usize::try_from(min).unwrap_or(usize::MAX) > requirement.values.len()
        {
            return Err(format!(
                "{field}.minValues: {min} is more than the {} values given",
                requirement.values.len()
            ));
        }
    }
    Ok(())
}

/// A NodePool's readiness, before it is written as conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readiness {
    /// `ValidationSucceeded`: `Err` names the field at fault.
    pub validation: Result<(), String>,
    /// `NodeClassReady`.
    pub node_class: NodeClassReadiness,
}

impl Readiness {
    /// The root `Ready`: both dependents hold.
    pub fn is_ready(&self) -> bool {
        self.validation.is_ok() && self.node_class.ready
    }
}

/// `NodeClassReady` for a NodePool, as Karpenter's readiness controller
/// words it: the class exists, is not being deleted and reports `Ready`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeClassReadiness {
    /// Whether the class lets the pool launch.
    pub ready: bool,
    /// The condition's reason.
    pub reason: String,
    /// The condition's message.
    pub message: String,
}

impl NodeClassReadiness {
    /// The readiness of the class object `class` (any provider's kind: it is
    /// read through its `status.conditions`), `None` when it does not exist.
    pub fn of(class: Option<&DynamicObject>) -> Self {
        let not_ready = |reason: &str, message: &str| Self {
            ready: false,
            reason: reason.to_owned(),
            message: message.to_owned(),
        };
        let Some(class) = class else {
            return not_ready("NodeClassNotFound", "NodeClass not found on cluster");
        };
        if class.metadata.deletion_timestamp.is_some() {
            return not_ready("NodeClassTerminating", "NodeClass is Terminating");
        }
        let ready = class
            .data
            .pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .into_iter()
            .flatten()
            .find(|c| c["type"] == CONDITION_READY);
        match ready.and_then(|c| c["status"].as_str()) {
            Some("True") => Self {
                ready: true,
                reason: CONDITION_NODE_CLASS_READY.to_owned(),
                message: String::new(),
            },
            Some("False") => {
                let text = |key: &str| ready.and_then(|c| c[key].as_str()).unwrap_or_default();
                let reason = Some(text("reason"))
                    .filter(|r| !r.is_empty())
                    .unwrap_or("NodeClassNotReady");
                not_ready(reason, text("message"))
            }
            _ => not_ready("NodeClassReadinessUnknown", "Node Class Readiness Unknown"),
        }
    }
}

impl NodePoolSpec {
    /// The weight, with an unset weight counting as 0.
    pub fn weight_or_zero(&self) -> i32 {
        self.weight.unwrap_or(0)
    }

    /// `karpenter.sh/nodepool-hash`: Karpenter's hash of the template (see
    /// [`crate::hash`]).
    pub fn template_hash(&self) -> String {
        crate::hash::template_hash(&self.template)
    }

    /// Whether this is a static NodePool (`replicas` set).
    pub fn is_static(&self) -> bool {
        self.replicas.is_some()
    }

    /// `limits.nodes`, when set (and readable).
    pub fn node_limit(&self) -> Option<i64> {
        let quantity = self.limits.get("nodes")?;
        karpenter_core::quantity::parse_resource("nodes", &quantity.0).ok()
    }

    /// Karpenter's static provisioning: how many NodeClaims a static pool
    /// creates now, given `active` (its claims not being deleted) and `all`
    /// (its claims in any state): what `replicas` still lacks, within the
    /// room `limits.nodes` leaves. Zero for a dynamic pool.
    pub fn static_claims_to_create(&self, active: i64, all: i64) -> i64 {
        let Some(replicas) = self.replicas else {
            return 0;
        };
        let lacking = replicas.saturating_sub(active).max(0);
        let room = self
            .node_limit()
            .map_or(i64::MAX, |limit| limit.saturating_sub(all).max(0));
        lacking.min(room)
    }

    /// Karpenter's static deprovisioning: how many of a static pool's
    /// `active` claims are over `replicas`. Zero for a dynamic pool.
    pub fn static_claims_in_excess(&self, active: i64) -> i64 {
        self.replicas
            .map_or(0, |replicas| active.saturating_sub(replicas).max(0))
    }
}

/// How Karpenter may consolidate a NodePool's nodes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods are consolidated.
    WhenEmpty,
    /// Empty nodes and nodes whose pods fit elsewhere (or on a cheaper replacement) are consolidated.
    #[default]
    WhenEmptyOrUnderutilized,
    /// As `WhenEmptyOrUnderutilized`, but an underutilized node is consolidated only when
    /// the move saves enough of the pool's cost for the disruption it causes (its share of the
    /// pool's cost saved at least half its share of the pool's disruption cost).
    Balanced,
}

impl ConsolidationPolicy {
    /// The policy as the API spells it (`spec.disruption.consolidationPolicy`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConsolidationPolicy::WhenEmpty => "WhenEmpty",
            ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
            ConsolidationPolicy::Balanced => "Balanced",
        }
    }
}

/// The disruption method a budget applies to.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum DisruptionReason {
    /// Consolidation of nodes whose pods fit elsewhere.
    Underutilized,
    /// Consolidation of nodes without workload pods.
    Empty,
    /// Replacement of nodes that no longer match their NodePool or node class.
    Drifted,
    /// Node repair: nodes whose conditions match a repair policy (v1.15).
    Unhealthy,
}

/// Disruption settings of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long a node must have been consolidatable (no pod scheduled or removed) before
    /// Karpenter consolidates it, or `Never`; `0s` when unset (Karpenter v1.15). Ignored on
    /// static NodePools.
    #[serde(default = "no_consolidation_delay")]
    #[schemars(extend("pattern" = patterns::DURATION_OR_NEVER))]
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation may remove or replace. Ignored on static NodePools.
    #[serde(default, deserialize_with = "nullable")]
    pub consolidation_policy: ConsolidationPolicy,
    /// Limits on how many nodes may be disrupted at once. When several budgets are active the
    /// most restrictive one wins; without budgets, one budget of 10% applies.
    #[serde(default = "default_budgets", deserialize_with = "budgets_or_default")]
    #[schemars(length(max = 50), transform = budgets_rules)]
    pub budgets: Vec<Budget>,
}

/// `consolidateAfter` when a NodePool leaves it out: consolidate at once.
fn no_consolidation_delay() -> NillableDuration {
    NillableDuration::after(Duration::ZERO)
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: no_consolidation_delay(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        reasons: None,
        nodes: DEFAULT_BUDGET_NODES.to_string(),
        schedule: None,
        duration: None,
    }]
}

/// `budgets: null` gets the default budget, as the API server prunes the null and defaults it.
fn budgets_or_default<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Budget>, D::Error> {
    Ok(Option::deserialize(deserializer)?.unwrap_or_else(default_budgets))
}

fn budgets_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [rule(
            "self.all(x, has(x.schedule) == has(x.duration))",
            "'schedule' must be set with 'duration'",
        )],
    );
}

impl Disruption {
    /// The consolidation delay, or `None` for `Never`.
    pub fn consolidate_after(&self) -> Option<Duration> {
        self.consolidate_after.as_std()
    }
}

/// A limit on the number of NodeClaims of a NodePool that may be disrupted at once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// The disruption methods this budget limits; unset means all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// The most NodeClaims that may be disrupting at once: a count (`"5"`) or a percentage of
    /// the NodePool's nodes (`"10%"`, rounded up). Counts nodes being deleted as well.
    #[schemars(extend("pattern" = patterns::BUDGET_NODES, "default" = DEFAULT_BUDGET_NODES))]
    pub nodes: String,
    /// When the budget becomes active, in cron syntax (UTC, no time zones) or a macro such as
    /// `@daily`. Must be set together with `duration`; without both the budget is always active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::BUDGET_SCHEDULE))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit, in hours and minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::BUDGET_DURATION))]
    pub duration: Option<GoDuration>,
}

/// A budget's `nodes` value that is neither a count nor a percentage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid budget nodes {0:?}: expected a count like \"5\" or a percentage like \"10%\"")]
pub struct InvalidBudgetNodes(pub String);

impl Budget {
    /// Whether the budget limits the given disruption method.
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        self.reasons
            .as_ref()
            .is_none_or(|reasons| reasons.contains(&reason))
    }

    /// Whether the budget has no schedule and is therefore always active.
    pub fn is_always_active(&self) -> bool {
        self.schedule.is_none() && self.duration.is_none()
    }

    /// How many of `total_nodes` may be disrupted under this budget while it is active.
    /// Percentages round up, like Kubernetes `maxUnavailable`.
    ///
    /// # Errors
    /// Returns [`InvalidBudgetNodes`] if `nodes` is malformed (the CRD pattern prevents this).
    pub fn allowed_disruptions(&self, total_nodes: usize) -> Result<usize, InvalidBudgetNodes> {
        let invalid = || InvalidBudgetNodes(self.nodes.clone());
        match self.nodes.strip_suffix('%') {
            Some(percent) => {
                let percent: usize = percent.parse().map_err(|_| invalid())?;
                if percent > 100 {
                    return Err(invalid());
                }
                Ok((total_nodes * percent).div_ceil(100))
            }
            None => self.nodes.parse().map_err(|_| invalid()),
        }
    }
}

/// The template NodeClaims are created from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations copied onto the NodeClaims and their nodes.
    #[serde(
        default,
        skip_serializing_if = "TemplateMetadata::is_empty",
        deserialize_with = "nullable"
    )]
    pub metadata: TemplateMetadata,
    /// The NodeClaim specification.
    pub spec: NodeClaimTemplateSpec,
}

impl NodeClaimTemplate {
    /// The NodeClaim spec this template produces before pod constraints are added.
    pub fn to_node_claim_spec(&self) -> NodeClaimSpec {
        let spec = &self.spec;
        NodeClaimSpec {
            taints: spec.taints.clone(),
            startup_taints: spec.startup_taints.clone(),
            requirements: spec.requirements.clone(),
            resources: ResourceRequirements::default(),
            node_class_ref: spec.node_class_ref.clone(),
            termination_grace_period: spec.termination_grace_period.clone(),
            expire_after: spec.expire_after.clone(),
        }
    }
}

/// Labels and annotations of a NodeClaim template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels put on every node. Labels in restricted domains are rejected unless well known.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "template_labels_schema")]
    pub labels: BTreeMap<String, String>,
    /// Annotations put on every node.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "schema::string_map")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    /// Whether there are neither labels nor annotations.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

fn template_labels_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string", "maxLength": 63, "pattern": patterns::LABEL_VALUE },
        "maxProperties": 100,
        "x-kubernetes-validations": label_domain_rules(LabelRuleTarget::TemplateLabels),
    })
}

/// The NodeClaim spec inside a NodePool template (a NodeClaim spec without resource requests).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints put on the nodes.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub taints: Vec<Taint>,
    /// Taints present when a node starts and expected to be removed soon, usually by a DaemonSet.
    /// Pods need not tolerate them for Karpenter to launch nodes for them.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub startup_taints: Vec<Taint>,
    /// Constraints on node labels (instance type, zone, capacity type, ...), combined with the
    /// template labels and the pods' constraints.
    #[schemars(length(max = 100), transform = node_pool_requirements_rules)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The provider-specific node class. Its group and kind cannot change.
    #[schemars(transform = node_class_ref_immutability)]
    pub node_class_ref: NodeClassReference,
    /// The longest Karpenter waits for pods to drain from a deleting node before deleting them
    /// forcibly, measured from the start of deletion. This overrides PDBs and
    /// `karpenter.sh/do-not-disrupt` once reached; pods are deleted early enough to get their own
    /// termination grace period. Unset means wait indefinitely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::DURATION))]
    pub termination_grace_period: Option<GoDuration>,
    /// How long after creation a node is replaced, or `Never`.
    #[serde(
        default = "default_expire_after",
        deserialize_with = "expire_after_or_default"
    )]
    #[schemars(extend("pattern" = patterns::DURATION_OR_NEVER))]
    pub expire_after: NillableDuration,
}

pub(crate) fn default_expire_after() -> NillableDuration {
    NillableDuration::After(GoDuration::from_hours(720))
}

/// `expireAfter: null` gets the default, as the API server prunes the null and defaults it.
pub(crate) fn expire_after_or_default<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<NillableDuration, D::Error> {
    Ok(Option::deserialize(deserializer)?.unwrap_or_else(default_expire_after))
}

fn node_pool_requirements_rules(schema: &mut Schema) {
    requirements_rules(schema, LabelRuleTarget::NodePoolRequirementKey);
}

fn node_class_ref_immutability(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.group == oldSelf.group",
                "nodeClassRef.group is immutable",
            ),
            rule(
                "self.kind == oldSelf.kind",
                "nodeClassRef.kind is immutable",
            ),
        ],
    );
}

/// The observed state of a NodePool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// The total resources of the nodes this NodePool has launched.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "schema::resource_list")]
    pub resources: ResourceList,
    /// The number of nodes of this NodePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// The generation of the node class last seen; when it changes, the
    /// `NodeRegistrationHealthy` condition is reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// Health and readiness signals.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn static_spec(replicas: Option<i64>, node_limit: Option<&str>) -> NodePoolSpec {
        let mut spec: NodePoolSpec = serde_json::from_value(serde_json::json!({
            "template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}
        }))
        .expect("spec");
        spec.replicas = replicas;
        if let Some(limit) = node_limit {
            spec.limits.insert(
                "nodes".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(limit.to_owned()),
            );
        }
        spec
    }

    /// Ports of Karpenter's static provisioning and deprovisioning suites.
    #[test]
    fn static_pools_create_what_replicas_lack_within_limits_nodes() {
        assert_eq!(
            static_spec(None, None).static_claims_to_create(0, 0),
            0,
            "dynamic"
        );
        assert_eq!(static_spec(Some(2), None).static_claims_to_create(0, 0), 2);
        assert_eq!(static_spec(Some(3), None).static_claims_to_create(1, 1), 2);
        assert_eq!(static_spec(Some(1), None).static_claims_to_create(2, 2), 0);
        assert_eq!(static_spec(Some(0), None).static_claims_to_create(0, 0), 0);
        assert_eq!(
            static_spec(Some(3), Some("1")).static_claims_to_create(1, 1),
            0
        );
        assert_eq!(
            static_spec(Some(15), Some("10")).static_claims_to_create(3, 3),
            7
        );
        // Claims being deleted use up the limit but not the replicas.
        assert_eq!(
            static_spec(Some(3), Some("4")).static_claims_to_create(1, 3),
            1
        );
        assert_eq!(
            static_spec(Some(1000), None).static_claims_to_create(0, 0),
            1000
        );

        assert_eq!(static_spec(Some(2), None).static_claims_in_excess(4), 2);
        assert_eq!(static_spec(Some(3), None).static_claims_in_excess(2), 0);
        assert_eq!(static_spec(Some(0), None).static_claims_in_excess(3), 3);
        assert_eq!(static_spec(None, None).static_claims_in_excess(3), 0);
    }

    /// A NodePool `default` with `template`, for the tests of this crate.
    pub(crate) fn pool_with(template: serde_json::Value) -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": template}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn runtime_validation_names_the_field_at_fault() {
        use serde_json::json;
        let class =
            json!({"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"});
        let ok = pool_with(json!({"spec": {"nodeClassRef": class, "requirements": []}}));
        assert_eq!(ok.validate_runtime(&LabelRules::neutral()), Ok(()));
        let aws = LabelRules::neutral().with_provider(["karpenter.k8s.aws"], []);
        let custom = pool_with(json!({"spec": {"nodeClassRef": class,
            "requirements": [{"key": "karpenter.k8s.aws/custom", "operator": "Exists"}]}}));
        assert_eq!(
            custom.validate_runtime(&LabelRules::neutral()),
            Ok(()),
            "another provider's domain is a custom label here"
        );
        assert!(
            custom
                .validate_runtime(&aws)
                .is_err_and(|e| e.contains("karpenter.k8s.aws/custom is restricted"))
        );
        let labelled = pool_with(
            json!({"metadata": {"labels": {"karpenter.sh/nodepool": "x"}},
            "spec": {"nodeClassRef": class, "requirements": []}}),
        );
        assert!(
            labelled
                .validate_runtime(&LabelRules::neutral())
                .is_err_and(|e| e.starts_with("spec.template.metadata.labels"))
        );
        let duplicate = pool_with(json!({"spec": {"nodeClassRef": class, "requirements": [],
            "taints": [{"key": "a", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "a", "value": "x", "effect": "NoSchedule"}]}}));
        assert!(
            duplicate
                .validate_runtime(&LabelRules::neutral())
                .is_err_and(|e| e.contains("startupTaints: duplicate taint a:NoSchedule"))
        );
        let restricted = pool_with(json!({"spec": {"nodeClassRef": class,
            "requirements": [{"key": "karpenter.sh/custom", "operator": "Exists"}]}}));
        assert!(
            restricted
                .validate_runtime(&LabelRules::neutral())
                .is_err_and(|e| e.starts_with("spec.template.spec.requirements[0].key"))
        );
    }

    #[test]
    fn node_class_readiness_follows_the_class() {
        use serde_json::json;
        assert_eq!(NodeClassReadiness::of(None).reason, "NodeClassNotFound");
        let class = |status: serde_json::Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
                "metadata": {"name": "default"}, "status": status
            }))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let ready = class(json!({"conditions": [{"type": "Ready", "status": "True"}]}));
        assert!(NodeClassReadiness::of(Some(&ready)).ready);
        let not_ready = class(json!({"conditions": [{"type": "Ready", "status": "False",
            "reason": "SubnetsNotFound", "message": "no subnet"}]}));
        assert_eq!(
            NodeClassReadiness::of(Some(&not_ready)),
            NodeClassReadiness {
                ready: false,
                reason: "SubnetsNotFound".to_owned(),
                message: "no subnet".to_owned()
            }
        );
        assert_eq!(
            NodeClassReadiness::of(Some(&class(json!({})))).reason,
            "NodeClassReadinessUnknown"
        );
        let pool = pool_with(
            json!({"spec": {"nodeClassRef": {"group": "karpenter.kwok.sh",
            "kind": "KWOKNodeClass", "name": "default"}, "requirements": []}}),
        );
        assert!(
            pool.readiness(Some(&ready), &LabelRules::neutral())
                .is_ready()
        );
        assert!(
            !pool
                .readiness(Some(&not_ready), &LabelRules::neutral())
                .is_ready()
        );
        assert!(!pool.provisions(), "no Ready condition written yet");
    }

    fn budget(nodes: &str) -> Budget {
        Budget {
            reasons: None,
            nodes: nodes.into(),
            schedule: None,
            duration: None,
        }
    }

    #[test]
    fn budget_arithmetic() {
        assert_eq!(budget("10%").allowed_disruptions(10), Ok(1));
        assert_eq!(budget("10%").allowed_disruptions(11), Ok(2));
        assert_eq!(budget("10%").allowed_disruptions(0), Ok(0));
        assert_eq!(budget("5").allowed_disruptions(3), Ok(5));
        assert_eq!(budget("100%").allowed_disruptions(7), Ok(7));
        assert!(budget("ten").allowed_disruptions(3).is_err());
        assert!(budget("150%").allowed_disruptions(3).is_err());
    }

    #[test]
    fn budget_reasons() {
        let mut b = budget("1");
        assert!(b.applies_to(DisruptionReason::Drifted));
        b.reasons = Some(vec![DisruptionReason::Empty]);
        assert!(b.applies_to(DisruptionReason::Empty));
        assert!(!b.applies_to(DisruptionReason::Drifted));
    }

    #[test]
    fn disruption_defaults_match_the_crd() {
        let d = Disruption::default();
        assert_eq!(d.consolidate_after(), Some(Duration::ZERO));
        assert_eq!(
            d.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(d.budgets, vec![budget("10%")]);
        assert_eq!(default_expire_after().to_string(), "720h");
    }
}
