//! `SCHEDULER_CONFIG` end to end (Karpenter v1.15's `--scheduler-config`,
//! on provider-kwok): kube-scheduler's default zonal spread applies to a
//! Deployment whose pods declare none, its selector deduced from the
//! Service that selects them and their ReplicaSet, so the nodes launched
//! for it land in different zones.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Cluster, eventually, label};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn default_zonal_spread_puts_a_deployments_nodes_in_different_zones() {
    let cluster = Cluster::start().await;
    let config = "podTopologySpread:\n  defaultConstraints:\n  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n";
    let settings = cluster.settings(&["--scheduler-config", config]);
    let _adapter = cluster.adapter_with(settings, common::test_timing()).await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}),
            json!({"disruption": {"consolidateAfter": "Never"}}),
        ))
        .await;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
    }))
    .expect("service");
    Api::<Service>::default_namespaced(cluster.client.clone())
        .create(&PostParams::default(), &service)
        .await
        .expect("service created");
    cluster.deployment("web", 3, "1", json!({})).await;

    // The zone label comes with the launch.
    eventually("three launched nodes", Duration::from_secs(60), || async {
        let claims = cluster.claims().await;
        claims.len() >= 3
            && claims
                .iter()
                .all(|c| label(c, "topology.kubernetes.io/zone").is_some())
    })
    .await;
    let claims = cluster.claims().await;
    let zones: BTreeSet<String> = claims
        .iter()
        .filter_map(|c| label(c, "topology.kubernetes.io/zone").map(str::to_owned))
        .collect();
    assert_eq!(claims.len(), 3, "one node a pod");
    assert_eq!(zones.len(), 3, "a zone each: {zones:?}");
    eventually("the pods running", Duration::from_secs(60), || {
        cluster.running("web", 3)
    })
    .await;
}
