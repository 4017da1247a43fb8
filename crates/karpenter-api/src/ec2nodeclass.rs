//! `karpenter.k8s.aws/v1` EC2NodeClass: how the AWS provider launches instances (subnets,
//! security groups, AMIs, IAM role, kubelet settings, block devices, metadata options, ...).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::common::{Condition, NodeSelectorRequirement, empty, nullable};
use crate::crd::Column;
use crate::schema::{self, add_rules, patterns, rule};

/// EC2NodeClass condition: subnets were resolved.
pub const CONDITION_SUBNETS_READY: &str = "SubnetsReady";
/// EC2NodeClass condition: security groups were resolved.
pub const CONDITION_SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
/// EC2NodeClass condition: AMIs were resolved.
pub const CONDITION_AMIS_READY: &str = "AMIsReady";
/// EC2NodeClass condition: the instance profile exists.
pub const CONDITION_INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
/// EC2NodeClass condition: capacity reservations were resolved.
pub const CONDITION_CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
/// EC2NodeClass condition: the node class passed runtime validation.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";

/// What `kubectl get ec2nodeclasses` prints.
pub(crate) const PRINTER_COLUMNS: &[Column] = &[
    Column::READY,
    Column::AGE,
    Column::text("Role", ".spec.role").wide(),
];

/// The configuration the AWS provider needs to launch instances.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    status = "EC2NodeClassStatus",
    category = "karpenter",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    derive = "PartialEq",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API"
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ec2_node_class_spec_rules)]
pub struct EC2NodeClassSpec {
    /// Selects the subnets instances launch into; a subnet matching any term is used.
    #[schemars(length(max = 30), transform = subnet_terms_rules)]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Selects the security groups of the instances; a group matching any term is used.
    #[schemars(length(max = 30), transform = security_group_terms_rules)]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Selects the capacity reservations instances may launch into; a reservation matching any
    /// term is eligible.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(length(max = 30), transform = capacity_reservation_terms_rules)]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// The placement group instances launch into, by name or ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = placement_group_selector_rules)]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Whether instances get a public IP address.
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// How many IPv4 prefixes are assigned to the primary network interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// Selects the AMIs instances boot from; an AMI matching any term is used.
    #[schemars(length(min = 1, max = 30), transform = ami_terms_rules)]
    pub ami_selector_terms: Vec<AMISelectorTerm>,
    /// The AMI family, which decides the user-data format and default block devices. Optional
    /// with an alias term (the alias decides, and only that family or `Custom` may be set);
    /// required otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AMIFamily>,
    /// User data for the instances, in the format of the AMI family. Karpenter merges its own
    /// settings into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The IAM role of the nodes; Karpenter manages an instance profile for it. Exactly one of
    /// `role` and `instanceProfile` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = role_rules)]
    pub role: Option<String>,
    /// An existing instance profile for the nodes, whose role Karpenter may pass. Exactly one of
    /// `role` and `instanceProfile` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = instance_profile_rules)]
    pub instance_profile: Option<String>,
    /// Tags put on instances, volumes, network interfaces and launch templates.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "tags_schema")]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings for the nodes: any field of the kubelet's configuration file,
    /// checked by the provider (Karpenter v1.15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Kubelet>,
    /// Block devices attached to the instances.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(length(max = 50), transform = block_device_mappings_rules)]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How instance-store disks are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// The network interfaces of the launch template, by network card and device index (for
    /// EFA-only interfaces beside the primary one). Empty: one primary interface.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(length(max = 150), transform = network_interfaces_rules)]
    pub network_interfaces: Vec<NetworkInterface>,
    /// Whether detailed (1-minute) CloudWatch monitoring is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance Metadata Service settings of the launch template. Defaults to the endpoint
    /// enabled, IPv6 endpoint disabled, hop limit 1 and tokens (IMDSv2) required; see the EKS
    /// best practices on restricting pod access to instance metadata.
    #[serde(
        default = "default_metadata_options",
        deserialize_with = "metadata_options_or_default",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata_options: Option<MetadataOptions>,
    /// Idle connection-tracking timeouts of the interfaces of the launch template (all but
    /// EFA-only ones). Only Nitro instance types support them, so only those are offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = connection_tracking_rules)]
    pub connection_tracking: Option<ConnectionTracking>,
    /// The reserved EC2 `Context` field passed to CreateFleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// CPU options of the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CPUOptions>,
    /// AWS Nitro Enclaves on the instances (Karpenter v1.15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<EnclaveOptions>,
}

/// Whether the instances have AWS Nitro Enclaves enabled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnclaveOptions {
    /// Enables Nitro Enclaves in the launch template; instance types that do not support them
    /// are not launched. Karpenter installs nothing for them (allocator, device plugin): the
    /// user data and a NodeOverlay for their resources are the user's.
    pub enabled: bool,
}

/// A placement group, by exactly one of name and ID.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementGroupSelector {
    /// The placement group's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// The placement group's ID (`pg-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

fn placement_group_selector_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "has(self.name) || has(self.id)",
                "expected at least one, got none, ['name', 'id']",
            ),
            rule(
                "!(has(self.name) && has(self.id))",
                "'name' and 'id' are mutually exclusive",
            ),
        ],
    );
}

/// The kind of a launch-template network interface.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum InterfaceType {
    /// A standard ENA interface (pod networking can use it).
    #[serde(rename = "interface")]
    Interface,
    /// An Elastic Fabric Adapter without IP networking.
    #[serde(rename = "efa-only")]
    EfaOnly,
}

impl InterfaceType {
    /// The value EC2 takes (`interface`, `efa-only`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interface => "interface",
            Self::EfaOnly => "efa-only",
        }
    }
}

/// One network interface of the launch template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// The network card the interface attaches to.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// The device index of the attachment on that card.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// `interface` or `efa-only`.
    pub interface_type: InterfaceType,
}

fn network_interfaces_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')",
                "networkInterfaces must include a primary interface with interfaceType='interface'",
            ),
            rule(
                "self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))",
                "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
            ),
        ],
    );
}

/// Idle connection-tracking timeouts, in seconds; EC2's defaults apply to the unset ones.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTracking {
    /// Idle established TCP connections (60-432000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle UDP flows that saw more than one request-response (60-180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle UDP flows that saw one direction or one request-response (30-60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

fn connection_tracking_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [rule(
            "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)",
            "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        )],
    );
}

/// Whether a CPU feature is on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FeatureState {
    /// The feature is on.
    Enabled,
    /// The feature is off.
    Disabled,
}

impl FeatureState {
    /// The value EC2 takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::Disabled => "disabled",
        }
    }
}

/// CPU options of the instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CPUOptions {
    /// Nested virtualization. `enabled` offers only the instance types whose processors
    /// support it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested_virtualization: Option<FeatureState>,
}

impl EC2NodeClassSpec {
    /// Whether the node class enables Nitro Enclaves.
    pub fn enclaves(&self) -> bool {
        self.enclave_options.as_ref().is_some_and(|o| o.enabled)
    }

    /// Whether the node class asks for nested virtualization.
    pub fn nested_virtualization(&self) -> bool {
        self.cpu_options
            .as_ref()
            .and_then(|c| c.nested_virtualization)
            == Some(FeatureState::Enabled)
    }
}

fn alias_family_rule(alias: &str, family: &str, article: &str) -> Value {
    rule(
        &format!(
            "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)"
        ),
        &format!(
            "if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias"
        ),
    )
}

fn ec2_node_class_spec_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
                "must specify exactly one of ['role', 'instanceProfile']",
            ),
            alias_family_rule("al2", "AL2", "an"),
            alias_family_rule("al2023", "AL2023", "an"),
            alias_family_rule("bottlerocket", "Bottlerocket", "a"),
            alias_family_rule("windows2019", "Windows2019", "a"),
            alias_family_rule("windows2022", "Windows2022", "a"),
            alias_family_rule("windows2025", "Windows2025", "a"),
            rule(
                "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
                "must specify amiFamily if amiSelectorTerms does not contain an alias",
            ),
        ],
    );
}

fn subnet_terms_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule("self.size() != 0", "subnetSelectorTerms cannot be empty"),
            rule(
                "self.all(x, has(x.tags) || has(x.id) || has(x.cidr))",
                "expected at least one, got none, ['tags', 'id', 'cidr']",
            ),
            rule(
                "!self.all(x, has(x.id) && has(x.tags))",
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            ),
        ],
    );
}

fn security_group_terms_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.size() != 0",
                "securityGroupSelectorTerms cannot be empty",
            ),
            rule(
                "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
                "expected at least one, got none, ['tags', 'id', 'name']",
            ),
            rule(
                "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))",
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            ),
            rule(
                "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))",
                "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            ),
        ],
    );
}

fn capacity_reservation_terms_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
                "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
            ),
            rule(
                "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID) || has(x.instanceMatchCriteria)))",
                "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
            ),
        ],
    );
}

fn ami_terms_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
                "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            ),
            rule(
                "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
                "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            ),
            rule(
                "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
                "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            ),
            rule(
                "!(self.exists(x, has(x.alias)) && self.size() != 1)",
                "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            ),
        ],
    );
}

fn role_rules(schema: &mut Schema) {
    add_rules(schema, [rule("self != ''", "role cannot be empty")]);
}

fn instance_profile_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [rule("self != ''", "instanceProfile cannot be empty")],
    );
}

fn tags_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
        "x-kubernetes-validations": [
            rule("self.all(k, k != '')", "empty tag keys aren't supported"),
            rule("self.all(k, k !='eks:eks-cluster-name')", "tag contains a restricted tag matching eks:eks-cluster-name"),
            rule("self.all(k, !k.startsWith('kubernetes.io/cluster') )", "tag contains a restricted tag matching kubernetes.io/cluster/"),
            rule("self.all(k, k != 'karpenter.sh/nodepool')", "tag contains a restricted tag matching karpenter.sh/nodepool"),
            rule("self.all(k, k !='karpenter.sh/nodeclaim')", "tag contains a restricted tag matching karpenter.sh/nodeclaim"),
            rule("self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')", "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"),
        ],
    })
}

/// Tag filters of a selector term: at most 20, no empty keys or values; `*` matches any value.
fn selector_tags_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string" },
        "maxProperties": 20,
        "x-kubernetes-validations": [rule("self.all(k, k != '' && self[k] != '')", "empty tag keys or values aren't supported")],
    })
}

/// Selects subnets. All fields of a term must match (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    /// Tags the subnet must have; `*` matches any value of a key.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "selector_tags_schema")]
    pub tags: BTreeMap<String, String>,
    /// The subnet ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::SUBNET_ID))]
    pub id: Option<String>,
    /// The subnet's CIDR block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
}

/// Selects security groups. All fields of a term must match (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    /// Tags the security group must have; `*` matches any value of a key.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "selector_tags_schema")]
    pub tags: BTreeMap<String, String>,
    /// The security group ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::SECURITY_GROUP_ID))]
    pub id: Option<String>,
    /// The security group's name (the `GroupName` field, not the `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Which instance launches a capacity reservation accepts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    /// Any matching instance may use the reservation.
    Open,
    /// Only instances that target the reservation explicitly may use it.
    Targeted,
}

/// Selects capacity reservations. All fields of a term must match (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags the reservation must have; `*` matches any value of a key.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "selector_tags_schema")]
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::CAPACITY_RESERVATION_ID))]
    pub id: Option<String>,
    /// The AWS account that owns the reservation.
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::AWS_ACCOUNT_ID))]
    pub owner_id: Option<String>,
    /// Which instance launches the reservation accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// Selects AMIs. All fields of a term must match (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AMISelectorTerm {
    /// An EKS-optimized AMI as `family@version`, e.g. `al2023@latest` or `al2023@v20240625`.
    /// Families: al2, al2023, bottlerocket, windows2019, windows2022, windows2025 (Windows only with `latest`).
    /// `latest` drifts nodes whenever a new AMI is released, so pin versions in production.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), transform = alias_rules)]
    pub alias: Option<String>,
    /// Tags the AMI must have; `*` matches any value of a key.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(schema_with = "selector_tags_schema")]
    pub tags: BTreeMap<String, String>,
    /// The AMI ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = patterns::AMI_ID))]
    pub id: Option<String>,
    /// The AMI name (the `Name` field, not the `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The AMI owner: an account ID, `self`, `amazon` or `aws-marketplace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Name or ARN of an SSM parameter holding the AMI ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

fn alias_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "self.matches('^[a-zA-Z0-9]+@.+$')",
                "'alias' is improperly formatted, must match the format 'family@version'",
            ),
            rule(
                "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']",
                "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
            ),
            rule(
                "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true",
                "windows families may only specify version 'latest'",
            ),
        ],
    );
}

/// The AMI family of an EC2NodeClass.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AMIFamily {
    /// Amazon Linux 2.
    AL2,
    /// Amazon Linux 2023.
    AL2023,
    /// Bottlerocket.
    Bottlerocket,
    /// A custom AMI; user data is passed through unchanged.
    Custom,
    /// Windows Server 2019.
    Windows2019,
    /// Windows Server 2022.
    Windows2022,
    /// Windows Server 2025.
    Windows2025,
}

impl AMIFamily {
    /// The family as written in `amiFamily`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AL2 => "AL2",
            Self::AL2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Custom => "Custom",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
            Self::Windows2025 => "Windows2025",
        }
    }

    /// The Windows Server release of a Windows family: its year (as the EKS AMIs' SSM
    /// parameters name it) and its build (the `node.kubernetes.io/windows-build` label).
    pub fn windows_release(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Windows2019 => Some(("2019", "10.0.17763")),
            Self::Windows2022 => Some(("2022", "10.0.20348")),
            Self::Windows2025 => Some(("2025", "10.0.26100")),
            Self::AL2 | Self::AL2023 | Self::Bottlerocket | Self::Custom => None,
        }
    }

    /// Whether the family is a Windows Server one.
    pub fn is_windows(self) -> bool {
        self.windows_release().is_some()
    }

    /// The family of an alias prefix (`al2023` in `al2023@latest`).
    pub fn from_alias_family(family: &str) -> Option<Self> {
        Some(match family {
            "al2" => Self::AL2,
            "al2023" => Self::AL2023,
            "bottlerocket" => Self::Bottlerocket,
            "windows2019" => Self::Windows2019,
            "windows2022" => Self::Windows2022,
            "windows2025" => Self::Windows2025,
            _ => return None,
        })
    }
}

impl fmt::Display for AMIFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed `family@version` AMI alias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AMIAlias {
    /// The AMI family.
    pub family: AMIFamily,
    /// The version, or `latest`.
    pub version: String,
}

/// An AMI alias that is not `family@version` with a supported family.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid AMI alias {0:?}: expected 'family@version' with family al2, al2023, bottlerocket, windows2019, windows2022 or windows2025"
)]
pub struct InvalidAMIAlias(pub String);

impl std::str::FromStr for AMIAlias {
    type Err = InvalidAMIAlias;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidAMIAlias(s.to_string());
        let (family, version) = s.split_once('@').ok_or_else(invalid)?;
        if version.is_empty() || version.contains('@') {
            return Err(invalid());
        }
        Ok(Self {
            family: AMIFamily::from_alias_family(family).ok_or_else(invalid)?,
            version: version.to_string(),
        })
    }
}

impl AMIAlias {
    /// Whether the alias follows the newest AMI.
    pub fn is_latest(&self) -> bool {
        self.version == "latest"
    }
}

pub use crate::kubelet::{Kubelet, KubeletConfiguration};

/// Whether an Instance Metadata Service endpoint is on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EndpointState {
    /// The endpoint is reachable.
    Enabled,
    /// The endpoint is off.
    Disabled,
}

/// Whether IMDS requests need a session token (IMDSv2).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    /// Only token-authenticated (IMDSv2) requests are served.
    Required,
    /// Requests with and without a token are served (IMDSv1 allowed).
    Optional,
}

/// Instance Metadata Service settings for the launched instances.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// Whether the metadata endpoint is reachable from the node; `disabled` turns IMDS off.
    #[serde(
        default = "default_http_endpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_endpoint: Option<EndpointState>,
    /// Whether the IPv6 metadata endpoint is reachable.
    #[serde(
        default = "default_http_protocol_ipv6",
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<EndpointState>,
    /// How many network hops a metadata PUT response may travel (1-64). 1 keeps it on the host,
    /// out of reach of pods in their own network namespace.
    #[serde(default = "default_hop_limit", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: Option<i64>,
    /// Whether metadata requests need a session token. `required` (IMDSv2) always returns
    /// version 2 role credentials; `optional` also serves token-less (version 1) requests.
    #[serde(
        default = "default_http_tokens",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_tokens: Option<HttpTokens>,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            http_endpoint: default_http_endpoint(),
            http_protocol_ipv6: default_http_protocol_ipv6(),
            http_put_response_hop_limit: default_hop_limit(),
            http_tokens: default_http_tokens(),
        }
    }
}

fn default_http_endpoint() -> Option<EndpointState> {
    Some(EndpointState::Enabled)
}

fn default_http_protocol_ipv6() -> Option<EndpointState> {
    Some(EndpointState::Disabled)
}

fn default_hop_limit() -> Option<i64> {
    Some(1)
}

fn default_http_tokens() -> Option<HttpTokens> {
    Some(HttpTokens::Required)
}

fn default_metadata_options() -> Option<MetadataOptions> {
    Some(MetadataOptions::default())
}

/// `metadataOptions: null` gets the defaults, as the API server prunes the null and defaults it.
fn metadata_options_or_default<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<MetadataOptions>, D::Error> {
    Ok(Some(Option::deserialize(deserializer)?.unwrap_or_default()))
}

/// A block device attached at launch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// The device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = ebs_rules)]
    pub ebs: Option<BlockDevice>,
    /// Whether this device is the kubelet root volume; at most one mapping may say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_volume: bool,
}

fn block_device_mappings_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [rule(
            "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
            "must have only one blockDeviceMappings with rootVolume",
        )],
    );
}

fn ebs_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "has(self.snapshotID) || has(self.volumeSize)",
                "snapshotID or volumeSize must be defined",
            ),
            rule(
                "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
                "snapshotID must be set when volumeInitializationRate is set",
            ),
        ],
    );
}

/// EBS volume types.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// Magnetic (previous generation).
    Standard,
    /// Provisioned IOPS SSD.
    Io1,
    /// Provisioned IOPS SSD, higher durability.
    Io2,
    /// General purpose SSD (burstable).
    Gp2,
    /// Cold HDD.
    Sc1,
    /// Throughput-optimized HDD.
    St1,
    /// General purpose SSD with provisioned performance.
    Gp3,
}

/// An EBS volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Whether the volume is deleted when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Whether the volume is encrypted (cannot be set for volumes created from a snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (gp3: 3,000-16,000; io1/io2: 100-64,000). Only for io1, io2 and gp3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// The KMS key (ID, alias, or ARN) used to encrypt the volume.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// The snapshot to create the volume from.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s for gp3 volumes (125-1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// The rate (MiB/s, 100-300) at which snapshot blocks are restored; needs `snapshotID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// Volume size in `Gi`, `G`, `Ti` or `T`. Either this or `snapshotID` is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "volume_size_schema")]
    pub volume_size: Option<Quantity>,
    /// The EBS volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
}

fn volume_size_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "pattern": patterns::VOLUME_SIZE })
}

/// How instance-store disks are used.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum InstanceStorePolicy {
    /// All NVMe instance-store disks form a RAID-0 array used for containerd and kubelet state,
    /// giving pods more and faster ephemeral storage.
    RAID0,
}

/// The resolved state of an EC2NodeClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// The subnets currently selected.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub subnets: Vec<SubnetStatus>,
    /// The security groups currently selected.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub security_groups: Vec<SecurityGroupStatus>,
    /// The capacity reservations currently selected.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub capacity_reservations: Vec<CapacityReservationStatus>,
    /// The AMIs currently selected.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub amis: Vec<AMIStatus>,
    /// The instance profile used for the role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Health and readiness signals.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    pub conditions: Vec<Condition>,
}

/// A selected subnet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetStatus {
    /// The subnet ID.
    pub id: String,
    /// The subnet's availability zone.
    pub zone: String,
    /// The subnet's availability zone ID.
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A selected security group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupStatus {
    /// The security group ID.
    pub id: String,
    /// The security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A selected AMI and the instance types it suits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AMIStatus {
    /// The AMI ID.
    pub id: String,
    /// Whether the AMI is deprecated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// The AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The instance types this AMI can run on, as node requirements (architecture, GPU, ...).
    pub requirements: Vec<NodeSelectorRequirement>,
    /// The device name of the root volume, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_name: Option<String>,
    /// The snapshot of the root volume.
    #[serde(
        default,
        rename = "rootDeviceSnapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub root_device_snapshot_id: Option<String>,
}

/// The kind of a capacity reservation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationType {
    /// An on-demand capacity reservation.
    #[default]
    Default,
    /// A capacity block (time-bound, e.g. for ML training).
    CapacityBlock,
}

/// Whether a capacity reservation can still be launched into.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CapacityReservationState {
    /// The reservation is usable.
    #[default]
    Active,
    /// The reservation (a capacity block) is within EC2's reclaim window.
    Expiring,
}

/// A selected capacity reservation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationStatus {
    /// The availability zone of the reservation.
    pub availability_zone: String,
    /// When the reservation ends; afterwards no instance can launch into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::date_time")]
    pub end_time: Option<Time>,
    /// The reservation ID.
    #[schemars(extend("pattern" = patterns::CAPACITY_RESERVATION_ID))]
    pub id: String,
    /// Which instance launches the reservation accepts.
    pub instance_match_criteria: InstanceMatchCriteria,
    /// The instance type of the reservation.
    pub instance_type: String,
    /// The AWS account that owns the reservation.
    #[serde(rename = "ownerID")]
    #[schemars(extend("pattern" = patterns::AWS_ACCOUNT_ID))]
    pub owner_id: String,
    /// The kind of reservation.
    #[serde(default)]
    pub reservation_type: CapacityReservationType,
    /// Whether the reservation is usable or about to be reclaimed.
    #[serde(default)]
    pub state: CapacityReservationState,
}

impl EC2NodeClass {
    /// The alias term, if the AMI selector uses one.
    ///
    /// # Errors
    /// Returns [`InvalidAMIAlias`] if the alias is malformed (the CRD rules prevent this).
    pub fn alias(&self) -> Result<Option<AMIAlias>, InvalidAMIAlias> {
        self.spec
            .ami_selector_terms
            .iter()
            .find_map(|term| term.alias.as_deref())
            .map(str::parse)
            .transpose()
    }

    /// The effective AMI family: `amiFamily` if set, else the alias family, else `Custom`.
    pub fn ami_family(&self) -> AMIFamily {
        if let Some(family) = self.spec.ami_family {
            return family;
        }
        match self.alias() {
            Ok(Some(alias)) => alias.family,
            _ => AMIFamily::Custom,
        }
    }

    /// The metadata options with the CRD defaults filled in for anything unset.
    pub fn metadata_options(&self) -> MetadataOptions {
        let defaults = MetadataOptions::default();
        match &self.spec.metadata_options {
            None => defaults,
            Some(set) => MetadataOptions {
                http_endpoint: set.http_endpoint.or(defaults.http_endpoint),
                http_protocol_ipv6: set.http_protocol_ipv6.or(defaults.http_protocol_ipv6),
                http_put_response_hop_limit: set
                    .http_put_response_hop_limit
                    .or(defaults.http_put_response_hop_limit),
                http_tokens: set.http_tokens.or(defaults.http_tokens),
            },
        }
    }

    /// The availability zones of the selected subnets, without duplicates, in status order.
    pub fn zones(&self) -> Vec<&str> {
        let mut zones: Vec<&str> = Vec::new();
        for subnet in self.status.iter().flat_map(|s| &s.subnets) {
            if !zones.contains(&subnet.zone.as_str()) {
                zones.push(&subnet.zone);
            }
        }
        zones
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_parse() {
        let alias: Result<AMIAlias, _> = "al2023@latest".parse();
        assert_eq!(
            alias,
            Ok(AMIAlias {
                family: AMIFamily::AL2023,
                version: "latest".into()
            })
        );
        assert!(alias.is_ok_and(|a| a.is_latest()));
        assert!("bottlerocket@v1.10.0".parse::<AMIAlias>().is_ok());
        assert!("ubuntu@latest".parse::<AMIAlias>().is_err());
        assert!("al2023".parse::<AMIAlias>().is_err());
        assert!("al2023@".parse::<AMIAlias>().is_err());
    }

    #[test]
    fn metadata_defaults() {
        let m = MetadataOptions::default();
        assert_eq!(m.http_endpoint, Some(EndpointState::Enabled));
        assert_eq!(m.http_protocol_ipv6, Some(EndpointState::Disabled));
        assert_eq!(m.http_put_response_hop_limit, Some(1));
        assert_eq!(m.http_tokens, Some(HttpTokens::Required));
        let partial: Result<MetadataOptions, _> =
            serde_json::from_str(r#"{"httpTokens":"optional"}"#);
        assert_eq!(
            partial.ok().and_then(|p| p.http_tokens),
            Some(HttpTokens::Optional)
        );
    }
}
