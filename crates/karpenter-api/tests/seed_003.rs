//! The NodePool and EC2NodeClass a user wrote in seed 003 read into the types, get the defaults the
//! API server would apply, and survive a serialize/parse round trip.

use std::path::PathBuf;
use std::time::Duration;

use karpenter_api::ec2nodeclass::{AMIFamily, EndpointState, HttpTokens};
use karpenter_api::labels;
use karpenter_api::{
    ConsolidationPolicy, EC2NodeClass, NodeClassReference, NodePool, NodeSelectorOperator,
};

const NODEPOOL: &str = include_str!("data/seed_003_nodepool.yaml");
const EC2NODECLASS: &str = include_str!("data/seed_003_ec2nodeclass.yaml");

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("seed manifest does not parse: {e}"))
}

/// Serializes to YAML and back; the value must not change.
fn round_trip<T>(value: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let yaml = serde_yaml::to_string(value).unwrap_or_else(|e| panic!("cannot serialize: {e}"));
    let back: T = serde_yaml::from_str(&yaml)
        .unwrap_or_else(|e| panic!("cannot parse own output: {e}\n{yaml}"));
    assert_eq!(&back, value, "round trip changed the object:\n{yaml}");
    back
}

#[test]
fn seed_nodepool_reads_with_defaults() {
    let pool: NodePool = parse(NODEPOOL);
    assert_eq!(pool.metadata.name.as_deref(), Some("default"));
    let spec = &pool.spec;
    let template = &spec.template.spec;
    assert_eq!(
        template.node_class_ref,
        NodeClassReference::ec2_node_class("default")
    );
    assert_eq!(
        template.expire_after.as_std(),
        Some(Duration::from_secs(720 * 3600))
    );
    assert_eq!(
        template
            .termination_grace_period
            .as_ref()
            .map(|d| d.as_std()),
        Some(Duration::from_secs(600))
    );
    assert_eq!(template.requirements.len(), 6);
    let family = &template.requirements[0];
    assert_eq!(family.key, karpenter_api::aws::labels::AWS_INSTANCE_FAMILY);
    assert_eq!(family.operator, NodeSelectorOperator::In);
    assert_eq!(family.values, ["t4g"]);
    let capacity = &template.requirements[3];
    assert_eq!(capacity.key, labels::CAPACITY_TYPE);
    assert_eq!(
        capacity.values,
        [labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND]
    );
    assert!(
        spec.template.metadata.is_empty(),
        "`metadata:` with no value reads as empty"
    );

    assert_eq!(
        spec.disruption.consolidation_policy,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(
        spec.disruption.consolidate_after(),
        Some(Duration::from_secs(600))
    );
    // Not in the manifest: the API server's default of one 10% budget.
    assert_eq!(spec.disruption.budgets.len(), 1);
    assert_eq!(spec.disruption.budgets[0].nodes, "10%");
    assert_eq!(spec.disruption.budgets[0].allowed_disruptions(20), Ok(2));

    // `limit:` is a typo for `limits:`; like the API server, the types drop unknown fields.
    assert!(spec.limits.is_empty());
    // `weight:` with no value is unset, i.e. weight 0.
    assert_eq!(spec.weight, None);
    assert_eq!(spec.weight_or_zero(), 0);
    assert!(!spec.is_static());
}

#[test]
fn seed_nodepool_round_trips() {
    let pool: NodePool = parse(NODEPOOL);
    let back = round_trip(&pool);
    let yaml = serde_yaml::to_string(&back).unwrap_or_default();
    // Durations keep the text the user wrote rather than Go's canonical form.
    assert!(yaml.contains("expireAfter: 720h\n"), "{yaml}");
    assert!(yaml.contains("terminationGracePeriod: 10m\n"), "{yaml}");
    assert!(yaml.contains("apiVersion: karpenter.sh/v1\n"), "{yaml}");
    assert!(yaml.contains("kind: NodePool\n"), "{yaml}");
    // Numeric-looking values stay strings, as label values must.
    assert!(
        yaml.contains("- '4096'") || yaml.contains("- \"4096\""),
        "{yaml}"
    );
}

#[test]
fn seed_nodepool_limits_would_read_if_spelled_right() {
    let fixed = NODEPOOL.replace("  limit:\n", "  limits:\n");
    let pool: NodePool = parse(&fixed);
    let limits = &pool.spec.limits;
    assert_eq!(limits.get("cpu").map(|q| q.0.as_str()), Some("20"));
    assert_eq!(limits.get("memory").map(|q| q.0.as_str()), Some("80Gi"));
    round_trip(&pool);
}

#[test]
fn seed_ec2nodeclass_reads_with_defaults() {
    let class: EC2NodeClass = parse(EC2NODECLASS);
    let spec = &class.spec;
    assert_eq!(spec.ami_family, Some(AMIFamily::AL2023));
    assert_eq!(spec.ami_selector_terms.len(), 1);
    assert_eq!(
        spec.ami_selector_terms[0].alias.as_deref(),
        Some("al2023@latest")
    );
    let alias = class
        .alias()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("alias expected"));
    assert_eq!(alias.family, AMIFamily::AL2023);
    assert!(alias.is_latest());
    assert_eq!(class.ami_family(), AMIFamily::AL2023);
    assert_eq!(
        spec.subnet_selector_terms[0]
            .tags
            .get("karpenter.sh/discovery")
            .map(String::as_str),
        Some("${EKS_CLUSTER_NAME}")
    );
    assert_eq!(
        spec.security_group_selector_terms[0]
            .tags
            .get("karpenter.sh/discovery")
            .map(String::as_str),
        Some("${EKS_CLUSTER_NAME}")
    );
    assert_eq!(spec.role.as_deref(), Some("${KARPENTER_NODE_ROLE}"));
    assert_eq!(spec.instance_profile, None);
    // Not in the manifest: the API server's IMDS defaults.
    let imds = spec
        .metadata_options
        .clone()
        .unwrap_or_else(|| panic!("metadataOptions default expected"));
    assert_eq!(imds.http_endpoint, Some(EndpointState::Enabled));
    assert_eq!(imds.http_protocol_ipv6, Some(EndpointState::Disabled));
    assert_eq!(imds.http_put_response_hop_limit, Some(1));
    assert_eq!(imds.http_tokens, Some(HttpTokens::Required));
    assert_eq!(class.metadata_options(), imds);
    assert!(class.status.is_none());
}

#[test]
fn seed_ec2nodeclass_round_trips() {
    let class: EC2NodeClass = parse(EC2NODECLASS);
    round_trip(&class);
}

/// The seed file itself, when the shared directory sits beside the repository.
fn seed_text() -> Option<String> {
    let seeds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/seeds");
    let entry = std::fs::read_dir(seeds)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("003_"))?;
    std::fs::read_to_string(entry.path()).ok()
}

fn content_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// The lines of `seed` from the one equal to `first` up to (excluding) the one equal to `end`.
fn seed_section(seed: &[String], first: &str, end: &str) -> Vec<String> {
    seed.iter()
        .skip_while(|l| *l != first)
        .take_while(|l| *l != end)
        .cloned()
        .collect()
}

#[test]
fn fixtures_are_the_seed_manifests_reindented() {
    let Some(seed) = seed_text() else {
        eprintln!("seed 003 not found beside the repository; skipping the fixture comparison");
        return;
    };
    let seed = content_lines(&seed);
    assert_eq!(
        content_lines(EC2NODECLASS),
        seed_section(&seed, "apiVersion: karpenter.k8s.aws/v1", "Node pool"),
        "tests/data/seed_003_ec2nodeclass.yaml differs from the seed beyond indentation"
    );
    assert_eq!(
        content_lines(NODEPOOL),
        seed_section(&seed, "apiVersion: karpenter.sh/v1", "Result"),
        "tests/data/seed_003_nodepool.yaml differs from the seed beyond indentation"
    );
}
