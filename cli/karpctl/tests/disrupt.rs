//! `karpctl disrupt`: the snapshot it builds for the disruption planner
//! (through the library), its output formats, and the binary end to end.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use karpctl::input::{self, Source};
use karpctl::{example, output, snapshot};
use karpenter_proto::scheduler::v1 as sched;
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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn build(docs: Vec<input::Document>) -> sched::ClusterSnapshot {
    let mut warnings = Vec::new();
    let docs = snapshot::upgrade(docs, &mut warnings).expect("upgrade");
    let mut built = snapshot::build(
        docs,
        karpctl::plan::wall_clock(),
        false,
        &Default::default(),
    )
    .expect("build");
    karpenter_snapshot::fill_from_catalogs(&mut built.snapshot);
    built.snapshot
}

fn snapshot_of(yaml: &str) -> sched::ClusterSnapshot {
    build(
        input::parse_source(&Source {
            name: "test.yaml".into(),
            text: yaml.into(),
        })
        .expect("parse"),
    )
}

fn node<'a>(s: &'a sched::ClusterSnapshot, name: &str) -> &'a sched::StateNode {
    s.nodes
        .iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn disruption(n: &sched::StateNode) -> &sched::NodeClaimDisruptionState {
    n.disruption.as_ref().expect("disruption state")
}

fn seconds(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("time")
        .timestamp()
}

fn ts(rfc3339: &str) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: seconds(rfc3339),
        nanos: 0,
    })
}

// ---------------------------------------------------------------- snapshot

#[test]
fn example_snapshot_has_claims_prices_and_conditions() {
    let s = build(example::documents("consolidation").expect("example"));
    assert_eq!(s.nodes.len(), 6, "one state node per Node (claims merged)");
    assert!(s.pending_pods.is_empty());

    let empty = node(&s, "node-empty");
    assert_eq!(empty.node_claim_name, "default-empty");
    assert_eq!(empty.node_pool, "default");
    assert!(empty.has_node && empty.registered && empty.initialized);
    assert!(!empty.marked_for_deletion && !empty.unschedulable);
    assert_eq!(empty.price, 0.192);
    assert_eq!(
        (
            empty.instance_type.as_str(),
            empty.zone.as_str(),
            empty.capacity_type.as_str()
        ),
        ("m5.xlarge", "us-west-2b", "on-demand")
    );
    assert_eq!(
        empty.creation_timestamp,
        ts("2024-05-01T10:00:00Z"),
        "the NodeClaim's creation, not the Node's"
    );
    let d = disruption(empty);
    assert!(d.consolidatable);
    assert!(d.drifted_reason.is_empty() && d.drifted_time.is_none());
    assert_eq!(d.initialized_time, ts("2024-05-01T10:01:00Z"));
    assert_eq!(d.last_pod_event_time, ts("2024-05-01T10:05:00Z"));
    assert_eq!(d.expiration_time, None, "expireAfter: Never");
    assert!(!d.do_not_disrupt && !d.node_not_ready && !d.disrupting && !d.nominated);

    assert_eq!(node(&s, "node-pdb").price, 0.096);
    let pinned = node(&s, "node-do-not-disrupt");
    assert!(
        !disruption(pinned).do_not_disrupt,
        "the annotation is on the pod"
    );
    let report = &pinned.pods[0];
    assert!(report.do_not_disrupt);
    assert_eq!(report.owner_kind, "Job");
    assert_eq!(report.phase, "Running");

    let web = &node(&s, "node-underused-1").pods[0];
    assert_eq!(web.owner_kind, "ReplicaSet");
    assert!(!web.do_not_disrupt && !web.terminating);

    assert_eq!(s.pod_disruption_budgets.len(), 1);
    let pdb = &s.pod_disruption_budgets[0];
    assert_eq!(
        (pdb.namespace.as_str(), pdb.name.as_str()),
        ("default", "db")
    );
    assert_eq!(pdb.max_unavailable, "0");
    assert_eq!(
        (pdb.disruptions_allowed, pdb.expected_pods),
        (0, 1),
        "computed: one healthy pod, none may be unavailable"
    );
}

const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: []
      expireAfter: 48h
"#;

fn claim(name: &str, extra_spec: &str, metadata: &str, status: &str) -> String {
    format!(
        r#"---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {name}
  creationTimestamp: "2024-05-01T00:00:00Z"
  labels: {{karpenter.sh/nodepool: default}}
{metadata}
spec:
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements: []
{extra_spec}
status:
  nodeName: {name}
{status}
"#
    )
}

fn plain_node(name: &str, metadata: &str, rest: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Node
metadata:
  name: {name}
  creationTimestamp: "2024-05-01T00:01:00Z"
  labels: {{karpenter.sh/nodepool: default}}
{metadata}
{rest}
"#
    )
}

#[test]
fn expiration_from_expire_after_or_the_pool() {
    let mut yaml = POOL.to_string();
    for (name, spec) in [
        ("own", "  expireAfter: 24h"),
        ("from-pool", ""),
        ("never", "  expireAfter: Never"),
    ] {
        yaml.push_str(&plain_node(name, "", ""));
        yaml.push_str(&claim(name, spec, "", ""));
    }
    let s = snapshot_of(&yaml);
    let created = seconds("2024-05-01T00:00:00Z");
    let expires = |n: &str| {
        disruption(node(&s, n))
            .expiration_time
            .as_ref()
            .map(|t| t.seconds - created)
    };
    assert_eq!(expires("own"), Some(24 * 3600));
    assert_eq!(expires("from-pool"), Some(48 * 3600));
    assert_eq!(expires("never"), None);

    // A pool that never expires: a claim without expireAfter does not either.
    let yaml = POOL.replace("expireAfter: 48h", "expireAfter: Never")
        + &plain_node("n", "", "")
        + &claim("n", "", "", "");
    assert_eq!(
        disruption(node(&snapshot_of(&yaml), "n")).expiration_time,
        None
    );
}

#[test]
fn do_not_disrupt_on_node_unregistered_claim_or_pod() {
    let dnd = "  annotations: {karpenter.sh/do-not-disrupt: \"true\"}";
    let mut yaml = POOL.to_string();
    yaml += &plain_node("on-node", dnd, "");
    yaml += &claim("on-node", "", "", "");
    yaml += &plain_node("on-claim", "", "");
    yaml += &claim("on-claim", "", dnd, "");
    // Not registered yet: the claim's annotation still decides.
    yaml += &plain_node(
        "on-claim-unregistered",
        "",
        "spec:\n  taints: [{key: karpenter.sh/unregistered, effect: NoExecute}]",
    );
    yaml += &claim("on-claim-unregistered", "", dnd, "");
    yaml += &plain_node("neither", "", "");
    yaml += &claim("neither", "", "", "");
    yaml += &plain_node(
        "false-value",
        "  annotations: {karpenter.sh/do-not-disrupt: \"false\"}",
        "",
    );
    yaml += r#"---
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: default
  annotations:
    karpenter.sh/do-not-disrupt: "true"
    controller.kubernetes.io/pod-deletion-cost: "-5"
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: rs, controller: true}
  deletionTimestamp: "2024-05-01T01:00:00Z"
spec:
  nodeName: neither
  priority: 1000
  containers: [{name: c}]
status: {phase: Running}
"#;
    let s = snapshot_of(&yaml);
    assert!(disruption(node(&s, "on-node")).do_not_disrupt);
    // Karpenter's StateNode: once the Node is registered its annotations
    // decide, so a claim's copy of the pool template's annotation does not
    // keep the node after `kubectl annotate node ... do-not-disrupt-`.
    assert!(!disruption(node(&s, "on-claim")).do_not_disrupt);
    assert!(disruption(node(&s, "on-claim-unregistered")).do_not_disrupt);
    assert!(!disruption(node(&s, "neither")).do_not_disrupt);
    assert!(!disruption(node(&s, "false-value")).do_not_disrupt);
    let pod = &node(&s, "neither").pods[0];
    assert!(pod.do_not_disrupt && pod.terminating);
    assert_eq!(
        (pod.owner_kind.as_str(), pod.deletion_cost, pod.priority),
        ("ReplicaSet", -5, 1000)
    );
}

#[test]
fn conditions_taints_and_deletion() {
    let mut yaml = POOL.to_string();
    // Drifted, with the reason and time, and a claim being deleted.
    yaml += &plain_node("drifted", "", "");
    yaml += &claim(
        "drifted",
        "  terminationGracePeriod: 1h",
        "  annotations: {karpenter.sh/nodepool-hash: \"12345\"}\n  deletionTimestamp: \"2024-05-02T00:00:00Z\"",
        r#"  conditions:
  - {type: Drifted, status: "True", reason: NodePoolDrifted, lastTransitionTime: "2024-05-01T05:00:00Z"}
  - {type: Initialized, status: "True", lastTransitionTime: "2024-05-01T00:02:00Z"}
  - {type: Consolidatable, status: "False", lastTransitionTime: "2024-05-01T00:02:00Z"}
  - {type: InstanceTerminating, status: "True", lastTransitionTime: "2024-05-02T00:01:00Z"}"#,
    );
    // Not initialized according to the claim; NotReady; being disrupted.
    yaml += &plain_node(
        "starting",
        "",
        r#"spec:
  taints: [{key: karpenter.sh/disrupted, effect: NoSchedule}]
status:
  conditions: [{type: Ready, status: "False"}]"#,
    );
    yaml += &claim(
        "starting",
        "",
        "",
        r#"  conditions: [{type: Initialized, status: "False", lastTransitionTime: "2024-05-01T00:00:00Z"}, {type: Drifted, status: "False", reason: NotDrifted, lastTransitionTime: "2024-05-01T00:00:00Z"}]"#,
    );
    // The initialized label wins over a missing condition; no status: ready.
    yaml += &plain_node("labelled", "  annotations: {}", "").replace(
        "labels: {karpenter.sh/nodepool: default}",
        "labels: {karpenter.sh/nodepool: default, karpenter.sh/initialized: \"true\"}",
    );
    yaml += &claim("labelled", "", "", "");
    // A claim whose node has not registered yet.
    yaml += &claim("in-flight", "", "", "").replace("  nodeName: in-flight\n", "");

    let s = snapshot_of(&yaml);
    let drifted = node(&s, "drifted");
    let d = disruption(drifted);
    assert_eq!(d.drifted_reason, "NodePoolDrifted");
    assert_eq!(d.drifted_time, ts("2024-05-01T05:00:00Z"));
    assert_eq!(d.initialized_time, ts("2024-05-01T00:02:00Z"));
    assert!(!d.consolidatable);
    assert_eq!(d.node_pool_hash, "12345");
    assert_eq!(
        d.termination_grace_period,
        Some(prost_types::Duration {
            seconds: 3600,
            nanos: 0
        })
    );
    assert!(
        drifted.marked_for_deletion,
        "deletionTimestamp on the claim"
    );
    assert!(drifted.initialized && !d.node_not_ready);
    assert!(
        d.instance_terminating,
        "InstanceTerminating=True on the claim"
    );

    let starting = node(&s, "starting");
    let d = disruption(starting);
    assert!(!starting.initialized, "Initialized=False on the claim");
    assert!(d.node_not_ready && d.disrupting);
    assert!(d.drifted_reason.is_empty() && d.initialized_time.is_none());
    assert!(!d.instance_terminating);

    let labelled = node(&s, "labelled");
    assert!(labelled.initialized && !disruption(labelled).node_not_ready);

    let in_flight = node(&s, "in-flight");
    assert_eq!(in_flight.node_claim_name, "in-flight");
    assert!(!in_flight.has_node && !in_flight.registered && !in_flight.initialized);
    assert_eq!(in_flight.creation_timestamp, ts("2024-05-01T00:00:00Z"));
}

fn pods_and_pdb(pdb_spec: &str, pdb_status: &str) -> sched::PodDisruptionBudget {
    let mut yaml = plain_node("n", "", "");
    let pod = |name: &str, ns: &str, labels: &str, bound: bool, phase: &str, deleting: bool| {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {labels}\n{}spec:\n  {}containers: [{{name: c}}]\n{}",
            if deleting {
                "  deletionTimestamp: \"2024-05-01T00:00:00Z\"\n"
            } else {
                ""
            },
            if bound { "nodeName: n\n  " } else { "" },
            if phase.is_empty() {
                String::new()
            } else {
                format!("status: {{phase: {phase}}}\n")
            }
        )
    };
    yaml += &pod("a", "db", "{app: db}", true, "Running", false);
    yaml += &pod("b", "db", "{app: db}", true, "", false);
    yaml += &pod("c", "db", "{app: db}", true, "Running", false);
    yaml += &pod("d", "db", "{app: db}", true, "Pending", false); // not healthy
    yaml += &pod("e", "db", "{app: db}", false, "", false); // pending: not healthy
    yaml += &pod("f", "db", "{app: db}", true, "Running", true); // terminating: neither
    yaml += &pod("g", "other", "{app: db}", true, "Running", false); // other namespace
    yaml += &pod("h", "db", "{app: web}", true, "Running", false); // not selected
    yaml += &format!(
        "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: db, namespace: db}}\nspec:\n  selector: {{matchLabels: {{app: db}}}}\n{pdb_spec}\n{pdb_status}\n"
    );
    let s = snapshot_of(&yaml);
    s.pod_disruption_budgets[0].clone()
}

#[test]
fn pdb_disruptions_allowed_is_computed_from_the_pods() {
    // 5 expected (a-e), 3 healthy (a-c).
    let allowed = |spec: &str| {
        let pdb = pods_and_pdb(spec, "");
        assert_eq!(pdb.expected_pods, 5, "{spec}");
        pdb.disruptions_allowed
    };
    assert_eq!(allowed("  minAvailable: 2"), 1);
    assert_eq!(allowed("  minAvailable: 3"), 0);
    assert_eq!(allowed("  minAvailable: 5"), 0, "never below 0");
    assert_eq!(allowed("  minAvailable: \"50%\""), 0, "ceil(2.5) = 3");
    assert_eq!(allowed("  minAvailable: \"40%\""), 1, "2 must stay");
    assert_eq!(allowed("  maxUnavailable: 0"), 0);
    assert_eq!(allowed("  maxUnavailable: 2"), 0, "3 healthy - (5 - 2)");
    assert_eq!(allowed("  maxUnavailable: 3"), 1);
    assert_eq!(
        allowed("  maxUnavailable: \"50%\""),
        1,
        "ceil(2.5) = 3 may be down"
    );
    assert_eq!(allowed("  maxUnavailable: \"100%\""), 3);
    assert_eq!(allowed("  unhealthyPodEvictionPolicy: AlwaysAllow"), 3);

    // A status in the manifest is taken as given.
    let pdb = pods_and_pdb(
        "  minAvailable: 5",
        "status: {disruptionsAllowed: 2, expectedPods: 7}",
    );
    assert_eq!((pdb.disruptions_allowed, pdb.expected_pods), (2, 7));
    assert_eq!(
        pods_and_pdb("  maxUnavailable: 1", "").unhealthy_pod_eviction_policy,
        "IfHealthyBudget"
    );
}

#[test]
fn pdb_int_or_percent_rounds_up() {
    assert_eq!(karpenter_snapshot::int_or_percent("3", 10), Some(3));
    assert_eq!(karpenter_snapshot::int_or_percent("34%", 10), Some(4));
    assert_eq!(karpenter_snapshot::int_or_percent("0%", 10), Some(0));
    assert_eq!(karpenter_snapshot::int_or_percent("x", 10), None);
    assert_eq!(karpenter_snapshot::int_or_percent("-1", 10), None);
}

#[test]
fn bad_pdb_names_file_document_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pdb.yaml");
    std::fs::write(
        &path,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: db}\nspec:\n  minAvailable: lots\n",
    )
    .expect("write");
    let o = karpctl(&["disrupt", "-f", &path.display().to_string(), "-o", "json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("pdb.yaml: document 1 (PodDisruptionBudget \"db\")")
            && e.contains("spec.minAvailable"),
        "{e}"
    );
}

#[test]
fn bad_now_exits_2_naming_the_flag() {
    let o = karpctl(&["disrupt", "--example", "consolidation", "--now", "tomorrow"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--now"), "{}", stderr(&o));
}

#[test]
fn example_files_on_disk_match_the_embedded_ones() {
    let files = example::files("consolidation").expect("example");
    assert_eq!(files.len(), 4);
    for (path, text) in files {
        let on_disk = std::fs::read_to_string(repo_root().join(path)).expect(path);
        assert_eq!(on_disk, text, "{path}");
    }
    assert!(
        repo_root()
            .join("deploy/examples/consolidation/README.md")
            .exists()
    );
}

// ------------------------------------------------------------------ output

fn response() -> sched::PlanDisruptionResponse {
    sched::PlanDisruptionResponse {
        commands: vec![
            sched::DisruptionCommand {
                reason: sched::DisruptionReason::Empty as i32,
                method: sched::DisruptionMethod::Emptiness as i32,
                candidates: vec!["node-empty".into()],
                replacements: vec![],
                savings_per_hour: 0.192,
                placements: vec![],
                balanced_scores: vec![],
                ..Default::default()
            },
            sched::DisruptionCommand {
                reason: sched::DisruptionReason::Underutilized as i32,
                method: sched::DisruptionMethod::MultiNodeConsolidation as i32,
                candidates: vec!["node-b".into(), "node-a".into()],
                replacements: vec![sched::NodeClaimPlan {
                    node_pool: "default".into(),
                    instance_types: vec!["m5.large".into(), "m5.xlarge".into()],
                    cheapest: Some(sched::OfferingChoice {
                        instance_type: "m5.large".into(),
                        zone: "us-west-2a".into(),
                        capacity_type: "on-demand".into(),
                        price: 0.096,
                    }),
                    pods: vec![
                        sched::PodRef {
                            namespace: "default".into(),
                            name: "web-1".into(),
                            uid: String::new(),
                        },
                        sched::PodRef {
                            namespace: "default".into(),
                            name: "web-0".into(),
                            uid: String::new(),
                        },
                    ],
                    ..Default::default()
                }],
                savings_per_hour: 0.288_000_000_1,
                placements: vec![],
                balanced_scores: vec![],
                ..Default::default()
            },
        ],
        blocked: vec![sched::BlockedCandidate {
            node: "node-c".into(),
            reason: "pod default/db-0 has karpenter.sh/do-not-disrupt".into(),
        }],
        repair_blocked: vec![],
        cost: Some(sched::ClusterCost {
            before: 0.96,
            after: 0.48,
            lower_bound: 0.3,
            ..Default::default()
        }),
        candidates_evaluated: 6,
        rejected: vec![],
        unconsolidatable: vec![],
        rejected_moves: vec![],
        deletion_costs: vec![],
        pool_budgets: vec![],
    }
}

#[test]
fn disrupt_json_shape() {
    let v = output::disrupt_value(&response());
    let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["commands", "blocked", "cost", "candidatesEvaluated"]);
    let first: Vec<&String> = v["commands"][0]
        .as_object()
        .expect("object")
        .keys()
        .collect();
    assert_eq!(
        first,
        [
            "reason",
            "method",
            "candidates",
            "replacements",
            "savingsPerHour"
        ]
    );
    assert_eq!(
        v["commands"][0],
        json!({"reason": "Empty", "method": "Emptiness", "candidates": ["node-empty"],
               "replacements": [], "savingsPerHour": 0.192})
    );
    let second = &v["commands"][1];
    assert_eq!(second["reason"], "Underutilized");
    assert_eq!(second["method"], "MultiNodeConsolidation");
    assert_eq!(
        second["candidates"],
        json!(["node-b", "node-a"]),
        "the planner's order"
    );
    assert_eq!(second["savingsPerHour"], json!(0.288), "rounded");
    // Replacements have exactly the shape of plan's node claims.
    let plan = output::plan_value(&sched::SolveResponse {
        node_claims: response().commands[1].replacements.clone(),
        ..Default::default()
    });
    assert_eq!(second["replacements"][0], plan["nodeClaims"][0]);
    assert_eq!(
        second["replacements"][0]["pods"],
        json!(["default/web-0", "default/web-1"])
    );
    assert_eq!(
        v["blocked"],
        json!([{"node": "node-c", "reason": "pod default/db-0 has karpenter.sh/do-not-disrupt"}])
    );
    assert_eq!(
        v["cost"],
        json!({"beforePerHour": 0.96, "afterPerHour": 0.48, "lowerBoundPerHour": 0.3})
    );
    assert_eq!(v["candidatesEvaluated"], json!(6));

    let text = output::render_as(&v, output::Format::Json, output::disrupt_table).expect("json");
    assert!(text.starts_with("{\n  \"commands\": [\n"), "{text}");
    assert!(text.ends_with("}\n"));
    let yaml = output::render_as(&v, output::Format::Yaml, output::disrupt_table).expect("yaml");
    let back: Value = serde_yaml::from_str(&yaml).expect("yaml parses");
    assert_eq!(back, v, "YAML has the same structure");
}

#[test]
fn disrupt_table_rows() {
    let t = output::disrupt_table(&output::disrupt_value(&response()));
    let lines: Vec<&str> = t.lines().collect();
    assert!(
        lines[0].starts_with("REASON") && lines[0].contains("SAVINGS/H"),
        "{t}"
    );
    assert!(
        lines[1].starts_with("Empty") && lines[1].contains("Emptiness"),
        "{t}"
    );
    assert!(
        lines[1].contains("node-empty") && lines[1].contains(" - "),
        "{t}"
    );
    assert!(
        lines[2].contains("node-b, node-a") && lines[2].contains("m5.large"),
        "{t}"
    );
    assert!(lines[2].contains("0.2880"), "{t}");
    assert!(
        t.contains("BLOCKED NODE") && t.contains("node-c") && t.contains("do-not-disrupt"),
        "{t}"
    );
    assert!(
        t.contains("before 0.9600")
            && t.contains("after 0.4800")
            && t.contains("lower bound 0.3000"),
        "{t}"
    );

    let none = output::disrupt_table(&output::disrupt_value(
        &sched::PlanDisruptionResponse::default(),
    ));
    assert!(none.starts_with("No disruption.\n"), "{none}");
}

// ------------------------------------------------------------- end to end

fn disrupt_json(args: &[&str]) -> Value {
    let o = karpctl(args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("json")
}

fn commands_with(v: &Value, reason: &str) -> Vec<Vec<String>> {
    v["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .filter(|c| c["reason"] == reason)
        .map(|c| {
            c["candidates"]
                .as_array()
                .expect("candidates")
                .iter()
                .map(|n| n.as_str().expect("name").to_string())
                .collect()
        })
        .collect()
}

#[test]
fn example_consolidation_end_to_end() {
    let v = disrupt_json(&["disrupt", "--example", "consolidation", "-o", "json"]);
    assert_eq!(
        commands_with(&v, "Empty"),
        [["node-empty"]],
        "the empty node is deleted: {v:#}"
    );
    let empty = &v["commands"][0];
    assert_eq!(empty["method"], "Emptiness");
    assert_eq!(empty["replacements"], json!([]));

    let underutilized = commands_with(&v, "Underutilized");
    let consolidated: Vec<&String> = underutilized.iter().flatten().collect();
    assert_eq!(
        consolidated,
        ["node-underused-1", "node-underused-2", "node-underused-3"],
        "{v:#}"
    );
    for node in [
        "node-empty",
        "node-underused-1",
        "node-do-not-disrupt",
        "node-pdb",
    ] {
        let times = v["commands"]
            .as_array()
            .expect("commands")
            .iter()
            .flat_map(|c| c["candidates"].as_array().expect("candidates"))
            .filter(|n| *n == node)
            .count();
        let expected = usize::from(!node.contains("do-not-disrupt") && node != "node-pdb");
        assert_eq!(times, expected, "{node}: {v:#}");
    }

    let blocked: Vec<(String, String)> = v["blocked"]
        .as_array()
        .expect("blocked")
        .iter()
        .map(|b| {
            (
                b["node"].as_str().expect("node").to_string(),
                b["reason"].as_str().expect("reason").to_string(),
            )
        })
        .collect();
    let reason_of = |node: &str| {
        blocked
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{node} is not blocked: {v:#}"))
    };
    let dnd = reason_of("node-do-not-disrupt");
    assert!(
        dnd.contains("karpenter.sh/do-not-disrupt") && dnd.contains("report-28571230-h5v2n"),
        "{dnd}"
    );
    let pdb = reason_of("node-pdb");
    assert!(pdb.contains("default/db"), "{pdb}");

    let before = v["cost"]["beforePerHour"].as_f64().expect("before");
    let after = v["cost"]["afterPerHour"].as_f64().expect("after");
    let lower = v["cost"]["lowerBoundPerHour"]
        .as_f64()
        .expect("lower bound");
    assert_eq!(before, 0.96);
    assert!(lower <= after && after < before, "{v:#}");
    let saved: f64 = v["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c["savingsPerHour"].as_f64().expect("savings"))
        .sum();
    assert!((before - saved - after).abs() < 1e-6, "{v:#}");
    assert!(v["candidatesEvaluated"].as_i64().expect("count") >= 4);
}

#[test]
fn example_output_is_byte_identical_across_runs_and_sources() {
    let args = ["disrupt", "--example", "consolidation", "-o", "json"];
    let first = karpctl(&args);
    let second = karpctl(&args);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(first.stdout, second.stdout);
    let from_files = karpctl(&[
        "disrupt",
        "-f",
        "deploy/examples/consolidation",
        "-o",
        "json",
        "--now",
        "2030-01-01T00:00:00Z",
    ]);
    assert_eq!(from_files.status.code(), Some(0), "{}", stderr(&from_files));
    assert_eq!(first.stdout, from_files.stdout, "nothing in it expires");
}

#[test]
fn example_table_and_yaml() {
    let o = karpctl(&["disrupt", "--example", "consolidation", "-o", "table"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.starts_with("REASON"), "{t}");
    assert!(t.contains("Emptiness") && t.contains("node-empty"), "{t}");
    assert!(t.contains("BLOCKED NODE") && t.contains("node-pdb"), "{t}");
    assert!(t.contains("before 0.9600"), "{t}");

    let yaml = karpctl(&["disrupt", "--example", "consolidation", "-o", "yaml"]);
    assert_eq!(yaml.status.code(), Some(0), "{}", stderr(&yaml));
    let from_yaml: Value = serde_yaml::from_slice(&yaml.stdout).expect("yaml");
    let json = disrupt_json(&["disrupt", "--example", "consolidation", "-o", "json"]);
    assert_eq!(from_yaml, json);
}

#[test]
fn now_decides_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in example::files("consolidation").expect("example") {
        let name = Path::new(path).file_name().expect("file name");
        let text = if path.ends_with("nodes.yaml") {
            text.replace("expireAfter: Never", "expireAfter: 24h")
        } else {
            text.to_string()
        };
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let dir = dir.path().display().to_string();
    let before = disrupt_json(&[
        "disrupt",
        "-f",
        &dir,
        "-o",
        "json",
        "--now",
        "2024-05-01T12:00:00Z",
    ]);
    assert!(commands_with(&before, "Expired").is_empty(), "{before:#}");
    let after = disrupt_json(&[
        "disrupt",
        "-f",
        &dir,
        "-o",
        "json",
        "--now",
        "2024-05-02T10:00:01Z",
    ]);
    let mut expired: Vec<String> = commands_with(&after, "Expired")
        .into_iter()
        .flatten()
        .collect();
    expired.sort();
    assert_eq!(
        expired,
        [
            "node-do-not-disrupt",
            "node-empty",
            "node-pdb",
            "node-underused-1",
            "node-underused-2",
            "node-underused-3"
        ],
        "expiration is forceful: {after:#}"
    );
}

/// The consolidation example with the `report` pod's do-not-disrupt
/// annotation set to `value` and its start time to `start` (none: the
/// field is left out), written to a directory `disrupt` can read.
fn example_with_report_annotation(value: &str, start: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = repo_root().join("deploy/examples/consolidation");
    for file in ["catalog.yaml", "nodepool.yaml", "nodes.yaml", "pods.yaml"] {
        let mut text = std::fs::read_to_string(example.join(file)).expect("example file");
        if file == "pods.yaml" {
            let (before, after) = text
                .split_once("    karpenter.sh/do-not-disrupt: \"true\"")
                .expect("the report pod's annotation");
            let (report, rest) = after
                .split_once("status:\n  phase: Running\n")
                .expect("status");
            let start = start
                .map(|s| format!("  startTime: \"{s}\"\n"))
                .unwrap_or_default();
            text = format!(
                "{before}    karpenter.sh/do-not-disrupt: \"{value}\"{report}status:\n  phase: Running\n{start}{rest}"
            );
        }
        std::fs::write(dir.path().join(file), text).expect("write");
    }
    dir
}

/// Whether node-do-not-disrupt is blocked by its pod's annotation, and
/// whether some command takes it, when disruption is planned at `now`.
fn report_node_at(dir: &tempfile::TempDir, now: &str) -> (bool, bool) {
    let path = dir.path().display().to_string();
    let v = disrupt_json(&["disrupt", "-f", &path, "--now", now, "-o", "json"]);
    let blocked = v["blocked"].as_array().expect("blocked").iter().any(|b| {
        b["node"] == "node-do-not-disrupt"
            && b["reason"]
                .as_str()
                .is_some_and(|r| r.contains("karpenter.sh/do-not-disrupt"))
    });
    let taken = v["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .flat_map(|c| c["candidates"].as_array().expect("candidates"))
        .any(|n| n == "node-do-not-disrupt");
    (blocked, taken)
}

/// Upstream's duration-valued `karpenter.sh/do-not-disrupt` (v1.12+,
/// `IsDoNotDisruptActive`): a pod protects its node until its start time
/// plus the duration; after that the node is consolidated like any other;
/// a value that is not a positive duration does not protect; a pod whose
/// start time is unknown stays protected.
#[test]
fn do_not_disrupt_duration_protects_until_the_pod_is_that_old() {
    let started = "2024-05-01T10:05:00Z";
    let hour = example_with_report_annotation("1h", Some(started));
    assert_eq!(
        report_node_at(&hour, "2024-05-01T10:35:00Z"),
        (true, false),
        "30 minutes after the start, 1h protects"
    );
    assert_eq!(
        report_node_at(&hour, "2024-05-01T12:00:00Z"),
        (false, true),
        "two hours after the start, 1h has passed: the node is consolidated"
    );
    let unknown_start = example_with_report_annotation("1h", None);
    assert_eq!(
        report_node_at(&unknown_start, "2024-05-01T12:00:00Z"),
        (true, false),
        "without a start time the pod stays protected"
    );
    for value in ["soon", "-5m", "0s"] {
        let bad = example_with_report_annotation(value, Some(started));
        assert_eq!(
            report_node_at(&bad, "2024-05-01T10:35:00Z"),
            (false, true),
            "{value:?} is not a positive duration: no protection"
        );
    }
}

/// A drifted m5.xlarge node of a pool that never consolidates (only drift
/// can take it), running one pod per entry of `annotations`, each started at
/// `started` with that do-not-disrupt value; written with the consolidation
/// example's catalog to a directory `disrupt` can read.
fn drifted_node_with_pods(annotations: &[&str], started: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = repo_root().join("deploy/examples/consolidation/catalog.yaml");
    std::fs::copy(catalog, dir.path().join("catalog.yaml")).expect("catalog");
    let mut text = String::from(
        r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements:
      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: Never
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: Never
    budgets: [{nodes: "100%"}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: drift}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: drift}}]
  role: KarpenterNodeRole-drift
---
apiVersion: v1
kind: Node
metadata:
  name: node-drifted
  creationTimestamp: "2024-05-01T10:00:30Z"
  labels:
    karpenter.sh/nodepool: default
    karpenter.sh/initialized: "true"
    karpenter.sh/registered: "true"
    karpenter.sh/capacity-type: on-demand
    karpenter.k8s.aws/instance-family: m5
    node.kubernetes.io/instance-type: m5.xlarge
    topology.kubernetes.io/zone: us-west-2a
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
spec:
  providerID: aws:///us-west-2a/i-0d000000000000001
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "58"}
  allocatable: {cpu: 3920m, memory: 15491Mi, pods: "58"}
  conditions:
  - {type: Ready, status: "True", lastTransitionTime: "2024-05-01T10:01:00Z"}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-drifted
  creationTimestamp: "2024-05-01T10:00:00Z"
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: m5.xlarge
    topology.kubernetes.io/zone: us-west-2a
    karpenter.sh/capacity-type: on-demand
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}
  expireAfter: Never
status:
  nodeName: node-drifted
  providerID: aws:///us-west-2a/i-0d000000000000001
  conditions:
  - {type: Launched, status: "True", reason: Launched, lastTransitionTime: "2024-05-01T10:00:10Z"}
  - {type: Registered, status: "True", reason: Registered, lastTransitionTime: "2024-05-01T10:00:40Z"}
  - {type: Initialized, status: "True", reason: Initialized, lastTransitionTime: "2024-05-01T10:01:00Z"}
  - {type: Drifted, status: "True", reason: NodeClassDrifted, lastTransitionTime: "2024-05-01T10:02:00Z"}
"#,
    );
    for (i, value) in annotations.iter().enumerate() {
        text.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata:
  name: app-{i}
  namespace: default
  annotations: {{karpenter.sh/do-not-disrupt: "{value}"}}
  ownerReferences:
  - {{apiVersion: apps/v1, kind: ReplicaSet, name: app, controller: true, uid: app-uid}}
spec:
  nodeName: node-drifted
  containers:
  - name: main
    image: public.ecr.aws/docker/library/nginx:1.27
    resources:
      requests: {{cpu: 500m, memory: 1Gi}}
status:
  phase: Running
  startTime: "{started}"
"#
        ));
    }
    std::fs::write(dir.path().join("cluster.yaml"), text).expect("write");
    dir
}

/// Whether a drift command takes node-drifted when planned at `now`.
fn drifted_at(dir: &tempfile::TempDir, now: &str) -> bool {
    let path = dir.path().display().to_string();
    let v = disrupt_json(&["disrupt", "-f", &path, "--now", now, "-o", "json"]);
    commands_with(&v, "Drifted")
        .iter()
        .flatten()
        .any(|n| n == "node-drifted")
}

/// Upstream's drift suite: "should not drift nodes with pods that have a
/// duration-based do-not-disrupt annotation that is still active", "should
/// drift nodes with pods that have an invalid do-not-disrupt annotation
/// format", and "should not drift nodes until the longest duration-based
/// do-not-disrupt grace period expires across multiple pods".
#[test]
fn duration_do_not_disrupt_holds_drift_until_the_longest_has_passed() {
    let started = "2024-05-01T10:10:00Z";
    let one = drifted_node_with_pods(&["2m"], started);
    assert!(!drifted_at(&one, "2024-05-01T10:11:00Z"), "inside 2m");
    assert!(
        drifted_at(&one, "2024-05-01T10:13:00Z"),
        "3m later: drifted"
    );

    let invalid = drifted_node_with_pods(&["invalid-format"], started);
    assert!(
        drifted_at(&invalid, "2024-05-01T10:10:30Z"),
        "an invalid value does not protect"
    );

    let both = drifted_node_with_pods(&["1m", "3m"], started);
    assert!(!drifted_at(&both, "2024-05-01T10:10:30Z"), "both active");
    assert!(
        !drifted_at(&both, "2024-05-01T10:12:00Z"),
        "1m has passed, 3m has not"
    );
    assert!(
        drifted_at(&both, "2024-05-01T10:14:00Z"),
        "past the longest: drifted"
    );
}

/// Upstream's static drift: a static pool's drifted node is replaced by the
/// pool's template (one node, no pods, the provider picks the type), where
/// a dynamic pool's empty drifted node is only deleted.
#[test]
fn a_static_pools_drifted_node_is_replaced_by_its_template() {
    let dir = drifted_node_with_pods(&[], "2024-05-01T10:10:00Z");
    let path = dir.path().join("cluster.yaml");
    let dynamic = std::fs::read_to_string(&path).expect("read");
    let plan = |text: &str| {
        std::fs::write(&path, text).expect("write");
        let dir = dir.path().display().to_string();
        disrupt_json(&[
            "disrupt",
            "-f",
            &dir,
            "--now",
            "2024-05-01T11:00:00Z",
            "-o",
            "json",
        ])
    };
    let v = plan(&dynamic);
    let command = &v["commands"][0];
    assert_eq!(command["candidates"], json!(["node-drifted"]), "{v}");
    assert_eq!(command["replacements"], json!([]), "empty: deleted");

    let fixed = dynamic.replacen("spec:\n  template:", "spec:\n  replicas: 1\n  template:", 1);
    assert_ne!(fixed, dynamic);
    let v = plan(&fixed);
    let commands = v["commands"].as_array().expect("commands");
    assert_eq!(commands.len(), 1, "{v}");
    assert_eq!(commands[0]["reason"], "Drifted");
    assert_eq!(commands[0]["method"], "StaticDrift");
    assert_eq!(commands[0]["candidates"], json!(["node-drifted"]));
    let replacement = &commands[0]["replacements"][0];
    assert_eq!(replacement["nodePool"], "default");
    assert_eq!(replacement["pods"], json!([]));
    assert_eq!(replacement["instanceTypes"], json!([]), "{replacement}");
}
