//! Properties of every disruption plan, on random clusters: no command
//! evicts a do-not-disrupt pod or a pod whose PDB allows no disruption now,
//! disrupts more nodes than the budget allows, or leaves a pod that had a
//! place without one. (A PDB that allows some disruptions does not limit a
//! plan: the drain evicts its pods as it lets them go, as Karpenter's does.)

mod support;

use std::collections::{BTreeMap, HashSet};

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_scheduler::plan_disruption_request;
use proptest::prelude::*;
use support::*;

const ZONES: [&str; 2] = ["z1", "z2"];
const TYPES: [(&str, i64, f64); 3] = [("s", 2000, 0.1), ("m", 4000, 0.2), ("l", 8000, 0.4)];

fn catalog() -> Vec<types::InstanceType> {
    TYPES
        .iter()
        .map(|(name, cpu, price)| types::InstanceType {
            name: (*name).into(),
            requirements: vec![in_(ARCH, &["amd64"])],
            offerings: ZONES
                .iter()
                .flat_map(|zone| {
                    [("on-demand", *price), ("spot", price * 0.6)].map(|(ct, p)| types::Offering {
                        zone: (*zone).into(),
                        capacity_type: ct.into(),
                        price: p,
                        available: true,
                        requirements: vec![],
                    })
                })
                .collect(),
            capacity: Some(list(&[("cpu", *cpu), ("memory", 64 * GI), ("pods", 50)])),
            overhead: None,
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

fn snapshot(
    nodes: &[NodeSpec],
    pdb_allowed: &[i32],
    budget: u32,
    spot_to_spot: bool,
) -> sched::PlanDisruptionRequest {
    let state_nodes = nodes
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let (type_name, cpu, price) = TYPES[spec.type_index];
            let name = format!("node-{i:02}");
            let capacity_type = if spec.spot { "spot" } else { "on-demand" };
            sched::StateNode {
                name: name.clone(),
                node_claim_name: name.clone(),
                node_pool: "np".into(),
                labels: [
                    ("karpenter.sh/nodepool", "np"),
                    (INSTANCE_TYPE, type_name),
                    (ZONE, ZONES[spec.zone]),
                    (CAPACITY_TYPE, capacity_type),
                    (ARCH, "amd64"),
                ]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
                allocatable: Some(list(&[("cpu", cpu), ("memory", 64 * GI), ("pods", 50)])),
                capacity: Some(list(&[("cpu", cpu), ("memory", 64 * GI), ("pods", 50)])),
                pods: spec
                    .pods
                    .iter()
                    .enumerate()
                    .map(|(j, p)| {
                        let mut pod = pod(&format!("{name}-p{j}"))
                            .cpu(p.cpu)
                            .label("app", &format!("a{}", p.app));
                        pod.node_name = name.clone();
                        pod.phase = "Running".into();
                        pod.owner_kind = "ReplicaSet".into();
                        pod.do_not_disrupt = p.do_not_disrupt;
                        pod
                    })
                    .collect(),
                has_node: true,
                registered: true,
                initialized: true,
                price: if spec.spot { price * 0.6 } else { price },
                capacity_type: capacity_type.into(),
                zone: ZONES[spec.zone].into(),
                instance_type: type_name.into(),
                disruption: Some(sched::NodeClaimDisruptionState {
                    consolidatable: true,
                    do_not_disrupt: spec.do_not_disrupt,
                    ..Default::default()
                }),
                ..Default::default()
            }
        })
        .collect();
    let mut pool = pool("np");
    pool.disruption = Some(sched::Disruption {
        consolidation_policy: sched::disruption::ConsolidationPolicy::WhenEmptyOrUnderutilized
            as i32,
        consolidate_after: Some(prost_types::Duration {
            seconds: 0,
            nanos: 0,
        }),
        budgets: vec![sched::Budget {
            nodes: budget.to_string(),
            ..Default::default()
        }],
    });
    let mut options = sched::SchedulingOptions::default();
    options
        .feature_gates
        .insert("SpotToSpotConsolidation".into(), spot_to_spot);
    sched::PlanDisruptionRequest {
        cluster: Some(sched::ClusterSnapshot {
            nodes: state_nodes,
            node_pools: vec![pool],
            instance_type_catalogs: vec![sched::InstanceTypeCatalog {
                name: "default".into(),
                instance_types: catalog(),
            }],
            pod_disruption_budgets: pdb_allowed
                .iter()
                .enumerate()
                .map(|(app, allowed)| sched::PodDisruptionBudget {
                    namespace: "default".into(),
                    name: format!("pdb-a{app}"),
                    selector: Some(selector(&[("app", &format!("a{app}"))])),
                    disruptions_allowed: *allowed,
                    ..Default::default()
                })
                .collect(),
            now: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        }),
        options: Some(options),
    }
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
        let request = snapshot(&nodes, &pdb_allowed, budget, spot_to_spot);
        let response = plan_disruption_request(&request).expect("valid request");
        let cluster = request.cluster.as_ref().unwrap();
        let by_name: BTreeMap<&str, &sched::StateNode> = cluster.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut disrupted = 0u32;
        for command in &response.commands {
            let landed: HashSet<&str> = command
                .placements
                .iter()
                .flat_map(|p| p.pods.iter().map(|r| r.name.as_str()))
                .chain(command.replacements.iter().flat_map(|r| r.pods.iter().map(|p| p.name.as_str())))
                .collect();
            for candidate in &command.candidates {
                let node = by_name.get(candidate.as_str()).copied();
                // Replacements the plan itself created have no snapshot entry.
                let Some(node) = node else { continue };
                disrupted += 1;
                prop_assert!(!node.disruption.as_ref().unwrap().do_not_disrupt, "node {candidate} is do-not-disrupt");
                for pod in &node.pods {
                    prop_assert!(!pod.do_not_disrupt, "{} is do-not-disrupt on {candidate}", pod.name);
                    prop_assert!(landed.contains(pod.name.as_str()), "{} lost its place", pod.name);
                    let app: usize = pod.labels["app"][1..].parse().unwrap();
                    prop_assert!(pdb_allowed[app] > 0, "{} evicted under pdb a{app}, which allows none", pod.name);
                }
            }
        }
        prop_assert!(disrupted <= budget, "{disrupted} nodes disrupted with a budget of {budget}");
        let cost = response.cost.unwrap();
        prop_assert!(cost.after <= cost.before + 1e-9);
        prop_assert!(cost.lower_bound <= cost.after + 1e-9, "{cost:?}");
    }
}
