//! Karpenter's provisioning scenarios (its scheduling and provisioning test
//! suites), ported onto the planner's model: same inputs, same expected
//! outcome. Requirements, node selectors and affinity; preferences;
//! instance types and bin-packing; taints; daemonsets; existing nodes;
//! limits and pool weights; minValues; a deterministic answer.

mod support;

use karpenter_core::requirements::Requirement;
use karpenter_core::taints::Effect;
use karpenter_planner::solve::{self, MinValuesPolicy};
use support::Operator::{DoesNotExist, Exists, Gt, Lt, NotIn};
use support::*;

fn default_pool_named(name: &str) -> karpenter_planner::model::NodePool {
    pool(name).require(in_(CAPACITY_TYPE, &["spot", "on-demand"]))
}

fn default_pool() -> karpenter_planner::model::NodePool {
    default_pool_named("default")
}

fn scenario() -> Scenario {
    Scenario::new(vec![default_pool()])
}

// --- A. requirements, node selectors, node affinity -------------------------

#[test]
fn pool_labels_land_on_the_node() {
    let p = default_pool().label("test-key", "test-value");
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(outcome.label("a", "test-key"), Some("test-value"));
}

/// Karpenter: "should label nodes". Custom keys the pool's requirements
/// leave open (NotIn, Lt, Gt, Exists) still label the node, with a value
/// that meets them; DoesNotExist labels nothing.
#[test]
fn pool_requirements_on_custom_keys_label_the_node() {
    let p = default_pool()
        .label("test-key-1", "test-value-1")
        .require(in_("test-key-2", &["test-value-2"]))
        .require(req("test-key-3", NotIn, &["test-value-3"]))
        .require(req("test-key-4", Lt, &["4"]))
        .require(req("test-key-5", Gt, &["5"]))
        .require(req("test-key-6", Exists, &[]))
        .require(req("test-key-7", DoesNotExist, &[]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(outcome.label("a", "karpenter.sh/nodepool"), Some("default"));
    assert_eq!(outcome.label("a", "test-key-1"), Some("test-value-1"));
    assert_eq!(outcome.label("a", "test-key-2"), Some("test-value-2"));
    let value = |key| {
        outcome
            .label("a", key)
            .unwrap_or_else(|| panic!("{key} labelled"))
    };
    assert_ne!(value("test-key-3"), "test-value-3");
    assert!(value("test-key-4").parse::<i64>().is_ok_and(|v| v < 4));
    assert!(value("test-key-5").parse::<i64>().is_ok_and(|v| v > 5));
    value("test-key-6");
    assert_eq!(outcome.label("a", "test-key-7"), None);
    // Well-known keys left open are the provider's to set, not labelled.
    assert_eq!(outcome.label("a", ZONE), None);
}

#[test]
fn selector_on_a_different_pool_label_value_is_not_scheduled() {
    let p = default_pool().label("test-key", "test-value");
    let outcome =
        Scenario::new(vec![p]).solve(vec![pod("a").selector("test-key", "different-value")]);
    assert!(!outcome.scheduled("a"));
}

#[test]
fn selector_on_an_undefined_custom_label_is_not_scheduled() {
    let outcome = scenario().solve(vec![pod("a").selector("test-key", "test-value")]);
    assert!(!outcome.scheduled("a"));
    let reason = outcome.reason("a").unwrap();
    assert!(
        reason.contains("label \"test-key\" does not have known values"),
        "{reason}"
    );
    assert!(reason.contains("nodepool \"default\""), "{reason}");
}

#[test]
fn pool_zone_requirement_narrows_the_node() {
    let p = default_pool().require(in_(ZONE, &["test-zone-2"]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-2"));
}

#[test]
fn zone_only_offered_on_demand_picks_on_demand() {
    let outcome = scenario().solve(vec![pod("a").required(vec![in_(ZONE, &["test-zone-3"])])]);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-3"));
    let claim = outcome.claim_of("a").unwrap();
    assert_eq!(claim.cheapest.as_ref().unwrap().capacity_type, "on-demand");
}

#[test]
fn integer_bounds_select_instance_types() {
    let p = default_pool().require(req("integer", Gt, &["8"]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(outcome.label("a", "integer"), Some("16"));
    let p = default_pool().require(req("integer", Lt, &["8"]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(outcome.instance_type("a"), Some("small-instance-type"));
}

/// Karpenter v1.15: "should schedule compatible requirements with
/// Operator=Gte" and "... Operator=Lte", inclusive bounds.
#[test]
fn inclusive_integer_bounds_select_instance_types() {
    let p = default_pool().require(req("integer", Operator::Gte, &["16"]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(outcome.label("a", "integer"), Some("16"));
    let p = default_pool().require(req("integer", Operator::Lte, &["2"]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(outcome.label("a", "integer"), Some("2"));
}

fn five_fake_types() -> Vec<karpenter_planner::model::InstanceType> {
    (0..5)
        .map(|i| {
            ItSpec::new(&format!("fake-it-{i}"), (i + 1) * 1000, (i + 1) * 2 * GI)
                .pods((i + 1) * 10)
                .build()
        })
        .collect()
}

// Upstream suite_test.go: "should schedule optional labels": only the
// largest of five types carries `special`; `Exists` picks it.
#[test]
fn exists_on_a_label_only_some_types_carry_picks_those_types() {
    let outcome = Scenario::with_instance_types(vec![default_pool()], five_fake_types())
        .solve(vec![pod("a").required(vec![req("special", Exists, &[])])]);
    assert_eq!(outcome.instance_type("a"), Some("fake-it-4"));
    assert_eq!(outcome.label("a", "special"), Some("optional"));
}

// The same with types that simply leave the label out (an
// InstanceTypeCatalog lists only the labels a type has): the ones without
// it are taken as not carrying it, for `Exists` and `DoesNotExist` alike.
// In the model every type of a catalog declares every key the catalog
// knows, so the types that leave `special` out declare it `DoesNotExist`
// (`from_wire` adds that; the scheduler's wire tests check it), as the fake
// types do already.
#[test]
fn exists_on_a_label_other_types_leave_out_picks_the_types_that_list_it() {
    let types = five_fake_types();
    for it in &types[..4] {
        assert_eq!(
            it.requirements.get("special"),
            Some(&Requirement::does_not_exist("special"))
        );
    }
    let outcome = Scenario::with_instance_types(vec![default_pool()], types).solve(vec![
        pod("a").required(vec![req("special", Exists, &[])]),
        pod("b").required(vec![req("special", DoesNotExist, &[])]),
    ]);
    assert_eq!(outcome.instance_type("a"), Some("fake-it-4"));
    assert_eq!(outcome.label("a", "special"), Some("optional"));
    assert_eq!(outcome.instance_type("b"), Some("fake-it-0"));
}

#[test]
fn unknown_zone_is_not_scheduled_and_not_in_excludes() {
    let outcome = scenario().solve(vec![
        pod("unknown").required(vec![in_(ZONE, &["unknown"])]),
        pod("notin").required(vec![req(
            ZONE,
            NotIn,
            &["test-zone-1", "test-zone-2", "unknown"],
        )]),
        pod("none").required(vec![req(
            ZONE,
            NotIn,
            &["test-zone-1", "test-zone-2", "test-zone-3", "unknown"],
        )]),
    ]);
    assert!(!outcome.scheduled("unknown"));
    assert_eq!(outcome.label("notin", ZONE), Some("test-zone-3"));
    assert!(!outcome.scheduled("none"));
}

#[test]
fn preferred_zone_is_honoured_and_relaxed_when_impossible() {
    let zones = ["test-zone-1", "test-zone-2", "test-zone-3", "unknown"];
    let outcome = scenario().solve(vec![
        pod("a")
            .required(vec![in_(ZONE, &zones)])
            .preferred(1, vec![in_(ZONE, &["test-zone-2", "unknown"])]),
        pod("b")
            .required(vec![in_(ZONE, &zones)])
            .preferred(1, vec![in_(ZONE, &["unknown"])]),
    ]);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-2"));
    assert!(outcome.scheduled("b"));
}

#[test]
fn undefined_custom_keys_accept_only_exclusions() {
    let outcome = scenario().solve(vec![
        pod("in").required(vec![in_("test-key", &["v"])]),
        pod("notin").required(vec![req("test-key", NotIn, &["v"])]),
        pod("exists").required(vec![req("test-key", Exists, &[])]),
        pod("dne").required(vec![req("test-key", DoesNotExist, &[])]),
    ]);
    assert!(!outcome.scheduled("in"));
    assert!(outcome.scheduled("notin"));
    assert!(!outcome.scheduled("exists"));
    assert!(outcome.scheduled("dne"));
    assert_eq!(outcome.label("notin", "test-key"), None);
}

#[test]
fn pool_requirement_against_pod_operators() {
    let p = default_pool().require(in_("test-key", &["test-value"]));
    let s = Scenario::new(vec![p]);
    let cases: [(&str, Vec<Requirement>, bool); 6] = [
        ("in", vec![in_("test-key", &["test-value"])], true),
        (
            "notin",
            vec![req("test-key", NotIn, &["test-value"])],
            false,
        ),
        ("exists", vec![req("test-key", Exists, &[])], true),
        ("dne", vec![req("test-key", DoesNotExist, &[])], false),
        ("other", vec![in_("test-key", &["another-value"])], false),
        (
            "notother",
            vec![req("test-key", NotIn, &["another-value"])],
            true,
        ),
    ];
    for (name, term, expected) in cases {
        let outcome = s.solve(vec![pod(name).required(term)]);
        assert_eq!(outcome.scheduled(name), expected, "{name}");
        if expected {
            assert_eq!(
                outcome.label(name, "test-key"),
                Some("test-value"),
                "{name}"
            );
        }
    }
}

#[test]
fn compatible_pods_share_a_node_and_conflicting_ones_do_not() {
    let p = default_pool().require(in_("test-key", &["test-value", "another-value"]));
    let s = Scenario::new(vec![p]);
    let outcome = s.solve(vec![
        pod("a").required(vec![in_("test-key", &["test-value"])]),
        pod("b").required(vec![req("test-key", NotIn, &["another-value"])]),
    ]);
    assert_eq!(outcome.claims().len(), 1);
    assert_eq!(outcome.label("a", "test-key"), Some("test-value"));
    let outcome = s.solve(vec![
        pod("a").required(vec![in_("test-key", &["test-value"])]),
        pod("b").required(vec![in_("test-key", &["another-value"])]),
    ]);
    assert_eq!(outcome.claims().len(), 2);
}

/// Karpenter: "should not schedule pods that have node selectors with
/// restricted labels" and "... with restricted domains" (karpenter.sh only
/// since v1.9).
#[test]
fn restricted_labels_are_not_scheduled() {
    let outcome = scenario().solve(vec![
        pod("host").selector(HOSTNAME, "red-node"),
        pod("karpenter").required(vec![in_("karpenter.sh/test", &["x"])]),
        pod("sub-karpenter").required(vec![in_("sub.karpenter.sh/test", &["x"])]),
    ]);
    for name in ["host", "karpenter", "sub-karpenter"] {
        assert!(!outcome.scheduled(name), "{name}");
        assert!(
            outcome.reason(name).unwrap().contains("restricted"),
            "{name}"
        );
    }
}

/// Karpenter: "should schedule pods that have node selectors with label in
/// the kubernetes domains" and "... in subdomain from kubernetes domains"
/// (v1.9 lifted those domains' restriction).
#[test]
fn kubernetes_domain_requirements_are_scheduled_and_label_the_node() {
    for prefix in ["", "subdomain."] {
        let keys: Vec<String> = ["kubernetes.io", "k8s.io"]
            .iter()
            .map(|domain| format!("{prefix}{domain}/test"))
            .collect();
        let mut p = default_pool();
        for key in &keys {
            p = p.require(in_(key, &["test-value"]));
        }
        let outcome = Scenario::new(vec![p]).solve(vec![
            pod("a"),
            pod("b").selector(&keys[0], "test-value"),
            pod("c").required(vec![in_(&keys[1], &["test-value"])]),
        ]);
        for name in ["a", "b", "c"] {
            assert!(outcome.scheduled(name), "{prefix}: {name}");
            for key in &keys {
                assert_eq!(outcome.label(name, key), Some("test-value"), "{key}");
            }
        }
    }
}

#[test]
fn exception_domains_may_be_pool_labels() {
    let p = default_pool().require(in_("node.kubernetes.io/test", &["test-value"]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(
        outcome.label("a", "node.kubernetes.io/test"),
        Some("test-value")
    );
}

#[test]
fn pool_requirements_that_match_no_instance_type_are_reported() {
    let p = default_pool().require(in_(INSTANCE_TYPE, &["non-existent"]));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    let reason = outcome.reason("a").unwrap();
    assert!(
        reason.contains("nodepool requirements filtered out all available instance types"),
        "{reason}"
    );
    // Karpenter's NoCompatibleInstanceTypes names the pool.
    assert_eq!(
        outcome.solution.pools_without_instance_types,
        [solve::PoolWithoutInstanceTypes {
            node_pool: "default".to_owned(),
            min_values: false,
        }]
    );
    // Types left, but fewer than minValues asks: the minValues variant.
    let p = default_pool().require(min_values(in_(INSTANCE_TYPE, &["small-instance-type"]), 2));
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert_eq!(
        outcome.solution.pools_without_instance_types,
        [solve::PoolWithoutInstanceTypes {
            node_pool: "default".to_owned(),
            min_values: true,
        }]
    );
}

#[test]
fn pools_that_are_not_ready_are_skipped() {
    let mut p = default_pool();
    p.ready = false;
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    assert!(!outcome.scheduled("a"));
}

// --- B. preferences ---------------------------------------------------------

#[test]
fn the_last_required_term_is_never_relaxed() {
    let p = default_pool().require(in_(ZONE, &["test-zone-1"]));
    let outcome =
        Scenario::new(vec![p]).solve(vec![pod("a").required(vec![in_(ZONE, &["invalid"])])]);
    assert!(!outcome.scheduled("a"));
}

#[test]
fn required_terms_are_tried_in_order() {
    let outcome = scenario().solve(vec![
        pod("a")
            .required(vec![in_(ZONE, &["invalid"])])
            .required(vec![in_(ZONE, &["invalid"])])
            .required(vec![in_(ZONE, &["test-zone-1"])])
            .required(vec![in_(ZONE, &["test-zone-2"])]),
    ]);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-1"));
}

#[test]
fn heavier_preferences_win_and_impossible_ones_are_dropped() {
    let p = default_pool().require(in_(ZONE, &["test-zone-1", "test-zone-2"]));
    let outcome = Scenario::new(vec![p]).solve(vec![
        pod("a")
            .preferred(100, vec![in_(INSTANCE_TYPE, &["test-zone-3"])])
            .preferred(50, vec![in_(ZONE, &["test-zone-2"])])
            .preferred(1, vec![in_(ZONE, &["test-zone-1"])]),
    ]);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-2"));
}

#[test]
fn prefer_no_schedule_taint_is_tolerated_only_after_relaxing() {
    let mut tainted = default_pool_named("a-tainted");
    tainted.taints = vec![taint("foo", "bar", Effect::PreferNoSchedule)];
    let untainted = pool("b-clean");
    let outcome = Scenario::new(vec![tainted.clone(), untainted]).solve(vec![pod("p")]);
    assert_eq!(outcome.claim_of("p").unwrap().node_pool, "b-clean");
    let outcome = Scenario::new(vec![tainted]).solve(vec![
        pod("p")
            .preferred(1, vec![in_(ZONE, &["invalid"])])
            .preferred(1, vec![in_(INSTANCE_TYPE, &["invalid"])]),
    ]);
    assert!(outcome.scheduled("p"));
    assert_eq!(outcome.claim_of("p").unwrap().taints.len(), 1);
}

// --- C. instance types and bin-packing ---------------------------------------

#[test]
fn pods_larger_than_any_instance_type_are_not_scheduled() {
    let outcome = scenario().solve(vec![pod("cpu").cpu(512_000), pod("mem").memory(2 << 40)]);
    assert!(!outcome.scheduled("cpu"));
    let reason = outcome.reason("cpu").unwrap();
    assert!(
        reason.contains("no instance type has enough resources"),
        "{reason}"
    );
    assert!(!outcome.scheduled("mem"));
}

#[test]
fn small_pods_pack_onto_the_smallest_type() {
    let pods: Vec<_> = (0..5)
        .map(|i| pod(&format!("p{i}")).memory(10_000_000))
        .collect();
    let outcome = scenario().solve(pods);
    assert_eq!(outcome.claims().len(), 1);
    assert_eq!(outcome.instance_type("p0"), Some("small-instance-type"));
}

#[test]
fn forty_pods_of_1_8g_need_twenty_default_nodes() {
    let pods: Vec<_> = (0..40)
        .map(|i| {
            pod(&format!("p{i}"))
                .memory(1_800_000_000)
                .selector(ARCH, "amd64")
        })
        .collect();
    let outcome = scenario().solve(pods);
    assert_eq!(outcome.claims().len(), 20);
    for claim in outcome.claims() {
        assert_eq!(
            claim.cheapest.as_ref().unwrap().instance_type,
            "default-instance-type"
        );
    }
}

#[test]
fn pods_capacity_limits_packing() {
    let pods: Vec<_> = (0..25)
        .map(|i| {
            pod(&format!("p{i}"))
                .cpu(1)
                .memory(1 << 20)
                .selector(ARCH, "amd64")
        })
        .collect();
    let outcome = scenario().solve(pods);
    assert_eq!(outcome.claims().len(), 5);
    for claim in outcome.claims() {
        assert_eq!(
            claim.cheapest.as_ref().unwrap().instance_type,
            "small-instance-type"
        );
    }
}

// The planner sees a pod's effective requests; the caller works them out
// (`karpenter_proto::convert::pod_requests`, checked by the scheduler's wire tests for
// these very pods).
#[test]
fn init_containers_and_overhead_count() {
    // Containers 1 CPU / 1Gi, an init container 2 CPU / 1Gi: 2 CPU / 1Gi.
    let p = pod("a").cpu(2000).memory(GI);
    // An init container of 1Ti memory.
    let huge_init = pod("b").memory(1 << 40);
    // Containers 1 CPU, overhead 2 CPU.
    let overhead = pod("c").cpu(3000);
    assert_eq!(
        scenario().solve(vec![p]).instance_type("a"),
        Some("default-instance-type")
    );
    assert!(!scenario().solve(vec![huge_init]).scheduled("b"));
    assert_eq!(
        scenario().solve(vec![overhead]).instance_type("c"),
        Some("default-instance-type")
    );
}

#[test]
fn extended_resources_select_the_matching_type() {
    let outcome = scenario().solve(vec![
        pod("a").resource("fake.com/vendor-a", 1),
        pod("b").resource("fake.com/vendor-b", 1),
    ]);
    assert_eq!(outcome.instance_type("a"), Some("gpu-vendor-instance-type"));
    assert_eq!(
        outcome.instance_type("b"),
        Some("gpu-vendor-b-instance-type")
    );
    let claim = outcome.claim_of("a").unwrap();
    assert_eq!(claim.instance_types, vec!["gpu-vendor-instance-type"]);
}

#[test]
fn single_pod_instance_type_needs_a_node_per_pod() {
    let p = default_pool().require(in_(INSTANCE_TYPE, &["single-pod-instance-type"]));
    let outcome = Scenario::new(vec![p]).solve((0..3).map(|i| pod(&format!("p{i}"))).collect());
    assert_eq!(outcome.claims().len(), 3);
}

#[test]
fn options_are_ranked_by_price() {
    let outcome = scenario().solve(vec![pod("a").cpu(1000)]);
    let claim = outcome.claim_of("a").unwrap();
    assert_eq!(
        claim.instance_types.first().map(String::as_str),
        Some("small-instance-type")
    );
    assert_eq!(
        claim.cheapest.as_ref().unwrap().instance_type,
        "small-instance-type"
    );
}

// --- D. taints ---------------------------------------------------------------

#[test]
fn pool_taints_need_tolerations_and_startup_taints_do_not() {
    let mut p = default_pool();
    p.taints = vec![taint("test-key", "test-value", Effect::NoSchedule)];
    let s = Scenario::new(vec![p]);
    let outcome = s.solve(vec![
        pod("exists").tolerate(toleration("test-key", true, "", Some(Effect::NoSchedule))),
        pod("equal").tolerate(toleration(
            "test-key",
            false,
            "test-value",
            Some(Effect::NoSchedule),
        )),
        pod("none"),
        pod("wrong").tolerate(toleration("invalid", true, "", None)),
        pod("empty-value").tolerate(toleration("test-key", false, "", Some(Effect::NoSchedule))),
    ]);
    assert!(outcome.scheduled("exists"));
    assert!(outcome.scheduled("equal"));
    assert!(!outcome.scheduled("none"));
    assert!(!outcome.scheduled("wrong"));
    assert!(!outcome.scheduled("empty-value"));
    let mut p = default_pool();
    p.startup_taints = vec![taint("startup", "", Effect::NoSchedule)];
    assert!(Scenario::new(vec![p]).solve(vec![pod("a")]).scheduled("a"));
}

// --- E. daemonsets -----------------------------------------------------------

#[test]
fn daemonset_overhead_is_counted() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(pod("d").cpu(2000).memory(2 * GI))];
    let outcome = s.solve(vec![pod("a").cpu(1000).memory(GI)]);
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
    let requests = &outcome.claim_of("a").unwrap().requests;
    assert_eq!(requests.cpu, 3000);
    assert_eq!(requests.pods, 2);
}

/// Karpenter's default (`IGNORE_DRA_REQUESTS=true`): a pod with Dynamic
/// Resource Allocation requests is not provisioned for, with its reason,
/// and a DaemonSet whose pods have them is no overhead; with the option
/// set (`false` there) both are planned on their other requests.
#[test]
fn pods_with_dra_requests_are_left_unplanned_unless_the_option_plans_them() {
    let dra = |mut p: karpenter_planner::model::Pod| {
        p.dra_requests = true;
        p
    };
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(dra(pod("d").cpu(2000).memory(2 * GI)))];
    let pods = || {
        vec![
            dra(pod("gpu").cpu(1000).memory(GI)),
            pod("plain").cpu(1000).memory(GI),
        ]
    };
    let outcome = s.solve(pods());
    assert!(!outcome.scheduled("gpu"));
    assert_eq!(
        outcome.reason("gpu"),
        Some(
            "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter"
        )
    );
    assert!(outcome.scheduled("plain"));
    let requests = &outcome.claim_of("plain").unwrap().requests;
    assert_eq!(requests.cpu, 1000, "the DRA DaemonSet is no overhead");

    s.options.plan_dra_pods = true;
    let outcome = s.solve(pods());
    assert!(outcome.scheduled("gpu") && outcome.scheduled("plain"));
    let requests = &outcome.claim_of("plain").unwrap().requests;
    assert_eq!(requests.cpu, 4000, "both pods and the DaemonSet");
}

#[test]
fn daemonset_host_ports_conflict() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(pod("d").host_port(8080))];
    let outcome = s.solve(vec![pod("a").host_port(8080)]);
    assert!(!outcome.scheduled("a"));
    assert!(outcome.claims().is_empty());
}

#[test]
fn daemonsets_that_would_not_run_on_the_pool_are_ignored() {
    let mut p = default_pool();
    p.taints = vec![taint("foo", "bar", Effect::NoSchedule)];
    let mut s = Scenario::new(vec![p]);
    s.daemon_sets = vec![
        daemonset(pod("untolerating").cpu(2000).memory(2 * GI)),
        daemonset(
            pod("elsewhere")
                .cpu(2000)
                .memory(2 * GI)
                .selector("node", "invalid"),
        ),
    ];
    let outcome = s.solve(vec![
        pod("a")
            .cpu(1000)
            .memory(GI)
            .tolerate(tolerate_everything()),
    ]);
    assert_eq!(outcome.instance_type("a"), Some("small-instance-type"));
}

#[test]
fn daemonset_startup_taints_do_not_exclude_it() {
    let mut p = default_pool();
    p.startup_taints = vec![taint("foo.com/taint", "", Effect::NoSchedule)];
    let mut s = Scenario::new(vec![p]);
    s.daemon_sets = vec![daemonset(pod("d").cpu(2000).memory(2 * GI))];
    let outcome = s.solve(vec![pod("a").cpu(1000).memory(GI)]);
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
}

/// "should filter out daemonsets based on instance type requirements": a
/// daemon counts only on the instance types its required affinity selects.
#[test]
fn daemonsets_count_only_on_the_instance_types_they_select() {
    let mut s = scenario();
    s.daemon_sets = vec![
        daemonset(
            pod("small-agent")
                .cpu(1000)
                .required(vec![in_("size", &["small"])]),
        ),
        daemonset(
            pod("large-agent")
                .cpu(10_000)
                .required(vec![in_("size", &["large"])]),
        ),
    ];
    let outcome = s.solve(vec![pod("a").cpu(1000).memory(GI)]);
    // Counting both daemons everywhere leaves only the 16-CPU arm type.
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
    let requests = &outcome.claim_of("a").unwrap().requests;
    assert_eq!(
        requests.cpu, 2000,
        "the pod and the one daemon its launch options run"
    );
}

/// "should not account for daemonset hostports when daemonset would not
/// schedule on selected node".
#[test]
fn daemonset_host_ports_count_only_where_the_daemonset_runs() {
    let mut s = scenario();
    s.daemon_sets = vec![
        daemonset(
            pod("large-agent")
                .cpu(4000)
                .memory(4 * GI)
                .required(vec![in_("size", &["large"])])
                .host_port(8080),
        ),
        daemonset(
            pod("small-agent")
                .cpu(2000)
                .memory(2 * GI)
                .required(vec![in_("size", &["small"])])
                .host_port(8081),
        ),
    ];
    let outcome = s.solve(vec![
        pod("a")
            .cpu(1000)
            .memory(GI)
            .required(vec![in_("size", &["small"])])
            .host_port(8080),
    ]);
    assert_eq!(outcome.instance_type("a"), Some("default-instance-type"));
    assert_eq!(outcome.label("a", "size"), Some("small"));
}

/// A pod whose host port a daemon holds on some instance types takes the
/// others; on none, it does not schedule.
#[test]
fn a_daemons_host_port_rules_out_only_the_types_it_runs_on() {
    let mut s = scenario();
    s.daemon_sets = vec![daemonset(
        pod("agent")
            .required(vec![in_("size", &["small"])])
            .host_port(8080),
    )];
    let outcome = s.solve(vec![pod("a").host_port(8080)]);
    assert_eq!(outcome.label("a", "size"), Some("large"));
    let outcome = s.solve(vec![
        pod("b")
            .host_port(8080)
            .required(vec![in_("size", &["small"])]),
    ]);
    assert!(!outcome.scheduled("b"));
    assert!(
        outcome.reason("b").unwrap().contains("host port"),
        "{:?}",
        outcome.reason("b")
    );
}

/// "Should properly handle DaemonSet resources with Node Affinity for
/// karpenter.sh/initialized and karpenter.sh/registered": new nodes get both
/// labels once they run, so such daemons count; the claim does not carry them.
#[test]
fn daemonsets_selecting_registered_or_initialized_nodes_count_on_new_nodes() {
    let mut s = scenario();
    s.daemon_sets = vec![
        daemonset(
            pod("on-initialized")
                .cpu(1000)
                .required(vec![in_("karpenter.sh/initialized", &["true"])]),
        ),
        daemonset(
            pod("on-registered")
                .cpu(1000)
                .required(vec![in_("karpenter.sh/registered", &["true"])]),
        ),
    ];
    let outcome = s.solve(vec![pod("a").cpu(2000)]);
    // 4 CPU with both daemons: only the 16-CPU type holds it.
    assert_eq!(outcome.instance_type("a"), Some("arm-instance-type"));
    let claim = outcome.claim_of("a").unwrap();
    for key in ["karpenter.sh/initialized", "karpenter.sh/registered"] {
        assert!(!claim.labels.contains_key(key), "label {key}");
        assert!(!claim.requirements.has(key), "requirement {key}");
    }
}

/// Karpenter never provisions for a DaemonSet's pod.
#[test]
fn a_pending_daemonset_pod_is_not_provisioned_for() {
    let mut daemon = pod("agent-x");
    daemon.owner_kind = "DaemonSet".into();
    let outcome = scenario().solve(vec![daemon, pod("a")]);
    assert!(outcome.scheduled("a"));
    assert!(!outcome.scheduled("agent-x"));
    assert!(outcome.claims().iter().all(|c| c.pods.len() == 1));
    assert!(outcome.reason("agent-x").unwrap().contains("DaemonSet"));
}

// --- F. existing nodes ---------------------------------------------------------

fn roomy() -> karpenter_core::resources::Resources {
    resources(&[("cpu", 10_000), ("memory", 10 * GI), ("pods", 110)])
}

#[test]
fn existing_capacity_is_used_first() {
    let mut s = scenario();
    s.nodes = vec![node("existing", &[(ARCH, "amd64")], roomy())];
    let pods: Vec<_> = (0..100).map(|i| pod(&format!("p{i}")).cpu(10)).collect();
    let outcome = s.solve(pods);
    assert!(outcome.claims().is_empty());
    assert_eq!(outcome.existing_node_of("p0"), Some("existing"));
}

#[test]
fn existing_nodes_must_carry_selected_labels() {
    let mut s = scenario();
    s.nodes = vec![node("existing", &[], roomy())];
    let outcome = s.solve(vec![pod("a").selector(ZONE, "test-zone-1")]);
    assert_eq!(outcome.existing_node_of("a"), None);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-1"));
}

// A node not yet initialized reaches the planner without its startup taints
// (`from_wire` leaves them out; the scheduler's wire tests check it); once
// initialized, a startup taint still on it is a taint like any other.
#[test]
fn uninitialized_nodes_ignore_startup_taints_initialized_ones_do_not() {
    let tainted = |initialized: bool| {
        let mut n = node("n", &[], roomy());
        n.initialized = initialized;
        if initialized {
            n.taints = vec![taint("foo.com/taint", "tainted", Effect::NoSchedule)];
        }
        n
    };
    let mut s = scenario();
    s.nodes = vec![tainted(false)];
    assert_eq!(s.solve(vec![pod("a")]).existing_node_of("a"), Some("n"));
    s.nodes = vec![tainted(true)];
    assert_eq!(s.solve(vec![pod("a")]).existing_node_of("a"), None);
}

#[test]
fn nodes_marked_for_deletion_take_no_pods() {
    let mut s = scenario();
    let mut n = node("n", &[], roomy());
    n.marked_for_deletion = true;
    s.nodes = vec![n];
    let outcome = s.solve(vec![pod("a")]);
    assert_eq!(outcome.existing_node_of("a"), None);
    assert!(outcome.scheduled("a"));
}

// --- H. limits and weights ------------------------------------------------------

#[test]
fn limits_bound_the_largest_instance_type() {
    let mut p = default_pool();
    p.limits = limits(&[("cpu", 2000)]);
    let s = Scenario::new(vec![p]);
    assert!(s.solve(vec![pod("a").cpu(1750)]).scheduled("a"));
    assert!(!s.solve(vec![pod("a").cpu(2100)]).scheduled("a"));
    let mut p = default_pool();
    p.limits = limits(&[("cpu", 1000)]);
    let outcome = Scenario::new(vec![p]).solve(vec![pod("a")]);
    let reason = outcome.reason("a").unwrap();
    assert!(
        reason.contains("all available instance types exceed limits for nodepool: \"default\""),
        "{reason}"
    );
}

#[test]
fn limits_count_the_max_capacity_a_claim_might_launch() {
    let mut p = default_pool();
    p.limits = limits(&[("cpu", 3000)]);
    let anti = |name: &str| {
        pod(name)
            .cpu(1500)
            .label("app", "x")
            .anti_affinity(HOSTNAME, &[("app", "x")])
    };
    let outcome = Scenario::new(vec![p]).solve(vec![anti("a"), anti("b")]);
    assert_eq!(outcome.claims().len(), 1);
}

/// Upstream "should not schedule if limits would be exceeded (node)":
/// `limits.nodes` caps how many nodes a pool may have, existing ones
/// included.
#[test]
fn a_nodes_limit_caps_the_pools_node_count() {
    let anti = |name: &str| {
        pod(name)
            .label("app", "x")
            .anti_affinity(HOSTNAME, &[("app", "x")])
    };
    let mut p = default_pool();
    p.limits = limits(&[("nodes", 2)]);
    let mut s = Scenario::new(vec![p]);
    let outcome = s.solve(vec![anti("a"), anti("b"), anti("c")]);
    assert_eq!(outcome.claims().len(), 2, "two nodes at most");
    s.nodes = vec![node("n", &[], resources(&[("cpu", 100), ("pods", 0)])).in_pool("default")];
    let outcome = s.solve(vec![anti("a"), anti("b")]);
    assert_eq!(outcome.claims().len(), 1, "the existing node counts");
    let reason = outcome
        .reason("a")
        .or_else(|| outcome.reason("b"))
        .expect("one pod left unscheduled");
    assert!(reason.contains("exceed limits"), "{reason}");
}

#[test]
fn existing_usage_counts_against_limits() {
    let mut p = default_pool();
    p.limits = limits(&[("cpu", 20_000)]);
    let mut s = Scenario::new(vec![p]);
    s.nodes = vec![node("n", &[], resources(&[("cpu", 100_000), ("pods", 0)])).in_pool("default")];
    assert!(!s.solve(vec![pod("a")]).scheduled("a"));
}

#[test]
fn heaviest_pool_wins_unless_a_pod_selects_another() {
    let light = default_pool_named("light");
    let mut middle = default_pool_named("middle");
    middle.weight = 20;
    let mut heavy = default_pool_named("heavy");
    heavy.weight = 100;
    let s = Scenario::new(vec![light, middle, heavy]);
    let outcome = s.solve(vec![
        pod("a"),
        pod("b"),
        pod("c").selector("karpenter.sh/nodepool", "light"),
    ]);
    assert_eq!(outcome.claim_of("a").unwrap().node_pool, "heavy");
    assert_eq!(outcome.claim_of("b").unwrap().node_pool, "heavy");
    assert_eq!(outcome.claim_of("c").unwrap().node_pool, "light");
}

/// Upstream `OrderByWeight`: NodePools of equal weight are tried with the
/// name later in the alphabet first.
#[test]
fn equal_weight_pools_are_tried_in_descending_name_order() {
    let alpha = default_pool_named("alpha");
    let beta = default_pool_named("beta");
    let mut gamma = default_pool_named("gamma");
    gamma.weight = 0;
    let s = Scenario::new(vec![alpha, gamma, beta]);
    let outcome = s.solve(vec![pod("a")]);
    assert_eq!(outcome.claim_of("a").unwrap().node_pool, "gamma");
    let mut heavy = default_pool_named("aaa-heavy");
    heavy.weight = 10;
    let zzz = default_pool_named("zzz");
    let s = Scenario::new(vec![zzz, heavy]);
    let outcome = s.solve(vec![pod("a")]);
    assert_eq!(
        outcome.claim_of("a").unwrap().node_pool,
        "aaa-heavy",
        "weight first, name only between equals"
    );
}

// --- I. minValues ----------------------------------------------------------------

#[test]
fn min_values_strict_and_best_effort() {
    let p = default_pool().require(min_values(
        in_(
            INSTANCE_TYPE,
            &["default-instance-type", "small-instance-type", "missing"],
        ),
        3,
    ));
    let mut s = Scenario::new(vec![p]);
    assert!(!s.solve(vec![pod("a")]).scheduled("a"));
    s.options.min_values_policy = MinValuesPolicy::BestEffort;
    let outcome = s.solve(vec![pod("a")]);
    assert!(outcome.scheduled("a"));
    let claim = outcome.claim_of("a").unwrap();
    assert!(
        claim.min_values_relaxed,
        "the response says minValues were relaxed"
    );
    let it = claim.requirements.get(INSTANCE_TYPE).unwrap();
    assert_eq!(it.min_values(), Some(2));
}

#[test]
fn min_values_over_numeric_bounds() {
    let its = vec![
        ItSpec::new("it1", 1000, GI)
            .label("karpenter/numerical-value", "2")
            .build(),
        ItSpec::new("it2", 1000, GI)
            .label("karpenter/numerical-value", "3")
            .build(),
        ItSpec::new("it3", 4000, 4 * GI)
            .label("karpenter/numerical-value", "4")
            .build(),
    ];
    let p = default_pool().require(min_values(req("karpenter/numerical-value", Gt, &["2"]), 2));
    let pods = vec![
        pod("a").cpu(900).memory(900 << 20),
        pod("b").cpu(900).memory(900 << 20),
    ];
    let outcome = Scenario::with_instance_types(vec![p], its).solve(pods);
    assert_eq!(outcome.claims().len(), 2);
}

// --- output ---------------------------------------------------------------------

#[test]
fn same_input_same_output() {
    let pods: Vec<_> = (0..30)
        .map(|i| {
            pod(&format!("p{i}"))
                .cpu(100 * (i % 7 + 1))
                .spread(ZONE, 1, &[("app", "x")])
                .label("app", "x")
        })
        .collect();
    let a = scenario().solve(pods.clone()).solution;
    let b = scenario().solve(pods).solution;
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

// --- attachable-volume limits (Karpenter's "Volume Limits" context) ----------

const EBS: &str = "ebs.csi.aws.com";

fn with_volume(pod: karpenter_planner::model::Pod, claim: &str) -> karpenter_planner::model::Pod {
    let mut pod = pod;
    pod.volumes.push(karpenter_planner::volumes::VolumeRef {
        driver: EBS.into(),
        claim: format!("default/{claim}"),
    });
    pod
}

/// "should launch multiple nodes if required due to volume limits": an
/// existing node whose CSINode allows two EBS volumes takes two pods with
/// their own claims; the third needs a new node.
#[test]
fn an_existing_nodes_volume_limit_sends_further_pods_to_a_new_node() {
    let mut scenario = scenario();
    let mut existing = node("existing", &[(ARCH, "amd64"), (OS, "linux")], roomy());
    existing.volume_limits = [(EBS.to_owned(), 2)].into();
    scenario.nodes = vec![existing];
    let pods: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| with_volume(pod(name).cpu(100), &format!("claim-{name}")))
        .collect();
    let outcome = scenario.solve(pods);
    let on_existing = ["a", "b", "c"]
        .iter()
        .filter(|p| outcome.existing_node_of(p) == Some("existing"))
        .count();
    assert_eq!(on_existing, 2);
    assert_eq!(outcome.claims().len(), 1);
}

/// "should launch a single node if all pods use the same PVC": a claim
/// shared by pods counts once against the limit.
#[test]
fn pods_sharing_a_claim_count_once_against_the_limit() {
    let mut scenario = scenario();
    let mut existing = node("existing", &[(ARCH, "amd64"), (OS, "linux")], roomy());
    existing.volume_limits = [(EBS.to_owned(), 1)].into();
    scenario.nodes = vec![existing];
    let pods: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| with_volume(pod(name).cpu(100), "shared"))
        .collect();
    let outcome = scenario.solve(pods);
    for name in ["a", "b", "c"] {
        assert_eq!(outcome.existing_node_of(name), Some("existing"), "{name}");
    }
    assert!(outcome.claims().is_empty());
}

/// A catalog's `volumeAttachmentLimits`: a new node's options are the types
/// that can attach all of its pods' volumes; a driver without a limit is
/// unlimited.
#[test]
fn instance_type_volume_limits_narrow_a_new_nodes_options() {
    let mut types = default_instance_types();
    for it in &mut types {
        // The smaller half of the catalog attaches one EBS volume.
        let limit = if it.capacity.cpu <= 4_000 { 1 } else { 8 };
        it.volume_limits = [(EBS.to_owned(), limit)].into();
    }
    let scenario = Scenario::with_instance_types(vec![default_pool()], types.clone());
    let pods: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| with_volume(pod(name).cpu(100), &format!("claim-{name}")))
        .collect();
    let outcome = scenario.solve(pods);
    assert_eq!(outcome.claims().len(), 1, "one node for all three");
    let options = &outcome.claims()[0].instance_types;
    assert!(!options.is_empty());
    for name in options {
        let it = types
            .iter()
            .find(|t| &t.name == name)
            .expect("a catalog type");
        assert!(
            it.capacity.cpu > 4_000,
            "{name} cannot attach three volumes"
        );
    }
    // Another driver's volumes are not limited.
    let mut other = pod("d").cpu(100);
    other.volumes.push(karpenter_planner::volumes::VolumeRef {
        driver: "efs.csi.aws.com".into(),
        claim: "default/efs".into(),
    });
    let outcome = scenario.solve(vec![other]);
    assert!(outcome.scheduled("d"));
}
