use crd_validation::CrdValidator;
use serde_json::json;
fn main() {
    let np = CrdValidator::from_yaml(include_str!("../tests/fixtures/upstream/karpenter.sh_nodepools.yaml")).unwrap();
    let mut obj = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "limit": {"cpu": 10},
            "weight": 0,
            "disruption": {"consolidateAfter": "30s", "budgets": [{"nodes": "10%", "schedule": "@daily"}]},
            "template": {"metadata": {"labels": {"karpenter.sh/foo": "x"}}, "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]},
                    {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["abc"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": []}
                ]
            }}
        }
    });
    let out = np.validate("v1", &mut obj, None).unwrap();
    for v in &out.violations { println!("{v}"); }
    println!("unknown: {:?}", out.unknown_fields);
    println!("{}", serde_json::to_string_pretty(&obj["spec"]["disruption"]).unwrap());
}
