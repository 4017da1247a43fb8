//! kube-scheduler's default topology spread constraints, as Karpenter
//! mirrors them (`--scheduler-config` / `SCHEDULER_CONFIG`, v1.15).
//!
//! ```text
//!   "{podTopologySpread: {defaultConstraints: [...]}}" ──SchedulerConfig::parse──▶ constraints (no selector)
//!   pod without constraints of its own ──DefaultSpread::for_pod──▶ the constraints, each with the pod's deduced selector
//!        selector = matchLabels of every Service of its namespace that selects it
//!                 + its ReplicaSet's or StatefulSet's selector (as matchExpressions)
//! ```
//!
//! As kube-scheduler's PodTopologySpread plugin: a pod with any constraint
//! of its own keeps its own; a pod for which no selector can be deduced
//! (no Service selects it, no such controller) gets none, since an empty
//! selector would count every pod of the namespace. The defaults exist only
//! in the snapshot, never on the pod.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use karpenter_proto::scheduler::v1 as sched;
use serde::Deserialize;

use crate::pod::namespace_of;

/// The parts of the cluster's kube-scheduler configuration Karpenter
/// mirrors: the default topology spread constraints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerConfig {
    /// Without selectors: each pod gets its own.
    pub default_constraints: Vec<sched::TopologySpreadConstraint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    pod_topology_spread: Option<PodTopologySpread>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PodTopologySpread {
    #[serde(default)]
    default_constraints: Vec<core::TopologySpreadConstraint>,
}

const PREFIX: &str = "validating scheduler config, podTopologySpread.defaultConstraints";

impl SchedulerConfig {
    /// Reads the document (YAML or JSON) and checks it as kube-scheduler's
    /// `ValidatePodTopologySpreadArgs` does; empty text is no configuration.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let document: Document =
            serde_yaml::from_str(text).map_err(|e| format!("decoding scheduler config, {e}"))?;
        let constraints = document
            .pod_topology_spread
            .map(|p| p.default_constraints)
            .unwrap_or_default();
        for (i, constraint) in constraints.iter().enumerate() {
            check(constraint).map_err(|e| format!("{PREFIX}[{i}]{e}"))?;
            let repeated = constraints[..i].iter().position(|other| {
                other.topology_key == constraint.topology_key
                    && other.when_unsatisfiable == constraint.when_unsatisfiable
            });
            if let Some(j) = repeated {
                return Err(format!(
                    "{PREFIX}[{i}] is a duplicate of [{j}], {{{}, {}}}",
                    constraint.topology_key, constraint.when_unsatisfiable
                ));
            }
        }
        let default_constraints =
            crate::pod::spread(&constraints, "podTopologySpread.defaultConstraints")
                .map_err(|e| format!("{}: {}", e.field, e.message))?;
        Ok(Self {
            default_constraints,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.default_constraints.is_empty()
    }
}

/// One default constraint; the error continues the constraint's path.
fn check(c: &core::TopologySpreadConstraint) -> Result<(), String> {
    if c.max_skew <= 0 {
        return Err(".maxSkew must be greater than 0".into());
    }
    if c.topology_key.is_empty() {
        return Err(".topologyKey must be set".into());
    }
    let errors = karpenter_core::names::qualified_name(&c.topology_key);
    if !errors.is_empty() {
        return Err(format!(
            ".topologyKey {:?} is not a valid label name, {}",
            c.topology_key,
            errors.join(", ")
        ));
    }
    if !matches!(
        c.when_unsatisfiable.as_str(),
        "DoNotSchedule" | "ScheduleAnyway"
    ) {
        return Err(format!(
            ".whenUnsatisfiable {:?} must be one of \"DoNotSchedule\" or \"ScheduleAnyway\"",
            c.when_unsatisfiable
        ));
    }
    if c.label_selector.is_some() {
        return Err(".labelSelector must not be set, as selectors are deduced for each pod".into());
    }
    if c.match_label_keys.as_ref().is_some_and(|k| !k.is_empty()) {
        return Err(
            ".matchLabelKeys must not be set, as it has no effect on default constraints".into(),
        );
    }
    Ok(())
}

/// What deducing a pod's selector reads, gathered once per build.
#[derive(Clone, Debug, Default)]
pub struct DefaultSpread {
    constraints: Vec<sched::TopologySpreadConstraint>,
    /// Namespace → the selectors of its Services (a Service without one
    /// selects nothing and is left out).
    services: BTreeMap<String, Vec<BTreeMap<String, String>>>,
    /// (controller kind, namespace, name) → its selector as expressions.
    owners: BTreeMap<(String, String, String), Vec<sched::LabelSelectorRequirement>>,
}

impl DefaultSpread {
    pub fn new(config: &SchedulerConfig) -> Self {
        Self {
            constraints: config.default_constraints.clone(),
            ..Self::default()
        }
    }

    pub fn service(&mut self, service: &core::Service) {
        let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.clone()) else {
            return;
        };
        self.services
            .entry(namespace_of(&service.metadata))
            .or_default()
            .push(selector);
    }

    pub fn replica_set(&mut self, r: &ReplicaSet) {
        self.owner("ReplicaSet", &r.metadata, &r.spec.selector);
    }

    pub fn stateful_set(&mut self, s: &StatefulSet) {
        self.owner("StatefulSet", &s.metadata, &s.spec.selector);
    }

    /// A manifest's Deployment: its pods are expanded as its ReplicaSet's,
    /// which has its selector.
    pub fn deployment(&mut self, d: &Deployment) {
        self.owner("ReplicaSet", &d.metadata, &d.spec.selector);
    }

    fn owner(
        &mut self,
        kind: &str,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        selector: &LabelSelector,
    ) {
        let requirement =
            |key: &str, operator: &str, values: Vec<String>| sched::LabelSelectorRequirement {
                key: key.to_owned(),
                operator: operator.to_owned(),
                values,
            };
        let mut expressions: Vec<sched::LabelSelectorRequirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| requirement(k, "In", vec![v.clone()]))
            .collect();
        expressions.extend(
            selector
                .match_expressions
                .iter()
                .flatten()
                .map(|e| requirement(&e.key, &e.operator, e.values.clone().unwrap_or_default())),
        );
        let name = meta.name.clone().unwrap_or_default();
        self.owners
            .insert((kind.to_owned(), namespace_of(meta), name), expressions);
    }

    /// The default constraints for `pod`, which has none of its own; none
    /// when no selector can be deduced.
    pub fn for_pod(&self, pod: &sched::Pod) -> Vec<sched::TopologySpreadConstraint> {
        let mut match_labels = BTreeMap::new();
        let services = self.services.get(&pod.namespace).into_iter().flatten();
        for selector in services {
            if selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v)) {
                match_labels.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let owner = (
            pod.owner_kind.clone(),
            pod.namespace.clone(),
            pod.owner_name.clone(),
        );
        let match_expressions = self.owners.get(&owner).cloned().unwrap_or_default();
        if match_labels.is_empty() && match_expressions.is_empty() {
            return Vec::new();
        }
        let selector = sched::LabelSelector {
            match_labels,
            match_expressions,
        };
        self.constraints
            .iter()
            .map(|c| sched::TopologySpreadConstraint {
                label_selector: Some(selector.clone()),
                ..c.clone()
            })
            .collect()
    }
}
