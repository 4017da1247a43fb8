//! The official Python `kubernetes` client (PyPI, installed by
//! scripts/setup.sh into `target/kube-python`) against local-apiserver:
//! list, watch, create and read back into its typed models, the scale
//! subresource, eviction, custom objects.

use std::process::Command;

use integration_tests::repo_root;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use local_apiserver::{Config, LocalApiServer};

fn kube_python() -> std::path::PathBuf {
    std::env::var_os("KUBE_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| repo_root().join("target/kube-python/bin/python"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_reads_writes_watches_scales_and_evicts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let _server = LocalApiServer::start(Config {
        kubeconfig: Some(kubeconfig.clone()),
        ..Config::default()
    })
    .await
    .expect("server starts");
    let config = karpenter_kube::from_kubeconfig(&kubeconfig)
        .await
        .expect("kubeconfig");
    let client = karpenter_kube::client(config).expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in karpenter_api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    let script = repo_root().join("integration-tests/python/kube_client.py");
    let python = kube_python();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .arg(script)
            .arg(&kubeconfig)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{} runs (scripts/setup.sh's ensure_kube_python installs it): {e}",
                    python.display()
                )
            })
    })
    .await
    .expect("python thread");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for step in [
        "list",
        "watch",
        "create",
        "scale",
        "evict",
        "custom objects",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("ok {step}")),
            "{stdout}"
        );
    }
}
