//! End-to-end tests of the `karpctl` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn karpctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpctl"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run karpctl")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn testdata(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name)
        .display()
        .to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn all_pods(plan: &Value) -> Vec<String> {
    let mut pods = Vec::new();
    for claim in plan["nodeClaims"].as_array().unwrap() {
        pods.extend(
            claim["pods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string()),
        );
    }
    for node in plan["existingNodes"].as_array().unwrap() {
        pods.extend(
            node["pods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string()),
        );
    }
    for u in plan["unschedulable"].as_array().unwrap() {
        pods.push(u["pod"].as_str().unwrap().to_string());
    }
    pods
}

#[test]
fn plan_example_seed_001() {
    let first = karpctl(&["plan", "--example", "seed-001", "-o", "json"]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let plan: Value = serde_json::from_slice(&first.stdout).expect("json");

    let mut pods = all_pods(&plan);
    pods.sort();
    let expected: Vec<String> = (0..5).map(|i| format!("default/app-{i}")).collect();
    assert_eq!(pods, expected, "every pending pod exactly once");

    let claims = plan["nodeClaims"].as_array().unwrap();
    assert_eq!(claims.len(), 4, "{plan:#}");
    let mut sum = 0.0;
    for claim in claims {
        assert_eq!(claim["nodePool"], "default");
        assert_eq!(claim["cheapest"]["instanceType"], "r5.large");
        assert_eq!(claim["cheapest"]["capacityType"], "on-demand");
        assert_eq!(
            claim["labels"]["node.kubernetes.io/instance-type"],
            "r5.large"
        );
        sum += claim["cheapest"]["price"].as_f64().unwrap();
    }
    assert!((plan["costPerHour"].as_f64().unwrap() - sum).abs() < 1e-9);
    assert!((sum - 0.608).abs() < 1e-9);
    assert_eq!(
        plan["existingNodes"][0]["name"],
        "ip-10-99-22-103.ap-northeast-1.compute.internal"
    );
    assert_eq!(plan["unschedulable"].as_array().unwrap().len(), 0);

    let second = karpctl(&["plan", "--example", "seed-001", "-o", "json"]);
    assert_eq!(first.stdout, second.stdout, "byte-identical across runs");
}

#[test]
fn plan_example_files_match_embedded() {
    let from_files = karpctl(&["plan", "-f", "deploy/examples/seed-001", "-o", "json"]);
    let embedded = karpctl(&["plan", "--example", "seed-001", "-o", "json"]);
    assert_eq!(from_files.status.code(), Some(0), "{}", stderr(&from_files));
    assert_eq!(from_files.stdout, embedded.stdout);
}

#[test]
fn plan_table_and_yaml() {
    let table = karpctl(&["plan", "--example", "seed-001", "-o", "table"]);
    assert_eq!(table.status.code(), Some(0));
    let text = stdout(&table);
    assert!(text.contains("r5.large"), "{text}");
    assert!(text.contains("0.1520"), "{text}");
    assert!(text.contains("0.6080"), "{text}");
    let yaml = karpctl(&["plan", "--example", "seed-001", "-o", "yaml"]);
    let json = karpctl(&["plan", "--example", "seed-001", "-o", "json"]);
    let from_yaml: Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    let from_json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(from_yaml, from_json);
    // Not a terminal: JSON by default.
    let default = karpctl(&["plan", "--example", "seed-001"]);
    assert_eq!(default.stdout, json.stdout);
}

#[test]
fn plan_seed_003_with_builtin_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let deployment = dir.path().join("web.yaml");
    std::fs::write(
        &deployment,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers:\n      - name: web\n        resources: {requests: {cpu: 500m, memory: 1Gi}}\n",
    )
    .unwrap();
    let seed = [
        "plan",
        "-f",
        "testdata/seeds/003-nodepool-default.yaml",
        "-f",
        "testdata/seeds/003-ec2nodeclass-default.filled.yaml",
        "-f",
        deployment.to_str().unwrap(),
        "-o",
        "json",
    ];
    // The seed's `spec.limit` is refused as kubectl's strict field
    // validation refuses it...
    let refused = karpctl(&seed);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains(
            "error: testdata/seeds/003-nodepool-default.yaml: document 1 (NodePool \"default\"): spec.limit: unknown field (did you mean \"spec.limits\"?)"
        ),
        "{}",
        stderr(&refused)
    );
    assert!(refused.stdout.is_empty());
    // ... and `--validate=warn` plans it with a warning.
    let out = karpctl(&[&seed[..], &["--validate=warn"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: testdata/seeds/003-nodepool-default.yaml: document 1 (NodePool \"default\"): spec.limit: unknown field"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("built-in"),
        "notice on stderr: {}",
        stderr(&out)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The pool wants t4g in ap-northeast-2a; the built-in catalog has neither.
    let unschedulable = plan["unschedulable"].as_array().unwrap();
    assert_eq!(unschedulable.len(), 2, "{plan:#}");
    for u in unschedulable {
        assert!(!u["reason"].as_str().unwrap().is_empty());
    }
    assert_eq!(plan["costPerHour"], 0.0);
}

#[test]
fn plan_seed_003_reason_names_the_pool() {
    let out = karpctl(&[
        "plan",
        "-f",
        "testdata/seeds/003-nodepool-default.yaml",
        "-f",
        &testdata("bad/unknown-kind.yaml"),
        "-o",
        "json",
        "--validate=ignore",
    ]);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = plan["unschedulable"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("default"), "{reason}");
}

#[test]
fn plan_bad_quantity_names_file_document_field() {
    let file = testdata("bad/bad-quantity.yaml");
    let out = karpctl(&["plan", "-f", &file, "-o", "json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let expected = format!(
        "error: {file}: document 2 (Deployment \"app\"): spec.template.spec.containers[0].resources.requests.cpu: invalid quantity \"1x\""
    );
    assert!(err.contains(&expected), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn plan_deployment_without_containers() {
    let file = testdata("bad/no-containers.yaml");
    let out = karpctl(&["plan", "-f", &file]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{file}: document 1 (Deployment \"empty\"): spec.template.spec.containers:"
        )),
        "{err}"
    );
}

#[test]
fn plan_bad_taint_effect() {
    let file = testdata("bad/bad-taint.yaml");
    let out = karpctl(&["plan", "-f", &file]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("spec.template.spec.taints[0].effect"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn plan_unknown_kind_is_a_warning() {
    let file = testdata("bad/unknown-kind.yaml");
    let out = karpctl(&["plan", "-f", &file, "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning:"), "{}", stderr(&out));
    assert!(stderr(&out).contains("Widget"), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    // No node pool: the pod cannot be placed, but the input was understood.
    assert_eq!(all_pods(&plan), ["team-a/solo"]);
}

/// Manifests written for Karpenter v1.15 validate: consolidateAfter left to
/// its default, kubernetes.io / k8s.io labels and requirement keys, Gte and
/// Lte requirements.
#[test]
fn upstream_v1_15_manifests_validate() {
    let out = karpctl(&["validate", "-f", &testdata("upstream-v1.15/nodepool.yaml")]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("3 documents valid, 0 invalid"),
        "{}",
        stdout(&out)
    );
    // EC2NodeClasses with v1.15's open kubelet block and expressions.
    let classes = testdata("upstream-v1.15/ec2nodeclass.yaml");
    let out = karpctl(&["validate", "-f", &classes]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("3 documents valid, 0 invalid"),
        "{}",
        stdout(&out)
    );
    // CapacityBuffers of both served versions, as v1.15's documentation
    // writes them.
    let buffers = testdata("upstream-v1.15/capacitybuffer.yaml");
    let out = karpctl(&["validate", "-f", &buffers]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("2 documents valid, 0 invalid"),
        "{}",
        stdout(&out)
    );
    // Planned for with the gate: 5 pods of 2 CPUs capped at 20 CPUs and
    // 40Gi (5), and 20% of 10 replicas (2).
    let pool_dir = manifests_dir(&[("pool.yaml", &pool("default", 1, "", ""))]);
    let out = karpctl(&[
        "plan",
        "-f",
        &buffers,
        "-f",
        &pool_dir.path().display().to_string(),
        "-o",
        "json",
        "--feature-gates",
        "CapacityBuffer=true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
    let pods = claimed_pods(&plan);
    let count = |prefix: &str| pods.iter().filter(|p| p.starts_with(prefix)).count();
    assert_eq!(
        count("default/capacity-buffer-web-app-buffer-"),
        5,
        "{pods:?}"
    );
    assert_eq!(count("default/capacity-buffer-api-buffer-"), 2, "{pods:?}");
}

/// What `kubectl apply` refuses, plan, disrupt and validate refuse: exit
/// 2, naming the file, the document and the field (each file's first line
/// says which field).
#[test]
fn refused_inputs_exit_2_naming_file_document_and_field() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/refused");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testdata/refused")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let field = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: no # expect: line", path.display()))
            .trim();
        let file = path.display().to_string();
        let named = |line: &str| {
            line.contains(&format!("{file}: document 1 ("))
                && line.contains(&format!("): {field}: "))
        };
        for command in ["plan", "disrupt"] {
            let out = karpctl(&[command, "-f", &file, "-o", "json"]);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{command} {file}: {err}");
            assert!(
                err.lines().any(|l| l.starts_with("error: ") && named(l)),
                "{command} {file}: expected {field} named, got:\n{err}"
            );
            assert!(out.stdout.is_empty(), "{command} {file}");
        }
        let out = karpctl(&["validate", "-f", &file]);
        let report = stdout(&out);
        assert_eq!(out.status.code(), Some(2), "validate {file}: {report}");
        assert!(
            report.lines().any(named) && report.contains("1 invalid"),
            "validate {file}: expected {field} named, got:\n{report}"
        );
        // `--validate=warn` lets an unknown field through, as kubectl's flag.
        if file.contains("unknown-field") {
            for command in ["plan", "disrupt"] {
                let out = karpctl(&[command, "-f", &file, "-o", "json", "--validate=warn"]);
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{command} {file}: {}",
                    stderr(&out)
                );
                assert!(
                    stderr(&out)
                        .lines()
                        .any(|l| l.starts_with("warning: ") && named(l)),
                    "{command} {file}: {}",
                    stderr(&out)
                );
            }
        }
    }
    // Seed 003's `spec.limit`: refused with the hint by every command.
    let limit = testdata("refused/nodepool-unknown-field.yaml");
    for command in ["plan", "disrupt", "validate"] {
        let out = karpctl(&[command, "-f", &limit]);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            said.contains("spec.limit: unknown field (did you mean \"spec.limits\"?)"),
            "{command}: {said}"
        );
    }
    let typo = karpctl(&["plan", "-f", &testdata("refused/nodepool-typo.yaml")]);
    assert!(
        stderr(&typo)
            .contains("karpenter.sh/v1 has no kind \"NodePoool\" (did you mean \"NodePool\"?)"),
        "{}",
        stderr(&typo)
    );
    let pod = karpctl(&["plan", "-f", &testdata("refused/pod-unknown-field.yaml")]);
    assert!(
        stderr(&pod).contains(
            "spec.containers[0].resource: unknown field (did you mean \"spec.containers[0].resources\"?)"
        ),
        "{}",
        stderr(&pod)
    );
}

/// Valid Kubernetes kinds planning does not read (a Service, a ConfigMap)
/// are what `kubectl apply` accepts: every command goes on without them,
/// saying so.
#[test]
fn kinds_planning_does_not_use_are_skipped_with_a_note() {
    let extras = testdata("skipped/service-and-configmap.yaml");
    for command in ["plan", "disrupt"] {
        let out = karpctl(&[
            command,
            "-f",
            &extras,
            "-f",
            "deploy/examples/consolidation",
            "-o",
            "json",
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{command}: {err}");
        for (document, kind) in [(1, "Service \"web\""), (2, "ConfigMap \"settings\"")] {
            let kind_name = kind.split(' ').next().unwrap_or_default();
            assert!(
                err.contains(&format!(
                    "warning: {extras}: document {document} ({kind}): skipped: kind {kind_name} (v1) is not used for planning"
                )),
                "{command}: {err}"
            );
        }
        let answer: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert!(answer.is_object(), "{command}: {answer}");
    }
    let out = karpctl(&[
        "validate",
        "-f",
        &extras,
        "-f",
        "deploy/examples/consolidation/nodepool.yaml",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("2 documents valid, 0 invalid, 2 skipped (not Karpenter)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn plan_reads_stdin_and_lists() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpctl"))
        .args(["plan", "-f", "-", "-o", "json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let manifest = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: karpenter.sh/v1\n  kind: NodePool\n  metadata: {name: default}\n  spec:\n    template:\n      spec:\n        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n        requirements: []\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n  spec:\n    containers:\n    - name: c\n      resources: {requests: {cpu: 1500m, memory: 3Gi}}\n";
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["nodeClaims"].as_array().unwrap().len(), 1, "{plan:#}");
    assert_eq!(plan["nodeClaims"][0]["pods"][0], "default/p");
    let it = plan["nodeClaims"][0]["cheapest"]["instanceType"]
        .as_str()
        .unwrap();
    assert!(it.ends_with("-linux"), "built-in kwok-style type: {it}");
}

#[test]
fn plan_bad_feature_gate() {
    let out = karpctl(&[
        "plan",
        "--example",
        "seed-001",
        "--feature-gates",
        "Nope=true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("Nope"));
}

#[test]
fn plan_takes_every_gate_of_karpenter() {
    // PLAN_CLI.md: --feature-gates takes NodeOverlay, CapacityBuffer and
    // StaticCapacity besides the older gates, with Go's spellings of a bool.
    let out = karpctl(&[
        "plan",
        "--example",
        "seed-001",
        "--feature-gates",
        "NodeRepair=true,ReservedCapacity=false,SpotToSpotConsolidation=T,NodeOverlay=1,CapacityBuffer=true,StaticCapacity=True",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn crds_print_and_check() {
    let out = karpctl(&["crds"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    for name in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
    ] {
        assert!(text.contains(name), "{name}");
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let stale = karpctl(&["crds", "--check", "--repo-root", root]);
    assert_eq!(stale.status.code(), Some(1));
    assert!(stderr(&stale).contains("deploy/crds"), "{}", stderr(&stale));
    let write = karpctl(&["crds", "--write", "--repo-root", root]);
    assert_eq!(write.status.code(), Some(0));
    let fresh = karpctl(&["crds", "--check", "--repo-root", root]);
    assert_eq!(fresh.status.code(), Some(0), "{}", stderr(&fresh));
}

#[test]
fn convert_seed_001() {
    let out = karpctl(&[
        "convert",
        "-f",
        "testdata/seeds/001-provisioner.yaml",
        "--node-role",
        "KarpenterInstanceNodeRole",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("kind: NodePool"));
    assert!(text.contains("kind: EC2NodeClass"));
    assert!(text.contains("role: KarpenterInstanceNodeRole"));
    assert!(stderr(&out).contains("ttlSecondsAfterEmpty"));
}

/// Seed 003's NodePool says `spec.limit`: refused as kubectl's strict
/// field validation refuses it, accepted with a warning under
/// `--validate=warn`, as kubectl's flag does.
#[test]
fn validate_seed_003() {
    let seed = [
        "validate",
        "-f",
        "testdata/seeds/003-nodepool-default.yaml",
        "-f",
        "testdata/seeds/003-ec2nodeclass-default.filled.yaml",
    ];
    let strict = karpctl(&seed);
    assert_eq!(strict.status.code(), Some(2), "{}", stderr(&strict));
    let text = stdout(&strict);
    assert!(
        text.contains("testdata/seeds/003-nodepool-default.yaml: document 1 (NodePool \"default\"): spec.limit: unknown field (did you mean \"spec.limits\"?)"),
        "{text}"
    );
    assert!(text.contains("1 document valid, 1 invalid"), "{text}");

    let warn = karpctl(&[&seed[..], &["--validate=warn"]].concat());
    assert_eq!(
        warn.status.code(),
        Some(0),
        "{}{}",
        stdout(&warn),
        stderr(&warn)
    );
    let text = stdout(&warn);
    assert!(
        text.contains("warning:") && text.contains("spec.limit") && text.contains("spec.limits"),
        "{text}"
    );
    assert!(text.contains("2 documents valid, 0 invalid"), "{text}");
}

#[test]
fn validate_converted_seeds_001_and_002() {
    let converted = karpctl(&[
        "convert",
        "-f",
        "testdata/seeds/001-provisioner.yaml",
        "-f",
        "testdata/seeds/002-nodepool-default.yaml",
        "--node-role",
        "KarpenterInstanceNodeRole",
    ]);
    assert_eq!(converted.status.code(), Some(0), "{}", stderr(&converted));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("converted.yaml");
    std::fs::write(&file, &converted.stdout).unwrap();
    let out = karpctl(&["validate", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("3 documents valid, 0 invalid"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn validate_old_api_versions_need_convert() {
    let out = karpctl(&["validate", "-f", "testdata/seeds/002-nodepool-default.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("karpctl convert"), "{}", stdout(&out));
}

#[test]
fn validate_unreadable_input_exits_2() {
    let out = karpctl(&["validate", "-f", "does/not/exist.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does/not/exist.yaml"));
}

#[test]
fn validate_invalid_manifests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/invalid");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "{} files", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: no # expect: line", file.display()))
            .trim();
        let path = file.to_str().unwrap();
        let out = karpctl(&["validate", "-f", path]);
        let report = stdout(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{path}: {report}{}",
            stderr(&out)
        );
        let named = report.lines().any(|l| {
            l.starts_with(&format!("{path}: document 1 (")) && l.contains(&format!("): {expect}: "))
        });
        assert!(
            named,
            "{path}: expected a violation of {expect}, got:\n{report}"
        );
        assert!(report.contains("0 documents valid, 1 invalid"), "{report}");
    }
}

/// Writes `files` (name, text) into a fresh directory for `-f`.
fn manifests_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

const OPTIONAL_LABEL_CATALOG: &str = r#"kind: InstanceTypeCatalog
instanceTypes:
- name: plain.large
  capacity: {cpu: "2", memory: 8Gi, pods: "29"}
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}
  offerings:
  - {zone: zone-a, capacityType: on-demand, price: 0.1, available: true}
- name: special.large
  capacity: {cpu: "2", memory: 8Gi, pods: "29"}
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux, example.com/special: "yes"}
  offerings:
  - {zone: zone-a, capacityType: on-demand, price: 0.5, available: true}
"#;

/// A NodePool; `weight` 0 leaves the field out (a static pool may not set it).
fn pool(name: &str, weight: u32, extra_metadata: &str, extra_spec: &str) -> String {
    let weight = if weight > 0 {
        format!("  weight: {weight}\n")
    } else {
        String::new()
    };
    format!(
        r#"---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
{extra_metadata}spec:
{weight}{extra_spec}  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      requirements: []
"#
    )
}

fn pending_pod(name: &str, node_affinity: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
{node_affinity}  containers:
  - name: c
    image: nginx
    resources: {{requests: {{cpu: 500m, memory: 1Gi}}}}
"#
    )
}

/// Upstream's "should schedule optional labels", with a catalog as users
/// write it: only one type lists the label, and `Exists` picks that one
/// although it costs more; `DoesNotExist` picks the other.
#[test]
fn plan_exists_on_a_label_only_some_catalog_types_list_picks_those() {
    let requires = |operator: &str| {
        format!(
            "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions:\n          - {{key: example.com/special, operator: {operator}}}\n"
        )
    };
    let pods = pending_pod("wants-it", &requires("Exists"))
        + &pending_pod("avoids-it", &requires("DoesNotExist"));
    let dir = manifests_dir(&[
        ("catalog.yaml", OPTIONAL_LABEL_CATALOG),
        ("pool.yaml", &pool("default", 1, "", "")),
        ("pods.yaml", &pods),
    ]);
    let out = karpctl(&[
        "plan",
        "-f",
        &dir.path().display().to_string(),
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
    let type_of = |pod: &str| {
        plan["nodeClaims"]
            .as_array()
            .expect("claims")
            .iter()
            .find(|c| {
                c["pods"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p == pod))
            })
            .map(|c| {
                let options = c["instanceTypes"].as_array().expect("options");
                assert_eq!(options.len(), 1, "{pod}: {c:#}");
                options[0].as_str().unwrap_or_default().to_owned()
            })
    };
    assert_eq!(
        type_of("default/wants-it").as_deref(),
        Some("special.large"),
        "{plan:#}"
    );
    assert_eq!(
        type_of("default/avoids-it").as_deref(),
        Some("plain.large"),
        "{plan:#}"
    );
}

/// Upstream's "should ignore NodePools that are deleting" and "should not
/// create NodeClaims for StaticNodePool": pending pods get claims only from
/// the pool that is neither, whatever the weights.
#[test]
fn plan_skips_deleting_and_static_node_pools() {
    let deleting = pool(
        "deleting",
        100,
        "  deletionTimestamp: \"2024-05-01T10:00:00Z\"\n  finalizers: [karpenter.sh/termination]\n",
        "",
    );
    let fixed = pool("static", 0, "", "  replicas: 2\n");
    let pods = pending_pod("p", "");
    let out_with = |pools: &[&str]| {
        let dir = manifests_dir(&[
            ("catalog.yaml", OPTIONAL_LABEL_CATALOG),
            ("pools.yaml", &pools.concat()),
            ("pods.yaml", &pods),
        ]);
        let out = karpctl(&[
            "plan",
            "-f",
            &dir.path().display().to_string(),
            "-o",
            "json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let fallback = pool("fallback", 1, "", "");
    let plan = out_with(&[&deleting, &fixed, &fallback]);
    let claims = plan["nodeClaims"].as_array().expect("claims");
    assert_eq!(claims.len(), 1, "{plan:#}");
    assert_eq!(claims[0]["nodePool"], "fallback", "{plan:#}");
    let plan = out_with(&[&deleting, &fixed]);
    assert!(
        plan["nodeClaims"].as_array().is_none_or(Vec::is_empty),
        "{plan:#}"
    );
    assert_eq!(plan["unschedulable"][0]["pod"], "default/p", "{plan:#}");
}

/// `--version` names the version, the commit and the compiler, as every
/// binary of the project does.
#[test]
fn version_names_the_build() {
    let out = karpctl(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let line = stdout(&out);
    assert!(
        line.starts_with(&format!("karpctl {} (commit ", env!("CARGO_PKG_VERSION")))
            && line.contains("rustc "),
        "{line}"
    );
}

/// `karpctl completion SHELL` prints a script that completes the
/// subcommands.
#[test]
fn completion_scripts_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = karpctl(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = stdout(&out);
        for subcommand in ["plan", "disrupt", "validate", "convert", "up"] {
            assert!(script.contains(subcommand), "{shell}: {subcommand}");
        }
    }
    assert_eq!(karpctl(&["completion", "tcsh"]).status.code(), Some(2));
}

fn overlay_doc(name: &str, weight: u32, requirements: &str, setting: &str) -> String {
    format!(
        "---\napiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n  requirements: {requirements}\n  {setting}\n"
    )
}

/// PLAN_CLI.md: with `NodeOverlay` on, prices and the order of instance
/// types use overlaid values; with it off the documents are valid and
/// ignored; an overlay that conflicts applies nowhere and says so.
#[test]
fn plan_prices_instance_types_with_node_overlays_behind_their_gate() {
    let special =
        "[{key: node.kubernetes.io/instance-type, operator: In, values: [special.large]}]";
    let cheap = overlay_doc("reserved-price", 10, special, "price: \"0.01\"");
    let dir = manifests_dir(&[
        ("catalog.yaml", OPTIONAL_LABEL_CATALOG),
        ("pool.yaml", &pool("default", 1, "", "")),
        ("pods.yaml", &pending_pod("p", "")),
        ("overlay.yaml", &cheap),
    ]);
    let plan_with = |gates: &str| {
        let out = karpctl(&[
            "plan",
            "-f",
            &dir.path().display().to_string(),
            "-o",
            "json",
            "--feature-gates",
            gates,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
        (plan["nodeClaims"][0]["cheapest"].clone(), stderr(&out))
    };
    let (cheapest, _) = plan_with("NodeOverlay=true");
    assert_eq!(cheapest["instanceType"], "special.large", "{cheapest}");
    assert_eq!(cheapest["price"], 0.01, "{cheapest}");
    let (cheapest, notices) = plan_with("NodeOverlay=false");
    assert_eq!(cheapest["instanceType"], "plain.large", "{cheapest}");
    assert!(
        notices.contains("NodeOverlay feature gate is off"),
        "{notices}"
    );

    let rival = overlay_doc("rival", 10, "[]", "priceAdjustment: \"+1\"");
    std::fs::write(dir.path().join("rival.yaml"), rival).expect("write");
    let (cheapest, warnings) = plan_with("NodeOverlay=true");
    // "rival" sorts after "reserved-price", goes first and wins; the other
    // of its weight conflicts and applies nowhere.
    assert_eq!(cheapest["instanceType"], "plain.large", "{cheapest}");
    assert!(
        warnings.contains("NodeOverlay \"reserved-price\" is not applied (ValidationSucceeded=False, Conflict: conflict with another overlay)"),
        "{warnings}"
    );
}

#[test]
fn plan_refuses_a_node_overlay_of_a_version_karpenter_does_not_serve() {
    let doc = overlay_doc("o", 1, "[]", "price: \"1\"").replace("v1alpha1", "v1");
    let dir = manifests_dir(&[
        ("overlay.yaml", &doc),
        ("pool.yaml", &pool("default", 1, "", "")),
    ]);
    let out = karpctl(&["plan", "-f", &dir.path().display().to_string()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("kind: karpenter.sh/v1 has no kind \"NodeOverlay\""),
        "{}",
        stderr(&out)
    );
}

/// PLAN_CLI.md: with `StaticCapacity`, plan lists the static NodeClaims a
/// static pool still needs (replicas minus its claims in any state, within
/// `limits.nodes`), with nodePool, the template's labels and no pods.
#[test]
fn plan_lists_the_claims_a_static_pool_still_needs_behind_its_gate() {
    let static_pool = |replicas: u32, limits: &str| {
        pool("fixed", 0, "", &format!("  replicas: {replicas}\n{limits}")).replace(
            "  template:\n",
            "  template:\n    metadata:\n      labels: {team: batch}\n",
        )
    };
    let existing = r#"---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: fixed-abcde
  labels: {karpenter.sh/nodepool: fixed}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
"#;
    let plan = |pool_doc: &str, gates: &str| {
        let dir = manifests_dir(&[
            ("catalog.yaml", OPTIONAL_LABEL_CATALOG),
            ("pool.yaml", pool_doc),
            ("claim.yaml", existing),
        ]);
        let out = karpctl(&[
            "plan",
            "-f",
            &dir.path().display().to_string(),
            "-o",
            "json",
            "--feature-gates",
            gates,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
        plan["nodeClaims"].as_array().expect("claims").clone()
    };
    let claims = plan(&static_pool(3, ""), "StaticCapacity=true");
    assert_eq!(claims.len(), 2, "replicas 3, one claim already: {claims:?}");
    for claim in &claims {
        assert_eq!(claim["nodePool"], "fixed");
        assert_eq!(claim["labels"]["team"], "batch");
        assert_eq!(claim["labels"]["karpenter.sh/nodepool"], "fixed");
        assert_eq!(claim["pods"], json!([]));
    }
    let limited = static_pool(3, "  limits: {nodes: \"2\"}\n");
    assert_eq!(
        plan(&limited, "StaticCapacity=true").len(),
        1,
        "within limits.nodes"
    );
    assert!(
        plan(&static_pool(3, ""), "StaticCapacity=false").is_empty(),
        "gate off"
    );
}

const BUFFERS: &str = r#"---
apiVersion: v1
kind: PodTemplate
metadata: {name: headroom, namespace: default}
template:
  metadata: {labels: {app: headroom}}
  spec:
    containers:
    - {name: c, image: pause, resources: {requests: {cpu: "1", memory: 1Gi}}}
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: headroom, namespace: default}
spec:
  podTemplateRef: {name: headroom}
  replicas: 3
  limits: {cpu: 2500m}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 10
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: c, image: nginx, resources: {requests: {cpu: 500m, memory: 512Mi}}}
---
apiVersion: autoscaling.x-k8s.io/v1alpha1
kind: CapacityBuffer
metadata: {name: web-headroom, namespace: default}
spec:
  scalableRef: {kind: Deployment, name: web}
  percentage: 20
"#;

/// The pods of every node claim a plan lists.
fn claimed_pods(plan: &Value) -> Vec<String> {
    let mut pods: Vec<String> = plan["nodeClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["pods"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    pods.sort();
    pods
}

/// PLAN_CLI's CapacityBuffer input: with the gate, each buffer's virtual
/// pods (sized by replicas capped by limits, or a percentage of its
/// workload; `v1alpha1` read as `v1beta1`) are planned for; without it
/// the buffers are ignored with a notice.
#[test]
fn plan_provisions_capacity_buffers_behind_their_gate() {
    let dir = manifests_dir(&[
        ("pool.yaml", &pool("default", 1, "", "")),
        ("buffers.yaml", BUFFERS),
    ]);
    let plan_with = |gates: &str| {
        let out = karpctl(&[
            "plan",
            "-f",
            &dir.path().display().to_string(),
            "-o",
            "json",
            "--feature-gates",
            gates,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
        (claimed_pods(&plan), stderr(&out))
    };
    let (pods, _) = plan_with("CapacityBuffer=true");
    let buffer_pods: Vec<&String> = pods
        .iter()
        .filter(|p| p.contains("capacity-buffer-"))
        .collect();
    assert_eq!(
        buffer_pods,
        [
            "default/capacity-buffer-headroom-1",
            "default/capacity-buffer-headroom-2",
            "default/capacity-buffer-web-headroom-1",
            "default/capacity-buffer-web-headroom-2",
        ],
        "{pods:?}"
    );
    assert_eq!(pods.len(), 14, "{pods:?}");
    let (pods, notices) = plan_with("CapacityBuffer=false");
    assert_eq!(pods.len(), 10, "{pods:?}");
    assert!(
        notices.contains("2 CapacityBuffer document(s) ignored"),
        "{notices}"
    );
}

#[test]
fn plan_refuses_a_capacity_buffer_its_crd_refuses() {
    let buffer = r#"apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: bad, namespace: default}
spec:
  podTemplateRef: {name: headroom}
"#;
    let dir = manifests_dir(&[("buffer.yaml", buffer)]);
    let out = karpctl(&["plan", "-f", &dir.path().display().to_string()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("If podTemplateRef is set, replicas or limits must also be set"),
        "{}",
        stderr(&out)
    );
}

const SPREAD_WORKLOAD: &str = r#"---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: c, image: nginx, resources: {requests: {cpu: "1", memory: 1Gi}}}
"#;

/// PLAN_CLI's `--scheduler-config`: kube-scheduler's default zonal spread
/// applies to pods without constraints of their own (their selector
/// deduced from the Service and the workload), spreading the Deployment
/// over the zones; a document kube-scheduler would refuse is refused.
#[test]
fn plan_applies_the_scheduler_configs_default_spread() {
    let dir = manifests_dir(&[
        ("pool.yaml", &pool("default", 1, "", "")),
        ("web.yaml", SPREAD_WORKLOAD),
    ]);
    let zones = |extra: &[&str]| {
        let path = dir.path().display().to_string();
        let mut args = vec!["plan", "-f", &path, "-o", "json"];
        args.extend_from_slice(extra);
        let out = karpctl(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
        let mut zones: Vec<String> = plan["nodeClaims"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["cheapest"]["zone"].as_str().map(str::to_owned))
            .collect();
        zones.sort();
        zones.dedup();
        zones.len()
    };
    assert_eq!(zones(&[]), 1);
    let config = "{podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}]}}";
    assert_eq!(zones(&["--scheduler-config", config]), 4);

    let bad = "{podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]}}";
    let out = karpctl(&[
        "plan",
        "-f",
        &dir.path().display().to_string(),
        "--scheduler-config",
        bad,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--scheduler-config: validating scheduler config, podTopologySpread.defaultConstraints[0].labelSelector must not be set"),
        "{}",
        stderr(&out)
    );
}

const VOLUME_CATALOG: &str = r#"kind: InstanceTypeCatalog
instanceTypes:
- name: one-volume.large
  capacity: {cpu: "4", memory: 8Gi, pods: "29"}
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}
  volumeAttachmentLimits: {ebs.csi.aws.com: 1}
  offerings:
  - {zone: zone-a, capacityType: on-demand, price: 0.1, available: true}
- name: many-volumes.large
  capacity: {cpu: "4", memory: 8Gi, pods: "29"}
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux}
  volumeAttachmentLimits: {ebs.csi.aws.com: 25}
  offerings:
  - {zone: zone-a, capacityType: on-demand, price: 0.2, available: true}
"#;

/// Pods with their own claim of an EBS StorageClass.
fn pods_with_claims(names: &[&str]) -> String {
    let mut out = String::from(
        "---\napiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3}\nprovisioner: ebs.csi.aws.com\n",
    );
    for name in names {
        out.push_str(&format!(
            r#"---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data-{name}, namespace: default}}
spec:
  storageClassName: gp3
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
  - {{name: c, image: nginx, resources: {{requests: {{cpu: 100m}}}}}}
  volumes:
  - {{name: data, persistentVolumeClaim: {{claimName: data-{name}}}}}
"#
        ));
    }
    out
}

/// PLAN_CLI's `volumeAttachmentLimits`: a node's options are the types that
/// can attach every volume its pods claim; one pod fits the cheaper type.
#[test]
fn plan_respects_instance_type_volume_attachment_limits() {
    let plan_of = |names: &[&str]| {
        let dir = manifests_dir(&[
            ("catalog.yaml", VOLUME_CATALOG),
            ("pool.yaml", &pool("default", 1, "", "")),
            ("pods.yaml", &pods_with_claims(names)),
        ]);
        let out = karpctl(&[
            "plan",
            "-f",
            &dir.path().display().to_string(),
            "-o",
            "json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let one = plan_of(&["a"]);
    assert_eq!(
        one["nodeClaims"][0]["cheapest"]["instanceType"],
        "one-volume.large"
    );
    let three = plan_of(&["a", "b", "c"]);
    assert_eq!(
        three["nodeClaims"].as_array().map(Vec::len),
        Some(1),
        "{three}"
    );
    assert_eq!(
        three["nodeClaims"][0]["instanceTypes"],
        serde_json::json!(["many-volumes.large"]),
        "{three}"
    );
}
