//! More of Karpenter's provisioning scenarios: daemonset edge cases,
//! existing and in-flight nodes, preferences with pod affinity, sidecars,
//! custom instance types and pricing.

mod support;

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use support::*;
use types::Operator::{In, NotIn};

fn default_pool() -> sched::NodePool {
    let mut p = pool("default");
    p.requirements = vec![in_(CAPACITY_TYPE, &["spot", "on-demand"])];
    p
}

fn scenario() -> Scenario {
    Scenario::new(vec![default_pool()])
}

fn daemonset(pod: sched::Pod) -> sched::DaemonSet {
    sched::DaemonSet {
        namespace: "default".into(),
        name: format!("ds-{}", pod.name),
        template: Some(pod),
    }
}

fn with_limits(mut p: sched::Pod, limits: &[(&str, i64)]) -> sched::Pod {
    p.containers[0].limits = Some(list(limits));
    p
}

#[test]
fn daemonset_memory_limit_stands_in_for_its_request() {
    let mut s = scenario();
    let ds = with_limits(
        pod("d").cpu(1000),
        &[("cpu", 10_000_000), ("memory", 10_000 * GI)],
    );
    s.snapshot.daemon_sets = vec![daemonset(ds)];
    assert!(!s.solve(vec![pod("a")]).scheduled("a"));
}

#[test]
fn daemonset_init_containers_count_at_their_peak() {
    let mut s = scenario();
    let mut ds = with_limits(pod("d").cpu(1000), &[("memory", GI)]);
    ds.init_containers.push(sched::Container {
        name: "init".into(),
        requests: Some(list(&[("cpu", 3000)])),
        limits: Some(list(&[("memory", 3 * GI)])),
        ..Default::default()
    });
    s.snapshot.daemon_sets = vec![daemonset(ds)];
    let outcome = s.solve(vec![pod("a").cpu(500).memory(500 << 20)]);
    // The daemon peaks at 3 CPU / 3Gi during init: only a 4 CPU / 4Gi type fits both.
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
}

#[test]
fn daemonset_without_resources_is_harmless() {
    let mut s = scenario();
    s.snapshot.daemon_sets = vec![daemonset(pod("d"))];
    assert!(s.solve(vec![pod("a")]).scheduled("a"));
}

#[test]
fn daemonset_excluding_an_undefined_label_is_counted() {
    let mut s = scenario();
    s.snapshot.daemon_sets = vec![daemonset(
        pod("d")
            .cpu(2000)
            .memory(2 * GI)
            .required(vec![req("foo", NotIn, &["bar"])]),
    )];
    let outcome = s.solve(vec![pod("a").cpu(1000).memory(GI)]);
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
}

#[test]
fn daemonset_with_one_matching_required_term_is_counted() {
    let mut p = default_pool();
    p.labels.insert("foo".into(), "bar".into());
    let mut s = Scenario::new(vec![p]);
    s.snapshot.daemon_sets = vec![daemonset(
        pod("d")
            .cpu(2000)
            .memory(2 * GI)
            .required(vec![in_("foo", &["voo"])])
            .required(vec![in_("foo", &["bar"])]),
    )];
    let outcome = s.solve(vec![pod("a").cpu(1000).memory(GI)]);
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
}

#[test]
fn daemonset_preferences_and_prefer_no_schedule_taints_do_not_exclude_it() {
    let mut p = default_pool();
    p.taints = vec![taint("test", "", types::TaintEffect::PreferNoSchedule)];
    let mut s = Scenario::new(vec![p]);
    s.snapshot.daemon_sets = vec![daemonset(
        pod("d")
            .cpu(2000)
            .memory(2 * GI)
            .preferred(1, vec![in_("node", &["invalid"])]),
    )];
    let outcome = s.solve(vec![pod("a").cpu(1000).memory(GI).tolerate(
        sched::Toleration {
            operator: sched::toleration::TolerationOperator::Exists as i32,
            ..Default::default()
        },
    )]);
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
}

#[test]
fn existing_node_daemonsets_already_running_are_not_reserved_twice() {
    let mut s = scenario();
    s.snapshot.daemon_sets = vec![daemonset(pod("d").cpu(1000).memory(GI))];
    let mut n = node(
        "n",
        &[(ARCH, "amd64")],
        list(&[("cpu", 16_000), ("memory", 16 * GI), ("pods", 110)]),
    );
    let mut running = pod("d-n").cpu(1000).memory(2 * GI);
    running.owner_kind = "DaemonSet".into();
    running.node_name = "n".into();
    n.pods = vec![running];
    s.snapshot.nodes = vec![n];
    let outcome = s.solve(vec![pod("a").cpu(15_000)]);
    assert_eq!(outcome.existing_node_of("a"), Some("n"));
}

#[test]
fn daemonsets_expected_on_an_existing_node_reserve_room() {
    let mut s = scenario();
    s.snapshot.daemon_sets = vec![daemonset(pod("d").cpu(2000))];
    s.snapshot.nodes = vec![node(
        "n",
        &[],
        list(&[("cpu", 4000), ("memory", 16 * GI), ("pods", 110)]),
    )];
    let outcome = s.solve(vec![pod("a").cpu(3000)]);
    assert_eq!(outcome.existing_node_of("a"), None);
}

#[test]
fn existing_node_fills_then_a_new_node_opens() {
    let mut s = scenario();
    s.snapshot.nodes = vec![node(
        "small",
        &[],
        list(&[("cpu", 1900), ("memory", 2 * GI), ("pods", 5)]),
    )];
    let outcome = s.solve(vec![pod("a").cpu(1001), pod("b").cpu(1000)]);
    assert_eq!(outcome.existing_node_of("a"), Some("small"));
    assert!(outcome.claim_of("b").is_some());
}

#[test]
fn existing_node_without_the_selected_arch_is_skipped() {
    let mut s = scenario();
    s.snapshot.nodes = vec![node(
        "amd",
        &[(ARCH, "amd64")],
        list(&[("cpu", 4000), ("memory", 4 * GI), ("pods", 5)]),
    )];
    let outcome = s.solve(vec![
        pod("a").cpu(10),
        pod("b").cpu(10).selector(ARCH, "arm64"),
    ]);
    assert_eq!(outcome.existing_node_of("a"), Some("amd"));
    assert_eq!(outcome.label("b", ARCH), Some("arm64"));
}

#[test]
fn existing_zone_narrowing_follows_requirements() {
    let mut s = scenario();
    s.snapshot.nodes = vec![node(
        "z2",
        &[(ZONE, "test-zone-2")],
        list(&[("cpu", 4000), ("memory", 4 * GI), ("pods", 5)]),
    )];
    let outcome = s.solve(vec![
        pod("a")
            .cpu(100)
            .required(vec![in_(ZONE, &["test-zone-2"])]),
        pod("b")
            .cpu(100)
            .required(vec![in_(ZONE, &["test-zone-1", "test-zone-2"])]),
        pod("c")
            .cpu(100)
            .required(vec![in_(ZONE, &["test-zone-1", "test-zone-3"])]),
    ]);
    assert_eq!(outcome.existing_node_of("a"), Some("z2"));
    assert_eq!(outcome.existing_node_of("b"), Some("z2"));
    assert_eq!(outcome.existing_node_of("c"), None);
    assert!(outcome.scheduled("c"));
}

#[test]
fn in_flight_claims_take_pods_and_initialized_nodes_come_first() {
    let mut s = scenario();
    let mut in_flight = node(
        "b-in-flight",
        &[],
        list(&[("cpu", 4000), ("memory", 4 * GI), ("pods", 5)]),
    );
    in_flight.has_node = false;
    in_flight.initialized = false;
    let ready = node(
        "z-ready",
        &[],
        list(&[("cpu", 4000), ("memory", 4 * GI), ("pods", 5)]),
    );
    s.snapshot.nodes = vec![in_flight, ready];
    let outcome = s.solve(vec![pod("a").cpu(100)]);
    assert_eq!(outcome.existing_node_of("a"), Some("z-ready"));
    s.snapshot.nodes.truncate(1);
    assert_eq!(
        s.solve(vec![pod("a").cpu(100)]).existing_node_of("a"),
        Some("b-in-flight")
    );
}

#[test]
fn host_ports_keep_pods_apart() {
    let outcome = scenario().solve(vec![
        pod("a").host_port(80),
        pod("b").host_port(80),
        pod("c").host_port(81),
    ]);
    assert_eq!(outcome.claims().len(), 2);
    let holding = |pod: &str| {
        outcome
            .claims()
            .iter()
            .position(|c| c.pods.iter().any(|p| p.name == pod))
    };
    assert_ne!(holding("a"), holding("b"));
    assert!(holding("c").is_some());
}

#[test]
fn unsatisfiable_preference_does_not_separate_pods() {
    let outcome = scenario().solve(vec![
        pod("a").cpu(2000).label("app", "foo"),
        pod("b")
            .cpu(1000)
            .preferred(1, vec![in_(ZONE, &["value-1"])]),
    ]);
    assert_eq!(outcome.claims().len(), 1);
}

#[test]
fn preferred_affinity_to_a_missing_pod_is_relaxed() {
    let mut p = pod("a");
    p.preferred_pod_affinity
        .push(sched::WeightedPodAffinityTerm {
            weight: 50,
            term: Some(affinity_term(ZONE, &[("security", "s2")])),
        });
    assert!(scenario().solve(vec![p]).scheduled("a"));
}

#[test]
fn sidecars_run_alongside_and_inits_peak_on_top_of_them() {
    let its = vec![
        ItSpec::new("10cpu", 10_000, 4 * GI).build(),
        ItSpec::new("11cpu", 11_000, 5 * GI).build(),
        ItSpec::new("12cpu", 12_000, 6 * GI).build(),
    ];
    let s = Scenario::with_instance_types(vec![default_pool()], its);
    let mut p = pod("a").cpu(6000).memory(2 * GI);
    p.init_containers = vec![
        sched::Container {
            name: "init".into(),
            requests: Some(list(&[("cpu", 10_000), ("memory", 4 * GI)])),
            ..Default::default()
        },
        sched::Container {
            name: "sidecar".into(),
            requests: Some(list(&[("cpu", 4900), ("memory", 2900 << 20)])),
            restart_policy_always: true,
            ..Default::default()
        },
    ];
    assert_eq!(s.solve(vec![p]).instance_type("a"), Some("11cpu"));
}

#[test]
fn cheapest_price_wins_regardless_of_size() {
    let mut medium = ItSpec::new("medium", 2000, 2 * GI);
    medium.zones_spot = vec![];
    medium.zones_on_demand = vec!["test-zone-1a"];
    let mut small = ItSpec::new("small", 1000, GI);
    small.zones_spot = vec![];
    small.zones_on_demand = vec!["test-zone-1a"];
    let mut large = ItSpec::new("large", 4000, 4 * GI);
    large.zones_spot = vec![];
    large.zones_on_demand = vec!["test-zone-1a"];
    let mut its = vec![medium.build(), small.build(), large.build()];
    for (it, price) in its.iter_mut().zip([3.0, 2.0, 1.0]) {
        for o in &mut it.offerings {
            o.price = price;
        }
    }
    let outcome = Scenario::with_instance_types(vec![default_pool()], its)
        .solve(vec![pod("a").cpu(1).memory(1 << 20)]);
    assert_eq!(outcome.instance_type("a"), Some("large"));
    let claim = outcome.claim_of("a").unwrap();
    assert_eq!(claim.instance_types, vec!["large", "small", "medium"]);
}

#[test]
fn on_demand_only_pool_ignores_cheaper_spot() {
    let mut it1 = ItSpec::new("test-instance1", 1000, GI).build();
    let mut it2 = ItSpec::new("test-instance2", 1000, GI).build();
    for (it, (od, spot)) in [(&mut it1, (1.0, 0.2)), (&mut it2, (1.3, 0.1))] {
        for o in &mut it.offerings {
            o.price = if o.capacity_type == "spot" { spot } else { od };
        }
    }
    let mut p = pool("default");
    p.requirements = vec![in_(CAPACITY_TYPE, &["on-demand"])];
    let outcome = Scenario::with_instance_types(vec![p], vec![it1, it2]).solve(vec![pod("a")]);
    assert_eq!(outcome.instance_type("a"), Some("test-instance1"));
    assert_eq!(outcome.label("a", CAPACITY_TYPE), Some("on-demand"));
}

#[test]
fn a_zero_request_of_an_unknown_resource_fits() {
    let outcome = scenario().solve(vec![pod("a").resource("foo.com/weird-resources", 0)]);
    assert!(outcome.scheduled("a"));
}

#[test]
fn tolerations_never_add_taints() {
    let outcome = scenario().solve(vec![pod("a").tolerate(sched::Toleration {
        key: "test-key".into(),
        operator: sched::toleration::TolerationOperator::Exists as i32,
        effect: types::TaintEffect::NoExecute as i32,
        ..Default::default()
    })]);
    assert!(outcome.claim_of("a").unwrap().taints.is_empty());
}

#[test]
fn min_values_on_two_keys_relax_independently() {
    let its = vec![ItSpec::new("instance-type-1", 1000, GI).build()];
    let mut p = default_pool();
    let mut it = in_(
        INSTANCE_TYPE,
        &["instance-type-1", "instance-type-2", "instance-type-3"],
    );
    it.min_values = Some(3);
    let mut zone = in_(ZONE, &["test-zone-1", "test-zone-2", "test-zone-3"]);
    zone.min_values = Some(3);
    p.requirements.extend([it, zone]);
    let mut s = Scenario::with_instance_types(vec![p], its);
    s.options.min_values_policy = sched::scheduling_options::MinValuesPolicy::BestEffort as i32;
    let outcome = s.solve(vec![pod("a")]);
    let claim = outcome.claim_of("a").unwrap();
    let min = |key: &str| {
        claim
            .requirements
            .iter()
            .find(|r| r.key == key && r.operator == In as i32)
            .and_then(|r| r.min_values)
    };
    assert_eq!(min(INSTANCE_TYPE), Some(1));
    assert_eq!(min(ZONE), Some(3).min(Some(3)));
}

#[test]
fn pods_on_nodes_being_deleted_are_rescheduled() {
    let mut s = scenario();
    let mut n = node(
        "leaving",
        &[],
        list(&[("cpu", 4000), ("memory", 4 * GI), ("pods", 5)]),
    );
    n.marked_for_deletion = true;
    let mut running = pod("web-0").cpu(100);
    running.node_name = "leaving".into();
    running.phase = "Running".into();
    running.owner_kind = "ReplicaSet".into();
    let mut daemon = pod("ds-leaving").cpu(100);
    daemon.node_name = "leaving".into();
    daemon.owner_kind = "DaemonSet".into();
    let mut terminating = pod("old-0").cpu(100);
    terminating.node_name = "leaving".into();
    terminating.terminating = true;
    terminating.owner_kind = "ReplicaSet".into();
    let mut stateful = pod("db-0").cpu(100);
    stateful.node_name = "leaving".into();
    stateful.terminating = true;
    stateful.owner_kind = "StatefulSet".into();
    n.pods = vec![running, daemon, terminating, stateful];
    s.snapshot.nodes = vec![n];
    let outcome = s.solve(vec![]);
    assert!(outcome.scheduled("web-0"));
    assert!(outcome.scheduled("db-0"));
    assert!(!outcome.scheduled("ds-leaving") && outcome.reason("ds-leaving").is_none());
    assert!(!outcome.scheduled("old-0") && outcome.reason("old-0").is_none());
}
