//! Clients in another language reach the scheduler: Python stubs generated
//! from the proto files call Solve, and a Python client that knows only gRPC
//! reflection discovers the service and its messages. Needs `python3` with
//! `grpcio-tools` and `grpcio-reflection` (scripts/test installs them).

use std::process::Command;

use integration_tests::{RunningService, python, repo_root};

fn run_python(args: &[&str]) -> String {
    let output = Command::new(python())
        .args(args)
        .output()
        .expect("python3 runs (scripts/test installs it with grpcio-tools)");
    assert!(
        output.status.success(),
        "python {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn scheduler() -> karpenter_runtime::Service {
    karpenter_scheduler::service(
        karpenter_runtime::Metrics::new("karpenter_scheduler"),
        karpenter_scheduler::Limits::default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_python_client_calls_solve() {
    let stubs = tempfile::tempdir().unwrap();
    let root = repo_root();
    let proto = root.join("proto");
    let out = stubs.path().to_str().unwrap();
    let include = format!("-I{}", proto.display());
    let python_out = format!("--python_out={out}");
    let grpc_out = format!("--grpc_python_out={out}");
    let sources = [
        proto.join("karpenter/types/v1/types.proto"),
        proto.join("karpenter/scheduler/v1/cluster.proto"),
        proto.join("karpenter/scheduler/v1/scheduler.proto"),
    ];
    let mut args = vec!["-m", "grpc_tools.protoc", &include, &python_out, &grpc_out];
    let sources: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    args.extend(sources.iter().map(String::as_str));
    run_python(&args);

    let service = RunningService::start(scheduler).await.unwrap();
    let script = root.join("integration-tests/python/solve_client.py");
    let address = service.grpc.to_string();
    let script_path = script.display().to_string();
    let stubs_path = stubs.path().display().to_string();
    let stdout =
        tokio::task::spawn_blocking(move || run_python(&[&script_path, &stubs_path, &address]))
            .await
            .unwrap();
    let response: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let claims = response["node_claims"].as_array().unwrap();
    assert_eq!(claims.len(), 1, "{response:#}");
    assert_eq!(claims[0]["instance_types"][0], "m5.large");
    assert_eq!(claims[0]["cheapest"]["capacity_type"], "spot");
    assert_eq!(claims[0]["pods"].as_array().unwrap().len(), 3);
    service.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_only_python_client_discovers_the_scheduler() {
    let service = RunningService::start(scheduler).await.unwrap();
    let script = repo_root().join("integration-tests/python/reflection_client.py");
    let address = service.grpc.to_string();
    let stdout = tokio::task::spawn_blocking(move || {
        run_python(&[
            &script.display().to_string(),
            &address,
            "karpenter.scheduler.v1.Scheduler",
            "Solve",
        ])
    })
    .await
    .unwrap();
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let services: Vec<&str> = answer["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert!(
        services.contains(&"karpenter.scheduler.v1.Scheduler"),
        "{services:?}"
    );
    assert!(services.contains(&"grpc.health.v1.Health"), "{services:?}");
    assert_eq!(answer["input"], "karpenter.scheduler.v1.SolveRequest");
    assert_eq!(answer["output"], "karpenter.scheduler.v1.SolveResponse");
    service.stop().await.unwrap();
}
