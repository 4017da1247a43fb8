//! The wire edge of the planner: what `from_wire` makes of a request's
//! fields (the planner's model, defaults included, and what it works out
//! for the planner: effective requests, startup taints, absent labels,
//! affinity namespaces, matchLabelKeys, volume topology), that a field it
//! cannot understand is reported by its path, and what `to_wire` answers
//! with (options, uids, node classes, enums, rejected objects, the same
//! bytes for the same request). The planner's scenarios run on its own
//! model in `crates/karpenter-planner/tests/`.

use std::collections::BTreeSet;
use std::time::Duration;

use karpenter_core::requirements::{Requirement, Requirements};
use karpenter_core::selector::LabelSelector;
use karpenter_core::taints::{Effect, Taint};
use karpenter_planner::disruption::Reason;
use karpenter_planner::model::{Cluster, ConsolidationPolicy, WhenUnsatisfiable};
use karpenter_planner::solve::MinValuesPolicy;
use karpenter_planner_wire::from_wire::{self, Parsed};
use karpenter_planner_wire::{plan_disruption_request, solve_request, to_wire};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

const GI: i64 = 1 << 30;
const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";

fn list(pairs: &[(&str, i64)]) -> Option<types::ResourceList> {
    Some(types::ResourceList {
        quantities: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    })
}

fn in_(key: &str, values: &[&str]) -> types::Requirement {
    types::Requirement {
        key: key.to_owned(),
        operator: types::Operator::In as i32,
        values: values.iter().map(|v| (*v).to_owned()).collect(),
        min_values: None,
    }
}

fn term(requirements: Vec<types::Requirement>) -> sched::NodeSelectorTerm {
    sched::NodeSelectorTerm {
        match_expressions: requirements,
        match_fields: vec![],
    }
}

fn match_labels(pairs: &[(&str, &str)]) -> sched::LabelSelector {
    sched::LabelSelector {
        match_labels: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        match_expressions: vec![],
    }
}

fn container(requests: &[(&str, i64)], limits: &[(&str, i64)], sidecar: bool) -> sched::Container {
    sched::Container {
        name: "c".into(),
        requests: list(requests),
        limits: list(limits),
        ports: vec![],
        restart_policy_always: sidecar,
    }
}

fn pod(name: &str) -> sched::Pod {
    sched::Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        containers: vec![container(&[], &[], false)],
        ..Default::default()
    }
}

/// A type with spot offerings in zone a, on-demand in a and b.
fn instance_type(name: &str, cpu: i64) -> types::InstanceType {
    let offering = |zone: &str, capacity_type: &str| types::Offering {
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price: cpu as f64 / 10_000.0,
        available: true,
        requirements: vec![],
    };
    types::InstanceType {
        name: name.into(),
        requirements: vec![in_("kubernetes.io/arch", &["amd64"])],
        offerings: vec![
            offering("a", "spot"),
            offering("a", "on-demand"),
            offering("b", "on-demand"),
        ],
        capacity: list(&[("cpu", cpu), ("memory", 8 * GI), ("pods", 10)]),
        overhead: Some(types::InstanceTypeOverhead {
            kube_reserved: list(&[("cpu", 100), ("memory", 10 << 20)]),
            system_reserved: list(&[("cpu", 50)]),
            eviction_threshold: list(&[("memory", 100 << 20)]),
        }),
        price_overlaid: false,
        capacity_overlaid: false,
        volume_attachment_limits: Default::default(),
    }
}

fn snapshot() -> sched::ClusterSnapshot {
    sched::ClusterSnapshot {
        node_pools: vec![sched::NodePool {
            name: "default".into(),
            ready: true,
            ..Default::default()
        }],
        instance_type_catalogs: vec![sched::InstanceTypeCatalog {
            name: "default".into(),
            instance_types: vec![instance_type("m", 4000)],
        }],
        ..Default::default()
    }
}

fn parse(snapshot: &sched::ClusterSnapshot) -> Parsed {
    from_wire::cluster(snapshot).expect("a valid snapshot")
}

fn parse_pod(p: sched::Pod) -> karpenter_planner::model::Pod {
    let mut snapshot = snapshot();
    snapshot.pending_pods = vec![p];
    let parsed = parse(&snapshot);
    assert!(parsed.invalid_pods.is_empty(), "{:?}", parsed.invalid_pods);
    parsed.cluster.pending.into_iter().next().unwrap()
}

fn requirements(list: &[types::Requirement]) -> Requirements {
    karpenter_proto::convert::requirements("test", list).unwrap()
}

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    karpenter_proto::convert::label_selector("test", &match_labels(pairs)).unwrap()
}

// --- from the wire: pods ---------------------------------------------------------

#[test]
fn a_pods_fields_reach_the_model() {
    let mut p = pod("a");
    p.namespace = String::new();
    p.uid = String::new();
    p.labels.insert("app".into(), "web".into());
    p.node_selector
        .insert("failure-domain.beta.kubernetes.io/zone".into(), "a".into());
    p.required_node_affinity = vec![sched::NodeSelectorTerm {
        match_expressions: vec![in_("size", &["small"])],
        match_fields: vec![types::Requirement {
            key: "metadata.name".into(),
            ..in_("", &["node-1"])
        }],
    }];
    p.preferred_node_affinity = vec![sched::PreferredSchedulingTerm {
        weight: 7,
        preference: Some(term(vec![in_(ZONE, &["b"])])),
    }];
    p.tolerations = vec![sched::Toleration {
        key: "k".into(),
        operator: sched::toleration::TolerationOperator::Exists as i32,
        effect: types::TaintEffect::NoExecute as i32,
        ..Default::default()
    }];
    p.containers[0].ports = vec![sched::ContainerPort {
        container_port: 80,
        host_port: 8080,
        protocol: String::new(),
        host_ip: String::new(),
    }];
    p.priority = 10;
    p.deletion_cost = -5;
    p.owner_kind = "ReplicaSet".into();
    p.phase = "Running".into();
    p.terminating = true;
    p.not_ready = true;
    p.creation_timestamp = Some(prost_types::Timestamp {
        seconds: 42,
        nanos: 0,
    });
    let model = parse_pod(p);
    assert_eq!(
        model.key.to_string(),
        "default/a",
        "no namespace is default"
    );
    assert_eq!(model.uid, "default/a", "no uid: the key stands in");
    assert_eq!(model.labels["app"], "web");
    assert_eq!(model.node_selector[ZONE], "a", "beta labels are normalized");
    assert_eq!(
        model.required_terms,
        vec![requirements(&[
            in_("size", &["small"]),
            in_(HOSTNAME, &["node-1"])
        ])],
        "metadata.name is the node's hostname"
    );
    assert_eq!(
        model.preferred_terms,
        vec![(7, requirements(&[in_(ZONE, &["b"])]))]
    );
    assert_eq!(model.tolerations.len(), 1);
    assert!(model.tolerations[0].exists);
    assert_eq!(model.tolerations[0].effect, Some(Effect::NoExecute));
    assert_eq!(model.host_ports.len(), 1);
    assert_eq!(
        (
            model.host_ports[0].port,
            model.host_ports[0].protocol.as_str()
        ),
        (8080, "TCP"),
        "no protocol is TCP"
    );
    assert_eq!((model.priority, model.deletion_cost), (10, -5));
    assert_eq!(model.owner_kind, "ReplicaSet");
    assert_eq!(model.phase, "Running");
    assert!(model.terminating && model.not_ready);
    assert_eq!(model.creation_seconds, 42);
    assert_eq!(model.requests.pods, 1, "a pod takes one slot");
}

#[test]
fn do_not_disrupt_until_counts_against_the_snapshots_now() {
    let until = |seconds: i64| {
        let mut p = pod("a");
        p.do_not_disrupt_until = Some(prost_types::Timestamp { seconds, nanos: 0 });
        p
    };
    let mut snapshot = snapshot();
    snapshot.now = Some(prost_types::Timestamp {
        seconds: 1000,
        nanos: 0,
    });
    snapshot.pending_pods = vec![until(999), until(1001)];
    snapshot.pending_pods[1].name = "b".into();
    let pending = parse(&snapshot).cluster.pending;
    assert!(!pending[0].do_not_disrupt, "past");
    assert!(pending[1].do_not_disrupt, "still ahead");
}

// The effective requests of the pods of the planner's scenarios
// `init_containers_and_overhead_count`,
// `daemonset_memory_limit_stands_in_for_its_request`,
// `daemonset_init_containers_count_at_their_peak` and
// `sidecars_run_alongside_and_inits_peak_on_top_of_them`, which state them.
#[test]
fn effective_requests_count_init_containers_sidecars_overhead_and_limits() {
    let requests = |p: sched::Pod| {
        let r = parse_pod(p).requests;
        (r.cpu, r.memory)
    };
    // Containers 1 CPU / 1Gi, an init container 2 CPU / 1Gi.
    let mut p = pod("a");
    p.containers = vec![container(&[("cpu", 1000), ("memory", GI)], &[], false)];
    p.init_containers = vec![container(&[("cpu", 2000), ("memory", GI)], &[], false)];
    assert_eq!(requests(p), (2000, GI));
    // An init container of 1Ti.
    let mut p = pod("b");
    p.init_containers = vec![container(&[("memory", 1 << 40)], &[], false)];
    assert_eq!(requests(p), (0, 1 << 40));
    // Containers 1 CPU, overhead 2 CPU.
    let mut p = pod("c");
    p.containers = vec![container(&[("cpu", 1000)], &[], false)];
    p.overhead = list(&[("cpu", 2000)]);
    assert_eq!(requests(p), (3000, 0));
    // A limit stands in for a missing request, never for a present one.
    let mut p = pod("d");
    p.containers = vec![container(
        &[("cpu", 1000)],
        &[("cpu", 10_000_000), ("memory", 10_000 * GI)],
        false,
    )];
    assert_eq!(requests(p), (1000, 10_000 * GI));
    // Container 1 CPU limited to 1Gi, init 3 CPU limited to 3Gi: the init peak.
    let mut p = pod("e");
    p.containers = vec![container(&[("cpu", 1000)], &[("memory", GI)], false)];
    p.init_containers = vec![container(&[("cpu", 3000)], &[("memory", 3 * GI)], false)];
    assert_eq!(requests(p), (3000, 3 * GI));
    // Containers 6 CPU / 2Gi, init 10 CPU / 4Gi, then a sidecar 4.9 CPU / 2900Mi:
    // running, containers and sidecar add up above the init peak.
    let mut p = pod("f");
    p.containers = vec![container(&[("cpu", 6000), ("memory", 2 * GI)], &[], false)];
    p.init_containers = vec![
        container(&[("cpu", 10_000), ("memory", 4 * GI)], &[], false),
        container(&[("cpu", 4900), ("memory", 2900 << 20)], &[], true),
    ];
    assert_eq!(requests(p), (10_900, 2 * GI + (2900 << 20)));
}

#[test]
fn affinity_terms_look_in_the_pods_namespace_unless_told_otherwise() {
    let term = |namespaces: &[&str], namespace_selector: Option<sched::LabelSelector>| {
        sched::PodAffinityTerm {
            label_selector: Some(match_labels(&[("security", "s2")])),
            namespaces: namespaces.iter().map(|n| (*n).to_owned()).collect(),
            namespace_selector,
            topology_key: HOSTNAME.into(),
            match_label_keys: vec!["app".into()],
            mismatch_label_keys: vec!["tier".into()],
        }
    };
    let mut p = pod("a");
    p.namespace = "mine".into();
    p.labels.insert("app".into(), "web".into());
    p.labels.insert("tier".into(), "front".into());
    p.required_pod_affinity = vec![
        term(&[], None),
        term(&["other"], None),
        term(&[], Some(sched::LabelSelector::default())),
        term(&["listed"], Some(match_labels(&[("team", "x")]))),
    ];
    let mut snapshot = snapshot();
    snapshot.namespaces = vec![
        sched::Namespace {
            name: "labelled".into(),
            labels: [("team".to_owned(), "x".to_owned())].into(),
        },
        sched::Namespace {
            name: "unlabelled".into(),
            labels: Default::default(),
        },
    ];
    snapshot.pending_pods = vec![p];
    let model = parse(&snapshot).cluster.pending.remove(0);
    let namespaces: Vec<Option<BTreeSet<&str>>> = model
        .pod_affinity
        .iter()
        .map(|t| {
            t.namespaces
                .as_ref()
                .map(|n| n.iter().map(String::as_str).collect())
        })
        .collect();
    assert_eq!(
        namespaces,
        vec![
            Some(BTreeSet::from(["mine"])),
            Some(BTreeSet::from(["other"])),
            None,
            Some(BTreeSet::from(["labelled", "listed"])),
        ]
    );
    // matchLabelKeys and mismatchLabelKeys take the pod's own values.
    let mut expected = selector(&[("security", "s2")]);
    expected.require("app", "web");
    expected.require_not("tier", "front");
    assert_eq!(model.pod_affinity[0].selector, Some(expected));
    assert_eq!(model.pod_affinity[0].topology_key, HOSTNAME);
}

#[test]
fn spread_constraints_take_their_policies_and_match_label_keys() {
    use sched::topology_spread_constraint::{InclusionPolicy, WhenUnsatisfiable as W};
    let spread = |when: W, affinity: InclusionPolicy, taints: InclusionPolicy| {
        sched::TopologySpreadConstraint {
            max_skew: 2,
            topology_key: "failure-domain.beta.kubernetes.io/zone".into(),
            when_unsatisfiable: when as i32,
            label_selector: Some(match_labels(&[("test", "test")])),
            min_domains: Some(3),
            node_affinity_policy: affinity as i32,
            node_taints_policy: taints as i32,
            match_label_keys: vec!["test-label".into()],
        }
    };
    let mut p = pod("a");
    p.labels.insert("test-label".into(), "a".into());
    p.topology_spread_constraints = vec![
        spread(
            W::Unspecified,
            InclusionPolicy::Unspecified,
            InclusionPolicy::Unspecified,
        ),
        spread(
            W::ScheduleAnyway,
            InclusionPolicy::Ignore,
            InclusionPolicy::Honor,
        ),
        spread(
            W::DoNotSchedule,
            InclusionPolicy::Honor,
            InclusionPolicy::Ignore,
        ),
    ];
    let model = parse_pod(p);
    let policies: Vec<_> = model
        .spread
        .iter()
        .map(|c| {
            (
                c.when_unsatisfiable,
                c.honor_node_affinity,
                c.honor_node_taints,
            )
        })
        .collect();
    assert_eq!(
        policies,
        vec![
            (WhenUnsatisfiable::DoNotSchedule, true, false),
            (WhenUnsatisfiable::ScheduleAnyway, false, true),
            (WhenUnsatisfiable::DoNotSchedule, true, false),
        ],
        "unspecified: DoNotSchedule, nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore"
    );
    let first = &model.spread[0];
    assert_eq!((first.max_skew, first.min_domains), (2, Some(3)));
    assert_eq!(first.topology_key, ZONE);
    let mut expected = selector(&[("test", "test")]);
    expected.require("test-label", "a");
    assert_eq!(first.selector, Some(expected));
}

#[test]
fn volume_topology_joins_every_required_term() {
    let volume = sched::Volume {
        name: "data".into(),
        driver: "ebs.csi.aws.com".into(),
        claim_id: "default/data".into(),
        topology: vec![term(vec![in_(ZONE, &["c"])])],
    };
    let mut alone = pod("a");
    alone.volumes = vec![volume.clone()];
    assert_eq!(
        parse_pod(alone).required_terms,
        vec![requirements(&[in_(ZONE, &["c"])])]
    );
    let mut with_terms = pod("b");
    with_terms.volumes = vec![volume];
    with_terms.required_node_affinity = vec![
        term(vec![in_("size", &["small"])]),
        term(vec![in_("size", &["large"])]),
    ];
    assert_eq!(
        parse_pod(with_terms).required_terms,
        vec![
            requirements(&[in_("size", &["small"]), in_(ZONE, &["c"])]),
            requirements(&[in_("size", &["large"]), in_(ZONE, &["c"])]),
        ]
    );
}

// --- from the wire: nodes, pools, catalogs, daemonsets, PDBs ---------------------

#[test]
fn an_uninitialized_nodes_startup_and_unregistered_taints_do_not_reach_the_model() {
    let startup = types::Taint {
        key: "foo.com/taint".into(),
        value: "tainted".into(),
        effect: types::TaintEffect::NoSchedule as i32,
    };
    let unregistered = types::Taint {
        key: "karpenter.sh/unregistered".into(),
        value: String::new(),
        effect: types::TaintEffect::NoExecute as i32,
    };
    let other = types::Taint {
        key: "dedicated".into(),
        value: "gpu".into(),
        effect: types::TaintEffect::NoSchedule as i32,
    };
    let node = |initialized: bool, unschedulable: bool| sched::StateNode {
        name: "n".into(),
        taints: vec![startup.clone(), unregistered.clone(), other.clone()],
        startup_taints: vec![startup.clone()],
        initialized,
        unschedulable,
        ..Default::default()
    };
    let mut snapshot = snapshot();
    snapshot.nodes = vec![node(false, false)];
    let keys = |snapshot: &sched::ClusterSnapshot| -> Vec<String> {
        parse(snapshot).cluster.nodes[0]
            .taints
            .iter()
            .map(|t| t.key.clone())
            .collect()
    };
    assert_eq!(keys(&snapshot), vec!["dedicated"]);
    snapshot.nodes = vec![node(true, false)];
    assert_eq!(
        keys(&snapshot),
        vec!["foo.com/taint", "karpenter.sh/unregistered", "dedicated"]
    );
    snapshot.nodes = vec![node(true, true)];
    assert_eq!(
        parse(&snapshot).cluster.nodes[0].taints.last(),
        Some(&Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            value: String::new(),
            effect: Effect::NoSchedule,
        }),
        "a cordoned node carries the taint kube-scheduler sees"
    );
}

#[test]
fn a_nodes_labels_name_its_host_and_pool_and_its_disruption_state_reaches_the_model() {
    let at = |seconds: i64| Some(prost_types::Timestamp { seconds, nanos: 0 });
    let mut snapshot = snapshot();
    snapshot.nodes = vec![sched::StateNode {
        name: "n".into(),
        node_claim_name: "n-claim".into(),
        node_pool: "default".into(),
        labels: [
            ("failure-domain.beta.kubernetes.io/zone", "a"),
            (CAPACITY_TYPE, "spot"),
            (INSTANCE_TYPE, "m"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
        allocatable: list(&[("cpu", 3000)]),
        capacity: list(&[("cpu", 4000)]),
        has_node: true,
        initialized: true,
        price: 0.4,
        creation_timestamp: at(10),
        disruption: Some(sched::NodeClaimDisruptionState {
            drifted_reason: "NodePoolDrifted".into(),
            consolidatable: true,
            last_pod_event_time: at(11),
            do_not_disrupt: true,
            expiration_time: at(12),
            node_pool_hash: "h".into(),
            disrupting: true,
            node_not_ready: true,
            nominated: true,
            termination_grace_period: Some(prost_types::Duration {
                seconds: 13,
                nanos: 0,
            }),
            initialized_time: at(14),
            drifted_time: at(15),
            instance_terminating: true,
            repair: Some(sched::NodeRepair {
                condition_type: "Ready".into(),
                condition_reason: "KubeletNotReady".into(),
                eligible: true,
                action: sched::NodeRepairAction::Reboot as i32,
                termination_grace_period: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
                score: f64::NAN,
                do_not_repair: true,
            }),
        }),
        ..Default::default()
    }];
    let node = parse(&snapshot).cluster.nodes.remove(0);
    assert_eq!(node.labels[HOSTNAME], "n");
    assert_eq!(node.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(node.labels[ZONE], "a");
    assert_eq!(
        *node.label_requirements,
        Requirements::from_labels(&node.labels)
    );
    assert_eq!(
        (
            node.zone.as_str(),
            node.capacity_type.as_str(),
            node.instance_type.as_str()
        ),
        ("a", "spot", "m"),
        "from the labels when the fields are empty"
    );
    assert_eq!((node.allocatable.cpu, node.capacity.cpu), (3000, 4000));
    assert_eq!((node.price, node.creation_seconds), (0.4, 10));
    assert!(node.has_node && node.initialized && !node.planned);
    let d = &node.disruption;
    assert_eq!(d.drifted_reason, "NodePoolDrifted");
    assert!(
        d.consolidatable
            && d.do_not_disrupt
            && d.disrupting
            && d.node_not_ready
            && d.nominated
            && d.instance_terminating
    );
    let repair = d.repair.as_ref().expect("repair");
    assert_eq!(
        (repair.condition.as_str(), repair.reason.as_str()),
        ("Ready", "KubeletNotReady")
    );
    assert!(repair.eligible && repair.reboot && repair.do_not_repair);
    assert_eq!(
        repair.termination_grace_period,
        Some(std::time::Duration::from_secs(60))
    );
    assert_eq!(
        repair.score,
        f64::MIN,
        "a score that is not a number orders last"
    );
    assert_eq!(
        (
            d.last_pod_event_seconds,
            d.expiration_seconds,
            d.termination_grace_period,
            d.initialized_seconds,
            d.drifted_seconds
        ),
        (
            Some(11),
            Some(12),
            Some(Duration::from_secs(13)),
            Some(14),
            Some(15)
        )
    );
    assert_eq!(d.node_pool_hash, "h");
}

#[test]
fn an_instance_type_declares_its_name_zones_and_capacity_types_and_reserves_its_overhead() {
    let cluster = parse(&snapshot()).cluster;
    let it = &cluster.catalogs[0][0];
    assert_eq!(
        it.requirements.get(INSTANCE_TYPE),
        Some(&Requirement::single(INSTANCE_TYPE, "m"))
    );
    assert_eq!(
        it.requirements.get(ZONE),
        Some(&Requirement::in_values(ZONE, ["a", "b"]))
    );
    assert_eq!(
        it.requirements.get(CAPACITY_TYPE),
        Some(&Requirement::in_values(
            CAPACITY_TYPE,
            ["on-demand", "spot"]
        ))
    );
    assert_eq!(it.capacity.cpu, 4000);
    assert_eq!(it.allocatable.cpu, 4000 - 100 - 50);
    assert_eq!(it.allocatable.memory, 8 * GI - (10 << 20) - (100 << 20));
    assert_eq!(it.allocatable.pods, 10);
    // Offerings are numbered over the request's zones and capacity types.
    assert_eq!(cluster.offering_space.zones, vec!["a", "b"]);
    assert_eq!(
        cluster.offering_space.capacity_types,
        vec!["spot", "on-demand"]
    );
    let ids: Vec<(usize, usize)> = it
        .offerings
        .iter()
        .map(|o| (o.zone_id, o.capacity_type_id))
        .collect();
    assert_eq!(ids, vec![(0, 0), (0, 1), (1, 1)]);
}

// What the planner's `exists_on_a_label_other_types_leave_out_picks_the_types_that_list_it`
// relies on: a type that leaves a label out of its requirements does not carry it.
#[test]
fn a_label_some_types_of_a_catalog_carry_is_declared_absent_on_the_others() {
    let mut snapshot = snapshot();
    let mut special = instance_type("l", 16_000);
    special.requirements.push(in_("special", &["optional"]));
    snapshot.instance_type_catalogs[0]
        .instance_types
        .push(special);
    let cluster = parse(&snapshot).cluster;
    let [plain, special] = &cluster.catalogs[0][..] else {
        panic!("two types")
    };
    assert_eq!(
        plain.requirements.get("special"),
        Some(&Requirement::does_not_exist("special"))
    );
    assert_eq!(
        special.requirements.get("special"),
        Some(&Requirement::single("special", "optional"))
    );
}

#[test]
fn a_node_pool_without_a_disruption_block_has_no_budget_and_no_consolidate_after() {
    let mut snapshot = snapshot();
    let pool = &mut snapshot.node_pools[0];
    pool.requirements = vec![in_(CAPACITY_TYPE, &["spot", "on-demand"])];
    pool.labels.insert("team".into(), "a".into());
    pool.taints = vec![types::Taint {
        key: "dedicated".into(),
        value: String::new(),
        effect: types::TaintEffect::NoSchedule as i32,
    }];
    pool.limits = list(&[("cpu", 2000), ("nodes", 3)]);
    let model = parse(&snapshot).cluster.node_pools.remove(0);
    assert_eq!(model.weight, 0);
    assert!(model.ready);
    assert_eq!(model.catalog, 0);
    assert_eq!(model.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(model.labels["team"], "a");
    assert_eq!(
        model.requirements,
        requirements(&[
            in_(CAPACITY_TYPE, &["spot", "on-demand"]),
            in_("team", &["a"]),
            in_("karpenter.sh/nodepool", &["default"]),
        ]),
        "its labels are requirements too"
    );
    assert_eq!(model.taints.len(), 1);
    assert_eq!(
        model
            .limits
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        vec![("cpu", 2000), ("nodes", 3)]
    );
    assert_eq!(
        model.consolidation,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(model.consolidate_after, None);
    assert!(model.budgets.is_empty());
    assert_eq!(model.expire_after, None);
}

#[test]
fn a_node_pools_disruption_block_reaches_the_model() {
    let mut snapshot = snapshot();
    let pool = &mut snapshot.node_pools[0];
    pool.weight = 20;
    pool.expire_after = Some(prost_types::Duration {
        seconds: 3600,
        nanos: 0,
    });
    pool.disruption = Some(sched::Disruption {
        consolidation_policy: sched::disruption::ConsolidationPolicy::WhenEmpty as i32,
        consolidate_after: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        budgets: vec![
            sched::Budget {
                nodes: "10%".into(),
                ..Default::default()
            },
            sched::Budget {
                nodes: "0".into(),
                schedule: "@daily".into(),
                duration: Some(prost_types::Duration {
                    seconds: 600,
                    nanos: 0,
                }),
                reasons: vec![
                    sched::DisruptionReason::Drifted as i32,
                    sched::DisruptionReason::Empty as i32,
                ],
            },
        ],
    });
    let model = parse(&snapshot).cluster.node_pools.remove(0);
    assert_eq!(model.weight, 20);
    assert_eq!(model.expire_after, Some(Duration::from_secs(3600)));
    assert_eq!(model.consolidation, ConsolidationPolicy::WhenEmpty);
    assert_eq!(model.consolidate_after, Some(Duration::from_secs(30)));
    assert_eq!(model.budgets.len(), 2);
    assert_eq!(model.budgets[0].nodes, "10%");
    assert!(model.budgets[0].window.is_none() && model.budgets[0].reasons.is_empty());
    assert_eq!(model.budgets[1].window.as_ref().map(|(_, d)| *d), Some(600));
    assert_eq!(
        model.budgets[1].reasons,
        vec![Reason::Drifted, Reason::Empty]
    );
}

#[test]
fn daemonsets_and_pdbs_reach_the_model() {
    let mut snapshot = snapshot();
    let mut template = pod("");
    template.namespace = String::new();
    snapshot.daemon_sets = vec![sched::DaemonSet {
        namespace: "kube-system".into(),
        name: "agent".into(),
        template: Some(template),
    }];
    let pdb = |name: &str, min_available: &str, max_unavailable: &str| sched::PodDisruptionBudget {
        namespace: "default".into(),
        name: name.into(),
        selector: Some(match_labels(&[("app", name)])),
        min_available: min_available.into(),
        max_unavailable: max_unavailable.into(),
        disruptions_allowed: 2,
        ..Default::default()
    };
    snapshot.pod_disruption_budgets = vec![
        pdb("zero", "", "0"),
        pdb("zero-percent", "", "0%"),
        pdb("all", "100%", ""),
        pdb("one", "", "1"),
        sched::PodDisruptionBudget {
            unhealthy_pod_eviction_policy: "AlwaysAllow".into(),
            ..pdb("unhealthy", "50%", "")
        },
    ];
    let cluster = parse(&snapshot).cluster;
    let ds = &cluster.daemon_sets[0];
    assert_eq!(ds.key.to_string(), "kube-system/agent");
    assert_eq!(
        ds.pod.key.to_string(),
        "kube-system/agent",
        "a template takes its DaemonSet's name and namespace"
    );
    assert!(ds.pod.is_daemon());
    let blocking: Vec<(&str, bool, bool, i32)> = cluster
        .pdbs
        .iter()
        .map(|p| {
            (
                p.key.name.as_str(),
                p.fully_blocking,
                p.always_allow_unhealthy,
                p.disruptions_allowed,
            )
        })
        .collect();
    assert_eq!(
        blocking,
        vec![
            ("zero", true, false, 2),
            ("zero-percent", true, false, 2),
            ("all", true, false, 2),
            ("one", false, false, 2),
            ("unhealthy", false, true, 2),
        ]
    );
    assert_eq!(cluster.pdbs[0].selector, Some(selector(&[("app", "zero")])));
}

// --- from the wire: what cannot be understood -----------------------------------

#[test]
fn a_bad_object_is_left_out_and_reported_by_its_field() {
    let mut snapshot = snapshot();
    let mut bad_operator = pod("bad");
    bad_operator.required_node_affinity = vec![term(vec![types::Requirement {
        operator: 99,
        ..in_("size", &["small"])
    }])];
    snapshot.pending_pods = vec![pod("ok"), bad_operator, pod("ok")];
    snapshot.node_pools.push(sched::NodePool {
        name: "heavy".into(),
        weight: 101,
        ..Default::default()
    });
    snapshot.node_pools.push(sched::NodePool {
        name: "budgeted".into(),
        disruption: Some(sched::Disruption {
            budgets: vec![sched::Budget {
                nodes: "lots".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    });
    snapshot.node_pools.push(sched::NodePool {
        name: "elsewhere".into(),
        instance_type_catalog: "missing".into(),
        ..Default::default()
    });
    snapshot.nodes = vec![sched::StateNode::default()];
    snapshot.pod_disruption_budgets = vec![sched::PodDisruptionBudget {
        namespace: "default".into(),
        name: "odd".into(),
        selector: Some(sched::LabelSelector {
            match_labels: Default::default(),
            match_expressions: vec![sched::LabelSelectorRequirement {
                key: "app".into(),
                operator: "Near".into(),
                values: vec![],
            }],
        }),
        ..Default::default()
    }];
    let parsed = parse(&snapshot);
    let names: Vec<&str> = parsed
        .cluster
        .pending
        .iter()
        .map(|p| p.key.name.as_str())
        .collect();
    assert_eq!(names, vec!["ok"]);
    assert_eq!(parsed.invalid_pods.len(), 1);
    assert_eq!(
        parsed.invalid_pods[0].1.field,
        "cluster.pending_pods[1].required_node_affinity[0].match_expressions[0].operator"
    );
    let rejected: Vec<(&str, &str, &str)> = parsed
        .rejected
        .iter()
        .map(|r| (r.kind.as_str(), r.name.as_str(), r.field.as_str()))
        .collect();
    assert_eq!(
        rejected,
        vec![
            ("NodePool", "heavy", "cluster.node_pools[1].weight"),
            (
                "NodePool",
                "budgeted",
                "cluster.node_pools[2].disruption.budgets[0].nodes"
            ),
            (
                "NodePool",
                "elsewhere",
                "cluster.node_pools[3].instance_type_catalog"
            ),
            ("Pod", "ok", "cluster.pending_pods[2].name"),
            ("Node", "", "cluster.nodes[0].name"),
            (
                "PodDisruptionBudget",
                "odd",
                "cluster.pod_disruption_budgets[0].selector.match_expressions[0].operator"
            ),
        ]
    );
    let kept: Vec<&str> = parsed
        .cluster
        .node_pools
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(kept, vec!["default"]);
    // A PDB whose pods are unknown protects every pod of its namespace.
    let odd = &parsed.cluster.pdbs[0];
    assert!(odd.fully_blocking && odd.selector == Some(LabelSelector::default()));
}

#[test]
fn a_broken_catalog_is_an_error_naming_its_field() {
    let mut bad_price = snapshot();
    bad_price.instance_type_catalogs[0].instance_types[0].offerings[1].price = -1.0;
    let error = from_wire::cluster(&bad_price).unwrap_err();
    assert_eq!(
        error.field,
        "cluster.instance_type_catalogs[0].instance_types[0].offerings[1].price"
    );
    let mut no_catalog = snapshot();
    no_catalog.instance_type_catalogs.clear();
    let error = from_wire::cluster(&no_catalog).unwrap_err();
    assert_eq!(error.field, "cluster.instance_type_catalogs");
}

// --- to the wire -----------------------------------------------------------------

#[test]
fn scheduling_options_reach_the_planner() {
    let defaults = to_wire::options(None);
    assert_eq!(defaults.min_values_policy, MinValuesPolicy::Strict);
    assert!(!defaults.ignore_preferences && defaults.well_known_labels.is_empty());
    assert!(
        !defaults.plan_dra_pods,
        "Karpenter's IGNORE_DRA_REQUESTS=true"
    );
    let options = to_wire::options(Some(&sched::SchedulingOptions {
        min_values_policy: sched::scheduling_options::MinValuesPolicy::BestEffort as i32,
        preference_policy: sched::scheduling_options::PreferencePolicy::Ignore as i32,
        well_known_labels: vec!["example.com/rack".into()],
        plan_dra_pods: true,
        ..Default::default()
    }));
    assert_eq!(options.min_values_policy, MinValuesPolicy::BestEffort);
    assert!(options.ignore_preferences && options.plan_dra_pods);
    assert_eq!(options.well_known_labels, vec!["example.com/rack"]);
}

#[test]
fn a_solve_response_names_pods_by_uid_and_carries_the_pools_node_class() {
    let mut snapshot = snapshot();
    snapshot.node_pools[0].node_class_ref = Some(sched::NodeClassReference {
        group: "karpenter.k8s.aws".into(),
        kind: "EC2NodeClass".into(),
        name: "default".into(),
    });
    let mut big = pod("big");
    big.containers[0].requests = list(&[("cpu", 1_000_000)]);
    let mut broken = pod("broken");
    broken.containers[0].requests = list(&[("cpu", -1)]);
    snapshot.pending_pods = vec![pod("a"), big, broken];
    let request = sched::SolveRequest {
        cluster: Some(snapshot),
        options: None,
    };
    let response = solve_request(&request).unwrap();
    assert_eq!(response.node_claims.len(), 1);
    let claim = &response.node_claims[0];
    assert_eq!(claim.node_pool, "default");
    assert_eq!(claim.pods.len(), 1);
    assert_eq!(
        (claim.pods[0].name.as_str(), claim.pods[0].uid.as_str()),
        ("a", "uid-a")
    );
    assert_eq!(
        claim.node_class_ref.as_ref().map(|r| r.kind.as_str()),
        Some("EC2NodeClass")
    );
    assert_eq!(claim.cheapest.as_ref().unwrap().instance_type, "m");
    assert_eq!(claim.requests.as_ref().unwrap().quantities["pods"], 1);
    assert!((response.cost_per_hour - 0.4).abs() < 1e-9);
    let unschedulable: Vec<(&str, &str, &str)> = response
        .unschedulable
        .iter()
        .map(|u| {
            let pod = u.pod.as_ref().unwrap();
            (
                pod.name.as_str(),
                pod.uid.as_str(),
                u.invalid_field.as_str(),
            )
        })
        .collect();
    assert_eq!(
        unschedulable,
        vec![
            ("big", "uid-big", ""),
            (
                "broken",
                "uid-broken",
                "cluster.pending_pods[2].containers[0].requests.quantities[cpu]"
            ),
        ]
    );
    // The same request, the same bytes.
    let again = solve_request(&request).unwrap();
    assert_eq!(
        prost::Message::encode_to_vec(&response),
        prost::Message::encode_to_vec(&again)
    );
}

fn spot_node(name: &str, cpu: i64) -> sched::StateNode {
    let mut pod = pod(&format!("{name}-p"));
    pod.containers[0].requests = list(&[("cpu", 500)]);
    pod.node_name = name.into();
    pod.phase = "Running".into();
    pod.owner_kind = "ReplicaSet".into();
    sched::StateNode {
        name: name.into(),
        node_claim_name: name.into(),
        node_pool: "default".into(),
        labels: [
            (ZONE, "a"),
            (CAPACITY_TYPE, "spot"),
            (INSTANCE_TYPE, "xl"),
            ("kubernetes.io/arch", "amd64"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
        allocatable: list(&[("cpu", cpu), ("memory", 8 * GI), ("pods", 10)]),
        capacity: list(&[("cpu", cpu), ("memory", 8 * GI), ("pods", 10)]),
        pods: vec![pod],
        has_node: true,
        registered: true,
        initialized: true,
        price: cpu as f64 / 10_000.0,
        disruption: Some(sched::NodeClaimDisruptionState {
            consolidatable: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_plan_response_carries_commands_cost_and_rejected_pending_pods() {
    // A spot node of 32 CPU with one small pod; sixteen cheaper types: only
    // the SpotToSpotConsolidation feature gate lets it be replaced.
    let mut snapshot = snapshot();
    snapshot.instance_type_catalogs[0].instance_types = (0..16)
        .map(|i| instance_type(&format!("t{i:02}"), 1000 + 100 * i))
        .collect();
    snapshot.node_pools[0].disruption = Some(sched::Disruption {
        consolidate_after: Some(prost_types::Duration {
            seconds: 0,
            nanos: 0,
        }),
        budgets: vec![sched::Budget {
            nodes: "100%".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    snapshot.nodes = vec![spot_node("big", 32_000)];
    let mut broken = pod("broken");
    broken.containers[0].requests = list(&[("cpu", -1)]);
    snapshot.pending_pods = vec![broken];
    let mut request = sched::PlanDisruptionRequest {
        cluster: Some(snapshot),
        options: None,
    };
    let response = plan_disruption_request(&request).unwrap();
    assert!(response.commands.is_empty(), "{response:?}");
    let rejected: Vec<(&str, &str)> = response
        .rejected
        .iter()
        .map(|r| (r.kind.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(
        rejected,
        vec![("Pod", "broken")],
        "a pending pod is an object"
    );
    request.options = Some(sched::SchedulingOptions {
        feature_gates: [("SpotToSpotConsolidation".to_owned(), true)].into(),
        ..Default::default()
    });
    let response = plan_disruption_request(&request).unwrap();
    assert_eq!(response.commands.len(), 1, "{response:?}");
    let command = &response.commands[0];
    assert_eq!(
        command.reason,
        sched::DisruptionReason::Underutilized as i32
    );
    assert_eq!(
        command.method,
        sched::DisruptionMethod::SingleNodeConsolidation as i32
    );
    assert_eq!(command.candidates, vec!["big"]);
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(command.replacements[0].pods[0].uid, "uid-big-p");
    let cost = response.cost.clone().unwrap();
    assert!((cost.before - 3.2).abs() < 1e-9 && cost.after < cost.before);
    assert!(response.candidates_evaluated >= 1);
    // The same request, the same bytes.
    let again = plan_disruption_request(&request).unwrap();
    assert_eq!(
        prost::Message::encode_to_vec(&response),
        prost::Message::encode_to_vec(&again)
    );
}

// A request's cluster as the planner sees it is the cluster `from_wire`
// built: the planner is handed nothing else.
#[test]
fn an_empty_request_is_an_empty_cluster() {
    let parsed = from_wire::cluster(&sched::ClusterSnapshot::default()).unwrap();
    let Cluster {
        pending,
        nodes,
        node_pools,
        catalogs,
        now_seconds,
        ..
    } = parsed.cluster;
    assert!(pending.is_empty() && nodes.is_empty() && node_pools.is_empty() && catalogs.is_empty());
    assert_eq!(now_seconds, 0);
}

#[test]
fn a_pods_bad_resources_are_named_where_they_are_and_overhead_may_not_be_negative() {
    let mut snapshot = snapshot();
    let mut bad_init = pod("bad-init");
    bad_init.init_containers = vec![container(&[("cpu", -1)], &[], false)];
    let mut bad_overhead = pod("bad-overhead");
    bad_overhead.overhead = list(&[("cpu", -5000)]);
    snapshot.pending_pods = vec![bad_init, bad_overhead];
    let parsed = parse(&snapshot);
    assert!(parsed.cluster.pending.is_empty(), "neither pod is planned");
    let fields: Vec<&str> = parsed
        .invalid_pods
        .iter()
        .map(|(_, e)| e.field.as_str())
        .collect();
    assert_eq!(
        fields,
        vec![
            "cluster.pending_pods[0].init_containers[0].requests.quantities[cpu]",
            "cluster.pending_pods[1].overhead.quantities[cpu]",
        ]
    );
}
