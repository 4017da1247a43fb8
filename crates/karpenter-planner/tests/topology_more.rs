//! More of Karpenter's topology scenarios, ported onto the planner's model:
//! several pools, capacity types, custom keys, node inclusion policies
//! (nodeTaintsPolicy, nodeAffinityPolicy).

mod support;

use karpenter_core::taints::Effect;
use karpenter_planner::model::{NodePool, Pod, StateNode, WhenUnsatisfiable};
use support::*;

const LABELS: &[(&str, &str)] = &[("test", "test")];

fn topology_pool(name: &str) -> NodePool {
    pool(name).require(req(CAPACITY_TYPE, Operator::Exists, &[]))
}

fn spread_pods(prefix: &str, count: usize, key: &str, max_skew: i32) -> Vec<Pod> {
    (0..count)
        .map(|i| {
            pod(&format!("{prefix}{i}"))
                .label("test", "test")
                .spread(key, max_skew, LABELS)
        })
        .collect()
}

#[test]
fn two_pools_each_pinned_to_a_zone_share_the_spread() {
    let p1 = topology_pool("p1")
        .require(in_(ZONE, &["test-zone-1", "test-zone-2"]))
        .label(ZONE, "test-zone-1");
    let p2 = topology_pool("p2").label(ZONE, "test-zone-2");
    let pods = spread_pods("p", 4, ZONE, 1);
    let outcome = Scenario::new(vec![p1, p2]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![2, 2]);
}

#[test]
fn a_spread_whose_selector_misses_its_own_pods_does_not_spread() {
    let pods: Vec<_> = (0..5)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("test", "test")
                .spread(HOSTNAME, 1, &[("app", "other")])
        })
        .collect();
    let outcome = Scenario::new(vec![topology_pool("default")]).solve(pods);
    assert_eq!(outcome.claims().len(), 1);
}

#[test]
fn min_domains_below_the_zone_count_changes_nothing() {
    let mut pods = spread_pods("p", 11, ZONE, 1);
    for p in &mut pods {
        p.spread[0].min_domains = Some(2);
    }
    let outcome = Scenario::new(vec![topology_pool("default")]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![3, 4, 4]);
}

#[test]
fn hostname_spread_groups_by_selector_and_arch() {
    let group = |name: &str, app: &str| {
        pod(name)
            .label("app", app)
            .spread(HOSTNAME, 1, &[("app", app)])
    };
    let pods = vec![
        group("a1", "app1"),
        group("a2", "app1"),
        group("b1", "app2"),
        group("b2", "app2"),
    ];
    let p = topology_pool("default").require(in_(ARCH, &["amd64", "arm64"]));
    let outcome = Scenario::new(vec![p.clone()]).solve(pods);
    assert_eq!(outcome.claims().len(), 2);
    let pods = vec![
        group("a1", "app1").selector(ARCH, "amd64"),
        group("a2", "app1").selector(ARCH, "amd64"),
        group("b1", "app2").selector(ARCH, "arm64"),
        group("b2", "app2").selector(ARCH, "arm64"),
    ];
    let outcome = Scenario::new(vec![p]).solve(pods);
    assert_eq!(outcome.claims().len(), 4);
}

#[test]
fn capacity_type_spread_across_two_pools() {
    // A spot pod already runs; the pool now only launches on-demand.
    let on_demand = pool("on-demand").require(in_(CAPACITY_TYPE, &["on-demand"]));
    let mut s = Scenario::new(vec![on_demand]);
    let mut existing = pod("existing").label("test", "test").cpu(1100);
    existing.node_name = "spot-node".into();
    s.nodes = vec![
        node(
            "spot-node",
            &[(CAPACITY_TYPE, "spot")],
            resources(&[("cpu", 1200), ("pods", 1)]),
        )
        .with_pods(vec![existing]),
    ];
    let pods: Vec<_> = spread_pods("p", 5, CAPACITY_TYPE, 1)
        .into_iter()
        .map(|p| p.cpu(1100))
        .collect();
    let outcome = s.solve(pods.clone());
    // One spot pod exists, so at most two on-demand pods keep the skew at 1.
    assert_eq!(outcome.placed(&pods), 2);
    let mut anyway = pods;
    for p in &mut anyway {
        p.spread[0].when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
    }
    let outcome = s.solve(anyway.clone());
    assert_eq!(outcome.placed(&anyway), 5);
}

#[test]
fn a_custom_key_spread_over_two_pools() {
    let key = "capacity.spread.4-1";
    let spot = pool("spot")
        .require(in_(CAPACITY_TYPE, &["spot"]))
        .require(in_(key, &["2", "3", "4", "5"]));
    let on_demand = pool("on-demand")
        .require(in_(CAPACITY_TYPE, &["on-demand"]))
        .require(in_(key, &["1"]));
    let pods = spread_pods("p", 20, key, 1);
    let outcome = Scenario::new(vec![spot, on_demand]).solve(pods.clone());
    assert_eq!(outcome.skew(key, LABELS, &pods), vec![4, 4, 4, 4, 4]);
    assert_eq!(outcome.skew(CAPACITY_TYPE, LABELS, &pods), vec![4, 16]);
}

#[test]
fn node_selectors_and_required_zones_spread_within_what_they_allow() {
    let mut pods: Vec<_> = spread_pods("a", 5, ZONE, 1)
        .into_iter()
        .map(|p| p.selector(ZONE, "test-zone-1"))
        .collect();
    pods.extend(
        spread_pods("b", 10, ZONE, 1)
            .into_iter()
            .map(|p| p.selector(ZONE, "test-zone-2")),
    );
    let outcome = Scenario::new(vec![topology_pool("default")]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![5, 10]);
    let pods: Vec<_> = spread_pods("c", 10, ZONE, 1)
        .into_iter()
        .map(|p| p.required(vec![in_(ZONE, &["test-zone-1", "test-zone-2"])]))
        .collect();
    let outcome = Scenario::new(vec![topology_pool("default")]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![5, 5]);
}

#[test]
fn a_preferred_zone_does_not_narrow_the_spread() {
    let pods: Vec<_> = spread_pods("p", 6, ZONE, 1)
        .into_iter()
        .map(|p| p.preferred(10, vec![in_(ZONE, &["test-zone-1", "test-zone-2"])]))
        .collect();
    let outcome = Scenario::new(vec![topology_pool("default")]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![2, 2, 2]);
}

#[test]
fn capacity_type_spread_with_required_capacity_types() {
    let pods: Vec<_> = spread_pods("s", 3, CAPACITY_TYPE, 1)
        .into_iter()
        .map(|p| p.required(vec![in_(CAPACITY_TYPE, &["spot"])]))
        .collect();
    let outcome = Scenario::new(vec![topology_pool("default")]).solve(pods.clone());
    assert_eq!(outcome.skew(CAPACITY_TYPE, LABELS, &pods), vec![3]);
}

fn tainted_node(name: &str, value: &str) -> StateNode {
    let mut n = node(
        name,
        &[("fake-label", value)],
        resources(&[("cpu", 100), ("pods", 10)]),
    );
    n.taints = vec![taint("taintname", "taintvalue", Effect::NoSchedule)];
    n
}

#[test]
fn node_taints_policy_decides_whether_tainted_domains_count() {
    let p = topology_pool("default").label("fake-label", "baz");
    let mut s = Scenario::new(vec![p]);
    s.nodes = vec![tainted_node("foo", "foo"), tainted_node("bar", "bar")];
    let spread = |honor_node_taints: bool| -> Vec<Pod> {
        spread_pods("p", 5, "fake-label", 1)
            .into_iter()
            .map(|mut p| {
                p.spread[0].honor_node_taints = honor_node_taints;
                p.cpu(1000)
            })
            .collect()
    };
    // Ignore: the tainted nodes' domains count (with zero pods), so only one
    // pod fits the skew in baz. Honor: they don't, and all five go to baz.
    let ignore = spread(false);
    let outcome = s.solve(ignore.clone());
    assert_eq!(outcome.placed(&ignore), 1);
    let honor = spread(true);
    let outcome = s.solve(honor.clone());
    assert_eq!(outcome.placed(&honor), 5);
}

#[test]
fn node_taints_policy_applies_to_tainted_pools() {
    let open = topology_pool("open").require(in_("fake-label", &["foo"]));
    let mut tainted = topology_pool("tainted").require(in_("fake-label", &["bar"]));
    tainted.taints = vec![taint("taintname", "taintvalue", Effect::NoSchedule)];
    let s = Scenario::new(vec![open, tainted]);
    let spread = |honor_node_taints: bool| -> Vec<Pod> {
        spread_pods("p", 2, "fake-label", 1)
            .into_iter()
            .map(|mut p| {
                p.spread[0].honor_node_taints = honor_node_taints;
                p
            })
            .collect()
    };
    let ignore = spread(false);
    let outcome = s.solve(ignore.clone());
    assert_eq!(outcome.placed(&ignore), 1);
    let honor = spread(true);
    let outcome = s.solve(honor.clone());
    assert_eq!(outcome.placed(&honor), 2);
}

#[test]
fn node_affinity_policy_decides_whether_unselected_domains_count() {
    let p = topology_pool("default")
        .label("fake-label", "baz")
        .label("selector", "value");
    let mut s = Scenario::new(vec![p]);
    s.nodes = ["foo", "bar"]
        .iter()
        .map(|v| {
            node(
                v,
                &[("fake-label", v), ("selector", "mismatch")],
                resources(&[("cpu", 100), ("pods", 10)]),
            )
        })
        .collect();
    let spread = |honor_node_affinity: bool| -> Vec<Pod> {
        spread_pods("p", 5, "fake-label", 1)
            .into_iter()
            .map(|mut p| {
                p.spread[0].honor_node_affinity = honor_node_affinity;
                p.selector("selector", "value").cpu(1000)
            })
            .collect()
    };
    let ignore = spread(false);
    let outcome = s.solve(ignore.clone());
    assert_eq!(outcome.placed(&ignore), 1);
    let honor = spread(true);
    let outcome = s.solve(honor.clone());
    assert_eq!(outcome.placed(&honor), 5);
}
