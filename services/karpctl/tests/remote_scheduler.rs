//! `plan --scheduler URL` asks a running scheduler over gRPC and prints
//! exactly what the in-process plan prints.

use std::path::Path;
use std::process::Command;

use integration_tests::RunningService;

fn plan(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_karpctl"))
        .args(["plan", "--example", "seed-001", "-o", "json"])
        .args(extra)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("run karpctl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_plan_matches_in_process_plan() {
    let service = RunningService::start(|| {
        karpenter_scheduler::service(
            karpenter_runtime::Metrics::new("karpenter_scheduler"),
            karpenter_scheduler::DEFAULT_MAX_REQUEST_BYTES,
        )
    })
    .await
    .unwrap();
    let url = service.url();
    let (local, remote) =
        tokio::task::spawn_blocking(move || (plan(&[]), plan(&["--scheduler", &url])))
            .await
            .unwrap();
    assert!(
        local.status.success(),
        "{}",
        String::from_utf8_lossy(&local.stderr)
    );
    assert!(
        remote.status.success(),
        "{}",
        String::from_utf8_lossy(&remote.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&local.stdout),
        String::from_utf8_lossy(&remote.stdout)
    );
    service.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_scheduler_is_an_error_not_bad_input() {
    let output = tokio::task::spawn_blocking(|| plan(&["--scheduler", "http://127.0.0.1:1"]))
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&output.stderr).is_empty());
}

fn disrupt(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_karpctl"))
        .args(["disrupt", "--example", "consolidation", "-o", "json"])
        .args(extra)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("run karpctl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_disrupt_matches_in_process_disrupt() {
    let service = RunningService::start(|| {
        karpenter_scheduler::service(
            karpenter_runtime::Metrics::new("karpenter_scheduler"),
            karpenter_scheduler::DEFAULT_MAX_REQUEST_BYTES,
        )
    })
    .await
    .unwrap();
    let url = service.url();
    let (local, remote) =
        tokio::task::spawn_blocking(move || (disrupt(&[]), disrupt(&["--scheduler", &url])))
            .await
            .unwrap();
    assert!(
        local.status.success(),
        "{}",
        String::from_utf8_lossy(&local.stderr)
    );
    assert!(
        remote.status.success(),
        "{}",
        String::from_utf8_lossy(&remote.stderr)
    );
    assert!(String::from_utf8_lossy(&local.stdout).contains("\"Empty\""));
    assert_eq!(
        String::from_utf8_lossy(&local.stdout),
        String::from_utf8_lossy(&remote.stdout)
    );
    service.stop().await.unwrap();
}
