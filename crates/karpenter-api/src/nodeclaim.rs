//! `karpenter.sh/v1` NodeClaim: Karpenter's request for one node, created from a NodePool
//! template, fulfilled by a cloud provider, and tied to the Node that registers for it.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use crate::common::{
    Condition, ConditionsExt, NodeClassReference, NodeSelectorRequirementWithMinValues,
    ResourceList, Taint, empty, nullable,
};
use crate::crd::Column;
use crate::duration::{GoDuration, NillableDuration};
use crate::nodepool::{default_expire_after, expire_after_or_default};
use crate::schema::{
    self, LabelRuleTarget, add_rules, label_domain_rules, patterns, rule, with_subschema,
};

/// NodeClaim condition: the cloud provider created the instance.
pub const CONDITION_LAUNCHED: &str = "Launched";
/// NodeClaim condition: a Node with the instance's provider ID joined the cluster.
pub const CONDITION_REGISTERED: &str = "Registered";
/// NodeClaim condition: the Node is ready, startup taints are gone and resources are reported.
pub const CONDITION_INITIALIZED: &str = "Initialized";
/// NodeClaim condition: the node may be consolidated.
pub const CONDITION_CONSOLIDATABLE: &str = "Consolidatable";
/// NodeClaim condition: the node no longer matches its NodePool or node class.
pub const CONDITION_DRIFTED: &str = "Drifted";
/// NodeClaim condition: the NodeClaim is being terminated.
pub const CONDITION_TERMINATING: &str = "Terminating";
/// NodeClaim condition: the node is drained and the cloud provider was told
/// to delete its instance; the node no longer counts toward disruption
/// budgets.
pub const CONDITION_INSTANCE_TERMINATING: &str = "InstanceTerminating";
/// NodeClaim condition: the Node and the NodeClaim agree with each other.
pub const CONDITION_CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
/// Why a disruption command took the claim (`Underutilized`, `Empty`,
/// `Drifted`); cleared when the command is rolled back.
pub const CONDITION_DISRUPTION_REASON: &str = "DisruptionReason";

/// What `kubectl get nodeclaims` prints.
pub(crate) const PRINTER_COLUMNS: &[Column] = &[
    Column::text(
        "Type",
        ".metadata.labels.node\\.kubernetes\\.io/instance-type",
    ),
    Column::text("Capacity", ".metadata.labels.karpenter\\.sh/capacity-type"),
    Column::text("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone"),
    Column::text("Node", ".status.nodeName"),
    Column::READY,
    Column::AGE,
    Column::text("ImageID", ".status.imageID").wide(),
    Column::text("ID", ".status.providerID").wide(),
    Column::text("NodePool", ".metadata.labels.karpenter\\.sh/nodepool").wide(),
    Column::text("NodeClass", ".spec.nodeClassRef.name").wide(),
    Column::text(
        "Drifted",
        ".status.conditions[?(@.type==\"Drifted\")].status",
    )
    .wide(),
    Column::text(
        "Disruption",
        ".status.conditions[?(@.type==\"DisruptionReason\")].reason",
    )
    .wide(),
];

/// The desired state of a NodeClaim. It is immutable once created.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    status = "NodeClaimStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodeClaim is the Schema for the NodeClaims API"
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = node_claim_spec_rules)]
pub struct NodeClaimSpec {
    /// Taints put on the node.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub taints: Vec<Taint>,
    /// Taints present when the node starts and expected to be removed soon, usually by a DaemonSet.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub startup_taints: Vec<Taint>,
    /// Constraints on node labels the launched instance must satisfy.
    #[schemars(length(max = 100), transform = node_claim_requirements_rules)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The resources the node must at least provide.
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// The provider-specific node class the node is built from.
    pub node_class_ref: NodeClassReference,
    /// The longest Karpenter waits for pods to drain from the deleting node before deleting them
    /// forcibly, measured from the start of deletion. Unset means wait indefinitely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::DURATION))]
    pub termination_grace_period: Option<GoDuration>,
    /// How long after creation the node is replaced, or `Never`.
    #[serde(
        default = "default_expire_after",
        deserialize_with = "expire_after_or_default"
    )]
    #[schemars(extend("pattern" = patterns::DURATION_OR_NEVER))]
    pub expire_after: NillableDuration,
}

fn node_claim_spec_rules(schema: &mut Schema) {
    add_rules(schema, [rule("self == oldSelf", "spec is immutable")]);
}

fn node_claim_requirements_rules(schema: &mut Schema) {
    requirements_rules(schema, LabelRuleTarget::NodeClaimRequirementKey);
}

/// The CEL rules on a requirements list and on each requirement key.
pub(crate) fn requirements_rules(schema: &mut Schema, target: LabelRuleTarget) {
    add_rules(
        schema,
        [
            rule(
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            rule(
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            ),
            rule(
                "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
                "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            ),
        ],
    );
    with_subschema(schema, &["[]", "key"], |key| {
        key.insert(
            "x-kubernetes-validations".into(),
            label_domain_rules(target).into(),
        );
    });
}

impl NodeClaim {
    /// The NodePool this NodeClaim belongs to (its `karpenter.sh/nodepool` label).
    pub fn node_pool(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(crate::labels::NODE_POOL)
            .map(String::as_str)
    }

    /// A disruption command took this claim (its `DisruptionReason` is
    /// True): it is on its way out once its replacements are up, and a
    /// static pool counts it apart (Karpenter's pending disruption).
    pub fn is_pending_disruption(&self) -> bool {
        self.conditions().iter().any(|c| {
            c.type_ == CONDITION_DISRUPTION_REASON && c.status == crate::ConditionStatus::True
        })
    }

    /// The conditions, empty without a status.
    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }

    /// Whether the instance was created (`Launched` is `True`).
    pub fn is_launched(&self) -> bool {
        self.conditions().is_true(CONDITION_LAUNCHED)
    }

    /// Whether its Node joined the cluster (`Registered` is `True`).
    pub fn is_registered(&self) -> bool {
        self.conditions().is_true(CONDITION_REGISTERED)
    }

    /// Whether its Node is fully initialized (`Initialized` is `True`).
    pub fn is_initialized(&self) -> bool {
        self.conditions().is_true(CONDITION_INITIALIZED)
    }

    /// The provider ID from the status, once launched.
    pub fn provider_id(&self) -> Option<&str> {
        self.status.as_ref()?.provider_id.as_deref()
    }
}

impl NodeClaimSpec {
    /// How long after creation the node expires, or `None` for `Never`.
    pub fn expire_after(&self) -> Option<Duration> {
        self.expire_after.as_std()
    }
}

/// The resources a NodeClaim must provide.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// The minimum resources the node must have for the NodeClaim's pods.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "schema::resource_list")]
    pub requests: ResourceList,
}

impl ResourceRequirements {
    /// Whether no resources are requested.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// The observed state of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node that registered for this NodeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The cloud provider's ID of the instance (also the Node's `spec.providerID`).
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The image the instance runs.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The estimated full capacity of the node.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "schema::resource_list")]
    pub capacity: ResourceList,
    /// The estimated allocatable capacity of the node.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "schema::resource_list")]
    pub allocatable: ResourceList,
    /// Health and lifecycle signals.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub conditions: Vec<Condition>,
    /// The last time a pod was scheduled to or removed from the node (a pod going terminal or
    /// terminating counts as removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub last_pod_event_time: Option<Time>,
}
