//! Instance types: what DescribeInstanceTypes (and the limits table) says
//! about a type, turned into the scheduler's `InstanceType` the way
//! Karpenter computes it, so that what is planned is what the kubelet will
//! report:
//!
//! ```text
//!   capacity   cpu, memory (less 64 MiB on Graviton, less the VM overhead),
//!              ephemeral storage (root volume, or the instance store under
//!              RAID0), pods (maxPods, else ENI-limited on the default network
//!              card, 110 on Windows; podsPerCore), GPUs per manufacturer,
//!              Neuron devices and cores, EFA, pod ENIs, Windows private IPs
//!   overhead   kube-reserved (cpu by range, memory from the ENI-limited pod
//!              count or the family's), system-reserved, hard eviction
//!   labels     Karpenter's well-known labels as single-value requirements
//! ```

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::aws::labels as l;
use karpenter_api::ec2nodeclass::{
    AMIFamily, InterfaceType, KubeletConfiguration, NetworkInterface,
};
use karpenter_proto::types::v1 as types;

use crate::limits::{self, Limits};
use crate::quantity;

/// A GPU or inference accelerator model of an instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
    pub memory_mib: Option<i64>,
}

/// The Neuron devices (Inferentia, Trainium) of an instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct Neuron {
    pub name: String,
    pub count: i64,
    pub cores_per_device: i64,
}

/// What the provider keeps of one DescribeInstanceTypes entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeInfo {
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    pub vcpus: i64,
    pub memory_mib: i64,
    /// Empty for bare metal, which has none.
    pub hypervisor: String,
    pub cpu_manufacturer: String,
    /// 0 when AWS does not say.
    pub clock_mhz: i64,
    /// Network interfaces of the default network card (the VPC CNI puts
    /// pod addresses only there).
    pub default_card_enis: i64,
    pub ipv4_per_eni: i64,
    /// EBS bandwidth when EBS optimization is on by default.
    pub ebs_mbps: Option<i64>,
    pub gpus: Vec<Device>,
    /// Inference accelerators of a type without Neuron devices.
    pub accelerator: Option<Device>,
    pub neuron: Option<Neuron>,
    /// Local NVMe storage, GB.
    pub local_nvme_gb: Option<i64>,
    /// Instance store of any kind, GB (what RAID0 gives the kubelet).
    pub instance_store_gb: Option<i64>,
    pub encryption_in_transit: bool,
    pub efa_interfaces: i64,
    /// Network interfaces each network card takes, by card index.
    pub card_enis: BTreeMap<i32, i32>,
    /// The type's ENA support is not `unsupported`.
    pub ena: bool,
    /// The processor supports nested virtualization.
    pub nested_virtualization: bool,
    /// EC2 lists the type's `NitroEnclavesSupport` as supported.
    pub nitro_enclaves: bool,
    pub spot: bool,
    pub on_demand: bool,
    pub limits: Limits,
}

/// `radeon-pro-v520` of `Radeon Pro V520`: how Karpenter writes names and
/// manufacturers as label values.
fn kebab(text: &str) -> String {
    text.to_lowercase().replace(' ', "-")
}

fn device(name: Option<&str>, manufacturer: Option<&str>, count: Option<i32>) -> Option<Device> {
    Some(Device {
        name: kebab(name?),
        manufacturer: kebab(manufacturer?),
        count: i64::from(count.unwrap_or(0)),
        memory_mib: None,
    })
}

impl TypeInfo {
    /// Converts an SDK entry; `None` for types Kubernetes nodes cannot use
    /// (32-bit, no architecture we know, no usage class).
    pub fn from_sdk(info: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<Self> {
        let name = info.instance_type()?.as_str().to_string();
        let processor = info.processor_info()?;
        let arch = processor
            .supported_architectures()
            .iter()
            .find_map(|a| match a.as_str() {
                "x86_64" => Some(l::ARCH_AMD64),
                "arm64" => Some(l::ARCH_ARM64),
                _ => None,
            })?
            .to_string();
        let network = info.network_info();
        let usage: Vec<&str> = info
            .supported_usage_classes()
            .iter()
            .map(|u| u.as_str())
            .collect();
        let storage = info.instance_storage_info();
        let ebs = info.ebs_info();
        Some(Self {
            limits: limits::of(&name),
            arch,
            vcpus: i64::from(info.v_cpu_info()?.default_v_cpus()?),
            memory_mib: info.memory_info()?.size_in_mib()?,
            hypervisor: info
                .hypervisor()
                .map(|h| h.as_str().to_string())
                .unwrap_or_default(),
            cpu_manufacturer: kebab(processor.manufacturer().unwrap_or_default()),
            clock_mhz: processor
                .sustained_clock_speed_in_ghz()
                .map_or(0, |ghz| (ghz * 1000.0).round() as i64),
            default_card_enis: network.map_or(1, default_card_enis),
            ipv4_per_eni: network
                .and_then(|n| n.ipv4_addresses_per_interface())
                .map_or(1, i64::from),
            ebs_mbps: ebs
                .filter(|e| e.ebs_optimized_support().map(|s| s.as_str()) == Some("default"))
                .and_then(|e| e.ebs_optimized_info())
                .and_then(|o| o.maximum_bandwidth_in_mbps())
                .map(i64::from),
            gpus: info.gpu_info().map_or_else(Vec::new, |g| {
                g.gpus()
                    .iter()
                    .filter_map(|d| {
                        let mut gpu = device(d.name(), d.manufacturer(), d.count())?;
                        gpu.memory_mib =
                            d.memory_info().and_then(|m| m.size_in_mib()).map(i64::from);
                        Some(gpu)
                    })
                    .collect()
            }),
            accelerator: info
                .inference_accelerator_info()
                .filter(|_| info.neuron_info().is_none())
                .and_then(|a| match a.accelerators() {
                    [one] => device(one.name(), one.manufacturer(), one.count()),
                    _ => None,
                }),
            neuron: info.neuron_info().and_then(|n| {
                let devices = n.neuron_devices();
                let first = devices.first()?;
                Some(Neuron {
                    name: kebab(first.name()?),
                    count: devices
                        .iter()
                        .map(|d| i64::from(d.count().unwrap_or(0)))
                        .sum(),
                    cores_per_device: i64::from(
                        first.core_info().and_then(|c| c.count()).unwrap_or(0),
                    ),
                })
            }),
            local_nvme_gb: storage
                .filter(|s| s.nvme_support().map(|n| n.as_str()) != Some("unsupported"))
                .and_then(|s| s.total_size_in_gb()),
            instance_store_gb: storage.and_then(|s| s.total_size_in_gb()),
            encryption_in_transit: network
                .and_then(|n| n.encryption_in_transit_supported())
                .unwrap_or(false),
            efa_interfaces: network
                .and_then(|n| n.efa_info())
                .and_then(|e| e.maximum_efa_interfaces())
                .map_or(0, i64::from),
            card_enis: network.map_or_else(BTreeMap::new, |n| {
                n.network_cards()
                    .iter()
                    .map(|card| {
                        (
                            card.network_card_index().unwrap_or(0),
                            card.maximum_network_interfaces().unwrap_or(0),
                        )
                    })
                    .collect()
            }),
            ena: network
                .and_then(|n| n.ena_support())
                .is_some_and(|e| e.as_str() != "unsupported"),
            nested_virtualization: processor
                .supported_features()
                .iter()
                .any(|f| f.as_str() == "nested-virtualization"),
            nitro_enclaves: info
                .nitro_enclaves_support()
                .is_some_and(|s| s.as_str() == "supported"),
            spot: usage.contains(&"spot"),
            on_demand: usage.contains(&"on-demand"),
            name,
        })
    }

    /// `m5` of `m5.large`.
    pub fn family(&self) -> &str {
        self.name.split('.').next().unwrap_or(&self.name)
    }

    /// `large` of `m5.large`.
    pub fn size(&self) -> &str {
        self.name.split_once('.').map(|(_, s)| s).unwrap_or("")
    }

    /// Category and generation as Karpenter reads the name: leading letters,
    /// an optional `-<n>tb` (the `u-6tb1` high-memory types), then the
    /// generation digits: `m`/`5` of `m5d.large`, `u`/`1` of `u-6tb1.56xlarge`.
    pub fn category_and_generation(&self) -> Option<(&str, &str)> {
        let (family, _) = self.name.split_once('.')?;
        let category_end = family
            .find(|c: char| !c.is_ascii_lowercase())
            .unwrap_or(family.len());
        if category_end == 0 {
            return None;
        }
        let mut rest = &family[category_end..];
        if let Some(after_dash) = rest.strip_prefix('-') {
            let digits = after_dash.len()
                - after_dash
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            if digits > 0 && after_dash[digits..].starts_with("tb") {
                rest = &after_dash[digits + 2..];
            }
        }
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        (digits > 0).then(|| (&family[..category_end], &rest[..digits]))
    }

    /// Pods the VPC CNI can address on the default card with `reserved_enis`
    /// kept for other uses: `ENIs x (IPv4 per ENI - 1) + 2`, none without a
    /// usable ENI.
    pub fn eni_limited_pods(&self, reserved_enis: i32) -> i64 {
        let usable = (self.default_card_enis - i64::from(reserved_enis)).max(0);
        if usable == 0 {
            return 0;
        }
        usable * (self.ipv4_per_eni - 1) + 2
    }

    /// GPUs and accelerators, for the price estimate.
    pub fn device_count(&self) -> i64 {
        self.gpus.iter().map(|g| g.count).sum::<i64>()
            + self.accelerator.as_ref().map_or(0, |a| a.count)
            + self.neuron.as_ref().map_or(0, |n| n.count)
    }
}

fn default_card_enis(network: &aws_sdk_ec2::types::NetworkInfo) -> i64 {
    let default_index = network.default_network_card_index().unwrap_or(0);
    network
        .network_cards()
        .iter()
        .find(|card| card.network_card_index().unwrap_or(0) == default_index)
        .and_then(|card| card.maximum_network_interfaces())
        .or(network.maximum_network_interfaces())
        .map_or(1, i64::from)
}

/// How an AMI family's nodes count pods and reserve memory for them.
#[derive(Debug, Clone, Copy)]
struct FamilyTraits {
    /// Pods follow the ENI limit unless `maxPods` says otherwise (Windows
    /// nodes run 110).
    eni_limited_pods: bool,
    /// kube-reserved memory follows the ENI-limited pod count whatever
    /// `maxPods` says (the EKS AMIs' bootstrap computes it so).
    eni_limited_memory_overhead: bool,
    /// The family's kubelet takes `podsPerCore` (Bottlerocket's does not).
    pods_per_core: bool,
}

fn traits(family: AMIFamily) -> FamilyTraits {
    match family {
        AMIFamily::Bottlerocket => FamilyTraits {
            eni_limited_pods: true,
            eni_limited_memory_overhead: false,
            pods_per_core: false,
        },
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => FamilyTraits {
            eni_limited_pods: false,
            eni_limited_memory_overhead: false,
            pods_per_core: true,
        },
        AMIFamily::AL2 | AMIFamily::AL2023 | AMIFamily::Custom => FamilyTraits {
            eni_limited_pods: true,
            eni_limited_memory_overhead: true,
            pods_per_core: true,
        },
    }
}

/// Pods a Windows node runs without `maxPods`.
const WINDOWS_PODS: i64 = 110;
/// Memory Graviton instances keep for the kernel (contiguous memory
/// allocator), out of the kubelet's reach.
const GRAVITON_RESERVED_MIB: i64 = 64;

/// Where the catalog is being built for: the node class's zones, kubelet
/// settings, family and storage.
#[derive(Debug, Clone)]
pub struct Context {
    pub region: String,
    /// `(zone, zone id)` of the node class's subnets; empty means every zone.
    pub zones: Vec<(String, Option<String>)>,
    pub kubelet: Option<KubeletConfiguration>,
    pub family: AMIFamily,
    /// Bytes of the volume the kubelet's ephemeral storage lives on.
    pub ephemeral_storage_bytes: i64,
    /// `instanceStorePolicy: RAID0`: ephemeral storage is the instance
    /// store, on the types that have one.
    pub raid0: bool,
    pub vm_memory_overhead_percent: f64,
    pub reserved_enis: i32,
    /// The node class's launch-template interfaces (empty: one primary).
    pub network_interfaces: Vec<NetworkInterface>,
    /// The node class sets connection-tracking timeouts.
    pub connection_tracking: bool,
    /// The node class enables nested virtualization.
    pub nested_virtualization: bool,
    /// The node class enables Nitro Enclaves.
    pub enclaves: bool,
    /// `NodeClassCEL`: the kubelet settings' expressions are evaluated.
    pub node_class_cel: bool,
}

/// Whether a type can launch as the node class asks: AL2023 does not run on
/// the first Graviton generation, connection-tracking timeouts need Nitro,
/// nested virtualization a processor that supports it, Nitro Enclaves a type
/// EC2 lists as supporting them, and the node class's
/// interfaces must exist on the type (its cards, device indices, ENA, EFA
/// count). An incompatible type stays listed, with nothing to launch.
pub fn runs_on(info: &TypeInfo, ctx: &Context) -> bool {
    let family_runs_it = !(ctx.family == AMIFamily::AL2023 && info.name.starts_with("a1."));
    family_runs_it
        && (!ctx.connection_tracking || info.hypervisor == "nitro")
        && (!ctx.nested_virtualization || info.nested_virtualization)
        && (!ctx.enclaves || info.nitro_enclaves)
        && interfaces_fit(info, &ctx.network_interfaces)
}

fn interfaces_fit(info: &TypeInfo, interfaces: &[NetworkInterface]) -> bool {
    if interfaces.is_empty() {
        return true;
    }
    if info.card_enis.is_empty() || !info.ena {
        return false;
    }
    let each_fits = interfaces.iter().all(|nic| {
        info.card_enis
            .get(&nic.network_card_index)
            .is_some_and(|&max| nic.device_index < max)
    });
    let efa_only = interfaces
        .iter()
        .filter(|nic| nic.interface_type == InterfaceType::EfaOnly)
        .count();
    each_fits && i64::try_from(efa_only).is_ok_and(|n| n <= info.efa_interfaces)
}

/// What the offerings of a type depend on besides the type itself.
pub trait OfferingSource {
    /// On-demand price per hour, if known.
    fn on_demand_price(&self, instance_type: &str) -> Option<f64>;
    /// Spot price per hour in a zone, if known.
    fn spot_price(&self, instance_type: &str, zone: &str) -> Option<f64>;
    /// Whether an offering failed with insufficient capacity recently.
    fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool;
}

fn req(key: &str, op: types::Operator, values: Vec<String>) -> types::Requirement {
    types::Requirement {
        key: key.to_string(),
        operator: op as i32,
        values,
        min_values: None,
    }
}

fn req_in(key: &str, values: impl IntoIterator<Item = impl Into<String>>) -> types::Requirement {
    req(
        key,
        types::Operator::In,
        values.into_iter().map(Into::into).collect(),
    )
}

fn req_absent(key: &str) -> types::Requirement {
    req(key, types::Operator::DoesNotExist, Vec::new())
}

/// Memory the kubelet sees, in bytes: the type's memory less Graviton's
/// reservation, less the VM overhead (a share of it, rounded up to MiB).
pub fn memory_capacity_bytes(info: &TypeInfo, overhead_percent: f64) -> i64 {
    let mut mib = info.memory_mib;
    if info.arch == l::ARCH_ARM64 {
        mib -= GRAVITON_RESERVED_MIB;
    }
    let overhead_mib = ((mib as f64) * overhead_percent).ceil() as i64;
    (mib - overhead_mib).max(0) * 1024 * 1024
}

/// Pods per node: `maxPods` when set, else the family's default; capped by
/// `podsPerCore` where the family's kubelet takes it.
pub fn pods(info: &TypeInfo, ctx: &Context) -> i64 {
    pods_with(info, ctx, ctx.kubelet.as_ref())
}

/// [`pods`] with other kubelet settings than the context's.
fn pods_with(info: &TypeInfo, ctx: &Context, kubelet: Option<&KubeletConfiguration>) -> i64 {
    let family = traits(ctx.family);
    let mut pods = match kubelet.and_then(|k| k.max_pods) {
        Some(max) => i64::from(max),
        None if family.eni_limited_pods => info.eni_limited_pods(ctx.reserved_enis),
        None => WINDOWS_PODS,
    };
    if family.pods_per_core
        && let Some(per_core) = kubelet.and_then(|k| k.pods_per_core).filter(|p| *p > 0)
    {
        pods = pods.min(i64::from(per_core) * info.vcpus);
    }
    pods
}

/// What a kubelet expression knows of the type.
pub fn facts(info: &TypeInfo) -> crate::kubelet::Facts {
    crate::kubelet::Facts {
        instance_type: info.name.clone(),
        vcpus: info.vcpus,
        memory_mib: info.memory_mib,
        default_enis: info.default_card_enis,
        ips_per_eni: info.ipv4_per_eni,
    }
}

/// The context's kubelet settings for this type with their expressions
/// evaluated (`None` when they have none): what its capacity is computed
/// from and what its launch template's user data says.
pub fn resolved_kubelet(
    info: &TypeInfo,
    ctx: &Context,
) -> Result<Option<KubeletConfiguration>, String> {
    let Some(kubelet) = ctx.kubelet.as_ref().filter(|k| k.has_expressions()) else {
        return Ok(None);
    };
    let mut without_max_pods = kubelet.clone();
    without_max_pods.max_pods = None;
    without_max_pods.max_pods_expression = None;
    let default_pods = pods_with(info, ctx, Some(&without_max_pods));
    crate::kubelet::resolve(
        kubelet,
        &facts(info),
        ctx.node_class_cel,
        default_pods,
        |resolved| pods_with(info, ctx, Some(resolved)),
    )
    .map(Some)
}

/// Bytes of ephemeral storage on a node of this type.
pub fn ephemeral_storage_bytes(info: &TypeInfo, ctx: &Context) -> i64 {
    match info.instance_store_gb {
        Some(gb) if ctx.raid0 && gb > 0 => gb.saturating_mul(1_000_000_000),
        _ => ctx.ephemeral_storage_bytes,
    }
}

/// Karpenter's kube-reserved cpu: 6% of the first core, 1% of the second,
/// 0.5% of the next two, 0.25% of the rest (millicores, each range's share
/// rounded down).
pub fn kube_reserved_cpu_millis(vcpus: i64) -> i64 {
    let millis = vcpus * 1000;
    let ranges: [(i64, i64, f64); 4] = [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, i64::MAX, 0.0025),
    ];
    ranges
        .iter()
        .filter(|(start, _, _)| millis >= *start)
        .map(|(start, end, share)| ((millis.min(*end) - start) as f64 * share) as i64)
        .sum()
}

/// Karpenter's kube-reserved memory: 11 MiB per pod + 255 MiB (bytes).
pub fn kube_reserved_memory_bytes(pods: i64) -> i64 {
    (11 * pods + 255) * 1024 * 1024
}

fn resource_list(map: BTreeMap<String, i64>) -> types::ResourceList {
    types::ResourceList {
        quantities: map.into_iter().filter(|(_, v)| *v > 0).collect(),
    }
}

fn reserved_from(settings: &BTreeMap<String, String>) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (name, value) in settings {
        if let Ok(v) = karpenter_core::quantity::parse_resource(name, value.trim()) {
            out.insert(name.clone(), v);
        }
    }
    out
}

/// GPUs of one manufacturer, summed over the type's GPU models.
fn gpus_of(info: &TypeInfo, manufacturer: &str) -> i64 {
    info.gpus
        .iter()
        .filter(|g| g.manufacturer == manufacturer)
        .map(|g| g.count)
        .sum()
}

/// Capacity of a type as the kubelet will report it.
pub fn capacity(info: &TypeInfo, ctx: &Context) -> BTreeMap<String, i64> {
    let mut capacity = BTreeMap::new();
    let mut set = |name: &str, value: i64| {
        capacity.insert(name.to_string(), value);
    };
    set("cpu", info.vcpus * 1000);
    set(
        "memory",
        memory_capacity_bytes(info, ctx.vm_memory_overhead_percent),
    );
    set("ephemeral-storage", ephemeral_storage_bytes(info, ctx));
    set("pods", pods(info, ctx));
    set(l::RESOURCE_NVIDIA_GPU, gpus_of(info, "nvidia"));
    set(l::RESOURCE_AMD_GPU, gpus_of(info, "amd"));
    set(l::RESOURCE_HABANA_GAUDI, gpus_of(info, "habana"));
    if let Some(neuron) = &info.neuron {
        set(l::RESOURCE_AWS_NEURON, neuron.count);
        set(
            l::RESOURCE_AWS_NEURON_CORE,
            neuron.count * neuron.cores_per_device,
        );
    }
    set(l::RESOURCE_EFA, info.efa_interfaces);
    set(l::RESOURCE_AWS_POD_ENI, info.limits.pod_eni);
    if ctx.family.is_windows() && info.arch == l::ARCH_AMD64 {
        set(l::RESOURCE_PRIVATE_IPV4_ADDRESS, info.ipv4_per_eni - 1);
    }
    capacity.retain(|_, v| *v > 0);
    capacity
}

/// kube-reserved, system-reserved and hard eviction thresholds (soft
/// thresholds do not take memory away from pods).
pub fn overhead(info: &TypeInfo, ctx: &Context) -> types::InstanceTypeOverhead {
    let pods_for_memory = if traits(ctx.family).eni_limited_memory_overhead {
        info.eni_limited_pods(0)
    } else {
        pods(info, ctx)
    };
    let storage = ephemeral_storage_bytes(info, ctx);
    let mut kube = BTreeMap::new();
    kube.insert("cpu".to_string(), kube_reserved_cpu_millis(info.vcpus));
    kube.insert(
        "memory".to_string(),
        kube_reserved_memory_bytes(pods_for_memory),
    );
    kube.insert("ephemeral-storage".to_string(), 1 << 30);
    let mut system = BTreeMap::new();
    let mut eviction = BTreeMap::new();
    eviction.insert("memory".to_string(), 100 * 1024 * 1024);
    eviction.insert(
        "ephemeral-storage".to_string(),
        quantity::percent_of(storage, 10.0),
    );
    if let Some(kubelet) = &ctx.kubelet {
        kube.extend(reserved_from(&kubelet.kube_reserved));
        system.extend(reserved_from(&kubelet.system_reserved));
        let memory_total = memory_capacity_bytes(info, ctx.vm_memory_overhead_percent);
        for (signal, value) in &kubelet.eviction_hard {
            let (resource, total) = match signal.as_str() {
                "memory.available" => ("memory", memory_total),
                "nodefs.available" => ("ephemeral-storage", storage),
                _ => continue,
            };
            if let Some(v) = quantity::parse_threshold(value, total) {
                eviction.insert(resource.to_string(), v);
            }
        }
    }
    types::InstanceTypeOverhead {
        kube_reserved: Some(resource_list(kube)),
        system_reserved: Some(resource_list(system)),
        eviction_threshold: Some(resource_list(eviction)),
    }
}

/// The labels (as single-value requirements, or `DoesNotExist`) of a type.
pub fn type_requirements(info: &TypeInfo, ctx: &Context) -> Vec<types::Requirement> {
    // A Windows family runs only on amd64: an arm64 type gets no OS at all,
    // so nothing selects it.
    let os: Vec<&str> = match (ctx.family.is_windows(), info.arch == l::ARCH_AMD64) {
        (false, _) => vec!["linux"],
        (true, true) => vec!["windows"],
        (true, false) => Vec::new(),
    };
    let mut out = vec![
        req_in(l::INSTANCE_TYPE, [info.name.clone()]),
        req_in(l::ARCH, [info.arch.clone()]),
        req_in(l::OS, os),
        req_in(l::TOPOLOGY_REGION, [ctx.region.clone()]),
        req_in(l::AWS_INSTANCE_CPU, [info.vcpus.to_string()]),
        req_in(l::AWS_INSTANCE_MEMORY, [info.memory_mib.to_string()]),
        req_in(l::AWS_INSTANCE_HYPERVISOR, [info.hypervisor.clone()]),
        req_in(
            l::AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            [info.encryption_in_transit.to_string()],
        ),
        req_in(
            l::AWS_INSTANCE_CAPABILITY_FLEX,
            [info.family().contains("-flex").to_string()],
        ),
        req_in(
            l::AWS_INSTANCE_CPU_MANUFACTURER,
            [info.cpu_manufacturer.clone()],
        ),
        req_in(
            l::AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
            [info.clock_mhz.to_string()],
        ),
        req_in(l::AWS_INSTANCE_TENANCY, ["default", "dedicated"]),
    ];
    if let Some((_, build)) = ctx.family.windows_release() {
        out.push(req_in(l::WINDOWS_BUILD, [build]));
    }
    let mut optional = |key: &str, value: Option<String>| {
        out.push(match value {
            Some(v) => req_in(key, [v]),
            None => req_absent(key),
        });
    };
    let (category, generation) = info.category_and_generation().unzip();
    optional(l::AWS_INSTANCE_CATEGORY, category.map(str::to_string));
    optional(l::AWS_INSTANCE_GENERATION, generation.map(str::to_string));
    let family_and_size = info
        .name
        .contains('.')
        .then(|| (info.family(), info.size()));
    optional(
        l::AWS_INSTANCE_FAMILY,
        family_and_size.map(|(f, _)| f.to_string()),
    );
    optional(
        l::AWS_INSTANCE_SIZE,
        family_and_size.map(|(_, s)| s.to_string()),
    );
    optional(
        l::AWS_INSTANCE_NETWORK_BANDWIDTH,
        info.limits.network_mbps.map(|m| m.to_string()),
    );
    optional(
        l::AWS_INSTANCE_EBS_BANDWIDTH,
        info.ebs_mbps.map(|m| m.to_string()),
    );
    optional(
        l::AWS_INSTANCE_LOCAL_NVME,
        info.local_nvme_gb.map(|g| g.to_string()),
    );
    // GPU labels describe a type with one GPU model.
    let gpu = match info.gpus.as_slice() {
        [one] => Some(one),
        _ => None,
    };
    optional(l::AWS_INSTANCE_GPU_NAME, gpu.map(|g| g.name.clone()));
    optional(
        l::AWS_INSTANCE_GPU_MANUFACTURER,
        gpu.map(|g| g.manufacturer.clone()),
    );
    optional(l::AWS_INSTANCE_GPU_COUNT, gpu.map(|g| g.count.to_string()));
    optional(
        l::AWS_INSTANCE_GPU_MEMORY,
        gpu.and_then(|g| g.memory_mib).map(|m| m.to_string()),
    );
    let accelerator = match (&info.neuron, &info.accelerator) {
        (Some(neuron), _) => Some((neuron.name.clone(), "aws".to_string(), neuron.count)),
        (None, Some(a)) => Some((a.name.clone(), a.manufacturer.clone(), a.count)),
        (None, None) => None,
    };
    optional(
        l::AWS_INSTANCE_ACCELERATOR_NAME,
        accelerator.as_ref().map(|a| a.0.clone()),
    );
    optional(
        l::AWS_INSTANCE_ACCELERATOR_MANUFACTURER,
        accelerator.as_ref().map(|a| a.1.clone()),
    );
    optional(
        l::AWS_INSTANCE_ACCELERATOR_COUNT,
        accelerator.as_ref().map(|a| a.2.to_string()),
    );
    out
}

/// Offerings of a type: each of its zones (within the node class's) x each
/// capacity type it supports, priced; unpriced or recently short ones are
/// unavailable.
pub fn offerings(
    info: &TypeInfo,
    ctx: &Context,
    type_zones: &BTreeSet<String>,
    source: &dyn OfferingSource,
) -> Vec<types::Offering> {
    let zones: Vec<(String, Option<String>)> = if ctx.zones.is_empty() {
        type_zones.iter().map(|z| (z.clone(), None)).collect()
    } else {
        ctx.zones
            .iter()
            .filter(|(z, _)| type_zones.contains(z))
            .cloned()
            .collect()
    };
    let launchable = runs_on(info, ctx);
    let mut out = Vec::new();
    for (zone, zone_id) in zones {
        for (capacity_type, supported) in [
            (l::CAPACITY_TYPE_SPOT, info.spot),
            (l::CAPACITY_TYPE_ON_DEMAND, info.on_demand),
        ] {
            if !supported {
                continue;
            }
            let price = if capacity_type == l::CAPACITY_TYPE_SPOT {
                source.spot_price(&info.name, &zone)
            } else {
                source.on_demand_price(&info.name)
            };
            let available = launchable
                && price.is_some()
                && !source.is_unavailable(&info.name, &zone, capacity_type);
            let mut requirements = vec![
                req_in(l::CAPACITY_TYPE, [capacity_type]),
                req_in(l::TOPOLOGY_ZONE, [zone.clone()]),
            ];
            if let Some(id) = &zone_id {
                requirements.push(req_in(l::AWS_TOPOLOGY_ZONE_ID, [id.clone()]));
            }
            out.push(types::Offering {
                zone: zone.clone(),
                capacity_type: capacity_type.to_string(),
                price: price.unwrap_or(0.0),
                available,
                requirements,
            });
        }
    }
    out
}

/// The whole scheduler `InstanceType`; `None` when it has no offering in the
/// node class's zones.
pub fn instance_type(
    info: &TypeInfo,
    ctx: &Context,
    type_zones: &BTreeSet<String>,
    source: &dyn OfferingSource,
) -> Option<types::InstanceType> {
    let offerings = offerings(info, ctx, type_zones, source);
    if offerings.is_empty() {
        return None;
    }
    let resolved_ctx;
    let ctx = match resolved_kubelet(info, ctx) {
        Ok(None) => ctx,
        Ok(Some(kubelet)) => {
            resolved_ctx = Context {
                kubelet: Some(kubelet),
                ..ctx.clone()
            };
            &resolved_ctx
        }
        // The type cannot be planned for: it is left out (the others stay).
        Err(error) => {
            tracing::warn!(instance_type = %info.name, %error, "kubelet expressions do not resolve; type left out");
            return None;
        }
    };
    let mut requirements = type_requirements(info, ctx);
    let zones: BTreeSet<String> = offerings.iter().map(|o| o.zone.clone()).collect();
    let capacity_types: BTreeSet<String> =
        offerings.iter().map(|o| o.capacity_type.clone()).collect();
    requirements.push(req_in(l::TOPOLOGY_ZONE, zones));
    requirements.push(req_in(l::CAPACITY_TYPE, capacity_types));
    let zone_ids: BTreeSet<String> = ctx
        .zones
        .iter()
        .filter(|(z, _)| type_zones.contains(z))
        .filter_map(|(_, id)| id.clone())
        .collect();
    if !zone_ids.is_empty() {
        requirements.push(req_in(l::AWS_TOPOLOGY_ZONE_ID, zone_ids));
    }
    Some(types::InstanceType {
        name: info.name.clone(),
        requirements,
        offerings,
        capacity: Some(resource_list(capacity(info, ctx))),
        overhead: Some(overhead(info, ctx)),
        price_overlaid: false,
        capacity_overlaid: false,
        // As Karpenter's AWS provider: attach limits come from each node's
        // CSINode (the EBS CSI driver reports them), not from the type.
        volume_attachment_limits: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> TypeInfo {
        TypeInfo {
            name: name.into(),
            arch: l::ARCH_AMD64.into(),
            vcpus: 2,
            memory_mib: 8192,
            hypervisor: "nitro".into(),
            cpu_manufacturer: "intel".into(),
            clock_mhz: 3100,
            default_card_enis: 3,
            ipv4_per_eni: 10,
            ebs_mbps: None,
            gpus: Vec::new(),
            accelerator: None,
            neuron: None,
            local_nvme_gb: None,
            instance_store_gb: None,
            encryption_in_transit: false,
            efa_interfaces: 0,
            card_enis: BTreeMap::from([(0, 3)]),
            ena: true,
            nested_virtualization: false,
            nitro_enclaves: false,
            spot: true,
            on_demand: true,
            limits: Limits::default(),
        }
    }

    #[test]
    fn kube_reserved_cpu_follows_karpenter_range_by_range() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(5), 82, "2.5m rounds down");
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
        assert_eq!(kube_reserved_cpu_millis(192), 550);
    }

    #[test]
    fn category_and_generation_as_karpenter_reads_names() {
        let of = |name: &str| {
            named(name)
                .category_and_generation()
                .map(|(c, g)| (c.to_string(), g.to_string()))
        };
        assert_eq!(of("m5d.large"), Some(("m".into(), "5".into())));
        assert_eq!(of("u-6tb1.56xlarge"), Some(("u".into(), "1".into())));
        assert_eq!(of("u7i-12tb.224xlarge"), Some(("u".into(), "7".into())));
        assert_eq!(of("p6-b200.48xlarge"), Some(("p".into(), "6".into())));
        assert_eq!(of("inf2.xlarge"), Some(("inf".into(), "2".into())));
        assert_eq!(of("mac2-m2.metal"), Some(("mac".into(), "2".into())));
        assert_eq!(of("nodot"), None);
    }

    #[test]
    fn eni_limited_pods_count_the_default_card_and_none_without_an_eni() {
        let mut info = named("p5.48xlarge");
        info.default_card_enis = 2;
        info.ipv4_per_eni = 50;
        assert_eq!(info.eni_limited_pods(0), 100);
        assert_eq!(info.eni_limited_pods(2), 0);
    }

    fn context(family: AMIFamily, kubelet: serde_json::Value) -> Context {
        Context {
            region: "us-east-1".into(),
            zones: Vec::new(),
            kubelet: (!kubelet.is_null()).then(|| {
                serde_json::from_value::<karpenter_api::ec2nodeclass::Kubelet>(kubelet)
                    .expect("kubelet")
                    .parse()
                    .expect("valid kubelet")
            }),
            family,
            ephemeral_storage_bytes: 20 << 30,
            raid0: false,
            vm_memory_overhead_percent: 0.075,
            reserved_enis: 0,
            network_interfaces: Vec::new(),
            connection_tracking: false,
            nested_virtualization: false,
            enclaves: false,
            node_class_cel: true,
        }
    }

    // Upstream instancetype suite: "should resolve maxPods from an
    // expression when it evaluates in range", "should resolve
    // systemReserved expressions into the instance type's reserved
    // overhead", "should use the default maxPods (not the expression
    // result) when the gate is disabled".
    #[test]
    fn kubelet_expressions_set_each_types_pods_and_reserved_resources() {
        let m5 = named("m5.large");
        let ctx = context(
            AMIFamily::AL2023,
            serde_json::json!({
                "maxPods": "min(max_pods, 20)",
                "systemReserved": {"cpu": "vcpus * 50", "memory": "max_pods * 8"}
            }),
        );
        let source = Priced;
        let zones = BTreeSet::from(["zone-a".to_string()]);
        let it = instance_type(&m5, &ctx, &zones, &source).expect("listed");
        let capacity = it.capacity.expect("capacity").quantities;
        assert_eq!(capacity["pods"], 20, "min(29, 20)");
        let system = it
            .overhead
            .expect("overhead")
            .system_reserved
            .expect("system");
        assert_eq!(system.quantities["cpu"], 100, "2 vCPUs x 50m");
        assert_eq!(
            system.quantities["memory"],
            160 << 20,
            "20 pods x 8 = 160Mi"
        );

        let off = Context {
            node_class_cel: false,
            ..ctx
        };
        let it = instance_type(&m5, &off, &zones, &source).expect("listed");
        assert_eq!(
            it.capacity.expect("capacity").quantities["pods"],
            29,
            "the default"
        );
    }

    fn kube_memory_mib(info: &TypeInfo, ctx: &Context) -> i64 {
        overhead(info, ctx).kube_reserved.expect("kube").quantities["memory"] >> 20
    }

    /// m5.large (3 ENIs x 10 addresses) by family and kubelet settings, as
    /// Karpenter's formulas give them.
    #[test]
    fn pods_and_their_memory_follow_the_family() {
        let m5 = named("m5.large");
        let al2023 = context(AMIFamily::AL2023, serde_json::json!(null));
        assert_eq!(
            (pods(&m5, &al2023), kube_memory_mib(&m5, &al2023)),
            (29, 574)
        );

        let max_pods = context(AMIFamily::AL2023, serde_json::json!({"maxPods": 110}));
        assert_eq!(
            (pods(&m5, &max_pods), kube_memory_mib(&m5, &max_pods)),
            (110, 574),
            "AL2023 reserves memory for the ENI-limited count whatever maxPods says"
        );
        let reserved = Context {
            reserved_enis: 1,
            ..al2023.clone()
        };
        assert_eq!(
            (pods(&m5, &reserved), kube_memory_mib(&m5, &reserved)),
            (20, 574)
        );
        let per_core = context(AMIFamily::AL2023, serde_json::json!({"podsPerCore": 4}));
        assert_eq!(pods(&m5, &per_core), 8);

        let bottlerocket = context(
            AMIFamily::Bottlerocket,
            serde_json::json!({"maxPods": 110, "podsPerCore": 4}),
        );
        assert_eq!(
            (
                pods(&m5, &bottlerocket),
                kube_memory_mib(&m5, &bottlerocket)
            ),
            (110, 1465),
            "Bottlerocket ignores podsPerCore and reserves for its own count"
        );

        let windows = context(AMIFamily::Windows2022, serde_json::json!(null));
        assert_eq!(
            (pods(&m5, &windows), kube_memory_mib(&m5, &windows)),
            (110, 1465)
        );
        let windows_capacity = capacity(&m5, &windows);
        assert_eq!(windows_capacity[l::RESOURCE_PRIVATE_IPV4_ADDRESS], 9);
        assert!(!super::capacity(&m5, &al2023).contains_key(l::RESOURCE_PRIVATE_IPV4_ADDRESS));
    }

    #[test]
    fn raid0_gives_the_instance_store_and_soft_eviction_takes_nothing() {
        let mut m5d = named("m5d.large");
        m5d.instance_store_gb = Some(75);
        let mut ctx = context(
            AMIFamily::AL2023,
            serde_json::json!({"evictionSoft": {"memory.available": "50%"},
                               "evictionSoftGracePeriod": {"memory.available": "1m"},
                               "evictionHard": {"nodefs.available": "100%"}}),
        );
        ctx.raid0 = true;
        assert_eq!(capacity(&m5d, &ctx)["ephemeral-storage"], 75_000_000_000);
        let eviction = overhead(&m5d, &ctx)
            .eviction_threshold
            .expect("eviction")
            .quantities;
        assert_eq!(
            eviction["memory"],
            100 << 20,
            "evictionSoft leaves allocatable alone"
        );
        assert!(
            !eviction.contains_key("ephemeral-storage"),
            "100% turns the threshold off: {eviction:?}"
        );
    }

    struct Priced;

    impl OfferingSource for Priced {
        fn on_demand_price(&self, _: &str) -> Option<f64> {
            Some(0.1)
        }
        fn spot_price(&self, _: &str, _: &str) -> Option<f64> {
            Some(0.05)
        }
        fn is_unavailable(&self, _: &str, _: &str, _: &str) -> bool {
            false
        }
    }

    #[test]
    fn al2023_does_not_launch_the_first_graviton_generation() {
        let mut a1 = named("a1.large");
        a1.arch = l::ARCH_ARM64.into();
        let zones = BTreeSet::from(["zone-a".to_string()]);
        let available = |family| {
            let ctx = context(family, serde_json::json!(null));
            offerings(&a1, &ctx, &zones, &Priced)
                .iter()
                .any(|o| o.available)
        };
        assert!(!available(AMIFamily::AL2023));
        assert!(available(AMIFamily::AL2));
        assert!(available(AMIFamily::Bottlerocket));
    }

    /// Upstream's compatibility checks (`instancetype/compatibility`): a type
    /// the node class's launch settings cannot run on offers nothing.
    #[test]
    fn node_class_launch_settings_limit_the_launchable_types() {
        let base = context(AMIFamily::AL2023, serde_json::json!(null));
        let mut m5 = named("m5.large");
        m5.card_enis = BTreeMap::from([(0, 3)]);
        m5.efa_interfaces = 0;
        let mut p5 = named("p5.48xlarge");
        p5.card_enis = (0..32).map(|card| (card, 2)).collect();
        p5.efa_interfaces = 32;
        p5.nested_virtualization = true;
        let mut xen = named("m4.large");
        xen.hypervisor = "xen".into();
        assert!(runs_on(&m5, &base) && runs_on(&xen, &base));

        let tracked = Context {
            connection_tracking: true,
            ..base.clone()
        };
        assert!(runs_on(&m5, &tracked), "nitro");
        assert!(!runs_on(&xen, &tracked), "connection tracking needs Nitro");

        let nested = Context {
            nested_virtualization: true,
            ..base.clone()
        };
        assert!(runs_on(&p5, &nested));
        assert!(!runs_on(&m5, &nested), "the processor must support it");

        // The v1.15 task "Using Nitro Enclaves": enabled enclaves keep only
        // the types EC2 lists as supporting them.
        let enclaves = Context {
            enclaves: true,
            ..base.clone()
        };
        let mut m5_xlarge = named("m5.xlarge");
        m5_xlarge.nitro_enclaves = true;
        assert!(runs_on(&m5_xlarge, &enclaves));
        assert!(!runs_on(&m5, &enclaves), "NitroEnclavesSupport unsupported");

        let nic = |card, device, interface_type| NetworkInterface {
            network_card_index: card,
            device_index: device,
            interface_type,
        };
        let efa = Context {
            network_interfaces: vec![
                nic(0, 0, InterfaceType::Interface),
                nic(1, 0, InterfaceType::EfaOnly),
            ],
            ..base.clone()
        };
        assert!(runs_on(&p5, &efa));
        assert!(!runs_on(&m5, &efa), "no second network card, no EFA");
        let third_device = Context {
            network_interfaces: vec![
                nic(0, 0, InterfaceType::Interface),
                nic(0, 2, InterfaceType::Interface),
            ],
            ..base.clone()
        };
        assert!(!runs_on(&p5, &third_device), "two interfaces per card");
        assert!(runs_on(&m5, &third_device));
        let mut no_ena = m5.clone();
        no_ena.ena = false;
        assert!(!runs_on(&no_ena, &third_device));

        let zones = BTreeSet::from(["zone-a".to_string()]);
        assert!(
            offerings(&xen, &tracked, &zones, &Priced)
                .iter()
                .all(|o| !o.available),
            "listed, with nothing to launch"
        );
    }

    #[test]
    fn graviton_keeps_64_mib_before_the_vm_overhead() {
        let mut info = named("a1.medium");
        info.arch = l::ARCH_ARM64.into();
        info.memory_mib = 2048;
        assert_eq!(memory_capacity_bytes(&info, 0.075), 1835 << 20);
    }
}
