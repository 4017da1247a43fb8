//! Validation is fast enough to run on every API request: compiled once per
//! CRD, one NodePool validates in well under a millisecond (optimized).

use std::time::{Duration, Instant};

use crd_validation::CrdValidator;
use serde_json::json;

#[test]
fn validating_a_nodepool_takes_well_under_a_millisecond() {
    let v = CrdValidator::from_yaml(include_str!(
        "fixtures/upstream/karpenter.sh_nodepools.yaml"
    ))
    .expect("the NodePool CRD loads");
    let nodepool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default", "labels": {"team": "platform"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "platform", "karpenter.sh/capacity-type": "spot"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a", "us-west-2b"]}
                    ],
                    "taints": [{"key": "example.com/special", "effect": "NoSchedule"}],
                    "expireAfter": "720h"
                }
            },
            "limits": {"cpu": 1000, "memory": "1000Gi"},
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "1m",
                "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "@daily", "duration": "10m"}]
            },
            "weight": 10
        }
    });
    let run = |n: u32, old: Option<&serde_json::Value>| {
        let start = Instant::now();
        for _ in 0..n {
            let mut obj = nodepool.clone();
            let out = v.validate("v1", &mut obj, old).expect("served");
            assert!(out.is_valid(), "{:?}", out.violations);
        }
        start.elapsed() / n
    };
    run(20, None);
    let create = run(200, None);
    let update = run(200, Some(&nodepool));
    let limit = if cfg!(debug_assertions) {
        Duration::from_millis(20)
    } else {
        Duration::from_millis(1)
    };
    eprintln!("create: {create:?} per object, update: {update:?} per object");
    assert!(create < limit, "create took {create:?}");
    assert!(update < limit, "update took {update:?}");
}

#[test]
fn a_validator_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CrdValidator>();
    let v = std::sync::Arc::new(
        CrdValidator::from_yaml(include_str!(
            "fixtures/upstream/karpenter.sh_nodeclaims.yaml"
        ))
        .expect("the NodeClaim CRD loads"),
    );
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let v = std::sync::Arc::clone(&v);
            std::thread::spawn(move || {
                let mut obj = json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                    "metadata": {"name": format!("claim-{i}")},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]
                    }
                });
                v.validate("v1", &mut obj, None).expect("served").is_valid()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().expect("thread ran"));
    }
}
