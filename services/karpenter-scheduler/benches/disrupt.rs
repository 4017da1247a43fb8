//! Disruption at cluster scale, shaped like Karpenter's performance suite:
//!
//! - `plain`: 1,000 nodes holding 2,000 pods (two 1-CPU pods per 4-CPU node);
//! - `anti-affinity`: 1,000 nodes, one hostname-anti-affine pod each;
//! - `scale-down`: 1,000 pods placed by Solve, then scaled down to 700.
//!
//! `cargo bench -p karpenter-scheduler --bench disrupt` prints, per
//! scenario, the time of one PlanDisruption call (best of three), the
//! candidates evaluated, the commands, the cost per hour before, after and
//! the lower bound, and the peak resident memory of a process that ran only
//! that scenario.

// The scheduler binary's allocator, so the figures are the service's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::Command;
use std::time::Instant;

use karpenter_planner_wire::{plan_disruption_request, solve_request};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

const SCENARIOS: &[&str] = &["plain", "anti-affinity", "scale-down"];
const NOW: i64 = 1_700_000_000;

fn list(pairs: &[(&str, i64)]) -> Option<types::ResourceList> {
    Some(types::ResourceList {
        quantities: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    })
}

/// A kwok-like catalog: 1-64 CPUs x 2/4/8 GiB per CPU, 3 zones, spot at
/// 70% of on-demand, on-demand at 0.025/CPU + 0.003/GiB per hour.
fn catalog() -> Vec<types::InstanceType> {
    let mut types = Vec::new();
    for cpu in [1i64, 2, 4, 8, 16, 32, 64] {
        for (family, ratio) in [("c", 2i64), ("m", 4), ("r", 8)] {
            let memory_gib = cpu * ratio;
            let price = 0.025 * cpu as f64 + 0.003 * memory_gib as f64;
            let mut offerings = Vec::new();
            for zone in ["zone-a", "zone-b", "zone-c"] {
                for (capacity_type, p) in [("on-demand", price), ("spot", price * 0.7)] {
                    offerings.push(types::Offering {
                        zone: zone.into(),
                        capacity_type: capacity_type.into(),
                        price: p,
                        available: true,
                        requirements: vec![],
                    });
                }
            }
            types.push(types::InstanceType {
                name: format!("{family}-{cpu}x"),
                requirements: vec![types::Requirement {
                    key: "kubernetes.io/arch".into(),
                    operator: types::Operator::In as i32,
                    values: vec!["amd64".into()],
                    min_values: None,
                }],
                offerings,
                capacity: list(&[
                    ("cpu", cpu * 1000),
                    ("memory", memory_gib << 30),
                    ("pods", 110),
                ]),
                overhead: Some(types::InstanceTypeOverhead {
                    kube_reserved: list(&[("cpu", 100), ("memory", 256 << 20)]),
                    system_reserved: None,
                    eviction_threshold: None,
                }),
                price_overlaid: false,
                capacity_overlaid: false,
                volume_attachment_limits: Default::default(),
            });
        }
    }
    types
}

fn pool() -> sched::NodePool {
    sched::NodePool {
        name: "default".into(),
        ready: true,
        requirements: vec![types::Requirement {
            key: "karpenter.sh/capacity-type".into(),
            operator: types::Operator::In as i32,
            values: vec!["on-demand".into()],
            min_values: None,
        }],
        disruption: Some(sched::Disruption {
            consolidation_policy: sched::disruption::ConsolidationPolicy::WhenEmptyOrUnderutilized
                as i32,
            consolidate_after: Some(prost_types::Duration {
                seconds: 0,
                nanos: 0,
            }),
            budgets: vec![sched::Budget {
                nodes: "100%".into(),
                ..Default::default()
            }],
        }),
        ..Default::default()
    }
}

fn pod(name: &str, cpu: i64, memory: i64) -> sched::Pod {
    sched::Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: name.into(),
        owner_kind: "ReplicaSet".into(),
        phase: "Running".into(),
        labels: [("app".to_owned(), "web".to_owned())].into_iter().collect(),
        containers: vec![sched::Container {
            name: "app".into(),
            requests: list(&[("cpu", cpu), ("memory", memory)]),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn node(
    name: &str,
    it: &types::InstanceType,
    zone: &str,
    pods: Vec<sched::Pod>,
) -> sched::StateNode {
    let price = it
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == "on-demand")
        .map_or(0.0, |o| o.price);
    let mut capacity = it.capacity.clone().unwrap_or_default();
    if let Some(overhead) = it.overhead.as_ref().and_then(|o| o.kube_reserved.as_ref()) {
        for (name, quantity) in &overhead.quantities {
            if let Some(value) = capacity.quantities.get_mut(name) {
                *value -= quantity;
            }
        }
    }
    sched::StateNode {
        name: name.into(),
        node_claim_name: name.into(),
        node_pool: "default".into(),
        labels: [
            ("karpenter.sh/nodepool", "default"),
            ("node.kubernetes.io/instance-type", it.name.as_str()),
            ("topology.kubernetes.io/zone", zone),
            ("karpenter.sh/capacity-type", "on-demand"),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/hostname", name),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect(),
        allocatable: Some(capacity),
        capacity: it.capacity.clone(),
        pods: pods
            .into_iter()
            .map(|mut p| {
                p.node_name = name.into();
                p
            })
            .collect(),
        has_node: true,
        registered: true,
        initialized: true,
        price,
        capacity_type: "on-demand".into(),
        zone: zone.into(),
        instance_type: it.name.clone(),
        creation_timestamp: Some(prost_types::Timestamp {
            seconds: NOW - 3600,
            nanos: 0,
        }),
        disruption: Some(sched::NodeClaimDisruptionState {
            consolidatable: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cluster(nodes: Vec<sched::StateNode>) -> sched::ClusterSnapshot {
    sched::ClusterSnapshot {
        nodes,
        node_pools: vec![pool()],
        instance_type_catalogs: vec![sched::InstanceTypeCatalog {
            name: "default".into(),
            instance_types: catalog(),
        }],
        now: Some(prost_types::Timestamp {
            seconds: NOW,
            nanos: 0,
        }),
        ..Default::default()
    }
}

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn scenario(name: &str) -> sched::ClusterSnapshot {
    let types = catalog();
    let find = |name: &str| {
        types
            .iter()
            .find(|t| t.name == name)
            .expect("catalog type")
            .clone()
    };
    match name {
        "plain" => {
            let it = find("m-4x");
            cluster(
                (0..1000)
                    .map(|i| {
                        let name = format!("node-{i:04}");
                        let pods = vec![
                            pod(&format!("web-{i}-a"), 1000, 2 << 30),
                            pod(&format!("web-{i}-b"), 1000, 2 << 30),
                        ];
                        node(&name, &it, ZONES[i % 3], pods)
                    })
                    .collect(),
            )
        }
        "anti-affinity" => {
            let it = find("c-2x");
            cluster(
                (0..1000)
                    .map(|i| {
                        let name = format!("node-{i:04}");
                        let mut p = pod(&format!("spread-{i}"), 500, 1 << 30);
                        p.required_pod_anti_affinity.push(sched::PodAffinityTerm {
                            label_selector: Some(sched::LabelSelector {
                                match_labels: [("app".to_owned(), "web".to_owned())]
                                    .into_iter()
                                    .collect(),
                                match_expressions: vec![],
                            }),
                            topology_key: "kubernetes.io/hostname".into(),
                            ..Default::default()
                        });
                        node(&name, &it, ZONES[i % 3], vec![p])
                    })
                    .collect(),
            )
        }
        _ => {
            // 1,000 pods placed by the scheduler, then 300 of them removed.
            let mut snapshot = cluster(Vec::new());
            snapshot.pending_pods = (0..1000)
                .map(|i| {
                    pod(
                        &format!("web-{i}"),
                        [250, 500, 1000][i % 3],
                        [512 << 20, 1 << 30, 2 << 30][i % 3],
                    )
                })
                .collect();
            let solved = solve_request(&sched::SolveRequest {
                cluster: Some(snapshot.clone()),
                options: None,
            })
            .expect("valid snapshot");
            let pods: std::collections::HashMap<String, sched::Pod> = snapshot
                .pending_pods
                .drain(..)
                .map(|p| (p.name.clone(), p))
                .collect();
            let mut state = 42u64;
            let mut keep = |_: &str| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 33) % 10 >= 3
            };
            for (i, claim) in solved.node_claims.iter().enumerate() {
                let cheapest = claim.cheapest.clone().unwrap_or_default();
                let it = find(&cheapest.instance_type);
                let bound: Vec<sched::Pod> = claim
                    .pods
                    .iter()
                    .filter(|r| keep(&r.name))
                    .filter_map(|r| pods.get(&r.name).cloned())
                    .collect();
                snapshot
                    .nodes
                    .push(node(&format!("node-{i:04}"), &it, &cheapest.zone, bound));
            }
            snapshot
        }
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn measure(name: &str) {
    let snapshot = scenario(name);
    let nodes = snapshot.nodes.len();
    let pods: usize = snapshot.nodes.iter().map(|n| n.pods.len()).sum();
    let request = sched::PlanDisruptionRequest {
        cluster: Some(snapshot),
        options: None,
    };
    let mut best = f64::MAX;
    let mut response = None;
    for _ in 0..3 {
        let started = Instant::now();
        let planned = plan_disruption_request(&request).expect("valid request");
        best = best.min(started.elapsed().as_secs_f64());
        response = Some(planned);
    }
    let response = response.unwrap_or_default();
    let cost = response.cost.unwrap_or_default();
    let disrupted: usize = response.commands.iter().map(|c| c.candidates.len()).sum();
    println!(
        "{name} {nodes} {pods} {best} {} {} {disrupted} {} {} {} {}",
        response.candidates_evaluated,
        response.commands.len(),
        cost.before,
        cost.after,
        cost.lower_bound,
        peak_rss_kib()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(position) = args.iter().position(|a| a == "--scenario") {
        measure(&args[position + 1]);
        return;
    }
    let me = std::env::current_exe().expect("own path");
    println!(
        "| scenario | nodes | pods | PlanDisruption | candidates evaluated | commands | nodes disrupted | cost/h before | after | lower bound | after / bound | peak memory |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for name in SCENARIOS {
        let output = Command::new(&me)
            .args(["--scenario", name])
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&output.stdout);
        let f: Vec<&str> = text.split_whitespace().collect();
        if f.len() != 11 {
            eprintln!("{name} failed: {}", String::from_utf8_lossy(&output.stderr));
            continue;
        }
        let num = |i: usize| f[i].parse::<f64>().unwrap_or(f64::NAN);
        println!(
            "| {} | {} | {} | {:.0} ms | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} MiB |",
            f[0],
            f[1],
            f[2],
            num(3) * 1000.0,
            f[4],
            f[5],
            f[6],
            num(7),
            num(8),
            num(9),
            num(8) / num(9),
            num(10) / 1024.0
        );
    }
}
