//! Topology: pod affinity, pod anti-affinity and topology spread, as
//! Karpenter tracks them while it places pods.
//!
//! ```text
//!   group (kind, key, namespaces, selector, skew, node filter)
//!     owners:  pods whose constraint this is
//!     counts:  domain -> matching pods placed there (existing pods counted
//!              once, at creation; placed pods recorded as they land)
//!
//!   forward groups  — "where are the pods my constraint selects?"
//!   inverse groups  — "where are pods with required anti-affinity?", so a
//!                     pod they select keeps out of their domains
//! ```
//!
//! For a pod and a candidate node (existing, or a planned claim still open to
//! several domains), [`Topology::add_requirements`] narrows the candidate's
//! requirements to the domains every group allows; [`Topology::record`]
//! counts the pod once it is placed. Ties between equally good domains are
//! broken by name, so the same input always gives the same answer.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::labels;
use crate::model::{AffinityTerm, Cluster, InstanceType, Pod, SpreadConstraint, WhenUnsatisfiable};
use crate::requirements::{Operator, Requirement, Requirements, WellKnown};
use crate::selector::LabelSelector;
use crate::taints::{Taint, Toleration, first_untolerated};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Spread,
    Affinity,
    AntiAffinity,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Spread => "topology spread",
            Kind::Affinity => "pod affinity",
            Kind::AntiAffinity => "pod anti-affinity",
        }
    }
}

/// Which nodes a spread constraint counts (nodeAffinityPolicy and
/// nodeTaintsPolicy).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct NodeFilter {
    /// ORed; empty matches every node.
    terms: Vec<Requirements>,
    /// Some: only nodes whose taints these tolerate.
    tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    fn for_spread(pod: &Pod, constraint: &SpreadConstraint) -> NodeFilter {
        let mut terms = Vec::new();
        if constraint.honor_node_affinity {
            let selector = Requirements::from_labels(&pod.node_selector);
            if pod.required_terms.is_empty() {
                if !selector.is_empty() {
                    terms.push(selector);
                }
            } else {
                for term in &pod.required_terms {
                    let mut combined = selector.clone();
                    combined.add_all(term);
                    terms.push(combined);
                }
            }
        }
        NodeFilter {
            terms,
            tolerations: constraint
                .honor_node_taints
                .then(|| pod.tolerations.clone()),
        }
    }

    fn matches(
        &self,
        taints: &[Taint],
        requirements: &Requirements,
        well_known: &dyn WellKnown,
    ) -> bool {
        let affinity = self.terms.is_empty()
            || self
                .terms
                .iter()
                .any(|term| requirements.compatible(term, well_known).is_ok());
        affinity
            && self
                .tolerations
                .as_ref()
                .is_none_or(|tolerations| first_untolerated(taints, tolerations).is_none())
    }

    fn tolerates(&self, taints: &[Taint]) -> bool {
        self.tolerations
            .as_ref()
            .is_none_or(|tolerations| first_untolerated(taints, tolerations).is_none())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct GroupId {
    kind: Kind,
    key: String,
    namespaces: Option<BTreeSet<String>>,
    selector: Option<LabelSelector>,
    max_skew: i32,
    min_domains: Option<i32>,
    filter: NodeFilter,
}

impl GroupId {
    /// The group of a pod (anti-)affinity term: no skew limit, no node filter.
    fn for_term(kind: Kind, term: &AffinityTerm) -> GroupId {
        GroupId {
            kind,
            key: term.topology_key.clone(),
            namespaces: term.namespaces.clone(),
            selector: term.selector.clone(),
            max_skew: i32::MAX,
            min_domains: None,
            filter: NodeFilter::default(),
        }
    }
}

#[derive(Clone, Debug)]
struct Group {
    id: GroupId,
    owners: HashSet<String>,
    /// Domain -> pods counted there. Hashed: hostname groups hold a domain
    /// per node and are looked up on every placement attempt.
    counts: HashMap<String, i32>,
    /// Every domain, in name order, for the scans that pick a domain.
    domains: BTreeSet<String>,
    empty: BTreeSet<String>,
}

impl Group {
    fn selects(&self, pod: &Pod) -> bool {
        self.id
            .namespaces
            .as_ref()
            .is_none_or(|namespaces| namespaces.contains(&pod.key.namespace))
            && self
                .id
                .selector
                .as_ref()
                .is_some_and(|selector| selector.matches(&pod.labels))
    }

    fn counts_pod(
        &self,
        pod: &Pod,
        taints: &[Taint],
        requirements: &Requirements,
        well_known: &dyn WellKnown,
    ) -> bool {
        self.selects(pod) && self.id.filter.matches(taints, requirements, well_known)
    }

    fn new(id: GroupId) -> Group {
        Group {
            id,
            owners: HashSet::new(),
            counts: HashMap::new(),
            domains: BTreeSet::new(),
            empty: BTreeSet::new(),
        }
    }

    fn register(&mut self, domain: &str) {
        // Hostname domains are looked up one at a time (every node has its
        // own), never listed: an unknown hostname simply counts zero.
        if self.is_hostname() {
            return;
        }
        if !self.counts.contains_key(domain) {
            self.counts.insert(domain.to_owned(), 0);
            self.domains.insert(domain.to_owned());
            self.empty.insert(domain.to_owned());
        }
    }

    /// Counts a pod in `domain`; true when the domain had none before.
    fn record(&mut self, domain: &str) -> bool {
        match self.counts.get_mut(domain) {
            Some(count) => {
                let first = *count == 0;
                if first {
                    self.empty.remove(domain);
                }
                *count += 1;
                first
            }
            None => {
                self.counts.insert(domain.to_owned(), 1);
                self.domains.insert(domain.to_owned());
                true
            }
        }
    }

    /// Takes back a pod counted in `domain`.
    fn unrecord(&mut self, domain: &str) {
        if let Some(count) = self.counts.get_mut(domain) {
            *count -= 1;
            if *count <= 0 {
                *count = 0;
                if !self.is_hostname() {
                    self.empty.insert(domain.to_owned());
                }
            }
        }
    }

    fn count(&self, domain: &str) -> i32 {
        self.counts.get(domain).copied().unwrap_or(0)
    }

    fn is_hostname(&self) -> bool {
        self.id.key == labels::HOSTNAME
    }

    fn next_domains(
        &self,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &Requirement,
    ) -> Requirement {
        let key = &self.id.key;
        // A hostname group on a node that names its host has one candidate
        // domain, that host: the only question is whether the pod may go there.
        if self.is_hostname()
            && let Some(host) = node_domains.single_value()
        {
            let allowed = self.host_allows(pod, pod_domains, host);
            return Requirement::in_values(key, allowed.then_some(host));
        }
        // No domains left is `DoesNotExist`: the node cannot take the pod.
        match self.id.kind {
            Kind::Spread => {
                Requirement::in_values(key, self.spread_domain(pod, pod_domains, node_domains))
            }
            Kind::Affinity => {
                Requirement::in_values(key, self.affinity_domains(pod, pod_domains, node_domains))
            }
            Kind::AntiAffinity => {
                Requirement::in_values(key, self.anti_affinity_domains(pod_domains, node_domains))
            }
        }
    }

    /// Whether the pod may land on `host`, a hostname group's domain.
    fn host_allows(&self, pod: &Pod, pod_domains: &Requirement, host: &str) -> bool {
        match self.id.kind {
            Kind::Spread => self.count(host) + i32::from(self.selects(pod)) <= self.id.max_skew,
            // Next to a selected pod, or anywhere allowed when this pod is the
            // first of a self-affine group.
            Kind::Affinity => {
                pod_domains.has(host)
                    && (self.count(host) > 0
                        || (self.selects(pod) && !self.any_populated(pod_domains)))
            }
            Kind::AntiAffinity => self.count(host) == 0,
        }
    }

    /// The candidate domains of a node: its listed values when it names them,
    /// otherwise every domain the group knows that the node allows.
    fn candidates<'a>(
        &'a self,
        node_domains: &'a Requirement,
    ) -> Box<dyn Iterator<Item = &'a str> + 'a> {
        if node_domains.operator() == Operator::In {
            Box::new(
                node_domains
                    .values()
                    .iter()
                    .map(String::as_str)
                    .filter(|d| self.counts.contains_key(*d) && node_domains.has(d)),
            )
        } else {
            Box::new(
                self.domains
                    .iter()
                    .map(String::as_str)
                    .filter(|d| node_domains.has(d)),
            )
        }
    }

    fn min_count(&self, pod_domains: &Requirement) -> i32 {
        if self.is_hostname() {
            // A new node can always be created, so a hostname domain with no
            // pods always exists.
            return 0;
        }
        let mut min = i32::MAX;
        let mut supported = 0;
        for domain in &self.domains {
            if pod_domains.has(domain) {
                supported += 1;
                min = min.min(self.count(domain));
            }
        }
        if self.id.min_domains.is_some_and(|m| supported < m) {
            min = 0;
        }
        min
    }

    /// The least populated domain within the skew, if any.
    fn spread_domain<'a>(
        &'a self,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &'a Requirement,
    ) -> Option<&'a str> {
        let self_selecting = i32::from(self.selects(pod));
        let min = self.min_count(pod_domains);
        let mut best: Option<(&str, i32)> = None;
        for domain in self.candidates(node_domains) {
            let count = self.count(domain) + self_selecting;
            if count.saturating_sub(min) <= self.id.max_skew && best.is_none_or(|(_, c)| count < c)
            {
                best = Some((domain, count));
            }
        }
        best.map(|(domain, _)| domain)
    }

    fn any_populated(&self, pod_domains: &Requirement) -> bool {
        self.counts
            .iter()
            .any(|(domain, count)| *count > 0 && pod_domains.has(domain))
    }

    /// The domains next to the pods the group selects.
    fn affinity_domains<'a>(
        &'a self,
        pod: &Pod,
        pod_domains: &Requirement,
        node_domains: &'a Requirement,
    ) -> BTreeSet<&'a str> {
        let self_selecting = self.selects(pod);
        let mut options: BTreeSet<&str> = self
            .candidates(node_domains)
            .filter(|d| pod_domains.has(d) && self.counts.get(*d).is_some_and(|c| *c > 0))
            .collect();
        if options.is_empty() && self_selecting && !self.any_populated(pod_domains) {
            // The first pod of a self-affine group picks a domain for all.
            if let Some(first) = self
                .domains
                .iter()
                .find(|d| pod_domains.has(d) && node_domains.has(d))
            {
                options.insert(first);
            }
            if let Some(first) = self.domains.iter().find(|d| pod_domains.has(d)) {
                options.insert(first);
            }
        }
        options
    }

    /// The domains with none of the pods the group selects.
    fn anti_affinity_domains<'a>(
        &'a self,
        pod_domains: &Requirement,
        node_domains: &'a Requirement,
    ) -> Vec<&'a str> {
        if node_domains.operator() == Operator::In
            && (node_domains.values().len()) < self.empty.len()
        {
            node_domains
                .values()
                .iter()
                .map(String::as_str)
                .filter(|d| self.empty.contains(*d) && pod_domains.has(d) && node_domains.has(d))
                .collect()
        } else {
            self.empty
                .iter()
                .map(String::as_str)
                .filter(|d| node_domains.has(d) && pod_domains.has(d))
                .collect()
        }
    }

    fn describe_counts(&self) -> String {
        let shown: Vec<String> = self
            .domains
            .iter()
            .take(10)
            .map(|d| format!("{d}: {}", self.count(d)))
            .collect();
        let more = if self.counts.len() > 10 {
            format!(", and {} more", self.counts.len() - 10)
        } else {
            String::new()
        };
        format!("{{{}{more}}}", shown.join(", "))
    }
}

/// A constraint no domain can satisfy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsatisfiable topology constraint for {kind}, key={key} (counts = {counts}, podDomains = {pod_domains}, nodeDomains = {node_domains})"
)]
pub struct TopologyError {
    pub kind: &'static str,
    pub key: String,
    pub counts: String,
    pub pod_domains: String,
    pub node_domains: String,
}

/// Why a node cannot take a pod, topologically.
#[derive(Debug)]
pub struct Blocked {
    /// The node will never take a pod with the same constraints.
    pub permanent: bool,
    /// The node will not take a pod with the same constraints until some
    /// affinity group gains a populated domain ([`Topology::affinity_epoch`]).
    pub until_affinity_changes: bool,
    /// Built only when asked for.
    pub error: Option<TopologyError>,
}

/// The domains each topology key can take, each with the taint sets of the
/// pools that offer it (an empty set: open to every pod).
type Universe = HashMap<String, BTreeMap<String, Vec<Vec<Taint>>>>;

/// Where a pool's nodes can land, for building the domain universe.
pub struct PoolDomains<'a> {
    pub requirements: &'a Requirements,
    pub taints: &'a [Taint],
    pub instance_types: &'a [InstanceType],
}

/// What every topology of one cluster shares: the domain universe and each
/// node's labels as requirements, built once for many scheduling runs.
pub struct TopologyBase {
    universe: Universe,
    node_requirements: Vec<Arc<Requirements>>,
    /// Node indices in name order (existing pods are counted in this order).
    nodes_by_name: Vec<usize>,
    /// Where running pods with required anti-affinity are, counted once for
    /// every run (a run takes back the pods of the nodes it removes).
    inverse: Vec<Group>,
    inverse_index: HashMap<GroupId, usize>,
    /// Groups counted over the whole snapshot, by id, filled as runs ask.
    whole_cluster: std::cell::RefCell<HashMap<GroupId, Group>>,
}

impl TopologyBase {
    pub fn new(cluster: &Cluster, pools: &[PoolDomains<'_>]) -> TopologyBase {
        let mut universe: Universe = HashMap::new();
        let mut insert = |key: &str, domain: &str, taints: &[Taint]| {
            let sets = universe
                .entry(key.to_owned())
                .or_default()
                .entry(domain.to_owned())
                .or_default();
            if taints.is_empty() {
                sets.clear();
                sets.push(Vec::new());
            } else if !sets.iter().any(Vec::is_empty) && !sets.iter().any(|s| s == taints) {
                sets.push(taints.to_vec());
            }
        };
        for pool in pools {
            for it in pool.instance_types {
                for requirement in pool.requirements.iter() {
                    let combined = match it.requirements.get(requirement.key()) {
                        Some(other) => requirement.intersection(other),
                        None => requirement.clone(),
                    };
                    for value in combined.values() {
                        insert(requirement.key(), value, pool.taints);
                    }
                }
                for requirement in it.requirements.iter() {
                    if pool.requirements.has(requirement.key()) {
                        continue;
                    }
                    for value in requirement.values() {
                        insert(requirement.key(), value, pool.taints);
                    }
                }
            }
            for requirement in pool.requirements.iter() {
                if requirement.operator() == Operator::In {
                    for value in requirement.values() {
                        insert(requirement.key(), value, pool.taints);
                    }
                }
            }
        }
        let node_requirements = cluster
            .nodes
            .iter()
            .map(|node| Arc::clone(&node.label_requirements))
            .collect();
        let mut nodes_by_name: Vec<usize> = (0..cluster.nodes.len()).collect();
        nodes_by_name.sort_by(|a, b| cluster.nodes[*a].name.cmp(&cluster.nodes[*b].name));
        let mut base = TopologyBase {
            universe,
            node_requirements,
            nodes_by_name,
            inverse: Vec::new(),
            inverse_index: HashMap::new(),
            whole_cluster: std::cell::RefCell::new(HashMap::new()),
        };
        for node in cluster.nodes.iter().filter(|n| !n.marked_for_deletion) {
            for pod in node.pods.iter().filter(|p| counts_as_running(p)) {
                for term in &pod.pod_anti_affinity {
                    let index = inverse_group(
                        &base.universe,
                        &mut base.inverse,
                        &mut base.inverse_index,
                        term,
                    );
                    base.inverse[index].owners.insert(pod.uid.clone());
                    if let Some(domain) = domain_of(
                        node.labels.get(&term.topology_key),
                        &term.topology_key,
                        &node.name,
                    ) {
                        let _ = base.inverse[index].record(domain);
                    }
                }
            }
        }
        base
    }
}

/// A group with its domains (the universe's, and those of nodes it counts)
/// and the running pods it selects counted, skipping `removed` nodes and
/// `excluded` pods.
fn count_group(
    cluster: &Cluster,
    base: &TopologyBase,
    id: &GroupId,
    removed: &[bool],
    excluded: &HashSet<String>,
) -> Group {
    let mut group = Group::new(id.clone());
    if let Some(domains) = base.universe.get(&id.key) {
        for (domain, taint_sets) in domains {
            let open = taint_sets.is_empty()
                || taint_sets.iter().any(|taints| id.filter.tolerates(taints));
            if open {
                group.register(domain);
            }
        }
    }
    for &index in &base.nodes_by_name {
        if removed.get(index).copied().unwrap_or(false) {
            continue;
        }
        let node = &cluster.nodes[index];
        let Some(domain) = base.counted_domain(id, index, node) else {
            continue;
        };
        if node.has_node {
            group.register(domain);
        }
        for pod in &node.pods {
            if counts_as_running(pod) && !excluded.contains(&pod.uid) && group.selects(pod) {
                let _ = group.record(domain);
            }
        }
    }
    group
}

impl TopologyBase {
    /// The group counted over every node and pod of the snapshot, kept for
    /// the runs that follow.
    /// The domain the node at `index` counts in for the group `id`: none
    /// when the group's node filter (its pods' node affinity and taint
    /// policies) leaves the node out, or the node lacks the key.
    fn counted_domain<'a>(
        &self,
        id: &GroupId,
        index: usize,
        node: &'a crate::model::StateNode,
    ) -> Option<&'a str> {
        id.filter
            .matches(
                &node.taints,
                &self.node_requirements[index],
                &crate::requirements::NoneWellKnown,
            )
            .then(|| domain_of(node.labels.get(&id.key), &id.key, &node.name))
            .flatten()
    }

    fn whole_cluster_group(&self, cluster: &Cluster, id: &GroupId) -> Group {
        if let Some(group) = self.whole_cluster.borrow().get(id) {
            return group.clone();
        }
        let group = count_group(cluster, self, id, &[], &HashSet::new());
        self.whole_cluster
            .borrow_mut()
            .insert(id.clone(), group.clone());
        group
    }
}

/// The inverse group of an anti-affinity term, created on first use.
fn inverse_group(
    universe: &Universe,
    groups: &mut Vec<Group>,
    index: &mut HashMap<GroupId, usize>,
    term: &AffinityTerm,
) -> usize {
    let id = GroupId::for_term(Kind::AntiAffinity, term);
    if let Some(existing) = index.get(&id) {
        return *existing;
    }
    let mut group = Group::new(id.clone());
    if let Some(domains) = universe.get(&term.topology_key) {
        for domain in domains.keys() {
            group.register(domain);
        }
    }
    groups.push(group);
    index.insert(id, groups.len() - 1);
    groups.len() - 1
}

pub struct Topology<'c> {
    cluster: &'c Cluster,
    base: &'c TopologyBase,
    /// Nodes that are gone in this run (disruption candidates): their pods
    /// are neither counted nor reserve domains.
    removed: Vec<bool>,
    groups: Vec<Group>,
    group_index: HashMap<GroupId, usize>,
    inverse: Vec<Group>,
    inverse_index: HashMap<GroupId, usize>,
    owned: HashMap<String, Vec<usize>>,
    inverse_owned: HashMap<String, Vec<usize>>,
    /// Pods being scheduled: not counted from the cluster, recorded as placed.
    excluded: HashSet<String>,
    respect_preferences: bool,
    affinity_epoch: u64,
}

impl<'c> Topology<'c> {
    pub fn new(
        cluster: &'c Cluster,
        base: &'c TopologyBase,
        removed: Vec<bool>,
        pending: &[impl std::ops::Deref<Target = Pod>],
        respect_preferences: bool,
    ) -> Topology<'c> {
        let mut topology = Topology {
            cluster,
            base,
            removed,
            groups: Vec::new(),
            group_index: HashMap::new(),
            inverse: base.inverse.clone(),
            inverse_index: base.inverse_index.clone(),
            owned: HashMap::new(),
            inverse_owned: HashMap::new(),
            excluded: pending.iter().map(|p| p.uid.clone()).collect(),
            respect_preferences,
            affinity_epoch: 0,
        };
        topology.forget_removed_anti_affinities();
        for pod in pending {
            topology.update(pod);
        }
        topology
    }

    fn is_removed(&self, node: usize) -> bool {
        self.removed.get(node).copied().unwrap_or(false)
    }

    /// The base counts every running pod with required anti-affinity; pods
    /// of nodes this run removes are no longer there.
    fn forget_removed_anti_affinities(&mut self) {
        let cluster = self.cluster;
        for (index, node) in cluster.nodes.iter().enumerate() {
            if !self.is_removed(index) || node.marked_for_deletion {
                continue;
            }
            for pod in node.pods.iter().filter(|p| counts_as_running(p)) {
                for term in &pod.pod_anti_affinity {
                    let group = self.inverse_group(term);
                    self.inverse[group].owners.remove(&pod.uid);
                    if let Some(domain) = domain_of(
                        node.labels.get(&term.topology_key),
                        &term.topology_key,
                        &node.name,
                    ) {
                        self.inverse[group].unrecord(domain);
                    }
                }
            }
        }
    }

    fn inverse_group(&mut self, term: &AffinityTerm) -> usize {
        inverse_group(
            &self.base.universe,
            &mut self.inverse,
            &mut self.inverse_index,
            term,
        )
    }

    /// (Re-)registers the pod's constraints, as they are now (preferences may
    /// have been relaxed).
    pub fn update(&mut self, pod: &Pod) {
        if let Some(previous) = self.owned.remove(&pod.uid) {
            for index in previous {
                self.groups[index].owners.remove(&pod.uid);
            }
        }
        if let Some(previous) = self.inverse_owned.remove(&pod.uid) {
            for index in previous {
                self.inverse[index].owners.remove(&pod.uid);
            }
        }
        let mut inverse_owned = Vec::new();
        for term in &pod.pod_anti_affinity {
            let index = self.inverse_group(term);
            self.inverse[index].owners.insert(pod.uid.clone());
            inverse_owned.push(index);
        }
        if !inverse_owned.is_empty() {
            self.inverse_owned.insert(pod.uid.clone(), inverse_owned);
        }
        let mut ids = Vec::new();
        for constraint in &pod.spread {
            if !self.respect_preferences
                && constraint.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway
            {
                continue;
            }
            ids.push(GroupId {
                kind: Kind::Spread,
                key: constraint.topology_key.clone(),
                namespaces: Some(BTreeSet::from([pod.key.namespace.clone()])),
                selector: constraint.selector.clone(),
                max_skew: constraint.max_skew,
                min_domains: constraint.min_domains,
                filter: NodeFilter::for_spread(pod, constraint),
            });
        }
        for term in &pod.pod_affinity {
            ids.push(GroupId::for_term(Kind::Affinity, term));
        }
        for term in &pod.pod_anti_affinity {
            ids.push(GroupId::for_term(Kind::AntiAffinity, term));
        }
        if self.respect_preferences {
            for (_, term) in &pod.preferred_pod_affinity {
                ids.push(GroupId::for_term(Kind::Affinity, term));
            }
            for (_, term) in &pod.preferred_pod_anti_affinity {
                ids.push(GroupId::for_term(Kind::AntiAffinity, term));
            }
        }
        if ids.is_empty() {
            return;
        }
        let mut owned = Vec::with_capacity(ids.len());
        for id in ids {
            let index = match self.group_index.get(&id) {
                Some(index) => *index,
                None => self.create_group(id, pod),
            };
            self.groups[index].owners.insert(pod.uid.clone());
            owned.push(index);
        }
        self.owned.insert(pod.uid.clone(), owned);
    }

    fn create_group(&mut self, id: GroupId, _first_owner: &Pod) -> usize {
        let cluster = self.cluster;
        let base = self.base;
        let group = if self.removed.iter().any(|r| *r) {
            // A simulation with nodes taken away: start from the counts over
            // the whole cluster (computed once per snapshot) and take back
            // the pods of the removed nodes, which include every pod this
            // run places.
            let mut group = base.whole_cluster_group(cluster, &id);
            for (index, node) in cluster.nodes.iter().enumerate() {
                if !self.is_removed(index) {
                    continue;
                }
                let Some(domain) = base.counted_domain(&id, index, node) else {
                    continue;
                };
                for pod in &node.pods {
                    if counts_as_running(pod) && group.selects(pod) {
                        group.unrecord(domain);
                    }
                }
            }
            group
        } else {
            count_group(cluster, base, &id, &self.removed, &self.excluded)
        };
        self.groups.push(group);
        self.group_index.insert(id, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// Adds a domain every group on `key` can choose (a new node's hostname,
    /// an existing node's).
    pub fn register(&mut self, key: &str, domain: &str) {
        for group in self.groups.iter_mut().chain(self.inverse.iter_mut()) {
            if group.id.key == key {
                group.register(domain);
            }
        }
    }

    /// The requirements the pod's topology adds to a node with
    /// `node_requirements` (pod requirements already merged in).
    pub fn add_requirements(
        &self,
        pod: &Pod,
        taints: &[Taint],
        pod_requirements: &Requirements,
        node_requirements: &Requirements,
        well_known: &dyn WellKnown,
        explain: bool,
    ) -> Result<Vec<Requirement>, Blocked> {
        let mut added: Vec<Requirement> = Vec::new();
        let owned = self.owned.get(&pod.uid).map_or(&[][..], Vec::as_slice);
        let matching_inverse = self.inverse.iter().filter(|group| {
            !group.owners.is_empty() && group.counts_pod(pod, taints, node_requirements, well_known)
        });
        let groups = owned
            .iter()
            .map(|i| &self.groups[*i])
            .chain(matching_inverse);
        for group in groups {
            let key = &group.id.key;
            let exists;
            let pod_domains = match pod_requirements.get(key) {
                Some(r) => r,
                None => {
                    exists = Requirement::exists(key);
                    &exists
                }
            };
            let node_exists;
            let mut narrowed;
            let mut node_domains = match node_requirements.get(key) {
                Some(r) => r,
                None => {
                    node_exists = Requirement::exists(key);
                    &node_exists
                }
            };
            // Narrowing by earlier groups on the same key applies to later ones.
            for earlier in added.iter().filter(|r| r.key() == key) {
                narrowed = node_domains.intersection(earlier);
                node_domains = &narrowed;
            }
            let domains = group.next_domains(pod, pod_domains, node_domains);
            if domains.is_empty() {
                // Counts only grow, so a node whose own hostname already holds
                // too many (or any forbidden) pods stays closed to this pod.
                let permanent = group.is_hostname()
                    && node_domains.single_value().is_some()
                    && matches!(group.id.kind, Kind::AntiAffinity | Kind::Spread);
                let error = explain.then(|| TopologyError {
                    kind: group.id.kind.describe(),
                    key: key.clone(),
                    counts: group.describe_counts(),
                    pod_domains: pod_domains.to_string(),
                    node_domains: node_domains.to_string(),
                });
                // An affinity answer depends only on which domains are
                // populated, a set that only grows.
                let until_affinity_changes =
                    group.id.kind == Kind::Affinity && !added.iter().any(|r| r.key() == key);
                return Err(Blocked {
                    permanent,
                    until_affinity_changes,
                    error,
                });
            }
            // A domain the node already has adds nothing.
            if node_domains != &domains {
                added.push(domains);
            }
        }
        Ok(added)
    }

    /// Counts a placed pod in every group that selects it.
    pub fn record(
        &mut self,
        pod: &Pod,
        taints: &[Taint],
        requirements: &Requirements,
        well_known: &dyn WellKnown,
    ) {
        for group in &mut self.groups {
            if !group.counts_pod(pod, taints, requirements, well_known) {
                continue;
            }
            let Some(domains) = requirements.get(&group.id.key) else {
                continue;
            };
            if group.id.kind == Kind::AntiAffinity {
                // Block every domain the pod might still land in.
                if !domains.is_complement() {
                    for domain in domains.values() {
                        let _ = group.record(domain);
                    }
                }
            } else if let Some(domain) = domains.single_value()
                && group.record(domain)
                && group.id.kind == Kind::Affinity
            {
                self.affinity_epoch += 1;
            }
        }
        if let Some(owned) = self.inverse_owned.get(&pod.uid) {
            for index in owned {
                let group = &mut self.inverse[*index];
                if let Some(domains) = requirements.get(&group.id.key)
                    && !domains.is_complement()
                {
                    for domain in domains.values() {
                        let _ = group.record(domain);
                    }
                }
            }
        }
    }

    /// Changes whenever an affinity group's set of populated domains grows.
    pub fn affinity_epoch(&self) -> u64 {
        self.affinity_epoch
    }

    /// Whether the pod has constraints whose counts depend on where other
    /// pods land (it or something else selects it).
    pub fn has_constraints(&self, pod: &Pod) -> bool {
        self.owned.contains_key(&pod.uid)
    }
}

fn counts_as_running(pod: &Pod) -> bool {
    !pod.is_terminal() && !pod.terminating
}

fn domain_of<'a>(label: Option<&'a String>, key: &str, node_name: &'a str) -> Option<&'a str> {
    match label {
        Some(value) => Some(value.as_str()),
        None if key == labels::HOSTNAME => Some(node_name),
        None => None,
    }
}
