//! The whole `karpctl plan` process on Karpenter's scheduling benchmark
//! shape written as manifests: an `InstanceTypeCatalog` of 400 types (type
//! *i*: *i*+1 vCPU, 2(*i*+1) GiB, 10(*i*+1) pods; spot in 2 zones, on-demand
//! in 3; 0.1 per vCPU and per GiB; kube-reserved 100m / 10Mi), one NodePool
//! and its EC2NodeClass, and the pending pods as one JSON `kind: List`, in
//! five equal groups (plain, zone spread, hostname spread, zone
//! self-affinity, hostname anti-affinity) with CPU and memory drawn from a
//! fixed seed.
//!
//! `cargo bench -p karpctl --bench plan [-- --sizes 20000]` writes the
//! manifests to a temporary directory, runs the release `karpctl plan -f DIR
//! -o json` on them several times and prints, per size: the input's size,
//! the best wall time and the peak resident memory of the process (from
//! GNU time, `/usr/bin/time`, when it is installed). `-- --sizes N --write
//! DIR` only writes the manifests, for profiling.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};

const SIZES: &[usize] = &[1_000, 20_000];
const RUNS: usize = 3;

/// splitmix64: the same fixed-seed draws on every machine.
struct Draws(u64);

impl Draws {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

fn catalog() -> Value {
    let types: Vec<Value> = (1..=400)
        .map(|cpu: i64| {
            let price = 0.1 * cpu as f64 + 0.1 * (2 * cpu) as f64;
            let offerings: Vec<Value> = [
                ("test-zone-1", "spot"),
                ("test-zone-2", "spot"),
                ("test-zone-1", "on-demand"),
                ("test-zone-2", "on-demand"),
                ("test-zone-3", "on-demand"),
            ]
            .iter()
            .map(|(zone, capacity_type)| {
                json!({"zone": zone, "capacityType": capacity_type, "price": price, "available": true})
            })
            .collect();
            json!({
                "name": format!("fake-it-{}", cpu - 1),
                "capacity": {"cpu": cpu.to_string(), "memory": format!("{}Gi", 2 * cpu), "pods": (10 * cpu).to_string()},
                "overhead": {"cpu": "100m", "memory": "10Mi"},
                "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": ["linux", "windows", "darwin"]},
                "offerings": offerings,
            })
        })
        .collect();
    json!({"kind": "InstanceTypeCatalog", "instanceTypes": types})
}

fn pool() -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
         "spec": {"template": {"spec": {
             "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
             "requirements": []}},
          "limits": {"cpu": "10000000", "memory": "10000000Gi"}}},
        {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
         "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}],
                  "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
                  "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
                  "role": "KarpenterNodeRole-bench"}}
    ]})
}

/// The constraint of a pod of `group` over label `value`, and its labels.
fn constraint(group: usize, value: &str) -> (Value, Value) {
    let spread = |key: &str| {
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"my-label": value}}}]})
    };
    let affinity = |kind: &str, label: &str, value: &str, key: &str| {
        json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {label: value}}, "topologyKey": key}]}}})
    };
    match group {
        1 => (
            spread("topology.kubernetes.io/zone"),
            json!({"my-label": value}),
        ),
        2 => (spread("kubernetes.io/hostname"), json!({"my-label": value})),
        3 => (
            affinity(
                "podAffinity",
                "my-affinity",
                value,
                "topology.kubernetes.io/zone",
            ),
            json!({"my-affinity": value}),
        ),
        4 => (
            affinity("podAntiAffinity", "app", "nginx", "kubernetes.io/hostname"),
            json!({"app": "nginx"}),
        ),
        _ => (json!({}), json!({})),
    }
}

fn pods(count: usize) -> Value {
    let mut draws = Draws(42);
    let cpus = ["100m", "250m", "500m", "1", "1500m"];
    let memories = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];
    let values = ["a", "b", "c", "d", "e", "f", "g"];
    let per_group = (count / 5).max(1);
    let items: Vec<Value> = (0..count)
        .map(|i| {
            let cpu = cpus[draws.below(cpus.len())];
            let memory = memories[draws.below(memories.len())];
            let value = values[draws.below(values.len())];
            let (mut spec, labels) = constraint((i / per_group).min(4), value);
            spec["containers"] = json!([{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]);
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": format!("pod-{i}"), "namespace": "default",
                                "uid": format!("{i:08}"), "labels": labels},
                   "spec": spec})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

fn write(dir: &Path, name: &str, value: &Value) -> u64 {
    let path = dir.join(name);
    let text = serde_json::to_vec(value).expect("manifests encode");
    std::fs::write(&path, &text).expect("write manifests");
    text.len() as u64
}

/// Wall seconds and, with GNU time, peak resident KiB of one run.
fn run(karpctl: &str, dir: &Path) -> (f64, Option<u64>) {
    let time = Path::new("/usr/bin/time");
    let mut command = if time.exists() {
        let mut c = Command::new(time);
        c.args(["-f", "%M", karpctl]);
        c
    } else {
        Command::new(karpctl)
    };
    command
        .args(["plan", "-f"])
        .arg(dir)
        .args(["-o", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let output = command.output().expect("run karpctl");
    let seconds = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "karpctl plan failed: {stderr}");
    let peak = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .filter(|_| time.exists());
    (seconds, peak)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = match args.iter().position(|a| a == "--sizes") {
        Some(position) => args[position + 1]
            .split(',')
            .map(|s| s.parse().expect("--sizes N,N"))
            .collect(),
        None => SIZES.to_vec(),
    };
    if let Some(position) = args.iter().position(|a| a == "--write") {
        // Only write the manifests (of the first size), for profiling.
        let dir = Path::new(&args[position + 1]);
        std::fs::create_dir_all(dir).expect("create the directory");
        write(dir, "catalog.json", &catalog());
        write(dir, "nodepool.json", &pool());
        write(dir, "pods.json", &pods(sizes[0]));
        return;
    }
    let karpctl = env!("CARGO_BIN_EXE_karpctl");
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "| pods | input | karpctl plan (best of {RUNS}) | peak memory |"
    )
    .ok();
    writeln!(out, "|---:|---:|---:|---:|").ok();
    for count in sizes {
        let dir = tempfile::tempdir().expect("temporary directory");
        let bytes = write(dir.path(), "catalog.json", &catalog())
            + write(dir.path(), "nodepool.json", &pool())
            + write(dir.path(), "pods.json", &pods(count));
        let mut best = f64::MAX;
        let mut peak = None;
        for _ in 0..RUNS {
            let (seconds, kib) = run(karpctl, dir.path());
            best = best.min(seconds);
            peak = peak.max(kib);
        }
        let peak = peak.map_or("(no /usr/bin/time)".to_owned(), |kib| {
            format!("{:.1} MiB", kib as f64 / 1024.0)
        });
        writeln!(
            out,
            "| {count} | {:.1} MB | {:.0} ms | {peak} |",
            bytes as f64 / 1e6,
            best * 1000.0
        )
        .ok();
    }
}
