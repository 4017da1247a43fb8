//! Karpenter's feature gates: their names, their defaults and the
//! `Name=true,Other=false` text that sets them (the adapter's
//! `FEATURE_GATES`, karpctl's `--feature-gates`).
//!
//! One list and one reading, so the CLI and the controller cannot disagree
//! on which gates exist or what they default to. Values are read as Go's
//! `strconv.ParseBool` reads them (Karpenter parses the flag with
//! component-base's map-of-bools), and a name that is not a gate is kept
//! aside: the caller decides whether that is an error (karpctl, whose
//! input is a user's command line) or a warning (the adapter, whose values
//! may come from a newer Karpenter's chart).

use std::collections::BTreeMap;
use std::fmt;

pub const NODE_REPAIR: &str = "NodeRepair";
pub const RESERVED_CAPACITY: &str = "ReservedCapacity";
pub const SPOT_TO_SPOT_CONSOLIDATION: &str = "SpotToSpotConsolidation";
pub const NODE_OVERLAY: &str = "NodeOverlay";
pub const STATIC_CAPACITY: &str = "StaticCapacity";
pub const CAPACITY_BUFFER: &str = "CapacityBuffer";
pub const POD_DELETION_COST_MANAGEMENT: &str = "PodDeletionCostManagement";

/// Every gate with Karpenter's default.
pub const DEFAULTS: &[(&str, bool)] = &[
    (NODE_REPAIR, false),
    (RESERVED_CAPACITY, true),
    (SPOT_TO_SPOT_CONSOLIDATION, false),
    (NODE_OVERLAY, false),
    (STATIC_CAPACITY, false),
    (CAPACITY_BUFFER, false),
    (POD_DELETION_COST_MANAGEMENT, false),
];

/// The gates in force: Karpenter's defaults with what the text set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    gates: BTreeMap<String, bool>,
    unknown: Vec<String>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self::defaults(DEFAULTS)
    }
}

/// What is wrong with a feature-gate text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    #[error("{0:?} is not Name=true or Name=false")]
    NotAPair(String),
    #[error("{name}: {value:?} is not true or false")]
    NotABool { name: String, value: String },
}

impl FeatureGates {
    /// Reads `Name=true,Other=false` over the defaults. Names that are not
    /// gates are kept in [`FeatureGates::unknown`], not set.
    pub fn parse(text: &str) -> Result<Self, FeatureGateError> {
        Self::parse_over(DEFAULTS, text)
    }

    /// Another set of gates at their defaults (a provider's own, such as
    /// provider-aws's `AWS_FEATURE_GATES`).
    pub fn defaults(defaults: &[(&str, bool)]) -> Self {
        FeatureGates {
            gates: defaults
                .iter()
                .map(|(name, on)| ((*name).to_owned(), *on))
                .collect(),
            unknown: Vec::new(),
        }
    }

    /// Reads `Name=true,Other=false` over another set of gates' defaults.
    pub fn parse_over(defaults: &[(&str, bool)], text: &str) -> Result<Self, FeatureGateError> {
        let mut gates = FeatureGates::defaults(defaults);
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| FeatureGateError::NotAPair(part.to_owned()))?;
            let name = name.trim();
            let on = parse_bool(value.trim()).ok_or_else(|| FeatureGateError::NotABool {
                name: name.to_owned(),
                value: value.trim().to_owned(),
            })?;
            match gates.gates.get_mut(name) {
                Some(gate) => *gate = on,
                None => gates.unknown.push(name.to_owned()),
            }
        }
        Ok(gates)
    }

    /// Whether the gate is on; a name that is not a gate is off.
    pub fn enabled(&self, gate: &str) -> bool {
        self.gates.get(gate).copied().unwrap_or(false)
    }

    /// Names the text set that are not gates, in its order.
    pub fn unknown(&self) -> &[String] {
        &self.unknown
    }

    /// Every gate and whether it is on, as a map of the caller's kind (the
    /// wire's `SchedulingOptions.feature_gates`).
    pub fn to_map<M: FromIterator<(String, bool)>>(&self) -> M {
        self.iter()
            .map(|(name, on)| (name.to_owned(), on))
            .collect()
    }

    /// Every gate and whether it is on, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, bool)> {
        self.gates.iter().map(|(name, on)| (name.as_str(), *on))
    }
}

impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self
            .iter()
            .map(|(name, on)| format!("{name}={on}"))
            .collect();
        f.write_str(&pairs.join(","))
    }
}

/// Go's `strconv.ParseBool`.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The names of every gate, for messages.
pub fn names() -> Vec<&'static str> {
    DEFAULTS.iter().map(|(name, _)| *name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_sets_only_what_it_names() {
        let gates = FeatureGates::parse("NodeRepair=true, CapacityBuffer=T").expect("valid");
        assert!(gates.enabled(NODE_REPAIR));
        assert!(gates.enabled(CAPACITY_BUFFER));
        assert!(gates.enabled(RESERVED_CAPACITY), "default on");
        assert!(!gates.enabled(SPOT_TO_SPOT_CONSOLIDATION), "default off");
        assert!(gates.unknown().is_empty());
        assert_eq!(
            FeatureGates::parse("").expect("empty"),
            FeatureGates::default()
        );
    }

    #[test]
    fn every_gate_of_karpenter_is_known() {
        let text = names()
            .iter()
            .map(|name| format!("{name}=false"))
            .collect::<Vec<_>>()
            .join(",");
        let gates = FeatureGates::parse(&text).expect("valid");
        assert!(gates.unknown().is_empty(), "{:?}", gates.unknown());
        assert!(gates.iter().all(|(_, on)| !on));
    }

    #[test]
    fn names_that_are_not_gates_are_set_aside() {
        let gates = FeatureGates::parse("Nope=true,NodeRepair=1").expect("valid");
        assert_eq!(gates.unknown(), ["Nope"]);
        assert!(!gates.enabled("Nope"));
        assert!(gates.enabled(NODE_REPAIR));
    }

    #[test]
    fn malformed_text_is_refused() {
        assert_eq!(
            FeatureGates::parse("NodeRepair"),
            Err(FeatureGateError::NotAPair("NodeRepair".into()))
        );
        assert_eq!(
            FeatureGates::parse("NodeRepair=yes")
                .map_err(|e| e.to_string())
                .unwrap_err(),
            "NodeRepair: \"yes\" is not true or false"
        );
    }
}
