//! `plan` and `disrupt` with `--scheduler URL` ask a running scheduler over
//! gRPC and print exactly what the in-process commands print.

use std::path::Path;
use std::process::{Command, Output};

use integration_tests::RunningService;

fn karpctl(command: &[&str], extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpctl"))
        .args(command)
        .args(["-o", "json"])
        .args(extra)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("run karpctl")
}

/// Runs `command` in process and against a live scheduler; returns both
/// outputs after checking each succeeded.
async fn local_and_remote(command: &'static [&'static str]) -> (String, String) {
    let service = RunningService::start(|| {
        karpenter_scheduler::service(
            karpenter_runtime::Metrics::new("karpenter_scheduler"),
            karpenter_scheduler::Limits::default(),
        )
    })
    .await
    .unwrap();
    let url = service.url();
    let (local, remote) = tokio::task::spawn_blocking(move || {
        (
            karpctl(command, &[]),
            karpctl(command, &["--scheduler", &url]),
        )
    })
    .await
    .unwrap();
    service.stop().await.unwrap();
    for output in [&local, &remote] {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    (
        String::from_utf8_lossy(&local.stdout).into_owned(),
        String::from_utf8_lossy(&remote.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_plan_matches_in_process_plan() {
    let (local, remote) = local_and_remote(&["plan", "--example", "seed-001"]).await;
    assert_eq!(local, remote);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_disrupt_matches_in_process_disrupt() {
    let (local, remote) = local_and_remote(&["disrupt", "--example", "consolidation"]).await;
    assert!(local.contains("\"Empty\""));
    assert_eq!(local, remote);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_scheduler_is_an_error_not_bad_input() {
    let output = tokio::task::spawn_blocking(|| {
        karpctl(
            &["plan", "--example", "seed-001"],
            &["--scheduler", "http://127.0.0.1:1"],
        )
    })
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&output.stderr).is_empty());
}
