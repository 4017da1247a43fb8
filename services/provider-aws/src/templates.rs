//! Launch templates: one per configuration that nodes of many claims share
//! (AMI, the pods its types were planned with, capacity type, the node
//! class's settings, the pool's labels and taints), named by a hash of
//! everything in it, so a scale-out of a hundred claims reuses a handful.
//! The node-claim tag is not part of a template: it goes on the instance.
//!
//! ```text
//!   Spec::new(cluster, node class, claim, AMI, pods, capacity type)
//!     → name = karpenter.k8s.aws/<hash of the spec>
//!     → known to this process? → DescribeLaunchTemplates → CreateLaunchTemplate
//!     → its last-used tag rewritten when older than a quarter of the TTL
//!   janitor (one per replica): this cluster's templates that no replica
//!   used for launch_template_ttl (newest of creation, last-used tag, own
//!   use) are deleted
//! ```

use karpenter_api::ec2nodeclass::KubeletConfiguration;
use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    ConnectionTrackingSpecificationRequest, Filter, LaunchTemplateCpuOptionsRequest,
    LaunchTemplateEnclaveOptionsRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6, LaunchTemplateInstanceMetadataTagsState,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest,
    NestedVirtualizationSpecification, RequestLaunchTemplateData, ResourceType, Tag,
    TagSpecification,
};
use base64::Engine as _;
use karpenter_api::aws::labels as l;
use karpenter_api::ec2nodeclass::{
    AMIFamily, ConnectionTracking, EndpointState, FeatureState, HttpTokens, InstanceStorePolicy,
    InterfaceType, NetworkInterface,
};
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::types::v1 as types;

use crate::aws::Settings;
use crate::cluster::ClusterDetails;
use crate::error::{Error, error_code};
use crate::nodeclass::{NodeClass, fnv64};
use crate::provider::{Provider, TemplateUse};
use crate::userdata::{self, Taint};
use crate::volumes::{self, Volume};

/// The tag a replica writes on a launch template it launches from (unix
/// seconds), so that the janitors of the other replicas keep it.
pub(crate) const LAST_USED_TAG: &str = "karpenter.k8s.aws/last-used";

/// The newest use recorded on a template: its creation or its last-used mark.
fn recorded_use(template: &aws_sdk_ec2::types::LaunchTemplate) -> Option<std::time::SystemTime> {
    let created = template
        .create_time()
        .and_then(|t| std::time::SystemTime::try_from(*t).ok());
    let marked = template
        .tags()
        .iter()
        .find(|t| t.key() == Some(LAST_USED_TAG))
        .and_then(|t| t.value()?.parse::<u64>().ok())
        .and_then(|secs| std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs)));
    created.max(marked)
}

/// The tags of everything a launch makes (template, fleet, instance,
/// volumes, network interfaces, spot requests): the node class's tags with
/// Karpenter's own over them.
pub fn launch_tags(
    settings: &Settings,
    nc: &NodeClass,
    node_pool: &str,
) -> BTreeMap<String, String> {
    let mut tags = nc.spec.tags.clone();
    tags.insert(cluster_tag(settings), "owned".into());
    tags.insert(l::TAG_NODE_POOL.into(), node_pool.into());
    tags.insert(
        l::TAG_EKS_CLUSTER_NAME.into(),
        settings.cluster_name.clone(),
    );
    tags.insert(l::TAG_NODE_CLASS.into(), nc.name.clone());
    tags
}

/// `kubernetes.io/cluster/<cluster>`: on everything the provider makes.
pub fn cluster_tag(settings: &Settings) -> String {
    format!("kubernetes.io/cluster/{}", settings.cluster_name)
}

pub fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn taint(t: &types::Taint) -> Taint {
    let effect = match types::TaintEffect::try_from(t.effect) {
        Ok(types::TaintEffect::NoExecute) => "NoExecute",
        Ok(types::TaintEffect::PreferNoSchedule) => "PreferNoSchedule",
        _ => "NoSchedule",
    };
    Taint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: effect.into(),
    }
}

/// The IMDS settings: the node class's, Karpenter's defaults otherwise, and
/// instance tags kept out of IMDS (Karpenter's tag keys are not valid IMDS
/// paths, and an account default could otherwise turn them on).
fn metadata_options(nc: &NodeClass) -> LaunchTemplateInstanceMetadataOptionsRequest {
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
        .http_put_response_hop_limit(i32::try_from(hops).unwrap_or(1))
        .http_tokens(match tokens {
            Some(HttpTokens::Optional) => LaunchTemplateHttpTokensState::Optional,
            _ => LaunchTemplateHttpTokensState::Required,
        })
        .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::Disabled)
        .build()
}

/// Everything one launch template says.
#[derive(Debug)]
pub struct Spec {
    pub name: String,
    pub ami: String,
    user_data: String,
    family: AMIFamily,
    profile: String,
    security_groups: Vec<String>,
    volumes: Vec<Volume>,
    metadata: LaunchTemplateInstanceMetadataOptionsRequest,
    tags: BTreeMap<String, String>,
    monitoring: bool,
    public_ip: Option<bool>,
    ip_prefix_count: Option<i32>,
    /// The node class's interfaces; empty: one primary interface.
    network_interfaces: Vec<NetworkInterface>,
    connection_tracking: Option<ConnectionTracking>,
    nested_virtualization: Option<FeatureState>,
    /// `enclaveOptions.enabled`, when the node class says.
    enclaves: Option<bool>,
    ipv6: bool,
    spot: bool,
}

impl Spec {
    /// The template for `claim`'s types that run `ami` with `max_pods` pods
    /// and `kubelet` (the node class's settings as resolved for them).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        settings: &Settings,
        cluster: &ClusterDetails,
        nc: &NodeClass,
        claim: &pv::NodeClaim,
        capacity_type: &str,
        ami: &str,
        max_pods: i64,
        kubelet: Option<&KubeletConfiguration>,
    ) -> Result<Self, Error> {
        let family = nc.family();
        let mut labels: BTreeMap<String, String> = claim.labels.clone().into_iter().collect();
        labels.insert(l::NODE_POOL.into(), claim.node_pool.clone());
        labels.insert(l::AWS_EC2_NODE_CLASS.into(), nc.name.clone());
        labels.insert(l::CAPACITY_TYPE.into(), capacity_type.into());
        if family != AMIFamily::Custom {
            // The kubelet registers the node with its taints; registration
            // need not copy them.
            labels.insert(l::DO_NOT_SYNC_TAINTS.into(), "true".into());
        }
        let mut taints: Vec<Taint> = claim
            .taints
            .iter()
            .chain(&claim.startup_taints)
            .map(taint)
            .collect();
        let unregistered = userdata::unregistered_taint();
        if !taints.contains(&unregistered) {
            taints.push(unregistered);
        }
        let bootstrap = userdata::Bootstrap {
            cluster,
            labels,
            taints,
            kubelet,
            max_pods,
            raid0: nc.spec.instance_store_policy == Some(InstanceStorePolicy::RAID0),
            user_data: nc.spec.user_data.as_deref(),
        };
        let user_data = userdata::render(family, &bootstrap)
            .map_err(|e| Error::invalid(e.field(), e.to_string()))?;
        let mut spec = Self {
            name: String::new(),
            ami: ami.into(),
            user_data,
            family,
            profile: nc.status.instance_profile.clone().unwrap_or_default(),
            security_groups: nc
                .status
                .security_groups
                .iter()
                .map(|g| g.id.clone())
                .collect(),
            volumes: volumes::volumes(nc),
            metadata: metadata_options(nc),
            tags: launch_tags(settings, nc, &claim.node_pool),
            monitoring: nc.spec.detailed_monitoring.unwrap_or(false),
            public_ip: nc.spec.associate_public_ip_address,
            ip_prefix_count: nc.spec.ip_prefix_count,
            network_interfaces: nc.spec.network_interfaces.clone(),
            connection_tracking: nc.spec.connection_tracking.clone(),
            nested_virtualization: nc
                .spec
                .cpu_options
                .as_ref()
                .and_then(|c| c.nested_virtualization),
            enclaves: nc.spec.enclave_options.as_ref().map(|o| o.enabled),
            ipv6: cluster.ipv6(),
            spot: capacity_type == l::CAPACITY_TYPE_SPOT,
        };
        // Everything above is the template's identity.
        spec.name = format!(
            "karpenter.k8s.aws/{}",
            fnv64(format!("{spec:?}").as_bytes())
        );
        Ok(spec)
    }

    /// The template's network interfaces: the node class's, or one primary
    /// interface. Every interface but an EFA-only one carries the security
    /// groups, the public-address choice, prefix delegation and the
    /// connection-tracking timeouts (EC2 refuses those on EFA-only ones).
    fn network_interfaces(
        &self,
    ) -> Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest> {
        let primary = NetworkInterface {
            network_card_index: 0,
            device_index: 0,
            interface_type: InterfaceType::Interface,
        };
        let configured = if self.network_interfaces.is_empty() {
            std::slice::from_ref(&primary)
        } else {
            &self.network_interfaces
        };
        configured
            .iter()
            .map(|nic| self.network_interface(nic, !self.network_interfaces.is_empty()))
            .collect()
    }

    fn network_interface(
        &self,
        nic: &NetworkInterface,
        configured: bool,
    ) -> LaunchTemplateInstanceNetworkInterfaceSpecificationRequest {
        let mut interface = LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
            .device_index(nic.device_index);
        if configured {
            interface = interface
                .network_card_index(nic.network_card_index)
                .interface_type(nic.interface_type.as_str());
        }
        if nic.interface_type == InterfaceType::EfaOnly {
            return interface.build();
        }
        interface = interface
            .set_groups(Some(self.security_groups.clone()))
            .set_associate_public_ip_address(self.public_ip)
            .set_connection_tracking_specification(
                self.connection_tracking.as_ref().map(connection_tracking),
            );
        interface = if self.ipv6 {
            interface
                .primary_ipv6(true)
                .ipv6_address_count(1)
                .set_ipv6_prefix_count(self.ip_prefix_count)
        } else {
            interface.set_ipv4_prefix_count(self.ip_prefix_count)
        };
        interface.build()
    }

    fn data(&self) -> RequestLaunchTemplateData {
        let tags = ec2_tags(&self.tags);
        let mut resource_tags = vec![
            LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(ResourceType::NetworkInterface)
                .set_tags(Some(tags.clone()))
                .build(),
        ];
        if self.spot {
            resource_tags.push(
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ResourceType::SpotInstancesRequest)
                    .set_tags(Some(tags))
                    .build(),
            );
        }
        RequestLaunchTemplateData::builder()
            .image_id(&self.ami)
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(&self.profile)
                    .build(),
            )
            .set_block_device_mappings(volumes::mappings(&self.volumes))
            .metadata_options(self.metadata.clone())
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.monitoring)
                    .build(),
            )
            .set_network_interfaces(Some(self.network_interfaces()))
            .set_cpu_options(self.nested_virtualization.map(|state| {
                LaunchTemplateCpuOptionsRequest::builder()
                    .nested_virtualization(NestedVirtualizationSpecification::from(state.as_str()))
                    .build()
            }))
            .set_enclave_options(self.enclaves.map(|enabled| {
                LaunchTemplateEnclaveOptionsRequest::builder()
                    .enabled(enabled)
                    .build()
            }))
            .set_tag_specifications(Some(resource_tags))
            .build()
    }
}

fn connection_tracking(ct: &ConnectionTracking) -> ConnectionTrackingSpecificationRequest {
    ConnectionTrackingSpecificationRequest::builder()
        .set_tcp_established_timeout(ct.tcp_established_timeout)
        .set_udp_stream_timeout(ct.udp_stream_timeout)
        .set_udp_timeout(ct.udp_timeout)
        .build()
}

impl Provider {
    /// Makes sure the template of `spec` exists (one made by an earlier
    /// launch, or by another replica, is reused) and is marked as in use.
    pub(crate) async fn ensure_launch_template(&self, spec: &Spec) -> Result<(), Error> {
        let record = match self.reuse_template(&spec.name) {
            Some(record) => record,
            None => self.find_or_create_template(spec).await?,
        };
        self.mark_in_use(&spec.name, &record).await;
        Ok(())
    }

    async fn find_or_create_template(&self, spec: &Spec) -> Result<TemplateUse, Error> {
        if let Some((id, marked)) = self.describe_template(&spec.name).await? {
            return Ok(self.template_used(&spec.name, &id, marked));
        }
        let created = self
            .clients
            .ec2
            .create_launch_template()
            .launch_template_name(&spec.name)
            .launch_template_data(spec.data())
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(ec2_tags(&spec.tags)))
                    .build(),
            )
            .send()
            .await;
        match created {
            Ok(out) => {
                tracing::info!(launch_template = %spec.name, ami = %spec.ami, family = ?spec.family, "created launch template");
                let id = out
                    .launch_template()
                    .and_then(|t| t.launch_template_id())
                    .unwrap_or_default();
                Ok(self.template_used(&spec.name, id, std::time::SystemTime::now()))
            }
            // Another launch made it first: use it.
            Err(e) if error_code(&e).is_some_and(|c| c.contains("AlreadyExists")) => {
                match self.describe_template(&spec.name).await? {
                    Some((id, marked)) => Ok(self.template_used(&spec.name, &id, marked)),
                    None => Err(Error::aws("ec2:CreateLaunchTemplate", &e)),
                }
            }
            Err(e) => Err(Error::aws("ec2:CreateLaunchTemplate", &e)),
        }
    }

    /// One template by name: its ID and the newest use recorded on it.
    async fn describe_template(
        &self,
        name: &str,
    ) -> Result<Option<(String, std::time::SystemTime)>, Error> {
        let out = match self
            .clients
            .ec2
            .describe_launch_templates()
            .launch_template_names(name)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if error_code(&e).is_some_and(|c| c.contains("NotFound")) => return Ok(None),
            Err(e) => return Err(Error::aws("ec2:DescribeLaunchTemplates", &e)),
        };
        Ok(out.launch_templates().first().map(|t| {
            let id = t.launch_template_id().unwrap_or_default().to_string();
            (id, recorded_use(t).unwrap_or(std::time::UNIX_EPOCH))
        }))
    }

    /// Writes the time of this use on the template when the mark it carries
    /// is older than a quarter of the janitor's TTL, so that every replica's
    /// janitor sees the template as used (each replica runs one). A mark
    /// that cannot be written is not retried for that quarter; the launch
    /// goes on, and a template deleted regardless is made again.
    async fn mark_in_use(&self, name: &str, record: &TemplateUse) {
        let now = std::time::SystemTime::now();
        let age = now.duration_since(record.marked).unwrap_or_default();
        if age < self.settings.launch_template_ttl / 4 || record.id.is_empty() {
            return;
        }
        let seconds = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let marked = self
            .clients
            .ec2
            .create_tags()
            .resources(&record.id)
            .tags(
                Tag::builder()
                    .key(LAST_USED_TAG)
                    .value(seconds.to_string())
                    .build(),
            )
            .send()
            .await;
        if let Err(e) = marked {
            let error = Error::aws("ec2:CreateTags", &e);
            tracing::warn!(launch_template = %name, %error, "marking the launch template as in use failed");
        }
        self.template_marked(name, now);
    }

    /// This cluster's launch templates (of one node class, if given). Every
    /// template the provider made carries the cluster tag.
    async fn launch_templates(
        &self,
        node_class: Option<&str>,
    ) -> Result<Vec<aws_sdk_ec2::types::LaunchTemplate>, Error> {
        let mut request = self.clients.ec2.describe_launch_templates().filters(
            Filter::builder()
                .name(format!("tag:{}", cluster_tag(&self.settings)))
                .values("owned")
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
            self.forget_template(&name);
        }
        Ok(deleted)
    }

    /// Deletes this cluster's launch templates that no launch used for
    /// `launch_template_ttl`: not this process, nor any replica that marked
    /// it (templates never marked count from their creation). Returns how
    /// many were deleted.
    pub async fn collect_launch_templates(&self) -> Result<usize, Error> {
        let now = std::time::SystemTime::now();
        let mut stale = Vec::new();
        for template in self.launch_templates(None).await? {
            let Some(name) = template.launch_template_name() else {
                continue;
            };
            let last = self.template_last_used(name).max(recorded_use(&template));
            let idle = last
                .and_then(|at| now.duration_since(at).ok())
                .unwrap_or_default();
            if idle >= self.settings.launch_template_ttl {
                stale.push(name.to_string());
            }
        }
        self.delete_launch_templates(stale).await
    }

    /// Deletes a node class's launch templates.
    pub(crate) async fn delete_node_class_templates(&self, nc: &NodeClass) -> Result<(), Error> {
        let names = self
            .launch_templates(Some(&nc.name))
            .await?
            .iter()
            .filter_map(|t| t.launch_template_name().map(str::to_string))
            .collect();
        self.delete_launch_templates(names).await.map(|_| ())
    }

    /// Collects unused launch templates every `janitor_interval` until the
    /// provider is dropped.
    pub fn spawn_launch_template_janitor(self: &std::sync::Arc<Self>) {
        crate::spawn_every(
            self,
            self.settings.janitor_interval,
            "collecting unused launch templates",
            |provider| async move { provider.collect_launch_templates().await.map(drop) },
        );
    }
}
