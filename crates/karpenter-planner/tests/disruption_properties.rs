//! Properties of every disruption plan, on random clusters built in the
//! planner's model: no command evicts a do-not-disrupt pod or a pod whose
//! PDB allows no disruption now, disrupts more nodes than the budget
//! allows, or leaves a pod that had a place without one; the plan never
//! costs more than the cluster did, nor less than its lower bound. (A PDB
//! that allows some disruptions does not limit a plan: the drain evicts its
//! pods as it lets them go, as Karpenter's does.)

mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use karpenter_planner::model::{InstanceType, StateNode};
use proptest::prelude::*;
use support::*;

const ZONES: [&str; 2] = ["z1", "z2"];
const TYPES: [(&str, i64, f64); 3] = [("s", 2000, 0.1), ("m", 4000, 0.2), ("l", 8000, 0.4)];

fn capacity(cpu: i64) -> [(&'static str, i64); 3] {
    [("cpu", cpu), ("memory", 64 * GI), ("pods", 50)]
}

fn catalog() -> Vec<InstanceType> {
    TYPES
        .iter()
        .map(|(name, cpu, price)| {
            let offerings = ZONES
                .iter()
                .flat_map(|zone| {
                    [("on-demand", *price), ("spot", price * 0.6)]
                        .map(|(ct, p)| offering(zone, ct, p))
                })
                .collect();
            instance_type(
                name,
                vec![in_(ARCH, &["amd64"])],
                offerings,
                &capacity(*cpu),
                &[],
            )
        })
        .collect()
}

#[derive(Debug, Clone)]
struct PodSpec {
    cpu: i64,
    app: u8,
    do_not_disrupt: bool,
}

#[derive(Debug, Clone)]
struct NodeSpec {
    type_index: usize,
    zone: usize,
    spot: bool,
    do_not_disrupt: bool,
    pods: Vec<PodSpec>,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (1i64..=15, 0u8..4, prop::bool::weighted(0.15)).prop_map(|(cpu, app, do_not_disrupt)| PodSpec {
        cpu: cpu * 100,
        app,
        do_not_disrupt,
    })
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        0usize..3,
        0usize..2,
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::collection::vec(pod_spec(), 0..4),
    )
        .prop_map(|(type_index, zone, spot, do_not_disrupt, mut pods)| {
            // A node never holds more than it has.
            let capacity = TYPES[type_index].1;
            while pods.iter().map(|p| p.cpu).sum::<i64>() > capacity {
                pods.pop();
            }
            NodeSpec {
                type_index,
                zone,
                spot,
                do_not_disrupt,
                pods,
            }
        })
}

fn state_node(i: usize, spec: &NodeSpec) -> StateNode {
    let (type_name, cpu, price) = TYPES[spec.type_index];
    let name = format!("node-{i:02}");
    let capacity_type = if spec.spot { "spot" } else { "on-demand" };
    let mut node = node(
        &name,
        &[
            (INSTANCE_TYPE, type_name),
            (ZONE, ZONES[spec.zone]),
            (CAPACITY_TYPE, capacity_type),
            (ARCH, "amd64"),
        ],
        resources(&capacity(cpu)),
    )
    .in_pool("np")
    .with_pods(
        spec.pods
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let mut pod = pod(&format!("{name}-p{j}"))
                    .cpu(p.cpu)
                    .label("app", &format!("a{}", p.app))
                    .on(&name);
                pod.owner_kind = "ReplicaSet".into();
                pod.do_not_disrupt = p.do_not_disrupt;
                pod
            })
            .collect(),
    );
    node.node_claim_name = name.clone();
    node.price = if spec.spot { price * 0.6 } else { price };
    node.disruption.consolidatable = true;
    node.disruption.do_not_disrupt = spec.do_not_disrupt;
    node
}

fn scenario(
    nodes: &[NodeSpec],
    pdb_allowed: &[i32],
    budget_nodes: u32,
    spot_to_spot: bool,
) -> Scenario {
    // WhenEmptyOrUnderutilized, consolidateAfter 0s, one budget.
    let mut pool = pool("np");
    pool.consolidate_after = Some(Duration::from_secs(0));
    pool.budgets = vec![budget(&budget_nodes.to_string())];
    let mut scenario = Scenario::with_instance_types(vec![pool], catalog());
    scenario.nodes = nodes
        .iter()
        .enumerate()
        .map(|(i, spec)| state_node(i, spec))
        .collect();
    scenario.pdbs = pdb_allowed
        .iter()
        .enumerate()
        .map(|(app, allowed)| {
            pdb(
                &format!("pdb-a{app}"),
                &[("app", &format!("a{app}"))],
                *allowed,
                false,
            )
        })
        .collect();
    scenario.now = 1_700_000_000;
    scenario.disruption.spot_to_spot = spot_to_spot;
    scenario
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn plans_keep_every_promise(
        nodes in prop::collection::vec(node_spec(), 1..10),
        pdb_allowed in prop::collection::vec(0i32..3, 4),
        budget in 0u32..6,
        spot_to_spot in any::<bool>(),
    ) {
        let scenario = scenario(&nodes, &pdb_allowed, budget, spot_to_spot);
        let plan = scenario.plan();
        let by_name: BTreeMap<&str, &StateNode> = scenario.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut disrupted = 0u32;
        for command in &plan.commands {
            let landed: HashSet<&str> = command
                .placements
                .values()
                .flat_map(|pods| pods.iter().map(|p| p.name.as_str()))
                .chain(command.replacements.iter().flat_map(|r| r.pods.iter().map(|p| p.name.as_str())))
                .collect();
            for candidate in &command.candidates {
                let node = by_name.get(candidate.as_str()).copied();
                // Replacements the plan itself created have no snapshot entry.
                let Some(node) = node else { continue };
                disrupted += 1;
                prop_assert!(!node.disruption.do_not_disrupt, "node {candidate} is do-not-disrupt");
                for pod in &node.pods {
                    let name = &pod.key.name;
                    prop_assert!(!pod.do_not_disrupt, "{name} is do-not-disrupt on {candidate}");
                    prop_assert!(landed.contains(name.as_str()), "{name} lost its place");
                    let app: usize = pod.labels["app"][1..].parse().unwrap();
                    prop_assert!(pdb_allowed[app] > 0, "{name} evicted under pdb a{app}, which allows none");
                }
            }
        }
        prop_assert!(disrupted <= budget, "{disrupted} nodes disrupted with a budget of {budget}");
        prop_assert!(plan.cost_after <= plan.cost_before + 1e-9);
        prop_assert!(
            plan.lower_bound <= plan.cost_after + 1e-9,
            "before {} after {} lower bound {}",
            plan.cost_before,
            plan.cost_after,
            plan.lower_bound
        );
    }
}
