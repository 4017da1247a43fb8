//! More of Karpenter's provisioning scenarios, ported onto the planner's
//! model: daemonset edge cases, existing and in-flight nodes, preferences
//! with pod affinity, sidecars, custom instance types and pricing, minValues
//! on two keys, pods of nodes being deleted.

mod support;

use karpenter_core::taints::Effect;
use karpenter_planner::model::NodePool;
use karpenter_planner::solve::MinValuesPolicy;
use support::Operator::NotIn;
use support::*;

fn default_pool() -> NodePool {
    pool("default").require(in_(CAPACITY_TYPE, &["spot", "on-demand"]))
}

fn scenario() -> Scenario {
    Scenario::new(vec![default_pool()])
}

// The daemon's container requests 1 CPU, its limits 10,000 CPU and 10,000Gi:
// the memory limit stands in for the missing memory request (the caller
// works effective requests out: `karpenter_proto::convert::pod_requests`, checked by the
// scheduler's wire tests for this pod).
#[test]
fn daemonset_memory_limit_stands_in_for_its_request() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(pod("d").cpu(1000).memory(10_000 * GI))];
    assert!(!s.solve(vec![pod("a")]).scheduled("a"));
}

// The daemon: a container of 1 CPU with a 1Gi memory limit, an init
// container of 3 CPU with a 3Gi memory limit; it peaks at 3 CPU / 3Gi
// during init (its effective requests, as `from_wire` works them out).
#[test]
fn daemonset_init_containers_count_at_their_peak() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(pod("d").cpu(3000).memory(3 * GI))];
    let outcome = s.solve(vec![pod("a").cpu(500).memory(500 << 20)]);
    // The daemon peaks at 3 CPU / 3Gi during init: only a 4 CPU / 4Gi type fits both.
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
}

#[test]
fn daemonset_without_resources_is_harmless() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(pod("d"))];
    assert!(s.solve(vec![pod("a")]).scheduled("a"));
}

#[test]
fn daemonset_excluding_an_undefined_label_is_counted() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(
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
    let p = default_pool().label("foo", "bar");
    let mut s = Scenario::new(vec![p]);
    s.daemon_sets = vec![daemonset(
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
    p.taints = vec![taint("test", "", Effect::PreferNoSchedule)];
    let mut s = Scenario::new(vec![p]);
    s.daemon_sets = vec![daemonset(
        pod("d")
            .cpu(2000)
            .memory(2 * GI)
            .preferred(1, vec![in_("node", &["invalid"])]),
    )];
    let outcome = s.solve(vec![
        pod("a")
            .cpu(1000)
            .memory(GI)
            .tolerate(tolerate_everything()),
    ]);
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
}

#[test]
fn existing_node_daemonsets_already_running_are_not_reserved_twice() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(pod("d").cpu(1000).memory(GI))];
    let mut running = pod("d-n").cpu(1000).memory(2 * GI);
    running.owner_kind = "DaemonSet".into();
    running.node_name = "n".into();
    s.nodes = vec![
        node(
            "n",
            &[(ARCH, "amd64")],
            resources(&[("cpu", 16_000), ("memory", 16 * GI), ("pods", 110)]),
        )
        .with_pods(vec![running]),
    ];
    let outcome = s.solve(vec![pod("a").cpu(15_000)]);
    assert_eq!(outcome.existing_node_of("a"), Some("n"));
}

#[test]
fn daemonsets_expected_on_an_existing_node_reserve_room() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(pod("d").cpu(2000))];
    s.nodes = vec![node(
        "n",
        &[],
        resources(&[("cpu", 4000), ("memory", 16 * GI), ("pods", 110)]),
    )];
    let outcome = s.solve(vec![pod("a").cpu(3000)]);
    assert_eq!(outcome.existing_node_of("a"), None);
}

#[test]
fn existing_node_fills_then_a_new_node_opens() {
    let mut s = scenario();
    s.nodes = vec![node(
        "small",
        &[],
        resources(&[("cpu", 1900), ("memory", 2 * GI), ("pods", 5)]),
    )];
    let outcome = s.solve(vec![pod("a").cpu(1001), pod("b").cpu(1000)]);
    assert_eq!(outcome.existing_node_of("a"), Some("small"));
    assert!(outcome.claim_of("b").is_some());
}

fn four_cpus() -> karpenter_core::resources::Resources {
    resources(&[("cpu", 4000), ("memory", 4 * GI), ("pods", 5)])
}

#[test]
fn existing_node_without_the_selected_arch_is_skipped() {
    let mut s = scenario();
    s.nodes = vec![node("amd", &[(ARCH, "amd64")], four_cpus())];
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
    s.nodes = vec![node("z2", &[(ZONE, "test-zone-2")], four_cpus())];
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
    let mut in_flight = node("b-in-flight", &[], four_cpus());
    in_flight.has_node = false;
    in_flight.initialized = false;
    let ready = node("z-ready", &[], four_cpus());
    s.nodes = vec![in_flight, ready];
    let outcome = s.solve(vec![pod("a").cpu(100)]);
    assert_eq!(outcome.existing_node_of("a"), Some("z-ready"));
    s.nodes.truncate(1);
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
    assert_ne!(outcome.claim_index("a"), outcome.claim_index("b"));
    assert!(outcome.claim_index("c").is_some());
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
    let p = pod("a").preferred_affinity(50, ZONE, &[("security", "s2")]);
    assert!(scenario().solve(vec![p]).scheduled("a"));
}

// The pod: containers 6 CPU / 2Gi, an init container 10 CPU / 4Gi, then a
// sidecar 4.9 CPU / 2900Mi. Running, containers and sidecar add up to
// 10.9 CPU / 4948Mi, above the init peak of 10 CPU / 4Gi: its effective
// requests (as `from_wire` works them out; the scheduler's wire tests check
// it for this pod).
#[test]
fn sidecars_run_alongside_and_inits_peak_on_top_of_them() {
    let its = vec![
        ItSpec::new("10cpu", 10_000, 4 * GI).build(),
        ItSpec::new("11cpu", 11_000, 5 * GI).build(),
        ItSpec::new("12cpu", 12_000, 6 * GI).build(),
    ];
    let s = Scenario::with_instance_types(vec![default_pool()], its);
    let p = pod("a").cpu(10_900).memory(2 * GI + (2900 << 20));
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
    let p = pool("default").require(in_(CAPACITY_TYPE, &["on-demand"]));
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
    let outcome = scenario().solve(vec![pod("a").tolerate(toleration(
        "test-key",
        true,
        "",
        Some(Effect::NoExecute),
    ))]);
    assert!(outcome.claim_of("a").unwrap().taints.is_empty());
}

#[test]
fn min_values_on_two_keys_relax_independently() {
    let its = vec![ItSpec::new("instance-type-1", 1000, GI).build()];
    let p = default_pool()
        .require(min_values(
            in_(
                INSTANCE_TYPE,
                &["instance-type-1", "instance-type-2", "instance-type-3"],
            ),
            3,
        ))
        .require(min_values(
            in_(ZONE, &["test-zone-1", "test-zone-2", "test-zone-3"]),
            3,
        ));
    let mut s = Scenario::with_instance_types(vec![p], its);
    s.options.min_values_policy = MinValuesPolicy::BestEffort;
    let outcome = s.solve(vec![pod("a")]);
    let claim = outcome.claim_of("a").unwrap();
    let min = |key: &str| {
        claim
            .requirements
            .get(key)
            .filter(|r| r.operator() == Operator::In)
            .and_then(|r| r.min_values())
    };
    assert_eq!(min(INSTANCE_TYPE), Some(1));
    assert_eq!(min(ZONE), Some(3).min(Some(3)));
}

#[test]
fn pods_on_nodes_being_deleted_are_rescheduled() {
    let mut s = scenario();
    let mut running = pod("web-0").cpu(100).on("leaving");
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
    // Karpenter's IsCurrentlyReschedulable: a do-not-disrupt pod is not
    // evicted, so no capacity is launched for it.
    let mut pinned = pod("pinned-0").cpu(100).on("leaving");
    pinned.owner_kind = "ReplicaSet".into();
    pinned.do_not_disrupt = true;
    let mut n = node("leaving", &[], four_cpus()).with_pods(vec![
        running,
        daemon,
        terminating,
        stateful,
        pinned,
    ]);
    n.marked_for_deletion = true;
    s.nodes = vec![n];
    let outcome = s.solve(vec![]);
    assert!(!outcome.scheduled("pinned-0") && outcome.reason("pinned-0").is_none());
    assert!(outcome.scheduled("web-0"));
    assert!(outcome.scheduled("db-0"));
    assert!(!outcome.scheduled("ds-leaving") && outcome.reason("ds-leaving").is_none());
    assert!(!outcome.scheduled("old-0") && outcome.reason("old-0").is_none());
}
