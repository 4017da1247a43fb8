//! `kubectl` (the real one, v1.32) against the Kubernetes API test server.
//! These fail, not skip, when kubectl is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::repo_root;
use local_apiserver::{Config, LocalApiServer};

struct Cluster {
    server: LocalApiServer,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

async fn cluster() -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let server = LocalApiServer::start(Config {
        kubeconfig: Some(kubeconfig.clone()),
        ..Config::default()
    })
    .await
    .expect("server starts");
    Cluster {
        server,
        _dir: dir,
        kubeconfig,
    }
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn kubectl(kc: &Path, args: &[&str]) -> Out {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .args(args)
        .output()
        .expect("kubectl must be installed (/usr/bin/kubectl)");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs kubectl on a blocking thread (the server runs on this runtime).
async fn k(c: &Cluster, args: &[&str]) -> Out {
    let kc = c.kubeconfig.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl(&kc, &refs)
    })
    .await
    .expect("kubectl thread")
}

async fn ok(c: &Cluster, args: &[&str]) -> String {
    let o = k(c, args).await;
    assert!(o.ok, "kubectl {args:?} failed: {}{}", o.stdout, o.stderr);
    o.stdout
}

fn path(rel: &str) -> String {
    repo_root().join(rel).display().to_string()
}

fn write_cm(c: &Cluster, name: &str) -> String {
    let f = c._dir.path().join(format!("{name}.yaml"));
    std::fs::write(
        &f,
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: \"1\"\n"),
    )
    .expect("write");
    f.display().to_string()
}

/// Seed 003's NodePool, which only passes with `--validate=false` (see
/// testdata/seeds/README.md: `limit:` is kept as the user wrote it).
async fn apply_seed_nodepool(c: &Cluster) {
    ok(
        c,
        &[
            "apply",
            "--validate=false",
            "-f",
            &path("testdata/seeds/003-nodepool-default.yaml"),
        ],
    )
    .await;
}

async fn with_crds(c: &Cluster) {
    ok(c, &["apply", "-f", &path("deploy/crds")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_crds_and_seed_003_and_prints_columns_and_explains() {
    let c = cluster().await;
    with_crds(&c).await;
    let out = ok(&c, &["get", "crds"]).await;
    assert!(out.contains("nodepools.karpenter.sh"), "{out}");
    ok(
        &c,
        &[
            "apply",
            "-f",
            &path("testdata/seeds/003-ec2nodeclass-default.filled.yaml"),
        ],
    )
    .await;
    // The seed's `limit:` (for `limits:`) is a real user mistake: kubectl's
    // strict field validation refuses it, as kube-apiserver does ...
    let strict = k(
        &c,
        &[
            "apply",
            "-f",
            &path("testdata/seeds/003-nodepool-default.yaml"),
        ],
    )
    .await;
    assert!(!strict.ok);
    assert!(
        strict.stderr.contains(r#"NodePool in version "v1" cannot be handled as a NodePool: strict decoding error: unknown field "spec.limit""#),
        "{}",
        strict.stderr
    );
    // ... and without it the unknown field is pruned.
    apply_seed_nodepool(&c).await;
    // Re-applying unchanged manifests is a no-op.
    let again = ok(
        &c,
        &[
            "apply",
            "-f",
            &path("testdata/seeds/003-ec2nodeclass-default.filled.yaml"),
        ],
    )
    .await;
    assert!(again.contains("unchanged"), "{again}");

    let table = ok(&c, &["get", "nodepools"]).await;
    let header = table.lines().next().unwrap_or_default();
    for col in ["NAME", "NODECLASS", "NODES", "READY", "AGE"] {
        assert!(header.contains(col), "{table}");
    }
    assert!(table.contains("default"), "{table}");
    let wide = ok(&c, &["get", "nodepools", "-o", "wide"]).await;
    assert!(
        wide.lines().next().unwrap_or_default().contains("WEIGHT"),
        "{wide}"
    );

    let yaml = ok(&c, &["get", "nodepool", "default", "-o", "yaml"]).await;
    assert!(yaml.contains("consolidateAfter: 10m"), "{yaml}");
    assert!(!yaml.contains("limit:"), "pruned: {yaml}");
    assert!(yaml.contains("generation: 1"), "{yaml}");
    // Defaults from the CRD schema were applied.
    assert!(yaml.contains("budgets:"), "{yaml}");
    let nc = ok(&c, &["get", "ec2nodeclass", "default", "-o", "yaml"]).await;
    assert!(nc.contains("kind: EC2NodeClass"), "{nc}");

    let explain = ok(&c, &["explain", "nodepool.spec.disruption"]).await;
    assert!(explain.contains("consolidateAfter"), "{explain}");
    assert!(explain.contains("KIND:       NodePool"), "{explain}");
    // Built-in kinds too (schemas from k8s-openapi).
    let explain = ok(&c, &["explain", "pod.spec.containers.resources"]).await;
    assert!(explain.contains("<ResourceRequirements>"), "{explain}");
    let explain = ok(&c, &["explain", "deployment.spec.replicas"]).await;
    assert!(explain.contains("Number of desired pods"), "{explain}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rejects_invalid_nodepool_with_the_crd_cel_message() {
    let c = cluster().await;
    with_crds(&c).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: bad\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      - {key: karpenter.sh/nodepool, operator: In, values: [x]}\n",
    )
    .expect("write");
    let out = k(&c, &["apply", "-f", &bad.display().to_string()]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(r#"The NodePool "bad" is invalid: spec.template.spec.requirements[0].key: Invalid value: "karpenter.sh/nodepool": label "karpenter.sh/nodepool" is restricted"#),
        "{}",
        out.stderr
    );
    // Unknown fields are an error with kubectl's strict field validation.
    let unknown = dir.path().join("unknown.yaml");
    std::fs::write(
        &unknown,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: bad\nspec:\n  bogus: 1\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .expect("write");
    let out = k(&c, &["apply", "-f", &unknown.display().to_string()]).await;
    assert!(
        out.stderr
            .contains(r#"strict decoding error: unknown field "spec.bogus""#),
        "{}",
        out.stderr
    );
    let out = k(&c, &["get", "nodepool", "bad"]).await;
    assert!(
        out.stderr.contains("NotFound") || out.stderr.contains("not found"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patch_then_delete_waits_for_finalizers() {
    let c = cluster().await;
    with_crds(&c).await;
    apply_seed_nodepool(&c).await;
    ok(
        &c,
        &[
            "patch",
            "nodepool",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"weight":50},"metadata":{"finalizers":["test.io/hold"]}}"#,
        ],
    )
    .await;
    let g = ok(
        &c,
        &[
            "get",
            "nodepool",
            "default",
            "-o",
            "jsonpath={.spec.weight} {.metadata.generation}",
        ],
    )
    .await;
    assert_eq!(g, "50 2");
    // Out of range: the schema's maximum.
    let bad = k(
        &c,
        &[
            "patch",
            "nodepool",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"weight":500}}"#,
        ],
    )
    .await;
    assert!(
        bad.stderr.contains("should be less than or equal to 100"),
        "{}",
        bad.stderr
    );

    ok(&c, &["delete", "nodepool", "default", "--wait=false"]).await;
    let ts = ok(
        &c,
        &[
            "get",
            "nodepool",
            "default",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    )
    .await;
    assert!(
        !ts.is_empty(),
        "deletionTimestamp set while a finalizer is pending"
    );
    ok(
        &c,
        &[
            "patch",
            "nodepool",
            "default",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    )
    .await;
    let gone = k(&c, &["get", "nodepool", "default"]).await;
    assert!(gone.stderr.contains("not found"), "{}", gone.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_merges_built_ins_strategically_and_scale_works() {
    let c = cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("dep.yaml");
    let dep = |env: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  replicas: 3\n  selector: {{matchLabels: {{app: app}}}}\n  template:\n    metadata: {{labels: {{app: app}}}}\n    spec:\n      containers:\n      - name: app\n        image: nginx\n        env: [{env}]\n"
        )
    };
    std::fs::write(&f, dep(r#"{name: A, value: "1"}, {name: B, value: "2"}"#)).expect("write");
    ok(&c, &["apply", "-f", &f.display().to_string()]).await;
    std::fs::write(&f, dep(r#"{name: A, value: "1"}, {name: C, value: "3"}"#)).expect("write");
    let out = ok(&c, &["apply", "-f", &f.display().to_string()]).await;
    assert!(out.contains("configured"), "{out}");
    let env = ok(
        &c,
        &[
            "get",
            "deploy",
            "app",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env[*].name}",
        ],
    )
    .await;
    assert_eq!(env, "A C");
    ok(&c, &["scale", "deploy", "app", "--replicas", "5"]).await;
    let r = ok(
        &c,
        &["get", "deploy", "app", "-o", "jsonpath={.spec.replicas}"],
    )
    .await;
    assert_eq!(r, "5");
    // Server-side apply from kubectl takes the field back with --force-conflicts.
    let ssa = k(
        &c,
        &["apply", "--server-side", "-f", &f.display().to_string()],
    )
    .await;
    assert!(
        !ssa.ok && ssa.stderr.contains("conflict"),
        "{}{}",
        ssa.stdout,
        ssa.stderr
    );
    ok(
        &c,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &f.display().to_string(),
        ],
    )
    .await;
    let r = ok(
        &c,
        &["get", "deploy", "app", "-o", "jsonpath={.spec.replicas}"],
    )
    .await;
    assert_eq!(r, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_receives_events() {
    let c = cluster().await;
    ok(&c, &["create", "-f", &write_cm(&c, "first")]).await;
    let kc = c.kubeconfig.clone();
    let watcher = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args(["8", "kubectl", "--kubeconfig"])
            .arg(&kc)
            .args(["get", "configmaps", "-w", "-o", "name"])
            .output()
            .expect("kubectl must be installed")
    });
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    ok(&c, &["create", "-f", &write_cm(&c, "second")]).await;
    ok(&c, &["delete", "configmap", "first"]).await;
    let out = watcher.await.expect("watch thread");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("configmap/first"), "{text}");
    assert!(text.contains("configmap/second"), "{text}");
    let _ = &c.server;
}

async fn cluster_with_controllers() -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let server = LocalApiServer::start(Config {
        kubeconfig: Some(kubeconfig.clone()),
        controllers: true,
        ..Config::default()
    })
    .await
    .expect("server starts");
    Cluster {
        server,
        _dir: dir,
        kubeconfig,
    }
}

fn write(c: &Cluster, name: &str, text: &str) -> String {
    let f = c._dir.path().join(name);
    std::fs::write(&f, text).expect("write");
    f.display().to_string()
}

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata:\n  name: NAME\n  labels: {kubernetes.io/hostname: NAME}\nstatus:\n  allocatable: {cpu: \"4\", memory: 16Gi, pods: \"110\"}\n  capacity: {cpu: \"4\", memory: 16Gi, pods: \"110\"}\n  conditions: [{type: Ready, status: \"True\", reason: KubeletReady}]\n";

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: app}}\n  template:\n    metadata: {labels: {app: app}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers:\n      - name: app\n        image: nginx\n        resources: {requests: {cpu: \"1\", memory: 2Gi}}\n";

async fn wait_for(c: &Cluster, args: &[&str], want: &str) -> String {
    wait_until(c, args, |s| s == want).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_deployment_makes_pods_that_bind_once_a_node_fits() {
    let c = cluster_with_controllers().await;
    // Seed 001: a Deployment of 1 CPU / 2Gi pods (its template has a name, which the controller ignores).
    ok(
        &c,
        &[
            "apply",
            "-f",
            &path("testdata/seeds/001-deployment-app.yaml"),
        ],
    )
    .await;
    ok(&c, &["scale", "deploy", "app", "--replicas", "5"]).await;
    wait_for(
        &c,
        &[
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=app",
            "-o",
            "jsonpath={range .items[*]}{.status.conditions[0].reason}{\"\\n\"}{end}",
        ],
        "Unschedulable\nUnschedulable\nUnschedulable\nUnschedulable\nUnschedulable",
    )
    .await;
    // A 4-CPU node takes 4 of the 1-CPU pods; the fifth stays unschedulable.
    ok(
        &c,
        &[
            "create",
            "-f",
            &write(&c, "n1.yaml", &NODE.replace("NAME", "n1")),
        ],
    )
    .await;
    let mut bound = 0;
    for _ in 0..100 {
        bound = ok(
            &c,
            &[
                "get",
                "pods",
                "--field-selector",
                "spec.nodeName=n1,status.phase=Running",
                "-o",
                "name",
            ],
        )
        .await
        .lines()
        .count();
        if bound == 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(bound, 4);
    let pending = ok(
        &c,
        &[
            "get",
            "pods",
            "--field-selector",
            "spec.nodeName=",
            "-o",
            "jsonpath={.items[*].status.conditions[0].message}",
        ],
    )
    .await;
    assert!(
        pending.contains("0/1 nodes are available: 1 Insufficient cpu"),
        "{pending}"
    );
    wait_for(
        &c,
        &[
            "get",
            "deploy",
            "app",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ],
        "4",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_evicts_through_pod_disruption_budgets() {
    let c = cluster_with_controllers().await;
    ok(
        &c,
        &[
            "create",
            "-f",
            &write(&c, "n1.yaml", &NODE.replace("NAME", "n1")),
        ],
    )
    .await;
    ok(&c, &["apply", "-f", &write(&c, "dep.yaml", DEPLOYMENT)]).await;
    wait_for(
        &c,
        &[
            "get",
            "deploy",
            "app",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ],
        "3",
    )
    .await;
    ok(&c, &["apply", "-f", &write(&c, "pdb.yaml", "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: app}\nspec:\n  minAvailable: 3\n  selector: {matchLabels: {app: app}}\n")]).await;
    wait_for(
        &c,
        &[
            "get",
            "pdb",
            "app",
            "-o",
            "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}",
        ],
        "3/0",
    )
    .await;
    let blocked = k(&c, &["drain", "n1", "--ignore-daemonsets", "--timeout=3s"]).await;
    assert!(!blocked.ok);
    let text = format!("{}{}", blocked.stdout, blocked.stderr);
    assert!(
        text.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{text}"
    );
    assert_eq!(
        ok(
            &c,
            &[
                "get",
                "pods",
                "--field-selector",
                "spec.nodeName=n1",
                "-o",
                "name"
            ]
        )
        .await
        .lines()
        .count(),
        3
    );
    let node = ok(
        &c,
        &["get", "node", "n1", "-o", "jsonpath={.spec.unschedulable}"],
    )
    .await;
    assert_eq!(node, "true", "drain cordons first");

    // Room elsewhere and a budget that allows one at a time: the drain completes.
    ok(
        &c,
        &[
            "create",
            "-f",
            &write(&c, "n2.yaml", &NODE.replace("NAME", "n2")),
        ],
    )
    .await;
    ok(
        &c,
        &[
            "patch",
            "pdb",
            "app",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"minAvailable":2}}"#,
        ],
    )
    .await;
    let drained = ok(&c, &["drain", "n1", "--ignore-daemonsets", "--timeout=60s"]).await;
    assert!(drained.contains("node/n1 drained"), "{drained}");
    assert_eq!(
        ok(
            &c,
            &[
                "get",
                "pods",
                "--field-selector",
                "spec.nodeName=n1",
                "-o",
                "name"
            ]
        )
        .await
        .trim(),
        ""
    );
    wait_for(
        &c,
        &[
            "get",
            "deploy",
            "app",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ],
        "3",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_namespace_configmap_and_secret_over_protobuf() {
    let c = cluster().await;
    ok(&c, &["create", "namespace", "karpenter"]).await;
    ok(
        &c,
        &[
            "-n",
            "karpenter",
            "create",
            "configmap",
            "settings",
            "--from-literal=a=1",
        ],
    )
    .await;
    ok(
        &c,
        &[
            "-n",
            "karpenter",
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=key=s3cr3t",
        ],
    )
    .await;
    assert_eq!(
        ok(
            &c,
            &[
                "-n",
                "karpenter",
                "get",
                "cm",
                "settings",
                "-o",
                "jsonpath={.data.a}"
            ]
        )
        .await,
        "1"
    );
    // "s3cr3t", base64.
    assert_eq!(
        ok(
            &c,
            &[
                "-n",
                "karpenter",
                "get",
                "secret",
                "creds",
                "-o",
                "jsonpath={.data.key}"
            ]
        )
        .await,
        "czNjcjN0"
    );
    ok(&c, &["delete", "namespace", "karpenter"]).await;
    let left = k(&c, &["get", "cm", "-A", "-o", "name"]).await;
    assert_eq!(left.stdout.trim(), "", "namespace contents go with it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_verifies_the_self_signed_https_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let server = LocalApiServer::start(Config {
        kubeconfig: Some(kubeconfig.clone()),
        tls: true,
        ..Config::default()
    })
    .await
    .expect("server starts");
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let c = Cluster {
        server,
        _dir: dir,
        kubeconfig,
    };
    let config = std::fs::read_to_string(&c.kubeconfig).expect("kubeconfig");
    assert!(config.contains("certificate-authority: "), "{config}");
    assert!(!config.contains("insecure-skip-tls-verify"));
    with_crds(&c).await;
    let out = ok(&c, &["get", "namespaces", "-o", "name"]).await;
    assert!(out.contains("namespace/default"), "{out}");
    let out = ok(&c, &["get", "crds", "-o", "name"]).await;
    assert!(out.contains("nodepools.karpenter.sh"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_deployment_and_run_send_protobuf_and_read_back_canonical_objects() {
    let c = cluster().await;
    // Karpenter's getting-started, as written.
    ok(
        &c,
        &[
            "create",
            "deployment",
            "inflate",
            "--image=public.ecr.aws/eks-distro/kubernetes/pause:3.7",
            "--replicas",
            "0",
        ],
    )
    .await;
    let strategy = ok(
        &c,
        &[
            "get",
            "deployment",
            "inflate",
            "-o",
            "jsonpath={.spec.replicas} {.spec.strategy.type} {.spec.revisionHistoryLimit} {.spec.template.spec.dnsPolicy} {.spec.template.spec.containers[0].imagePullPolicy}",
        ],
    )
    .await;
    assert_eq!(strategy, "0 RollingUpdate 10 ClusterFirst IfNotPresent");
    ok(&c, &["scale", "deployment", "inflate", "--replicas", "5"]).await;
    assert_eq!(
        ok(
            &c,
            &[
                "get",
                "deployment",
                "inflate",
                "-o",
                "jsonpath={.spec.replicas}"
            ]
        )
        .await,
        "5"
    );
    ok(
        &c,
        &[
            "run",
            "shell",
            "--image=alpine:latest",
            "--restart=Never",
            "--labels=app=shell",
        ],
    )
    .await;
    let pod = ok(
        &c,
        &[
            "get",
            "pod",
            "shell",
            "-o",
            "jsonpath={.spec.restartPolicy} {.spec.containers[0].imagePullPolicy} {.spec.containers[0].terminationMessagePath} {.spec.enableServiceLinks}",
        ],
    )
    .await;
    assert_eq!(pod, "Never Always /dev/termination-log true");
    // Seed 001's `cpu: 1` and `2048Mi` are stored as kube-apiserver stores them.
    ok(
        &c,
        &[
            "apply",
            "-f",
            &path("testdata/seeds/001-deployment-app.yaml"),
        ],
    )
    .await;
    let json = ok(&c, &["get", "deployment", "app", "-o", "json"]).await;
    let object: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"],
        serde_json::json!({"cpu": "1", "memory": "2Gi"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_nodeclaims_fills_every_printer_column() {
    let c = cluster().await;
    with_crds(&c).await;
    let claim = write(
        &c,
        "claim.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: default-abcde\n  labels:\n    karpenter.sh/nodepool: default\n    node.kubernetes.io/instance-type: m5.large\n    karpenter.sh/capacity-type: spot\n    topology.kubernetes.io/zone: us-west-2a\nspec:\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n  requirements: []\n",
    );
    ok(&c, &["apply", "-f", &claim]).await;
    ok(
        &c,
        &[
            "patch",
            "nodeclaim",
            "default-abcde",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"nodeName": "ip-10-0-0-1", "providerID": "aws:///us-west-2a/i-0123", "imageID": "ami-0123", "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}, {"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}, {"type": "DisruptionReason", "status": "True", "reason": "Drifted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}"#,
        ],
    )
    .await;
    let table = ok(&c, &["get", "nodeclaims", "-o", "wide"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TYPE",
            "CAPACITY",
            "ZONE",
            "NODE",
            "READY",
            "AGE",
            "IMAGEID",
            "ID",
            "NODEPOOL",
            "NODECLASS",
            "DRIFTED",
            "DISRUPTION"
        ],
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        row.iter().take(6).copied().collect::<Vec<_>>(),
        [
            "default-abcde",
            "m5.large",
            "spot",
            "us-west-2a",
            "ip-10-0-0-1",
            "True"
        ],
        "{table}"
    );
    assert_eq!(
        row.iter().skip(7).copied().collect::<Vec<_>>(),
        [
            "ami-0123",
            "aws:///us-west-2a/i-0123",
            "default",
            "default",
            "True",
            "Drifted"
        ],
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_dry_run_and_diff_persist_nothing() {
    let c = cluster().await;
    let cm = write_cm(&c, "dry");
    let out = ok(&c, &["apply", "--dry-run=server", "-f", &cm]).await;
    assert!(out.contains("(server dry run)"), "{out}");
    assert!(
        !k(&c, &["get", "cm", "dry"]).await.ok,
        "a dry run creates nothing"
    );
    ok(&c, &["apply", "-f", &cm]).await;
    let changed = write(
        &c,
        "dry-changed.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\ndata:\n  a: \"2\"\n",
    );
    let diff = k(&c, &["diff", "-f", &changed]).await;
    assert!(
        diff.stdout.contains("+  a: \"2\""),
        "{}{}",
        diff.stdout,
        diff.stderr
    );
    assert!(diff.stdout.contains("-  a: \"1\""), "{}", diff.stdout);
    ok(&c, &["delete", "cm", "dry", "--dry-run=server"]).await;
    assert_eq!(
        ok(&c, &["get", "cm", "dry", "-o", "jsonpath={.data.a}"]).await,
        "1",
        "neither the diff nor the dry-run delete changed it"
    );
    let bad = k(
        &c,
        &[
            "apply",
            "--dry-run=server",
            "-f",
            &path("testdata/seeds/001-deployment-app.yaml"),
            "--validate=false",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].resources.requests.cpu}",
        ],
    )
    .await;
    assert!(bad.ok, "{}", bad.stderr);
    assert_eq!(
        bad.stdout, "1",
        "the dry run answers with the object as it would be stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_waits_for_dependents() {
    let c = cluster_with_controllers().await;
    let deployment = write(&c, "deploy.yaml", DEPLOYMENT);
    ok(&c, &["apply", "-f", &deployment]).await;
    let names = wait_pods(&c, "app=app", 3).await;
    // One pod holds on: its finalizer keeps it, and so its owners.
    ok(
        &c,
        &[
            "patch",
            "pod",
            &names[0],
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ],
    )
    .await;
    ok(
        &c,
        &[
            "delete",
            "deployment",
            "app",
            "--cascade=foreground",
            "--wait=false",
        ],
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let waiting = ok(
        &c,
        &[
            "get",
            "deployment",
            "app",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ],
    )
    .await;
    assert!(waiting.contains("foregroundDeletion"), "{waiting}");
    ok(
        &c,
        &[
            "patch",
            "pod",
            &names[0],
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    )
    .await;
    wait_for(
        &c,
        &["get", "deployments,replicasets,pods", "-o", "name"],
        "",
    )
    .await;
}

/// The names of the pods matching `selector`, once there are `count`.
async fn wait_pods(c: &Cluster, selector: &str, count: usize) -> Vec<String> {
    for _ in 0..100 {
        let out = k(
            c,
            &[
                "get",
                "pods",
                "-l",
                selector,
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
        )
        .await;
        let names: Vec<String> = out.stdout.split_whitespace().map(str::to_owned).collect();
        if names.len() == count {
            return names;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("never saw {count} pods for {selector}");
}

const DAEMON_SET: &str = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: agent\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      containers:\n      - name: agent\n        image: agent:1\n        resources: {requests: {cpu: 100m}}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_pods_follow_nodes_and_no_execute_taints_evict() {
    let c = cluster_with_controllers().await;
    ok(&c, &["apply", "-f", &write(&c, "ds.yaml", DAEMON_SET)]).await;
    ok(
        &c,
        &[
            "apply",
            "-f",
            &write(&c, "n1.yaml", &NODE.replace("NAME", "n1")),
        ],
    )
    .await;
    let nodes_of_daemons = [
        "get",
        "pods",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    ];
    wait_for(&c, &nodes_of_daemons, "n1").await;
    let one = write(
        &c,
        "one.yaml",
        &DEPLOYMENT.replace("replicas: 3", "replicas: 1"),
    );
    ok(&c, &["apply", "-f", &one]).await;
    wait_for(
        &c,
        &[
            "get",
            "pods",
            "-l",
            "app=app",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ],
        "n1",
    )
    .await;
    // A new node gets its daemon.
    ok(
        &c,
        &[
            "apply",
            "-f",
            &write(&c, "n2.yaml", &NODE.replace("NAME", "n2")),
        ],
    )
    .await;
    let both = wait_until(&c, &nodes_of_daemons, |s| {
        let mut v: Vec<&str> = s.split_whitespace().collect();
        v.sort_unstable();
        v == ["n1", "n2"]
    })
    .await;
    assert!(both.contains("n2"), "{both}");
    // A NoExecute taint nobody tolerates empties n1.
    ok(
        &c,
        &["taint", "nodes", "n1", "example.com/broken=true:NoExecute"],
    )
    .await;
    wait_for(&c, &nodes_of_daemons, "n2").await;
    wait_for(
        &c,
        &[
            "get",
            "pods",
            "-l",
            "app=app",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ],
        "n2",
    )
    .await;
    let ds = ok(
        &c,
        &[
            "get",
            "daemonset",
            "agent",
            "-o",
            "jsonpath={.status.desiredNumberScheduled}",
        ],
    )
    .await;
    assert_eq!(ds, "1");
}

async fn wait_until(c: &Cluster, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        last = k(c, args).await.stdout;
        if done(last.trim()) {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("kubectl {args:?}: last saw {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_deletion_is_graceful_unless_forced() {
    let c = cluster_with_controllers().await;
    ok(
        &c,
        &[
            "apply",
            "-f",
            &write(&c, "n1.yaml", &NODE.replace("NAME", "n1")),
        ],
    )
    .await;
    let deployment = DEPLOYMENT.replace("replicas: 3", "replicas: 2").replace(
        "terminationGracePeriodSeconds: 1",
        "terminationGracePeriodSeconds: 2",
    );
    ok(&c, &["apply", "-f", &write(&c, "d.yaml", &deployment)]).await;
    wait_for(
        &c,
        &[
            "get",
            "pods",
            "-l",
            "app=app",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
        "Running Running",
    )
    .await;
    let names = wait_pods(&c, "app=app", 2).await;
    ok(&c, &["delete", "pod", &names[0], "--wait=false"]).await;
    let terminating = ok(
        &c,
        &[
            "get",
            "pod",
            &names[0],
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds}",
        ],
    )
    .await;
    assert_eq!(terminating, "2", "the pod stays for its grace period");
    // `kubectl delete` waits until the pod is gone.
    ok(
        &c,
        &[
            "wait",
            "--for=delete",
            &format!("pod/{}", names[0]),
            "--timeout=10s",
        ],
    )
    .await;
    ok(
        &c,
        &["delete", "pod", &names[1], "--grace-period=0", "--force"],
    )
    .await;
    assert!(
        !k(&c, &["get", "pod", &names[1]]).await.ok,
        "forced: gone at once"
    );
}

fn zoned_node(name: &str, zone: &str) -> String {
    NODE.replace("NAME", name).replace(
        &format!("kubernetes.io/hostname: {name}}}"),
        &format!("kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: {zone}}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_stand_in_spreads_across_zones_and_keeps_anti_affine_pods_apart() {
    let c = cluster_with_controllers().await;
    for (name, zone) in [("n1", "z1"), ("n2", "z2"), ("n3", "z3"), ("n4", "z1")] {
        ok(
            &c,
            &[
                "apply",
                "-f",
                &write(&c, &format!("{name}.yaml"), &zoned_node(name, zone)),
            ],
        )
        .await;
    }
    let spread = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 6\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      topologySpreadConstraints:\n      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}\n      containers:\n      - name: web\n        image: nginx\n        resources: {requests: {cpu: 100m}}\n";
    ok(&c, &["apply", "-f", &write(&c, "web.yaml", spread)]).await;
    let placed = wait_until(
        &c,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
        ],
        |s| s.lines().filter(|l| !l.is_empty()).count() == 6,
    )
    .await;
    let mut per_zone = std::collections::BTreeMap::new();
    for node in placed.lines().filter(|l| !l.is_empty()) {
        let zone = match node {
            "n1" | "n4" => "z1",
            "n2" => "z2",
            _ => "z3",
        };
        *per_zone.entry(zone).or_insert(0) += 1;
    }
    assert_eq!(
        per_zone.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{placed}"
    );

    let apart = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db\nspec:\n  replicas: 5\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec:\n      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: db}}}\n      containers:\n      - name: db\n        image: postgres\n        resources: {requests: {cpu: 100m}}\n";
    ok(&c, &["apply", "-f", &write(&c, "db.yaml", apart)]).await;
    let nodes = wait_until(
        &c,
        &[
            "get",
            "pods",
            "-l",
            "app=db",
            "-o",
            "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
        ],
        |s| s.lines().filter(|l| !l.is_empty()).count() == 4,
    )
    .await;
    let distinct: std::collections::BTreeSet<&str> =
        nodes.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(distinct.len(), 4, "one db pod per node: {nodes}");
    let reason = wait_until(
        &c,
        &[
            "get",
            "pods",
            "-l",
            "app=db",
            "-o",
            "jsonpath={.items[*].status.conditions[?(@.reason==\"Unschedulable\")].message}",
        ],
        |s| s.contains("anti-affinity"),
    )
    .await;
    assert!(
        reason.contains("4 node(s) didn't match pod anti-affinity rules"),
        "{reason}"
    );
}
