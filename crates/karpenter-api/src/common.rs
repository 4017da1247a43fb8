//! Types shared by NodePool, NodeClaim and EC2NodeClass: taints, requirements, node-class
//! references, status conditions and resource lists.
//!
//! These mirror the Kubernetes core types Karpenter embeds, with the extra validation Karpenter's
//! CRDs put on them (key patterns, enums, length limits). Conversions to and from the
//! `k8s-openapi` types are provided so the adapter can move values onto Nodes directly.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Deserializer, Serialize};

use crate::schema::{self, patterns, rule};

/// Resource name to quantity, e.g. `{"cpu": "2", "memory": "4Gi"}`.
pub type ResourceList = BTreeMap<String, Quantity>;

// The two helpers below are named short on purpose: together with `default` they fit one
// `#[serde(...)]` line, which the many optional list and map fields of the API types carry.

/// Deserializes `null` as the type's default, the way Go's JSON decoding treats `null` for
/// structs, maps and slices (manifests often contain `metadata:` or `labels:` with no value).
pub(crate) fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// For `skip_serializing_if`: whether a value is its type's default, i.e. an empty list or map,
/// which Karpenter's Go types leave out (`omitempty`).
pub(crate) fn empty<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The effect of a taint on pods that do not tolerate it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum TaintEffect {
    /// New pods that do not tolerate the taint are not scheduled.
    NoSchedule,
    /// The scheduler tries to avoid placing pods that do not tolerate the taint.
    PreferNoSchedule,
    /// Pods that do not tolerate the taint are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The effect as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// A taint Karpenter puts on the nodes it launches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key, a qualified name such as `example.com/dedicated`.
    #[schemars(length(min = 1), extend("pattern" = patterns::QUALIFIED_NAME))]
    pub key: String,
    /// The taint value; omitted for key-only taints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::QUALIFIED_NAME))]
    pub value: Option<String>,
    /// What happens to pods that do not tolerate the taint.
    pub effect: TaintEffect,
    /// When the taint was added; only meaningful for `NoExecute` taints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub time_added: Option<Time>,
}

impl Taint {
    /// A taint without a value.
    pub fn new(key: impl Into<String>, effect: TaintEffect) -> Self {
        Self {
            key: key.into(),
            value: None,
            effect,
            time_added: None,
        }
    }

    /// Whether two taints have the same key, value and effect (the time is ignored), the way the
    /// Kubernetes scheduler compares them.
    pub fn matches(&self, other: &Taint) -> bool {
        self.key == other.key
            && self.value.as_deref().unwrap_or("") == other.value.as_deref().unwrap_or("")
            && self.effect == other.effect
    }

    /// `karpenter.sh/disrupted:NoSchedule`, put on nodes that are being disrupted.
    pub fn disrupted() -> Self {
        Self::new(crate::labels::DISRUPTED_TAINT_KEY, TaintEffect::NoSchedule)
    }

    /// `karpenter.sh/unregistered:NoExecute`, put on nodes until they register.
    pub fn unregistered() -> Self {
        Self::new(
            crate::labels::UNREGISTERED_TAINT_KEY,
            TaintEffect::NoExecute,
        )
    }
}

impl From<Taint> for core::Taint {
    fn from(t: Taint) -> Self {
        core::Taint {
            key: t.key,
            value: t.value,
            effect: t.effect.as_str().to_string(),
            time_added: t.time_added,
        }
    }
}

/// A Kubernetes taint whose effect is not one Karpenter accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown taint effect {0:?}; expected NoSchedule, PreferNoSchedule or NoExecute")]
pub struct UnknownTaintEffect(pub String);

impl TryFrom<core::Taint> for Taint {
    type Error = UnknownTaintEffect;

    fn try_from(t: core::Taint) -> Result<Self, Self::Error> {
        let effect = match t.effect.as_str() {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            other => return Err(UnknownTaintEffect(other.to_string())),
        };
        Ok(Self {
            key: t.key,
            value: t.value.filter(|v| !v.is_empty()),
            effect,
            time_added: t.time_added,
        })
    }
}

/// How a requirement relates its key to its values; the requirement
/// algebra's operator, written into objects as its name.
pub use karpenter_core::requirements::{Operator as NodeSelectorOperator, UnknownOperator};

/// A node selector requirement plus `minValues`: the key must take one of the values, and the
/// scheduler must keep at least `minValues` distinct values available (instance-type flexibility).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the requirement constrains.
    #[schemars(length(max = 316), extend("pattern" = patterns::QUALIFIED_NAME))]
    pub key: String,
    /// How the key relates to the values.
    pub operator: NodeSelectorOperator,
    /// The values: non-empty for `In`/`NotIn`, empty for `Exists`/`DoesNotExist`, a single
    /// integer for `Gt`/`Lt`/`Gte`/`Lte`.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic", "maxLength" = 63, "pattern" = patterns::LABEL_VALUE))]
    pub values: Vec<String>,
    /// The minimum number of distinct values the scheduler must keep available for this key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50), transform = schema_without_format)]
    pub min_values: Option<i64>,
}

impl NodeSelectorRequirementWithMinValues {
    /// A requirement without `minValues`.
    pub fn new<I, S>(key: impl Into<String>, operator: NodeSelectorOperator, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            key: key.into(),
            operator,
            values: values.into_iter().map(Into::into).collect(),
            min_values: None,
        }
    }
}

impl From<NodeSelectorRequirementWithMinValues> for core::NodeSelectorRequirement {
    fn from(r: NodeSelectorRequirementWithMinValues) -> Self {
        core::NodeSelectorRequirement {
            key: r.key,
            operator: r.operator.as_str().to_string(),
            values: (!r.values.is_empty()).then_some(r.values),
        }
    }
}

impl TryFrom<core::NodeSelectorRequirement> for NodeSelectorRequirementWithMinValues {
    type Error = UnknownOperator;

    fn try_from(r: core::NodeSelectorRequirement) -> Result<Self, Self::Error> {
        Ok(Self {
            key: r.key,
            operator: r.operator.parse()?,
            values: r.values.unwrap_or_default(),
            min_values: None,
        })
    }
}

impl NodeSelectorRequirementWithMinValues {
    /// The requirement in the requirement algebra of `karpenter-core`.
    ///
    /// # Errors
    /// When the values do not suit the operator (`In` without values, `Gt` without one integer).
    pub fn to_requirement(
        &self,
    ) -> Result<
        karpenter_core::requirements::Requirement,
        karpenter_core::requirements::RequirementError,
    > {
        karpenter_core::requirements::Requirement::new(
            &self.key,
            self.operator,
            self.values.iter().map(String::as_str),
        )
        .map(|r| r.with_min_values(self.min_values.and_then(|m| usize::try_from(m).ok())))
    }
}

/// A plain node selector requirement, as reported in EC2NodeClass status (no extra validation).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// The label key the requirement constrains.
    pub key: String,
    /// How the key relates to the values.
    #[schemars(schema_with = "plain_string")]
    pub operator: NodeSelectorOperator,
    /// The values.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
}

impl From<NodeSelectorRequirement> for NodeSelectorRequirementWithMinValues {
    fn from(r: NodeSelectorRequirement) -> Self {
        Self {
            key: r.key,
            operator: r.operator,
            values: r.values,
            min_values: None,
        }
    }
}

fn plain_string(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({ "type": "string" })
}

/// Removes `format` (Go's `int` has none, unlike `int32`/`int64`).
pub(crate) fn schema_without_format(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("format");
    }
}

/// A reference to the provider-specific node class (e.g. an EC2NodeClass) a node is built from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// API group of the node class, e.g. `karpenter.k8s.aws`.
    #[schemars(extend("pattern" = patterns::API_GROUP), transform = not_empty_rule("group"))]
    pub group: String,
    /// Kind of the node class, e.g. `EC2NodeClass`.
    #[schemars(transform = not_empty_rule("kind"))]
    pub kind: String,
    /// Name of the node class object.
    #[schemars(transform = not_empty_rule("name"))]
    pub name: String,
}

impl NodeClassReference {
    /// A reference to an EC2NodeClass.
    pub fn ec2_node_class(name: impl Into<String>) -> Self {
        Self {
            group: crate::aws::labels::AWS_GROUP.to_string(),
            kind: "EC2NodeClass".to_string(),
            name: name.into(),
        }
    }
}

/// A transform adding `<field> may not be empty`.
fn not_empty_rule(field: &'static str) -> impl FnMut(&mut Schema) {
    move |schema: &mut Schema| {
        schema::add_rules(
            schema,
            [rule("self != ''", &format!("{field} may not be empty"))],
        )
    }
}

/// Whether a condition holds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It is not known (yet) whether the condition holds.
    Unknown,
}

/// A status condition, as maintained by Karpenter's controllers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition type in CamelCase, e.g. `Ready`, `Launched`, `Drifted`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316), extend("pattern" = patterns::CONDITION_TYPE))]
    pub type_: String,
    /// Whether the condition holds.
    pub status: ConditionStatus,
    /// The `metadata.generation` the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the status last changed.
    #[schemars(schema_with = "schema::date_time")]
    pub last_transition_time: Time,
    /// A CamelCase machine-readable reason for the last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024), extend("pattern" = patterns::CONDITION_REASON))]
    pub reason: String,
    /// A human-readable explanation of the last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32768))]
    pub message: String,
}

/// The condition every Karpenter resource reports as the roll-up of the others.
pub const CONDITION_READY: &str = "Ready";

/// Lookups on a list of conditions.
pub trait ConditionsExt {
    /// The condition of the given type, if present.
    fn condition(&self, type_: &str) -> Option<&Condition>;

    /// Whether the condition of the given type is present and `True`.
    fn is_true(&self, type_: &str) -> bool {
        self.condition(type_)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// Whether the `Ready` condition is `True`.
    fn is_ready(&self) -> bool {
        self.is_true(CONDITION_READY)
    }
}

impl ConditionsExt for [Condition] {
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.iter().find(|c| c.type_ == type_)
    }
}

impl ConditionsExt for Vec<Condition> {
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.as_slice().condition(type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_conversions_round_trip() {
        let taint = Taint {
            key: "example.com/dedicated".into(),
            value: Some("gpu".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        };
        let core_taint: core::Taint = taint.clone().into();
        assert_eq!(core_taint.effect, "NoSchedule");
        assert_eq!(Taint::try_from(core_taint), Ok(taint));
        let bad = core::Taint {
            key: "k".into(),
            effect: "Sometimes".into(),
            ..Default::default()
        };
        assert!(Taint::try_from(bad).is_err());
        assert!(Taint::disrupted().matches(&Taint::new(
            "karpenter.sh/disrupted",
            TaintEffect::NoSchedule
        )));
    }

    #[test]
    fn requirement_conversions() {
        let req = NodeSelectorRequirementWithMinValues::new(
            "kubernetes.io/arch",
            NodeSelectorOperator::In,
            ["arm64"],
        );
        let core_req: core::NodeSelectorRequirement = req.clone().into();
        assert_eq!(core_req.operator, "In");
        assert_eq!(
            NodeSelectorRequirementWithMinValues::try_from(core_req),
            Ok(req)
        );
        assert_eq!(
            "Gt".parse::<NodeSelectorOperator>(),
            Ok(NodeSelectorOperator::Gt)
        );
        assert_eq!(
            "Gte".parse::<NodeSelectorOperator>(),
            Ok(NodeSelectorOperator::Gte)
        );
        assert!("Ge".parse::<NodeSelectorOperator>().is_err());
    }
}
