//! Kubernetes label selectors (`metav1.LabelSelector`).

use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOp {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

/// A selector that is present. An absent (nil) selector, which matches
/// nothing, is represented by `Option::None` at the use site.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelSelector {
    pub expressions: Vec<(String, SelectorOp)>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.expressions.iter().all(|(key, op)| {
            let value = labels.get(key);
            match op {
                SelectorOp::In(values) => value.is_some_and(|v| values.contains(v)),
                SelectorOp::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
                SelectorOp::Exists => value.is_some(),
                SelectorOp::DoesNotExist => value.is_none(),
            }
        })
    }

    /// Adds `key In [value]` (used for matchLabelKeys).
    pub fn require(&mut self, key: &str, value: &str) {
        self.expressions.push((
            key.to_owned(),
            SelectorOp::In(BTreeSet::from([value.to_owned()])),
        ));
    }

    pub fn require_not(&mut self, key: &str, value: &str) {
        self.expressions.push((
            key.to_owned(),
            SelectorOp::NotIn(BTreeSet::from([value.to_owned()])),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_selector_matches_everything_and_expressions_and() {
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        assert!(LabelSelector::default().matches(&labels));
        let mut selector = LabelSelector::default();
        selector.require("app", "web");
        assert!(selector.matches(&labels));
        selector
            .expressions
            .push(("tier".into(), SelectorOp::Exists));
        assert!(!selector.matches(&labels));
    }
}
