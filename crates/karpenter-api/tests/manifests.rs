//! Reading manifests the way the API server would store them: defaults for absent or null
//! fields, errors that name the problem, and full objects (status included) that round-trip.

use std::time::Duration;

use karpenter_api::common::{ConditionStatus, ConditionsExt};
use karpenter_api::ec2nodeclass::{AMIFamily, HttpTokens, VolumeType};
use karpenter_api::{
    ConsolidationPolicy, DisruptionReason, EC2NodeClass, NodeClaim, NodePool, TaintEffect,
};

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("manifest does not parse: {e}"))
}

fn parse_err<T: serde::de::DeserializeOwned + std::fmt::Debug>(yaml: &str) -> String {
    match serde_yaml::from_str::<T>(yaml) {
        Ok(v) => panic!("expected an error, parsed {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn round_trip<T>(value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_string(value).unwrap_or_else(|e| panic!("{e}"));
    let back: T = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
    assert_eq!(&back, value, "{json}");
}

const MINIMAL_NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: minimal
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
"#;

#[test]
fn minimal_nodepool_gets_every_default() {
    let pool: NodePool = parse(MINIMAL_NODEPOOL);
    let d = &pool.spec.disruption;
    assert_eq!(d.consolidate_after(), Some(Duration::ZERO));
    assert_eq!(
        d.consolidation_policy,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(d.budgets.len(), 1);
    assert_eq!(d.budgets[0].nodes, "10%");
    assert_eq!(pool.spec.template.spec.expire_after.to_string(), "720h");
    assert_eq!(
        pool.spec.template.spec.expire_after.as_std(),
        Some(Duration::from_secs(30 * 24 * 3600))
    );
    round_trip(&pool);
}

#[test]
fn null_fields_get_defaults_like_the_api_server() {
    let with_nulls = MINIMAL_NODEPOOL.replace(
        "      requirements:",
        "      expireAfter: null\n      taints: null\n      requirements:",
    ) + "  disruption: null\n  limits: null\n";
    let pool: NodePool = parse(&with_nulls);
    assert_eq!(pool.spec.template.spec.expire_after.to_string(), "720h");
    assert_eq!(pool.spec.disruption.budgets[0].nodes, "10%");
    assert!(pool.spec.limits.is_empty() && pool.spec.template.spec.taints.is_empty());

    let null_budgets = MINIMAL_NODEPOOL.to_string()
        + "  disruption:\n    consolidateAfter: Never\n    consolidationPolicy: null\n    budgets: null\n";
    let pool: NodePool = parse(&null_budgets);
    assert!(pool.spec.disruption.consolidate_after.is_never());
    assert_eq!(
        pool.spec.disruption.consolidation_policy,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(pool.spec.disruption.budgets[0].nodes, "10%");
}

#[test]
fn explicit_values_are_kept() {
    let yaml = MINIMAL_NODEPOOL.to_string()
        + r#"  weight: 50
  limits: {cpu: 1000, memory: 1000Gi}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 1h30m
    budgets:
      - nodes: "0"
        schedule: "0 9 * * mon-fri"
        duration: 8h
        reasons: [Drifted, Underutilized]
      - nodes: "5"
"#;
    let pool: NodePool = parse(&yaml);
    let d = &pool.spec.disruption;
    assert_eq!(d.consolidation_policy, ConsolidationPolicy::WhenEmpty);
    assert_eq!(d.consolidate_after(), Some(Duration::from_secs(5400)));
    assert_eq!(d.budgets.len(), 2);
    assert_eq!(d.budgets[0].schedule.as_deref(), Some("0 9 * * mon-fri"));
    assert_eq!(
        d.budgets[0].duration.as_ref().map(|x| x.as_std()),
        Some(Duration::from_secs(8 * 3600))
    );
    assert!(d.budgets[0].applies_to(DisruptionReason::Drifted));
    assert!(!d.budgets[0].applies_to(DisruptionReason::Empty));
    assert!(d.budgets[1].applies_to(DisruptionReason::Empty));
    assert_eq!(pool.spec.weight, Some(50));
    assert_eq!(
        pool.spec.limits.get("cpu").map(|q| q.0.as_str()),
        Some("1000")
    );
    round_trip(&pool);
}

#[test]
fn errors_name_the_problem() {
    // Karpenter v1.15: consolidateAfter defaults to 0s instead of being required.
    let no_consolidate_after =
        MINIMAL_NODEPOOL.to_string() + "  disruption:\n    consolidationPolicy: WhenEmpty\n";
    let pool: NodePool = parse(&no_consolidate_after);
    assert_eq!(
        pool.spec.disruption.consolidate_after(),
        Some(std::time::Duration::ZERO)
    );

    let bad_duration = MINIMAL_NODEPOOL.replace(
        "      requirements:",
        "      expireAfter: 30d\n      requirements:",
    );
    let e = parse_err::<NodePool>(&bad_duration);
    assert!(e.contains("unknown unit \"d\""), "{e}");

    let bad_policy = MINIMAL_NODEPOOL.to_string()
        + "  disruption:\n    consolidateAfter: 0s\n    consolidationPolicy: WhenUnderutilized\n";
    let e = parse_err::<NodePool>(&bad_policy);
    assert!(e.contains("WhenUnderutilized"), "{e}");

    let no_requirements = MINIMAL_NODEPOOL.replace(
        "      requirements:\n        - {key: kubernetes.io/arch, operator: In, values: [amd64]}\n",
        "",
    );
    let e = parse_err::<NodePool>(&no_requirements);
    assert!(e.contains("requirements"), "{e}");
}

#[test]
fn nodeclaim_with_status_round_trips() {
    let claim: NodeClaim = parse(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7k2p
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: t4g.medium
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
    - key: node.kubernetes.io/instance-type
      operator: In
      values: [t4g.medium, t4g.large]
      minValues: 2
  resources:
    requests: {cpu: 1500m, memory: 1Gi, pods: 3}
  startupTaints:
    - {key: example.com/not-ready, effect: NoExecute}
  expireAfter: Never
status:
  nodeName: ip-10-0-1-23.ap-northeast-2.compute.internal
  providerID: aws:///ap-northeast-2a/i-0123456789abcdef0
  imageID: ami-0123456789abcdef0
  capacity: {cpu: "2", memory: 3926Mi, pods: "110"}
  allocatable: {cpu: 1930m, memory: 3424Mi, pods: "110"}
  lastPodEventTime: "2024-07-01T10:00:00Z"
  conditions:
    - type: Launched
      status: "True"
      lastTransitionTime: "2024-07-01T09:58:00Z"
      reason: Launched
      message: ""
    - type: Ready
      status: "True"
      observedGeneration: 1
      lastTransitionTime: "2024-07-01T09:59:30Z"
"#,
    );
    assert!(claim.spec.expire_after().is_none());
    assert_eq!(claim.spec.requirements[0].min_values, Some(2));
    assert_eq!(claim.spec.startup_taints[0].effect, TaintEffect::NoExecute);
    assert_eq!(
        claim
            .spec
            .resources
            .requests
            .get("pods")
            .map(|q| q.0.as_str()),
        Some("3")
    );
    let status = claim
        .status
        .as_ref()
        .unwrap_or_else(|| panic!("status expected"));
    assert!(status.conditions.is_ready());
    assert_eq!(
        status.conditions.condition("Launched").map(|c| c.status),
        Some(ConditionStatus::True)
    );
    assert_eq!(
        status.provider_id.as_deref(),
        Some("aws:///ap-northeast-2a/i-0123456789abcdef0")
    );
    assert!(status.last_pod_event_time.is_some());
    assert_eq!(claim.node_pool(), Some("default"));
    assert!(claim.is_launched() && !claim.is_registered() && !claim.is_initialized());
    assert_eq!(
        claim.provider_id(),
        Some("aws:///ap-northeast-2a/i-0123456789abcdef0")
    );
    round_trip(&claim);
}

#[test]
fn full_ec2nodeclass_round_trips() {
    let class: EC2NodeClass = parse(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: gpu
spec:
  amiFamily: Bottlerocket
  amiSelectorTerms:
    - tags: {team: ml}
      owner: self
    - id: ami-0123456789abcdef0
  subnetSelectorTerms:
    - id: subnet-0123456789abcdef0
    - tags: {karpenter.sh/discovery: my-cluster}
  securityGroupSelectorTerms:
    - name: my-cluster-node
  capacityReservationSelectorTerms:
    - id: cr-0123456789abcdef0
  instanceProfile: KarpenterNodeInstanceProfile-my-cluster
  associatePublicIPAddress: false
  ipPrefixCount: 1
  tags: {team: ml}
  userData: |
    [settings.kubernetes]
    max-pods = 110
  kubelet:
    clusterDNS: [10.100.0.10]
    maxPods: 110
    podsPerCore: 4
    systemReserved: {cpu: 100m, memory: 100Mi}
    kubeReserved: {cpu: 200m}
    evictionHard: {memory.available: 5%}
    evictionSoft: {memory.available: 10%}
    evictionSoftGracePeriod: {memory.available: 1m30s}
    evictionMaxPodGracePeriod: 60
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    cpuCFSQuota: true
  blockDeviceMappings:
    - deviceName: /dev/xvdb
      rootVolume: true
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        iops: 3000
        throughput: 125
        encrypted: true
        kmsKeyID: alias/ebs
        deleteOnTermination: true
  instanceStorePolicy: RAID0
  detailedMonitoring: true
  metadataOptions:
    httpTokens: optional
  context: cfc-0123
status:
  subnets:
    - {id: subnet-0123456789abcdef0, zone: ap-northeast-2a, zoneID: apne2-az1}
  securityGroups:
    - {id: sg-0123456789abcdef0, name: my-cluster-node}
  amis:
    - id: ami-0123456789abcdef0
      name: bottlerocket-aws-k8s-1.30-nvidia-aarch64-v1.20.0
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [arm64]}
        - {key: karpenter.k8s.aws/instance-gpu-count, operator: Exists}
  capacityReservations:
    - id: cr-0123456789abcdef0
      availabilityZone: ap-northeast-2a
      instanceMatchCriteria: targeted
      instanceType: g5g.xlarge
      ownerID: "123456789012"
  instanceProfile: KarpenterNodeInstanceProfile-my-cluster
"#,
    );
    let spec = &class.spec;
    assert_eq!(class.ami_family(), AMIFamily::Bottlerocket);
    let kubelet = spec
        .kubelet
        .as_ref()
        .unwrap_or_else(|| panic!("kubelet expected"))
        .parse()
        .unwrap_or_else(|e| panic!("kubelet: {e}"));
    assert_eq!(
        kubelet
            .eviction_soft_grace_period
            .get("memory.available")
            .map(|d| d.as_std()),
        Some(Duration::from_secs(90))
    );
    assert_eq!(kubelet.cpu_cfs_quota, Some(true));
    let ebs = spec.block_device_mappings[0]
        .ebs
        .as_ref()
        .unwrap_or_else(|| panic!("ebs expected"));
    assert_eq!(ebs.volume_type, Some(VolumeType::Gp3));
    assert_eq!(
        ebs.volume_size.as_ref().map(|q| q.0.as_str()),
        Some("100Gi")
    );
    // Only httpTokens was set: the other IMDS options still get their defaults.
    let imds = class.metadata_options();
    assert_eq!(imds.http_tokens, Some(HttpTokens::Optional));
    assert_eq!(imds.http_put_response_hop_limit, Some(1));
    let status = class
        .status
        .as_ref()
        .unwrap_or_else(|| panic!("status expected"));
    assert_eq!(
        status.capacity_reservations[0].reservation_type,
        Default::default()
    );
    assert_eq!(class.zones(), ["ap-northeast-2a"]);
    round_trip(&class);
}

#[test]
fn consolidation_policies_are_spelled_as_the_api_spells_them() {
    use karpenter_api::ConsolidationPolicy as P;
    for policy in [P::WhenEmpty, P::WhenEmptyOrUnderutilized, P::Balanced] {
        assert_eq!(
            serde_json::to_value(policy).expect("serializes"),
            serde_json::Value::String(policy.as_str().to_owned())
        );
    }
}
