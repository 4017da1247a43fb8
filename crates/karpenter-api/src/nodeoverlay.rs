//! `karpenter.sh/v1alpha1` NodeOverlay (Karpenter's alpha kind, behind the
//! `NodeOverlay` feature gate): a price, a price adjustment or extra
//! extended resources for the instance types (and offerings) its
//! requirements select, so the scheduler simulates what the cloud's list
//! prices and shapes do not say (Savings Plans, reserved prices, devices a
//! type has that its provider does not report).
//!
//! This module holds the object and what the API server and the overlay
//! controller check about it; applying overlays to instance types is
//! `karpenter_snapshot::overlay`'s.

use karpenter_core::labels::{self, LabelRules};
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use crate::common::{
    Condition, NodeSelectorOperator, NodeSelectorRequirementWithMinValues, ResourceList, empty,
    nullable,
};
use crate::crd::Column;
use crate::schema::{self, LabelRuleTarget, add_rules, label_domain_rules, rule, with_subschema};

/// NodeOverlay condition: the overlay passed runtime validation and
/// conflicts with no overlay of its weight.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// `ValidationSucceeded=False` reason: runtime validation failed.
pub const REASON_RUNTIME_VALIDATION: &str = "RuntimeValidation";
/// `ValidationSucceeded=False` reason: an overlay of the same weight
/// already sets the same offering's price or the same resource.
pub const REASON_CONFLICT: &str = "Conflict";
/// The message of a [`REASON_CONFLICT`] condition.
pub const CONFLICT_MESSAGE: &str = "conflict with another overlay";
/// NodeClaim annotation: one of the claim's instance types has a price a
/// NodeOverlay set.
pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
/// NodeClaim annotation: one of them has capacity a NodeOverlay added.
pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
/// Extended resources only: these are never overlaid.
pub const RESTRICTED_CAPACITY: &[&str] = &karpenter_core::resources::CORE;

/// What `kubectl get nodeoverlays` prints.
pub(crate) const PRINTER_COLUMNS: &[Column] = &[
    Column::READY,
    Column::AGE,
    Column::integer("Weight", ".spec.weight").wide(),
];

/// The desired state of a NodeOverlay.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    shortname = "overlays",
    status = "NodeOverlayStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "NodeOverlay is the Schema for the NodeOverlays API"
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = node_overlay_spec_rules)]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings the overlay applies to, matched
    /// against the instance type's labels, its NodePool's name and template
    /// labels, and each offering's zone and capacity type. Empty: every one.
    #[schemars(length(max = 100), transform = node_overlay_requirements_rules)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// A change to the price of each offering selected: `+0.5` / `-0.5`
    /// (amounts) or `+10%` / `-10%` (at most -100%); a result below zero is
    /// zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = PRICE_ADJUSTMENT_PATTERN))]
    pub price_adjustment: Option<String>,
    /// The price of each offering selected, in the provider's currency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^\d+(\.\d+)?$"))]
    pub price: Option<String>,
    /// Extended resources added to each instance type selected (never cpu,
    /// memory, ephemeral-storage or pods); a resource the type reports is
    /// replaced.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "capacity_schema")]
    pub capacity: ResourceList,
    /// Which overlay wins where several select the same offering or
    /// resource: the higher weight; between equal weights the name later in
    /// the alphabet, and a second overlay of that weight setting the same
    /// thing conflicts. Unset is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";

fn node_overlay_spec_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [rule(
            "!has(self.price) || !has(self.priceAdjustment)",
            "cannot set both 'price' and 'priceAdjustment'",
        )],
    );
}

fn node_overlay_requirements_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
                "requirements with operator 'NotIn' must have a value defined",
            ),
            rule(
                "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            rule(
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
            ),
        ],
    );
    // An overlay's requirement has no minValues.
    with_subschema(schema, &["[]"], |item| {
        item.insert(
            "description".into(),
            "A node selector requirement: the key must relate to the values as the operator says."
                .into(),
        );
        if let Some(props) = item.get_mut("properties").and_then(|p| p.as_object_mut()) {
            props.remove("minValues");
        }
    });
    with_subschema(schema, &["[]", "key"], |key| {
        key.insert(
            "x-kubernetes-validations".into(),
            label_domain_rules(LabelRuleTarget::NodeOverlayRequirementKey).into(),
        );
    });
}

fn capacity_schema(generator: &mut schemars::SchemaGenerator) -> Schema {
    let mut schema = schema::resource_list(generator);
    let restricted: Vec<String> = RESTRICTED_CAPACITY
        .iter()
        .map(|r| format!("'{r}'"))
        .collect();
    add_rules(
        &mut schema,
        [rule(
            &format!("self.all(x, !(x in [{}]))", restricted.join(", ")),
            "invalid resource restricted",
        )],
    );
    schema
}

/// The observed state of a NodeOverlay.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// `ValidationSucceeded` and its roll-up, `Ready`.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl NodeOverlay {
    /// The weight overlays are ordered by (unset is 0).
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// What the API server's schema cannot check about an overlay, as the
    /// overlay controller checks it; `Err` is the `RuntimeValidation`
    /// message.
    pub fn validate_runtime(&self, rules: &LabelRules) -> Result<(), String> {
        let mut errors = Vec::new();
        for requirement in &self.spec.requirements {
            if let Err(e) = validate_requirement(requirement, rules) {
                errors.push(format!("invalid value: {e} in requirements, restricted"));
            }
        }
        for name in self.spec.capacity.keys() {
            if RESTRICTED_CAPACITY.contains(&name.as_str()) {
                errors.push(format!("invalid capacity: {name} in resource, restricted"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// Karpenter's `ValidateRequirement` for an overlay's requirement.
fn validate_requirement(
    requirement: &NodeSelectorRequirementWithMinValues,
    rules: &LabelRules,
) -> Result<(), String> {
    let key = &requirement.key;
    let normalized = labels::normalize_label(key);
    if normalized == labels::HOSTNAME {
        return Err(format!("label {key:?} is restricted"));
    }
    rules.check_allowed(normalized).map_err(|e| e.to_string())?;
    let key_errors = karpenter_core::names::qualified_name(key);
    if !key_errors.is_empty() {
        return Err(format!(
            "key {key} is not a qualified name: {}",
            key_errors.join("; ")
        ));
    }
    for value in &requirement.values {
        let value_errors = karpenter_core::names::label_value(value);
        if !value_errors.is_empty() {
            return Err(format!(
                "invalid value {value:?} for key {key}: {}",
                value_errors.join("; ")
            ));
        }
    }
    use NodeSelectorOperator as Op;
    match requirement.operator {
        Op::In | Op::NotIn if requirement.values.is_empty() => Err(format!(
            "key {key} with operator {} must have a value defined",
            requirement.operator.as_str()
        )),
        Op::Gt | Op::Lt | Op::Gte | Op::Lte
            if requirement.values.len() != 1
                || requirement.values[0].parse::<i64>().map_or(true, |v| v < 0) =>
        {
            Err(format!(
                "key {key} with operator {} must have a single positive integer value",
                requirement.operator.as_str()
            ))
        }
        _ => Ok(()),
    }
}

/// Overlays in the order they apply: weight descending, then name
/// descending (the name later in the alphabet first), as Karpenter orders
/// them.
pub fn order_by_weight(overlays: &mut [&NodeOverlay]) {
    overlays.sort_by(|a, b| {
        b.weight()
            .cmp(&a.weight())
            .then_with(|| b.metadata.name.cmp(&a.metadata.name))
    });
}
