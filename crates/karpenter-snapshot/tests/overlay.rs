//! NodeOverlays applied to pools' instance types: ports of Karpenter's
//! `pkg/controllers/nodeoverlay` suite, `store_test.go` and the
//! `AdjustedPrice` cases of `pkg/cloudprovider/suite_test.go`.

use karpenter_api::NodeOverlay;
use karpenter_core::labels::LabelRules;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_snapshot::overlay::{Verdict, adjusted_price, apply};
use serde_json::json;

fn offering(zone: &str, capacity_type: &str, price: f64) -> types::Offering {
    types::Offering {
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price,
        available: true,
        requirements: Vec::new(),
    }
}

fn instance_type(name: &str, arch: &str, offerings: Vec<types::Offering>) -> types::InstanceType {
    let label = |key: &str, value: &str| types::Requirement {
        key: key.into(),
        operator: types::Operator::In as i32,
        values: vec![value.into()],
        min_values: None,
    };
    types::InstanceType {
        name: name.into(),
        requirements: vec![
            label("node.kubernetes.io/instance-type", name),
            label("kubernetes.io/arch", arch),
        ],
        offerings,
        capacity: Some(types::ResourceList {
            quantities: [("cpu".to_owned(), 4000)].into(),
        }),
        overhead: None,
        price_overlaid: false,
        capacity_overlaid: false,
        volume_attachment_limits: Default::default(),
    }
}

/// Two pools on one catalog; `np2` carries the template label
/// `test-label=test-value`.
fn cluster(types: Vec<types::InstanceType>) -> sched::ClusterSnapshot {
    let pool = |name: &str, labels: &[(&str, &str)]| sched::NodePool {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        instance_type_catalog: "catalog".into(),
        ready: true,
        ..Default::default()
    };
    sched::ClusterSnapshot {
        node_pools: vec![
            pool("np1", &[]),
            pool("np2", &[("test-label", "test-value")]),
        ],
        instance_type_catalogs: vec![sched::InstanceTypeCatalog {
            name: "catalog".into(),
            instance_types: types,
        }],
        ..Default::default()
    }
}

fn overlay(name: &str, spec: serde_json::Value) -> NodeOverlay {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("a valid NodeOverlay")
}

fn run(snapshot: &mut sched::ClusterSnapshot, overlays: &[NodeOverlay]) -> Vec<(String, Verdict)> {
    let refs: Vec<&NodeOverlay> = overlays.iter().collect();
    apply(snapshot, &refs, &LabelRules::neutral())
}

/// The instance type `name` as pool `pool` sees it.
fn seen<'a>(
    snapshot: &'a sched::ClusterSnapshot,
    pool: &str,
    name: &str,
) -> &'a types::InstanceType {
    let pool = snapshot
        .node_pools
        .iter()
        .find(|p| p.name == pool)
        .expect("pool");
    snapshot
        .instance_type_catalogs
        .iter()
        .find(|c| c.name == pool.instance_type_catalog)
        .expect("the pool's catalog")
        .instance_types
        .iter()
        .find(|it| it.name == name)
        .expect("instance type")
}

fn prices(snapshot: &sched::ClusterSnapshot, pool: &str, name: &str) -> Vec<f64> {
    seen(snapshot, pool, name)
        .offerings
        .iter()
        .map(|o| (o.price * 1e6).round() / 1e6)
        .collect()
}

fn default_type() -> types::InstanceType {
    instance_type(
        "default",
        "amd64",
        vec![offering("test-zone-1", "spot", 1.02)],
    )
}

fn verdict(verdicts: &[(String, Verdict)], name: &str) -> Verdict {
    verdicts
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .expect("a verdict for every overlay")
}

#[test]
fn adjusted_price_follows_karpenter() {
    for (adjustment, base, expected) in [
        ("-10%", 10.0, 9.0),
        ("+10%", 10.0, 11.0),
        ("-50%", 10.0, 5.0),
        ("+100%", 10.0, 20.0),
        ("-100%", 10.0, 0.0),
        ("-200%", 10.0, 0.0),
        ("-25%", 1.5, 1.125),
        ("+0", 10.0, 10.0),
        ("+5", 10.0, 15.0),
        ("-2.5", 10.0, 7.5),
        ("-10", 10.0, 0.0),
        ("-15", 10.0, 0.0),
        ("+0.75", 1.25, 2.0),
        ("+100", 0.001, 100.001),
        ("+0.0001", 0.0001, 0.0002),
        ("80.0", 82781.0, 80.0),
        ("", 82781.0, 82781.0),
    ] {
        let got = adjusted_price(base, adjustment);
        assert!(
            (got - expected).abs() < 1e-9,
            "{adjustment} on {base}: {got}"
        );
    }
}

#[test]
fn without_overlays_nothing_changes() {
    let mut snapshot = cluster(vec![default_type()]);
    assert!(run(&mut snapshot, &[]).is_empty());
    assert_eq!(prices(&snapshot, "np1", "default"), [1.02]);
    assert_eq!(snapshot.instance_type_catalogs.len(), 1);
}

#[test]
fn an_overlay_selects_pools_by_name_and_template_labels() {
    let mut snapshot = cluster(vec![default_type()]);
    let verdicts = run(
        &mut snapshot,
        &[overlay(
            "by-pool",
            json!({"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["np1"]}], "price": "13234.223"}),
        )],
    );
    assert_eq!(verdicts, [("by-pool".to_owned(), Verdict::Applied)]);
    assert_eq!(prices(&snapshot, "np1", "default"), [13234.223]);
    assert_eq!(prices(&snapshot, "np2", "default"), [1.02]);
    assert!(seen(&snapshot, "np1", "default").price_overlaid);
    assert!(!seen(&snapshot, "np1", "default").capacity_overlaid);
    assert!(!seen(&snapshot, "np2", "default").price_overlaid);

    let mut snapshot = cluster(vec![default_type()]);
    run(
        &mut snapshot,
        &[overlay(
            "by-label",
            json!({"requirements": [{"key": "test-label", "operator": "In", "values": ["test-value"]}], "priceAdjustment": "+1000"}),
        )],
    );
    assert_eq!(prices(&snapshot, "np1", "default"), [1.02]);
    assert_eq!(prices(&snapshot, "np2", "default"), [1001.02]);
}

#[test]
fn offerings_are_selected_by_zone_and_capacity_type() {
    let offerings = vec![
        offering("test-zone-1", "spot", 1.02),
        offering("test-zone-2", "on-demand", 2.02),
        offering("test-zone-4", "reserved", 4.02),
    ];
    let mut snapshot = cluster(vec![instance_type("default", "amd64", offerings.clone())]);
    let verdicts = run(
        &mut snapshot,
        &[
            overlay(
                "a",
                json!({"weight": 10, "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-2", "test-zone-4"]}], "priceAdjustment": "+201"}),
            ),
            overlay(
                "b",
                json!({"weight": 10, "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}], "priceAdjustment": "-0.5"}),
            ),
        ],
    );
    assert!(
        verdicts.iter().all(|(_, v)| *v == Verdict::Applied),
        "{verdicts:?}"
    );
    assert_eq!(prices(&snapshot, "np1", "default"), [0.52, 203.02, 205.02]);

    // A higher weight wins an offering both select; the rest go to the lower.
    let mut snapshot = cluster(vec![instance_type("default", "amd64", offerings)]);
    run(
        &mut snapshot,
        &[
            overlay(
                "a",
                json!({"weight": 20, "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-2"]}], "priceAdjustment": "+201"}),
            ),
            overlay(
                "b",
                json!({"weight": 10, "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-2", "test-zone-4"]}], "priceAdjustment": "-1.5"}),
            ),
        ],
    );
    assert_eq!(prices(&snapshot, "np1", "default"), [1.02, 203.02, 2.52]);
}

#[test]
fn overlays_of_one_weight_setting_one_price_conflict_and_apply_nowhere() {
    let offerings = || {
        vec![
            offering("test-zone-1", "spot", 1.02),
            offering("test-zone-2", "on-demand", 2.02),
            offering("test-zone-3", "spot", 3.02),
            offering("test-zone-4", "reserved", 4.02),
        ]
    };
    let zone = |values: serde_json::Value| json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": values});
    let spot = json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]});
    for (a, b, a_conflicts) in [
        (
            zone(json!(["test-zone-1", "test-zone-4"])),
            json!({"key": "karpenter.sh/capacity-type", "operator": "Exists"}),
            true,
        ),
        (
            json!({"key": "karpenter.sh/capacity-type", "operator": "Exists"}),
            spot.clone(),
            true,
        ),
        (
            zone(json!(["test-zone-6", "test-zone-4"])),
            spot.clone(),
            false,
        ),
        (
            zone(json!(["test-zone-1", "test-zone-4"])),
            spot.clone(),
            true,
        ),
    ] {
        let mut snapshot = cluster(vec![instance_type("default", "amd64", offerings())]);
        let verdicts = run(
            &mut snapshot,
            &[
                overlay(
                    "a",
                    json!({"weight": 10, "requirements": [a], "price": "9"}),
                ),
                overlay(
                    "b",
                    json!({"weight": 10, "requirements": [b], "price": "7"}),
                ),
            ],
        );
        // Equal weights: the name later in the alphabet goes first.
        assert_eq!(verdicts[0], ("b".to_owned(), Verdict::Applied));
        let expected = if a_conflicts {
            Verdict::Conflict
        } else {
            Verdict::Applied
        };
        assert_eq!(verdicts[1], ("a".to_owned(), expected));
        if a_conflicts {
            assert!(
                prices(&snapshot, "np1", "default")
                    .iter()
                    .all(|p| *p != 9.0),
                "a conflicting overlay applies nowhere"
            );
        }
    }

    // Identical values conflict too; different weights never do.
    let arm = |name: &str, weight: i32, price: &str| {
        overlay(
            name,
            json!({"weight": weight, "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}], "price": price}),
        )
    };
    let mut snapshot = cluster(vec![instance_type("m-arm", "arm64", offerings())]);
    let verdicts = run(&mut snapshot, &[arm("a", 10, "100"), arm("b", 10, "100")]);
    assert_eq!(verdict(&verdicts, "a"), Verdict::Conflict);
    let mut snapshot = cluster(vec![instance_type("m-arm", "arm64", offerings())]);
    let verdicts = run(&mut snapshot, &[arm("a", 10, "100"), arm("b", 20, "50")]);
    assert!(verdicts.iter().all(|(_, v)| *v == Verdict::Applied));
    assert_eq!(prices(&snapshot, "np1", "m-arm"), [50.0; 4]);

    // Two of weight 10 under one of weight 20 still conflict.
    let mut snapshot = cluster(vec![instance_type("m-arm", "arm64", offerings())]);
    let verdicts = run(
        &mut snapshot,
        &[arm("a", 10, "1"), arm("b", 10, "2"), arm("c", 20, "3")],
    );
    assert_eq!(verdict(&verdicts, "c"), Verdict::Applied);
    assert_eq!(verdict(&verdicts, "b"), Verdict::Applied);
    assert_eq!(verdict(&verdicts, "a"), Verdict::Conflict);
    assert_eq!(prices(&snapshot, "np1", "m-arm"), [3.0; 4]);
}

#[test]
fn a_conflict_in_any_instance_type_keeps_the_overlay_off_all_of_them() {
    let types = vec![
        instance_type("default", "amd64", vec![offering("z1", "spot", 1.02)]),
        instance_type("small", "amd64", vec![offering("z1", "spot", 0.5)]),
        instance_type("gpu", "amd64", vec![offering("z1", "spot", 3.0)]),
    ];
    let types_in = |names: &[&str]| json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": names}]);
    let mut snapshot = cluster(types);
    let verdicts = run(
        &mut snapshot,
        &[
            overlay(
                "a",
                json!({"weight": 10, "requirements": types_in(&["default", "small"]), "price": "1.03"}),
            ),
            overlay(
                "b",
                json!({"weight": 10, "requirements": types_in(&["small", "gpu"]), "price": "23"}),
            ),
        ],
    );
    assert_eq!(verdict(&verdicts, "a"), Verdict::Conflict);
    assert_eq!(
        prices(&snapshot, "np1", "default"),
        [1.02],
        "untouched: a applies nowhere"
    );
    assert_eq!(prices(&snapshot, "np1", "small"), [23.0]);
    assert_eq!(prices(&snapshot, "np2", "gpu"), [23.0]);

    // In and NotIn select different types: no conflict.
    let mut snapshot = cluster(vec![default_type()]);
    let verdicts = run(
        &mut snapshot,
        &[
            overlay(
                "a",
                json!({"weight": 10, "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["default"]}], "price": "5"}),
            ),
            overlay(
                "b",
                json!({"weight": 10, "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["default"]}], "price": "6"}),
            ),
        ],
    );
    assert!(
        verdicts.iter().all(|(_, v)| *v == Verdict::Applied),
        "{verdicts:?}"
    );
}

#[test]
fn capacity_adds_extended_resources_by_weight() {
    let capacity = |snapshot: &sched::ClusterSnapshot, pool: &str, resource: &str| {
        seen(snapshot, pool, "default")
            .capacity
            .as_ref()
            .and_then(|c| c.quantities.get(resource).copied())
    };
    let all = json!([]);
    let mut snapshot = cluster(vec![default_type()]);
    let verdicts = run(
        &mut snapshot,
        &[
            overlay(
                "a",
                json!({"weight": 10, "requirements": all, "capacity": {"smarter-devices/fuse": "5"}}),
            ),
            overlay(
                "b",
                json!({"weight": 20, "requirements": all, "capacity": {"smarter-devices/fuse": "99"}}),
            ),
            overlay(
                "c",
                json!({"weight": 10, "requirements": all, "capacity": {"hugepages-1Gi": "2Gi"}}),
            ),
        ],
    );
    assert!(
        verdicts.iter().all(|(_, v)| *v == Verdict::Applied),
        "{verdicts:?}"
    );
    assert_eq!(capacity(&snapshot, "np1", "smarter-devices/fuse"), Some(99));
    assert_eq!(capacity(&snapshot, "np1", "hugepages-1Gi"), Some(2 << 30));
    assert_eq!(
        capacity(&snapshot, "np1", "cpu"),
        Some(4000),
        "cpu is never overlaid"
    );

    let mut snapshot = cluster(vec![default_type()]);
    let verdicts = run(
        &mut snapshot,
        &[
            overlay(
                "a",
                json!({"weight": 10, "requirements": all, "capacity": {"smarter-devices/fuse": "1"}}),
            ),
            overlay(
                "b",
                json!({"weight": 10, "requirements": all, "capacity": {"smarter-devices/fuse": "54"}}),
            ),
        ],
    );
    assert_eq!(verdict(&verdicts, "a"), Verdict::Conflict);
    assert_eq!(capacity(&snapshot, "np1", "smarter-devices/fuse"), Some(54));

    // Only where the overlay selects: the pool with the template label.
    let mut snapshot = cluster(vec![default_type()]);
    run(
        &mut snapshot,
        &[overlay(
            "a",
            json!({"requirements": [{"key": "test-label", "operator": "Exists"}], "capacity": {"smarter-devices/fuse": "1"}, "priceAdjustment": "+1000.0"}),
        )],
    );
    assert_eq!(capacity(&snapshot, "np1", "smarter-devices/fuse"), None);
    assert_eq!(capacity(&snapshot, "np2", "smarter-devices/fuse"), Some(1));
    assert_eq!(prices(&snapshot, "np2", "default"), [1001.02]);
}

#[test]
fn overlays_of_one_weight_adding_different_resources_both_apply() {
    let all = json!([]);
    let mut snapshot = cluster(vec![default_type()]);
    let verdicts = run(
        &mut snapshot,
        &[
            overlay(
                "a",
                json!({"weight": 10, "requirements": all, "capacity": {"smarter-devices/fuse": "1"}}),
            ),
            overlay(
                "b",
                json!({"weight": 10, "requirements": all, "capacity": {"hugepages-2Mi": "100Mi"}}),
            ),
        ],
    );
    assert!(
        verdicts.iter().all(|(_, v)| *v == Verdict::Applied),
        "{verdicts:?}"
    );
    let capacity = seen(&snapshot, "np1", "default")
        .capacity
        .clone()
        .unwrap_or_default();
    assert_eq!(capacity.quantities.get("smarter-devices/fuse"), Some(&1));
    assert_eq!(capacity.quantities.get("hugepages-2Mi"), Some(&(100 << 20)));
    assert!(seen(&snapshot, "np1", "default").capacity_overlaid);
}

#[test]
fn a_pool_that_does_not_plan_is_not_overlaid() {
    let mut snapshot = cluster(vec![default_type()]);
    // A pool whose instance types could not be had this round.
    snapshot.node_pools[1].ready = false;
    snapshot.node_pools[1].instance_type_catalog = String::new();
    run(
        &mut snapshot,
        &[overlay("all", json!({"requirements": [], "price": "5"}))],
    );
    assert_eq!(prices(&snapshot, "np1", "default"), [5.0]);
    assert_eq!(snapshot.node_pools[1].instance_type_catalog, "");
}

#[test]
fn an_overlay_of_a_core_resource_is_invalid_and_changes_nothing() {
    let mut snapshot = cluster(vec![default_type()]);
    let verdicts = run(
        &mut snapshot,
        &[overlay(
            "cpu",
            json!({"requirements": [], "capacity": {"cpu": "64"}}),
        )],
    );
    let Verdict::Invalid(message) = verdict(&verdicts, "cpu") else {
        panic!("{verdicts:?}");
    };
    assert!(
        message.contains("invalid capacity: cpu in resource, restricted"),
        "{message}"
    );
    let capacity = seen(&snapshot, "np1", "default")
        .capacity
        .clone()
        .unwrap_or_default();
    assert_eq!(capacity.quantities.get("cpu"), Some(&4000));
}

#[test]
fn a_catalog_of_one_pool_is_overlaid_in_place() {
    // As the adapter asks the provider: one catalog per pool, named after it.
    let mut snapshot = cluster(vec![default_type()]);
    snapshot.instance_type_catalogs[0].name = "np1".into();
    snapshot
        .instance_type_catalogs
        .push(sched::InstanceTypeCatalog {
            name: "np2".into(),
            instance_types: vec![default_type()],
        });
    snapshot.node_pools[0].instance_type_catalog = "np1".into();
    snapshot.node_pools[1].instance_type_catalog = "np2".into();
    run(
        &mut snapshot,
        &[overlay(
            "all",
            json!({"requirements": [], "priceAdjustment": "+1"}),
        )],
    );
    assert_eq!(snapshot.instance_type_catalogs.len(), 2, "no copies");
    assert_eq!(snapshot.node_pools[0].instance_type_catalog, "np1");
    assert_eq!(prices(&snapshot, "np1", "default"), [2.02]);
    assert_eq!(prices(&snapshot, "np2", "default"), [2.02]);
}

#[test]
fn an_invalid_overlay_applies_nowhere() {
    let mut snapshot = cluster(vec![default_type()]);
    let verdicts = run(
        &mut snapshot,
        &[overlay(
            "bad",
            json!({"requirements": [{"key": "karpenter.sh/test", "operator": "Exists"}], "price": "5"}),
        )],
    );
    let Verdict::Invalid(message) = verdict(&verdicts, "bad") else {
        panic!("{verdicts:?}");
    };
    assert!(message.contains("karpenter.sh/test"), "{message}");
    assert_eq!(prices(&snapshot, "np1", "default"), [1.02]);
}

#[test]
fn a_pools_existing_nodes_are_priced_from_its_overlaid_catalog() {
    let mut snapshot = cluster(vec![default_type()]);
    for pool in ["np1", "np2"] {
        snapshot.nodes.push(sched::StateNode {
            name: format!("node-{pool}"),
            node_pool: pool.into(),
            instance_type: "default".into(),
            zone: "test-zone-1".into(),
            capacity_type: "spot".into(),
            ..Default::default()
        });
    }
    run(
        &mut snapshot,
        &[overlay(
            "np2",
            json!({"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["np2"]}], "priceAdjustment": "+2.5"}),
        )],
    );
    karpenter_snapshot::fill_from_catalogs(&mut snapshot);
    let price = |name: &str| {
        snapshot
            .nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.price)
    };
    assert_eq!(price("node-np1"), Some(1.02));
    assert!((price("node-np2").unwrap_or(0.0) - 3.52).abs() < 1e-9);
}
