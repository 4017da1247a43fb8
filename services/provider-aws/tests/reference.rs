//! Capacity that matches AWS: every instance type `GetInstanceTypes` offers
//! (moto serves AWS's own DescribeInstanceTypes data) is compared with
//! Karpenter's published instance-type reference (labels and allocatable
//! resources for AL2023 without block device mappings or kubelet settings,
//! a 7.5% VM overhead), from the fixture `tests/data/reference-instance-types.tsv`
//! (`scripts/gen-instance-type-data` derives it from the reference page).
//!
//! The network-bandwidth label and `vpc.amazonaws.com/pod-eni` come from
//! the provider's limits table, which is generated from the same page: for
//! those two the comparison only shows the table is read right. Everything
//! else is computed from what EC2 says.

mod common;

use std::collections::BTreeMap;

use common::{Place, World, resolved, seed_node_class};
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::types::v1 as types;

const FIXTURE: &str = include_str!("data/reference-instance-types.tsv");
const ABBREVIATED: &str = "karpenter.k8s.aws/instance-";

/// What the reference says of one type.
struct Reference {
    labels: BTreeMap<String, String>,
    resources: BTreeMap<String, i64>,
}

fn reference() -> BTreeMap<&'static str, Reference> {
    let pairs = |text: &'static str| {
        text.split(',')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').expect("key=value"))
    };
    FIXTURE
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let mut fields = line.split('\t');
            let (name, labels, resources) = (
                fields.next().expect("name"),
                fields.next().expect("labels"),
                fields.next().expect("resources"),
            );
            let labels = pairs(labels)
                .map(|(k, v)| {
                    let key = match k.strip_prefix('~') {
                        Some(short) => format!("{ABBREVIATED}{short}"),
                        None => k.to_string(),
                    };
                    (key, v.to_string())
                })
                .collect();
            let resources = pairs(resources)
                .map(|(k, v)| {
                    let value = karpenter_core::quantity::parse_resource(k, v)
                        .unwrap_or_else(|e| panic!("{name}: {k}={v}: {e}"));
                    (k.to_string(), value)
                })
                .collect();
            (name, Reference { labels, resources })
        })
        .collect()
}

/// The labels a type's nodes carry: its single-value requirements, but for
/// where and how it is offered (the reference prints no offering labels).
fn labels(it: &types::InstanceType) -> BTreeMap<String, String> {
    const OFFERING_KEYS: [&str; 4] = [
        "topology.kubernetes.io/zone",
        "topology.k8s.aws/zone-id",
        "karpenter.sh/capacity-type",
        "topology.kubernetes.io/region",
    ];
    it.requirements
        .iter()
        .filter(|r| r.operator == types::Operator::In as i32 && r.values.len() == 1)
        .filter(|r| !OFFERING_KEYS.contains(&r.key.as_str()))
        .map(|r| (r.key.clone(), r.values[0].clone()))
        .collect()
}

/// Capacity less kube-reserved, system-reserved and eviction thresholds,
/// leaving out what comes to nothing, as the reference prints it.
fn allocatable(it: &types::InstanceType) -> BTreeMap<String, i64> {
    let mut out = it
        .capacity
        .as_ref()
        .map(|c| c.quantities.clone())
        .unwrap_or_default();
    let overhead = it.overhead.clone().unwrap_or_default();
    for list in [
        overhead.kube_reserved,
        overhead.system_reserved,
        overhead.eviction_threshold,
    ]
    .into_iter()
    .flatten()
    {
        for (name, value) in list.quantities {
            *out.entry(name).or_default() -= value;
        }
    }
    out.retain(|_, v| *v != 0);
    out.into_iter().collect()
}

fn differences<V: PartialEq + std::fmt::Debug>(
    ours: &BTreeMap<String, V>,
    theirs: &BTreeMap<String, V>,
) -> Vec<String> {
    let mut keys: Vec<&String> = ours.keys().chain(theirs.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| ours.get(*k) != theirs.get(*k))
        .map(|k| format!("{k}: ours {:?}, reference {:?}", ours.get(k), theirs.get(k)))
        .collect()
}

/// us-east-1, one of the regions the reference was computed over, where
/// AWS offers the most types.
const US_EAST_1: Place = Place {
    region: "us-east-1",
    zones: &[
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1e",
        "us-east-1f",
    ],
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_offered_instance_type_matches_karpenters_published_reference() {
    let mut world = World::start_in(US_EAST_1, |_| {}).await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let types = world
        .client
        .get_instance_types(pv::GetInstanceTypesRequest {
            node_pool: "default".into(),
            node_class: Some(node_class),
        })
        .await
        .expect("instance types")
        .into_inner()
        .instance_types;
    let reference = reference();
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for it in &types {
        let Some(published) = reference.get(it.name.as_str()) else {
            continue;
        };
        compared += 1;
        let mut found = differences(&labels(it), &published.labels);
        found.extend(differences(&allocatable(it), &published.resources));
        if !found.is_empty() {
            mismatches.push(format!("{}: {}", it.name, found.join("; ")));
        }
    }
    let matching = compared - mismatches.len();
    println!(
        "{matching} of {compared} instance types match the reference ({} offered, {} published)",
        types.len(),
        reference.len()
    );
    for line in &mismatches {
        println!("  {line}");
    }
    assert!(compared > 1000, "only {compared} types to compare");
    assert!(
        matching * 100 >= compared * 99,
        "{matching} of {compared} match; below 99%:\n{}",
        mismatches.join("\n")
    );
    world.assert_least_privilege();
}
