//! The scheduler stand-in's inter-pod filters, as kube-scheduler's
//! `InterPodAffinity` and `PodTopologySpread` plugins filter: required pod
//! affinity and anti-affinity (the incoming pod's terms and the existing
//! pods' anti-affinity towards it) and `DoNotSchedule` topology spread.
//!
//! ```text
//!   pod + candidate node + every node's pods ──▶ None (fits) | Some(reason)
//!   domain of a node = its label value for the term's topologyKey
//! ```

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::controllers::node_selected;
use super::json::strings;
use super::selectors::LabelSelector;

/// The cluster as the scheduler stand-in sees it in one pass.
pub struct Placement<'a> {
    pub nodes: &'a [Value],
    /// Node name → the pods on it (bound or assumed this pass).
    pub pods_by_node: &'a BTreeMap<String, Vec<Value>>,
}

fn labels(o: &Value) -> Map<String, Value> {
    o["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

fn domain<'v>(node: &'v Value, key: &str) -> Option<&'v str> {
    node["metadata"]["labels"][key].as_str()
}

fn terminating(pod: &Value) -> bool {
    pod["metadata"].get("deletionTimestamp").is_some()
}

/// Whether `term` (a PodAffinityTerm of `owner`) selects `other`: its
/// namespaces (the owner's by default, all with a namespaceSelector) and
/// its label selector (a missing selector selects nothing).
fn term_selects(term: &Value, owner: &Value, other: &Value) -> bool {
    let namespace = other["metadata"]["namespace"].as_str().unwrap_or_default();
    let listed: Vec<&str> = strings(&term["namespaces"]).collect();
    let in_namespace = if !listed.is_empty() {
        listed.contains(&namespace)
    } else if term["namespaceSelector"].is_object() {
        true
    } else {
        owner["metadata"]["namespace"].as_str().unwrap_or_default() == namespace
    };
    in_namespace
        && LabelSelector::from_object(&with_match_label_keys(term, owner))
            .is_some_and(|s| s.matches(other))
}

/// A term's label selector with its `matchLabelKeys` resolved against the
/// owner's labels.
fn with_match_label_keys(term: &Value, owner: &Value) -> Value {
    let mut selector = term["labelSelector"].clone();
    let own = labels(owner);
    for key in strings(&term["matchLabelKeys"]) {
        if let (Some(value), Some(s)) = (own.get(key), selector.as_object_mut()) {
            let match_labels = s
                .entry("matchLabels")
                .or_insert_with(|| Value::Object(Map::new()));
            match_labels[key] = value.clone();
        }
    }
    selector
}

fn required(pod: &Value, kind: &str) -> Vec<Value> {
    pod["spec"]["affinity"][kind]["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

impl Placement<'_> {
    /// Every live pod with the node it is on.
    fn placed(&self) -> impl Iterator<Item = (&Value, &Value)> {
        self.nodes.iter().flat_map(move |node| {
            let name = node["metadata"]["name"].as_str().unwrap_or_default();
            self.pods_by_node
                .get(name)
                .into_iter()
                .flatten()
                .filter(|p| !terminating(p))
                .map(move |p| (p, node))
        })
    }

    /// Why `pod` may not go on `node` for inter-pod reasons.
    pub fn unfit(&self, pod: &Value, node: &Value) -> Option<String> {
        if let Some(reason) = self.anti_affinity(pod, node) {
            return Some(reason);
        }
        if let Some(reason) = self.affinity(pod, node) {
            return Some(reason);
        }
        self.spread(pod, node)
    }

    fn anti_affinity(&self, pod: &Value, node: &Value) -> Option<String> {
        for term in required(pod, "podAntiAffinity") {
            let key = term["topologyKey"].as_str().unwrap_or_default();
            let Some(here) = domain(node, key) else {
                continue;
            };
            if self
                .placed()
                .any(|(other, n)| domain(n, key) == Some(here) && term_selects(&term, pod, other))
            {
                return Some("node(s) didn't match pod anti-affinity rules".into());
            }
        }
        for (other, n) in self.placed() {
            for term in required(other, "podAntiAffinity") {
                let key = term["topologyKey"].as_str().unwrap_or_default();
                if domain(n, key).is_some()
                    && domain(n, key) == domain(node, key)
                    && term_selects(&term, other, pod)
                {
                    return Some("node(s) didn't satisfy existing pods anti-affinity rules".into());
                }
            }
        }
        None
    }

    fn affinity(&self, pod: &Value, node: &Value) -> Option<String> {
        for term in required(pod, "podAffinity") {
            let key = term["topologyKey"].as_str().unwrap_or_default();
            let matching: Vec<&Value> = self
                .placed()
                .filter(|(other, _)| term_selects(&term, pod, other))
                .map(|(_, n)| n)
                .collect();
            // The first pod of a group that selects itself may go anywhere.
            if matching.is_empty() && term_selects(&term, pod, pod) {
                continue;
            }
            let here = domain(node, key);
            if here.is_none() || !matching.iter().any(|n| domain(n, key) == here) {
                return Some("node(s) didn't match pod affinity rules".into());
            }
        }
        None
    }

    fn spread(&self, pod: &Value, node: &Value) -> Option<String> {
        for constraint in pod["spec"]["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["whenUnsatisfiable"] == "DoNotSchedule")
        {
            let key = constraint["topologyKey"].as_str().unwrap_or_default();
            let Some(here) = domain(node, key) else {
                return Some(
                    "node(s) didn't match pod topology spread constraints (missing required label)"
                        .into(),
                );
            };
            let selector = LabelSelector::from_object(&with_match_label_keys(constraint, pod));
            let honour_affinity = constraint["nodeAffinityPolicy"].as_str() != Some("Ignore");
            let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
            for n in self.nodes {
                if let Some(d) = domain(n, key)
                    && (!honour_affinity || node_selected(pod, n))
                {
                    counts.entry(d).or_default();
                }
            }
            for (other, n) in self.placed() {
                let same_namespace = other["metadata"]["namespace"] == pod["metadata"]["namespace"];
                if let Some(d) = domain(n, key)
                    && same_namespace
                    && selector.as_ref().is_some_and(|s| s.matches(other))
                    && let Some(count) = counts.get_mut(d)
                {
                    *count += 1;
                }
            }
            let min_domains = constraint["minDomains"].as_i64().unwrap_or(1);
            let global_min = if (counts.len() as i64) < min_domains {
                0
            } else {
                counts.values().copied().min().unwrap_or(0)
            };
            let self_match = i64::from(selector.as_ref().is_some_and(|s| s.matches(pod)));
            let skew = counts.get(here).copied().unwrap_or(0) + self_match - global_min;
            if skew > constraint["maxSkew"].as_i64().unwrap_or(1) {
                return Some("node(s) didn't match pod topology spread constraints".into());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}}})
    }

    fn pod(app: &str, spec: Value) -> Value {
        json!({"metadata": {"name": format!("{app}-x"), "namespace": "default", "labels": {"app": app}}, "spec": spec})
    }

    #[test]
    fn zone_spread_fills_the_emptiest_zone_first() {
        let nodes = vec![node("a", "z1"), node("b", "z2")];
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
        let mut by_node = BTreeMap::new();
        by_node.insert("a".to_owned(), vec![pod("web", spread.clone())]);
        let placement = Placement {
            nodes: &nodes,
            pods_by_node: &by_node,
        };
        let incoming = pod("web", spread);
        assert!(
            placement.unfit(&incoming, &nodes[0]).is_some(),
            "z1 already has one more"
        );
        assert_eq!(placement.unfit(&incoming, &nodes[1]), None);
    }

    #[test]
    fn anti_affinity_both_ways_and_affinity_to_a_group() {
        let nodes = vec![node("a", "z1"), node("b", "z2")];
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}}});
        let mut by_node = BTreeMap::new();
        by_node.insert("a".to_owned(), vec![pod("db", anti.clone())]);
        let placement = Placement {
            nodes: &nodes,
            pods_by_node: &by_node,
        };
        assert!(
            placement
                .unfit(&pod("db", anti.clone()), &nodes[0])
                .is_some()
        );
        assert_eq!(placement.unfit(&pod("db", anti), &nodes[1]), None);
        // The existing db pod keeps other db pods away even without their own terms.
        assert!(placement.unfit(&pod("db", json!({})), &nodes[0]).is_some());
        let near_db = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "db"}}}]}}});
        assert_eq!(
            placement.unfit(&pod("cache", near_db.clone()), &nodes[0]),
            None
        );
        assert!(placement.unfit(&pod("cache", near_db), &nodes[1]).is_some());
    }
}
