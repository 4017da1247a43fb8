//! The provider's operations over the SDK clients: catalog per node class,
//! launches (launch templates + one instant CreateFleet), instances, drift.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_ec2::types::Filter;
use karpenter_api::aws::labels as l;
use karpenter_api::ec2nodeclass::{AMIFamily, InstanceStorePolicy};
use karpenter_core::requirements::Requirements;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::types::v1 as types;

use crate::aws::{Clients, Settings};
use crate::candidates::{self, Candidate, requirements_of};
use crate::catalog::{Catalog, OfferingView};
use crate::cluster::{Cluster, ClusterDetails};
use crate::error::{Error, error_code};
use crate::fleet::{self, Group, Launch};
use crate::instancetype::{self, Context, TypeInfo};
use crate::nodeclass::{self, NodeClass};
use crate::templates;
use crate::volumes;

/// Fleets one Create tries before reporting insufficient capacity.
pub const MAX_FLEET_ATTEMPTS: usize = 3;

pub const DRIFT_AMI: &str = "AMIDrift";
pub const DRIFT_SUBNET: &str = "SubnetDrift";
pub const DRIFT_SECURITY_GROUP: &str = "SecurityGroupDrift";
pub const DRIFT_NODE_CLASS: &str = "NodeClassDrift";

/// Instance types built for one node-class context, with the catalog
/// generation they were built from.
type Built = Arc<Vec<(TypeInfo, types::InstanceType)>>;

pub struct Provider {
    pub clients: Clients,
    pub settings: Settings,
    pub catalog: Arc<Catalog>,
    /// The cluster's endpoint, CA, service CIDR and version.
    pub cluster: Cluster,
    built: std::sync::Mutex<BTreeMap<String, (u64, Built)>>,
    /// Each launch template this process used, by name.
    templates_used: std::sync::Mutex<BTreeMap<String, TemplateUse>>,
    /// Interruption message id to the receipt handle of its last delivery.
    receipts: std::sync::Mutex<BTreeMap<String, String>>,
    /// This provider's own resolution of each node class spec launched on.
    resolutions: std::sync::Mutex<BTreeMap<String, Resolution>>,
    /// The operation IDs of the latest reboots (a retry does not reboot
    /// again), oldest first, at most [`REBOOT_OPERATIONS_KEPT`].
    reboots: std::sync::Mutex<std::collections::VecDeque<String>>,
}

/// How many reboot operation IDs are remembered for idempotency.
const REBOOT_OPERATIONS_KEPT: usize = 1024;

/// What this process knows of a launch template it launched from.
#[derive(Clone, Debug)]
pub(crate) struct TemplateUse {
    pub id: String,
    /// When this process last launched from it.
    pub used: SystemTime,
    /// The newest use any replica recorded on the template itself (its
    /// creation, or its last-used tag).
    pub marked: SystemTime,
}

/// How long a node class resolution is reused for launches.
const RESOLUTION_REUSED_FOR: Duration = Duration::from_secs(60);
/// Distinct node class specs whose resolution is kept at once.
const RESOLUTIONS_KEPT: usize = 64;

/// What the provider itself resolved for one node class spec.
#[derive(Clone, Debug)]
struct Resolution {
    status: karpenter_api::ec2nodeclass::EC2NodeClassStatus,
    /// Why the node class is not ready, when it is not.
    not_ready: Option<String>,
    at: Instant,
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
        // An invalid class is not launched from (its validation says why).
        kubelet: nc.and_then(|nc| nc.kubelet().ok().flatten()),
        family: nc.map(NodeClass::family).unwrap_or(AMIFamily::AL2023),
        ephemeral_storage_bytes: nc.map(volumes::ephemeral_storage_bytes).unwrap_or(20 << 30),
        raid0: nc
            .is_some_and(|nc| nc.spec.instance_store_policy == Some(InstanceStorePolicy::RAID0)),
        vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
        reserved_enis: settings.reserved_enis,
        network_interfaces: nc
            .map(|nc| nc.spec.network_interfaces.clone())
            .unwrap_or_default(),
        connection_tracking: nc.is_some_and(|nc| nc.spec.connection_tracking.is_some()),
        nested_virtualization: nc.is_some_and(|nc| nc.spec.nested_virtualization()),
        enclaves: nc.is_some_and(|nc| nc.spec.enclaves()),
        node_class_cel: settings.node_class_cel,
    }
}

/// What splits a launch's types into launch templates: the AMI, the pods
/// their user data sets, and their resolved reserved resources.
type TemplateKey = (String, i64, String);

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

impl Provider {
    pub fn new(clients: Clients, settings: Settings) -> Self {
        let catalog = Arc::new(Catalog::new(clients.clone(), settings.clone()));
        let cluster = Cluster::new(clients.clone(), settings.clone());
        Self {
            clients,
            settings,
            catalog,
            cluster,
            built: std::sync::Mutex::new(BTreeMap::new()),
            templates_used: std::sync::Mutex::new(BTreeMap::new()),
            receipts: std::sync::Mutex::new(BTreeMap::new()),
            resolutions: std::sync::Mutex::new(BTreeMap::new()),
            reboots: std::sync::Mutex::new(std::collections::VecDeque::new()),
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

    /// Records a launch from the template; returns its record.
    pub(crate) fn template_used(&self, name: &str, id: &str, marked: SystemTime) -> TemplateUse {
        let mut used = self
            .templates_used
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let record = used.entry(name.to_string()).or_insert(TemplateUse {
            id: id.to_string(),
            used: SystemTime::now(),
            marked,
        });
        record.id = id.to_string();
        record.used = SystemTime::now();
        record.marked = record.marked.max(marked);
        record.clone()
    }

    /// The template's record if this process made or used it and the
    /// janitor has not deleted it since, counted as a new use.
    pub(crate) fn reuse_template(&self, name: &str) -> Option<TemplateUse> {
        let mut used = self
            .templates_used
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let record = used.get_mut(name)?;
        let idle = record.used.elapsed().unwrap_or_default();
        if idle >= self.settings.launch_template_ttl {
            return None;
        }
        record.used = SystemTime::now();
        Some(record.clone())
    }

    pub(crate) fn template_last_used(&self, name: &str) -> Option<SystemTime> {
        self.templates_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|r| r.used)
    }

    /// Notes that the template now carries a last-used mark of `at`.
    pub(crate) fn template_marked(&self, name: &str, at: SystemTime) {
        if let Some(record) = self
            .templates_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(name)
        {
            record.marked = record.marked.max(at);
        }
    }

    pub(crate) fn forget_template(&self, name: &str) {
        self.templates_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// Releases what the provider made for a node class being deleted: its
    /// launch templates and its managed instance profile.
    pub async fn finalize_node_class(&self, nc: &NodeClass) -> Result<(), Error> {
        self.delete_node_class_templates(nc).await?;
        nodeclass::delete_managed_instance_profile(&self.clients, &self.settings, nc).await
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

    /// The cluster's details, or why nodes could not join it now.
    pub async fn cluster_details(&self) -> Result<ClusterDetails, Error> {
        let (details, error) = self.cluster.details().await;
        let missing = details.missing();
        if missing.is_empty() {
            return Ok(details);
        }
        let mut message = format!(
            "nodes cannot join cluster {:?}: {} unknown",
            details.name,
            missing.join(", ")
        );
        if let Some(error) = error {
            message.push_str(&format!(" (eks:DescribeCluster: {error})"));
        }
        Err(Error::NotReady(message))
    }

    /// Launches an instance for the claim (or returns the one already launched for it).
    pub async fn create(&self, claim: &pv::NodeClaim) -> Result<pv::Instance, Error> {
        if claim.name.is_empty() {
            return Err(Error::invalid(
                "node_claim.name",
                "a node claim name is required",
            ));
        }
        let nc = NodeClass::from_wire("node_claim.node_class", claim.node_class.as_ref())?;
        let nc = self.trusted(nc).await?;
        Self::ensure_ready(&nc)?;
        let cluster = self.cluster_details().await?;
        let requirements =
            karpenter_proto::convert::requirements("node_claim.requirements", &claim.requirements)
                .map_err(|e| Error::invalid(e.field.clone(), e.message.clone()))?;
        if let Some(existing) = self.find_by_claim(&claim.name, Some(&nc)).await? {
            tracing::info!(instance = %existing.provider_id, "node claim already launched; returning its instance");
            return Ok(existing);
        }
        let requests = karpenter_proto::convert::resources(claim.resources.as_ref());
        let mut failed: Vec<pv::FailedOffering> = Vec::new();
        let mut templates_gone = false;
        for attempt in 0..MAX_FLEET_ATTEMPTS {
            let built = self.instance_types(Some(&nc)).await?;
            let types: Vec<types::InstanceType> = built.iter().map(|(_, it)| it.clone()).collect();
            let (capacity_type, candidates) =
                candidates::select(claim, &requirements, &requests, &types)?;
            if candidates.is_empty() {
                if failed.is_empty() {
                    return Err(Error::NoCompatibleInstanceTypes(format!(
                        "none of the instance types in the node class's zones fits the requirements and requests of {:?} with an available offering",
                        claim.name
                    )));
                }
                break;
            }
            let groups =
                self.template_groups(&cluster, claim, &nc, capacity_type, &candidates, &built)?;
            for group in &groups {
                self.ensure_launch_template(&group.template).await?;
            }
            let uid = if claim.uid.is_empty() {
                &claim.name
            } else {
                &claim.uid
            };
            let token = fleet::client_token(&self.settings.cluster_name, uid, attempt);
            match self
                .fleet(claim, &nc, capacity_type, &groups, &token)
                .await?
            {
                Launch::Launched(instance, skipped) => {
                    for o in &skipped {
                        self.catalog
                            .mark_unavailable(&o.instance_type, &o.zone, &o.capacity_type);
                    }
                    let view = self.catalog.offering_view().await?;
                    return Ok(self.to_wire(&instance, Some(&nc), &view, &types));
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
                // Another replica's janitor deleted a template between our
                // look and the fleet: make it again, once.
                Launch::TemplateGone if !templates_gone => {
                    templates_gone = true;
                    for group in &groups {
                        self.forget_template(&group.template.name);
                    }
                }
                Launch::TemplateGone => {
                    return Err(Error::Aws {
                        action: "ec2:CreateFleet",
                        message: "the launch template was deleted while launching, twice".into(),
                    });
                }
                Launch::Failed(message) => {
                    return Err(Error::Aws {
                        action: "ec2:CreateFleet",
                        message,
                    });
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

    /// The launch templates of a launch: each candidate goes with the
    /// first (newest) AMI whose requirements it meets, and the types of an
    /// AMI are split by the pods their user data sets and by their kubelet
    /// settings (which differ by type when they are expressions).
    fn template_groups<'c>(
        &self,
        cluster: &ClusterDetails,
        claim: &pv::NodeClaim,
        nc: &NodeClass,
        capacity_type: &str,
        candidates: &'c [Candidate],
        built: &[(TypeInfo, types::InstanceType)],
    ) -> Result<Vec<Group<'c>>, Error> {
        let kubelet = nc.kubelet()?;
        let ctx = context(&self.settings, Some(nc));
        // Each candidate's type, to resolve its kubelet expressions (only
        // settings with expressions differ by type).
        let infos: std::collections::HashMap<&str, &TypeInfo> =
            if kubelet.as_ref().is_some_and(|k| k.has_expressions()) {
                built
                    .iter()
                    .map(|(info, _)| (info.name.as_str(), info))
                    .collect()
            } else {
                Default::default()
            };
        let mut keys: Vec<TemplateKey> = Vec::new();
        let mut members: BTreeMap<TemplateKey, Vec<&'c Candidate>> = BTreeMap::new();
        let mut settings: BTreeMap<
            TemplateKey,
            Option<karpenter_api::ec2nodeclass::KubeletConfiguration>,
        > = BTreeMap::new();
        for candidate in candidates {
            let Some(type_reqs) = requirements_of(&candidate.instance_type.requirements) else {
                continue;
            };
            let Some(ami) = nc.status.amis.iter().find(|ami| {
                ami_requirements(&ami.requirements)
                    .is_some_and(|r| r.intersects(&type_reqs).is_ok())
            }) else {
                continue;
            };
            let resolved = infos
                .get(candidate.instance_type.name.as_str())
                .map(|info| instancetype::resolved_kubelet(info, &ctx))
                .transpose()
                .map_err(|e| Error::invalid("node_claim.node_class.spec.kubelet", e))?
                .flatten();
            let type_kubelet = resolved.or_else(|| kubelet.clone());
            let signature = type_kubelet
                .as_ref()
                .map(|k| format!("{:?}{:?}", k.kube_reserved, k.system_reserved))
                .unwrap_or_default();
            let key = (ami.id.clone(), candidate.pods(), signature);
            if !members.contains_key(&key) {
                keys.push(key.clone());
                settings.insert(key.clone(), type_kubelet);
            }
            members.entry(key).or_default().push(candidate);
        }
        if keys.is_empty() {
            return Err(Error::NoCompatibleInstanceTypes(
                "no resolved AMI serves any of the compatible instance types (check the AMIs' architectures and variants)".into(),
            ));
        }
        keys.into_iter()
            .map(|key| {
                let template = templates::Spec::new(
                    &self.settings,
                    cluster,
                    nc,
                    claim,
                    capacity_type,
                    &key.0,
                    key.1,
                    settings.get(&key).and_then(Option::as_ref),
                )?;
                Ok(Group {
                    template,
                    candidates: members.remove(&key).unwrap_or_default(),
                })
            })
            .collect()
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

    /// This cluster's live instances of Karpenter's: every one carries the
    /// node-claim and node-pool tags (and only those tagged with a node pool
    /// may be terminated under Karpenter's IAM policy).
    fn live_filters(&self) -> Vec<Filter> {
        let tag_key = |key: &str| Filter::builder().name("tag-key").values(key).build();
        vec![
            Filter::builder()
                .name(format!("tag:{}", templates::cluster_tag(&self.settings)))
                .values("owned")
                .build(),
            tag_key(l::TAG_NODE_CLAIM),
            tag_key(l::TAG_NODE_POOL),
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
    ) -> Result<Option<pv::Instance>, Error> {
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
        let types: Vec<types::InstanceType> = types.iter().map(|(_, it)| it.clone()).collect();
        Ok(Some(self.to_wire(instance, nc, &view, &types)))
    }

    /// The node class as this provider resolves it from the spec: a
    /// caller's status is never launched on (it could name any subnet,
    /// image or instance profile in the account). Resolutions are reused
    /// for a while per name and whole spec, and only a few are kept.
    pub async fn trusted(&self, mut nc: NodeClass) -> Result<NodeClass, Error> {
        // The whole spec, selectors included (the drift hash leaves them
        // out): a caller's node class of the same name but other selectors
        // never shares a resolution with the real one.
        let spec = serde_json::to_string(&nc.spec)
            .map_err(|e| Error::Internal(format!("encoding the node class spec: {e}")))?;
        let key = format!("{}\n{spec}", nc.name);
        let cached = {
            let resolutions = self.resolutions.lock().unwrap_or_else(|p| p.into_inner());
            resolutions
                .get(&key)
                .filter(|r| r.at.elapsed() < RESOLUTION_REUSED_FOR)
                .cloned()
        };
        let resolution = match cached {
            Some(resolution) => resolution,
            None => {
                let (cluster, cluster_error) = self.cluster.details().await;
                let (status, conditions) = nodeclass::resolve_status(
                    &self.clients,
                    &self.settings,
                    &cluster,
                    cluster_error.as_deref(),
                    &nc,
                )
                .await?;
                let failing: Vec<String> = conditions
                    .iter()
                    .filter(|c| c.r#type != "Ready" && c.status != "True")
                    .map(|c| format!("{} ({})", c.message, c.r#type))
                    .collect();
                let not_ready = (!failing.is_empty()).then(|| failing.join("; "));
                let resolution = Resolution {
                    status,
                    not_ready,
                    at: Instant::now(),
                };
                let mut resolutions = self.resolutions.lock().unwrap_or_else(|p| p.into_inner());
                if resolutions.len() >= RESOLUTIONS_KEPT
                    && let Some(oldest) = resolutions
                        .iter()
                        .min_by_key(|(_, r)| r.at)
                        .map(|(k, _)| k.clone())
                {
                    resolutions.remove(&oldest);
                }
                resolutions.insert(key, resolution.clone());
                resolution
            }
        };
        if let Some(why) = resolution.not_ready {
            return Err(Error::NotReady(format!(
                "node class {:?} is not ready: {why}",
                nc.name
            )));
        }
        nc.status = resolution.status;
        Ok(nc)
    }

    /// Whether an instance is one this provider launched for this cluster
    /// (`kubernetes.io/cluster/<name>: owned` and a node pool tag, as
    /// Karpenter v1 tags them): only those are read, judged or deleted.
    fn ours(&self, instance: &aws_sdk_ec2::types::Instance) -> bool {
        let cluster_tag = templates::cluster_tag(&self.settings);
        let tag = |key: &str| {
            instance
                .tags()
                .iter()
                .find(|t| t.key() == Some(key))
                .and_then(|t| t.value())
        };
        tag(&cluster_tag) == Some("owned") && tag(l::TAG_NODE_POOL).is_some()
    }

    pub async fn get(&self, provider_id: &str) -> Result<pv::Instance, Error> {
        let id = instance_id(provider_id)?;
        let instance = self.describe(id).await?;
        match instance {
            Some(i) if !is_gone(&i) && self.ours(&i) => {
                let view = self.catalog.offering_view().await?;
                let types = self.wire_types().await?;
                Ok(self.to_wire(&i, None, &view, &types))
            }
            _ => Err(Error::NotFound(format!("instance {id} does not exist"))),
        }
    }

    async fn wire_types(&self) -> Result<Vec<types::InstanceType>, Error> {
        Ok(self
            .instance_types(None)
            .await?
            .iter()
            .map(|(_, it)| it.clone())
            .collect())
    }

    pub async fn list(&self) -> Result<Vec<pv::Instance>, Error> {
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
            Some(i) if !is_gone(&i) && self.ours(&i) => {}
            // Another cluster's instance (or one Karpenter did not launch)
            // is not this provider's to terminate.
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

    /// Reboots this cluster's instance in place, once per `operation_id`.
    pub async fn reboot(&self, provider_id: &str, operation_id: &str) -> Result<(), Error> {
        let id = instance_id(provider_id)?;
        // The operation is reserved before the call, so two overlapping
        // calls with the same ID reboot once; a call that fails frees it.
        {
            let mut ops = self.reboots.lock().unwrap_or_else(|p| p.into_inner());
            if ops.iter().any(|o| o == operation_id) {
                return Ok(());
            }
            if ops.len() >= REBOOT_OPERATIONS_KEPT {
                ops.pop_front();
            }
            ops.push_back(operation_id.to_owned());
        }
        let result = self.reboot_instance(id).await;
        if result.is_err() {
            let mut ops = self.reboots.lock().unwrap_or_else(|p| p.into_inner());
            ops.retain(|o| o != operation_id);
        }
        result?;
        tracing::info!(
            instance = id,
            operation = operation_id,
            "rebooting instance"
        );
        Ok(())
    }

    async fn reboot_instance(&self, id: &str) -> Result<(), Error> {
        match self.describe(id).await? {
            Some(i) if !is_gone(&i) && self.ours(&i) => {}
            _ => return Err(Error::NotFound(format!("instance {id} does not exist"))),
        }
        let denied = |c: String| c.contains("AccessDenied") || c.contains("Unauthorized");
        match self
            .clients
            .ec2
            .reboot_instances()
            .instance_ids(id)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if error_code(&e).is_some_and(|c| c.starts_with("InvalidInstanceID")) => {
                Err(Error::NotFound(format!("instance {id} does not exist")))
            }
            Err(e) if error_code(&e).is_some_and(denied) => Err(Error::NotReady(format!(
                "ec2:RebootInstances on {id} was denied; grant it to reboot for repair: {}",
                Error::aws("ec2:RebootInstances", &e)
            ))),
            Err(e) => Err(Error::aws("ec2:RebootInstances", &e)),
        }
    }

    pub async fn is_drifted(&self, request: &pv::IsDriftedRequest) -> Result<String, Error> {
        let claim = request
            .node_claim
            .as_ref()
            .ok_or_else(|| Error::invalid("node_claim", "a node claim is required"))?;
        let nc = NodeClass::from_wire("node_claim.node_class", claim.node_class.as_ref())?;
        let id = instance_id(&request.provider_id)?;
        let instance = self
            .describe(id)
            .await?
            .filter(|i| !is_gone(i) && self.ours(i))
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
        types: &[types::InstanceType],
    ) -> pv::Instance {
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
                if r.operator == types::Operator::In as i32 && r.values.len() == 1 {
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
        pv::Instance {
            node_claim_name: tags.get(l::TAG_NODE_CLAIM).cloned().unwrap_or_default(),
            provider_id: provider_id(&zone, id),
            instance_type: type_name,
            zone,
            capacity_type: capacity_type.into(),
            image_id: instance.image_id().unwrap_or_default().to_string(),
            capacity: it.and_then(|t| t.capacity.clone()),
            allocatable: it.map(|t| types::ResourceList {
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

fn is_gone(instance: &aws_sdk_ec2::types::Instance) -> bool {
    matches!(
        instance.state().and_then(|s| s.name()).map(|n| n.as_str()),
        Some("terminated") | Some("shutting-down")
    )
}
