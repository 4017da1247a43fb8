//! A client that knows only gRPC reflection (Python `grpcio-reflection`)
//! calls `Info` and `GetInstanceTypes` on the provider served against moto.

mod common;

use common::World;

fn reflection_call(address: &str, method: &str, request: &str) -> serde_json::Value {
    let script =
        integration_tests::repo_root().join("integration-tests/python/reflection_client.py");
    let output = std::process::Command::new(integration_tests::python())
        .arg(script)
        .args([
            address,
            "karpenter.provider.v1.CloudProvider",
            method,
            request,
        ])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "reflection client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON from the reflection client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_only_client_calls_info_and_get_instance_types() {
    let world = World::start().await;
    let address = world.service.grpc.to_string();
    let info = {
        let address = address.clone();
        tokio::task::spawn_blocking(move || reflection_call(&address, "Info", "{}"))
            .await
            .unwrap()
    };
    let services: Vec<&str> = info["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert!(
        services.contains(&"karpenter.provider.v1.CloudProvider"),
        "{services:?}"
    );
    assert_eq!(info["response"]["providerName"], "aws");
    assert_eq!(info["response"]["nodeClass"]["kind"], "EC2NodeClass");
    assert_eq!(info["response"]["providerIdPrefix"], "aws://");
    let request = serde_json::json!({
        "nodePool": "default",
        "nodeClass": {
            "name": "default",
            "specJson": common::seed_node_class().spec_json,
        },
    })
    .to_string();
    let types = tokio::task::spawn_blocking(move || {
        reflection_call(&address, "GetInstanceTypes", &request)
    })
    .await
    .unwrap();
    let list = types["response"]["instanceTypes"].as_array().unwrap();
    assert!(list.len() > 500, "{} types", list.len());
    let t4g = list.iter().find(|t| t["name"] == "t4g.medium").unwrap();
    assert!(t4g["offerings"].as_array().unwrap().len() >= 2);
    world.assert_least_privilege();
}
