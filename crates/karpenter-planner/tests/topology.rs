//! Karpenter's topology scenarios (its topology test suite), ported onto
//! the planner's model: zone, hostname and capacity-type spreads, existing
//! pods in their domains, minDomains, matchLabelKeys, pod affinity and
//! anti-affinity across zones, ScheduleAnyway under an ignore-preferences
//! policy, volume topology.

mod support;

use karpenter_planner::model::{NodePool, Pod, WhenUnsatisfiable};
use support::*;

fn topology_pool() -> NodePool {
    pool("default").require(req(CAPACITY_TYPE, Operator::Exists, &[]))
}

fn spread_pods(count: usize, key: &str, max_skew: i32) -> Vec<Pod> {
    (0..count)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("test", "test")
                .spread(key, max_skew, &[("test", "test")])
        })
        .collect()
}

const LABELS: &[(&str, &str)] = &[("test", "test")];

#[test]
fn zone_spread_balances_across_zones() {
    let pods = spread_pods(4, ZONE, 1);
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![1, 1, 2]);
}

#[test]
fn zone_spread_only_over_the_pools_zones() {
    let p = topology_pool().require(in_(ZONE, &["test-zone-1", "test-zone-2"]));
    let pods = spread_pods(4, ZONE, 1);
    let outcome = Scenario::new(vec![p]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![2, 2]);
}

#[test]
fn a_pool_pinned_to_one_zone_puts_everything_there() {
    let p = topology_pool().label(ZONE, "test-zone-1");
    let pods = spread_pods(4, ZONE, 1);
    let outcome = Scenario::new(vec![p]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![4]);
}

#[test]
fn spread_without_selector_does_not_spread() {
    let mut pods = spread_pods(2, ZONE, 1);
    for p in &mut pods {
        p.spread[0].selector = None;
    }
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods.clone());
    assert_eq!(outcome.claims().len(), 1);
}

#[test]
fn unknown_topology_key_is_unschedulable() {
    let mut pods = spread_pods(1, "unknown", 1);
    pods.push(pod("plain"));
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert!(!outcome.scheduled("p0"));
    assert!(
        outcome
            .reason("p0")
            .unwrap()
            .contains("unsatisfiable topology constraint for topology spread")
    );
    assert!(outcome.scheduled("plain"));
}

#[test]
fn hostname_spread_one_pod_per_node() {
    let pods = spread_pods(4, HOSTNAME, 1);
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods.clone());
    assert_eq!(outcome.skew(HOSTNAME, LABELS, &pods), vec![1, 1, 1, 1]);
    let pods = spread_pods(4, HOSTNAME, 4);
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods.clone());
    assert_eq!(outcome.skew(HOSTNAME, LABELS, &pods), vec![4]);
}

#[test]
fn capacity_type_spread() {
    let pods = spread_pods(4, CAPACITY_TYPE, 1);
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods.clone());
    assert_eq!(outcome.skew(CAPACITY_TYPE, LABELS, &pods), vec![2, 2]);
}

#[test]
fn existing_pods_are_counted_in_their_domains() {
    let mut s = Scenario::new(vec![topology_pool()]);
    let small = || resources(&[("cpu", 100), ("pods", 10)]);
    let n1 = node("n1", &[(ZONE, "test-zone-1")], small()).with_pods(vec![
        pod("e1").label("test", "test").on("n1"),
        pod("e2").label("test", "test").on("n1"),
        pod("unlabelled").on("n1"),
    ]);
    let mut failed = pod("failed").label("test", "test").on("n2");
    failed.phase = "Failed".into();
    let n2 = node("n2", &[(ZONE, "test-zone-2")], small())
        .with_pods(vec![pod("e3").label("test", "test").on("n2"), failed]);
    s.nodes = vec![n1, n2];
    let pods: Vec<_> = spread_pods(2, ZONE, 1)
        .into_iter()
        .map(|p| p.cpu(1000))
        .collect();
    let outcome = s.solve(pods.clone());
    // Existing: z1=2, z2=1 (the unlabelled and failed pods do not count).
    // Upstream expects the totals (2, 2, 1) in some order.
    let mut totals = std::collections::BTreeMap::from([
        ("test-zone-1", 2),
        ("test-zone-2", 1),
        ("test-zone-3", 0),
    ]);
    for p in &pods {
        *totals
            .get_mut(outcome.label(&p.key.name, ZONE).unwrap())
            .unwrap() += 1;
    }
    let mut skew: Vec<i32> = totals.into_values().collect();
    skew.sort_unstable();
    assert_eq!(skew, vec![1, 2, 2]);
}

#[test]
fn min_domains_forces_spreading_over_missing_domains() {
    let p = topology_pool().require(in_(ZONE, &["test-zone-1", "test-zone-2"]));
    let mut pods = spread_pods(3, ZONE, 1);
    for p in &mut pods {
        p.spread[0].min_domains = Some(3);
    }
    let outcome = Scenario::new(vec![p]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![1, 1]);
}

// matchLabelKeys: the pod's own value of each key joins the selector
// (`from_wire` does it; the scheduler's wire tests check it).
#[test]
fn match_label_keys_split_groups() {
    let mut pods = Vec::new();
    for (i, value) in ["a", "a", "b", "b"].iter().enumerate() {
        let mut p = pod(&format!("p{i}"))
            .label("test", "test")
            .label("test-label", value)
            .spread(HOSTNAME, 1, &[("test", "test")]);
        p.spread[0]
            .selector
            .as_mut()
            .unwrap()
            .require("test-label", value);
        pods.push(p);
    }
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert_eq!(outcome.claims().len(), 2);
}

#[test]
fn self_affinity_keeps_pods_together() {
    let pods: Vec<_> = (0..3)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("security", "s2")
                .affinity(ZONE, &[("security", "s2")])
        })
        .collect();
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert_eq!(outcome.claims().len(), 1);
}

#[test]
fn affinity_to_a_pod_that_does_not_exist_never_schedules() {
    let pods: Vec<_> = (0..3)
        .map(|i| pod(&format!("p{i}")).affinity(ZONE, &[("security", "s2")]))
        .collect();
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert!(outcome.claims().is_empty());
    assert!(outcome.reason("p0").unwrap().contains("pod affinity"));
}

#[test]
fn affinity_follows_the_target_to_its_node() {
    let target = pod("target").label("security", "s2").cpu(1000);
    let follower = pod("follower").affinity(HOSTNAME, &[("security", "s2")]);
    let outcome = Scenario::new(vec![topology_pool()]).solve(vec![target, follower]);
    assert_eq!(outcome.claims().len(), 1);
    assert!(outcome.scheduled("follower"));
}

#[test]
fn hostname_anti_affinity_needs_a_node_each() {
    let pods: Vec<_> = (0..5)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "nginx")
                .anti_affinity(HOSTNAME, &[("app", "nginx")])
        })
        .collect();
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert_eq!(outcome.claims().len(), 5);
}

#[test]
fn zone_anti_affinity_against_pods_in_every_zone_blocks() {
    let pinned = |name: &str, zone: &str| {
        pod(name)
            .label("security", "s2")
            .cpu(2000)
            .selector(ZONE, zone)
    };
    let anti = pod("anti").anti_affinity(ZONE, &[("security", "s2")]);
    let outcome = Scenario::new(vec![topology_pool()]).solve(vec![
        pinned("z1", "test-zone-1"),
        pinned("z2", "test-zone-2"),
        pinned("z3", "test-zone-3"),
        anti,
    ]);
    assert!(outcome.scheduled("z1") && outcome.scheduled("z2") && outcome.scheduled("z3"));
    assert!(!outcome.scheduled("anti"));
}

#[test]
fn undecided_anti_affinity_pod_blocks_every_zone_it_might_take() {
    let anti = pod("anti")
        .cpu(2000)
        .anti_affinity(ZONE, &[("security", "s2")]);
    let target = pod("target").label("security", "s2");
    let outcome = Scenario::new(vec![topology_pool()]).solve(vec![anti, target]);
    assert!(outcome.scheduled("anti"));
    assert!(!outcome.scheduled("target"));
}

#[test]
fn existing_pods_with_anti_affinity_keep_others_out_of_their_zone() {
    let mut s = Scenario::new(vec![topology_pool()]);
    s.nodes = ["test-zone-1", "test-zone-2", "test-zone-3"]
        .into_iter()
        .map(|zone| {
            node(
                zone,
                &[(ZONE, zone)],
                resources(&[("cpu", 100), ("pods", 10)]),
            )
            .with_pods(vec![
                pod(&format!("anti-{zone}"))
                    .on(zone)
                    .anti_affinity(ZONE, &[("security", "s2")]),
            ])
        })
        .collect();
    let outcome = s.solve(vec![pod("target").label("security", "s2")]);
    assert!(!outcome.scheduled("target"));
}

#[test]
fn preferred_anti_affinity_is_relaxed() {
    let pods: Vec<_> = (0..5)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "x")
                .preferred_anti_affinity(10, ZONE, &[("app", "x")])
        })
        .collect();
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert_eq!(outcome.solution.unschedulable.len(), 0);
}

#[test]
fn ignoring_preferences_packs_schedule_anyway_pods_together() {
    let mut pods = spread_pods(5, HOSTNAME, 1);
    for p in &mut pods {
        p.spread[0].when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
    }
    let mut s = Scenario::new(vec![topology_pool()]);
    assert_eq!(s.solve(pods.clone()).claims().len(), 5);
    s.options.ignore_preferences = true;
    assert_eq!(s.solve(pods).claims().len(), 1);
}

// A volume's topology joins the pod's required node affinity (`from_wire`
// ANDs it into every term; the scheduler's wire tests check it).
#[test]
fn volume_zone_requirements_pin_the_pod() {
    let p = pod("a").required(vec![in_(ZONE, &["test-zone-3"])]);
    let outcome = Scenario::new(vec![topology_pool()]).solve(vec![p]);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-3"));
}
