//! EC2NodeClass resolution: subnets, security groups, AMIs and the instance
//! profile a spec selects, as the status and conditions Karpenter reports.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use karpenter_api::aws::labels as l;
use karpenter_api::common::{NodeSelectorOperator, NodeSelectorRequirement};
use karpenter_api::ec2nodeclass::{
    self as nc, AMIFamily, AMIStatus, EC2NodeClassSpec, EC2NodeClassStatus, SecurityGroupStatus,
    SubnetStatus,
};
use karpenter_proto::provider::v1 as pv;

use crate::aws::{Clients, Settings};
use crate::cluster::ClusterDetails;
use crate::error::{Error, error_code};

/// The version of the spec hash scheme.
// v2: objects hashed with their keys sorted (`spec.kubelet` keeps the
// fields as written since Karpenter v1.15, in the order written).
pub const HASH_VERSION: &str = "v2";

/// A resolved subnet with what launches need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub free_ips: i64,
}

/// A parsed node class from the wire.
#[derive(Debug, Clone)]
pub struct NodeClass {
    pub name: String,
    pub spec: EC2NodeClassSpec,
    pub status: EC2NodeClassStatus,
}

impl NodeClass {
    /// Parses `spec_json` and `status_json`; `field` prefixes error paths.
    pub fn from_wire(field: &str, wire: Option<&pv::NodeClass>) -> Result<Self, Error> {
        let wire = wire.ok_or_else(|| Error::invalid(field, "a node class is required"))?;
        let spec: EC2NodeClassSpec = serde_json::from_str(&wire.spec_json).map_err(|e| {
            Error::invalid(
                format!("{field}.spec_json"),
                format!("not an EC2NodeClass spec: {e}"),
            )
        })?;
        let status: EC2NodeClassStatus = if wire.status_json.trim().is_empty() {
            EC2NodeClassStatus::default()
        } else {
            serde_json::from_str(&wire.status_json).map_err(|e| {
                Error::invalid(
                    format!("{field}.status_json"),
                    format!("not an EC2NodeClass status: {e}"),
                )
            })?
        };
        Ok(Self {
            name: wire.name.clone(),
            spec,
            status,
        })
    }

    /// The AMI family: `amiFamily`, else the alias's, else Custom.
    pub fn family(&self) -> AMIFamily {
        if let Some(family) = self.spec.ami_family {
            return family;
        }
        self.alias().map(|a| a.family).unwrap_or(AMIFamily::Custom)
    }

    /// The kubelet settings, parsed (`None` when there are none); settings
    /// the kubelet would not take are refused, naming the field (under
    /// `node_claim.node_class.`, where a launch request carries them).
    pub fn kubelet(&self) -> Result<Option<nc::KubeletConfiguration>, Error> {
        let Some(kubelet) = &self.spec.kubelet else {
            return Ok(None);
        };
        kubelet.parse().map(Some).map_err(|errors| {
            let field = errors
                .0
                .first()
                .map_or("spec.kubelet", |p| p.field.as_str());
            Error::invalid(format!("node_claim.node_class.{field}"), errors.to_string())
        })
    }

    pub fn alias(&self) -> Option<nc::AMIAlias> {
        self.spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
            .and_then(|a| a.parse().ok())
    }
}

pub use karpenter_core::hash::fnv1a_64 as fnv64;

/// Hash of the static part of the spec (selector terms are dynamic: their
/// drift is detected by resolution, not by the hash).
pub fn spec_hash(spec: &EC2NodeClassSpec) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        for key in [
            "subnetSelectorTerms",
            "securityGroupSelectorTerms",
            "amiSelectorTerms",
            "capacityReservationSelectorTerms",
        ] {
            map.remove(key);
        }
    }
    fnv64(sorted(value).to_string().as_bytes()).to_string()
}

/// `value` with every object's keys in order, so that the same settings
/// written in another order hash the same.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(key, value)| {
            if value == "*" {
                Filter::builder().name("tag-key").values(key).build()
            } else {
                Filter::builder()
                    .name(format!("tag:{key}"))
                    .values(value)
                    .build()
            }
        })
        .collect()
}

/// A selector term's filters: its tags, then one filter per field it sets
/// (`(filter name, value)`); empty for a term that selects nothing.
fn term_filters(
    tags: &BTreeMap<String, String>,
    fields: &[(&str, Option<&String>)],
) -> Vec<Filter> {
    let mut filters = tag_filters(tags);
    filters.extend(fields.iter().filter_map(|(name, value)| {
        value.map(|value| Filter::builder().name(*name).values(value).build())
    }));
    filters
}

/// Subnets of every term, most free IPs first.
pub async fn resolve_subnets(
    clients: &Clients,
    spec: &EC2NodeClassSpec,
) -> Result<Vec<Subnet>, Error> {
    let mut found: BTreeMap<String, Subnet> = BTreeMap::new();
    for term in &spec.subnet_selector_terms {
        let filters = term_filters(
            &term.tags,
            &[
                ("subnet-id", term.id.as_ref()),
                ("cidr-block", term.cidr.as_ref()),
            ],
        );
        if filters.is_empty() {
            continue;
        }
        let out = clients
            .ec2
            .describe_subnets()
            .set_filters(Some(filters))
            .send()
            .await
            .map_err(|e| Error::aws("ec2:DescribeSubnets", &e))?;
        for subnet in out.subnets() {
            let (Some(id), Some(zone)) = (subnet.subnet_id(), subnet.availability_zone()) else {
                continue;
            };
            found.insert(
                id.to_string(),
                Subnet {
                    id: id.to_string(),
                    zone: zone.to_string(),
                    zone_id: subnet.availability_zone_id().map(str::to_string),
                    free_ips: i64::from(subnet.available_ip_address_count().unwrap_or(0)),
                },
            );
        }
    }
    let mut subnets: Vec<Subnet> = found.into_values().collect();
    subnets.sort_by(|a, b| b.free_ips.cmp(&a.free_ips).then(a.id.cmp(&b.id)));
    Ok(subnets)
}

/// Security groups of every term.
pub async fn resolve_security_groups(
    clients: &Clients,
    spec: &EC2NodeClassSpec,
) -> Result<Vec<SecurityGroupStatus>, Error> {
    let mut found: BTreeMap<String, SecurityGroupStatus> = BTreeMap::new();
    for term in &spec.security_group_selector_terms {
        let filters = term_filters(
            &term.tags,
            &[
                ("group-id", term.id.as_ref()),
                ("group-name", term.name.as_ref()),
            ],
        );
        if filters.is_empty() {
            continue;
        }
        let out = clients
            .ec2
            .describe_security_groups()
            .set_filters(Some(filters))
            .send()
            .await
            .map_err(|e| Error::aws("ec2:DescribeSecurityGroups", &e))?;
        for group in out.security_groups() {
            if let Some(id) = group.group_id() {
                found.insert(
                    id.to_string(),
                    SecurityGroupStatus {
                        id: id.to_string(),
                        name: group.group_name().map(str::to_string),
                    },
                );
            }
        }
    }
    Ok(found.into_values().collect())
}

/// An AMI variant: which instance types an EKS-optimized image serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Standard,
    Nvidia,
    Neuron,
}

impl Variant {
    /// The instance types the variant's image serves: NVIDIA's drivers only
    /// NVIDIA GPUs, Neuron's only types with Neuron accelerators, and the
    /// standard image everything else (AMD GPUs included).
    fn requirements(self, arch: &str) -> Vec<NodeSelectorRequirement> {
        let requirement = |key: &str, operator, values: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let mut out = vec![requirement(l::ARCH, NodeSelectorOperator::In, &[arch])];
        match self {
            Variant::Standard => {
                out.push(requirement(
                    l::AWS_INSTANCE_GPU_MANUFACTURER,
                    NodeSelectorOperator::NotIn,
                    &["nvidia"],
                ));
                out.push(requirement(
                    l::AWS_INSTANCE_ACCELERATOR_COUNT,
                    NodeSelectorOperator::DoesNotExist,
                    &[],
                ));
            }
            Variant::Nvidia => out.push(requirement(
                l::AWS_INSTANCE_GPU_MANUFACTURER,
                NodeSelectorOperator::In,
                &["nvidia"],
            )),
            Variant::Neuron => out.push(requirement(
                l::AWS_INSTANCE_ACCELERATOR_COUNT,
                NodeSelectorOperator::Exists,
                &[],
            )),
        }
        out
    }
}

/// One AMI an alias resolves to: its SSM parameter, architecture and
/// variant.
pub type AliasParameter = (String, &'static str, Variant);

/// The public SSM parameters of an alias: `(parameter, arch, variant)`.
pub fn alias_parameters(alias: &nc::AMIAlias, k8s: &str) -> Vec<AliasParameter> {
    match alias.family {
        AMIFamily::AL2023 => al2023_parameters(alias, k8s),
        AMIFamily::AL2 => al2_parameters(alias, k8s),
        AMIFamily::Bottlerocket => bottlerocket_parameters(alias, k8s),
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => {
            let Some((year, _)) = alias.family.windows_release() else {
                return Vec::new();
            };
            vec![(
                format!(
                    "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
                ),
                "amd64",
                Variant::Standard,
            )]
        }
        AMIFamily::Custom => Vec::new(),
    }
}

/// AL2023: a parameter per architecture and variant (no Neuron on arm64).
fn al2023_parameters(alias: &nc::AMIAlias, k8s: &str) -> Vec<AliasParameter> {
    let latest = alias.is_latest();
    let mut out = Vec::new();
    for (arch, ssm_arch, variants) in [
        (
            "amd64",
            "x86_64",
            &[Variant::Standard, Variant::Nvidia, Variant::Neuron][..],
        ),
        ("arm64", "arm64", &[Variant::Standard, Variant::Nvidia][..]),
    ] {
        for variant in variants {
            let v = match variant {
                Variant::Standard => "standard",
                Variant::Nvidia => "nvidia",
                Variant::Neuron => "neuron",
            };
            let leaf = if latest {
                "recommended".to_string()
            } else {
                format!(
                    "amazon-eks-node-al2023-{ssm_arch}-{v}-{k8s}-{}",
                    alias.version
                )
            };
            out.push((
                    format!("/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{ssm_arch}/{v}/{leaf}/image_id"),
                    arch,
                    *variant,
                ));
        }
    }
    out
}

/// AL2: the standard, GPU (NVIDIA and Neuron) and arm64 images.
fn al2_parameters(alias: &nc::AMIAlias, k8s: &str) -> Vec<AliasParameter> {
    let latest = alias.is_latest();
    let leaf = |kind: &str| {
        if latest {
            "recommended".to_string()
        } else {
            format!("amazon-eks-{kind}node-{k8s}-{}", alias.version)
        }
    };
    vec![
        (
            format!(
                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2/{}/image_id",
                leaf("")
            ),
            "amd64",
            Variant::Standard,
        ),
        (
            format!(
                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2-gpu/{}/image_id",
                leaf("gpu-")
            ),
            "amd64",
            Variant::Nvidia,
        ),
        (
            format!(
                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2-gpu/{}/image_id",
                leaf("gpu-")
            ),
            "amd64",
            Variant::Neuron,
        ),
        (
            format!(
                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2-arm64/{}/image_id",
                leaf("arm64-")
            ),
            "arm64",
            Variant::Standard,
        ),
    ]
}

/// Bottlerocket: by architecture, with NVIDIA images apart.
fn bottlerocket_parameters(alias: &nc::AMIAlias, k8s: &str) -> Vec<AliasParameter> {
    let latest = alias.is_latest();
    let version = alias.version.trim_start_matches('v');
    let v = if latest {
        "latest".to_string()
    } else {
        version.to_string()
    };
    vec![
        (
            format!("/aws/service/bottlerocket/aws-k8s-{k8s}/x86_64/{v}/image_id"),
            "amd64",
            Variant::Standard,
        ),
        // Bottlerocket's standard x86_64 image carries the Neuron
        // drivers too.
        (
            format!("/aws/service/bottlerocket/aws-k8s-{k8s}/x86_64/{v}/image_id"),
            "amd64",
            Variant::Neuron,
        ),
        (
            format!("/aws/service/bottlerocket/aws-k8s-{k8s}/arm64/{v}/image_id"),
            "arm64",
            Variant::Standard,
        ),
        (
            format!("/aws/service/bottlerocket/aws-k8s-{k8s}-nvidia/x86_64/{v}/image_id"),
            "amd64",
            Variant::Nvidia,
        ),
        (
            format!("/aws/service/bottlerocket/aws-k8s-{k8s}-nvidia/arm64/{v}/image_id"),
            "arm64",
            Variant::Nvidia,
        ),
    ]
}

async fn ssm_parameter(clients: &Clients, name: &str) -> Result<Option<String>, Error> {
    match clients.ssm.get_parameter().name(name).send().await {
        Ok(out) => Ok(out.parameter().and_then(|p| p.value()).map(str::to_string)),
        Err(e) if error_code(&e).as_deref() == Some("ParameterNotFound") => Ok(None),
        Err(e) => Err(Error::aws("ssm:GetParameter", &e)),
    }
}

struct Image {
    id: String,
    name: Option<String>,
    arch: String,
    created: String,
    deprecated: bool,
    root_device_name: Option<String>,
}

async fn describe_images(
    clients: &Clients,
    filters: Vec<Filter>,
    owners: Vec<String>,
) -> Result<Vec<Image>, Error> {
    let mut request = clients
        .ec2
        .describe_images()
        .set_filters(Some(filters))
        .include_deprecated(true);
    if !owners.is_empty() {
        request = request.set_owners(Some(owners));
    }
    let out = request
        .send()
        .await
        .map_err(|e| Error::aws("ec2:DescribeImages", &e))?;
    let now = chrono::Utc::now().to_rfc3339();
    Ok(out
        .images()
        .iter()
        .filter_map(|image| {
            let arch = match image.architecture()?.as_str() {
                "x86_64" => "amd64",
                "arm64" => "arm64",
                _ => return None,
            };
            Some(Image {
                id: image.image_id()?.to_string(),
                name: image.name().map(str::to_string),
                arch: arch.to_string(),
                created: image.creation_date().unwrap_or_default().to_string(),
                deprecated: image.deprecation_time().is_some_and(|t| t < now.as_str()),
                root_device_name: image.root_device_name().map(str::to_string),
            })
        })
        .collect())
}

/// The first Kubernetes minor EKS publishes Windows Server 2025 images for.
const WINDOWS_2025_FIRST_MINOR: u32 = 35;

/// Windows Server 2025 images exist from EKS 1.35 on: an alias asking for
/// them on an older cluster is refused with the reason, not left to find
/// no image.
fn windows_2025_supported(alias: &nc::AMIAlias, kubernetes_version: &str) -> Result<(), Error> {
    if alias.family != AMIFamily::Windows2025 {
        return Ok(());
    }
    let minor = kubernetes_version
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok());
    if minor.is_some_and(|m| m >= WINDOWS_2025_FIRST_MINOR) {
        return Ok(());
    }
    Err(Error::invalid(
        "node_class.spec_json.amiSelectorTerms",
        format!(
            "Windows Server 2025 requires EKS version 1.35 or higher, current version: {kubernetes_version}"
        ),
    ))
}

/// AMIs of every term, the newest per architecture and variant.
pub async fn resolve_amis(
    clients: &Clients,
    kubernetes_version: &str,
    spec: &EC2NodeClassSpec,
) -> Result<Vec<AMIStatus>, Error> {
    // (image, variant) candidates
    let mut candidates: Vec<(Image, Variant)> = Vec::new();
    for term in &spec.ami_selector_terms {
        if let Some(alias) = &term.alias {
            let alias: nc::AMIAlias = alias.parse().map_err(|e: nc::InvalidAMIAlias| {
                Error::invalid("node_class.spec_json.amiSelectorTerms", e.to_string())
            })?;
            // The EKS-optimized images are per Kubernetes version: without
            // one there is nothing to look up.
            if kubernetes_version.is_empty() {
                continue;
            }
            windows_2025_supported(&alias, kubernetes_version)?;
            for (parameter, arch, variant) in alias_parameters(&alias, kubernetes_version) {
                let Some(id) = ssm_parameter(clients, &parameter).await? else {
                    continue;
                };
                let images = describe_images(
                    clients,
                    vec![Filter::builder().name("image-id").values(&id).build()],
                    Vec::new(),
                )
                .await?;
                for image in images {
                    if image.arch == arch {
                        candidates.push((image, variant));
                    }
                }
            }
            continue;
        }
        let from_parameter = match &term.ssm_parameter {
            Some(parameter) => match ssm_parameter(clients, parameter).await? {
                Some(id) => Some(id),
                None => continue,
            },
            None => None,
        };
        let filters = term_filters(
            &term.tags,
            &[
                ("image-id", from_parameter.as_ref()),
                ("image-id", term.id.as_ref()),
                ("name", term.name.as_ref()),
            ],
        );
        let mut owners = Vec::new();
        if let Some(owner) = &term.owner {
            owners.push(owner.clone());
        } else if term.name.is_some() && term.id.is_none() {
            owners.extend(["self".to_string(), "amazon".to_string()]);
        }
        if filters.is_empty() && owners.is_empty() {
            continue;
        }
        for image in describe_images(clients, filters, owners).await? {
            candidates.push((image, Variant::Standard));
        }
    }
    // Newest per (arch, variant); non-alias images serve every variant of their arch.
    let mut newest: BTreeMap<(String, u8), (Image, Variant)> = BTreeMap::new();
    for (image, variant) in candidates {
        let key = (image.arch.clone(), variant as u8);
        let newer = newest.get(&key).is_none_or(|(seen, _)| {
            (!image.deprecated, &image.created) > (!seen.deprecated, &seen.created)
        });
        if newer {
            newest.insert(key, (image, variant));
        }
    }
    let mut amis: Vec<(String, AMIStatus)> = newest
        .into_values()
        .map(|(image, variant)| {
            let alias = spec.ami_selector_terms.iter().any(|t| t.alias.is_some());
            let requirements = if alias {
                variant.requirements(&image.arch)
            } else {
                vec![NodeSelectorRequirement {
                    key: l::ARCH.into(),
                    operator: NodeSelectorOperator::In,
                    values: vec![image.arch.clone()],
                }]
            };
            (
                image.created.clone(),
                AMIStatus {
                    id: image.id,
                    deprecated: image.deprecated,
                    name: image.name,
                    requirements,
                    root_device_name: image.root_device_name,
                    root_device_snapshot_id: None,
                },
            )
        })
        .collect();
    amis.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    Ok(amis.into_iter().map(|(_, a)| a).collect())
}

/// The name of the instance profile managed for a node class.
pub fn instance_profile_name(settings: &Settings, node_class: &str) -> String {
    let hash = fnv64(format!("{}/{}", settings.region, node_class).as_bytes());
    let mut name = format!("{}_{hash}", settings.cluster_name);
    name.truncate(128);
    name
}

fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// Finds, creates or repairs the instance profile for `role`, or checks the
/// given one exists.
pub async fn resolve_instance_profile(
    clients: &Clients,
    settings: &Settings,
    node_class: &NodeClass,
) -> Result<Result<String, String>, Error> {
    if let Some(profile) = &node_class.spec.instance_profile {
        return match clients
            .iam
            .get_instance_profile()
            .instance_profile_name(profile)
            .send()
            .await
        {
            Ok(_) => Ok(Ok(profile.clone())),
            Err(e) if error_code(&e).as_deref() == Some("NoSuchEntity") => Ok(Err(format!(
                "instance profile {profile:?} does not exist; create it or set spec.role instead"
            ))),
            Err(e) => Err(Error::aws("iam:GetInstanceProfile", &e)),
        };
    }
    let Some(role) = node_class.spec.role.as_deref() else {
        return Ok(Err("set spec.role or spec.instanceProfile".into()));
    };
    let role = role_name(role);
    let name = instance_profile_name(settings, &node_class.name);
    let wanted_tags = instance_profile_tags(settings, node_class);
    let Some((roles, tags)) = existing_profile(clients, &name).await? else {
        create_instance_profile(clients, &name, &wanted_tags).await?;
        return set_role(clients, &name, &[], role).await;
    };
    let scoped = SCOPING_TAGS.iter().all(|key| {
        let key = scope_key(settings, key);
        tags.get(&key) == wanted_tags.get(&key)
    });
    if !scoped {
        // Karpenter's IAM policy lets it change only profiles carrying its
        // scoping tags: one without them can be used, not repaired.
        if roles.iter().any(|r| r == role) {
            return Ok(Ok(name));
        }
        return Ok(Err(format!(
            "instance profile {name:?} exists without the tags kubernetes.io/cluster/{}=owned, topology.kubernetes.io/region={} and karpenter.k8s.aws/ec2nodeclass={}, so Karpenter's IAM policy does not let it give the profile role {role:?}; tag the profile or delete it",
            settings.cluster_name, settings.region, node_class.name
        )));
    }
    // A profile made before some tags existed gets them all at once (the
    // policy wants every scoping tag on the request, not just the new one).
    if wanted_tags.iter().any(|(k, v)| tags.get(k) != Some(v))
        && let Err(why) = tag_instance_profile(clients, &name, &wanted_tags).await?
    {
        return Ok(Err(why));
    }
    if roles.iter().any(|r| r == role) {
        return Ok(Ok(name));
    }
    set_role(clients, &name, &roles, role).await
}

/// Tags the policy scopes instance-profile changes by (`cluster` stands for
/// `kubernetes.io/cluster/<name>`).
const SCOPING_TAGS: [&str; 3] = ["cluster", l::TOPOLOGY_REGION, l::AWS_EC2_NODE_CLASS];

fn scope_key(settings: &Settings, key: &str) -> String {
    if key == "cluster" {
        format!("kubernetes.io/cluster/{}", settings.cluster_name)
    } else {
        key.to_string()
    }
}

/// The tags of a node class's instance profile: the class's own, with
/// Karpenter's over them.
fn instance_profile_tags(settings: &Settings, node_class: &NodeClass) -> BTreeMap<String, String> {
    let mut tags = node_class.spec.tags.clone();
    tags.insert(scope_key(settings, "cluster"), "owned".into());
    tags.insert(l::TOPOLOGY_REGION.into(), settings.region.clone());
    tags.insert(l::AWS_EC2_NODE_CLASS.into(), node_class.name.clone());
    tags.insert(
        l::TAG_EKS_CLUSTER_NAME.into(),
        settings.cluster_name.clone(),
    );
    tags
}

fn iam_tags(tags: &BTreeMap<String, String>) -> Result<Vec<aws_sdk_iam::types::Tag>, Error> {
    tags.iter()
        .map(|(key, value)| {
            aws_sdk_iam::types::Tag::builder()
                .key(key)
                .value(value)
                .build()
                .map_err(|e| Error::Internal(format!("building an IAM tag: {e}")))
        })
        .collect()
}

fn access_denied<E>(error: &aws_sdk_ec2::error::SdkError<E>) -> bool
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata,
{
    error_code(error).is_some_and(|c| c.contains("AccessDenied") || c.contains("Unauthorized"))
}

/// The profile's roles and tags, if it exists.
async fn existing_profile(
    clients: &Clients,
    name: &str,
) -> Result<Option<(Vec<String>, BTreeMap<String, String>)>, Error> {
    match clients
        .iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out.instance_profile().map(|p| {
            let roles = p
                .roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect();
            let tags = p
                .tags()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect();
            (roles, tags)
        })),
        Err(e) if error_code(&e).as_deref() == Some("NoSuchEntity") => Ok(None),
        Err(e) => Err(Error::aws("iam:GetInstanceProfile", &e)),
    }
}

async fn create_instance_profile(
    clients: &Clients,
    name: &str,
    tags: &BTreeMap<String, String>,
) -> Result<(), Error> {
    match clients
        .iam
        .create_instance_profile()
        .instance_profile_name(name)
        .set_tags(Some(iam_tags(tags)?))
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(instance_profile = %name, "created instance profile");
            Ok(())
        }
        // Made by an earlier attempt that died before adding the role: reuse it.
        Err(e) if error_code(&e).as_deref() == Some("EntityAlreadyExists") => Ok(()),
        Err(e) => Err(Error::aws("iam:CreateInstanceProfile", &e)),
    }
}

async fn tag_instance_profile(
    clients: &Clients,
    name: &str,
    tags: &BTreeMap<String, String>,
) -> Result<Result<(), String>, Error> {
    match clients
        .iam
        .tag_instance_profile()
        .instance_profile_name(name)
        .set_tags(Some(iam_tags(tags)?))
        .send()
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(e) if access_denied(&e) => Ok(Err(format!(
            "tagging instance profile {name:?} was denied: {}",
            crate::error::describe_sdk_error(&e)
        ))),
        Err(e) => Err(Error::aws("iam:TagInstanceProfile", &e)),
    }
}

/// Gives the profile `role` in place of `roles` (a profile holds one). If
/// the new role may not be passed, the old one is put back.
async fn set_role(
    clients: &Clients,
    name: &str,
    roles: &[String],
    role: &str,
) -> Result<Result<String, String>, Error> {
    let add = |role: &str| {
        clients
            .iam
            .add_role_to_instance_profile()
            .instance_profile_name(name)
            .role_name(role)
            .send()
    };
    for other in roles {
        match clients
            .iam
            .remove_role_from_instance_profile()
            .instance_profile_name(name)
            .role_name(other)
            .send()
            .await
        {
            Ok(_) => {}
            Err(e) if access_denied(&e) => {
                return Ok(Err(format!(
                    "removing role {other:?} from instance profile {name:?} was denied: {}",
                    crate::error::describe_sdk_error(&e)
                )));
            }
            Err(e) => return Err(Error::aws("iam:RemoveRoleFromInstanceProfile", &e)),
        }
    }
    match add(role).await {
        Ok(_) => Ok(Ok(name.to_string())),
        Err(e) if error_code(&e).as_deref() == Some("NoSuchEntity") => Ok(Err(format!(
            "role {role:?} does not exist; create it (with the node policies) or fix spec.role"
        ))),
        Err(e) if access_denied(&e) => {
            if let Some(previous) = roles.first()
                && let Err(restore) = add(previous).await
            {
                tracing::warn!(error = %crate::error::describe_sdk_error(&restore), instance_profile = %name, "putting the previous role back failed");
            }
            Ok(Err(format!(
                "giving instance profile {name:?} role {role:?} was denied (Karpenter's IAM policy passes only the node role): {}",
                crate::error::describe_sdk_error(&e)
            )))
        }
        Err(e) => Err(Error::aws("iam:AddRoleToInstanceProfile", &e)),
    }
}

/// A profile the policy does not let Karpenter delete (it lacks the
/// scoping tags) is left for its owner rather than holding the node class.
fn left_behind<E>(name: &str, error: &aws_sdk_ec2::error::SdkError<E>)
where
    E: std::error::Error + aws_sdk_ec2::error::ProvideErrorMetadata + 'static,
{
    tracing::warn!(
        instance_profile = %name,
        error = %crate::error::describe_sdk_error(error),
        "not allowed to delete the node class's instance profile; leaving it"
    );
}

/// Deletes the instance profile the provider made for a node class (none
/// when the class names its own `instanceProfile`): its role is removed
/// first, as IAM requires. Gone already is fine.
pub async fn delete_managed_instance_profile(
    clients: &Clients,
    settings: &Settings,
    node_class: &NodeClass,
) -> Result<(), Error> {
    if node_class.spec.instance_profile.is_some() {
        return Ok(());
    }
    let name = instance_profile_name(settings, &node_class.name);
    let roles = match clients
        .iam
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
    {
        Ok(out) => out
            .instance_profile()
            .map(|p| {
                p.roles()
                    .iter()
                    .map(|r| r.role_name().to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default(),
        Err(e) if error_code(&e).as_deref() == Some("NoSuchEntity") => return Ok(()),
        Err(e) => return Err(Error::aws("iam:GetInstanceProfile", &e)),
    };
    for role in &roles {
        match clients
            .iam
            .remove_role_from_instance_profile()
            .instance_profile_name(&name)
            .role_name(role)
            .send()
            .await
        {
            Ok(_) => {}
            Err(e) if error_code(&e).as_deref() == Some("NoSuchEntity") => {}
            Err(e) if access_denied(&e) => {
                left_behind(&name, &e);
                return Ok(());
            }
            Err(e) => return Err(Error::aws("iam:RemoveRoleFromInstanceProfile", &e)),
        }
    }
    match clients
        .iam
        .delete_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(instance_profile = %name, "deleted the node class's instance profile");
            Ok(())
        }
        Err(e) if error_code(&e).as_deref() == Some("NoSuchEntity") => Ok(()),
        Err(e) if access_denied(&e) => {
            left_behind(&name, &e);
            Ok(())
        }
        Err(e) => Err(Error::aws("iam:DeleteInstanceProfile", &e)),
    }
}

fn condition(type_: &str, ok: bool, reason: &str, message: String) -> pv::Condition {
    pv::Condition {
        r#type: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if ok { type_.into() } else { reason.into() },
        message: if ok { String::new() } else { message },
    }
}

/// Resolves everything and reports it as Karpenter does.
/// Whether nodes of this class can join the cluster: its endpoint, CA and
/// service CIDR are known, and the class's user data can be merged.
fn validation(
    settings: &Settings,
    cluster: &ClusterDetails,
    cluster_error: Option<&str>,
    node_class: &NodeClass,
) -> pv::Condition {
    let mut problems = Vec::new();
    let kubelet = crate::kubelet::validate(
        node_class.spec.kubelet.as_ref(),
        node_class.family(),
        settings.node_class_cel,
    )
    .err();
    if let Some(refusal) = &kubelet {
        problems.push(refusal.message.clone());
    }
    let missing = cluster.missing();
    if !missing.is_empty() {
        let mut problem = format!(
            "{} of cluster {:?} unknown",
            missing.join(", "),
            cluster.name
        );
        if let Some(error) = cluster_error {
            problem.push_str(&format!(" (eks:DescribeCluster: {error})"));
        }
        problems.push(problem);
    }
    if let Err(error) =
        crate::userdata::check(node_class.family(), node_class.spec.user_data.as_deref())
    {
        problems.push(format!("spec.userData: {error}"));
    }
    // Launching outside the placement group the user chose would break
    // what they chose it for (latency, spread): refuse until it resolves.
    let unsupported_placement = node_class.spec.placement_group_selector.is_some();
    if unsupported_placement {
        problems.push(
            "spec.placementGroupSelector: provider-aws does not resolve placement groups yet; nodes of this class are not launched while it is set"
                .to_owned(),
        );
    }
    let reason = if !missing.is_empty() {
        "ClusterDetailsUnresolved"
    } else if let Some(refusal) = &kubelet {
        refusal.reason
    } else if unsupported_placement {
        "PlacementGroupUnsupported"
    } else {
        "UserDataInvalid"
    };
    condition(
        nc::CONDITION_VALIDATION_SUCCEEDED,
        problems.is_empty(),
        reason,
        problems.join("; "),
    )
}

pub async fn resolve(
    clients: &Clients,
    settings: &Settings,
    cluster: &ClusterDetails,
    cluster_error: Option<&str>,
    node_class: &NodeClass,
) -> Result<pv::ResolveNodeClassResponse, Error> {
    let (status, conditions) =
        resolve_status(clients, settings, cluster, cluster_error, node_class).await?;
    let status_json = serde_json::to_string(&status)
        .map_err(|e| Error::Internal(format!("encoding the status: {e}")))?;
    Ok(pv::ResolveNodeClassResponse {
        status_json,
        conditions,
        hash: spec_hash(&node_class.spec),
        hash_version: HASH_VERSION.into(),
    })
}

/// What the node class's spec selects in this account (subnets, security
/// groups, AMIs, instance profile) and its conditions, `Ready` last.
pub async fn resolve_status(
    clients: &Clients,
    settings: &Settings,
    cluster: &ClusterDetails,
    cluster_error: Option<&str>,
    node_class: &NodeClass,
) -> Result<(EC2NodeClassStatus, Vec<pv::Condition>), Error> {
    let subnets = resolve_subnets(clients, &node_class.spec).await?;
    let groups = resolve_security_groups(clients, &node_class.spec).await?;
    let amis = resolve_amis(clients, &cluster.version, &node_class.spec).await?;
    let profile = resolve_instance_profile(clients, settings, node_class).await?;
    let mut conditions = vec![
        condition(
            nc::CONDITION_SUBNETS_READY,
            !subnets.is_empty(),
            "SubnetsNotFound",
            "SubnetSelector did not match any subnets; check spec.subnetSelectorTerms (tags, ids) against the VPC's subnets".into(),
        ),
        condition(
            nc::CONDITION_SECURITY_GROUPS_READY,
            !groups.is_empty(),
            "SecurityGroupsNotFound",
            "SecurityGroupSelector did not match any SecurityGroups; check spec.securityGroupSelectorTerms (tags, ids, names)".into(),
        ),
        condition(
            nc::CONDITION_AMIS_READY,
            !amis.is_empty(),
            "AMINotFound",
            if cluster.version.is_empty() {
                "AMISelector did not match any AMIs; an alias needs the cluster's Kubernetes version, which is unknown (KUBERNETES_VERSION)".to_string()
            } else {
                format!(
                    "AMISelector did not match any AMIs; check spec.amiSelectorTerms (for an alias, that the SSM parameters exist for Kubernetes {})",
                    cluster.version
                )
            },
        ),
        match &profile {
            Ok(_) => condition(nc::CONDITION_INSTANCE_PROFILE_READY, true, "", String::new()),
            Err(why) => condition(
                nc::CONDITION_INSTANCE_PROFILE_READY,
                false,
                "InstanceProfileNotReady",
                why.clone(),
            ),
        },
    ];
    conditions.push(validation(settings, cluster, cluster_error, node_class));
    let not_ready: Vec<String> = conditions
        .iter()
        .filter(|c| c.status != "True")
        .map(|c| c.r#type.clone())
        .collect();
    conditions.push(condition(
        "Ready",
        not_ready.is_empty(),
        "NotReady",
        format!("not ready: {} are False", not_ready.join(", ")),
    ));
    let status = EC2NodeClassStatus {
        subnets: subnets
            .iter()
            .map(|s| SubnetStatus {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: s.zone_id.clone(),
            })
            .collect(),
        security_groups: groups,
        capacity_reservations: Vec::new(),
        amis,
        instance_profile: profile.ok(),
        conditions: Vec::new(),
    };
    Ok((status, conditions))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(alias: &str) -> Vec<String> {
        let alias: nc::AMIAlias = alias.parse().expect("alias");
        alias_parameters(&alias, "1.31")
            .into_iter()
            .map(|(p, _, _)| p)
            .collect()
    }

    /// Which variants' images a type with these labels may run.
    fn variants_for(labels: &[(&str, &str)]) -> Vec<Variant> {
        use karpenter_core::requirements::{Requirement, Requirements};
        let mut type_reqs = Requirements::new();
        for key in [
            l::AWS_INSTANCE_GPU_MANUFACTURER,
            l::AWS_INSTANCE_ACCELERATOR_COUNT,
        ] {
            type_reqs.add(match labels.iter().find(|(k, _)| *k == key) {
                Some((_, v)) => Requirement::single(key, v),
                None => Requirement::does_not_exist(key),
            });
        }
        type_reqs.add(Requirement::single(l::ARCH, "amd64"));
        [Variant::Standard, Variant::Nvidia, Variant::Neuron]
            .into_iter()
            .filter(|variant| {
                let image = Requirements::from_requirements(
                    variant.requirements("amd64").into_iter().map(|r| {
                        karpenter_api::NodeSelectorRequirementWithMinValues::from(r)
                            .to_requirement()
                            .expect("requirement")
                    }),
                );
                image.intersects(&type_reqs).is_ok()
            })
            .collect()
    }

    #[test]
    fn nvidia_images_serve_only_nvidia_gpus() {
        assert_eq!(variants_for(&[]), [Variant::Standard], "m5");
        assert_eq!(
            variants_for(&[(l::AWS_INSTANCE_GPU_MANUFACTURER, "nvidia")]),
            [Variant::Nvidia],
            "g4dn"
        );
        assert_eq!(
            variants_for(&[(l::AWS_INSTANCE_GPU_MANUFACTURER, "amd")]),
            [Variant::Standard],
            "g4ad's AMD GPU has no use for NVIDIA's drivers"
        );
        assert_eq!(
            variants_for(&[(l::AWS_INSTANCE_ACCELERATOR_COUNT, "1")]),
            [Variant::Neuron],
            "inf2"
        );
    }

    #[test]
    fn bottlerocket_serves_neuron_types_from_its_standard_image() {
        let alias: nc::AMIAlias = "bottlerocket@latest".parse().expect("alias");
        let neuron: Vec<String> = alias_parameters(&alias, "1.31")
            .into_iter()
            .filter(|(_, _, v)| *v == Variant::Neuron)
            .map(|(p, _, _)| p)
            .collect();
        assert_eq!(
            neuron,
            ["/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id"]
        );
    }

    #[test]
    fn alias_parameters_follow_the_public_ssm_layout() {
        let al2023 = params("al2023@latest");
        assert!(al2023.contains(
            &"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id".to_string()
        ));
        assert!(al2023.contains(
            &"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id".to_string()
        ));
        let pinned = params("al2023@v20240807");
        assert!(pinned.contains(&"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.31-v20240807/image_id".to_string()), "{pinned:?}");
        let al2 = params("al2@latest");
        assert!(
            al2.contains(
                &"/aws/service/eks/optimized-ami/1.31/amazon-linux-2-arm64/recommended/image_id"
                    .to_string()
            )
        );
        let br = params("bottlerocket@v1.20.0");
        assert!(
            br.contains(
                &"/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.0/image_id".to_string()
            ),
            "{br:?}"
        );
        let win = params("windows2022@latest");
        assert_eq!(win, vec!["/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id".to_string()]);
        let win = params("windows2025@latest");
        assert_eq!(win, vec!["/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.31/image_id".to_string()]);
    }

    #[test]
    fn windows_2025_needs_eks_1_35() {
        let alias: nc::AMIAlias = "windows2025@latest".parse().expect("alias");
        let refused = windows_2025_supported(&alias, "1.34").expect_err("1.34 has no images");
        assert!(
            refused.to_string().contains(
                "Windows Server 2025 requires EKS version 1.35 or higher, current version: 1.34"
            ),
            "{refused}"
        );
        assert!(windows_2025_supported(&alias, "1.35").is_ok());
        assert!(windows_2025_supported(&alias, "v1.36.2").is_ok());
        let older: nc::AMIAlias = "windows2022@latest".parse().expect("alias");
        assert!(windows_2025_supported(&older, "1.29").is_ok());
    }

    #[test]
    fn spec_hash_ignores_selector_terms() {
        let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "role": "r",
        }))
        .expect("spec");
        let mut other = spec.clone();
        other.subnet_selector_terms[0].id = Some("subnet-2".into());
        assert_eq!(spec_hash(&spec), spec_hash(&other));
        other.role = Some("r2".into());
        assert_ne!(spec_hash(&spec), spec_hash(&other));
    }
}
