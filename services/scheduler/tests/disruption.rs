//! Karpenter's disruption scenarios (its disruption suites), ported: the
//! same cluster, the same command.

mod support;

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_scheduler::plan_disruption_request;
use support::*;

const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// One offering per zone and capacity type; spot at 70% of on-demand.
fn it(name: &str, cpu: i64, memory: i64, on_demand: f64) -> types::InstanceType {
    let mut offerings = Vec::new();
    for zone in ZONES {
        for (capacity_type, price) in [("on-demand", on_demand), ("spot", on_demand * 0.7)] {
            offerings.push(types::Offering {
                zone: zone.into(),
                capacity_type: capacity_type.into(),
                price,
                available: true,
                requirements: vec![],
            });
        }
    }
    types::InstanceType {
        name: name.into(),
        requirements: vec![in_(ARCH, &["amd64"]), in_("kubernetes.io/os", &["linux"])],
        offerings,
        capacity: Some(list(&[("cpu", cpu), ("memory", memory), ("pods", 100)])),
        overhead: None,
    }
}

fn catalog() -> Vec<types::InstanceType> {
    vec![
        it("small", 2000, 4 * GI, 0.1),
        it("medium", 4000, 8 * GI, 0.2),
        it("large", 8000, 16 * GI, 0.4),
        it("xlarge", 32_000, 64 * GI, 1.6),
    ]
}

fn budget(nodes: &str) -> sched::Budget {
    sched::Budget {
        nodes: nodes.into(),
        ..Default::default()
    }
}

fn np(name: &str) -> sched::NodePool {
    let mut p = pool(name);
    p.disruption = Some(sched::Disruption {
        consolidation_policy: sched::disruption::ConsolidationPolicy::WhenEmptyOrUnderutilized
            as i32,
        consolidate_after: Some(prost_types::Duration {
            seconds: 0,
            nanos: 0,
        }),
        budgets: vec![budget("100%")],
    });
    p
}

const NOW: i64 = 1_700_000_000;

fn managed(name: &str, instance_type: &str, capacity_type: &str, zone: &str) -> sched::StateNode {
    let it = catalog()
        .into_iter()
        .find(|i| i.name == instance_type)
        .expect("known type");
    let price = it
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == capacity_type)
        .map_or(0.0, |o| o.price);
    sched::StateNode {
        name: name.into(),
        node_claim_name: format!("{name}-claim"),
        node_pool: "np".into(),
        labels: [
            ("karpenter.sh/nodepool", "np"),
            (INSTANCE_TYPE, instance_type),
            (ZONE, zone),
            (CAPACITY_TYPE, capacity_type),
            (ARCH, "amd64"),
            ("kubernetes.io/os", "linux"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
        allocatable: it.capacity.clone(),
        capacity: it.capacity.clone(),
        has_node: true,
        registered: true,
        initialized: true,
        price,
        creation_timestamp: Some(prost_types::Timestamp {
            seconds: NOW - 86_400,
            nanos: 0,
        }),
        capacity_type: capacity_type.into(),
        zone: zone.into(),
        instance_type: instance_type.into(),
        disruption: Some(sched::NodeClaimDisruptionState {
            consolidatable: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running(name: &str, node: &str, cpu: i64) -> sched::Pod {
    let mut p = pod(name).cpu(cpu);
    p.node_name = node.into();
    p.phase = "Running".into();
    p.owner_kind = "ReplicaSet".into();
    p
}

fn on(mut node: sched::StateNode, pods: Vec<sched::Pod>) -> sched::StateNode {
    node.pods = pods;
    node
}

struct Cluster {
    snapshot: sched::ClusterSnapshot,
    options: sched::SchedulingOptions,
}

impl Cluster {
    fn new(nodes: Vec<sched::StateNode>) -> Cluster {
        Cluster {
            snapshot: sched::ClusterSnapshot {
                nodes,
                node_pools: vec![np("np")],
                instance_type_catalogs: vec![sched::InstanceTypeCatalog {
                    name: "default".into(),
                    instance_types: catalog(),
                }],
                now: Some(prost_types::Timestamp {
                    seconds: NOW,
                    nanos: 0,
                }),
                ..Default::default()
            },
            options: sched::SchedulingOptions::default(),
        }
    }

    fn pool(&mut self) -> &mut sched::NodePool {
        &mut self.snapshot.node_pools[0]
    }

    fn plan(&self) -> sched::PlanDisruptionResponse {
        plan_disruption_request(&sched::PlanDisruptionRequest {
            cluster: Some(self.snapshot.clone()),
            options: Some(self.options.clone()),
        })
        .expect("valid request")
    }
}

fn reason(response: &sched::PlanDisruptionResponse, command: usize) -> sched::DisruptionReason {
    sched::DisruptionReason::try_from(response.commands[command].reason).unwrap()
}

fn disrupted(response: &sched::PlanDisruptionResponse) -> Vec<String> {
    let mut nodes: Vec<String> = response
        .commands
        .iter()
        .flat_map(|c| c.candidates.clone())
        .collect();
    nodes.sort();
    nodes
}

fn blocked<'a>(response: &'a sched::PlanDisruptionResponse, node: &str) -> Option<&'a str> {
    response
        .blocked
        .iter()
        .find(|b| b.node == node)
        .map(|b| b.reason.as_str())
}

// --- emptiness ----------------------------------------------------------------

#[test]
fn empty_nodes_are_deleted_together() {
    let cluster = Cluster::new(vec![
        managed("a", "medium", "on-demand", "test-zone-1"),
        managed("b", "medium", "on-demand", "test-zone-2"),
    ]);
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    assert_eq!(reason(&response, 0), sched::DisruptionReason::Empty);
    assert_eq!(response.commands[0].candidates, vec!["a", "b"]);
    assert!(response.commands[0].replacements.is_empty());
    assert!((response.commands[0].savings_per_hour - 0.4).abs() < 1e-9);
    let cost = response.cost.unwrap();
    assert!((cost.before - 0.4).abs() < 1e-9 && cost.after.abs() < 1e-9);
}

#[test]
fn consolidate_after_never_disables_emptiness() {
    let mut cluster = Cluster::new(vec![managed("a", "medium", "on-demand", "test-zone-1")]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = None;
    assert!(cluster.plan().commands.is_empty());
}

#[test]
fn consolidate_after_counts_from_the_last_pod_event() {
    let mut node = managed("a", "medium", "on-demand", "test-zone-1");
    let state = node.disruption.as_mut().unwrap();
    state.consolidatable = false;
    state.last_pod_event_time = Some(prost_types::Timestamp {
        seconds: NOW - 300,
        nanos: 0,
    });
    let mut cluster = Cluster::new(vec![node]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = Some(prost_types::Duration {
        seconds: 600,
        nanos: 0,
    });
    assert!(cluster.plan().commands.is_empty());
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = Some(prost_types::Duration {
        seconds: 300,
        nanos: 0,
    });
    assert_eq!(disrupted(&cluster.plan()), vec!["a"]);
}

#[test]
fn node_do_not_disrupt_blocks_with_a_reason() {
    let mut node = managed("a", "medium", "on-demand", "test-zone-1");
    node.disruption.as_mut().unwrap().do_not_disrupt = true;
    let response = Cluster::new(vec![node]).plan();
    assert!(response.commands.is_empty());
    assert_eq!(
        blocked(&response, "a"),
        Some("disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation")
    );
}

#[test]
fn budgets_limit_empty_deletions_rounding_up() {
    let nodes: Vec<_> = (0..10)
        .map(|i| managed(&format!("n{i}"), "medium", "on-demand", ZONES[i % 3]))
        .collect();
    let mut cluster = Cluster::new(nodes);
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![budget("30%")];
    assert_eq!(disrupted(&cluster.plan()).len(), 3);
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![budget("0%")];
    assert!(cluster.plan().commands.is_empty());
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![budget("25%")];
    assert_eq!(
        disrupted(&cluster.plan()).len(),
        3,
        "25% of 10 rounds up to 3"
    );
}

#[test]
fn nodes_already_disrupting_count_against_the_budget() {
    let mut nodes: Vec<_> = (0..10)
        .map(|i| managed(&format!("n{i}"), "medium", "on-demand", ZONES[i % 3]))
        .collect();
    nodes[0].marked_for_deletion = true;
    nodes[1].disruption.as_mut().unwrap().node_not_ready = true;
    let mut cluster = Cluster::new(nodes);
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![budget("3")];
    // Two of three are already unavailable. The not-ready node is itself a
    // candidate (it sorts first) and deleting it costs no more budget, so
    // two nodes go and three are unavailable at once: the budget.
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["n1", "n2"]);
}

#[test]
fn budget_windows_and_reasons_apply() {
    let nodes: Vec<_> = (0..4)
        .map(|i| managed(&format!("n{i}"), "medium", "on-demand", ZONES[i % 3]))
        .collect();
    let mut cluster = Cluster::new(nodes);
    // A zero budget for Empty during a window that is open right now
    // (every minute, for an hour) stops emptiness; one for Drifted does not.
    let window = |reasons: Vec<sched::DisruptionReason>| sched::Budget {
        nodes: "0".into(),
        schedule: "* * * * *".into(),
        duration: Some(prost_types::Duration {
            seconds: 3600,
            nanos: 0,
        }),
        reasons: reasons.into_iter().map(|r| r as i32).collect(),
    };
    cluster.pool().disruption.as_mut().unwrap().budgets =
        vec![budget("100%"), window(vec![sched::DisruptionReason::Empty])];
    assert!(cluster.plan().commands.is_empty());
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![
        budget("100%"),
        window(vec![sched::DisruptionReason::Drifted]),
    ];
    assert_eq!(disrupted(&cluster.plan()).len(), 4);
    // A window that opened yesterday for ten minutes is closed.
    let mut closed = window(vec![]);
    closed.schedule = "@yearly".into();
    closed.duration = Some(prost_types::Duration {
        seconds: 600,
        nanos: 0,
    });
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![closed];
    assert_eq!(disrupted(&cluster.plan()).len(), 4);
}

#[test]
fn daemon_pods_do_not_make_a_node_busy_but_a_terminating_statefulset_pod_does() {
    let mut daemon = running("ds-a", "a", 100);
    daemon.owner_kind = "DaemonSet".into();
    let mut stateful = running("db-0", "b", 100);
    stateful.owner_kind = "StatefulSet".into();
    stateful.terminating = true;
    let mut cluster = Cluster::new(vec![
        on(
            managed("a", "medium", "on-demand", "test-zone-1"),
            vec![daemon],
        ),
        on(
            managed("b", "medium", "on-demand", "test-zone-1"),
            vec![stateful],
        ),
    ]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidation_policy = sched::disruption::ConsolidationPolicy::WhenEmpty as i32;
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    assert_eq!(response.commands[0].candidates, vec!["a"]);
}

// --- consolidation: delete --------------------------------------------------------

#[test]
fn the_cheapest_to_disrupt_node_is_deleted_when_its_pods_fit_elsewhere() {
    // Spot nodes of the cheapest type (as upstream's leastExpensive fixture):
    // no replacement is cheaper, so only deleting helps.
    let cluster = Cluster::new(vec![
        on(
            managed("node0", "small", "spot", "test-zone-1"),
            vec![running("p0", "node0", 500), running("p1", "node0", 500)],
        ),
        on(
            managed("node1", "small", "spot", "test-zone-1"),
            vec![running("p2", "node1", 500)],
        ),
    ]);
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    assert_eq!(reason(&response, 0), sched::DisruptionReason::Underutilized);
    assert_eq!(
        sched::DisruptionMethod::try_from(response.commands[0].method).unwrap(),
        sched::DisruptionMethod::SingleNodeConsolidation
    );
    assert_eq!(response.commands[0].candidates, vec!["node1"]);
    assert!(response.commands[0].replacements.is_empty());
    assert_eq!(response.commands[0].placements[0].node, "node0");
}

#[test]
fn a_pdb_that_allows_no_disruption_protects_its_node() {
    let mut cluster = Cluster::new(vec![
        on(
            managed("node0", "medium", "on-demand", "test-zone-1"),
            vec![running("p0", "node0", 500), running("p1", "node0", 500)],
        ),
        on(
            managed("node1", "medium", "on-demand", "test-zone-1"),
            vec![running("p2", "node1", 500).label("app", "db")],
        ),
    ]);
    cluster.snapshot.pod_disruption_budgets = vec![sched::PodDisruptionBudget {
        namespace: "default".into(),
        name: "db".into(),
        selector: Some(selector(&[("app", "db")])),
        max_unavailable: "0".into(),
        disruptions_allowed: 0,
        ..Default::default()
    }];
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["node0"]);
    assert_eq!(
        blocked(&response, "node1"),
        Some("pdb \"default/db\" prevents pod evictions")
    );
}

// Upstream consolidation_test.go: "can replace nodes, considers PDB
// policy": not-ready pods under a PDB with AlwaysAllow may be evicted.
#[test]
fn an_always_allow_pdb_lets_not_ready_pods_go() {
    let plan = |not_ready: bool| {
        let pods = (0..3)
            .map(|i| {
                let mut pod = running(&format!("p{i}"), "big", 500).label("app", "db");
                pod.not_ready = not_ready;
                pod
            })
            .collect();
        let mut cluster = Cluster::new(vec![on(
            managed("big", "xlarge", "on-demand", "test-zone-1"),
            pods,
        )]);
        cluster.snapshot.pod_disruption_budgets = vec![sched::PodDisruptionBudget {
            namespace: "default".into(),
            name: "db".into(),
            selector: Some(selector(&[("app", "db")])),
            max_unavailable: "0".into(),
            disruptions_allowed: 0,
            unhealthy_pod_eviction_policy: "AlwaysAllow".into(),
            ..Default::default()
        }];
        cluster.plan()
    };
    let response = plan(true);
    assert_eq!(disrupted(&response), vec!["big"], "{response:?}");
    assert_eq!(response.commands[0].replacements.len(), 1);
    let response = plan(false);
    assert!(response.commands.is_empty());
    assert_eq!(
        blocked(&response, "big"),
        Some("pdb \"default/db\" prevents pod evictions")
    );
}

// The spot entry of upstream's "can replace nodes, considers PDB policy":
// a spot node under the same PDB, spot-to-spot consolidation on.
#[test]
fn an_always_allow_pdb_lets_not_ready_pods_go_from_a_spot_node() {
    let plan = |not_ready: bool| {
        let pods = (0..3)
            .map(|i| {
                let mut pod = running(&format!("p{i}"), "big", 500).label("app", "db");
                pod.not_ready = not_ready;
                pod
            })
            .collect();
        let mut cluster = Cluster::new(vec![on(
            managed("big", "xlarge", "spot", "test-zone-1"),
            pods,
        )]);
        // Spot-to-spot replaces only with 15 cheaper options to choose from.
        cluster.snapshot.instance_type_catalogs[0]
            .instance_types
            .extend((0..16).map(|i| {
                it(
                    &format!("spare-{i}"),
                    4000,
                    8 * GI,
                    0.2 + 0.01 * f64::from(i),
                )
            }));
        cluster
            .options
            .feature_gates
            .insert("SpotToSpotConsolidation".into(), true);
        cluster.snapshot.pod_disruption_budgets = vec![sched::PodDisruptionBudget {
            namespace: "default".into(),
            name: "db".into(),
            selector: Some(selector(&[("app", "db")])),
            max_unavailable: "0".into(),
            disruptions_allowed: 0,
            unhealthy_pod_eviction_policy: "AlwaysAllow".into(),
            ..Default::default()
        }];
        cluster.plan()
    };
    let response = plan(true);
    assert_eq!(disrupted(&response), vec!["big"], "{response:?}");
    let response = plan(false);
    assert!(response.commands.is_empty());
    assert_eq!(
        blocked(&response, "big"),
        Some("pdb \"default/db\" prevents pod evictions")
    );
}

#[test]
fn a_do_not_disrupt_pod_protects_its_node() {
    let mut protected = running("p2", "node1", 500);
    protected.do_not_disrupt = true;
    let cluster = Cluster::new(vec![
        on(
            managed("node0", "medium", "on-demand", "test-zone-1"),
            vec![running("p0", "node0", 500), running("p1", "node0", 500)],
        ),
        on(
            managed("node1", "medium", "on-demand", "test-zone-1"),
            vec![protected],
        ),
    ]);
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["node0"]);
    assert_eq!(
        blocked(&response, "node1"),
        Some("pod \"default/p2\" has \"karpenter.sh/do-not-disrupt\" annotation")
    );
}

#[test]
fn pods_pinned_by_selectors_keep_their_nodes() {
    let pinned =
        |name: &str, node: &str, value: &str| running(name, node, 500).selector("foo", value);
    let mut n0 = managed("node0", "medium", "on-demand", "test-zone-1");
    n0.labels.insert("foo".into(), "1".into());
    let mut n1 = managed("node1", "medium", "on-demand", "test-zone-1");
    n1.labels.insert("foo".into(), "2".into());
    let cluster = Cluster::new(vec![
        on(
            n0,
            vec![pinned("a", "node0", "1"), pinned("b", "node0", "1")],
        ),
        on(n1, vec![pinned("c", "node1", "2")]),
    ]);
    assert!(cluster.plan().commands.is_empty());
}

#[test]
fn hostname_anti_affinity_keeps_one_pod_per_node() {
    let anti = |name: &str, node: &str| {
        let mut p = running(name, node, 100).label("app", "x");
        p.required_pod_anti_affinity
            .push(affinity_term(HOSTNAME, &[("app", "x")]));
        p
    };
    // Spot nodes of the cheapest type: nothing is cheaper to move to.
    let cluster = Cluster::new(vec![
        on(
            managed("a", "small", "spot", "test-zone-1"),
            vec![anti("p0", "a")],
        ),
        on(
            managed("b", "small", "spot", "test-zone-2"),
            vec![anti("p1", "b")],
        ),
        on(
            managed("c", "small", "spot", "test-zone-3"),
            vec![anti("p2", "c")],
        ),
    ]);
    assert!(cluster.plan().commands.is_empty());
}

#[test]
fn when_empty_policy_leaves_underutilized_nodes() {
    let mut cluster = Cluster::new(vec![
        on(
            managed("node0", "medium", "on-demand", "test-zone-1"),
            vec![running("p0", "node0", 500)],
        ),
        on(
            managed("node1", "medium", "on-demand", "test-zone-1"),
            vec![running("p1", "node1", 500)],
        ),
    ]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidation_policy = sched::disruption::ConsolidationPolicy::WhenEmpty as i32;
    assert!(cluster.plan().commands.is_empty());
}

#[test]
fn a_pending_pod_is_never_left_worse_off() {
    // The small node's pod could move to the big one, but then a pending pod
    // that fits only there would need a new node: Karpenter still deletes the
    // small node (pending pods never block a decision), and the pending pod
    // stays pending exactly as before.
    let mut cluster = Cluster::new(vec![
        on(
            managed("big", "large", "on-demand", "test-zone-1"),
            vec![running("p0", "big", 1000)],
        ),
        on(
            managed("small", "small", "on-demand", "test-zone-1"),
            vec![running("p1", "small", 1000)],
        ),
    ]);
    cluster.snapshot.pending_pods = vec![pod("stuck").selector("missing", "label")];
    let response = cluster.plan();
    assert!(!response.commands.is_empty());
    assert!(response.commands.iter().all(|c| c.replacements.len() <= 1));
}

// --- consolidation: replace ------------------------------------------------------------

#[test]
fn an_expensive_on_demand_node_is_replaced_by_a_cheaper_spot_node() {
    let mut cluster = Cluster::new(vec![on(
        managed("big", "xlarge", "on-demand", "test-zone-1"),
        vec![running("p0", "big", 1000)],
    )]);
    cluster.pool().requirements = vec![in_(CAPACITY_TYPE, &["spot", "on-demand"])];
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    let command = &response.commands[0];
    assert_eq!(command.candidates, vec!["big"]);
    assert_eq!(command.replacements.len(), 1);
    let replacement = &command.replacements[0];
    // Every option's worst launch price (spot) is below the node's 1.6/h.
    assert_eq!(
        replacement.cheapest.as_ref().unwrap().instance_type,
        "small"
    );
    assert_eq!(replacement.cheapest.as_ref().unwrap().capacity_type, "spot");
    assert!(command.savings_per_hour > 0.0);
    let capacity = replacement
        .requirements
        .iter()
        .find(|r| r.key == CAPACITY_TYPE)
        .unwrap();
    assert_eq!(capacity.values, vec!["spot"]);
}

#[test]
fn an_on_demand_node_is_replaced_only_by_a_strictly_cheaper_on_demand_node() {
    let mut cluster = Cluster::new(vec![on(
        managed("mid", "medium", "on-demand", "test-zone-1"),
        vec![running("p0", "mid", 3500)],
    )]);
    cluster.pool().requirements = vec![in_(CAPACITY_TYPE, &["on-demand"])];
    // 3.5 CPU needs a medium: nothing cheaper holds it.
    assert!(cluster.plan().commands.is_empty());
}

#[test]
fn spot_to_spot_needs_the_feature_gate_and_fifteen_cheaper_options() {
    let mut cluster = Cluster::new(vec![on(
        managed("big", "xlarge", "spot", "test-zone-1"),
        vec![running("p0", "big", 1000)],
    )]);
    let response = cluster.plan();
    assert!(response.commands.is_empty());
    cluster
        .options
        .feature_gates
        .insert("SpotToSpotConsolidation".into(), true);
    // Only three cheaper types exist.
    assert!(cluster.plan().commands.is_empty());
}

// --- multi-node ------------------------------------------------------------------------------

#[test]
fn three_under_used_nodes_become_one() {
    let cluster = Cluster::new(vec![
        on(
            managed("a", "xlarge", "on-demand", "test-zone-1"),
            vec![running("p0", "a", 1000)],
        ),
        on(
            managed("b", "xlarge", "on-demand", "test-zone-1"),
            vec![running("p1", "b", 1000)],
        ),
        on(
            managed("c", "xlarge", "on-demand", "test-zone-1"),
            vec![running("p2", "c", 1000)],
        ),
    ]);
    let response = cluster.plan();
    let first = &response.commands[0];
    assert_eq!(
        sched::DisruptionMethod::try_from(first.method).unwrap(),
        sched::DisruptionMethod::MultiNodeConsolidation
    );
    assert_eq!(first.candidates.len(), 3);
    assert!(first.replacements.len() <= 1);
    let cost = response.cost.unwrap();
    assert!(cost.after < cost.before);
    assert!(cost.lower_bound <= cost.after + 1e-9, "{cost:?}");
}

fn on_demand_only(cluster: &mut Cluster) {
    cluster
        .pool()
        .requirements
        .push(in_(CAPACITY_TYPE, &["on-demand"]));
}

// Upstream consolidation_test.go: "won't merge 2 nodes into 1 of the same
// type"; the emptier node is deleted instead ("can delete nodes").
#[test]
fn two_nodes_are_not_merged_into_one_of_their_own_type() {
    let mut cluster = Cluster::new(vec![
        on(
            managed("one-pod", "small", "on-demand", "test-zone-1"),
            vec![running("p0", "one-pod", 500)],
        ),
        on(
            managed("two-pods", "small", "on-demand", "test-zone-1"),
            vec![
                running("p1", "two-pods", 500),
                running("p2", "two-pods", 500),
            ],
        ),
    ]);
    on_demand_only(&mut cluster);
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["one-pod"], "{response:?}");
    assert!(response.commands[0].replacements.is_empty());
    assert_eq!(response.commands[0].placements[0].node, "two-pods");
}

// Upstream's spot entry of the same table: spot nodes with spot-to-spot
// consolidation on are not merged into one of their own type either.
#[test]
fn two_spot_nodes_are_not_merged_into_one_of_their_own_type() {
    let mut cluster = Cluster::new(vec![
        on(
            managed("one-pod", "small", "spot", "test-zone-1"),
            vec![running("p0", "one-pod", 500)],
        ),
        on(
            managed("two-pods", "small", "spot", "test-zone-1"),
            vec![
                running("p1", "two-pods", 500),
                running("p2", "two-pods", 500),
            ],
        ),
    ]);
    cluster
        .options
        .feature_gates
        .insert("SpotToSpotConsolidation".into(), true);
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["one-pod"], "{response:?}");
    assert!(response.commands[0].replacements.is_empty());
    assert_eq!(response.commands[0].placements[0].node, "two-pods");
}

// The same rule when only one candidate has an option's type: a small
// among the candidates caps the replacement below a small's price, so the
// three are not replaced by a small; the two larges go, their pods fit on it.
#[test]
fn a_candidate_of_the_replacement_type_caps_its_price() {
    let mut cluster = Cluster::new(vec![
        on(
            managed("a-large", "large", "on-demand", "test-zone-1"),
            vec![running("p0", "a-large", 600)],
        ),
        on(
            managed("b-large", "large", "on-demand", "test-zone-1"),
            vec![running("p1", "b-large", 600)],
        ),
        on(
            managed("c-small", "small", "on-demand", "test-zone-1"),
            vec![running("p2", "c-small", 600)],
        ),
    ]);
    on_demand_only(&mut cluster);
    let response = cluster.plan();
    assert_eq!(
        disrupted(&response),
        vec!["a-large", "b-large"],
        "{response:?}"
    );
    assert!(response.commands.iter().all(|c| c.replacements.is_empty()));
}

/// Two small on-demand nodes initialized at NOW, pods of 500m: two on
/// `node0`, one on `node1`; pool `consolidateAfter: 60s`.
fn just_initialized() -> Cluster {
    let fresh = |node: sched::StateNode| {
        let mut node = node;
        node.disruption.as_mut().unwrap().initialized_time = Some(prost_types::Timestamp {
            seconds: NOW,
            nanos: 0,
        });
        node
    };
    let mut cluster = Cluster::new(vec![
        fresh(on(
            managed("node0", "small", "on-demand", "test-zone-1"),
            vec![running("p0", "node0", 500), running("p1", "node0", 500)],
        )),
        fresh(on(
            managed("node1", "small", "on-demand", "test-zone-1"),
            vec![running("p2", "node1", 500)],
        )),
    ]);
    on_demand_only(&mut cluster);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = Some(prost_types::Duration {
        seconds: 60,
        nanos: 0,
    });
    cluster
}

// Upstream consolidation_test.go: "should not consolidate pods onto a
// destination node that is under its consolidateAfter window".
#[test]
fn pods_do_not_move_onto_a_node_inside_its_consolidate_after_window() {
    let mut cluster = just_initialized();
    let response = cluster.plan();
    assert!(response.commands.is_empty(), "{response:?}");
    cluster.snapshot.now = Some(prost_types::Timestamp {
        seconds: NOW + 120,
        nanos: 0,
    });
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["node1"], "{response:?}");
    assert_eq!(response.commands[0].placements[0].node, "node0");
}

// The window counts from the destination's last pod event when it has
// one: a pod that landed on node0 a minute after it initialized keeps it
// closed until consolidateAfter past that event.
#[test]
fn a_destinations_window_restarts_at_its_last_pod_event() {
    let mut cluster = just_initialized();
    cluster.snapshot.nodes[0]
        .disruption
        .as_mut()
        .unwrap()
        .last_pod_event_time = Some(prost_types::Timestamp {
        seconds: NOW + 60,
        nanos: 0,
    });
    let at = |seconds: i64| {
        Some(prost_types::Timestamp {
            seconds: NOW + seconds,
            nanos: 0,
        })
    };
    cluster.snapshot.now = at(90);
    let response = cluster.plan();
    assert!(
        !disrupted(&response).contains(&"node1".to_string()),
        "node0's pod event 30 s ago keeps it closed: {response:?}"
    );
    cluster.snapshot.now = at(150);
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["node1"], "{response:?}");
    assert_eq!(response.commands[0].placements[0].node, "node0");
}

// Upstream's "should not schedule if limits would be exceeded (node)", as
// disruption sees it: a pool at its node limit can still replace a node
// (the candidate's own node is given back), but cannot add one.
#[test]
fn a_pool_at_its_node_limit_still_replaces_a_node() {
    let mut cluster = Cluster::new(vec![on(
        managed("big", "xlarge", "on-demand", "test-zone-1"),
        vec![running("p0", "big", 500)],
    )]);
    on_demand_only(&mut cluster);
    cluster.pool().limits = Some(list(&[("nodes", 1)]));
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["big"], "{response:?}");
    assert_eq!(response.commands[0].replacements.len(), 1, "{response:?}");
}

// ... and a destination whose pool never consolidates has no window.
#[test]
fn a_destination_in_a_never_pool_has_no_window() {
    let mut cluster = just_initialized();
    let mut never = cluster.pool().clone();
    never.name = "never".into();
    never.disruption.as_mut().unwrap().consolidate_after = None;
    cluster.snapshot.node_pools.push(never);
    let node0 = &mut cluster.snapshot.nodes[0];
    node0.node_pool = "never".into();
    node0
        .labels
        .insert("karpenter.sh/nodepool".into(), "never".into());
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["node1"], "{response:?}");
}

// --- drift ------------------------------------------------------------------------------------

#[test]
fn a_drifted_node_is_replaced_without_a_price_check() {
    let mut node = on(
        managed("old", "small", "on-demand", "test-zone-1"),
        vec![running("p0", "old", 500)],
    );
    node.disruption.as_mut().unwrap().drifted_reason = "NodePoolDrifted".into();
    let mut cluster = Cluster::new(vec![node]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = None;
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    assert_eq!(reason(&response, 0), sched::DisruptionReason::Drifted);
    assert_eq!(response.commands[0].replacements.len(), 1);
}

#[test]
fn a_drifted_node_whose_pods_fit_elsewhere_is_deleted() {
    let mut drifted = on(
        managed("old", "medium", "on-demand", "test-zone-1"),
        vec![running("p0", "old", 500)],
    );
    drifted.disruption.as_mut().unwrap().drifted_reason = "NodePoolDrifted".into();
    let mut cluster = Cluster::new(vec![
        drifted,
        managed("spare", "xlarge", "on-demand", "test-zone-1"),
    ]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = None;
    let response = cluster.plan();
    assert_eq!(response.commands[0].candidates, vec!["old"]);
    assert!(response.commands[0].replacements.is_empty());
}

// Upstream's pdb.Limits.CanEvictPods: a PDB blocks a candidate only when it
// allows no disruption now; one that allows some lets the node go, and the
// drain evicts its pods one by one as the budget frees (found by the fault
// suite: a Deployment of 10 under `maxUnavailable: 1` kept a drifted node
// forever, since the node held 5 of its pods).
#[test]
fn a_drifted_node_with_more_pods_of_a_pdb_than_it_allows_at_once_is_replaced() {
    let pods = (0..3)
        .map(|i| running(&format!("web{i}"), "old", 500).label("app", "web"))
        .collect();
    let mut node = on(managed("old", "xlarge", "on-demand", "test-zone-1"), pods);
    node.disruption.as_mut().unwrap().drifted_reason = "NodePoolDrifted".into();
    let mut cluster = Cluster::new(vec![node]);
    cluster.snapshot.pod_disruption_budgets = vec![sched::PodDisruptionBudget {
        namespace: "default".into(),
        name: "web".into(),
        selector: Some(selector(&[("app", "web")])),
        max_unavailable: "1".into(),
        disruptions_allowed: 1,
        ..Default::default()
    }];
    let response = cluster.plan();
    assert_eq!(disrupted(&response), vec!["old"], "{response:?}");
    assert_eq!(reason(&response, 0), sched::DisruptionReason::Drifted);
}

#[test]
fn the_oldest_drift_goes_first() {
    let drifted = |name: &str, at: i64| {
        let mut node = on(
            managed(name, "medium", "on-demand", "test-zone-1"),
            vec![running(&format!("{name}-p"), name, 3000)],
        );
        let state = node.disruption.as_mut().unwrap();
        state.drifted_reason = "AMIDrift".into();
        state.drifted_time = Some(prost_types::Timestamp {
            seconds: at,
            nanos: 0,
        });
        node
    };
    let mut cluster = Cluster::new(vec![drifted("n1", NOW - 60), drifted("n2", NOW - 3600)]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = None;
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![budget("1")];
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    assert_eq!(response.commands[0].candidates, vec!["n2"]);
}

// Upstream drift_test.go: "should delete drifted nodes when they are empty
// and consolidation is disabled".
#[test]
fn an_empty_drifted_node_is_deleted_even_when_consolidation_is_never() {
    let mut node = managed("old", "medium", "on-demand", "test-zone-1");
    let state = node.disruption.as_mut().unwrap();
    state.drifted_reason = "NodePoolDrifted".into();
    state.consolidatable = false;
    let mut cluster = Cluster::new(vec![node]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = None;
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    assert_eq!(reason(&response, 0), sched::DisruptionReason::Drifted);
    assert_eq!(response.commands[0].candidates, vec!["old"]);
    assert!(response.commands[0].replacements.is_empty());
}

// Upstream drift_test.go: "should drift empty nodes before non-empty nodes".
#[test]
fn empty_drifted_nodes_go_before_busy_ones() {
    let drifted = |mut node: sched::StateNode, at: i64| {
        let state = node.disruption.as_mut().unwrap();
        state.drifted_reason = "NodePoolDrifted".into();
        state.consolidatable = false;
        state.drifted_time = Some(prost_types::Timestamp {
            seconds: at,
            nanos: 0,
        });
        node
    };
    let busy = drifted(
        on(
            managed("busy", "medium", "on-demand", "test-zone-1"),
            vec![running("p0", "busy", 500)],
        ),
        NOW - 3600,
    );
    let idle = drifted(
        managed("idle", "medium", "on-demand", "test-zone-1"),
        NOW - 60,
    );
    let mut cluster = Cluster::new(vec![busy, idle]);
    cluster
        .pool()
        .disruption
        .as_mut()
        .unwrap()
        .consolidate_after = None;
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![budget("1")];
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1, "{response:?}");
    assert_eq!(reason(&response, 0), sched::DisruptionReason::Drifted);
    assert_eq!(response.commands[0].candidates, vec!["idle"]);
    assert!(response.commands[0].replacements.is_empty());
}

// --- expiration -----------------------------------------------------------------------------

#[test]
fn expiration_is_forceful() {
    let mut node = on(
        managed("old", "medium", "on-demand", "test-zone-1"),
        vec![running("p0", "old", 500)],
    );
    let state = node.disruption.as_mut().unwrap();
    state.expiration_time = Some(prost_types::Timestamp {
        seconds: NOW - 1,
        nanos: 0,
    });
    state.do_not_disrupt = true;
    let mut cluster = Cluster::new(vec![node]);
    cluster.pool().disruption.as_mut().unwrap().budgets = vec![budget("0")];
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1);
    assert_eq!(reason(&response, 0), sched::DisruptionReason::Expired);
    assert_eq!(
        response.commands[0].replacements.len(),
        1,
        "its pod needs a new home"
    );
}

#[test]
fn the_plan_is_deterministic() {
    let nodes: Vec<_> = (0..12)
        .map(|i| {
            let name = format!("n{i:02}");
            on(
                managed(
                    &name,
                    if i % 2 == 0 { "large" } else { "medium" },
                    "on-demand",
                    ZONES[i % 3],
                ),
                vec![running(&format!("p{i}"), &name, 300 + 100 * i as i64)],
            )
        })
        .collect();
    let cluster = Cluster::new(nodes);
    let a = prost::Message::encode_to_vec(&cluster.plan());
    let b = prost::Message::encode_to_vec(&cluster.plan());
    assert_eq!(a, b);
}

#[test]
fn a_set_that_is_no_prefix_is_still_found() {
    // In cost order the pinned full node comes first, so every prefix
    // Karpenter tries fails; alone, neither half-full node can go (the other
    // has no room, nothing cheaper holds it). Together their pods fit one
    // large node, cheaper than two mediums.
    let mut catalog_with_scale = catalog();
    for it in &mut catalog_with_scale {
        if it.name == "large" {
            for offering in &mut it.offerings {
                offering.price *= 0.75;
            }
        }
    }
    let mut pinned_node = managed("a-pinned", "medium", "on-demand", "test-zone-1");
    pinned_node.labels.insert("pin".into(), "yes".into());
    let pinned = running("pinned", "a-pinned", 3900).selector("pin", "yes");
    let half = |node: &str, prefix: &str| -> Vec<sched::Pod> {
        vec![running(&format!("{prefix}0"), node, 2600)]
    };
    let mut cluster = Cluster::new(vec![
        on(pinned_node, vec![pinned]),
        on(
            managed("b", "medium", "on-demand", "test-zone-1"),
            half("b", "b"),
        ),
        on(
            managed("c", "medium", "on-demand", "test-zone-1"),
            half("c", "c"),
        ),
    ]);
    cluster.snapshot.instance_type_catalogs[0].instance_types = catalog_with_scale;
    cluster.pool().requirements = vec![in_(CAPACITY_TYPE, &["on-demand"])];
    let response = cluster.plan();
    assert_eq!(response.commands.len(), 1, "{response:#?}");
    let command = &response.commands[0];
    assert_eq!(command.candidates, vec!["b", "c"], "{command:#?}");
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(
        command.replacements[0]
            .cheapest
            .as_ref()
            .unwrap()
            .instance_type,
        "large"
    );
}

#[test]
fn a_zonal_spread_keeps_its_zone_when_replaced() {
    let spread = |name: &str, node: &str| {
        running(name, node, 1000)
            .label("app", "web")
            .spread(ZONE, 1, &[("app", "web")])
    };
    let mut cluster = Cluster::new(vec![
        on(
            managed("z1", "small", "on-demand", "test-zone-1"),
            vec![spread("w1", "z1")],
        ),
        on(
            managed("z2", "xlarge", "on-demand", "test-zone-2"),
            vec![spread("w2", "z2")],
        ),
        on(
            managed("z3", "small", "on-demand", "test-zone-3"),
            vec![spread("w3", "z3")],
        ),
    ]);
    cluster.pool().requirements = vec![in_(CAPACITY_TYPE, &["on-demand"])];
    let response = cluster.plan();
    let command = response
        .commands
        .iter()
        .find(|c| c.candidates == vec!["z2".to_owned()])
        .expect("the expensive node is replaced");
    assert_eq!(
        command.replacements[0].labels.get(ZONE).map(String::as_str),
        Some("test-zone-2")
    );
}
