//! Builders for scheduling scenarios, shaped like Karpenter's own test
//! fixtures (its fake cloud provider's instance types, `test.NodePool()`,
//! `test.UnschedulablePod()`), so upstream scenarios port line for line.

#![allow(dead_code)]

use std::collections::BTreeMap;

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_scheduler::to_wire as wire;

pub const GI: i64 = 1 << 30;
pub const MI: i64 = 1 << 20;

pub fn list(pairs: &[(&str, i64)]) -> types::ResourceList {
    types::ResourceList {
        quantities: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    }
}

pub fn req(key: &str, op: types::Operator, values: &[&str]) -> types::Requirement {
    types::Requirement {
        key: key.to_owned(),
        operator: op as i32,
        values: values.iter().map(|v| (*v).to_owned()).collect(),
        min_values: None,
    }
}

pub fn in_(key: &str, values: &[&str]) -> types::Requirement {
    req(key, types::Operator::In, values)
}

pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";

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

    pub fn build(self) -> types::InstanceType {
        let price = 0.1 * self.cpu as f64 / 1000.0
            + 0.1 * self.memory as f64 / 1e9
            + self.extra.len() as f64;
        let mut offerings = Vec::new();
        for zone in &self.zones_spot {
            offerings.push(types::Offering {
                zone: (*zone).to_owned(),
                capacity_type: "spot".into(),
                price,
                available: true,
                requirements: vec![],
            });
        }
        for zone in &self.zones_on_demand {
            offerings.push(types::Offering {
                zone: (*zone).to_owned(),
                capacity_type: "on-demand".into(),
                price,
                available: true,
                requirements: vec![],
            });
        }
        let size = if self.cpu > 4000 && self.memory > 8 * GI {
            "large"
        } else {
            "small"
        };
        let mut requirements = vec![
            in_(INSTANCE_TYPE, &[&self.name]),
            in_(ARCH, &[self.arch]),
            in_("kubernetes.io/os", &self.os),
            in_("size", &[size]),
            in_("integer", &[&(self.cpu / 1000).to_string()]),
        ];
        if size == "large" {
            requirements.push(in_("special", &["optional"]));
        } else {
            requirements.push(req("special", types::Operator::DoesNotExist, &[]));
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
        types::InstanceType {
            name: self.name,
            requirements,
            offerings,
            capacity: Some(list(&capacity)),
            overhead: Some(types::InstanceTypeOverhead {
                kube_reserved: Some(list(&[("cpu", 100), ("memory", 10 * MI)])),
                system_reserved: None,
                eviction_threshold: None,
            }),
        }
    }
}

/// The fake provider's default catalog.
pub fn default_instance_types() -> Vec<types::InstanceType> {
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

pub fn pool(name: &str) -> sched::NodePool {
    sched::NodePool {
        name: name.to_owned(),
        ready: true,
        ..Default::default()
    }
}

pub fn pod(name: &str) -> sched::Pod {
    sched::Pod {
        namespace: "default".into(),
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        containers: vec![sched::Container {
            name: "app".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub trait PodExt {
    fn cpu(self, millis: i64) -> Self;
    fn memory(self, bytes: i64) -> Self;
    fn resource(self, name: &str, quantity: i64) -> Self;
    fn label(self, key: &str, value: &str) -> Self;
    fn selector(self, key: &str, value: &str) -> Self;
    fn required(self, term: Vec<types::Requirement>) -> Self;
    fn preferred(self, weight: i32, term: Vec<types::Requirement>) -> Self;
    fn tolerate(self, toleration: sched::Toleration) -> Self;
    fn host_port(self, port: i32) -> Self;
    fn spread(self, key: &str, max_skew: i32, labels: &[(&str, &str)]) -> Self;
}

impl PodExt for sched::Pod {
    fn cpu(mut self, millis: i64) -> Self {
        let requests = self.containers[0]
            .requests
            .get_or_insert_with(Default::default);
        requests.quantities.insert("cpu".into(), millis);
        self
    }

    fn memory(mut self, bytes: i64) -> Self {
        let requests = self.containers[0]
            .requests
            .get_or_insert_with(Default::default);
        requests.quantities.insert("memory".into(), bytes);
        self
    }

    fn resource(mut self, name: &str, quantity: i64) -> Self {
        let requests = self.containers[0]
            .requests
            .get_or_insert_with(Default::default);
        requests.quantities.insert(name.into(), quantity);
        self
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    fn selector(mut self, key: &str, value: &str) -> Self {
        self.node_selector.insert(key.into(), value.into());
        self
    }

    fn required(mut self, term: Vec<types::Requirement>) -> Self {
        self.required_node_affinity.push(sched::NodeSelectorTerm {
            match_expressions: term,
            match_fields: vec![],
        });
        self
    }

    fn preferred(mut self, weight: i32, term: Vec<types::Requirement>) -> Self {
        self.preferred_node_affinity
            .push(sched::PreferredSchedulingTerm {
                weight,
                preference: Some(sched::NodeSelectorTerm {
                    match_expressions: term,
                    match_fields: vec![],
                }),
            });
        self
    }

    fn tolerate(mut self, toleration: sched::Toleration) -> Self {
        self.tolerations.push(toleration);
        self
    }

    fn host_port(mut self, port: i32) -> Self {
        self.containers[0].ports.push(sched::ContainerPort {
            container_port: port,
            host_port: port,
            protocol: "TCP".into(),
            host_ip: String::new(),
        });
        self
    }

    fn spread(mut self, key: &str, max_skew: i32, labels: &[(&str, &str)]) -> Self {
        self.topology_spread_constraints
            .push(sched::TopologySpreadConstraint {
                max_skew,
                topology_key: key.into(),
                when_unsatisfiable:
                    sched::topology_spread_constraint::WhenUnsatisfiable::DoNotSchedule as i32,
                label_selector: Some(selector(labels)),
                ..Default::default()
            });
        self
    }
}

pub fn selector(labels: &[(&str, &str)]) -> sched::LabelSelector {
    sched::LabelSelector {
        match_labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        match_expressions: vec![],
    }
}

pub fn affinity_term(key: &str, labels: &[(&str, &str)]) -> sched::PodAffinityTerm {
    sched::PodAffinityTerm {
        label_selector: Some(selector(labels)),
        topology_key: key.into(),
        ..Default::default()
    }
}

pub fn taint(key: &str, value: &str, effect: types::TaintEffect) -> types::Taint {
    types::Taint {
        key: key.into(),
        value: value.into(),
        effect: effect as i32,
    }
}

/// A running, initialized node with the given labels and allocatable.
pub fn node(
    name: &str,
    labels: &[(&str, &str)],
    allocatable: types::ResourceList,
) -> sched::StateNode {
    sched::StateNode {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        allocatable: Some(allocatable.clone()),
        capacity: Some(allocatable),
        has_node: true,
        registered: true,
        initialized: true,
        ..Default::default()
    }
}

pub struct Scenario {
    pub snapshot: sched::ClusterSnapshot,
    pub options: sched::SchedulingOptions,
}

impl Scenario {
    pub fn new(pools: Vec<sched::NodePool>) -> Scenario {
        Scenario::with_instance_types(pools, default_instance_types())
    }

    pub fn with_instance_types(
        pools: Vec<sched::NodePool>,
        instance_types: Vec<types::InstanceType>,
    ) -> Scenario {
        Scenario {
            snapshot: sched::ClusterSnapshot {
                node_pools: pools,
                instance_type_catalogs: vec![sched::InstanceTypeCatalog {
                    name: "default".into(),
                    instance_types,
                }],
                ..Default::default()
            },
            options: sched::SchedulingOptions::default(),
        }
    }

    pub fn solve(&self, pods: Vec<sched::Pod>) -> Outcome {
        let mut snapshot = self.snapshot.clone();
        snapshot.pending_pods = pods;
        let response = wire::solve_request(&sched::SolveRequest {
            cluster: Some(snapshot),
            options: Some(self.options.clone()),
        })
        .expect("valid request");
        Outcome { response }
    }
}

pub struct Outcome {
    pub response: sched::SolveResponse,
}

impl Outcome {
    pub fn claims(&self) -> &[sched::NodeClaimPlan] {
        &self.response.node_claims
    }

    /// The claim (or existing node) a pod landed on.
    pub fn claim_of(&self, pod: &str) -> Option<&sched::NodeClaimPlan> {
        self.response
            .node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p.name == pod))
    }

    pub fn existing_node_of(&self, pod: &str) -> Option<&str> {
        self.response
            .existing_nodes
            .iter()
            .find(|n| n.pods.iter().any(|p| p.name == pod))
            .map(|n| n.node.as_str())
    }

    pub fn scheduled(&self, pod: &str) -> bool {
        self.claim_of(pod).is_some() || self.existing_node_of(pod).is_some()
    }

    pub fn reason(&self, pod: &str) -> Option<&str> {
        self.response
            .unschedulable
            .iter()
            .find(|u| u.pod.as_ref().is_some_and(|p| p.name == pod))
            .map(|u| u.reason.as_str())
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

    /// Pods per value of `key` over new claims, sorted: Karpenter's "skew".
    pub fn skew(&self, key: &str, matching: &[(&str, &str)], pods: &[sched::Pod]) -> Vec<usize> {
        let wanted: Vec<&str> = pods
            .iter()
            .filter(|p| {
                matching
                    .iter()
                    .all(|(k, v)| p.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|p| p.name.as_str())
            .collect();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (i, claim) in self.response.node_claims.iter().enumerate() {
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
                .filter(|p| wanted.contains(&p.name.as_str()))
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
