//! The test proxy's IAM policy evaluation: seed 003's controller policy,
//! conditions included, denies what AWS would deny, in the service's own
//! error shape, so every provider test fails on a call the policy does not
//! allow. And what the provider does about it: it lists only instances it
//! may terminate.

mod common;

use std::collections::BTreeMap;

use common::policy::{Check, Policy};
use common::*;
use karpenter_proto::provider::v1 as pv;

fn policy() -> Policy {
    Policy::seed("c1", "ap-northeast-2", ACCOUNT)
}

fn scoped() -> BTreeMap<String, String> {
    [
        ("kubernetes.io/cluster/c1", "owned"),
        ("topology.kubernetes.io/region", "ap-northeast-2"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[test]
fn tagging_a_profile_needs_every_scoping_tag_on_the_request_and_the_profile() {
    let policy = policy();
    let profile = format!("arn:aws:iam::{ACCOUNT}:instance-profile/c1_1");
    let full = Check::new("iam:TagInstanceProfile", &profile)
        .tags("aws:RequestTag", &scoped())
        .tags("aws:ResourceTag", &scoped());
    assert!(policy.allows(&full));
    let only_missing = Check::new("iam:TagInstanceProfile", &profile)
        .tags(
            "aws:RequestTag",
            &[("eks:eks-cluster-name".to_string(), "c1".to_string())].into(),
        )
        .tags("aws:ResourceTag", &scoped());
    assert!(
        !policy.allows(&only_missing),
        "only the missing tag is denied"
    );
    let untagged = Check::new("iam:TagInstanceProfile", &profile).tags("aws:RequestTag", &scoped());
    assert!(
        !policy.allows(&untagged),
        "an untagged profile cannot be tagged"
    );
}

#[test]
fn termination_roles_and_the_cluster_are_scoped() {
    let policy = policy();
    let instance = format!("arn:aws:ec2:ap-northeast-2:{ACCOUNT}:instance/i-1");
    assert!(!policy.allows(&Check::new("ec2:TerminateInstances", &instance)));
    assert!(
        policy.allows(
            &Check::new("ec2:TerminateInstances", &instance)
                .with("ec2:ResourceTag/karpenter.sh/nodepool", "default")
        )
    );
    assert!(policy.allows(&Check::new(
        "iam:PassRole",
        format!("arn:aws:iam::{ACCOUNT}:role/KarpenterNodeRole-c1")
    )));
    assert!(!policy.allows(&Check::new(
        "iam:PassRole",
        format!("arn:aws:iam::{ACCOUNT}:role/Admin")
    )));
    assert!(policy.allows(&Check::new(
        "eks:DescribeCluster",
        format!("arn:aws:eks:ap-northeast-2:{ACCOUNT}:cluster/c1")
    )));
    assert!(!policy.allows(&Check::new(
        "eks:DescribeCluster",
        format!("arn:aws:eks:ap-northeast-2:{ACCOUNT}:cluster/other")
    )));
    assert!(policy.allows(&Check::new("ec2:DescribeInstances", "*")));
    assert!(!policy.allows(&Check::new("ec2:DescribeAvailabilityZones", "*")));
    assert!(!policy.allows(&Check::new("iam:ListInstanceProfiles", "*")));
}

/// SDK clients through the proxy, as the provider's are.
async fn through_proxy(world: &World) -> provider_aws::Clients {
    provider_aws::Clients::new(&common::settings(&world.proxy)).await
}

fn error_code<E: aws_sdk_ec2::error::ProvideErrorMetadata>(
    error: &aws_sdk_ec2::error::SdkError<E>,
) -> String {
    use aws_sdk_ec2::error::ProvideErrorMetadata as _;
    error.code().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_answers_denied_calls_as_aws_does() {
    let world = World::start().await;
    let clients = through_proxy(&world).await;

    let missing_region = clients
        .iam
        .create_instance_profile()
        .instance_profile_name("c1_x")
        .tags(
            aws_sdk_iam::types::Tag::builder()
                .key("kubernetes.io/cluster/seed-cluster")
                .value("owned")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect_err("no region tag on the request");
    assert_eq!(error_code(&missing_region), "AccessDenied");

    let other_cluster = clients
        .eks
        .describe_cluster()
        .name("another-cluster")
        .send()
        .await
        .expect_err("another cluster");
    assert_eq!(error_code(&other_cluster), "AccessDeniedException");

    let outside = clients
        .ec2
        .describe_availability_zones()
        .send()
        .await
        .expect_err("not in the policy");
    assert_eq!(error_code(&outside), "UnauthorizedOperation");

    // An instance without a node pool tag may not be terminated.
    let untagged = world
        .setup
        .ec2
        .run_instances()
        .image_id(&world.made.ami_amd64)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap();
    let id = untagged.instances()[0].instance_id().unwrap().to_string();
    let terminate = clients
        .ec2
        .terminate_instances()
        .instance_ids(&id)
        .send()
        .await
        .expect_err("no karpenter.sh/nodepool tag");
    assert_eq!(error_code(&terminate), "UnauthorizedOperation");

    let denials = world.proxy.take_denials();
    assert_eq!(denials.len(), 4, "{denials:#?}");
    assert!(
        denials[0].contains("aws:requesttag/kubernetes.io/cluster/seed-cluster"),
        "{denials:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_without_a_node_pool_tag_are_not_the_providers() {
    let mut world = World::start().await;
    let (nc, _) = resolved(&mut world, seed_node_class()).await;
    // Tagged like a claim's instance but without the node pool: the
    // policy would not let the provider terminate it, so it is not listed.
    world
        .setup
        .ec2
        .run_instances()
        .image_id(&world.made.ami_arm64)
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("kubernetes.io/cluster/seed-cluster")
                        .value("owned")
                        .build(),
                )
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("karpenter.sh/nodeclaim")
                        .value("orphan")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let launched = world
        .client
        .create(pv::CreateRequest {
            node_claim: Some(seed_node_claim("default-owned", &nc)),
        })
        .await
        .unwrap()
        .into_inner()
        .instance
        .unwrap();
    let listed: Vec<String> = world
        .client
        .list(pv::ListRequest {})
        .await
        .unwrap()
        .into_inner()
        .instances
        .into_iter()
        .map(|i| i.node_claim_name)
        .collect();
    assert_eq!(listed, [launched.node_claim_name]);
}

/// The scoped policy (upstream v1's) closes what seed 003's leaves open: a
/// credential of this cluster's controller cannot terminate another
/// cluster's Karpenter nodes, launch or tag capacity that is not tagged as
/// this cluster's, read another region, or read SSM parameters other than
/// the public AMI ones. What the provider does is allowed by both (every
/// provider test runs through both).
#[test]
fn the_scoped_policy_denies_what_seed_003s_leaves_open() {
    let seed = policy();
    let scoped = Policy::scoped("c1", "ap-northeast-2", ACCOUNT, "c1");
    let instance = format!("arn:aws:ec2:ap-northeast-2:{ACCOUNT}:instance/i-1");
    let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let others = tags(&[
        ("karpenter.sh/nodepool", "default"),
        ("kubernetes.io/cluster/c2", "owned"),
    ]);
    let ours = tags(&[
        ("karpenter.sh/nodepool", "default"),
        ("kubernetes.io/cluster/c1", "owned"),
    ]);
    let terminate = |t: &BTreeMap<String, String>| {
        Check::new("ec2:TerminateInstances", &instance)
            .tags("aws:ResourceTag", t)
            .tags("ec2:ResourceTag", t)
            .with("aws:RequestedRegion", "ap-northeast-2")
    };
    assert!(
        seed.allows(&terminate(&others)),
        "seed 003's policy lets it"
    );
    // Rebooting for repair (RebootForRepair): the scoped policy grants it
    // for this cluster's nodes only; seed 003's does not grant it at all.
    let reboot = |t: &BTreeMap<String, String>| {
        Check::new("ec2:RebootInstances", &instance)
            .tags("aws:ResourceTag", t)
            .tags("ec2:ResourceTag", t)
            .with("aws:RequestedRegion", "ap-northeast-2")
    };
    assert!(scoped.allows(&reboot(&ours)));
    assert!(!scoped.allows(&reboot(&others)), "another cluster's node");
    assert!(
        !seed.allows(&reboot(&ours)),
        "seed 003's policy never had it"
    );
    assert!(
        !scoped.allows(&terminate(&others)),
        "another cluster's node"
    );
    assert!(scoped.allows(&terminate(&ours)));

    let launch = |t: &BTreeMap<String, String>| {
        Check::new("ec2:RunInstances", &instance)
            .tags("aws:RequestTag", t)
            .with("aws:RequestedRegion", "ap-northeast-2")
    };
    let untagged = tags(&[("karpenter.sh/nodepool", "default")]);
    assert!(seed.allows(&launch(&untagged)));
    assert!(
        !scoped.allows(&launch(&untagged)),
        "capacity not tagged as this cluster's"
    );
    assert!(scoped.allows(&launch(&ours)));

    let describe =
        |region: &str| Check::new("ec2:DescribeInstances", "*").with("aws:RequestedRegion", region);
    assert!(scoped.allows(&describe("ap-northeast-2")));
    assert!(!scoped.allows(&describe("us-east-1")), "another region");

    let parameter = |name: &str| {
        Check::new(
            "ssm:GetParameter",
            format!("arn:aws:ssm:ap-northeast-2::parameter/{name}"),
        )
        .with("aws:RequestedRegion", "ap-northeast-2")
    };
    assert!(scoped.allows(&parameter(
        "aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
    )));
    assert!(seed.allows(&parameter("team/secret-db-password")));
    assert!(
        !scoped.allows(&parameter("team/secret-db-password")),
        "a parameter of the account's own"
    );

    let retag = |keys: &[(&str, &str)]| {
        Check::new("ec2:CreateTags", &instance)
            .tags("aws:ResourceTag", &ours)
            .tags("aws:RequestTag", &tags(keys))
            .with("aws:RequestedRegion", "ap-northeast-2")
    };
    assert!(scoped.allows(&retag(&[("Name", "n"), ("karpenter.sh/nodeclaim", "c")])));
    assert!(
        !scoped.allows(&retag(&[("kubernetes.io/cluster/c2", "owned")])),
        "an instance of ours may not be re-tagged into another cluster"
    );
}
