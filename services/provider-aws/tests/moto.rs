//! provider-aws against a real AWS API peer: `moto_server` on loopback, with
//! our fault-injecting proxy in front for what moto lacks (see `common`).
//! Every test ends by checking that only seed 003's IAM actions were called.

mod common;

use std::time::{Duration, Instant};

use common::*;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::types::v1 as types;
use prost::Message as _;
use tokio_stream::StreamExt as _;

fn label<'a>(it: &'a types::InstanceType, key: &str) -> Option<&'a str> {
    it.requirements
        .iter()
        .find(|r| r.key == key && r.operator == types::Operator::In as i32)
        .and_then(|r| r.values.first())
        .map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolves_subnets_security_groups_alias_amis_and_instance_profile() {
    let mut world = World::start().await;
    let (node_class, response) = resolved(&mut world, seed_node_class()).await;
    let conditions: Vec<(&str, &str)> = response
        .conditions
        .iter()
        .map(|c| (c.r#type.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        conditions,
        vec![
            ("SubnetsReady", "True"),
            ("SecurityGroupsReady", "True"),
            ("AMIsReady", "True"),
            ("InstanceProfileReady", "True"),
            ("ValidationSucceeded", "True"),
            ("Ready", "True"),
        ],
        "{:?}",
        response.conditions
    );
    let status: serde_json::Value = serde_json::from_str(&node_class.status_json).unwrap();
    let subnets = status["subnets"].as_array().unwrap();
    assert_eq!(subnets.len(), 3, "only the tagged subnets: {subnets:?}");
    // Most free IPs first: the /20 in 2a, the /22 in 2c, the /24 in 2b.
    let zones: Vec<&str> = subnets
        .iter()
        .map(|s| s["zone"].as_str().unwrap())
        .collect();
    assert_eq!(
        zones,
        vec!["ap-northeast-2a", "ap-northeast-2c", "ap-northeast-2b"]
    );
    assert!(subnets.iter().all(|s| {
        s["zoneID"]
            .as_str()
            .is_some_and(|z| z.starts_with("apne2-az"))
    }));
    assert_eq!(
        status["securityGroups"][0]["id"],
        world.made.security_group.as_str()
    );
    let amis = status["amis"].as_array().unwrap();
    let ids: Vec<&str> = amis.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&world.made.ami_amd64.as_str()), "{amis:?}");
    assert!(ids.contains(&world.made.ami_arm64.as_str()), "{amis:?}");
    let arm = amis
        .iter()
        .find(|a| a["id"] == world.made.ami_arm64.as_str())
        .unwrap();
    assert_eq!(arm["requirements"][0]["key"], "kubernetes.io/arch");
    assert_eq!(arm["requirements"][0]["values"][0], "arm64");
    assert_eq!(
        arm["requirements"][1],
        serde_json::json!({"key": "karpenter.k8s.aws/instance-gpu-manufacturer", "operator": "NotIn", "values": ["nvidia"]}),
        "the standard image serves all but NVIDIA GPUs"
    );
    // The instance profile was created, tagged and given the role.
    let profile = status["instanceProfile"].as_str().unwrap().to_string();
    let got = world
        .setup
        .iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .unwrap();
    let got = got.instance_profile().unwrap();
    assert_eq!(got.roles()[0].role_name(), NODE_ROLE);
    let tags: Vec<(&str, &str)> = got.tags().iter().map(|t| (t.key(), t.value())).collect();
    assert!(
        tags.contains(&("kubernetes.io/cluster/seed-cluster", "owned")),
        "{tags:?}"
    );
    assert!(
        tags.contains(&("karpenter.k8s.aws/ec2nodeclass", "default")),
        "{tags:?}"
    );
    // A second resolution finds and keeps the profile.
    let (_, again) = resolved(&mut world, seed_node_class()).await;
    assert_eq!(again.status_json, response.status_json);
    assert_eq!(world.proxy.count("iam:CreateInstanceProfile"), 1);
    assert!(!response.hash.is_empty());

    // Selectors that match nothing say what to fix.
    let mut broken = seed_node_class();
    broken.spec_json = serde_json::json!({
        "amiSelectorTerms": [{"alias": "al2@v20000101"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "nope"}}],
        "securityGroupSelectorTerms": [{"id": "sg-0123456789abcdef0"}],
        "instanceProfile": "missing-profile",
        "userData": "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"x\"\n\n--x\nContent-Type: text/x-shellscript\n\n#!/bin/sh\n",
    })
    .to_string();
    let (_, response) = resolved(&mut world, broken).await;
    for condition in &response.conditions {
        assert_eq!(condition.status, "False", "{condition:?}");
        assert!(!condition.message.is_empty(), "{condition:?}");
    }
    assert!(
        response.conditions[0]
            .message
            .contains("subnetSelectorTerms")
    );
    assert!(response.conditions[3].message.contains("missing-profile"));
    assert!(
        response.conditions[4].message.contains("spec.userData")
            && response.conditions[4]
                .message
                .contains("no closing boundary"),
        "{:?}",
        response.conditions[4]
    );
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_types_carry_labels_capacity_overhead_and_prices() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let request = pv::GetInstanceTypesRequest {
        node_pool: "default".into(),
        node_class: Some(node_class.clone()),
    };
    let started = Instant::now();
    let types = world
        .client
        .get_instance_types(request.clone())
        .await
        .unwrap()
        .into_inner()
        .instance_types;
    let cold = started.elapsed();
    assert!(types.len() > 500, "{} types", types.len());
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
    for (key, value) in [
        ("karpenter.k8s.aws/instance-category", "m"),
        ("karpenter.k8s.aws/instance-family", "m5"),
        ("karpenter.k8s.aws/instance-generation", "5"),
        ("karpenter.k8s.aws/instance-size", "large"),
        ("karpenter.k8s.aws/instance-cpu", "2"),
        ("karpenter.k8s.aws/instance-cpu-manufacturer", "intel"),
        ("karpenter.k8s.aws/instance-memory", "8192"),
        ("karpenter.k8s.aws/instance-hypervisor", "nitro"),
        ("karpenter.k8s.aws/instance-network-bandwidth", "750"),
        ("karpenter.k8s.aws/instance-ebs-bandwidth", "4750"),
        (
            "karpenter.k8s.aws/instance-encryption-in-transit-supported",
            "false",
        ),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("node.kubernetes.io/instance-type", "m5.large"),
        ("topology.kubernetes.io/region", REGION),
    ] {
        assert_eq!(label(m5, key), Some(value), "{key}");
    }
    let gpu_absent = m5
        .requirements
        .iter()
        .find(|r| r.key == "karpenter.k8s.aws/instance-gpu-count")
        .unwrap();
    assert_eq!(gpu_absent.operator, types::Operator::DoesNotExist as i32);
    let capacity = &m5.capacity.as_ref().unwrap().quantities;
    assert_eq!(capacity["cpu"], 2000);
    assert_eq!(capacity["memory"], (8192 - 615) << 20, "7.5% VM overhead");
    assert_eq!(capacity["pods"], 29, "3 ENIs x (10 - 1) + 2");
    assert_eq!(capacity["ephemeral-storage"], 20 << 30);
    let overhead = m5.overhead.as_ref().unwrap();
    let kube = &overhead.kube_reserved.as_ref().unwrap().quantities;
    assert_eq!(kube["cpu"], 70);
    assert_eq!(kube["memory"], (11 * 29 + 255) << 20);
    let eviction = &overhead.eviction_threshold.as_ref().unwrap().quantities;
    assert_eq!(eviction["memory"], 100 << 20);
    // Offerings: 3 zones x {spot, on-demand}, priced from the proxy's pricing answers.
    assert_eq!(m5.offerings.len(), 6, "{:?}", m5.offerings);
    let table = world.proxy.with(|s| {
        (
            s.on_demand["m5.large"],
            s.spot[&("m5.large".to_string(), "ap-northeast-2b".to_string())],
        )
    });
    let od = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == "on-demand")
        .unwrap();
    assert!((od.price - table.0).abs() < 1e-9, "{od:?} vs {table:?}");
    let spot_b = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == "spot" && o.zone == "ap-northeast-2b")
        .unwrap();
    assert!(
        (spot_b.price - (table.1 * 10_000.0).round() / 10_000.0).abs() < 1e-4,
        "{spot_b:?}"
    );
    assert!(m5.offerings.iter().all(|o| o.available));
    // Bare metal is priced as a dedicated product: its on-demand offering
    // has that price, and is available.
    let metal = types
        .iter()
        .find(|t| t.name == "m5.metal")
        .expect("m5.metal is offered");
    let metal_price = world.proxy.with(|s| s.on_demand["m5.metal"]);
    let metal_on_demand: Vec<&types::Offering> = metal
        .offerings
        .iter()
        .filter(|o| o.capacity_type == "on-demand")
        .collect();
    assert!(!metal_on_demand.is_empty());
    assert!(
        metal_on_demand
            .iter()
            .all(|o| o.available && (o.price - metal_price).abs() < 1e-9),
        "{metal_on_demand:?}"
    );
    assert!(
        od.requirements
            .iter()
            .any(|r| r.key == "topology.k8s.aws/zone-id")
    );
    // GPU types carry GPU labels and resources.
    if let Some(g) = types.iter().find(|t| t.name == "g4dn.xlarge") {
        assert_eq!(
            label(g, "karpenter.k8s.aws/instance-gpu-manufacturer"),
            Some("nvidia")
        );
        assert_eq!(label(g, "karpenter.k8s.aws/instance-gpu-count"), Some("1"));
        assert_eq!(g.capacity.as_ref().unwrap().quantities["nvidia.com/gpu"], 1);
    }
    // Kubelet settings in the node class change capacity and overhead.
    let mut custom = node_class.clone();
    let mut spec: serde_json::Value = serde_json::from_str(&custom.spec_json).unwrap();
    spec["kubelet"] = serde_json::json!({"maxPods": 110, "kubeReserved": {"cpu": "200m"}, "systemReserved": {"memory": "300Mi"}, "evictionHard": {"memory.available": "5%"}});
    custom.spec_json = spec.to_string();
    let describe_calls = world.proxy.count("ec2:DescribeInstanceTypes");
    let started = Instant::now();
    let custom_types = instance_types_of(&world, custom).await;
    let warm = started.elapsed();
    assert_eq!(
        world.proxy.count("ec2:DescribeInstanceTypes"),
        describe_calls,
        "served from cache"
    );
    let m5 = custom_types.iter().find(|t| t.name == "m5.large").unwrap();
    assert_eq!(m5.capacity.as_ref().unwrap().quantities["pods"], 110);
    let overhead = m5.overhead.as_ref().unwrap();
    assert_eq!(
        overhead.kube_reserved.as_ref().unwrap().quantities["cpu"],
        200
    );
    assert_eq!(
        overhead.system_reserved.as_ref().unwrap().quantities["memory"],
        300 << 20
    );
    let evict = overhead.eviction_threshold.as_ref().unwrap().quantities["memory"];
    assert_eq!(
        evict,
        ((((8192_i64 - 615) << 20) as f64) * 0.05).ceil() as i64
    );
    eprintln!(
        "GetInstanceTypes: cold {cold:?}, cached {warm:?}, {} types",
        types.len()
    );
    world.assert_least_privilege();
}

/// m5.large's on-demand offering, asserted to carry the documented
/// estimate: $0.0316 per vCPU-hour + $0.00424 per GiB-hour.
async fn estimated_m5_large_on_demand(world: &mut World) -> types::Offering {
    let types = world
        .client
        .get_instance_types(pv::GetInstanceTypesRequest {
            node_pool: "default".into(),
            node_class: None,
        })
        .await
        .unwrap()
        .into_inner()
        .instance_types;
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
    let od = m5
        .offerings
        .iter()
        .find(|o| o.capacity_type == "on-demand")
        .unwrap();
    assert!(
        (od.price - (2.0 * 0.0316 + 8.0 * 0.00424)).abs() < 1e-4,
        "{od:?}"
    );
    od.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_pricing_api_falls_back_to_estimates() {
    let moto_world = World::start_with(|_| {}).await;
    moto_world.proxy.add_fault(Fault::PricingDown);
    let mut world = moto_world;
    let od = estimated_m5_large_on_demand(&mut world).await;
    assert!(od.available);
    assert!(world.proxy.count("pricing:GetProducts") >= 1);
    world.assert_least_privilege();
}

/// `ISOLATED_VPC`: the Pricing API is never asked; on-demand offerings are
/// priced by the estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_vpc_never_calls_the_pricing_api() {
    let mut world = World::start_with(|settings| settings.isolated_vpc = true).await;
    estimated_m5_large_on_demand(&mut world).await;
    assert_eq!(world.proxy.count("pricing:GetProducts"), 0);
    world.assert_least_privilege();
}

async fn create(world: &mut World, claim: pv::NodeClaim) -> Result<pv::Instance, tonic::Status> {
    world
        .client
        .create(pv::CreateRequest {
            node_claim: Some(claim),
        })
        .await
        .map(|r| r.into_inner().instance.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_003_node_class_end_to_end_launch_get_list_drift_terminate() {
    let mut world = World::start().await;
    let (node_class, resolution) = resolved(&mut world, seed_node_class()).await;
    let mut claim = seed_node_claim("default-abcde", &node_class);
    // The adapter writes the hash under the keys Info names.
    let info = world
        .client
        .info(pv::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    claim.annotations.insert(
        info.node_class_hash_annotation.clone(),
        resolution.hash.clone(),
    );
    claim.annotations.insert(
        info.node_class_hash_version_annotation.clone(),
        resolution.hash_version.clone(),
    );
    let started = Instant::now();
    let instance = create(&mut world, claim.clone()).await.unwrap();
    eprintln!("Create: {:?}", started.elapsed());
    assert!(instance.instance_type.starts_with("t4g."), "{instance:?}");
    assert_eq!(instance.zone, "ap-northeast-2a");
    assert_eq!(
        instance.capacity_type, "spot",
        "spot is allowed and cheaper"
    );
    assert!(
        instance
            .provider_id
            .starts_with("aws:///ap-northeast-2a/i-"),
        "{}",
        instance.provider_id
    );
    assert_eq!(instance.image_id, world.made.ami_arm64);
    assert_eq!(instance.labels["kubernetes.io/arch"], "arm64");
    assert_eq!(instance.labels["karpenter.sh/capacity-type"], "spot");
    assert_eq!(instance.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(instance.tags["karpenter.sh/nodeclaim"], "default-abcde");
    assert_eq!(instance.tags["kubernetes.io/cluster/seed-cluster"], "owned");
    assert!(instance.price > 0.0);
    assert!(instance.capacity.as_ref().unwrap().quantities["cpu"] >= 2000);
    // The fleet: instant, one override per type x zone, the cheapest first.
    assert_eq!(world.proxy.count("ec2:CreateFleet"), 1);
    // The launch template carries the AMI, groups, profile, metadata options and nodeadm user data.
    let templates = world
        .setup
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .unwrap();
    let template = &templates.launch_templates()[0];
    assert!(
        template
            .launch_template_name()
            .unwrap()
            .starts_with("karpenter.k8s.aws/")
    );
    let data = launch_template_data(&world, template.launch_template_id().unwrap()).await;
    assert_eq!(data.image_id(), Some(world.made.ami_arm64.as_str()));
    let user_data =
        userdata::of_template(&world.setup, template.launch_template_name().unwrap()).await;
    let parts = userdata::mime_parts(&user_data);
    let ours = parts.last().expect("Karpenter's NodeConfig");
    assert_eq!(ours.content_type, "application/node.eks.aws");
    let config = userdata::node_config(&ours.payload);
    let taints = config["spec"]["kubelet"]["config"]["registerWithTaints"]
        .as_sequence()
        .expect("taints");
    assert!(
        taints
            .iter()
            .any(|t| t["key"].as_str() == Some("karpenter.sh/unregistered")
                && t["effect"].as_str() == Some("NoExecute")),
        "{user_data}"
    );
    assert!(
        config["spec"]["kubelet"]["flags"][0]
            .as_str()
            .is_some_and(|f| f.contains("karpenter.sh/nodepool=default")),
        "{user_data}"
    );
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.http_tokens())
            .map(|t| t.as_str()),
        Some("required")
    );
    // Get and List find it; it has not drifted.
    let got = world
        .client
        .get(pv::GetRequest {
            provider_id: instance.provider_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .instance
        .unwrap();
    assert_eq!(got.node_claim_name, "default-abcde");
    let listed = world
        .client
        .list(pv::ListRequest {})
        .await
        .unwrap()
        .into_inner()
        .instances;
    assert_eq!(listed.len(), 1);
    let drift = |world: &mut World, claim: pv::NodeClaim| {
        let provider_id = instance.provider_id.clone();
        let mut client = world.client.clone();
        let node_class_hash = claim.annotations[&info.node_class_hash_annotation].clone();
        let node_class_hash_version =
            claim.annotations[&info.node_class_hash_version_annotation].clone();
        async move {
            client
                .is_drifted(pv::IsDriftedRequest {
                    node_claim: Some(claim),
                    provider_id,
                    image_id: String::new(),
                    node_class_hash,
                    node_class_hash_version,
                })
                .await
                .unwrap()
                .into_inner()
                .reason
        }
    };
    // moto gives fleet instances the VPC's default security group instead of
    // the launch template's, so the drift checks compare against the groups
    // moto actually assigned (real EC2 assigns the template's).
    let described = world
        .setup
        .ec2
        .describe_instances()
        .instance_ids(instance.provider_id.rsplit('/').next().unwrap())
        .send()
        .await
        .unwrap();
    let moto_groups: Vec<serde_json::Value> = described.reservations()[0].instances()[0]
        .security_groups()
        .iter()
        .map(|g| serde_json::json!({"id": g.group_id().unwrap()}))
        .collect();
    let mut node_class = node_class.clone();
    let mut status: serde_json::Value = serde_json::from_str(&node_class.status_json).unwrap();
    status["securityGroups"] = serde_json::Value::Array(moto_groups);
    node_class.status_json = status.to_string();
    claim.node_class = Some(node_class.clone());
    assert_eq!(drift(&mut world, claim.clone()).await, "");
    // Different security groups drift it.
    let mut moved = claim.clone();
    let mut nc = node_class.clone();
    let mut status: serde_json::Value = serde_json::from_str(&nc.status_json).unwrap();
    status["securityGroups"] = serde_json::json!([{"id": world.made.security_group}]);
    nc.status_json = status.to_string();
    moved.node_class = Some(nc);
    assert_eq!(drift(&mut world, moved).await, "SecurityGroupDrift");
    // A new AMI drifts the node.
    let mut moved = claim.clone();
    let mut nc = node_class.clone();
    let mut status: serde_json::Value = serde_json::from_str(&nc.status_json).unwrap();
    status["amis"][0]["id"] = "ami-0000000000000000a".into();
    status["amis"][1]["id"] = "ami-0000000000000000b".into();
    nc.status_json = status.to_string();
    moved.node_class = Some(nc);
    assert_eq!(drift(&mut world, moved).await, "AMIDrift");
    // Subnets that no longer include the instance's drift it.
    let mut moved = claim.clone();
    let mut nc = node_class.clone();
    let mut status: serde_json::Value = serde_json::from_str(&nc.status_json).unwrap();
    status["subnets"] =
        serde_json::json!([{"id": "subnet-0000000000000000a", "zone": "ap-northeast-2a"}]);
    nc.status_json = status.to_string();
    moved.node_class = Some(nc);
    assert_eq!(drift(&mut world, moved).await, "SubnetDrift");

    // A changed static spec drifts it by hash.
    let mut changed = claim.clone();
    let mut nc = node_class.clone();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).unwrap();
    spec["tags"] = serde_json::json!({"team": "a"});
    nc.spec_json = spec.to_string();
    changed.node_class = Some(nc);
    assert_eq!(drift(&mut world, changed).await, "NodeClassDrift");
    // Delete terminates; afterwards the instance is NotFound.
    world
        .client
        .delete(pv::DeleteRequest {
            provider_id: instance.provider_id.clone(),
        })
        .await
        .unwrap();
    let gone = world
        .client
        .get(pv::GetRequest {
            provider_id: instance.provider_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    let again = world
        .client
        .delete(pv::DeleteRequest {
            provider_id: instance.provider_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::NotFound);
    assert!(
        world
            .client
            .list(pv::ListRequest {})
            .await
            .unwrap()
            .into_inner()
            .instances
            .is_empty()
    );
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_returns_the_first_instance() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let claim = seed_node_claim("default-retry", &node_class);
    let first = create(&mut world, claim.clone()).await.unwrap();
    let templates = world.proxy.count("ec2:CreateLaunchTemplate");
    let second = create(&mut world, claim).await.unwrap();
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(
        world.proxy.count("ec2:CreateFleet"),
        1,
        "the retry launched nothing"
    );
    let running = world
        .setup
        .ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:karpenter.sh/nodeclaim")
                .values("default-retry")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let count: usize = running
        .reservations()
        .iter()
        .map(|r| r.instances().len())
        .sum();
    assert_eq!(count, 1);
    // The launch templates made by the first call are reused, not duplicated.
    assert_eq!(world.proxy.count("ec2:CreateLaunchTemplate"), templates);
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_capacity_falls_back_to_another_offering_and_is_remembered() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    world.proxy.add_fault(Fault::FleetIce {
        capacity_type: "spot".into(),
    });
    let instance = create(&mut world, seed_node_claim("default-ice", &node_class))
        .await
        .unwrap();
    assert_eq!(instance.capacity_type, "on-demand", "spot had no capacity");
    assert_eq!(world.proxy.count("ec2:CreateFleet"), 2);
    // The spot offerings are now unavailable in the catalog...
    let types = instance_types_of(&world, node_class.clone()).await;
    let failed = world.proxy.with(|s| s.ice_answers[0].clone());
    assert!(!failed.is_empty());
    for (t, zone) in &failed {
        let it = types.iter().find(|x| &x.name == t).unwrap();
        let o = it
            .offerings
            .iter()
            .find(|o| &o.zone == zone && o.capacity_type == "spot")
            .unwrap();
        assert!(
            !o.available,
            "{t} {zone} spot should be remembered as unavailable"
        );
    }
    // ...so the next claim goes straight to on-demand.
    let next = create(&mut world, seed_node_claim("default-ice-2", &node_class))
        .await
        .unwrap();
    assert_eq!(next.capacity_type, "on-demand");
    assert_eq!(world.proxy.count("ec2:CreateFleet"), 3);
    // With no capacity anywhere: RESOURCE_EXHAUSTED with the failed offerings.
    world.proxy.add_fault(Fault::FleetIce {
        capacity_type: "on-demand".into(),
    });
    let error = create(&mut world, seed_node_claim("default-ice-3", &node_class))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::ResourceExhausted, "{error:?}");
    let status = tonic_types::pb::Status::decode(error.details()).unwrap();
    let detail = &status.details[0];
    assert_eq!(
        detail.type_url,
        "type.googleapis.com/karpenter.provider.v1.InsufficientCapacity"
    );
    let ice = pv::InsufficientCapacity::decode(detail.value.as_slice()).unwrap();
    assert!(
        ice.offerings
            .iter()
            .all(|o| o.capacity_type == "on-demand" && o.instance_type.starts_with("t4g."))
    );
    assert!(!ice.offerings.is_empty());
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_and_server_errors_are_retried_with_backoff() {
    let mut world = World::start().await;
    world.proxy.add_fault(Fault::Throttle {
        action: "DescribeSubnets".into(),
        times: 2,
    });
    world.proxy.add_fault(Fault::ServerError {
        action: "DescribeSecurityGroups".into(),
        times: 1,
    });
    world.proxy.add_fault(Fault::Throttle {
        action: "GetParameter".into(),
        times: 1,
    });
    world.proxy.add_fault(Fault::Throttle {
        action: "DescribeInstanceTypes".into(),
        times: 2,
    });
    let (node_class, response) = resolved(&mut world, seed_node_class()).await;
    assert!(
        response.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        response.conditions
    );
    assert_eq!(
        world.proxy.count("ec2:DescribeSubnets"),
        3,
        "two throttled, one answered"
    );
    assert_eq!(world.proxy.count("ec2:DescribeSecurityGroups"), 2);
    let instance = create(
        &mut world,
        seed_node_claim("default-throttled", &node_class),
    )
    .await
    .unwrap();
    assert!(instance.provider_id.contains("i-"));
    // Persistent throttling ends in a clear error, not a hang.
    world.proxy.add_fault(Fault::Throttle {
        action: "DescribeInstances".into(),
        times: 100,
    });
    let error = world.client.list(pv::ListRequest {}).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
    assert!(
        error.message().contains("RequestLimitExceeded")
            || error.message().contains("ec2:DescribeInstances"),
        "{error:?}"
    );
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interruption_kind_is_streamed_and_acknowledged() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let instance = create(&mut world, seed_node_claim("default-int", &node_class))
        .await
        .unwrap();
    let id = instance.provider_id.rsplit('/').next().unwrap().to_string();
    let event = |source: &str, detail_type: &str, detail: serde_json::Value| {
        serde_json::json!({"version": "0", "id": "e", "detail-type": detail_type, "source": source, "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": REGION, "resources": [], "detail": detail}).to_string()
    };
    let bodies = vec![
        event(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            serde_json::json!({"instance-id": id, "instance-action": "terminate"}),
        ),
        event(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            serde_json::json!({"instance-id": id}),
        ),
        event(
            "aws.health",
            "AWS Health Event",
            serde_json::json!({"service": "EC2", "eventTypeCategory": "scheduledChange", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", "affectedEntities": [{"entityValue": id}]}),
        ),
        // EventBridge may send states in any case.
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            serde_json::json!({"instance-id": id, "state": "STOPPING"}),
        ),
        event(
            "aws.ec2",
            "EC2 Capacity Reservation Instance Interruption Warning",
            serde_json::json!({"instance-id": id, "instance-action": "terminate"}),
        ),
        "this is not json".to_string(),
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            serde_json::json!({"instance-id": id, "state": "running"}),
        ),
        event(
            "aws.autoscaling",
            "EC2 Instance Launch Successful",
            serde_json::json!({}),
        ),
    ];
    for body in &bodies {
        world
            .setup
            .sqs
            .send_message()
            .queue_url(&world.made.queue_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let mut stream = world
        .client
        .watch_interruptions(pv::WatchInterruptionsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut kinds = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while kinds.len() < 5 && Instant::now() < deadline {
        let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(10), stream.next()).await
        else {
            break;
        };
        let event = event.unwrap();
        assert_eq!(event.provider_ids, vec![instance.provider_id.clone()]);
        kinds.push((event.kind, event.state.clone()));
        world
            .client
            .acknowledge_interruption(pv::AcknowledgeInterruptionRequest {
                id: event.id.clone(),
            })
            .await
            .unwrap();
    }
    use pv::interruption_event::Kind;
    kinds.sort();
    assert_eq!(
        kinds,
        vec![
            (Kind::SpotInterruption as i32, String::new()),
            (Kind::RebalanceRecommendation as i32, String::new()),
            (Kind::ScheduledChange as i32, String::new()),
            (Kind::StateChange as i32, "stopping".to_string()),
            (Kind::CapacityReservationInterruption as i32, String::new()),
        ]
    );
    drop(stream);
    // Acknowledged, malformed and unhandled messages were all deleted.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let attributes = world
            .setup
            .sqs
            .get_queue_attributes()
            .queue_url(&world.made.queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let attributes = attributes.attributes().cloned().unwrap_or_default();
        let count = |name: aws_sdk_sqs::types::QueueAttributeName| {
            attributes
                .get(&name)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(-1)
        };
        let visible = count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages);
        let hidden =
            count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible);
        if visible == 0 && hidden == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queue still holds {visible} + {hidden} messages"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = integration_tests_metrics(&world).await;
    assert!(
        metrics.contains("interruption_messages_malformed_total 1"),
        "only the one that is not JSON: {metrics}"
    );
    assert!(
        metrics.contains("interruption_messages_ignored_total 2"),
        "a running instance and another source: {metrics}"
    );
    world.assert_least_privilege();
}

async fn integration_tests_metrics(world: &World) -> String {
    let (status, body) = http(world.service.http, "GET", "/metrics", "")
        .await
        .unwrap();
    assert_eq!(status, 200);
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_map_to_grpc_codes() {
    let mut world = World::start().await;
    // A node class whose spec selects no subnet (whatever status the caller
    // sends: the provider resolves it itself): FAILED_PRECONDITION naming
    // what is missing.
    let mut unready = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&unready.spec_json).unwrap();
    spec["subnetSelectorTerms"] =
        serde_json::json!([{"tags": {"karpenter.sh/discovery": "no-such-cluster"}}]);
    unready.spec_json = spec.to_string();
    let (_, resolved_status) = resolved(&mut world, seed_node_class()).await;
    unready.status_json = resolved_status.status_json;
    let claim = seed_node_claim("default-early", &unready);
    let error = create(&mut world, claim).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::FailedPrecondition, "{error:?}");
    assert!(
        error
            .message()
            .contains("SubnetSelector did not match any subnets")
            && error.message().contains("SubnetsReady"),
        "{error:?}"
    );
    // A spec that is not an EC2NodeClass: INVALID_ARGUMENT with the field path.
    let mut bad = seed_node_class();
    bad.spec_json = "{\"subnetSelectorTerms\": 5}".into();
    let error = world
        .client
        .resolve_node_class(pv::ResolveNodeClassRequest {
            node_class: Some(bad),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    use tonic_types::StatusExt as _;
    let details = error.get_error_details();
    let violation = &details.bad_request().unwrap().field_violations[0];
    assert_eq!(violation.field, "node_class.spec_json");
    // Unknown instance: NOT_FOUND.
    let error = world
        .client
        .get(pv::GetRequest {
            provider_id: "aws:///ap-northeast-2a/i-0123456789abcdef0".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::NotFound);
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_done_work_is_found_and_reused() {
    let mut world = World::start().await;
    // The role cannot be added (5xx past every retry): the profile is left without it...
    world.proxy.add_fault(Fault::ServerError {
        action: "AddRoleToInstanceProfile".into(),
        times: 100,
    });
    let error = world
        .client
        .resolve_node_class(pv::ResolveNodeClassRequest {
            node_class: Some(seed_node_class()),
        })
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable, "{error:?}");
    assert_eq!(world.proxy.count("iam:CreateInstanceProfile"), 1);
    // ...and the next resolution finds it and finishes the job.
    world.proxy.clear_faults();
    let (node_class, response) = resolved(&mut world, seed_node_class()).await;
    assert!(
        response.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        response.conditions
    );
    assert_eq!(
        world.proxy.count("iam:CreateInstanceProfile"),
        1,
        "found, not created again"
    );
    assert_eq!(world.proxy.count("iam:AddRoleToInstanceProfile"), 6);
    // A launch whose fleet fails after its launch template was made reuses the template.
    world.proxy.add_fault(Fault::ServerError {
        action: "CreateFleet".into(),
        times: 100,
    });
    let error = create(&mut world, seed_node_claim("default-half", &node_class))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable, "{error:?}");
    let templates = world.proxy.count("ec2:CreateLaunchTemplate");
    assert!(templates > 0);
    world.proxy.clear_faults();
    let instance = create(&mut world, seed_node_claim("default-half", &node_class))
        .await
        .unwrap();
    assert!(instance.provider_id.contains("/i-"));
    assert_eq!(
        world.proxy.count("ec2:CreateLaunchTemplate"),
        templates,
        "the templates were reused"
    );
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_terms_by_id_name_owner_and_ssm_parameter() {
    let mut world = World::start().await;
    let subnet = world.made.subnets[1].0.clone();
    let mut node_class = seed_node_class();
    node_class.spec_json = serde_json::json!({
        "amiFamily": "AL2023",
        "amiSelectorTerms": [
            {"name": "al2023-ami-*", "owner": "amazon"},
        ],
        "subnetSelectorTerms": [{"id": subnet}],
        "securityGroupSelectorTerms": [{"name": "seed-cluster-nodes"}],
        "role": NODE_ROLE,
    })
    .to_string();
    let (node_class, response) = resolved(&mut world, node_class).await;
    assert!(
        response.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        response.conditions
    );
    let status: serde_json::Value = serde_json::from_str(&node_class.status_json).unwrap();
    assert_eq!(status["subnets"].as_array().unwrap().len(), 1);
    assert_eq!(status["subnets"][0]["id"], subnet.as_str());
    assert_eq!(
        status["securityGroups"][0]["id"],
        world.made.security_group.as_str()
    );
    // The newest AL2023 image per architecture, with only an arch requirement.
    let amis = status["amis"].as_array().unwrap();
    let ids: Vec<&str> = amis.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(amis.len(), 2, "{amis:?}");
    assert!(
        ids.contains(&world.made.ami_amd64.as_str())
            && ids.contains(&world.made.ami_arm64.as_str()),
        "{ids:?}"
    );
    assert!(
        amis.iter()
            .all(|a| a["requirements"].as_array().unwrap().len() == 1)
    );
    // An ssmParameter term reads the parameter and selects its image.
    let mut by_parameter = seed_node_class();
    by_parameter.spec_json = serde_json::json!({
        "amiFamily": "AL2023",
        "amiSelectorTerms": [{"ssmParameter": format!("/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023/arm64/standard/recommended/image_id")}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "*"}}],
        "securityGroupSelectorTerms": [{"id": world.made.security_group}],
        "instanceProfile": "given-profile",
    })
    .to_string();
    world
        .setup
        .iam
        .create_instance_profile()
        .instance_profile_name("given-profile")
        .send()
        .await
        .unwrap();
    let (by_parameter, response) = resolved(&mut world, by_parameter).await;
    assert!(
        response.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        response.conditions
    );
    let status: serde_json::Value = serde_json::from_str(&by_parameter.status_json).unwrap();
    assert_eq!(status["amis"][0]["id"], world.made.ami_arm64.as_str());
    assert_eq!(status["amis"].as_array().unwrap().len(), 1);
    assert_eq!(
        status["subnets"].as_array().unwrap().len(),
        3,
        "tag value '*' matches any value"
    );
    assert_eq!(status["instanceProfile"], "given-profile");
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_launch_templates_are_cleaned_up() {
    let mut world = World::start_with(|s| {
        s.launch_template_ttl = Duration::from_secs(2);
        s.janitor_interval = Duration::from_millis(500);
    })
    .await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let instance = create(&mut world, seed_node_claim("default-lt", &node_class))
        .await
        .unwrap();
    let templates = |world: &World| {
        let ec2 = world.setup.ec2.clone();
        async move {
            ec2.describe_launch_templates()
                .send()
                .await
                .unwrap()
                .launch_templates()
                .len()
        }
    };
    let made = templates(&world).await;
    assert!(made >= 1);
    assert_eq!(world.proxy.count("ec2:CreateLaunchTemplate"), made);
    let deadline = Instant::now() + Duration::from_secs(20);
    while templates(&world).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the unused launch template was not deleted"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(world.proxy.count("ec2:DeleteLaunchTemplate") >= 1);
    // The instance is untouched, and the next launch makes the template again.
    world
        .client
        .get(pv::GetRequest {
            provider_id: instance.provider_id.clone(),
        })
        .await
        .unwrap();
    create(&mut world, seed_node_claim("default-lt-2", &node_class))
        .await
        .unwrap();
    assert_eq!(world.proxy.count("ec2:CreateLaunchTemplate"), 2 * made);
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_values_are_kept_over_the_launched_types() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    // Two cpu sizes exist among t4g with 4-16 GiB: minValues 2 holds.
    let mut claim = seed_node_claim("default-min", &node_class);
    claim.requirements[1].min_values = Some(2);
    create(&mut world, claim).await.unwrap();
    // More minValues than listed values is a bad request, with its field path.
    let mut claim = seed_node_claim("default-min-2", &node_class);
    claim.requirements[0].min_values = Some(2);
    let error = create(&mut world, claim).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error:?}");
    assert!(
        error
            .message()
            .contains("node_claim.requirements[0].min_values"),
        "{error:?}"
    );
    // Only one of the two families exists: minValues 2 on the family cannot hold.
    let mut claim = seed_node_claim("default-min-3", &node_class);
    claim.requirements[0] = requirement("karpenter.k8s.aws/instance-family", &["t4g", "zz9"]);
    claim.requirements[0].min_values = Some(2);
    let error = create(&mut world, claim).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::FailedPrecondition, "{error:?}");
    assert!(error.message().contains("minValues 2"), "{error:?}");
    assert_eq!(world.proxy.count("ec2:CreateFleet"), 1);
    world.assert_least_privilege();
}

/// Makes the node class's instance profile in moto, as an older tool or a
/// person might have, with `tags`.
async fn existing_profile(world: &World, tags: &[(&str, &str)]) -> String {
    let name =
        provider_aws::nodeclass::instance_profile_name(&common::settings(&world.proxy), "default");
    let tags: Vec<aws_sdk_iam::types::Tag> = tags
        .iter()
        .map(|(k, v)| {
            aws_sdk_iam::types::Tag::builder()
                .key(*k)
                .value(*v)
                .build()
                .unwrap()
        })
        .collect();
    world
        .setup
        .iam
        .create_instance_profile()
        .instance_profile_name(&name)
        .set_tags(Some(tags))
        .send()
        .await
        .unwrap();
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_profile_gets_every_tag_at_once_and_the_role() {
    let mut world = World::start().await;
    // The policy's scoping tags, but not the newer eks:eks-cluster-name:
    // tagging only the missing one would be denied.
    let name = existing_profile(
        &world,
        &[
            ("kubernetes.io/cluster/seed-cluster", "owned"),
            ("topology.kubernetes.io/region", REGION),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ],
    )
    .await;
    let (_, response) = resolved(&mut world, seed_node_class()).await;
    assert!(
        response.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        response.conditions
    );
    assert_eq!(world.proxy.count("iam:CreateInstanceProfile"), 0);
    assert_eq!(world.proxy.count("iam:TagInstanceProfile"), 1);
    let tagged = world
        .proxy
        .with(|s| s.requests_of("iam:TagInstanceProfile"))
        .remove(0);
    assert_eq!(
        tagged.keys().filter(|k| k.ends_with(".Key")).count(),
        4,
        "every tag on the request: {tagged:?}"
    );
    let got = world
        .setup
        .iam
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .unwrap();
    let profile = got.instance_profile().unwrap();
    assert_eq!(profile.roles()[0].role_name(), NODE_ROLE);
    assert!(
        profile
            .tags()
            .iter()
            .any(|t| t.key() == "eks:eks-cluster-name" && t.value() == "seed-cluster")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_the_policy_may_not_change_is_reported_not_a_failure() {
    let mut world = World::start().await;
    // Untagged: Karpenter's policy lets it neither tag it nor give it a role.
    existing_profile(&world, &[]).await;
    let (_, response) = resolved(&mut world, seed_node_class()).await;
    let profile = response
        .conditions
        .iter()
        .find(|c| c.r#type == "InstanceProfileReady")
        .unwrap();
    assert_eq!(profile.status, "False", "{profile:?}");
    assert!(
        profile.message.contains("tag the profile or delete it"),
        "{profile:?}"
    );
    assert!(
        response
            .conditions
            .iter()
            .filter(|c| c.r#type.ends_with("Ready")
                && c.r#type != "Ready"
                && c.r#type != "InstanceProfileReady")
            .all(|c| c.status == "True"),
        "the rest is still resolved: {:?}",
        response.conditions
    );
    assert_eq!(
        world.proxy.count("iam:TagInstanceProfile"),
        0,
        "nothing denied was tried"
    );

    // A role the policy may not pass: reported, the profile left as it was.
    let mut world = World::start().await;
    world
        .setup
        .iam
        .create_role()
        .role_name("SomeOtherRole")
        .assume_role_policy_document("{}")
        .send()
        .await
        .unwrap();
    let (_, first) = resolved(&mut world, seed_node_class()).await;
    assert!(first.conditions.iter().all(|c| c.status == "True"));
    let mut other = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&other.spec_json).unwrap();
    spec["role"] = "SomeOtherRole".into();
    other.spec_json = spec.to_string();
    let (_, response) = resolved(&mut world, other).await;
    let profile = response
        .conditions
        .iter()
        .find(|c| c.r#type == "InstanceProfileReady")
        .unwrap();
    assert_eq!(profile.status, "False", "{profile:?}");
    assert!(profile.message.contains("SomeOtherRole"), "{profile:?}");
    let denials = world.proxy.take_denials();
    assert!(
        denials.iter().any(|d| d.starts_with("iam:PassRole")),
        "{denials:?}"
    );
    let name =
        provider_aws::nodeclass::instance_profile_name(&common::settings(&world.proxy), "default");
    let got = world
        .setup
        .iam
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.instance_profile().unwrap().roles()[0].role_name(),
        NODE_ROLE,
        "the node role is put back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_alias_families_resolve_and_bottlerocket_launches_with_toml() {
    let mut world = World::start().await;
    for (alias, expected) in [
        ("al2@latest", 2),
        // Bottlerocket's x86_64 image serves Neuron types too.
        ("bottlerocket@latest", 3),
        ("windows2022@latest", 1),
    ] {
        let mut nc = seed_node_class();
        let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).unwrap();
        spec["amiSelectorTerms"] = serde_json::json!([{"alias": alias}]);
        spec.as_object_mut().unwrap().remove("amiFamily");
        nc.spec_json = spec.to_string();
        let (nc, response) = resolved(&mut world, nc).await;
        assert!(
            response.conditions.iter().all(|c| c.status == "True"),
            "{alias}: {:?}",
            response.conditions
        );
        let status: serde_json::Value = serde_json::from_str(&nc.status_json).unwrap();
        assert_eq!(
            status["amis"].as_array().unwrap().len(),
            expected,
            "{alias}: {status}"
        );
    }
    let mut nc = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).unwrap();
    spec["amiSelectorTerms"] = serde_json::json!([{"alias": "bottlerocket@latest"}]);
    spec["amiFamily"] = "Bottlerocket".into();
    spec["userData"] =
        "[settings.kubernetes]\nmax-pods = 20\n[settings.host-containers.admin]\nenabled = true\n"
            .into();
    nc.spec_json = spec.to_string();
    let (nc, _) = resolved(&mut world, nc).await;
    // Bottlerocket's ephemeral storage is its 20 GiB data volume.
    let types = instance_types_of(&world, nc.clone()).await;
    let t4g = types.iter().find(|t| t.name == "t4g.medium").unwrap();
    assert_eq!(
        t4g.capacity.as_ref().unwrap().quantities["ephemeral-storage"],
        20 << 30
    );
    create(&mut world, seed_node_claim("default-br", &nc))
        .await
        .unwrap();
    let templates = world
        .setup
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .unwrap();
    let data = launch_template_data(
        &world,
        templates.launch_templates()[0]
            .launch_template_id()
            .unwrap(),
    )
    .await;
    let text = userdata::of_template(
        &world.setup,
        templates.launch_templates()[0]
            .launch_template_name()
            .unwrap(),
    )
    .await;
    let settings = userdata::bottlerocket(&text);
    let kubernetes = &settings["settings"]["kubernetes"];
    // The pods capacity was planned with, not the user's 20 (a maxPods of
    // its own goes in spec.kubelet).
    let pods = types
        .iter()
        .filter(|t| t.name.starts_with("t4g."))
        .map(|t| t.capacity.as_ref().unwrap().quantities["pods"])
        .collect::<Vec<_>>();
    let max_pods = kubernetes["max-pods"].as_integer().expect("max-pods");
    assert!(pods.contains(&max_pods), "{max_pods} of {pods:?}:\n{text}");
    assert_eq!(
        kubernetes["cluster-name"].as_str(),
        Some("seed-cluster"),
        "{text}"
    );
    assert_eq!(
        settings["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
        Some(true),
        "the user's settings are kept:\n{text}"
    );
    assert!(
        kubernetes["node-taints"]["karpenter.sh/unregistered"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(":NoExecute"))),
        "{text}"
    );
    let devices: Vec<(&str, Option<i32>)> = data
        .block_device_mappings()
        .iter()
        .map(|m| {
            (
                m.device_name().unwrap(),
                m.ebs().and_then(|e| e.volume_size()),
            )
        })
        .collect();
    assert_eq!(
        devices,
        vec![("/dev/xvda", Some(4)), ("/dev/xvdb", Some(20))]
    );
    world.assert_least_privilege();
}

/// Karpenter v1.14's launch settings reach the launch template: the node
/// class's interfaces (security groups and connection tracking on the ENA
/// ones), and its CPU options; a placement group selector, which this
/// provider cannot honour yet, holds the node class instead of being
/// ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interfaces_connection_tracking_and_cpu_options_reach_the_launch_template() {
    let mut world = World::start().await;
    let mut nc = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).unwrap();
    spec["networkInterfaces"] = serde_json::json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    ]);
    spec["connectionTracking"] =
        serde_json::json!({"tcpEstablishedTimeout": 3600, "udpTimeout": 45});
    spec["cpuOptions"] = serde_json::json!({"nestedVirtualization": "disabled"});
    nc.spec_json = spec.to_string();
    let (nc, response) = resolved(&mut world, nc).await;
    assert!(
        response.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        response.conditions
    );
    create(&mut world, seed_node_claim("default-nic", &nc))
        .await
        .expect("launches");
    let templates = world
        .setup
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .unwrap();
    let data = launch_template_data(
        &world,
        templates.launch_templates()[0]
            .launch_template_id()
            .unwrap(),
    )
    .await;
    let interfaces = data.network_interfaces();
    assert_eq!(interfaces.len(), 1, "{data:?}");
    let primary = &interfaces[0];
    assert_eq!(
        (primary.network_card_index(), primary.device_index()),
        (Some(0), Some(0))
    );
    assert!(!primary.groups().is_empty(), "{primary:?}");
    let tracking = primary
        .connection_tracking_specification()
        .expect("connection tracking on the ENA interface");
    assert_eq!(
        (tracking.tcp_established_timeout(), tracking.udp_timeout()),
        (Some(3600), Some(45))
    );
    assert_eq!(
        data.cpu_options()
            .and_then(|c| c.nested_virtualization())
            .map(|n| n.as_str()),
        Some("disabled")
    );

    let mut held = nc.clone();
    let mut spec: serde_json::Value = serde_json::from_str(&held.spec_json).unwrap();
    spec["placementGroupSelector"] = serde_json::json!({"name": "analytics"});
    held.spec_json = spec.to_string();
    let (_, response) = resolved(&mut world, held).await;
    let validation = response
        .conditions
        .iter()
        .find(|c| c.r#type == "ValidationSucceeded")
        .expect("validation condition");
    assert_eq!(
        (validation.status.as_str(), validation.reason.as_str()),
        ("False", "PlacementGroupUnsupported"),
        "{validation:?}"
    );
    assert!(
        validation.message.contains("spec.placementGroupSelector"),
        "{validation:?}"
    );
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizing_a_node_class_deletes_its_instance_profile_and_launch_templates() {
    let mut world = World::start().await;
    let (node_class, resolution) = resolved(&mut world, seed_node_class()).await;
    let status: serde_json::Value = serde_json::from_str(&resolution.status_json).unwrap();
    let profile = status["instanceProfile"]
        .as_str()
        .expect("a managed instance profile")
        .to_string();
    create(&mut world, seed_node_claim("default-final", &node_class))
        .await
        .expect("launched");
    let templates = |world: &World| {
        let ec2 = world.setup.ec2.clone();
        async move {
            ec2.describe_launch_templates()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("tag:karpenter.k8s.aws/ec2nodeclass")
                        .values("default")
                        .build(),
                )
                .send()
                .await
                .unwrap()
                .launch_templates()
                .len()
        }
    };
    assert!(templates(&world).await > 0, "the launch made a template");
    for _ in 0..2 {
        world
            .client
            .finalize_node_class(pv::FinalizeNodeClassRequest {
                node_class: Some(node_class.clone()),
            })
            .await
            .expect("finalize (again: idempotent)");
    }
    assert_eq!(templates(&world).await, 0);
    let gone = world
        .setup
        .iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await;
    assert!(gone.is_err(), "the instance profile {profile} is deleted");
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_interruption_comes_again_with_the_same_id() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let instance = create(&mut world, seed_node_claim("default-again", &node_class))
        .await
        .unwrap();
    world
        .setup
        .sqs
        .set_queue_attributes()
        .queue_url(&world.made.queue_url)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "1",
        )
        .send()
        .await
        .unwrap();
    let id = instance.provider_id.rsplit('/').next().unwrap().to_string();
    let body = serde_json::json!({"version": "0", "id": "e", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2", "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": REGION, "resources": [], "detail": {"instance-id": id, "instance-action": "terminate"}});
    world
        .setup
        .sqs
        .send_message()
        .queue_url(&world.made.queue_url)
        .message_body(body.to_string())
        .send()
        .await
        .unwrap();
    let mut stream = world
        .client
        .watch_interruptions(pv::WatchInterruptionsRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("an event")
            .expect("stream open")
            .expect("ok");
        events.push(event);
    }
    let (first, again) = (&events[0], &events[1]);
    assert_eq!(first.id, again.id, "the same message keeps its id");
    world
        .client
        .acknowledge_interruption(pv::AcknowledgeInterruptionRequest {
            id: again.id.clone(),
        })
        .await
        .unwrap();
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let attributes = world
            .setup
            .sqs
            .get_queue_attributes()
            .queue_url(&world.made.queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let attributes = attributes.attributes().cloned().unwrap_or_default();
        let total: i64 = [
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .map(|name| {
            attributes
                .get(name)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(-1)
        })
        .sum();
        if total == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the acknowledged message is deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    world.assert_least_privilege();
}

/// Issue 21: a `Create` whose node class carries a forged status (a subnet
/// and an AMI the spec does not select) launches only on what the provider
/// resolves from the spec itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_node_class_status_is_not_launched_on() {
    let mut world = World::start().await;
    let (mut node_class, _) = resolved(&mut world, seed_node_class()).await;
    let forged_subnet = world
        .setup
        .ec2
        .create_subnet()
        .vpc_id(&world.made.vpc)
        .cidr_block("10.0.80.0/24")
        .availability_zone("ap-northeast-2a")
        .send()
        .await
        .expect("an unselected subnet")
        .subnet()
        .and_then(|s| s.subnet_id())
        .expect("subnet id")
        .to_owned();
    let forged_image = world
        .setup
        .ec2
        .describe_images()
        .owners("amazon")
        .send()
        .await
        .expect("images")
        .images()
        .iter()
        .filter_map(|i| i.image_id())
        .find(|id| *id != world.made.ami_arm64 && *id != world.made.ami_amd64)
        .expect("another image")
        .to_owned();
    let mut status: serde_json::Value =
        serde_json::from_str(&node_class.status_json).expect("status");
    status["subnets"] = serde_json::json!([{"id": forged_subnet, "zone": "ap-northeast-2a"}]);
    status["amis"] = serde_json::json!([{"id": forged_image, "name": "forged",
        "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}]);
    node_class.status_json = status.to_string();
    // A caller's node class of the same name whose spec selects the
    // unselected subnet by ID launches there (its spec says so), and must
    // not make the real node class's launches go there too.
    let mut poisoning = node_class.clone();
    let mut spec: serde_json::Value = serde_json::from_str(&poisoning.spec_json).unwrap();
    spec["subnetSelectorTerms"] = serde_json::json!([{"id": forged_subnet}]);
    poisoning.spec_json = spec.to_string();
    create(&mut world, seed_node_claim("default-poison", &poisoning))
        .await
        .expect("the caller's own spec launches");
    let claim = seed_node_claim("default-forged", &node_class);
    let instance = create(&mut world, claim).await.expect("launched");
    assert_eq!(instance.image_id, world.made.ami_arm64, "the resolved AMI");
    let described = world
        .setup
        .ec2
        .describe_instances()
        .instance_ids(instance.provider_id.rsplit('/').next().unwrap_or_default())
        .send()
        .await
        .expect("described");
    let launched = &described.reservations()[0].instances()[0];
    assert_ne!(launched.subnet_id(), Some(forged_subnet.as_str()));
    assert!(
        world
            .made
            .subnets
            .iter()
            .any(|(id, _)| Some(id.as_str()) == launched.subnet_id()),
        "launched in a subnet the spec selects: {:?}",
        launched.subnet_id()
    );
    world.assert_least_privilege();
}

/// Issue 21: `Get` and `Delete` act only on this cluster's instances; an
/// instance of another cluster (tagged as Karpenter's, which seed 003's
/// policy lets it terminate) or one without tags is NOT_FOUND and keeps
/// running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clusters_instance_is_not_found_and_keeps_running() {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};

    let mut world = World::start().await;
    let tags = |pairs: &[(&str, &str)]| {
        TagSpecification::builder()
            .resource_type(ResourceType::Instance)
            .set_tags(Some(
                pairs
                    .iter()
                    .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                    .collect(),
            ))
            .build()
    };
    let mut ids = Vec::new();
    for pairs in [
        &[
            ("kubernetes.io/cluster/other-cluster", "owned"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/nodeclaim", "default-other"),
        ][..],
        &[("Name", "hand-made")][..],
    ] {
        let out = world
            .setup
            .ec2
            .run_instances()
            .image_id(&world.made.ami_amd64)
            .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
            .subnet_id(&world.made.subnets[0].0)
            .min_count(1)
            .max_count(1)
            .tag_specifications(tags(pairs))
            .send()
            .await
            .expect("run instance");
        ids.push(out.instances()[0].instance_id().expect("id").to_owned());
    }
    for id in &ids {
        let provider_id = format!("aws:///{}/{id}", world.made.subnets[0].1);
        let get = world
            .client
            .get(pv::GetRequest {
                provider_id: provider_id.clone(),
            })
            .await;
        assert_eq!(
            get.map(|_| ()).map_err(|s| s.code()),
            Err(tonic::Code::NotFound),
            "{id}"
        );
        let deleted = world
            .client
            .delete(pv::DeleteRequest {
                provider_id: provider_id.clone(),
            })
            .await;
        assert_eq!(
            deleted.map(|_| ()).map_err(|s| s.code()),
            Err(tonic::Code::NotFound),
            "{id}"
        );
        let state = world
            .setup
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("described")
            .reservations()[0]
            .instances()[0]
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_owned());
        assert_eq!(state.as_deref(), Some("running"), "{id} still runs");
    }
    assert_eq!(world.proxy.count("ec2:TerminateInstances"), 0);
    world.assert_least_privilege();
}

/// Finding 4 of the fault review: another replica's janitor deleted the
/// launch templates this replica still believes in, and EC2 refused the
/// whole CreateFleet call for it (not one override): the templates are
/// made again and the launch goes on, instead of failing until this
/// replica's own record of them expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_refused_whole_for_a_deleted_template_makes_it_again() {
    let mut world = World::start().await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    create(&mut world, seed_node_claim("default-first", &node_class))
        .await
        .expect("first launch");
    let made = world.proxy.count("ec2:CreateLaunchTemplate");
    let fleets = world.proxy.count("ec2:CreateFleet");
    let names: Vec<String> = world
        .setup
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("templates")
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_owned))
        .collect();
    for name in &names {
        world
            .setup
            .ec2
            .delete_launch_template()
            .launch_template_name(name)
            .send()
            .await
            .expect("deleted by the other replica");
    }
    world.proxy.add_fault(Fault::Refuse {
        action: "CreateFleet".into(),
        code: "InvalidLaunchTemplateName.NotFoundException".into(),
        times: 1,
    });
    let instance = create(&mut world, seed_node_claim("default-second", &node_class))
        .await
        .expect("launched after making the templates again");
    assert!(instance.provider_id.starts_with("aws:///"), "{instance:?}");
    assert_eq!(world.proxy.count("ec2:CreateFleet"), fleets + 2);
    assert!(world.proxy.count("ec2:CreateLaunchTemplate") > made);
    world.assert_least_privilege();
}

/// Finding 4 of the fault review: each provider replica runs a janitor, and
/// the idle one saw only a template's creation time, so it deleted the
/// templates the busy replica kept launching from. The busy replica now
/// marks a template it uses, the idle janitor keeps a marked template, and
/// a template nobody uses is still collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_replicas_janitor_keeps_the_templates_the_busy_replica_uses() {
    // Long enough that a launch slowed by a loaded machine (several
    // seconds through moto and the policy proxy) stays well inside it.
    let ttl = Duration::from_secs(12);
    let mut world = World::start_with(|s| {
        s.launch_template_ttl = ttl;
        s.janitor_interval = Duration::from_secs(3600);
    })
    .await;
    let (_idle, _idle_client) = world
        .replica(|s| {
            s.launch_template_ttl = ttl;
            s.janitor_interval = Duration::from_millis(300);
        })
        .await;
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    // Busy for twice the TTL: the templates outlive their creation's TTL.
    let busy_until = Instant::now() + 2 * ttl;
    let mut launched = 0;
    let mut made = None;
    while Instant::now() < busy_until {
        create(
            &mut world,
            seed_node_claim(&format!("default-busy-{launched}"), &node_class),
        )
        .await
        .expect("launch while busy");
        launched += 1;
        made.get_or_insert(world.proxy.count("ec2:CreateLaunchTemplate"));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        world.proxy.count("ec2:DeleteLaunchTemplate"),
        0,
        "the idle replica's janitor deleted a template in use ({launched} launches)"
    );
    assert_eq!(
        Some(world.proxy.count("ec2:CreateLaunchTemplate")),
        made,
        "templates were made again"
    );
    assert!(world.proxy.count("ec2:CreateTags") >= 1);
    // Once nobody launches, the idle replica's janitor collects it.
    let deadline = Instant::now() + 3 * ttl;
    loop {
        let left = world
            .setup
            .ec2
            .describe_launch_templates()
            .send()
            .await
            .expect("templates")
            .launch_templates()
            .len();
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "an unused template was kept");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    world.assert_least_privilege();
}

/// The data of the first version of the launch template `id`.
async fn launch_template_data(
    world: &World,
    id: &str,
) -> aws_sdk_ec2::types::ResponseLaunchTemplateData {
    let versions = world
        .setup
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(id)
        .send()
        .await
        .unwrap();
    versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap()
        .clone()
}

/// The instance types the provider lists for the default pool and `nc`.
async fn instance_types_of(world: &World, nc: pv::NodeClass) -> Vec<types::InstanceType> {
    world
        .client
        .clone()
        .get_instance_types(pv::GetInstanceTypesRequest {
            node_pool: "default".into(),
            node_class: Some(nc),
        })
        .await
        .unwrap()
        .into_inner()
        .instance_types
}

/// The validation condition of a resolved node class.
fn validation_of(response: &pv::ResolveNodeClassResponse) -> (String, String, String) {
    let c = response
        .conditions
        .iter()
        .find(|c| c.r#type == "ValidationSucceeded")
        .expect("validation condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn with_kubelet(nc: &pv::NodeClass, family: &str, kubelet: serde_json::Value) -> pv::NodeClass {
    let mut nc = nc.clone();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).unwrap();
    spec["kubelet"] = kubelet;
    if family != "AL2023" {
        spec["amiFamily"] = family.into();
        spec["amiSelectorTerms"] =
            serde_json::json!([{"alias": format!("{}@latest", family.to_lowercase())}]);
    }
    nc.spec_json = spec.to_string();
    nc
}

/// Karpenter v1.15's `spec.kubelet` (upstream validation_test.go and the
/// launch template suite): any kubelet field reaches AL2023's nodeadm
/// config as written; other families refuse what they would not apply; a
/// structurally invalid block, or an expression while NodeClassCEL is off,
/// holds the node class with upstream's reasons; with the gate on, the
/// expressions are resolved per instance type into the capacity and into
/// the user data as numbers ("should resolve a maxPods CEL expression into
/// the inline config as an integer, not the raw expression").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_15_kubelet_settings_are_validated_passed_through_and_resolved() {
    let mut world = World::start_with(|s| s.node_class_cel = true).await;
    let base = seed_node_class();
    let cases = [
        (
            "AL2023",
            serde_json::json!({"maxPods": "many"}),
            "True",
            "ValidationSucceeded",
        ),
        (
            "AL2023",
            serde_json::json!({"shutdownGracePeriod": 30}),
            "False",
            "InvalidKubeletConfiguration",
        ),
        (
            "AL2023",
            serde_json::json!({"notAField": true}),
            "False",
            "InvalidKubeletConfiguration",
        ),
        (
            "AL2023",
            serde_json::json!({"registerWithTaints": []}),
            "False",
            "InvalidKubeletConfiguration",
        ),
        (
            "AL2023",
            serde_json::json!({"kubeReserved": {"cpu": "vcpus *"}}),
            "False",
            "KubeletExpressionInvalid",
        ),
        (
            "Bottlerocket",
            serde_json::json!({"shutdownGracePeriod": "30s"}),
            "False",
            "UnsupportedKubeletConfiguration",
        ),
    ];
    for (family, kubelet, status, reason) in cases {
        let nc = with_kubelet(&base, family, kubelet.clone());
        let (_, response) = resolved(&mut world, nc).await;
        let (got_status, got_reason, message) = validation_of(&response);
        if reason == "ValidationSucceeded" {
            // "many" is an unknown variable: not an expression that compiles.
            assert_eq!(
                got_reason, "KubeletExpressionInvalid",
                "{kubelet}: {message}"
            );
            continue;
        }
        assert_eq!(
            (got_status.as_str(), got_reason.as_str()),
            (status, reason),
            "{family} {kubelet}: {message}"
        );
        assert!(message.contains("spec.kubelet"), "{message}");
    }

    let nc = with_kubelet(
        &base,
        "AL2023",
        serde_json::json!({
            "shutdownGracePeriod": "30s",
            "maxPods": "min(max_pods, 7)",
            "systemReserved": {"cpu": "vcpus * 50"}
        }),
    );
    let (nc, response) = resolved(&mut world, nc).await;
    assert_eq!(
        validation_of(&response).0,
        "True",
        "{:?}",
        response.conditions
    );
    let types = instance_types_of(&world, nc.clone()).await;
    let t4g = types
        .iter()
        .find(|t| t.name == "t4g.small")
        .expect("t4g.small");
    assert_eq!(t4g.capacity.as_ref().unwrap().quantities["pods"], 7);
    let system = t4g
        .overhead
        .as_ref()
        .unwrap()
        .system_reserved
        .as_ref()
        .unwrap();
    assert_eq!(system.quantities["cpu"], 100, "2 vCPUs x 50m");

    create(&mut world, seed_node_claim("kubelet-v115", &nc))
        .await
        .expect("launches");
    let templates = world
        .setup
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .unwrap();
    let mut seen = false;
    for template in templates.launch_templates() {
        let user_data =
            userdata::of_template(&world.setup, template.launch_template_name().unwrap()).await;
        let parts = userdata::mime_parts(&user_data);
        let config = userdata::node_config(&parts.last().expect("NodeConfig").payload);
        let kubelet = &config["spec"]["kubelet"]["config"];
        assert_eq!(
            kubelet["shutdownGracePeriod"].as_str(),
            Some("30s"),
            "{user_data}"
        );
        assert_eq!(
            kubelet["maxPods"].as_i64(),
            Some(7),
            "a number, not the expression: {user_data}"
        );
        // 50m per vCPU of the template's types (t4g with 2 or 4 vCPUs).
        let cpu = kubelet["systemReserved"]["cpu"].as_str();
        assert!(matches!(cpu, Some("100m" | "200m")), "{user_data}");
        seen = true;
    }
    assert!(seen, "a launch template");

    // With the gate off, the same node class is held.
    let mut off = World::start().await;
    let nc = with_kubelet(
        &base,
        "AL2023",
        serde_json::json!({"maxPods": "min(max_pods, 7)"}),
    );
    let (_, response) = resolved(&mut off, nc).await;
    let (status, reason, message) = validation_of(&response);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "KubeletExpressionsDisabled")
    );
    assert_eq!(
        message,
        "spec.kubelet contains a CEL expression, but the NodeClassCEL feature gate is disabled"
    );
}

/// Karpenter v1.15's "Using Nitro Enclaves": `enclaveOptions.enabled`
/// turns enclaves on in the launch template and launches only the types EC2
/// lists as supporting them (t4g does not; m6g does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enclave_options_reach_the_launch_template_and_pick_types_that_support_them() {
    let mut world = World::start().await;
    let mut nc = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).unwrap();
    spec["enclaveOptions"] = serde_json::json!({"enabled": true});
    nc.spec_json = spec.to_string();
    let (nc, response) = resolved(&mut world, nc).await;
    assert_eq!(
        validation_of(&response).0,
        "True",
        "{:?}",
        response.conditions
    );
    let types = instance_types_of(&world, nc.clone()).await;
    let launchable = |name: &str| {
        types
            .iter()
            .find(|t| t.name == name)
            .is_some_and(|t| t.offerings.iter().any(|o| o.available))
    };
    assert!(!launchable("t4g.small"), "t4g does not support enclaves");
    assert!(launchable("m6g.large"));

    let mut claim = seed_node_claim("enclaves", &nc);
    claim.requirements[0] = requirement("karpenter.k8s.aws/instance-family", &["t4g", "m6g"]);
    let instance = create(&mut world, claim).await.expect("launches");
    assert!(instance.instance_type.starts_with("m6g."), "{instance:?}");
    let templates = world
        .setup
        .ec2
        .describe_launch_templates()
        .send()
        .await
        .unwrap();
    for template in templates.launch_templates() {
        let data = launch_template_data(&world, template.launch_template_id().unwrap()).await;
        assert_eq!(
            data.enclave_options().and_then(|e| e.enabled()),
            Some(true),
            "{data:?}"
        );
    }
}

/// `world` with seed 003's node class resolved and one instance launched.
async fn one_instance_to_reboot(mut world: World) -> (World, pv::Instance) {
    let (node_class, _) = resolved(&mut world, seed_node_class()).await;
    let instance = create(&mut world, seed_node_claim("default-reboot", &node_class))
        .await
        .expect("launched");
    (world, instance)
}

/// Reboot as a repair action (`AWS_FEATURE_GATES` `RebootForRepair`): off,
/// Reboot is UNIMPLEMENTED and no policy reboots; on, the provider asks
/// ec2:RebootInstances for its own instance, once per operation ID, and
/// says plainly when the IAM policy does not grant it (seed 003's does not;
/// the scoped policy does, for this cluster's nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_for_repair_is_gated_idempotent_and_policy_checked() {
    let (mut world, instance) = one_instance_to_reboot(World::start().await).await;
    let request = |op: &str| pv::RebootRequest {
        provider_id: instance.provider_id.clone(),
        operation_id: op.into(),
    };
    let off = world.client.reboot(request("op-1")).await.unwrap_err();
    assert_eq!(off.code(), tonic::Code::Unimplemented, "{off:?}");
    let info = world
        .client
        .info(pv::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        info.repair_policies
            .iter()
            .all(|p| p.action() == pv::RepairAction::Replace)
    );

    let world = World::start_with(|s| s.reboot_for_repair = true).await;
    let (mut world, instance) = one_instance_to_reboot(world).await;
    let info = world
        .client
        .info(pv::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        info.repair_policies
            .iter()
            .any(|p| p.action() == pv::RepairAction::Reboot)
    );
    let request = pv::RebootRequest {
        provider_id: instance.provider_id.clone(),
        operation_id: "op-1".into(),
    };
    let denied = world.client.reboot(request.clone()).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::FailedPrecondition, "{denied:?}");
    assert!(
        denied.message().contains("ec2:RebootInstances"),
        "{denied:?}"
    );
    let denials = world.proxy.take_denials();
    assert!(
        denials
            .iter()
            .all(|d| d.contains("seed 003's policy denies it")),
        "only seed 003's policy lacks the grant: {denials:#?}"
    );
    // An instance the provider does not know is NOT_FOUND.
    let unknown = world
        .client
        .reboot(pv::RebootRequest {
            provider_id: "aws:///us-west-2a/i-0000000000000000f".into(),
            operation_id: "op-2".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    let empty_op = world
        .client
        .reboot(pv::RebootRequest {
            operation_id: String::new(),
            ..request
        })
        .await
        .unwrap_err();
    assert_eq!(empty_op.code(), tonic::Code::InvalidArgument);
}
