//! Builders for scheduling and disruption scenarios over the planner's own
//! model, shaped like Karpenter's test fixtures (its fake cloud provider's
//! instance types, `test.NodePool()`, `test.UnschedulablePod()`), so
//! upstream scenarios port line for line.
//!
//! Each builder gives what the scheduler service's `from_wire` gives for the
//! same object, defaults included: a pod in `default` with `pods: 1`
//! requested and its affinity terms looking in its own namespace; a pool
//! ready, of weight 0, its labels and `karpenter.sh/nodepool` among its
//! requirements, with no disruption block (no budget, no consolidateAfter,
//! WhenEmptyOrUnderutilized); an instance type declaring its name, zones and
//! capacity types, its allocatable its capacity less kube-reserved; a node
//! labelled with its hostname and pool.
//!
//! What the model leaves to its caller is stated by the tests themselves,
//! as the planner sees it: a pod's effective requests (init containers,
//! sidecars, overhead, limits standing in for requests), a node's taints
//! without the startup taints of a node not yet initialized, a label a
//! catalog's type does not carry declared `DoesNotExist`. The scheduler's
//! wire tests check that `from_wire` derives them so.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use karpenter_core::labels;
use karpenter_core::requirements::{Requirement, Requirements};
use karpenter_core::resources::Resources;
use karpenter_core::selector::LabelSelector;
use karpenter_core::taints::{Effect, Taint, Toleration};
use karpenter_planner::disruption::{self, DisruptionOptions, DisruptionPlan};
use karpenter_planner::hostports::HostPort;
use karpenter_planner::model::{
    AffinityTerm, Budget, Cluster, ConsolidationPolicy, DaemonSet, DisruptionState, InstanceType,
    NodePool, Offering, OfferingSpace, Pdb, Pod, PodKey, SpreadConstraint, StateNode,
    WhenUnsatisfiable,
};
use karpenter_planner::solve::{self, Options, PlannedClaim, Solution};

pub use karpenter_core::requirements::Operator;

pub const GI: i64 = 1 << 30;
pub const MI: i64 = 1 << 20;

pub const ZONE: &str = labels::TOPOLOGY_ZONE;
pub const HOSTNAME: &str = labels::HOSTNAME;
pub const CAPACITY_TYPE: &str = labels::CAPACITY_TYPE;
pub const INSTANCE_TYPE: &str = labels::INSTANCE_TYPE;
pub const ARCH: &str = labels::ARCH;
pub const OS: &str = labels::OS;

// --- quantities, requirements, selectors, taints ------------------------------

/// Resources from `(name, quantity)` pairs (CPU in millicores, the rest in
/// base units).
pub fn resources(pairs: &[(&str, i64)]) -> Resources {
    let map: BTreeMap<String, i64> = pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    Resources::from_map(&map)
}

/// A pool's limits.
pub fn limits(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

pub fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    Requirement::new(key, op, values.iter().copied()).expect("a valid requirement")
}

pub fn in_(key: &str, values: &[&str]) -> Requirement {
    req(key, Operator::In, values)
}

/// A requirement with its minValues.
pub fn min_values(requirement: Requirement, min: usize) -> Requirement {
    requirement.with_min_values(Some(min))
}

/// A node selector term: its expressions ANDed.
pub fn term(requirements: Vec<Requirement>) -> Requirements {
    Requirements::from_requirements(requirements)
}

/// `matchLabels` (keys sorted, as the wire's ordered map gives them).
pub fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    let sorted: BTreeMap<&str, &str> = pairs.iter().copied().collect();
    let mut selector = LabelSelector::default();
    for (key, value) in sorted {
        selector.require(key, value);
    }
    selector
}

/// A pod affinity term selecting `labels` in the given namespaces.
pub fn affinity_term(key: &str, pairs: &[(&str, &str)], namespaces: &[&str]) -> AffinityTerm {
    AffinityTerm {
        selector: Some(selector(pairs)),
        namespaces: Some(namespaces.iter().map(|n| (*n).to_owned()).collect()),
        topology_key: labels::normalize_label(key).to_owned(),
    }
}

pub fn taint(key: &str, value: &str, effect: Effect) -> Taint {
    Taint {
        key: key.to_owned(),
        value: value.to_owned(),
        effect,
    }
}

/// `operator: Equal` (`exists: false`) or `Exists`; no effect tolerates
/// every effect.
pub fn toleration(key: &str, exists: bool, value: &str, effect: Option<Effect>) -> Toleration {
    Toleration {
        key: key.to_owned(),
        exists,
        value: value.to_owned(),
        effect,
    }
}

/// `operator: Exists` with nothing else: tolerates every taint.
pub fn tolerate_everything() -> Toleration {
    toleration("", true, "", None)
}

// --- instance types -----------------------------------------------------------

pub fn offering(zone: &str, capacity_type: &str, price: f64) -> Offering {
    Offering {
        zone: zone.to_owned(),
        capacity_type: capacity_type.to_owned(),
        price,
        available: true,
        requirements: Requirements::new(),
        zone_id: 0,
        capacity_type_id: 0,
    }
}

/// An instance type as a catalog declares it: its requirements, plus its
/// name, zones and capacity types where they do not say (from the
/// offerings); allocatable is the capacity less `reserved`.
pub fn instance_type(
    name: &str,
    requirements: Vec<Requirement>,
    offerings: Vec<Offering>,
    capacity: &[(&str, i64)],
    reserved: &[(&str, i64)],
) -> InstanceType {
    let mut reqs = Requirements::from_requirements(requirements);
    if !reqs.has(INSTANCE_TYPE) {
        reqs.add(Requirement::single(INSTANCE_TYPE, name));
    }
    if !reqs.has(ZONE) {
        reqs.add(Requirement::in_values(
            ZONE,
            offerings.iter().map(|o| o.zone.as_str()),
        ));
    }
    if !reqs.has(CAPACITY_TYPE) {
        reqs.add(Requirement::in_values(
            CAPACITY_TYPE,
            offerings.iter().map(|o| o.capacity_type.as_str()),
        ));
    }
    let capacity_map: BTreeMap<String, i64> = capacity
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    let reserved_map: BTreeMap<String, i64> = reserved
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    let allocatable = karpenter_core::resources::allocatable(&capacity_map, [&reserved_map]);
    InstanceType {
        name: name.to_owned(),
        requirements: reqs,
        offerings,
        capacity: Resources::from_map(&capacity_map),
        allocatable: Resources::from_map(&allocatable),
        volume_limits: Default::default(),
    }
}

/// Karpenter's fake instance type: offerings spot in zones 1-2, on-demand in
/// 1-3; price 0.1 per CPU + 0.1 per GB of memory (+1 per GPU resource);
/// kube-reserved 100m CPU and 10Mi.
pub struct ItSpec {
    pub name: String,
    pub cpu: i64,
    pub memory: i64,
    pub pods: i64,
    pub arch: &'static str,
    pub os: Vec<&'static str>,
    pub extra: Vec<(&'static str, i64)>,
    pub zones_spot: Vec<&'static str>,
    pub zones_on_demand: Vec<&'static str>,
    pub labels: Vec<(String, String)>,
}

impl ItSpec {
    pub fn new(name: &str, cpu: i64, memory: i64) -> ItSpec {
        ItSpec {
            name: name.to_owned(),
            cpu,
            memory,
            pods: 5,
            arch: "amd64",
            os: vec!["linux", "windows", "darwin"],
            extra: Vec::new(),
            zones_spot: vec!["test-zone-1", "test-zone-2"],
            zones_on_demand: vec!["test-zone-1", "test-zone-2", "test-zone-3"],
            labels: Vec::new(),
        }
    }

    pub fn pods(mut self, pods: i64) -> Self {
        self.pods = pods;
        self
    }

    pub fn arch(mut self, arch: &'static str) -> Self {
        self.arch = arch;
        self
    }

    pub fn resource(mut self, name: &'static str, quantity: i64) -> Self {
        self.extra.push((name, quantity));
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn build(self) -> InstanceType {
        let price = 0.1 * self.cpu as f64 / 1000.0
            + 0.1 * self.memory as f64 / 1e9
            + self.extra.len() as f64;
        let offerings = self
            .zones_spot
            .iter()
            .map(|zone| offering(zone, "spot", price))
            .chain(
                self.zones_on_demand
                    .iter()
                    .map(|zone| offering(zone, "on-demand", price)),
            )
            .collect();
        let size = if self.cpu > 4000 && self.memory > 8 * GI {
            "large"
        } else {
            "small"
        };
        let mut requirements = vec![
            in_(INSTANCE_TYPE, &[&self.name]),
            in_(ARCH, &[self.arch]),
            in_(OS, &self.os),
            in_("size", &[size]),
            in_("integer", &[&(self.cpu / 1000).to_string()]),
        ];
        if size == "large" {
            requirements.push(in_("special", &["optional"]));
        } else {
            requirements.push(req("special", Operator::DoesNotExist, &[]));
        }
        for (key, value) in &self.labels {
            requirements.push(in_(key, &[value]));
        }
        let mut capacity = vec![
            ("cpu", self.cpu),
            ("memory", self.memory),
            ("pods", self.pods),
        ];
        capacity.extend(self.extra.iter().copied());
        instance_type(
            &self.name,
            requirements,
            offerings,
            &capacity,
            &[("cpu", 100), ("memory", 10 * MI)],
        )
    }
}

/// The fake provider's default catalog.
pub fn default_instance_types() -> Vec<InstanceType> {
    vec![
        ItSpec::new("default-instance-type", 4000, 4 * GI).build(),
        ItSpec::new("small-instance-type", 2000, 2 * GI).build(),
        ItSpec::new("gpu-vendor-instance-type", 4000, 4 * GI)
            .resource("fake.com/vendor-a", 2)
            .build(),
        ItSpec::new("gpu-vendor-b-instance-type", 4000, 4 * GI)
            .resource("fake.com/vendor-b", 2)
            .build(),
        {
            let mut arm = ItSpec::new("arm-instance-type", 16000, 128 * GI).arch("arm64");
            arm.os = vec!["ios", "linux", "windows", "darwin"];
            arm.build()
        },
        ItSpec::new("single-pod-instance-type", 4000, 4 * GI)
            .pods(1)
            .build(),
    ]
}

// --- node pools -----------------------------------------------------------------

/// A ready pool of weight 0 on the first catalog, without requirements,
/// taints, limits or a disruption block.
pub fn pool(name: &str) -> NodePool {
    NodePool {
        name: name.to_owned(),
        weight: 0,
        requirements: Requirements::from_requirements([Requirement::single(
            labels::NODE_POOL,
            name,
        )]),
        labels: BTreeMap::from([(labels::NODE_POOL.to_owned(), name.to_owned())]),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        limits: BTreeMap::new(),
        usage: Resources::default(),
        ready: true,
        catalog: 0,
        consolidation: ConsolidationPolicy::WhenEmptyOrUnderutilized,
        consolidate_after: None,
        budgets: Vec::new(),
        expire_after: None,
        template_hash: String::new(),
        replicas: None,
    }
}

/// A budget of `nodes` (a count or a percentage), always, for every reason.
pub fn budget(nodes: &str) -> Budget {
    Budget {
        nodes: nodes.to_owned(),
        window: None,
        reasons: Vec::new(),
    }
}

pub trait PoolExt {
    /// Adds a spec requirement.
    fn require(self, requirement: Requirement) -> Self;
    /// A template label: on the pool's nodes, and a requirement.
    fn label(self, key: &str, value: &str) -> Self;
    /// The same pool under another name (its `karpenter.sh/nodepool` label
    /// and requirement follow).
    fn renamed(self, name: &str) -> Self;
}

impl PoolExt for NodePool {
    fn require(mut self, requirement: Requirement) -> Self {
        self.requirements.add(requirement);
        self
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self.requirements.add(Requirement::single(key, value));
        self
    }

    fn renamed(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self.labels
            .insert(labels::NODE_POOL.to_owned(), name.to_owned());
        self.requirements.remove(labels::NODE_POOL);
        self.requirements
            .add(Requirement::single(labels::NODE_POOL, name));
        self
    }
}

// --- pods -----------------------------------------------------------------------

/// A pending pod in `default` requesting nothing but its slot (`pods: 1`).
pub fn pod(name: &str) -> Pod {
    Pod {
        key: PodKey {
            namespace: "default".to_owned(),
            name: name.to_owned(),
        },
        uid: format!("uid-{name}"),
        labels: BTreeMap::new(),
        node_name: String::new(),
        requests: Resources {
            pods: 1,
            ..Resources::default()
        },
        node_selector: BTreeMap::new(),
        required_terms: Vec::new(),
        preferred_terms: Vec::new(),
        pod_affinity: Vec::new(),
        preferred_pod_affinity: Vec::new(),
        pod_anti_affinity: Vec::new(),
        preferred_pod_anti_affinity: Vec::new(),
        spread: Vec::new(),
        tolerations: Vec::new(),
        host_ports: Vec::new(),
        priority: 0,
        do_not_disrupt: false,
        deletion_cost: 0,
        disruption_cost: None,
        owner_kind: String::new(),
        creation_seconds: 0,
        phase: String::new(),
        terminating: false,
        not_ready: false,
        dra_requests: false,
        buffer: false,
        volumes: Vec::new(),
    }
}

pub trait PodExt {
    /// Its effective CPU request, in millicores.
    fn cpu(self, millis: i64) -> Self;
    /// Its effective memory request, in bytes.
    fn memory(self, bytes: i64) -> Self;
    fn resource(self, name: &str, quantity: i64) -> Self;
    fn label(self, key: &str, value: &str) -> Self;
    fn selector(self, key: &str, value: &str) -> Self;
    /// A required node affinity term (terms are ORed).
    fn required(self, term: Vec<Requirement>) -> Self;
    fn preferred(self, weight: i32, term: Vec<Requirement>) -> Self;
    fn tolerate(self, toleration: Toleration) -> Self;
    /// A TCP host port on every address.
    fn host_port(self, port: i32) -> Self;
    /// A DoNotSchedule spread over pods with these labels (nodeAffinityPolicy
    /// Honor, nodeTaintsPolicy Ignore: the defaults).
    fn spread(self, key: &str, max_skew: i32, labels: &[(&str, &str)]) -> Self;
    /// Required pod affinity to pods with these labels in the pod's namespace.
    fn affinity(self, key: &str, labels: &[(&str, &str)]) -> Self;
    /// Required pod anti-affinity, likewise.
    fn anti_affinity(self, key: &str, labels: &[(&str, &str)]) -> Self;
    fn preferred_affinity(self, weight: i32, key: &str, labels: &[(&str, &str)]) -> Self;
    fn preferred_anti_affinity(self, weight: i32, key: &str, labels: &[(&str, &str)]) -> Self;
    /// Bound to `node` and running.
    fn on(self, node: &str) -> Self;
}

impl PodExt for Pod {
    fn cpu(mut self, millis: i64) -> Self {
        self.requests.cpu = millis;
        self
    }

    fn memory(mut self, bytes: i64) -> Self {
        self.requests.memory = bytes;
        self
    }

    fn resource(mut self, name: &str, quantity: i64) -> Self {
        self.requests.set(name, quantity);
        self
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    fn selector(mut self, key: &str, value: &str) -> Self {
        self.node_selector
            .insert(labels::normalize_label(key).to_owned(), value.to_owned());
        self
    }

    fn required(mut self, requirements: Vec<Requirement>) -> Self {
        self.required_terms.push(term(requirements));
        self
    }

    fn preferred(mut self, weight: i32, requirements: Vec<Requirement>) -> Self {
        self.preferred_terms.push((weight, term(requirements)));
        self
    }

    fn tolerate(mut self, toleration: Toleration) -> Self {
        self.tolerations.push(toleration);
        self
    }

    fn host_port(mut self, port: i32) -> Self {
        self.host_ports.push(HostPort {
            ip: String::new(),
            port,
            protocol: "TCP".to_owned(),
        });
        self
    }

    fn spread(mut self, key: &str, max_skew: i32, pairs: &[(&str, &str)]) -> Self {
        self.spread.push(SpreadConstraint {
            max_skew,
            topology_key: labels::normalize_label(key).to_owned(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            selector: Some(selector(pairs)),
            min_domains: None,
            honor_node_affinity: true,
            honor_node_taints: false,
        });
        self
    }

    fn affinity(mut self, key: &str, pairs: &[(&str, &str)]) -> Self {
        let term = affinity_term(key, pairs, &[&self.key.namespace]);
        self.pod_affinity.push(term);
        self
    }

    fn anti_affinity(mut self, key: &str, pairs: &[(&str, &str)]) -> Self {
        let term = affinity_term(key, pairs, &[&self.key.namespace]);
        self.pod_anti_affinity.push(term);
        self
    }

    fn preferred_affinity(mut self, weight: i32, key: &str, pairs: &[(&str, &str)]) -> Self {
        let term = affinity_term(key, pairs, &[&self.key.namespace]);
        self.preferred_pod_affinity.push((weight, term));
        self
    }

    fn preferred_anti_affinity(mut self, weight: i32, key: &str, pairs: &[(&str, &str)]) -> Self {
        let term = affinity_term(key, pairs, &[&self.key.namespace]);
        self.preferred_pod_anti_affinity.push((weight, term));
        self
    }

    fn on(mut self, node: &str) -> Self {
        self.node_name = node.to_owned();
        self.phase = "Running".to_owned();
        self
    }
}

/// A DaemonSet in `default` named after its template's pod.
pub fn daemonset(pod: Pod) -> DaemonSet {
    let mut pod = pod;
    pod.owner_kind = "DaemonSet".to_owned();
    DaemonSet {
        key: PodKey {
            namespace: "default".to_owned(),
            name: format!("ds-{}", pod.key.name),
        },
        pod,
    }
}

/// A PDB in `default` over pods with these labels; `fully_blocking` is
/// whether it is `maxUnavailable: 0` (or `"0%"`, or `minAvailable: 100%`).
pub fn pdb(
    name: &str,
    pairs: &[(&str, &str)],
    disruptions_allowed: i32,
    fully_blocking: bool,
) -> Pdb {
    Pdb {
        key: PodKey {
            namespace: "default".to_owned(),
            name: name.to_owned(),
        },
        selector: Some(selector(pairs)),
        disruptions_allowed,
        always_allow_unhealthy: false,
        fully_blocking,
    }
}

// --- nodes ----------------------------------------------------------------------

/// A running, initialized node with the given labels (and its hostname) and
/// allocatable, its capacity the same.
pub fn node(name: &str, pairs: &[(&str, &str)], allocatable: Resources) -> StateNode {
    let mut node = StateNode {
        name: name.to_owned(),
        node_claim_name: String::new(),
        node_pool: String::new(),
        labels: pairs
            .iter()
            .map(|(k, v)| (labels::normalize_label(k).to_owned(), (*v).to_owned()))
            .collect(),
        label_requirements: Arc::new(Requirements::new()),
        taints: Vec::new(),
        capacity: allocatable.clone(),
        allocatable,
        pods: Vec::new(),
        has_node: true,
        initialized: true,
        marked_for_deletion: false,
        unschedulable: false,
        price: 0.0,
        creation_seconds: 0,
        disruption: DisruptionState::default(),
        capacity_type: String::new(),
        zone: String::new(),
        instance_type: String::new(),
        planned: false,
        volume_limits: Default::default(),
    };
    node.labels
        .entry(labels::HOSTNAME.to_owned())
        .or_insert_with(|| name.to_owned());
    derive_from_labels(&mut node);
    node
}

/// What a node's labels say once: its requirements, capacity type, zone and
/// instance type.
fn derive_from_labels(node: &mut StateNode) {
    node.label_requirements = Arc::new(Requirements::from_labels(&node.labels));
    let label = |key: &str| node.labels.get(key).cloned().unwrap_or_default();
    node.capacity_type = label(CAPACITY_TYPE);
    node.zone = label(ZONE);
    node.instance_type = label(INSTANCE_TYPE);
}

pub trait NodeExt {
    fn label(self, key: &str, value: &str) -> Self;
    /// Managed by `pool` (and labelled so).
    fn in_pool(self, pool: &str) -> Self;
    fn with_pods(self, pods: Vec<Pod>) -> Self;
}

impl NodeExt for StateNode {
    fn label(mut self, key: &str, value: &str) -> Self {
        self.labels
            .insert(labels::normalize_label(key).to_owned(), value.to_owned());
        derive_from_labels(&mut self);
        self
    }

    fn in_pool(mut self, pool: &str) -> Self {
        self.node_pool = pool.to_owned();
        self.label(labels::NODE_POOL, pool)
    }

    fn with_pods(mut self, pods: Vec<Pod>) -> Self {
        self.pods = pods;
        self
    }
}

// --- a cluster, solved or planned -------------------------------------------------

/// A cluster to solve or plan: one catalog, its pools, nodes and the rest,
/// with the options a request would carry.
pub struct Scenario {
    pub pools: Vec<NodePool>,
    pub instance_types: Vec<InstanceType>,
    pub nodes: Vec<StateNode>,
    pub pending: Vec<Pod>,
    pub daemon_sets: Vec<DaemonSet>,
    pub pdbs: Vec<Pdb>,
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pub now: i64,
    pub options: Options,
    pub disruption: DisruptionOptions,
}

impl Scenario {
    pub fn new(pools: Vec<NodePool>) -> Scenario {
        Scenario::with_instance_types(pools, default_instance_types())
    }

    pub fn with_instance_types(
        pools: Vec<NodePool>,
        instance_types: Vec<InstanceType>,
    ) -> Scenario {
        Scenario {
            pools,
            instance_types,
            nodes: Vec::new(),
            pending: Vec::new(),
            daemon_sets: Vec::new(),
            pdbs: Vec::new(),
            namespaces: BTreeMap::new(),
            now: 0,
            options: Options::default(),
            disruption: DisruptionOptions::default(),
        }
    }

    /// The first pool.
    pub fn pool(&mut self) -> &mut NodePool {
        &mut self.pools[0]
    }

    /// The model of the cluster with `pending` pods waiting (the catalog's
    /// offerings numbered, as a request's are).
    pub fn cluster(&self, pending: Vec<Pod>) -> Cluster {
        let mut catalogs = vec![self.instance_types.clone()];
        let offering_space = OfferingSpace::number(&mut catalogs);
        Cluster {
            pending,
            nodes: self.nodes.clone(),
            node_pools: self.pools.clone(),
            catalogs,
            offering_space,
            daemon_sets: self.daemon_sets.clone(),
            pdbs: self.pdbs.clone(),
            namespaces: self.namespaces.clone(),
            now_seconds: self.now,
        }
    }

    pub fn solve(&self, pods: Vec<Pod>) -> Outcome {
        Outcome {
            solution: solve::solve(&self.cluster(pods), &self.options),
        }
    }

    /// Plans disruption with the scenario's own pending pods.
    pub fn plan(&self) -> DisruptionPlan {
        disruption::plan(
            &self.cluster(self.pending.clone()),
            &self.options,
            &self.disruption,
        )
    }
}

pub struct Outcome {
    pub solution: Solution,
}

impl Outcome {
    pub fn claims(&self) -> &[PlannedClaim] {
        &self.solution.new_claims
    }

    /// The new claim a pod landed on.
    pub fn claim_of(&self, pod: &str) -> Option<&PlannedClaim> {
        self.solution
            .new_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p.name == pod))
    }

    /// Which new claim (by index) holds the pod.
    pub fn claim_index(&self, pod: &str) -> Option<usize> {
        self.solution
            .new_claims
            .iter()
            .position(|c| c.pods.iter().any(|p| p.name == pod))
    }

    pub fn existing_node_of(&self, pod: &str) -> Option<&str> {
        self.solution
            .existing
            .iter()
            .find(|(_, pods)| pods.iter().any(|p| p.name == pod))
            .map(|(node, _)| node.as_str())
    }

    pub fn scheduled(&self, pod: &str) -> bool {
        self.claim_of(pod).is_some() || self.existing_node_of(pod).is_some()
    }

    pub fn reason(&self, pod: &str) -> Option<&str> {
        self.solution
            .unschedulable
            .iter()
            .find(|(key, _)| key.name == pod)
            .map(|(_, reason)| reason.as_str())
    }

    pub fn label(&self, pod: &str, key: &str) -> Option<&str> {
        self.claim_of(pod)
            .and_then(|c| c.labels.get(key))
            .map(String::as_str)
    }

    /// The cheapest instance type of the claim holding the pod (what the
    /// fake provider would launch).
    pub fn instance_type(&self, pod: &str) -> Option<&str> {
        self.claim_of(pod)
            .and_then(|c| c.cheapest.as_ref())
            .map(|c| c.instance_type.as_str())
    }

    /// How many of `pods` were placed.
    pub fn placed(&self, pods: &[Pod]) -> usize {
        pods.iter().filter(|p| self.scheduled(&p.key.name)).count()
    }

    /// Pods per value of `key` over new claims, sorted: Karpenter's "skew".
    pub fn skew(&self, key: &str, matching: &[(&str, &str)], pods: &[Pod]) -> Vec<usize> {
        let wanted: BTreeSet<&str> = pods
            .iter()
            .filter(|p| {
                matching
                    .iter()
                    .all(|(k, v)| p.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|p| p.key.name.as_str())
            .collect();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (i, claim) in self.solution.new_claims.iter().enumerate() {
            let domain = if key == HOSTNAME {
                format!("claim-{i}")
            } else {
                match claim.labels.get(key) {
                    Some(v) => v.clone(),
                    None => continue,
                }
            };
            let n = claim
                .pods
                .iter()
                .filter(|p| wanted.contains(p.name.as_str()))
                .count();
            if n > 0 {
                *counts.entry(domain).or_default() += n;
            }
        }
        let mut values: Vec<usize> = counts.into_values().collect();
        values.sort_unstable();
        values
    }
}
