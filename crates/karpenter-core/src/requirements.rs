//! Karpenter's requirement algebra.
//!
//! A [`Requirement`] is the set of values a label key may take: either a
//! finite set (`In`, `DoesNotExist` = the empty set) or the complement of
//! one (`NotIn`, `Exists` = the complement of the empty set), optionally
//! bounded by integer limits (`Gt`, `Lt`, `Gte`, `Lte`). Two requirements
//! on the same key intersect; [`Requirements`] is one requirement per key.
//!
//! ```text
//!   In [a b]      ∩  NotIn [b]   = In [a]
//!   Exists >2     ∩  In [1 3 8]  = In [3 8]
//!   Gt 4          ∩  Lt 5        = DoesNotExist
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::labels;

/// How a requirement relates its key to its values: the operators of
/// Kubernetes' node selectors plus Karpenter v1.15's `Gte` and `Lte`
/// (the API crate's `NodeSelectorOperator` is this type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)
)]
pub enum Operator {
    /// The label value is one of the values.
    In,
    /// The label value is none of the values (or the label is absent).
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label value, as an integer, is greater than the single value.
    Gt,
    /// The label value, as an integer, is less than the single value.
    Lt,
    /// The label value, as an integer, is at least the single value.
    Gte,
    /// The label value, as an integer, is at most the single value.
    Lte,
}

impl Operator {
    pub fn parse(text: &str) -> Option<Operator> {
        Some(match text {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }
}

/// An operator string that is not a node-selector operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown node selector operator {0:?}; expected In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte"
)]
pub struct UnknownOperator(pub String);

impl std::str::FromStr for Operator {
    type Err = UnknownOperator;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Operator::parse(text).ok_or_else(|| UnknownOperator(text.to_owned()))
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("{key}: operator {operator} takes exactly one integer value, got {values:?}")]
    NotOneInteger {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
    #[error("{key}: operator In needs at least one value")]
    InWithoutValues { key: String },
    #[error("{key}: operator {operator} takes no values, got {values:?}")]
    UnexpectedValues {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    complement: bool,
    values: BTreeSet<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
    min_values: Option<usize>,
}

impl Requirement {
    /// Builds a requirement from a node-selector expression. `Gte n` is
    /// `Gt n-1` and `Lte n` is `Lt n+1` over integers.
    pub fn new(
        key: &str,
        operator: Operator,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Requirement, RequirementError> {
        let key = labels::normalize_label(key).to_owned();
        let values: Vec<String> = values.into_iter().map(Into::into).collect();
        let bound = |values: &[String]| -> Result<i64, RequirementError> {
            match values {
                [one] => one
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| RequirementError::NotOneInteger {
                        key: key.clone(),
                        operator,
                        values: values.to_vec(),
                    }),
                _ => Err(RequirementError::NotOneInteger {
                    key: key.clone(),
                    operator,
                    values: values.to_vec(),
                }),
            }
        };
        let mut requirement = Requirement {
            key: key.clone(),
            complement: false,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        };
        match operator {
            Operator::In => {
                if values.is_empty() {
                    return Err(RequirementError::InWithoutValues { key });
                }
                requirement.values = values.into_iter().collect();
            }
            Operator::NotIn => {
                requirement.complement = true;
                requirement.values = values.into_iter().collect();
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(RequirementError::UnexpectedValues {
                        key,
                        operator,
                        values,
                    });
                }
                requirement.complement = operator == Operator::Exists;
            }
            Operator::Gt => {
                requirement.complement = true;
                requirement.greater_than = Some(bound(&values)?);
            }
            Operator::Gte => {
                requirement.complement = true;
                requirement.greater_than = Some(bound(&values)?.saturating_sub(1));
            }
            Operator::Lt => {
                requirement.complement = true;
                requirement.less_than = Some(bound(&values)?);
            }
            Operator::Lte => {
                requirement.complement = true;
                requirement.less_than = Some(bound(&values)?.saturating_add(1));
            }
        }
        Ok(requirement)
    }

    /// `key In [value]`.
    pub fn single(key: &str, value: &str) -> Requirement {
        Requirement {
            key: labels::normalize_label(key).to_owned(),
            complement: false,
            values: BTreeSet::from([value.to_owned()]),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// `key In [values...]` (an empty set means DoesNotExist).
    pub fn in_values<'a>(key: &str, values: impl IntoIterator<Item = &'a str>) -> Requirement {
        Requirement {
            key: labels::normalize_label(key).to_owned(),
            complement: false,
            values: values.into_iter().map(str::to_owned).collect(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    pub fn exists(key: &str) -> Requirement {
        Requirement {
            key: labels::normalize_label(key).to_owned(),
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    pub fn does_not_exist(key: &str) -> Requirement {
        Requirement::in_values(key, [])
    }

    pub fn with_min_values(mut self, min_values: Option<usize>) -> Requirement {
        self.min_values = min_values;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn min_values(&self) -> Option<usize> {
        self.min_values
    }

    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The listed values: the allowed ones for In, the excluded ones for
    /// NotIn.
    pub fn values(&self) -> &BTreeSet<String> {
        &self.values
    }

    pub fn greater_than(&self) -> Option<i64> {
        self.greater_than
    }

    pub fn less_than(&self) -> Option<i64> {
        self.less_than
    }

    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// The number of values the requirement allows (huge for complements).
    pub fn len(&self) -> u64 {
        if self.complement {
            u64::MAX - self.values.len() as u64
        } else {
            self.values.len() as u64
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A value a node could carry to meet the requirement, as Karpenter
    /// labels a node for a custom key: the first allowed value of an `In`;
    /// for `NotIn`, `Exists`, `Gt` and `Lt` the smallest integer from 0 (from
    /// just above the lower bound when there is one, from below a negative
    /// upper bound) that is below the upper bound and not excluded. None for
    /// `DoesNotExist` or when no value is left.
    pub fn any_value(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().find(|v| self.within_bounds(v)).cloned();
        }
        let below = self.less_than.unwrap_or(i64::MAX);
        // Each excluded value can push the answer up by one at most.
        let tries = i64::try_from(self.values.len()).unwrap_or(i64::MAX);
        let lowest = match self.greater_than {
            Some(gt) => gt.saturating_add(1),
            None => below.saturating_sub(1).saturating_sub(tries).min(0),
        };
        (0..=tries)
            .map_while(|step| lowest.checked_add(step))
            .take_while(|candidate| *candidate < below)
            .map(|candidate| candidate.to_string())
            .find(|candidate| !self.values.contains(candidate))
    }

    pub fn has(&self, value: &str) -> bool {
        let listed = self.values.contains(value);
        let member = if self.complement { !listed } else { listed };
        member && self.within_bounds(value)
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(number) = value.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|gt| number > gt)
            && self.less_than.is_none_or(|lt| number < lt)
    }

    /// The values both requirements allow.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let greater_than = match (self.greater_than, other.greater_than) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let less_than = match (self.less_than, other.less_than) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let min_values = match (self.min_values, other.min_values) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let (Some(gt), Some(lt)) = (greater_than, less_than)
            && gt.saturating_add(1) >= lt
        {
            return Requirement::does_not_exist(&self.key).with_min_values(min_values);
        }
        let complement = self.complement && other.complement;
        let mut values: BTreeSet<String> = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values).cloned().collect(),
            (true, false) => other.values.difference(&self.values).cloned().collect(),
            (false, true) => self.values.difference(&other.values).cloned().collect(),
            (false, false) => self.values.intersection(&other.values).cloned().collect(),
        };
        let mut result = Requirement {
            key: self.key.clone(),
            complement,
            values: BTreeSet::new(),
            greater_than,
            less_than,
            min_values,
        };
        if !complement {
            values.retain(|value| result.within_bounds(value));
            result.greater_than = None;
            result.less_than = None;
        }
        result.values = values;
        result
    }

    /// Whether some value satisfies both (without building the intersection
    /// when the answer is cheap).
    pub fn intersects(&self, other: &Requirement) -> bool {
        match (self.complement, other.complement) {
            (false, false)
                if self.greater_than.is_none()
                    && self.less_than.is_none()
                    && other.greater_than.is_none()
                    && other.less_than.is_none() =>
            {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small.iter().any(|value| large.contains(value))
            }
            (false, true) if other.greater_than.is_none() && other.less_than.is_none() => self
                .values
                .iter()
                .any(|value| !other.values.contains(value)),
            (true, false) if self.greater_than.is_none() && self.less_than.is_none() => other
                .values
                .iter()
                .any(|value| !self.values.contains(value)),
            _ => !self.intersection(other).is_empty(),
        }
    }

    /// The per-key rule of [`Requirements::intersects`]: some common value,
    /// or both sides only exclude values.
    pub fn compatible_with(&self, incoming: &Requirement) -> bool {
        let excluding =
            |r: &Requirement| matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist);
        self.intersects(incoming) || (excluding(incoming) && excluding(self))
    }

    /// One value, when the requirement pins the key to exactly one.
    pub fn single_value(&self) -> Option<&str> {
        if self.complement || self.values.len() != 1 {
            return None;
        }
        self.values.iter().next().map(String::as_str)
    }

    /// Back to node-selector form. Bounds come back as Gt / Lt.
    pub fn to_expressions(&self) -> Vec<(String, Operator, Vec<String>)> {
        let mut expressions = Vec::new();
        let listed: Vec<String> = self.values.iter().cloned().collect();
        let has_bounds = self.greater_than.is_some() || self.less_than.is_some();
        match self.operator() {
            Operator::Exists if has_bounds => {}
            operator => expressions.push((self.key.clone(), operator, listed)),
        }
        if let Some(gt) = self.greater_than {
            expressions.push((self.key.clone(), Operator::Gt, vec![gt.to_string()]));
        }
        if let Some(lt) = self.less_than {
            expressions.push((self.key.clone(), Operator::Lt, vec![lt.to_string()]));
        }
        expressions
    }
}

/// Karpenter's rendering: `key In [a b]`, `key Exists >2`, values after the
/// fifth elided.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let operator = self.operator();
        match operator {
            Operator::Exists | Operator::DoesNotExist => write!(f, "{} {}", self.key, operator)?,
            _ => {
                let mut shown: Vec<String> = self.values.iter().take(5).cloned().collect();
                if self.values.len() > 5 {
                    shown.push(format!("and {} others", self.values.len() - 5));
                }
                write!(f, "{} {} [{}]", self.key, operator, shown.join(" "))?;
            }
        }
        if let Some(gt) = self.greater_than {
            write!(f, " >{gt}")?;
        }
        if let Some(lt) = self.less_than {
            write!(f, " <{lt}")?;
        }
        if let Some(min) = self.min_values {
            write!(f, " minValues {min}")?;
        }
        Ok(())
    }
}

/// One requirement per label key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    by_key: BTreeMap<String, Requirement>,
}

/// Why two sets of requirements cannot both hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Incompatible {
    #[error("label {key:?} does not have known values")]
    UndefinedLabel { key: String },
    #[error("key {key}, {incoming} not in {existing}")]
    NoCommonValue {
        key: String,
        incoming: String,
        existing: String,
    },
}

/// Which keys may be absent from the node side and still be required by a
/// pod (Karpenter's AllowUndefinedWellKnownLabels).
pub trait WellKnown {
    fn is_well_known(&self, key: &str) -> bool;
}

/// No key is allowed undefined (existing nodes: a label they lack they will
/// never have).
pub struct NoneWellKnown;

impl WellKnown for NoneWellKnown {
    fn is_well_known(&self, _key: &str) -> bool {
        false
    }
}

impl Requirements {
    pub fn new() -> Requirements {
        Requirements::default()
    }

    pub fn from_requirements(requirements: impl IntoIterator<Item = Requirement>) -> Requirements {
        let mut result = Requirements::new();
        for requirement in requirements {
            result.add(requirement);
        }
        result
    }

    /// `key In [value]` for every label.
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Requirements {
        Requirements::from_requirements(
            labels
                .into_iter()
                .map(|(key, value)| Requirement::single(key, value)),
        )
    }

    /// Adds a requirement, intersecting with the one already on its key.
    pub fn add(&mut self, requirement: Requirement) {
        match self.by_key.get_mut(requirement.key()) {
            Some(existing) => *existing = existing.intersection(&requirement),
            None => {
                self.by_key.insert(requirement.key.clone(), requirement);
            }
        }
    }

    pub fn add_all(&mut self, other: &Requirements) {
        for requirement in other.by_key.values() {
            self.add(requirement.clone());
        }
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.by_key.get(key)
    }

    pub fn has(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.by_key.remove(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.by_key.values()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_key.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Every key on both sides must have a common value, unless both sides
    /// only exclude values (`NotIn` / `DoesNotExist`).
    pub fn intersects(&self, incoming: &Requirements) -> Result<(), Incompatible> {
        let (small, large, incoming_is_small) = if self.len() <= incoming.len() {
            (self, incoming, false)
        } else {
            (incoming, self, true)
        };
        for (key, small_requirement) in &small.by_key {
            let Some(large_requirement) = large.by_key.get(key) else {
                continue;
            };
            let (existing, incoming) = if incoming_is_small {
                (large_requirement, small_requirement)
            } else {
                (small_requirement, large_requirement)
            };
            if !existing.intersects(incoming) {
                let excluding = |r: &Requirement| {
                    matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist)
                };
                if excluding(incoming) && excluding(existing) {
                    continue;
                }
                return Err(Incompatible::NoCommonValue {
                    key: key.clone(),
                    incoming: incoming.to_string(),
                    existing: existing.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Karpenter's `Compatible`: `incoming` (a pod's requirements) can be met
    /// by a node with these requirements. A key the node side does not
    /// define is allowed only when it is well-known or the pod merely
    /// excludes values.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        well_known: &dyn WellKnown,
    ) -> Result<(), Incompatible> {
        for (key, requirement) in &incoming.by_key {
            if self.by_key.contains_key(key) || well_known.is_well_known(key) {
                continue;
            }
            if matches!(
                requirement.operator(),
                Operator::NotIn | Operator::DoesNotExist
            ) {
                continue;
            }
            return Err(Incompatible::UndefinedLabel { key: key.clone() });
        }
        self.intersects(incoming)
    }

    /// Labels a node with these requirements will carry: every key narrowed
    /// to exactly one value.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.by_key
            .iter()
            .filter_map(|(key, requirement)| {
                requirement
                    .single_value()
                    .map(|value| (key.clone(), value.to_owned()))
            })
            .collect()
    }

    pub fn has_min_values(&self) -> bool {
        self.by_key.values().any(|r| r.min_values.is_some())
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for requirement in self.by_key.values() {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> Requirement {
        Requirement::new(key, Operator::parse(op).unwrap(), values.iter().copied()).unwrap()
    }

    #[test]
    fn any_value_meets_the_requirement() {
        for (requirement, expected) in [
            (req("k", "In", &["b", "a"]), Some("a")),
            (req("k", "NotIn", &["0", "1", "3"]), Some("2")),
            (req("k", "Exists", &[]), Some("0")),
            (req("k", "Gt", &["5"]), Some("6")),
            (req("k", "Lt", &["4"]), Some("0")),
            (req("k", "Lt", &["-3"]), Some("-4")),
            (req("k", "Gte", &["7"]), Some("7")),
            (req("k", "DoesNotExist", &[]), None),
        ] {
            let value = requirement.any_value();
            assert_eq!(value.as_deref(), expected, "{requirement}");
            if let Some(value) = value {
                assert!(requirement.has(&value), "{requirement} has {value}");
            }
        }
        let narrow = req("k", "Gt", &["1"]).intersection(&req("k", "Lt", &["3"]));
        assert_eq!(narrow.any_value().as_deref(), Some("2"));
        let excluded = narrow.intersection(&req("k", "NotIn", &["2"]));
        assert_eq!(excluded.any_value(), None);
    }

    #[test]
    fn intersections_follow_set_algebra() {
        let cases = [
            (
                req("k", "In", &["a", "b"]),
                req("k", "NotIn", &["b"]),
                "k In [a]",
            ),
            (
                req("k", "In", &["a"]),
                req("k", "In", &["b"]),
                "k DoesNotExist",
            ),
            (
                req("k", "NotIn", &["a"]),
                req("k", "NotIn", &["b"]),
                "k NotIn [a b]",
            ),
            (req("k", "Exists", &[]), req("k", "In", &["a"]), "k In [a]"),
            (
                req("k", "Exists", &[]),
                req("k", "DoesNotExist", &[]),
                "k DoesNotExist",
            ),
            (
                req("k", "Gt", &["2"]),
                req("k", "In", &["1", "3", "8", "x"]),
                "k In [3 8]",
            ),
            (
                req("k", "Gt", &["4"]),
                req("k", "Lt", &["5"]),
                "k DoesNotExist",
            ),
            (
                req("k", "Gt", &["4"]),
                req("k", "Lt", &["6"]),
                "k Exists >4 <6",
            ),
            (
                req("k", "Gte", &["4"]),
                req("k", "Lte", &["4"]),
                "k Exists >3 <5",
            ),
        ];
        for (a, b, expected) in cases {
            assert_eq!(a.intersection(&b).to_string(), expected, "{a} ∩ {b}");
            assert_eq!(b.intersection(&a).to_string(), expected, "{b} ∩ {a}");
            assert_eq!(
                a.intersects(&b),
                expected != "k DoesNotExist",
                "{a} intersects {b}"
            );
        }
    }

    #[test]
    fn gt_needs_one_integer() {
        assert!(Requirement::new("k", Operator::Gt, ["x"]).is_err());
        assert!(Requirement::new("k", Operator::Gt, ["1", "2"]).is_err());
        assert!(Requirement::new("k", Operator::In, Vec::<String>::new()).is_err());
    }

    #[test]
    fn beta_labels_are_normalized() {
        let requirement = req("failure-domain.beta.kubernetes.io/zone", "In", &["z"]);
        assert_eq!(requirement.key(), labels::TOPOLOGY_ZONE);
    }

    struct Wk;
    impl WellKnown for Wk {
        fn is_well_known(&self, key: &str) -> bool {
            labels::NEUTRAL_WELL_KNOWN_LABELS.contains(&key)
        }
    }

    #[test]
    fn custom_labels_must_be_defined_but_well_known_may_be_absent() {
        let node = Requirements::from_requirements([req("team", "In", &["a"])]);
        let zone = Requirements::from_requirements([req(labels::TOPOLOGY_ZONE, "In", &["z1"])]);
        assert!(node.compatible(&zone, &Wk).is_ok());
        let custom = Requirements::from_requirements([req("gpu", "In", &["yes"])]);
        assert_eq!(
            node.compatible(&custom, &Wk).unwrap_err().to_string(),
            "label \"gpu\" does not have known values"
        );
        let not_in = Requirements::from_requirements([req("gpu", "NotIn", &["yes"])]);
        assert!(node.compatible(&not_in, &Wk).is_ok());
        let wrong_team = Requirements::from_requirements([req("team", "In", &["b"])]);
        assert_eq!(
            node.compatible(&wrong_team, &Wk).unwrap_err().to_string(),
            "key team, team In [b] not in team In [a]"
        );
    }

    #[test]
    fn two_exclusions_are_compatible_even_without_common_value() {
        let a = Requirements::from_requirements([req("k", "DoesNotExist", &[])]);
        let b = Requirements::from_requirements([req("k", "NotIn", &["x"])]);
        assert!(a.intersects(&b).is_ok());
    }

    #[test]
    fn labels_are_single_valued_requirements() {
        let requirements = Requirements::from_requirements([
            req("a", "In", &["1"]),
            req("b", "In", &["1", "2"]),
            req("c", "Exists", &[]),
        ]);
        assert_eq!(
            requirements.labels(),
            BTreeMap::from([("a".to_owned(), "1".to_owned())])
        );
    }
}
