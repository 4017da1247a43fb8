//! Karpenter's topology scenarios (its topology test suite), ported.

mod support;

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use support::*;

fn topology_pool() -> sched::NodePool {
    let mut p = pool("default");
    p.requirements = vec![req(CAPACITY_TYPE, types::Operator::Exists, &[])];
    p
}

fn spread_pods(count: usize, key: &str, max_skew: i32) -> Vec<sched::Pod> {
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
    let mut p = topology_pool();
    p.requirements
        .push(in_(ZONE, &["test-zone-1", "test-zone-2"]));
    let pods = spread_pods(4, ZONE, 1);
    let outcome = Scenario::new(vec![p]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![2, 2]);
}

#[test]
fn a_pool_pinned_to_one_zone_puts_everything_there() {
    let mut p = topology_pool();
    p.labels.insert(ZONE.into(), "test-zone-1".into());
    let pods = spread_pods(4, ZONE, 1);
    let outcome = Scenario::new(vec![p]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![4]);
}

#[test]
fn spread_without_selector_does_not_spread() {
    let mut pods = spread_pods(2, ZONE, 1);
    for p in &mut pods {
        p.topology_spread_constraints[0].label_selector = None;
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
    let mut n1 = node(
        "n1",
        &[(ZONE, "test-zone-1")],
        list(&[("cpu", 100), ("pods", 10)]),
    );
    n1.pods = vec![
        pod("e1").label("test", "test").tap_node("n1"),
        pod("e2").label("test", "test").tap_node("n1"),
        pod("unlabelled").tap_node("n1"),
    ];
    let mut n2 = node(
        "n2",
        &[(ZONE, "test-zone-2")],
        list(&[("cpu", 100), ("pods", 10)]),
    );
    n2.pods = vec![pod("e3").label("test", "test").tap_node("n2")];
    let mut failed = pod("failed").label("test", "test").tap_node("n2");
    failed.phase = "Failed".into();
    n2.pods.push(failed);
    s.snapshot.nodes = vec![n1, n2];
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
            .get_mut(outcome.label(&p.name, ZONE).unwrap())
            .unwrap() += 1;
    }
    let mut skew: Vec<i32> = totals.into_values().collect();
    skew.sort_unstable();
    assert_eq!(skew, vec![1, 2, 2]);
}

#[test]
fn min_domains_forces_spreading_over_missing_domains() {
    let mut p = topology_pool();
    p.requirements
        .push(in_(ZONE, &["test-zone-1", "test-zone-2"]));
    let mut pods = spread_pods(3, ZONE, 1);
    for p in &mut pods {
        p.topology_spread_constraints[0].min_domains = Some(3);
    }
    let outcome = Scenario::new(vec![p]).solve(pods.clone());
    assert_eq!(outcome.skew(ZONE, LABELS, &pods), vec![1, 1]);
}

#[test]
fn match_label_keys_split_groups() {
    let mut pods = Vec::new();
    for (i, value) in ["a", "a", "b", "b"].iter().enumerate() {
        let mut p = pod(&format!("p{i}"))
            .label("test", "test")
            .label("test-label", value)
            .spread(HOSTNAME, 1, &[("test", "test")]);
        p.topology_spread_constraints[0].match_label_keys = vec!["test-label".into()];
        pods.push(p);
    }
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert_eq!(outcome.claims().len(), 2);
}

#[test]
fn self_affinity_keeps_pods_together() {
    let pods: Vec<_> = (0..3)
        .map(|i| {
            let mut p = pod(&format!("p{i}")).label("security", "s2");
            p.required_pod_affinity
                .push(affinity_term(ZONE, &[("security", "s2")]));
            p
        })
        .collect();
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert_eq!(outcome.claims().len(), 1);
}

#[test]
fn affinity_to_a_pod_that_does_not_exist_never_schedules() {
    let pods: Vec<_> = (0..3)
        .map(|i| {
            let mut p = pod(&format!("p{i}"));
            p.required_pod_affinity
                .push(affinity_term(ZONE, &[("security", "s2")]));
            p
        })
        .collect();
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert!(outcome.claims().is_empty());
    assert!(outcome.reason("p0").unwrap().contains("pod affinity"));
}

#[test]
fn affinity_follows_the_target_to_its_node() {
    let target = pod("target").label("security", "s2").cpu(1000);
    let mut follower = pod("follower");
    follower
        .required_pod_affinity
        .push(affinity_term(HOSTNAME, &[("security", "s2")]));
    let outcome = Scenario::new(vec![topology_pool()]).solve(vec![target, follower]);
    assert_eq!(outcome.claims().len(), 1);
    assert!(outcome.scheduled("follower"));
}

#[test]
fn hostname_anti_affinity_needs_a_node_each() {
    let pods: Vec<_> = (0..5)
        .map(|i| {
            let mut p = pod(&format!("p{i}")).label("app", "nginx");
            p.required_pod_anti_affinity
                .push(affinity_term(HOSTNAME, &[("app", "nginx")]));
            p
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
    let mut anti = pod("anti");
    anti.required_pod_anti_affinity
        .push(affinity_term(ZONE, &[("security", "s2")]));
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
    let mut anti = pod("anti").cpu(2000);
    anti.required_pod_anti_affinity
        .push(affinity_term(ZONE, &[("security", "s2")]));
    let target = pod("target").label("security", "s2");
    let outcome = Scenario::new(vec![topology_pool()]).solve(vec![anti, target]);
    assert!(outcome.scheduled("anti"));
    assert!(!outcome.scheduled("target"));
}

#[test]
fn existing_pods_with_anti_affinity_keep_others_out_of_their_zone() {
    let mut s = Scenario::new(vec![topology_pool()]);
    let mut nodes = Vec::new();
    for zone in ["test-zone-1", "test-zone-2", "test-zone-3"] {
        let mut n = node(zone, &[(ZONE, zone)], list(&[("cpu", 100), ("pods", 10)]));
        let mut p = pod(&format!("anti-{zone}")).tap_node(zone);
        p.required_pod_anti_affinity
            .push(affinity_term(ZONE, &[("security", "s2")]));
        n.pods = vec![p];
        nodes.push(n);
    }
    s.snapshot.nodes = nodes;
    let outcome = s.solve(vec![pod("target").label("security", "s2")]);
    assert!(!outcome.scheduled("target"));
}

#[test]
fn preferred_anti_affinity_is_relaxed() {
    let pods: Vec<_> = (0..5)
        .map(|i| {
            let mut p = pod(&format!("p{i}")).label("app", "x");
            p.preferred_pod_anti_affinity
                .push(sched::WeightedPodAffinityTerm {
                    weight: 10,
                    term: Some(affinity_term(ZONE, &[("app", "x")])),
                });
            p
        })
        .collect();
    let outcome = Scenario::new(vec![topology_pool()]).solve(pods);
    assert_eq!(outcome.response.unschedulable.len(), 0);
}

#[test]
fn ignoring_preferences_packs_schedule_anyway_pods_together() {
    let mut pods = spread_pods(5, HOSTNAME, 1);
    for p in &mut pods {
        p.topology_spread_constraints[0].when_unsatisfiable =
            sched::topology_spread_constraint::WhenUnsatisfiable::ScheduleAnyway as i32;
    }
    let mut s = Scenario::new(vec![topology_pool()]);
    assert_eq!(s.solve(pods.clone()).claims().len(), 5);
    s.options.preference_policy = sched::scheduling_options::PreferencePolicy::Ignore as i32;
    assert_eq!(s.solve(pods).claims().len(), 1);
}

#[test]
fn volume_zone_requirements_pin_the_pod() {
    let mut p = pod("a");
    p.volumes.push(sched::Volume {
        name: "data".into(),
        driver: "ebs.csi.aws.com".into(),
        claim_id: "default/data".into(),
        topology: vec![sched::NodeSelectorTerm {
            match_expressions: vec![in_(ZONE, &["test-zone-3"])],
            match_fields: vec![],
        }],
    });
    let outcome = Scenario::new(vec![topology_pool()]).solve(vec![p]);
    assert_eq!(outcome.label("a", ZONE), Some("test-zone-3"));
}

trait Bound {
    fn tap_node(self, node: &str) -> Self;
}

impl Bound for sched::Pod {
    fn tap_node(mut self, node: &str) -> Self {
        self.node_name = node.into();
        self.phase = "Running".into();
        self
    }
}
