//! The binary refuses to start without what it cannot guess: the cluster's
//! name and the AWS region (it used to default to us-west-2).

use std::process::Command;

fn provider_aws(env: &[(&str, &str)]) -> (bool, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_provider-aws"));
    command
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("CLUSTER_NAME")
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("provider-aws runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn no_region_no_start() {
    let (ok, stderr) = provider_aws(&[("CLUSTER_NAME", "my-cluster")]);
    assert!(!ok, "started without a region");
    assert!(
        stderr.contains("the AWS region is required") && stderr.contains("AWS_REGION"),
        "{stderr}"
    );
    let (ok, stderr) = provider_aws(&[("CLUSTER_NAME", "my-cluster"), ("AWS_REGION", " ")]);
    assert!(!ok, "started with a blank region");
    assert!(stderr.contains("the AWS region is required"), "{stderr}");
}

#[test]
fn no_cluster_name_no_start() {
    let (ok, stderr) = provider_aws(&[("AWS_REGION", "us-west-2"), ("CLUSTER_NAME", "")]);
    assert!(!ok, "started without a cluster name");
    assert!(
        stderr.contains("the cluster's name is required"),
        "{stderr}"
    );
}
