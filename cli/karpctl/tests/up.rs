//! `karpctl up` as a user runs it: real processes for every service, the
//! kubeconfig it writes, SIGTERM to stop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use integration_tests::otlp::{OtlpReceiver, ReceivedSpan};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};

const SERVICES: [&str; 4] = ["local-apiserver", "scheduler", "provider-kwok", "adapter"];

/// The directory of the service binaries, built if the test run did not
/// build them (a `cargo test -p karpctl` run).
fn bin_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_karpctl"))
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let missing: Vec<&str> = SERVICES
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if !missing.is_empty() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        // From the package directory cargo only sees karpctl's own
        // targets; the services live elsewhere in the workspace.
        build.args(["build", "--workspace"]);
        for bin in &missing {
            build.args(["--bin", bin]);
        }
        assert!(
            build.status().expect("cargo build").success(),
            "building {missing:?}"
        );
    }
    dir
}

/// A running `karpctl up`, stopped with SIGTERM when dropped, so a failed
/// test leaves no cluster behind.
struct Up(Child);

impl std::ops::Deref for Up {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Up {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        terminate(&self.0);
        let deadline = Instant::now() + Duration::from_secs(15);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn karpctl_up(state: &Path, extra: &[&str]) -> Up {
    karpctl_up_with_env(state, extra, &[])
}

fn karpctl_up_with_env(state: &Path, extra: &[&str], env: &[(&str, &str)]) -> Up {
    Up(Command::new(env!("CARGO_BIN_EXE_karpctl"))
        .envs(env.iter().copied())
        .arg("up")
        .arg("--state-dir")
        .arg(state)
        .arg("--bin-dir")
        .arg(bin_dir())
        .args(["--node-delay", "500ms"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("karpctl up"))
}

/// Stdout lines as they come.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (send, receive) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
    receive
}

fn wait_for_line(
    lines: &mpsc::Receiver<String>,
    prefix: &str,
    within: Duration,
    seen: &mut Vec<String>,
) {
    let deadline = Instant::now() + within;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                let found = line.starts_with(prefix);
                seen.push(line);
                if found {
                    return;
                }
            }
            Err(_) => break,
        }
    }
    panic!(
        "no line starting with {prefix:?} within {within:?}; saw:\n{}",
        seen.join("\n")
    );
}

fn terminate(child: &Child) {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
}

/// Applies the NodePool `karpctl up` wrote and a Deployment of five pods
/// asking for a CPU each; waits until a Node appears.
async fn provision(state: &Path, kubeconfig: &Path) {
    let config = karpenter_kube::from_kubeconfig(kubeconfig)
        .await
        .expect("kubeconfig");
    let client = karpenter_kube::client(config).expect("client");
    let pool: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(state.join("nodepool.yaml")).expect("pool"))
            .expect("yaml");
    let pool: karpenter_api::NodePool = serde_json::from_value(pool).expect("pool");
    Api::<karpenter_api::NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .expect("pool created");
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "inflate"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "inflate"}},
                 "template": {"metadata": {"labels": {"app": "inflate"}},
                              "spec": {"containers": [{"name": "inflate",
                                       "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                       "resources": {"requests": {"cpu": "1"}}}]}}}
    }))
    .expect("deployment");
    let deployments = Api::<Deployment>::default_namespaced(client.clone());
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("created");
    deployments
        .patch(
            "inflate",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("scaled");
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let count = nodes
            .list(&Default::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if count > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no node appeared in {}",
            state.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn replaying_seed_001_prints_the_timeline_and_stops() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = karpctl_up(state.path(), &["--replay", "seed-001"]);
    let lines = lines(&mut child);
    let mut seen = Vec::new();
    wait_for_line(
        &lines,
        "kwok-admin: http://127.0.0.1:",
        Duration::from_secs(90),
        &mut seen,
    );
    wait_for_line(&lines, "ready", Duration::from_secs(60), &mut seen);
    wait_for_line(
        &lines,
        "  scale-out -> every pod bound",
        Duration::from_secs(120),
        &mut seen,
    );
    // Back to one replica: the emptied nodes are consolidated away after
    // the pool's consolidateAfter (30 s), a poll and the validation.
    wait_for_line(
        &lines,
        "  scale-down -> every emptied node gone",
        Duration::from_secs(240),
        &mut seen,
    );
    let status = child.wait().expect("exit");
    assert!(status.success(), "{status}");
    let text = seen.join("\n");
    for step in [
        "pending (Unschedulable)",
        "created",
        "launched (",
        "registered as node",
        "initialized",
        "bound to default-",
        "all 5 pods running",
        "first pod pending -> first nodeclaim created",
        "deleted (consolidated)",
        "gone (instance terminated)",
        "node empty -> nodeclaim deleted",
    ] {
        assert!(text.contains(step), "the timeline shows {step:?}:\n{text}");
    }
    let pending = text.matches("pending (Unschedulable)").count();
    assert_eq!(
        pending, 3,
        "one new pod fits the existing nodes, three wait:\n{text}"
    );
    // The three services log JSON lines by default, as Karpenter does,
    // with the level and message at the top level.
    for service in ["adapter", "scheduler", "provider-kwok"] {
        let path = state.path().join(format!("logs/{service}.log"));
        let log = std::fs::read_to_string(&path).expect("the service's log");
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(!lines.is_empty(), "{service} logged nothing");
        for line in lines {
            let entry: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{service}: not a JSON line ({e}): {line}"));
            assert!(
                entry["level"].is_string() && entry["message"].is_string(),
                "{service}: {line}"
            );
        }
    }
}

#[test]
fn two_clusters_run_side_by_side_and_stop_on_sigterm() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let states = [
        tempfile::tempdir().expect("a"),
        tempfile::tempdir().expect("b"),
    ];
    let mut children: Vec<Up> = states.iter().map(|s| karpctl_up(s.path(), &[])).collect();
    let mut outputs = Vec::new();
    for child in &mut children {
        let lines = lines(child);
        let mut seen = Vec::new();
        wait_for_line(&lines, "ready", Duration::from_secs(120), &mut seen);
        outputs.push((lines, seen));
    }
    // Each cluster provisions for its own pods, through its kubeconfig.
    for state in &states {
        let kubeconfig = state.path().join("kubeconfig");
        runtime.block_on(provision(state.path(), &kubeconfig));
    }
    for child in &mut children {
        terminate(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                assert!(status.success(), "stopped cleanly: {status}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "karpctl up did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Nothing it started is left: the API server's port no longer answers.
    for state in &states {
        let kubeconfig =
            std::fs::read_to_string(state.path().join("kubeconfig")).expect("kubeconfig");
        let server = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("server")
            .trim_start_matches("http://")
            .to_owned();
        assert!(
            std::net::TcpStream::connect(&server).is_err(),
            "the API server at {server} was stopped"
        );
    }
}

/// The spans of one trace, by the service that sent them.
fn trace_services(spans: &[ReceivedSpan], trace_id: &str) -> Vec<(String, String)> {
    spans
        .iter()
        .filter(|s| s.trace_id == trace_id)
        .map(|s| (s.service.clone(), s.name.clone()))
        .collect()
}

#[test]
fn one_provisioning_is_one_trace_across_the_three_services() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let receiver = runtime
        .block_on(OtlpReceiver::start())
        .expect("OTLP receiver");
    let endpoint = receiver.endpoint();
    let state = tempfile::tempdir().expect("state");
    let mut child = karpctl_up_with_env(
        state.path(),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            // Each service names itself, whatever the caller's environment says.
            ("OTEL_SERVICE_NAME", "everything"),
        ],
    );
    let lines = lines(&mut child);
    let mut seen = Vec::new();
    wait_for_line(&lines, "ready", Duration::from_secs(120), &mut seen);
    let kubeconfig = state.path().join("kubeconfig");
    runtime.block_on(provision(state.path(), &kubeconfig));

    // The provisioning trace: the adapter's batch, Solve in the scheduler
    // and Create in the provider, the two calls children of adapter spans.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (spans, trace_id) = loop {
        let spans = receiver.spans();
        // Any Create in the batch's trace: under load a launch that timed
        // out is retried by the claim's own lifecycle, in a trace of its
        // own without a Solve, and that Create may come first.
        let create = spans.iter().find(|create| {
            create.service == "karpenter-provider-kwok"
                && create.name == "karpenter.provider.v1.CloudProvider/Create"
                && spans.iter().any(|s| {
                    s.trace_id == create.trace_id
                        && s.service == "karpenter-scheduler"
                        && s.name == "karpenter.scheduler.v1.Scheduler/Solve"
                })
        });
        if let Some(create) = create {
            break (spans.clone(), create.trace_id.clone());
        }
        assert!(
            Instant::now() < deadline,
            "no trace holds both the provider's Create and the scheduler's Solve; received:\n{:#?}",
            receiver.spans()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let in_trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == trace_id).collect();
    let adapter_span = |id: &str| {
        in_trace
            .iter()
            .any(|s| s.span_id == id && s.service == "karpenter-adapter")
    };
    for (service, name) in [
        (
            "karpenter-scheduler",
            "karpenter.scheduler.v1.Scheduler/Solve",
        ),
        (
            "karpenter-provider-kwok",
            "karpenter.provider.v1.CloudProvider/Create",
        ),
    ] {
        let call = in_trace
            .iter()
            .find(|s| s.service == service && s.name == name)
            .expect("in the trace");
        assert!(
            adapter_span(&call.parent_span_id),
            "{service}'s {name} is a child of an adapter span: {:#?}",
            trace_services(&spans, &trace_id)
        );
    }
    // The handler's own span sits under the server span.
    assert!(
        in_trace
            .iter()
            .any(|s| s.service == "karpenter-scheduler" && s.name == "Solve"),
        "the scheduler's Solve span is in the trace: {:#?}",
        trace_services(&spans, &trace_id)
    );
    assert!(
        in_trace.iter().all(|s| s.service != "everything"),
        "every service names itself"
    );
    terminate(&child);
    let status = child.wait().expect("exit");
    assert!(status.success(), "{status}");
}

/// Asks the gRPC health service at `address` (`https://127.0.0.1:port`)
/// with the certificate files `files`, verifying that the server's
/// certificate names `server`.
async fn health_over_tls(
    address: &str,
    server: &str,
    files: &karpctl::up::certificates::Files,
) -> Result<(), String> {
    let args = karpenter_runtime::TlsArgs {
        tls_cert: Some(files.cert.clone()),
        tls_key: Some(files.key.clone()),
        tls_ca: Some(files.ca.clone()),
        ..Default::default()
    };
    let tls = args
        .client()
        .map_err(|e| format!("{e:#}"))?
        .ok_or("no TLS")?;
    let endpoint = karpenter_runtime::ClientTls::endpoint(address)
        .map_err(|e| format!("{e:#}"))?
        .connect_timeout(Duration::from_secs(5));
    let channel = tls.connect_lazy(&endpoint, Some(server));
    let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest::default());
    request.set_timeout(Duration::from_secs(5));
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
        .map(|_| ())
        .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
}

/// Copies a service's certificate files aside (they are about to be
/// replaced).
fn keep(files: &karpctl::up::certificates::Files, into: &Path) -> karpctl::up::certificates::Files {
    std::fs::create_dir_all(into).expect("dir");
    let copy = |from: &Path, name: &str| {
        let to = into.join(name);
        std::fs::copy(from, &to).expect("copy");
        to
    };
    karpctl::up::certificates::Files {
        cert: copy(&files.cert, "tls.crt"),
        key: copy(&files.key, "tls.key"),
        ca: copy(&files.ca, "ca.crt"),
    }
}

/// `karpctl up --tls`: the three services speak mutual TLS with the
/// certificates the chart makes. The scheduler and the provider answer the
/// adapter's certificate and refuse another service's (same CA, other
/// name). Then the whole chain is replaced on disk while the cluster runs
/// (a CA rotation, cert-manager style): new connections use the new chain,
/// the old one is refused, and provisioning goes on without a restart.
#[test]
fn mutual_tls_cluster_provisions_and_follows_a_certificate_rotation() {
    use karpctl::up::certificates::{self, Files};
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let state = tempfile::tempdir().expect("state");
    let mut child = karpctl_up(state.path(), &["--tls"]);
    let lines = lines(&mut child);
    let mut seen = Vec::new();
    wait_for_line(&lines, "tls: ", Duration::from_secs(120), &mut seen);
    let tls_line = seen.last().expect("tls line").clone();
    let addresses: Vec<String> = tls_line
        .split_whitespace()
        .filter(|word| word.starts_with("https://"))
        .map(|word| word.trim_end_matches(',').to_owned())
        .collect();
    let [scheduler, provider] = addresses.as_slice() else {
        panic!("the tls line names the scheduler and the provider: {tls_line}");
    };
    wait_for_line(&lines, "ready", Duration::from_secs(120), &mut seen);
    let dir = state.path().join("tls");
    let files = |service: &str| Files {
        cert: dir.join(service).join("tls.crt"),
        key: dir.join(service).join("tls.key"),
        ca: dir.join(service).join("ca.crt"),
    };
    let scheduler_name = certificates::server_name("scheduler");
    let provider_name = certificates::server_name("provider");
    runtime.block_on(async {
        health_over_tls(scheduler, &scheduler_name, &files("adapter"))
            .await
            .expect("the scheduler answers the adapter's certificate");
        health_over_tls(provider, &provider_name, &files("adapter"))
            .await
            .expect("the provider answers the adapter's certificate");
        let refused = health_over_tls(provider, &provider_name, &files("scheduler"))
            .await
            .expect_err("the scheduler's certificate may not call the provider");
        assert!(refused.starts_with("PermissionDenied"), "{refused}");
    });
    let kubeconfig = state.path().join("kubeconfig");
    runtime.block_on(provision(state.path(), &kubeconfig));

    let old = tempfile::tempdir().expect("old");
    let old_adapter = keep(&files("adapter"), old.path());
    certificates::issue(&dir).expect("a new CA and certificates");
    runtime.block_on(async {
        tokio::time::sleep(karpenter_runtime::TLS_RECHECK_EVERY * 2).await;
        health_over_tls(scheduler, &scheduler_name, &files("adapter"))
            .await
            .expect("the scheduler serves new connections with the new chain");
        health_over_tls(provider, &provider_name, &files("adapter"))
            .await
            .expect("the provider serves new connections with the new chain");
        assert!(
            health_over_tls(provider, &provider_name, &old_adapter)
                .await
                .is_err(),
            "the old chain is no longer accepted"
        );
        // Provisioning goes on: five more pods get nodes.
        let config = karpenter_kube::from_kubeconfig(&kubeconfig)
            .await
            .expect("kubeconfig");
        let client = karpenter_kube::client(config).expect("client");
        Api::<Deployment>::default_namespaced(client.clone())
            .patch(
                "inflate",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": 10}})),
            )
            .await
            .expect("scaled");
        let pods = Api::<k8s_openapi::api::core::v1::Pod>::default_namespaced(client);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let bound = pods
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                        .count()
                })
                .unwrap_or(0);
            if bound >= 10 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "only {bound} of 10 pods on nodes after the rotation; logs in {}",
                state.path().display()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    terminate(&child);
    let status = child.wait().expect("exit");
    assert!(status.success(), "{status}");
}

/// Upstream's own v1.15 manifests (its documentation's NodePools with
/// Gte/Lte and v1.15 defaults, EC2NodeClasses with the open kubelet block
/// and CEL expressions, CapacityBuffers of both served versions and what
/// they name) apply, unchanged, with the real kubectl, to `karpctl up`.
#[test]
fn upstream_v1_15_manifests_apply_to_karpctl_up() {
    let state = tempfile::tempdir().expect("state");
    let mut child = karpctl_up(state.path(), &[]);
    let lines = lines(&mut child);
    let mut seen = Vec::new();
    wait_for_line(&lines, "ready", Duration::from_secs(120), &mut seen);
    let manifests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/upstream-v1.15");
    let kubeconfig = state.path().join("kubeconfig");
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "-f"])
        .arg(&manifests)
        .output()
        .expect("kubectl must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let created = stdout.lines().filter(|l| l.ends_with(" created")).count();
    assert_eq!(created, 10, "every document created:\n{stdout}\n{stderr}");
    terminate(&child);
}
