//! Nodes' attachable-volume limits: a node's CSINode gives them (every
//! driver's `allocatable.count`, Karpenter's `populateVolumeLimits`); a node
//! without one takes its instance type's `volume_attachment_limits`.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_snapshot::{Mode, Objects, Source, build, fill_from_catalogs};
use serde_json::json;

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
        "status": {"allocatable": {"cpu": "2"}}
    }))
    .expect("node")
}

#[test]
fn a_csinode_gives_its_nodes_limits_and_the_instance_type_the_rest() {
    let with_csi = node("with-csi");
    let without = node("without");
    let csi: CSINode = serde_json::from_value(json!({
        "metadata": {"name": "with-csi"},
        "spec": {"drivers": [
            {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
            {"name": "efs.csi.aws.com", "nodeID": "i-1"}
        ]}
    }))
    .expect("csinode");
    let catalog = sched::InstanceTypeCatalog {
        name: "c".into(),
        instance_types: vec![types::InstanceType {
            name: "m5.large".into(),
            volume_attachment_limits: [("ebs.csi.aws.com".to_owned(), 39)].into(),
            ..types::InstanceType::default()
        }],
    };
    let objects = Objects {
        nodes: vec![
            Source {
                id: 0,
                object: &with_csi,
            },
            Source {
                id: 1,
                object: &without,
            },
        ],
        csi_nodes: vec![Source {
            id: 2,
            object: &csi,
        }],
        catalogs: vec![catalog],
        ..Objects::default()
    };
    let mut built = build(&objects, Mode::Live).expect("builds");
    fill_from_catalogs(&mut built.snapshot);
    let limits = |name: &str| {
        let node = built
            .snapshot
            .nodes
            .iter()
            .find(|n| n.name == name)
            .expect("node");
        node.volume_limits.clone().into_iter().collect::<Vec<_>>()
    };
    assert_eq!(limits("with-csi"), [("ebs.csi.aws.com".to_owned(), 25)]);
    assert_eq!(limits("without"), [("ebs.csi.aws.com".to_owned(), 39)]);
}
