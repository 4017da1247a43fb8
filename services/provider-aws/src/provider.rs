//! The provider's operations over the SDK clients: catalog per node class,
//! launches (launch templates + one instant CreateFleet), instances, drift.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, InstanceType as Ec2InstanceType,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, OnDemandOptionsRequest,
    RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy, SpotOptionsRequest, Tag,
    TagSpecification, TargetCapacitySpecificationRequest, VolumeType as Ec2VolumeType,
};
use base64::Engine as _;
use karpenter_api::ec2nodeclass::{AMIFamily, EndpointState, HttpTokens, InstanceStorePolicy};
use karpenter_api::labels as l;
use karpenter_core::requirements::Requirements;
use karpenter_proto::provider::v1 as pb;
use karpenter_proto::scheduler::v1 as sched;

use crate::aws::{Clients, Settings};
use crate::catalog::{Catalog, OfferingView};
use crate::error::{Error, error_code};
use crate::instancetype::{self, Context, TypeInfo};
use crate::nodeclass::{self, NodeClass, fnv64};
use crate::userdata;

/// Most instance types one launch considers (the cheapest).
pub const MAX_INSTANCE_TYPES: usize = 60;
/// Fleets one Create tries before reporting insufficient capacity.
pub const MAX_FLEET_ATTEMPTS: usize = 3;
/// Fleet error codes that mean "this offering has no capacity now".
pub const CAPACITY_ERRORS: &[&str] = &[
    "InsufficientInstanceCapacity",
    "UnfulfillableCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
];

pub const DRIFT_AMI: &str = "AMIDrift";
pub const DRIFT_SUBNET: &str = "SubnetDrift";
pub const DRIFT_SECURITY_GROUP: &str = "SecurityGroupDrift";
pub const DRIFT_NODE_CLASS: &str = "NodeClassDrift";

/// Instance types built for one node-class context, with the catalog
/// generation they were built from.
type Built = Arc<Vec<(TypeInfo, sched::InstanceType)>>;

pub struct Provider {
    pub clients: Clients,
    pub settings: Settings,
    pub catalog: Arc<Catalog>,
    built: std::sync::Mutex<BTreeMap<String, (u64, Built)>>,
    /// When this process last used each launch template, by name.
    templates_used: std::sync::Mutex<BTreeMap<String, std::time::SystemTime>>,
    /// Interruption message id to the receipt handle of its last delivery.
    receipts: std::sync::Mutex<BTreeMap<String, String>>,
}

/// A block device as the launch template gets it.
#[derive(Debug, Clone)]
struct Volume {
    device: String,
    size_gib: Option<i64>,
    volume_type: String,
    encrypted: bool,
    delete_on_termination: bool,
    iops: Option<i64>,
    throughput: Option<i64>,
    kms_key_id: Option<String>,
    snapshot_id: Option<String>,
    root: bool,
}

fn default_volumes(family: AMIFamily) -> Vec<Volume> {
    let volume = |device: &str, gib: i64, root: bool| Volume {
        device: device.into(),
        size_gib: Some(gib),
        volume_type: "gp3".into(),
        encrypted: true,
        delete_on_termination: true,
        iops: None,
        throughput: None,
        kms_key_id: None,
        snapshot_id: None,
        root,
    };
    match family {
        AMIFamily::Bottlerocket => {
            vec![volume("/dev/xvda", 4, false), volume("/dev/xvdb", 20, true)]
        }
        AMIFamily::Windows2019 | AMIFamily::Windows2022 => vec![volume("/dev/sda1", 50, true)],
        _ => vec![volume("/dev/xvda", 20, true)],
    }
}

fn volumes(nc: &NodeClass) -> Vec<Volume> {
    let family = nc.family();
    if nc.spec.block_device_mappings.is_empty() {
        return default_volumes(family);
    }
    let root_device = ephemeral_device(family);
    let any_root = nc.spec.block_device_mappings.iter().any(|m| m.root_volume);
    nc.spec
        .block_device_mappings
        .iter()
        .filter_map(|m| {
            let device = m.device_name.clone()?;
            let ebs = m.ebs.clone().unwrap_or_default();
            let size_gib = ebs
                .volume_size
                .as_ref()
                .and_then(|q| {
                    karpenter_core::quantity::parse(&q.0, karpenter_core::quantity::Unit::Base).ok()
                })
                .map(|bytes| bytes / (1 << 30) + i64::from(bytes % (1 << 30) != 0));
            let root = if any_root {
                m.root_volume
            } else {
                device == root_device
            };
            Some(Volume {
                device,
                size_gib,
                volume_type: ebs
                    .volume_type
                    .and_then(|t| serde_json::to_value(t).ok())
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| "gp3".into()),
                encrypted: ebs.encrypted.unwrap_or(true),
                delete_on_termination: ebs.delete_on_termination.unwrap_or(true),
                iops: ebs.iops,
                throughput: ebs.throughput,
                kms_key_id: ebs.kms_key_id,
                snapshot_id: ebs.snapshot_id,
                root,
            })
        })
        .collect()
}

/// Bytes of ephemeral storage, as Karpenter finds the kubelet's volume: the
/// mapping marked `rootVolume`; for Custom the last mapping; otherwise the
/// family's ephemeral device (sizes taken as written, `100G` is 10^11
/// bytes); without mappings the family's default (20 GiB for Custom).
fn ephemeral_storage_bytes(nc: &NodeClass) -> i64 {
    let family = nc.family();
    let size = |m: &karpenter_api::ec2nodeclass::BlockDeviceMapping| {
        m.ebs
            .as_ref()
            .and_then(|e| e.volume_size.as_ref())
            .and_then(|q| {
                karpenter_core::quantity::parse(&q.0, karpenter_core::quantity::Unit::Base).ok()
            })
    };
    let mappings = &nc.spec.block_device_mappings;
    let chosen = if mappings.is_empty() {
        None
    } else if let Some(root) = mappings.iter().find(|m| m.root_volume) {
        size(root)
    } else if family == AMIFamily::Custom {
        mappings.last().and_then(size)
    } else {
        let device = ephemeral_device(family);
        mappings
            .iter()
            .find(|m| m.device_name.as_deref() == Some(device))
            .and_then(size)
    };
    chosen.unwrap_or_else(|| {
        default_volumes(family)
            .iter()
            .find(|v| v.root)
            .and_then(|v| v.size_gib)
            .unwrap_or(20)
            .saturating_mul(1 << 30)
    })
}

/// The device the family's kubelet keeps its ephemeral storage on.
fn ephemeral_device(family: AMIFamily) -> &'static str {
    match family {
        AMIFamily::Bottlerocket => "/dev/xvdb",
        AMIFamily::Windows2019 | AMIFamily::Windows2022 => "/dev/sda1",
        _ => "/dev/xvda",
    }
}

fn context(settings: &Settings, nc: Option<&NodeClass>) -> Context {
    Context {
        region: settings.region.clone(),
        zones: nc
            .map(|nc| {
                let mut zones: Vec<(String, Option<String>)> = Vec::new();
                for subnet in &nc.status.subnets {
                    if !zones.iter().any(|(z, _)| *z == subnet.zone) {
                        zones.push((subnet.zone.clone(), subnet.zone_id.clone()));
                    }
                }
                zones
            })
            .unwrap_or_default(),
        kubelet: nc.and_then(|nc| nc.spec.kubelet.clone()),
        family: nc.map(NodeClass::family).unwrap_or(AMIFamily::AL2023),
        ephemeral_storage_bytes: nc.map(ephemeral_storage_bytes).unwrap_or(20 << 30),
        raid0: nc
            .is_some_and(|nc| nc.spec.instance_store_policy == Some(InstanceStorePolicy::RAID0)),
        vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
        reserved_enis: settings.reserved_enis,
    }
}

fn tag(key: impl Into<String>, value: impl Into<String>) -> Tag {
    Tag::builder().key(key).value(value).build()
}

fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// `i-…` of `aws:///zone/i-…`.
pub fn instance_id(provider_id: &str) -> Result<&str, Error> {
    provider_id
        .rsplit('/')
        .next()
        .filter(|id| id.starts_with("i-"))
        .ok_or_else(|| {
            Error::invalid(
                "provider_id",
                format!("{provider_id:?} is not an AWS provider ID (aws:///<zone>/i-…)"),
            )
        })
}

fn requirements_of(list: &[sched::Requirement]) -> Option<Requirements> {
    karpenter_proto::convert::requirements("", list).ok()
}

/// The instance types an AMI can run on; `None` when its requirements are
/// not well formed (the AMI is then used for nothing).
fn ami_requirements(list: &[karpenter_api::NodeSelectorRequirement]) -> Option<Requirements> {
    list.iter()
        .map(|r| {
            karpenter_api::NodeSelectorRequirementWithMinValues::from(r.clone())
                .to_requirement()
                .ok()
        })
        .collect::<Option<Vec<_>>>()
        .map(Requirements::from_requirements)
}

/// A type the launch may use, with its offerings of the chosen capacity type.
struct Candidate {
    instance_type: sched::InstanceType,
    offerings: Vec<sched::Offering>,
}

impl Provider {
    pub fn new(clients: Clients, settings: Settings) -> Self {
        let catalog = Arc::new(Catalog::new(clients.clone(), settings.clone()));
        Self {
            clients,
            settings,
            catalog,
            built: std::sync::Mutex::new(BTreeMap::new()),
            templates_used: std::sync::Mutex::new(BTreeMap::new()),
            receipts: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The receipt handle of the last delivery of interruption message `id`.
    pub fn remember_receipt(&self, id: &str, receipt: &str) {
        self.receipts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), receipt.to_string());
    }

    pub fn take_receipt(&self, id: &str) -> Option<String> {
        self.receipts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
    }

    fn template_used(&self, name: &str) {
        self.templates_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), std::time::SystemTime::now());
    }

    /// This cluster's launch templates (of one node class, if given).
    async fn launch_templates(
        &self,
        node_class: Option<&str>,
    ) -> Result<Vec<aws_sdk_ec2::types::LaunchTemplate>, Error> {
        let mut request = self.clients.ec2.describe_launch_templates().filters(
            Filter::builder()
                .name("tag:karpenter.k8s.aws/cluster")
                .values(&self.settings.cluster_name)
                .build(),
        );
        if let Some(node_class) = node_class {
            request = request.filters(
                Filter::builder()
                    .name(format!("tag:{}", l::AWS_EC2_NODE_CLASS))
                    .values(node_class)
                    .build(),
            );
        }
        let mut pages = request.into_paginator().send();
        let mut templates = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| Error::aws("ec2:DescribeLaunchTemplates", &e))?;
            templates.extend(page.launch_templates().iter().cloned());
        }
        Ok(templates)
    }

    /// Deletes launch templates by name (gone already is fine); returns how
    /// many this call deleted.
    async fn delete_launch_templates(&self, names: Vec<String>) -> Result<usize, Error> {
        let mut deleted = 0;
        for name in names {
            match self
                .clients
                .ec2
                .delete_launch_template()
                .launch_template_name(&name)
                .send()
                .await
            {
                Ok(_) => {
                    deleted += 1;
                    tracing::info!(launch_template = %name, "deleted launch template");
                }
                Err(e) if error_code(&e).is_some_and(|c| c.contains("NotFound")) => {}
                Err(e) => return Err(Error::aws("ec2:DeleteLaunchTemplate", &e)),
            }
            self.templates_used
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
        }
        Ok(deleted)
    }

    /// Deletes this cluster's launch templates that no launch used for
    /// `launch_template_ttl` (templates of earlier processes count from
    /// their creation). Returns how many were deleted.
    pub async fn collect_launch_templates(&self) -> Result<usize, Error> {
        let now = std::time::SystemTime::now();
        let mut stale = Vec::new();
        for template in self.launch_templates(None).await? {
            let Some(name) = template.launch_template_name() else {
                continue;
            };
            let used = self
                .templates_used
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .copied();
            let last = used.or_else(|| {
                template
                    .create_time()
                    .and_then(|t| std::time::SystemTime::try_from(*t).ok())
            });
            let idle = last
                .and_then(|at| now.duration_since(at).ok())
                .unwrap_or_default();
            if idle >= self.settings.launch_template_ttl {
                stale.push(name.to_string());
            }
        }
        self.delete_launch_templates(stale).await
    }

    /// Releases what the provider made for a node class being deleted: its
    /// launch templates and its managed instance profile.
    pub async fn finalize_node_class(&self, nc: &NodeClass) -> Result<(), Error> {
        let names = self
            .launch_templates(Some(&nc.name))
            .await?
            .iter()
            .filter_map(|t| t.launch_template_name().map(str::to_string))
            .collect();
        self.delete_launch_templates(names).await?;
        nodeclass::delete_managed_instance_profile(&self.clients, &self.settings, nc).await
    }

    /// Collects unused launch templates every `janitor_interval` until the
    /// provider is dropped.
    pub fn spawn_launch_template_janitor(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let every = self.settings.janitor_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(provider) = weak.upgrade() else {
                    return;
                };
                if let Err(error) = provider.collect_launch_templates().await {
                    tracing::warn!(%error, "collecting unused launch templates failed");
                }
            }
        });
    }

    /// The scheduler's instance types for a node class (its zones, kubelet
    /// settings, family and root volume).
    pub async fn instance_types(&self, nc: Option<&NodeClass>) -> Result<Built, Error> {
        // Read the generation first: a change racing with this build leaves
        // the entry stale, and the next call rebuilds it.
        let generation = self.catalog.generation();
        let types = self.catalog.types().await?;
        let view = self.catalog.offering_view().await?;
        let ctx = context(&self.settings, nc);
        let key = format!("{ctx:?}");
        {
            let built = self.built.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, list)) = built.get(&key)
                && *at == generation
            {
                return Ok(list.clone());
            }
        }
        let empty = BTreeSet::new();
        let list: Built = Arc::new(
            types
                .infos
                .iter()
                .filter_map(|info| {
                    let zones = types.zones.get(&info.name).unwrap_or(&empty);
                    instancetype::instance_type(info, &ctx, zones, &view)
                        .map(|it| (info.clone(), it))
                })
                .collect(),
        );
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        // Keep the cache small: contexts of stale generations go.
        built.retain(|_, (at, _)| *at == generation);
        built.insert(key, (generation, list.clone()));
        Ok(list)
    }

    fn ensure_ready(nc: &NodeClass) -> Result<(), Error> {
        let mut missing = Vec::new();
        if nc.status.subnets.is_empty() {
            missing.push("no subnets resolved (SubnetsReady)");
        }
        if nc.status.security_groups.is_empty() {
            missing.push("no security groups resolved (SecurityGroupsReady)");
        }
        if nc.status.amis.is_empty() {
            missing.push("no AMIs resolved (AMIsReady)");
        }
        if nc.status.instance_profile.is_none() {
            missing.push("no instance profile (InstanceProfileReady)");
        }
        if let Some(ready) = nc.status.conditions.iter().find(|c| c.type_ == "Ready")
            && serde_json::to_value(ready.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .as_deref()
                == Some("False")
        {
            missing.push("the Ready condition is False");
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Error::NotReady(format!(
                "node class {:?}: {}; resolve it (ResolveNodeClass) and fix its conditions",
                nc.name,
                missing.join(", ")
            )))
        }
    }

    /// Launches an instance for the claim (or returns the one already launched for it).
    pub async fn create(&self, claim: &pb::NodeClaim) -> Result<pb::Instance, Error> {
        if claim.name.is_empty() {
            return Err(Error::invalid(
                "node_claim.name",
                "a node claim name is required",
            ));
        }
        let nc = NodeClass::from_wire("node_claim.node_class", claim.node_class.as_ref())?;
        Self::ensure_ready(&nc)?;
        let requirements =
            karpenter_proto::convert::requirements("node_claim.requirements", &claim.requirements)
                .map_err(|e| Error::invalid(e.field.clone(), e.message.clone()))?;
        if let Some(existing) = self.find_by_claim(&claim.name, Some(&nc)).await? {
            tracing::info!(instance = %existing.provider_id, "node claim already launched; returning its instance");
            return Ok(existing);
        }
        let requests = karpenter_proto::convert::resources(claim.resources.as_ref());
        let mut failed: Vec<pb::FailedOffering> = Vec::new();
        for attempt in 0..MAX_FLEET_ATTEMPTS {
            let types = self.instance_types(Some(&nc)).await?;
            let (capacity_type, candidates) =
                self.candidates(claim, &requirements, &requests, &types)?;
            if candidates.is_empty() {
                if failed.is_empty() {
                    return Err(Error::NoCompatibleInstanceTypes(format!(
                        "none of the instance types in the node class's zones fits the requirements and requests of {:?} with an available offering",
                        claim.name
                    )));
                }
                break;
            }
            let token = if attempt == 0 {
                claim.name.clone()
            } else {
                format!("{}-{attempt}", claim.name)
            };
            match self
                .launch(claim, &nc, capacity_type, &candidates, &token)
                .await?
            {
                Launch::Launched(instance_id, skipped) => {
                    for o in &skipped {
                        self.catalog
                            .mark_unavailable(&o.instance_type, &o.zone, &o.capacity_type);
                    }
                    let view = self.catalog.offering_view().await?;
                    let instance = self.describe(&instance_id).await?.ok_or_else(|| {
                        Error::Internal(format!("launched {instance_id} but cannot describe it"))
                    })?;
                    return Ok(self.to_wire(
                        &instance,
                        Some(&nc),
                        &view,
                        &candidates_types(&candidates),
                    ));
                }
                Launch::InsufficientCapacity(offerings) => {
                    for o in &offerings {
                        self.catalog
                            .mark_unavailable(&o.instance_type, &o.zone, &o.capacity_type);
                    }
                    tracing::warn!(
                        attempt,
                        failed = offerings.len(),
                        "fleet found no capacity; trying the remaining offerings"
                    );
                    failed.extend(offerings);
                }
            }
        }
        Err(Error::InsufficientCapacity {
            message: format!(
                "no capacity for node claim {:?} in {} offering(s) tried",
                claim.name,
                failed.len()
            ),
            offerings: failed,
        })
    }

    fn candidates(
        &self,
        claim: &pb::NodeClaim,
        requirements: &Requirements,
        requests: &karpenter_core::resources::Resources,
        types: &[(TypeInfo, sched::InstanceType)],
    ) -> Result<(&'static str, Vec<Candidate>), Error> {
        let allowed = |ct: &str| requirements.get(l::CAPACITY_TYPE).is_none_or(|r| r.has(ct));
        let mut compatible: Vec<(sched::InstanceType, Vec<sched::Offering>)> = Vec::new();
        for (_, it) in types {
            if !claim.instance_types.is_empty() && !claim.instance_types.contains(&it.name) {
                continue;
            }
            let Some(type_reqs) = requirements_of(&it.requirements) else {
                continue;
            };
            if type_reqs.intersects(requirements).is_err() {
                continue;
            }
            let allocatable = karpenter_core::resources::Resources::from_map(
                &karpenter_proto::convert::allocatable(it),
            );
            if !requests.fits(&allocatable) {
                continue;
            }
            let offerings: Vec<sched::Offering> = it
                .offerings
                .iter()
                .filter(|o| o.available)
                .filter(|o| {
                    requirements_of(&o.requirements)
                        .is_some_and(|r| r.intersects(requirements).is_ok())
                })
                .cloned()
                .collect();
            if !offerings.is_empty() {
                compatible.push((it.clone(), offerings));
            }
        }
        let spot_available = allowed(l::CAPACITY_TYPE_SPOT)
            && compatible
                .iter()
                .any(|(_, os)| os.iter().any(|o| o.capacity_type == l::CAPACITY_TYPE_SPOT));
        let capacity_type = if spot_available {
            l::CAPACITY_TYPE_SPOT
        } else {
            l::CAPACITY_TYPE_ON_DEMAND
        };
        let mut candidates: Vec<Candidate> = compatible
            .into_iter()
            .filter_map(|(it, offerings)| {
                let offerings: Vec<sched::Offering> = offerings
                    .into_iter()
                    .filter(|o| o.capacity_type == capacity_type)
                    .collect();
                (!offerings.is_empty()).then_some(Candidate {
                    instance_type: it,
                    offerings,
                })
            })
            .collect();
        let cheapest = |c: &Candidate| {
            c.offerings
                .iter()
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min)
        };
        candidates.sort_by(|a, b| {
            cheapest(a)
                .total_cmp(&cheapest(b))
                .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
        });
        if !claim.instance_types.is_empty() {
            candidates.sort_by_key(|c| {
                claim
                    .instance_types
                    .iter()
                    .position(|n| *n == c.instance_type.name)
                    .unwrap_or(usize::MAX)
            });
        }
        candidates.truncate(MAX_INSTANCE_TYPES);
        // minValues must still hold over the types the launch may use.
        for wanted in &claim.requirements {
            let Some(min) = wanted.min_values.filter(|m| *m > 0) else {
                continue;
            };
            let distinct: BTreeSet<&str> = candidates
                .iter()
                .filter_map(|c| {
                    c.instance_type
                        .requirements
                        .iter()
                        .find(|r| r.key == wanted.key && r.operator == sched::Operator::In as i32)
                        .and_then(|r| r.values.first())
                        .map(String::as_str)
                })
                .collect();
            if distinct.len() < min as usize {
                return Err(Error::NoCompatibleInstanceTypes(format!(
                    "minValues {min} of {:?} cannot be met: the {} cheapest compatible types offer only {} value(s) {:?}",
                    wanted.key,
                    candidates.len(),
                    distinct.len(),
                    distinct
                )));
            }
        }
        Ok((capacity_type, candidates))
    }

    fn instance_tags(&self, claim: &pb::NodeClaim, nc: &NodeClass) -> Vec<(String, String)> {
        let mut tags: BTreeMap<String, String> = nc.spec.tags.clone();
        tags.insert(
            format!("kubernetes.io/cluster/{}", self.settings.cluster_name),
            "owned".into(),
        );
        tags.insert(l::TAG_NODE_POOL.into(), claim.node_pool.clone());
        tags.insert(l::TAG_NODE_CLAIM.into(), claim.name.clone());
        tags.insert(l::TAG_NODE_CLASS.into(), nc.name.clone());
        tags.insert(
            l::TAG_EKS_CLUSTER_NAME.into(),
            self.settings.cluster_name.clone(),
        );
        tags.into_iter().collect()
    }

    async fn launch(
        &self,
        claim: &pb::NodeClaim,
        nc: &NodeClass,
        capacity_type: &'static str,
        candidates: &[Candidate],
        token: &str,
    ) -> Result<Launch, Error> {
        // One launch template per AMI; each type goes with the first AMI whose
        // requirements it meets (newest first).
        let mut by_ami: BTreeMap<String, Vec<&Candidate>> = BTreeMap::new();
        let mut ami_order: Vec<String> = Vec::new();
        for candidate in candidates {
            let Some(type_reqs) = requirements_of(&candidate.instance_type.requirements) else {
                continue;
            };
            let ami = nc.status.amis.iter().find(|ami| {
                ami_requirements(&ami.requirements)
                    .is_some_and(|r| r.intersects(&type_reqs).is_ok())
            });
            if let Some(ami) = ami {
                if !by_ami.contains_key(&ami.id) {
                    ami_order.push(ami.id.clone());
                }
                by_ami.entry(ami.id.clone()).or_default().push(candidate);
            }
        }
        if by_ami.is_empty() {
            return Err(Error::NoCompatibleInstanceTypes(
                "no resolved AMI serves any of the compatible instance types (check the AMIs' architectures)".into(),
            ));
        }
        let tags = self.instance_tags(claim, nc);
        let mut configs = Vec::new();
        let mut subnet_zone: BTreeMap<String, String> = BTreeMap::new();
        let mut by_zone: BTreeMap<String, &nodeclass::Subnet> = BTreeMap::new();
        let subnets: Vec<nodeclass::Subnet> = nc
            .status
            .subnets
            .iter()
            .map(|s| nodeclass::Subnet {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: s.zone_id.clone(),
                free_ips: 0,
            })
            .collect();
        // Status subnets are ordered by free IPs (most first) when resolved.
        for subnet in &subnets {
            by_zone.entry(subnet.zone.clone()).or_insert(subnet);
            subnet_zone.insert(subnet.id.clone(), subnet.zone.clone());
        }
        for ami in &ami_order {
            let template = self.ensure_launch_template(claim, nc, ami, &tags).await?;
            let mut overrides = Vec::new();
            for candidate in &by_ami[ami] {
                for offering in &candidate.offerings {
                    let Some(subnet) = by_zone.get(&offering.zone) else {
                        continue;
                    };
                    overrides.push(
                        FleetLaunchTemplateOverridesRequest::builder()
                            .instance_type(Ec2InstanceType::from(
                                candidate.instance_type.name.as_str(),
                            ))
                            .subnet_id(&subnet.id)
                            .availability_zone(&subnet.zone)
                            .build(),
                    );
                }
            }
            if overrides.is_empty() {
                continue;
            }
            configs.push(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(template)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides))
                    .build(),
            );
        }
        let ec2_tags: Vec<Tag> = tags.iter().map(|(k, v)| tag(k, v)).collect();
        let target = TargetCapacitySpecificationRequest::builder()
            .total_target_capacity(1)
            .default_target_capacity_type(if capacity_type == l::CAPACITY_TYPE_SPOT {
                DefaultTargetCapacityType::Spot
            } else {
                DefaultTargetCapacityType::OnDemand
            })
            .build();
        let mut request = self
            .clients
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(token)
            .target_capacity_specification(target)
            .set_launch_template_configs(Some(configs))
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .set_tags(Some(ec2_tags.clone()))
                    .build(),
            )
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Volume)
                    .set_tags(Some(ec2_tags))
                    .build(),
            );
        request = if capacity_type == l::CAPACITY_TYPE_SPOT {
            request.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            )
        } else {
            request.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            )
        };
        let out = request
            .send()
            .await
            .map_err(|e| Error::aws("ec2:CreateFleet", &e))?;
        let launched = out
            .instances()
            .iter()
            .flat_map(|i| i.instance_ids())
            .next()
            .cloned();
        let mut ice = Vec::new();
        let mut other = Vec::new();
        for error in out.errors() {
            let code = error.error_code().unwrap_or_default();
            let overrides = error
                .launch_template_and_overrides()
                .and_then(|lt| lt.overrides());
            let instance_type = overrides
                .and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_string())
                .unwrap_or_default();
            let zone = overrides
                .and_then(|o| o.availability_zone().map(str::to_string))
                .or_else(|| {
                    overrides
                        .and_then(|o| o.subnet_id())
                        .and_then(|s| subnet_zone.get(s).cloned())
                })
                .unwrap_or_default();
            if CAPACITY_ERRORS.contains(&code) {
                ice.push(pb::FailedOffering {
                    instance_type,
                    zone,
                    capacity_type: capacity_type.to_string(),
                });
            } else {
                other.push(format!(
                    "{code}: {}",
                    error.error_message().unwrap_or_default()
                ));
            }
        }
        if let Some(id) = launched {
            // Offerings the fleet skipped for capacity are remembered even
            // when another one launched.
            return Ok(Launch::Launched(id, ice));
        }
        if !other.is_empty() && ice.is_empty() {
            return Err(Error::Aws {
                action: "ec2:CreateFleet",
                message: other.join("; "),
            });
        }
        if ice.is_empty() {
            return Err(Error::Aws {
                action: "ec2:CreateFleet",
                message: "the fleet launched nothing and reported no error".into(),
            });
        }
        Ok(Launch::InsufficientCapacity(ice))
    }

    /// Finds the launch template for this AMI and configuration by name, or
    /// creates it (a template made by an earlier attempt is reused).
    async fn ensure_launch_template(
        &self,
        claim: &pb::NodeClaim,
        nc: &NodeClass,
        ami: &str,
        tags: &[(String, String)],
    ) -> Result<String, Error> {
        let family = nc.family();
        let mut labels: BTreeMap<String, String> = claim.labels.clone().into_iter().collect();
        labels.insert(l::NODE_POOL.into(), claim.node_pool.clone());
        labels.insert(l::AWS_EC2_NODE_CLASS.into(), nc.name.clone());
        let mut taints: Vec<String> = claim
            .taints
            .iter()
            .chain(&claim.startup_taints)
            .map(|t| {
                let effect = match sched::TaintEffect::try_from(t.effect) {
                    Ok(sched::TaintEffect::NoExecute) => "NoExecute",
                    Ok(sched::TaintEffect::PreferNoSchedule) => "PreferNoSchedule",
                    _ => "NoSchedule",
                };
                if t.value.is_empty() {
                    format!("{}:{effect}", t.key)
                } else {
                    format!("{}={}:{effect}", t.key, t.value)
                }
            })
            .collect();
        taints.push(userdata::unregistered_taint());
        let bootstrap = userdata::Bootstrap {
            cluster_name: &self.settings.cluster_name,
            cluster_endpoint: &self.settings.cluster_endpoint,
            ca_bundle: self.settings.cluster_ca_bundle.as_deref(),
            cluster_cidr: &self.settings.cluster_cidr,
            labels: &labels,
            taints: &taints,
            kubelet: nc.spec.kubelet.as_ref(),
            user_data: nc.spec.user_data.as_deref(),
        };
        let user_data = userdata::render(family, &bootstrap);
        let metadata = nc_metadata(nc);
        let volumes = volumes(nc);
        let groups: Vec<String> = nc
            .status
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect();
        let profile = nc.status.instance_profile.clone().unwrap_or_default();
        let fingerprint = format!(
            "{}|{ami}|{user_data}|{groups:?}|{profile}|{volumes:?}|{metadata:?}|{tags:?}|{:?}",
            self.settings.cluster_name, nc.spec.associate_public_ip_address
        );
        let name = format!("karpenter.k8s.aws/{}", fnv64(fingerprint.as_bytes()));
        match self
            .clients
            .ec2
            .describe_launch_templates()
            .launch_template_names(&name)
            .send()
            .await
        {
            Ok(out) if !out.launch_templates().is_empty() => {
                self.template_used(&name);
                return Ok(name);
            }
            Ok(_) => {}
            Err(e) if error_code(&e).is_some_and(|c| c.contains("NotFound")) => {}
            Err(e) => return Err(Error::aws("ec2:DescribeLaunchTemplates", &e)),
        }
        let mappings: Vec<LaunchTemplateBlockDeviceMappingRequest> = volumes
            .iter()
            .map(|v| {
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name(&v.device)
                    .ebs(
                        LaunchTemplateEbsBlockDeviceRequest::builder()
                            .set_volume_size(v.size_gib.map(|g| g as i32))
                            .volume_type(Ec2VolumeType::from(v.volume_type.as_str()))
                            .encrypted(v.encrypted)
                            .delete_on_termination(v.delete_on_termination)
                            .set_iops(v.iops.map(|i| i as i32))
                            .set_throughput(v.throughput.map(|t| t as i32))
                            .set_kms_key_id(v.kms_key_id.clone())
                            .set_snapshot_id(v.snapshot_id.clone())
                            .build(),
                    )
                    .build()
            })
            .collect();
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(ami)
            .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
            .iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(&profile)
                    .build(),
            )
            .set_block_device_mappings(Some(mappings))
            .metadata_options(metadata);
        data = match nc.spec.associate_public_ip_address {
            Some(public) => data.network_interfaces(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .associate_public_ip_address(public)
                    .set_groups(Some(groups))
                    .build(),
            ),
            None => data.set_security_group_ids(Some(groups)),
        };
        let lt_tags: Vec<Tag> = [
            (
                format!("kubernetes.io/cluster/{}", self.settings.cluster_name),
                "owned".to_string(),
            ),
            (
                "karpenter.k8s.aws/cluster".to_string(),
                self.settings.cluster_name.clone(),
            ),
            (l::AWS_EC2_NODE_CLASS.to_string(), nc.name.clone()),
        ]
        .into_iter()
        .map(|(k, v)| tag(k, v))
        .collect();
        match self
            .clients
            .ec2
            .create_launch_template()
            .launch_template_name(&name)
            .launch_template_data(data.build())
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(lt_tags))
                    .build(),
            )
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(launch_template = %name, ami, "created launch template");
                self.template_used(&name);
                Ok(name)
            }
            // Another Create made it first: use it.
            Err(e) if error_code(&e).is_some_and(|c| c.contains("AlreadyExists")) => {
                self.template_used(&name);
                Ok(name)
            }
            Err(e) => Err(Error::aws("ec2:CreateLaunchTemplate", &e)),
        }
    }

    /// Describes one instance; `None` when it does not exist.
    pub async fn describe(&self, id: &str) -> Result<Option<aws_sdk_ec2::types::Instance>, Error> {
        match self
            .clients
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
        {
            Ok(out) => Ok(out
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .find(|i| i.instance_id() == Some(id))
                .cloned()),
            Err(e) if error_code(&e).is_some_and(|c| c.starts_with("InvalidInstanceID")) => {
                Ok(None)
            }
            Err(e) => Err(Error::aws("ec2:DescribeInstances", &e)),
        }
    }

    async fn describe_filtered(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<aws_sdk_ec2::types::Instance>, Error> {
        let mut out = Vec::new();
        let mut pages = self
            .clients
            .ec2
            .describe_instances()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| Error::aws("ec2:DescribeInstances", &e))?;
            out.extend(
                page.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .cloned(),
            );
        }
        Ok(out)
    }

    fn live_filters(&self) -> Vec<Filter> {
        vec![
            Filter::builder()
                .name(format!(
                    "tag:kubernetes.io/cluster/{}",
                    self.settings.cluster_name
                ))
                .values("owned")
                .build(),
            Filter::builder()
                .name("tag-key")
                .values(l::TAG_NODE_CLAIM)
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .values("stopping")
                .values("stopped")
                .values("shutting-down")
                .build(),
        ]
    }

    async fn find_by_claim(
        &self,
        name: &str,
        nc: Option<&NodeClass>,
    ) -> Result<Option<pb::Instance>, Error> {
        let mut filters = self.live_filters();
        filters.push(
            Filter::builder()
                .name(format!("tag:{}", l::TAG_NODE_CLAIM))
                .values(name)
                .build(),
        );
        let found = self.describe_filtered(filters).await?;
        let Some(instance) = found.first() else {
            return Ok(None);
        };
        let view = self.catalog.offering_view().await?;
        let types = self.instance_types(nc).await?;
        let types: Vec<sched::InstanceType> = types.iter().map(|(_, it)| it.clone()).collect();
        Ok(Some(self.to_wire(instance, nc, &view, &types)))
    }

    pub async fn get(&self, provider_id: &str) -> Result<pb::Instance, Error> {
        let id = instance_id(provider_id)?;
        let instance = self.describe(id).await?;
        match instance {
            Some(i) if !is_gone(&i) => {
                let view = self.catalog.offering_view().await?;
                let types = self.wire_types().await?;
                Ok(self.to_wire(&i, None, &view, &types))
            }
            _ => Err(Error::NotFound(format!("instance {id} does not exist"))),
        }
    }

    async fn wire_types(&self) -> Result<Vec<sched::InstanceType>, Error> {
        Ok(self
            .instance_types(None)
            .await?
            .iter()
            .map(|(_, it)| it.clone())
            .collect())
    }

    pub async fn list(&self) -> Result<Vec<pb::Instance>, Error> {
        let instances = self.describe_filtered(self.live_filters()).await?;
        let view = self.catalog.offering_view().await?;
        let types = self.wire_types().await?;
        Ok(instances
            .iter()
            .map(|i| self.to_wire(i, None, &view, &types))
            .collect())
    }

    pub async fn delete(&self, provider_id: &str) -> Result<(), Error> {
        let id = instance_id(provider_id)?;
        match self.describe(id).await? {
            Some(i) if !is_gone(&i) => {}
            _ => return Err(Error::NotFound(format!("instance {id} does not exist"))),
        }
        match self
            .clients
            .ec2
            .terminate_instances()
            .instance_ids(id)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(instance = id, "terminating instance");
                Ok(())
            }
            Err(e) if error_code(&e).is_some_and(|c| c.starts_with("InvalidInstanceID")) => {
                Err(Error::NotFound(format!("instance {id} does not exist")))
            }
            Err(e) => Err(Error::aws("ec2:TerminateInstances", &e)),
        }
    }

    pub async fn is_drifted(&self, request: &pb::IsDriftedRequest) -> Result<String, Error> {
        let claim = request
            .node_claim
            .as_ref()
            .ok_or_else(|| Error::invalid("node_claim", "a node claim is required"))?;
        let nc = NodeClass::from_wire("node_claim.node_class", claim.node_class.as_ref())?;
        let id = instance_id(&request.provider_id)?;
        let instance = self
            .describe(id)
            .await?
            .filter(|i| !is_gone(i))
            .ok_or_else(|| Error::NotFound(format!("instance {id} does not exist")))?;
        let image = if request.image_id.is_empty() {
            instance.image_id().unwrap_or_default().to_string()
        } else {
            request.image_id.clone()
        };
        if !nc.status.amis.is_empty() && !nc.status.amis.iter().any(|a| a.id == image) {
            return Ok(DRIFT_AMI.into());
        }
        if let Some(subnet) = instance.subnet_id()
            && !nc.status.subnets.is_empty()
            && !nc.status.subnets.iter().any(|s| s.id == subnet)
        {
            return Ok(DRIFT_SUBNET.into());
        }
        let have: BTreeSet<&str> = instance
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id())
            .collect();
        let want: BTreeSet<&str> = nc
            .status
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        // An instance that reports no groups at all (moto's fleet instances
        // ignore the launch template's groups) cannot be judged.
        if !want.is_empty() && !have.is_empty() && have != want {
            return Ok(DRIFT_SECURITY_GROUP.into());
        }
        // Static drift: the spec changed since launch (only comparable when
        // the claim's hash was made the way this provider makes it).
        if !request.node_class_hash.is_empty()
            && request.node_class_hash_version == nodeclass::HASH_VERSION
            && request.node_class_hash != nodeclass::spec_hash(&nc.spec)
        {
            return Ok(DRIFT_NODE_CLASS.into());
        }
        Ok(String::new())
    }

    fn to_wire(
        &self,
        instance: &aws_sdk_ec2::types::Instance,
        nc: Option<&NodeClass>,
        view: &OfferingView,
        types: &[sched::InstanceType],
    ) -> pb::Instance {
        use crate::instancetype::OfferingSource as _;
        let id = instance.instance_id().unwrap_or_default();
        let zone = instance
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string();
        let type_name = instance
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default();
        let capacity_type = match instance.instance_lifecycle().map(|l| l.as_str()) {
            Some("spot") => l::CAPACITY_TYPE_SPOT,
            _ => l::CAPACITY_TYPE_ON_DEMAND,
        };
        let tags: BTreeMap<String, String> = instance
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_string(),
                    t.value().unwrap_or_default().to_string(),
                ))
            })
            .collect();
        let it = types.iter().find(|t| t.name == type_name);
        let mut labels: BTreeMap<String, String> = BTreeMap::new();
        if let Some(it) = it {
            for r in &it.requirements {
                if r.operator == sched::Operator::In as i32 && r.values.len() == 1 {
                    labels.insert(r.key.clone(), r.values[0].clone());
                }
            }
        }
        labels.insert(l::INSTANCE_TYPE.into(), type_name.clone());
        labels.insert(l::TOPOLOGY_ZONE.into(), zone.clone());
        labels.insert(l::TOPOLOGY_REGION.into(), self.settings.region.clone());
        labels.insert(l::CAPACITY_TYPE.into(), capacity_type.into());
        if let Some(zone_id) = nc
            .and_then(|nc| nc.status.subnets.iter().find(|s| s.zone == zone))
            .and_then(|s| s.zone_id.clone())
        {
            labels.insert(l::AWS_TOPOLOGY_ZONE_ID.into(), zone_id);
        }
        if let Some(pool) = tags.get(l::TAG_NODE_POOL) {
            labels.insert(l::NODE_POOL.into(), pool.clone());
        }
        if let Some(class) = tags.get(l::TAG_NODE_CLASS) {
            labels.insert(l::AWS_EC2_NODE_CLASS.into(), class.clone());
        }
        let price = if capacity_type == l::CAPACITY_TYPE_SPOT {
            view.spot_price(&type_name, &zone)
        } else {
            view.on_demand_price(&type_name)
        };
        pb::Instance {
            node_claim_name: tags.get(l::TAG_NODE_CLAIM).cloned().unwrap_or_default(),
            provider_id: provider_id(&zone, id),
            instance_type: type_name,
            zone,
            capacity_type: capacity_type.into(),
            image_id: instance.image_id().unwrap_or_default().to_string(),
            capacity: it.and_then(|t| t.capacity.clone()),
            allocatable: it.map(|t| sched::ResourceList {
                quantities: karpenter_proto::convert::allocatable(t),
            }),
            labels,
            node_pool: tags.get(l::TAG_NODE_POOL).cloned().unwrap_or_default(),
            tags,
            launch_time: instance.launch_time().map(|t| prost_types::Timestamp {
                seconds: t.secs(),
                nanos: t.subsec_nanos() as i32,
            }),
            state: instance
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default(),
            price: price.unwrap_or(0.0),
        }
    }
}

enum Launch {
    /// The instance, and offerings the fleet skipped for capacity.
    Launched(String, Vec<pb::FailedOffering>),
    InsufficientCapacity(Vec<pb::FailedOffering>),
}

fn candidates_types(candidates: &[Candidate]) -> Vec<sched::InstanceType> {
    candidates.iter().map(|c| c.instance_type.clone()).collect()
}

fn is_gone(instance: &aws_sdk_ec2::types::Instance) -> bool {
    matches!(
        instance.state().and_then(|s| s.name()).map(|n| n.as_str()),
        Some("terminated") | Some("shutting-down")
    )
}

fn nc_metadata(nc: &NodeClass) -> LaunchTemplateInstanceMetadataOptionsRequest {
    let defaults = karpenter_api::ec2nodeclass::MetadataOptions::default();
    let set = nc.spec.metadata_options.clone().unwrap_or_default();
    let endpoint = set.http_endpoint.or(defaults.http_endpoint);
    let ipv6 = set.http_protocol_ipv6.or(defaults.http_protocol_ipv6);
    let hops = set
        .http_put_response_hop_limit
        .or(defaults.http_put_response_hop_limit)
        .unwrap_or(1);
    let tokens = set.http_tokens.or(defaults.http_tokens);
    LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_endpoint(match endpoint {
            Some(EndpointState::Disabled) => LaunchTemplateInstanceMetadataEndpointState::Disabled,
            _ => LaunchTemplateInstanceMetadataEndpointState::Enabled,
        })
        .http_protocol_ipv6(match ipv6 {
            Some(EndpointState::Enabled) => LaunchTemplateInstanceMetadataProtocolIpv6::Enabled,
            _ => LaunchTemplateInstanceMetadataProtocolIpv6::Disabled,
        })
        .http_put_response_hop_limit(hops as i32)
        .http_tokens(match tokens {
            Some(HttpTokens::Optional) => LaunchTemplateHttpTokensState::Optional,
            _ => LaunchTemplateHttpTokensState::Required,
        })
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_class(spec: serde_json::Value) -> NodeClass {
        NodeClass::from_wire(
            "node_class",
            Some(&pb::NodeClass {
                name: "default".into(),
                spec_json: spec.to_string(),
                ..Default::default()
            }),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ephemeral_storage_is_the_kubelets_volume_as_written() {
        let with = |family: &str, mappings: serde_json::Value| {
            ephemeral_storage_bytes(&node_class(serde_json::json!({
                "amiFamily": family,
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole",
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "blockDeviceMappings": mappings,
            })))
        };
        let bdm = |device: &str, size: &str, root: bool| serde_json::json!({"deviceName": device, "rootVolume": root, "ebs": {"volumeSize": size}});
        assert_eq!(
            with(
                "AL2023",
                serde_json::json!([bdm("/dev/xvda", "100G", false)])
            ),
            100_000_000_000,
            "decimal sizes are not rounded to GiB"
        );
        assert_eq!(
            with(
                "AL2023",
                serde_json::json!([
                    bdm("/dev/xvda", "20Gi", false),
                    bdm("/dev/xvdc", "80Gi", true)
                ])
            ),
            80 << 30,
            "the mapping marked rootVolume wins"
        );
        assert_eq!(
            with(
                "Custom",
                serde_json::json!([
                    bdm("/dev/sda1", "30Gi", false),
                    bdm("/dev/sdb", "60Gi", false)
                ])
            ),
            60 << 30,
            "Custom: the last mapping"
        );
        assert_eq!(with("Custom", serde_json::json!([])), 20 << 30);
        assert_eq!(
            with(
                "AL2023",
                serde_json::json!([bdm("/dev/xvda", "9223372036854775806", true)])
            ),
            9_223_372_036_854_775_806,
            "a huge size does not overflow"
        );
    }
}
