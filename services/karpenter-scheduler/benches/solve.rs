//! Karpenter's scheduling benchmark shape (`scheduling_benchmark_test.go`),
//! timed: 400 instance types, one pool, pods in five equal groups (plain,
//! zone spread, hostname spread, zone self-affinity, hostname
//! anti-affinity) with CPU and memory drawn from a fixed-seed generator.
//!
//! `cargo bench -p karpenter-scheduler --bench solve` prints one row per
//! pod count: wall time of solving (best of several runs, one thread; the
//! request already parsed, as Karpenter's benchmark times its scheduler),
//! pods per second, the time to parse the request, node claims planned, and
//! the peak resident memory of a process that parsed and solved only that
//! size (each size runs in a child process so peaks do not mix).

// The scheduler binary's allocator, so the figures are the service's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::Command;
use std::time::Instant;

use karpenter_planner::solve;
use karpenter_planner_wire::from_wire;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

const SIZES: &[usize] = &[1, 100, 1_000, 5_000, 20_000, 100_000];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

fn list(pairs: &[(&str, i64)]) -> Option<types::ResourceList> {
    Some(types::ResourceList {
        quantities: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
    })
}

fn instance_types() -> Vec<types::InstanceType> {
    (0..400)
        .map(|i| {
            let cpu = i as i64 + 1;
            let memory_gib = 2 * cpu;
            let price = 0.1 * cpu as f64 + 0.1 * memory_gib as f64;
            let mut offerings = Vec::new();
            for (zone, capacity_type) in [
                ("test-zone-1", "spot"),
                ("test-zone-2", "spot"),
                ("test-zone-1", "on-demand"),
                ("test-zone-2", "on-demand"),
                ("test-zone-3", "on-demand"),
            ] {
                offerings.push(types::Offering {
                    zone: zone.into(),
                    capacity_type: capacity_type.into(),
                    price,
                    available: true,
                    requirements: vec![],
                });
            }
            types::InstanceType {
                name: format!("fake-it-{i}"),
                requirements: vec![
                    types::Requirement {
                        key: "kubernetes.io/arch".into(),
                        operator: types::Operator::In as i32,
                        values: vec!["amd64".into()],
                        min_values: None,
                    },
                    types::Requirement {
                        key: "kubernetes.io/os".into(),
                        operator: types::Operator::In as i32,
                        values: vec!["linux".into(), "windows".into(), "darwin".into()],
                        min_values: None,
                    },
                ],
                offerings,
                capacity: list(&[
                    ("cpu", cpu * 1000),
                    ("memory", memory_gib << 30),
                    ("pods", 10 * cpu),
                ]),
                overhead: Some(types::InstanceTypeOverhead {
                    kube_reserved: list(&[("cpu", 100), ("memory", 10 << 20)]),
                    system_reserved: None,
                    eviction_threshold: None,
                }),
                price_overlaid: false,
                capacity_overlaid: false,
                volume_attachment_limits: Default::default(),
            }
        })
        .collect()
}

fn selector(key: &str, value: &str) -> Option<sched::LabelSelector> {
    Some(sched::LabelSelector {
        match_labels: [(key.to_owned(), value.to_owned())].into_iter().collect(),
        match_expressions: vec![],
    })
}

fn pods(count: usize) -> Vec<sched::Pod> {
    let mut rng = Rng(42);
    let cpus = [100, 250, 500, 1000, 1500];
    let memories: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
    let label_values = ["a", "b", "c", "d", "e", "f", "g"];
    let per_group = count / 5;
    (0..count)
        .map(|i| {
            let group = i.checked_div(per_group).map_or(0, |g| g.min(4));
            let cpu = *rng.pick(&cpus);
            let memory = *rng.pick(&memories) << 20;
            let value = *rng.pick(&label_values);
            let mut pod = sched::Pod {
                namespace: "default".into(),
                name: format!("pod-{i}"),
                uid: format!("{i:08}"),
                containers: vec![sched::Container {
                    name: "app".into(),
                    requests: list(&[("cpu", cpu), ("memory", memory)]),
                    ..Default::default()
                }],
                ..Default::default()
            };
            let spread = |key: &str| sched::TopologySpreadConstraint {
                max_skew: 1,
                topology_key: key.into(),
                when_unsatisfiable:
                    sched::topology_spread_constraint::WhenUnsatisfiable::DoNotSchedule as i32,
                label_selector: selector("my-label", value),
                ..Default::default()
            };
            match group {
                1 => {
                    pod.labels.insert("my-label".into(), value.into());
                    pod.topology_spread_constraints
                        .push(spread("topology.kubernetes.io/zone"));
                }
                2 => {
                    pod.labels.insert("my-label".into(), value.into());
                    pod.topology_spread_constraints
                        .push(spread("kubernetes.io/hostname"));
                }
                3 => {
                    pod.labels.insert("my-affinity".into(), value.into());
                    pod.required_pod_affinity.push(sched::PodAffinityTerm {
                        label_selector: selector("my-affinity", value),
                        topology_key: "topology.kubernetes.io/zone".into(),
                        ..Default::default()
                    });
                }
                4 => {
                    pod.labels.insert("app".into(), "nginx".into());
                    pod.required_pod_anti_affinity.push(sched::PodAffinityTerm {
                        label_selector: selector("app", "nginx"),
                        topology_key: "kubernetes.io/hostname".into(),
                        ..Default::default()
                    });
                }
                _ => {}
            }
            pod
        })
        .collect()
}

fn snapshot(count: usize) -> sched::ClusterSnapshot {
    sched::ClusterSnapshot {
        pending_pods: pods(count),
        node_pools: vec![sched::NodePool {
            name: "default".into(),
            ready: true,
            // Limits no run reaches: 100,000 pods take 20,000 nodes of up to
            // 400 vCPU and 800 GiB each.
            limits: list(&[("cpu", 1_000_000_000_000), ("memory", 1_000_000_000 << 30)]),
            ..Default::default()
        }],
        instance_type_catalogs: vec![sched::InstanceTypeCatalog {
            name: "default".into(),
            instance_types: instance_types(),
        }],
        ..Default::default()
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

/// Child mode: parse and solve `runs` times, print
/// `parse_seconds solve_seconds claims unschedulable peak_kib` (best runs).
fn measure(count: usize, runs: usize) {
    let snapshot = snapshot(count);
    let options = solve::Options::default();
    let mut best_parse = f64::MAX;
    let mut best_solve = f64::MAX;
    let mut claims = 0;
    let mut unschedulable = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let cluster = from_wire::cluster(&snapshot)
            .expect("valid benchmark snapshot")
            .cluster;
        best_parse = best_parse.min(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let solution = solve::solve(&cluster, &options);
        best_solve = best_solve.min(started.elapsed().as_secs_f64());
        claims = solution.new_claims.len();
        unschedulable = solution.unschedulable.len();
        if let Some((pod, reason)) = solution.unschedulable.iter().next() {
            eprintln!(
                "{} unschedulable, e.g. {}/{}: {reason}",
                unschedulable, pod.namespace, pod.name
            );
        }
    }
    println!(
        "{best_parse} {best_solve} {claims} {unschedulable} {}",
        peak_rss_kib()
    );
}

/// `--request-bytes`: per size, the encoded Solve request and what the
/// wire bounds (`karpenter_proto::bounds`) make of it: the figure the
/// scheduler's largest accepted message is sized from.
fn request_bytes(sizes: &[usize]) {
    use prost::Message as _;
    println!("| pods | request | estimated decoded | ratio | bounds |");
    println!("|---:|---:|---:|---:|---|");
    for &count in sizes {
        let request = sched::SolveRequest {
            cluster: Some(snapshot(count)),
            options: None,
        }
        .encode_to_vec();
        let name = "karpenter.scheduler.v1.SolveRequest";
        let estimated =
            karpenter_proto::bounds::measure(name, &request).map_or(0, |m| m.estimated_bytes);
        let verdict = match karpenter_proto::bounds::check(name, &request) {
            Ok(()) => "accepted".to_owned(),
            Err(error) => format!("refused: {error}"),
        };
        println!(
            "| {count} | {:.1} MiB | {:.1} MiB | {:.1} | {verdict} |",
            request.len() as f64 / 1048576.0,
            estimated as f64 / 1048576.0,
            estimated as f64 / request.len() as f64
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--request-bytes") {
        request_bytes(&[1_000, 20_000, 100_000, 150_000]);
        return;
    }
    if let Some(position) = args.iter().position(|a| a == "--size") {
        let count: usize = args[position + 1].parse().expect("--size N");
        let runs = if count >= 5_000 { 3 } else { 10 };
        measure(count, runs);
        return;
    }
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--sizes") {
        Some(position) => args[position + 1]
            .split(',')
            .map(|s| s.parse().expect("--sizes N,N"))
            .collect(),
        None => SIZES.to_vec(),
    };
    let me = std::env::current_exe().expect("own path");
    println!(
        "| pods | Solve | pods/s | parsing the request | node claims | unschedulable | peak memory |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for count in sizes {
        let output = Command::new(&me)
            .args(["--size", &count.to_string()])
            .env("RAYON_NUM_THREADS", "1")
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&output.stdout);
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            eprintln!(
                "size {count} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            continue;
        }
        let parse: f64 = fields[0].parse().unwrap_or(f64::NAN);
        let seconds: f64 = fields[1].parse().unwrap_or(f64::NAN);
        let peak_kib: f64 = fields[4].parse().unwrap_or(f64::NAN);
        println!(
            "| {count} | {:.1} ms | {:.0} | {:.1} ms | {} | {} | {:.1} MiB |",
            seconds * 1000.0,
            count as f64 / seconds,
            parse * 1000.0,
            fields[2],
            fields[3],
            peak_kib / 1024.0
        );
    }
}
