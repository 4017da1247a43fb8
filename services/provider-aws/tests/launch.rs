//! Launches like Karpenter's, read from what the provider sent to EC2
//! (through the test proxy, against moto): launch templates shared by the
//! claims of a pool, what a template says, what a fleet says, the instance
//! taken from the fleet's answer, and the types a launch offers.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use karpenter_proto::provider::v1 as pv;

async fn create(world: &mut World, claim: pv::NodeClaim) -> pv::Instance {
    world
        .client
        .create(pv::CreateRequest {
            node_claim: Some(claim),
        })
        .await
        .unwrap_or_else(|e| panic!("create: {e:?}"))
        .into_inner()
        .instance
        .expect("an instance")
}

/// The seed node class with `extra` merged into its spec, resolved.
async fn node_class(world: &mut World, extra: serde_json::Value) -> pv::NodeClass {
    let mut nc = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).expect("spec");
    for (k, v) in extra.as_object().expect("object") {
        spec[k] = v.clone();
    }
    nc.spec_json = spec.to_string();
    resolved(world, nc).await.0
}

/// Values of the request fields whose name ends with `suffix`.
fn values<'a>(fields: &'a BTreeMap<String, String>, suffix: &str) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(k, _)| k.ends_with(suffix))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The resource types a request tags (`TagSpecification.N.ResourceType`).
fn tagged_types<'a>(fields: &'a BTreeMap<String, String>, prefix: &str) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(k, _)| k.starts_with(prefix) && k.ends_with(".ResourceType"))
        .map(|(_, v)| v.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_one_pool_share_launch_templates_without_their_own_tag() {
    let mut world = World::start().await;
    let (nc, _) = resolved(&mut world, seed_node_class()).await;
    let first = create(&mut world, seed_node_claim("default-00000", &nc)).await;
    let templates = world.proxy.count("ec2:CreateLaunchTemplate");
    assert!(templates >= 1);
    for i in 1..10 {
        let instance = create(&mut world, seed_node_claim(&format!("default-{i:05}"), &nc)).await;
        assert_eq!(
            instance.tags["karpenter.sh/nodeclaim"],
            format!("default-{i:05}")
        );
    }
    assert_eq!(
        world.proxy.count("ec2:CreateLaunchTemplate"),
        templates,
        "ten claims of one pool made the templates of the first only"
    );
    assert_eq!(first.tags["karpenter.sh/nodeclaim"], "default-00000");
    for fields in world
        .proxy
        .with(|s| s.requests_of("ec2:CreateLaunchTemplate"))
    {
        let tag_keys = values(&fields, ".Key");
        assert!(
            !tag_keys.contains(&"karpenter.sh/nodeclaim"),
            "a template is no claim's: {fields:?}"
        );
        for key in [
            "kubernetes.io/cluster/seed-cluster",
            "karpenter.sh/nodepool",
            "eks:eks-cluster-name",
            "karpenter.k8s.aws/ec2nodeclass",
        ] {
            assert!(tag_keys.contains(&key), "{key} missing: {tag_keys:?}");
        }
    }
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_and_fleets_carry_what_the_node_class_asks() {
    let mut world = World::start().await;
    let nc = node_class(
        &mut world,
        serde_json::json!({
            "detailedMonitoring": true,
            "ipPrefixCount": 2,
            "context": "ctx-123",
            "tags": {"team": "platform"},
        }),
    )
    .await;
    let mut spot = seed_node_claim("default-spot", &nc);
    spot.requirements[3] = requirement("karpenter.sh/capacity-type", &["spot"]);
    let instance = create(&mut world, spot).await;
    assert_eq!(instance.capacity_type, "spot");
    let template = world
        .proxy
        .with(|s| s.requests_of("ec2:CreateLaunchTemplate"))
        .pop()
        .expect("a template");
    let one = |suffix: &str| values(&template, suffix).first().map(|v| v.to_string());
    assert_eq!(
        one("MetadataOptions.InstanceMetadataTags").as_deref(),
        Some("disabled")
    );
    assert_eq!(one("Monitoring.Enabled").as_deref(), Some("true"));
    assert_eq!(
        one("NetworkInterface.1.Ipv4PrefixCount").as_deref(),
        Some("2")
    );
    assert_eq!(one("NetworkInterface.1.DeviceIndex").as_deref(), Some("0"));
    assert_eq!(
        values(&template, "NetworkInterface.1.SecurityGroupId.1"),
        [world.made.security_group.as_str()]
    );
    let mut data_tags = tagged_types(&template, "LaunchTemplateData.TagSpecification.");
    data_tags.sort();
    assert_eq!(data_tags, ["network-interface", "spot-instances-request"]);
    assert!(
        values(&template, ".Key").contains(&"team"),
        "the node class's tags"
    );
    let fleet = world
        .proxy
        .with(|s| s.requests_of("ec2:CreateFleet"))
        .pop()
        .expect("a fleet");
    assert_eq!(fleet.get("Context").map(String::as_str), Some("ctx-123"));
    let mut fleet_tags = tagged_types(&fleet, "TagSpecification.");
    fleet_tags.sort();
    assert_eq!(fleet_tags, ["fleet", "instance", "volume"]);
    assert!(
        values(&fleet, ".Overrides.1.ImageId")
            .iter()
            .all(|id| id.starts_with("ami-")),
        "{fleet:?}"
    );
    assert!(!values(&fleet, ".Overrides.1.Priority").is_empty());

    // A claim whose minValues were relaxed launches without the context.
    let mut relaxed = seed_node_claim("default-relaxed", &nc);
    relaxed.annotations.insert(
        "karpenter.sh/nodeclaim-min-values-relaxed".into(),
        "true".into(),
    );
    create(&mut world, relaxed).await;
    let fleet = world
        .proxy
        .with(|s| s.requests_of("ec2:CreateFleet"))
        .pop()
        .expect("a fleet");
    assert!(!fleet.contains_key("Context"), "{fleet:?}");

    // Custom AMIs keep their own block devices: the template maps none.
    let custom_spec = serde_json::json!({"amiFamily": "Custom", "amiSelectorTerms": [{"id": world.made.ami_arm64}],
                                         "userData": "#!/bin/bash\n/opt/join\n"});
    let custom = node_class(&mut world, custom_spec).await;
    create(&mut world, seed_node_claim("default-custom", &custom)).await;
    let template = world
        .proxy
        .with(|s| s.requests_of("ec2:CreateLaunchTemplate"))
        .pop()
        .expect("a template");
    assert!(
        !template.keys().any(|k| k.contains("BlockDeviceMapping")),
        "{template:?}"
    );
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_launched_instance_is_read_from_the_fleets_answer() {
    let mut world = World::start().await;
    let (nc, _) = resolved(&mut world, seed_node_class()).await;
    // Real EC2 may not describe a new instance for seconds.
    world
        .proxy
        .add_fault(Fault::FreshInstanceNotFound(Duration::from_secs(60)));
    let instance = create(&mut world, seed_node_claim("default-fresh", &nc)).await;
    let launched = world.proxy.with(|s| s.launched.clone());
    assert_eq!(launched.len(), 1);
    assert!(
        instance
            .provider_id
            .ends_with(&format!("/{}", launched[0].0)),
        "{instance:?}"
    );
    assert_eq!(instance.zone, "ap-northeast-2a");
    assert_eq!(instance.image_id, world.made.ami_arm64);
    assert_eq!(instance.state, "pending");
    assert!(instance.instance_type.starts_with("t4g."), "{instance:?}");
    assert!(instance.allocatable.is_some());
    world.assert_least_privilege();
}

/// A claim of any t4g or g5g size (g5g: NVIDIA GPUs, Graviton) small
/// enough for both.
fn mixed_claim(name: &str, nc: &pv::NodeClass, capacity_types: &[&str]) -> pv::NodeClaim {
    let mut claim = seed_node_claim(name, nc);
    claim.requirements = vec![
        requirement("karpenter.k8s.aws/instance-family", &["t4g", "g5g"]),
        requirement("karpenter.sh/capacity-type", capacity_types),
        requirement("kubernetes.io/arch", &["arm64"]),
        requirement("karpenter.sh/nodepool", &["default"]),
    ];
    claim
}

fn offered_types(fleet: &BTreeMap<String, String>) -> Vec<String> {
    let mut types: Vec<String> = values(fleet, ".InstanceType")
        .into_iter()
        .map(str::to_string)
        .collect();
    types.sort();
    types.dedup();
    types
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_types_and_dear_spot_are_not_launched_for_claims_that_do_not_need_them() {
    let mut world = World::start().await;
    // The GPU types are priced cheapest, so cheapness alone must not pick
    // them; t4g spot is dearer than t4g on-demand. (Prices are read once,
    // at the first launch.)
    world.proxy.with(|s| {
        for (name, price) in s.on_demand.iter_mut() {
            if name.starts_with("g5g.") {
                *price = 0.001;
            }
        }
        let cheapest_t4g = s
            .on_demand
            .iter()
            .filter(|(n, _)| n.starts_with("t4g."))
            .map(|(_, p)| *p)
            .fold(f64::INFINITY, f64::min);
        for ((name, _), price) in s.spot.iter_mut() {
            if name.starts_with("g5g.") {
                *price = 0.0005;
            } else if name.starts_with("t4g.") {
                *price = cheapest_t4g * 3.0;
            }
        }
    });
    let (nc, _) = resolved(&mut world, seed_node_class()).await;
    create(
        &mut world,
        mixed_claim("default-nogpu", &nc, &["on-demand"]),
    )
    .await;
    let fleet = world
        .proxy
        .with(|s| s.requests_of("ec2:CreateFleet"))
        .pop()
        .expect("a fleet");
    let types = offered_types(&fleet);
    assert!(
        !types.is_empty() && types.iter().all(|t| t.starts_with("t4g.")),
        "{types:?}"
    );

    // Spot dearer than the cheapest on-demand t4g: on-demand is launched.
    let instance = create(
        &mut world,
        mixed_claim("default-dear-spot", &nc, &["spot", "on-demand"]),
    )
    .await;
    assert_eq!(instance.capacity_type, "on-demand", "{instance:?}");
    let fleet = world
        .proxy
        .with(|s| s.requests_of("ec2:CreateFleet"))
        .pop()
        .expect("a fleet");
    assert!(offered_types(&fleet).iter().all(|t| t.starts_with("t4g.")));

    // A claim that asks for a GPU gets one.
    let mut gpu = mixed_claim("default-gpu", &nc, &["on-demand"]);
    gpu.requirements[0] = requirement("karpenter.k8s.aws/instance-family", &["g5g"]);
    let instance = create(&mut world, gpu).await;
    assert!(instance.instance_type.starts_with("g5g."), "{instance:?}");
    world.assert_least_privilege();
}
