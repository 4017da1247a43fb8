//! Karpenter's pod affinity and anti-affinity scenarios, ported onto the
//! planner's model: following a target to its node, zone or arch, chains,
//! the namespaces a term looks in, anti-affinity required and preferred.

mod support;

use karpenter_planner::model::{NodePool, Pod};
use support::*;

fn topology_pool() -> NodePool {
    pool("default").require(req(CAPACITY_TYPE, Operator::Exists, &[]))
}

fn scenario() -> Scenario {
    Scenario::new(vec![topology_pool()])
}

fn affine(p: Pod, key: &str, labels: &[(&str, &str)]) -> Pod {
    p.affinity(key, labels)
}

fn anti(p: Pod, key: &str, labels: &[(&str, &str)]) -> Pod {
    p.anti_affinity(key, labels)
}

#[test]
fn empty_affinity_lists_change_nothing() {
    let outcome = scenario().solve(vec![pod("a")]);
    assert!(outcome.scheduled("a"));
}

#[test]
fn affinity_lands_next_to_the_target_among_spread_pods() {
    let mut pods: Vec<_> = (0..10)
        .map(|i| {
            pod(&format!("s{i}"))
                .label("test", "test")
                .spread(HOSTNAME, 1, &[("test", "test")])
        })
        .collect();
    pods.push(pod("target").label("security", "s2"));
    pods.push(affine(pod("follower"), HOSTNAME, &[("security", "s2")]));
    let outcome = scenario().solve(pods);
    assert!(outcome.claim_index("follower").is_some());
    assert_eq!(
        outcome.claim_index("follower"),
        outcome.claim_index("target")
    );
}

#[test]
fn arch_affinity_with_hostname_spread_lands_on_the_same_arch_but_another_node() {
    let p = topology_pool().require(in_(ARCH, &["amd64", "arm64"]));
    let target = pod("target")
        .label("security", "s2")
        .cpu(2000)
        .selector(ARCH, "arm64")
        .spread(HOSTNAME, 1, &[("security", "s2")]);
    let follower = affine(
        pod("follower").label("security", "s2").cpu(1000).spread(
            HOSTNAME,
            1,
            &[("security", "s2")],
        ),
        ARCH,
        &[("security", "s2")],
    );
    let outcome = Scenario::new(vec![p]).solve(vec![target, follower]);
    assert_eq!(outcome.label("follower", ARCH), Some("arm64"));
    assert_ne!(
        outcome.claim_index("follower"),
        outcome.claim_index("target")
    );
}

#[test]
fn self_affinity_in_a_required_zone() {
    let pods: Vec<_> = (0..3)
        .map(|i| {
            affine(
                pod(&format!("p{i}"))
                    .label("security", "s2")
                    .required(vec![in_(ZONE, &["test-zone-3"])]),
                ZONE,
                &[("security", "s2")],
            )
        })
        .collect();
    let outcome = scenario().solve(pods);
    assert_eq!(outcome.claims().len(), 1);
    assert_eq!(outcome.label("p0", ZONE), Some("test-zone-3"));
}

#[test]
fn hostname_self_affinity_fills_one_node_and_leaves_the_rest() {
    let pods: Vec<_> = (0..10)
        .map(|i| {
            affine(
                pod(&format!("p{i}")).label("security", "s2"),
                HOSTNAME,
                &[("security", "s2")],
            )
        })
        .collect();
    let outcome = scenario().solve(pods.clone());
    // The fake types hold five pods.
    assert_eq!(outcome.placed(&pods), 5);
    assert_eq!(outcome.claims().len(), 1);
}

#[test]
fn affinity_pods_with_different_zones_get_different_nodes() {
    let one = affine(
        pod("one")
            .label("security", "s1")
            .required(vec![in_(ZONE, &["test-zone-2"])]),
        ZONE,
        &[("security", "s1")],
    );
    let two = affine(
        pod("two")
            .label("security", "s1")
            .required(vec![in_(ZONE, &["test-zone-3"])]),
        ZONE,
        &[("security", "s1")],
    );
    let outcome = scenario().solve(vec![one, two]);
    // The first self-affine pod picks zone 2; the second cannot follow it to
    // zone 3 in the same round.
    assert!(outcome.scheduled("one"));
    assert_eq!(outcome.label("one", ZONE), Some("test-zone-2"));
}

#[test]
fn zone_affinity_to_an_unconstrained_target_waits_for_its_zone() {
    let mut pods = vec![pod("target").label("security", "s2")];
    pods.extend((0..10).map(|i| affine(pod(&format!("f{i}")), ZONE, &[("security", "s2")])));
    let outcome = scenario().solve(pods);
    assert!(outcome.scheduled("target"));
    // The target's node may still land in any zone: nothing can follow yet.
    assert!(!outcome.scheduled("f0"));
}

#[test]
fn zone_affinity_to_a_pinned_target_follows_it() {
    let mut pods = vec![
        pod("target")
            .label("security", "s2")
            .selector(ZONE, "test-zone-1"),
    ];
    pods.extend((0..10).map(|i| affine(pod(&format!("f{i}")), ZONE, &[("security", "s2")])));
    let outcome = scenario().solve(pods);
    for i in 0..10 {
        assert_eq!(outcome.label(&format!("f{i}"), ZONE), Some("test-zone-1"));
    }
}

#[test]
fn a_chain_of_affinities_schedules() {
    let db = pod("db").label("app", "db");
    let web = affine(pod("web").label("app", "web"), HOSTNAME, &[("app", "db")]);
    let cache = affine(
        pod("cache").label("app", "cache"),
        HOSTNAME,
        &[("app", "web")],
    );
    let ui = affine(pod("ui").label("app", "ui"), HOSTNAME, &[("app", "cache")]);
    let outcome = scenario().solve(vec![ui, cache, web, db]);
    for name in ["db", "web", "cache", "ui"] {
        assert!(outcome.scheduled(name), "{name}");
    }
    assert_eq!(outcome.claims().len(), 1);
}

// A term looks in its pod's namespace unless it names namespaces; an empty
// namespace selector looks everywhere (`namespaces: None` in the model).
#[test]
fn affinity_namespaces_select_where_to_look() {
    let mut target = pod("target").label("security", "s2");
    target.key.namespace = "other".into();
    let same_namespace = affine(pod("follower"), HOSTNAME, &[("security", "s2")]);
    let outcome = scenario().solve(vec![target.clone(), same_namespace]);
    assert!(!outcome.scheduled("follower"));

    let mut named = pod("follower");
    named
        .pod_affinity
        .push(affinity_term(HOSTNAME, &[("security", "s2")], &["other"]));
    let outcome = scenario().solve(vec![target.clone(), named]);
    assert!(outcome.scheduled("follower"));

    let mut every = pod("follower");
    let mut term = affinity_term(HOSTNAME, &[("security", "s2")], &[]);
    term.namespaces = None;
    every.pod_affinity.push(term);
    let outcome = scenario().solve(vec![target, every]);
    assert!(outcome.scheduled("follower"));
}

#[test]
fn arch_anti_affinity_picks_the_other_arch() {
    let p = topology_pool().require(in_(ARCH, &["amd64", "arm64"]));
    let target = pod("target")
        .label("security", "s2")
        .cpu(2000)
        .selector(ARCH, "arm64")
        .spread(HOSTNAME, 1, &[("security", "s2")]);
    let other = anti(pod("other").cpu(1000), ARCH, &[("security", "s2")]);
    let outcome = Scenario::new(vec![p]).solve(vec![target, other]);
    assert_eq!(outcome.label("other", ARCH), Some("amd64"));
}

#[test]
fn required_anti_affinity_of_pods_in_every_zone_blocks_a_matching_pod() {
    let pinned =
        |name: &str, zone: &str| anti(pod(name).selector(ZONE, zone), ZONE, &[("security", "s2")]);
    let outcome = scenario().solve(vec![
        pinned("a1", "test-zone-1"),
        pinned("a2", "test-zone-2"),
        pinned("a3", "test-zone-3"),
        pod("target").label("security", "s2"),
    ]);
    assert!(outcome.scheduled("a1") && outcome.scheduled("a2") && outcome.scheduled("a3"));
    assert!(!outcome.scheduled("target"));
}

#[test]
fn preferred_anti_affinity_of_pods_in_every_zone_does_not_block() {
    let pinned = |name: &str, zone: &str| {
        pod(name)
            .selector(ZONE, zone)
            .preferred_anti_affinity(10, ZONE, &[("security", "s2")])
    };
    let outcome = scenario().solve(vec![
        pinned("a1", "test-zone-1"),
        pinned("a2", "test-zone-2"),
        pinned("a3", "test-zone-3"),
        pod("target").label("security", "s2"),
    ]);
    assert!(outcome.scheduled("target"));
}

#[test]
fn mutual_zone_anti_affinity_places_one_per_round() {
    let pods: Vec<_> = (0..3)
        .map(|i| {
            anti(
                pod(&format!("p{i}")).label("security", "s1"),
                ZONE,
                &[("security", "s1")],
            )
        })
        .collect();
    let outcome = scenario().solve(pods.clone());
    // The first pod's zone is undecided, so it blocks every zone it might take.
    assert_eq!(outcome.placed(&pods), 1);
}
