//! Instance types: what DescribeInstanceTypes says about a type, turned into
//! the scheduler's `InstanceType` (well-known labels as requirements,
//! capacity, overhead, offerings per zone and capacity type with prices).

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::ec2nodeclass::{AMIFamily, KubeletConfiguration};
use karpenter_api::labels as l;
use karpenter_proto::scheduler::v1 as sched;

use crate::quantity;

/// A GPU or accelerator of an instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub name: String,
    pub manufacturer: String,
    pub count: i64,
    pub memory_mib: Option<i64>,
}

/// What the provider keeps of one DescribeInstanceTypes entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeInfo {
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    pub vcpus: i64,
    pub memory_mib: i64,
    pub hypervisor: Option<String>,
    pub cpu_manufacturer: Option<String>,
    pub clock_mhz: Option<i64>,
    pub max_enis: i64,
    pub ipv4_per_eni: i64,
    pub network_mbps: Option<i64>,
    pub ebs_mbps: Option<i64>,
    pub gpu: Option<Device>,
    pub accelerator: Option<Device>,
    pub local_nvme_gib: Option<i64>,
    pub encryption_in_transit: bool,
    pub efa_interfaces: i64,
    pub spot: bool,
    pub on_demand: bool,
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
                "x86_64" => Some("amd64"),
                "arm64" => Some("arm64"),
                _ => None,
            })?
            .to_string();
        let vcpus = i64::from(info.v_cpu_info()?.default_v_cpus()?);
        let memory_mib = info.memory_info()?.size_in_mib()?;
        let network = info.network_info();
        let usage: Vec<&str> = info
            .supported_usage_classes()
            .iter()
            .map(|u| u.as_str())
            .collect();
        let gpu = info.gpu_info().and_then(|g| {
            let first = g.gpus().first()?;
            Some(Device {
                name: first.name()?.to_lowercase(),
                manufacturer: first.manufacturer()?.to_lowercase(),
                count: g
                    .gpus()
                    .iter()
                    .map(|d| i64::from(d.count().unwrap_or(0)))
                    .sum(),
                memory_mib: first
                    .memory_info()
                    .and_then(|m| m.size_in_mib())
                    .map(i64::from),
            })
        });
        let accelerator = info
            .inference_accelerator_info()
            .and_then(|a| {
                let first = a.accelerators().first()?;
                Some(Device {
                    name: first.name()?.to_lowercase(),
                    manufacturer: first.manufacturer()?.to_lowercase(),
                    count: a
                        .accelerators()
                        .iter()
                        .map(|d| i64::from(d.count().unwrap_or(0)))
                        .sum(),
                    memory_mib: None,
                })
            })
            .or_else(|| {
                let neuron = info.neuron_info()?;
                let first = neuron.neuron_devices().first()?;
                Some(Device {
                    name: first.name()?.to_lowercase(),
                    manufacturer: "aws".into(),
                    count: neuron
                        .neuron_devices()
                        .iter()
                        .map(|d| i64::from(d.count().unwrap_or(0)))
                        .sum(),
                    memory_mib: None,
                })
            });
        let local_nvme_gib = info.instance_storage_info().and_then(|s| {
            let nvme = s.nvme_support().map(|n| n.as_str()) != Some("unsupported");
            s.total_size_in_gb().filter(|gb| nvme && *gb > 0)
        });
        Some(Self {
            name,
            arch,
            vcpus,
            memory_mib,
            hypervisor: info.hypervisor().map(|h| h.as_str().to_string()),
            cpu_manufacturer: processor.manufacturer().map(manufacturer_label),
            clock_mhz: processor
                .sustained_clock_speed_in_ghz()
                .map(|ghz| (ghz * 1000.0).round() as i64),
            max_enis: network
                .and_then(|n| n.maximum_network_interfaces())
                .map(i64::from)
                .unwrap_or(1),
            ipv4_per_eni: network
                .and_then(|n| n.ipv4_addresses_per_interface())
                .map(i64::from)
                .unwrap_or(1),
            network_mbps: network.and_then(|n| {
                let gbps: f64 = n
                    .network_cards()
                    .iter()
                    .filter_map(|c| c.baseline_bandwidth_in_gbps())
                    .sum();
                (gbps > 0.0).then(|| (gbps * 1000.0).round() as i64)
            }),
            ebs_mbps: info
                .ebs_info()
                .and_then(|e| e.ebs_optimized_info())
                .and_then(|o| o.maximum_bandwidth_in_mbps())
                .map(i64::from),
            gpu,
            accelerator,
            local_nvme_gib,
            encryption_in_transit: network
                .and_then(|n| n.encryption_in_transit_supported())
                .unwrap_or(false),
            efa_interfaces: network
                .filter(|n| n.efa_supported().unwrap_or(false))
                .and_then(|n| n.efa_info())
                .and_then(|e| e.maximum_efa_interfaces())
                .map(i64::from)
                .unwrap_or(0),
            spot: usage.contains(&"spot"),
            on_demand: usage.contains(&"on-demand"),
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

    /// `m` of `m5`, `inf` of `inf2`.
    pub fn category(&self) -> &str {
        let family = self.family();
        let end = family
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(family.len());
        &family[..end]
    }

    /// `5` of `m5d`.
    pub fn generation(&self) -> Option<&str> {
        let family = self.family();
        let start = family.find(|c: char| c.is_ascii_digit())?;
        let rest = &family[start..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        Some(&rest[..end])
    }

    /// Pods the VPC CNI can address: `ENIs x (IPv4 per ENI - 1) + 2`.
    pub fn eni_limited_pods(&self, reserved_enis: i32) -> i64 {
        let enis = (self.max_enis - i64::from(reserved_enis)).max(0);
        (enis * (self.ipv4_per_eni - 1) + 2).max(0)
    }
}

fn manufacturer_label(raw: &str) -> String {
    match raw.to_lowercase().as_str() {
        "intel" | "intel corporation" => "intel".into(),
        "amd" | "advanced micro devices" => "amd".into(),
        "aws" | "amazon web services" => "aws".into(),
        other => other.replace(' ', "-"),
    }
}

/// Where the catalog is being built for: the node class's zones, kubelet
/// settings, family and root volume.
#[derive(Debug, Clone)]
pub struct Context {
    pub region: String,
    /// `(zone, zone id)` of the node class's subnets; empty means every zone.
    pub zones: Vec<(String, Option<String>)>,
    pub kubelet: Option<KubeletConfiguration>,
    pub family: AMIFamily,
    /// Bytes of the volume the kubelet's ephemeral storage lives on.
    pub ephemeral_storage_bytes: i64,
    pub vm_memory_overhead_percent: f64,
    pub reserved_enis: i32,
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

fn req(key: &str, op: sched::Operator, values: Vec<String>) -> sched::Requirement {
    sched::Requirement {
        key: key.to_string(),
        operator: op as i32,
        values,
        min_values: None,
    }
}

fn req_in(key: &str, values: impl IntoIterator<Item = impl Into<String>>) -> sched::Requirement {
    req(
        key,
        sched::Operator::In,
        values.into_iter().map(Into::into).collect(),
    )
}

fn req_absent(key: &str) -> sched::Requirement {
    req(key, sched::Operator::DoesNotExist, Vec::new())
}

/// Memory the kubelet sees: MiB less the VM overhead, in bytes.
pub fn memory_capacity_bytes(info: &TypeInfo, overhead_percent: f64) -> i64 {
    let overhead_mib = ((info.memory_mib as f64) * overhead_percent).ceil() as i64;
    (info.memory_mib - overhead_mib).max(0) * 1024 * 1024
}

/// Pods per node: `maxPods` when set, else ENI-limited; capped by `podsPerCore`.
pub fn pods(info: &TypeInfo, ctx: &Context) -> i64 {
    let kubelet = ctx.kubelet.as_ref();
    let mut pods = match kubelet.and_then(|k| k.max_pods) {
        Some(max) => i64::from(max),
        // Every family (AL2, AL2023, Bottlerocket, Windows) follows the ENI limit by default.
        None => info.eni_limited_pods(ctx.reserved_enis),
    };
    if let Some(per_core) = kubelet.and_then(|k| k.pods_per_core).filter(|p| *p > 0) {
        pods = pods.min(i64::from(per_core) * info.vcpus);
    }
    pods
}

/// Karpenter's kube-reserved cpu: 6% of the first core, 1% of the second,
/// 0.5% of the next two, 0.25% of the rest (millicores).
pub fn kube_reserved_cpu_millis(vcpus: i64) -> i64 {
    let millis = vcpus * 1000;
    let ranges: [(i64, i64, f64); 4] = [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, i64::MAX, 0.0025),
    ];
    let mut reserved = 0.0;
    for (start, end, share) in ranges {
        if millis > start {
            let span = millis.min(end) - start;
            reserved += span as f64 * share;
        }
    }
    reserved.round() as i64
}

/// Karpenter's kube-reserved memory: 11 MiB per pod + 255 MiB (bytes).
pub fn kube_reserved_memory_bytes(pods: i64) -> i64 {
    (11 * pods + 255) * 1024 * 1024
}

fn resource_list(map: BTreeMap<String, i64>) -> sched::ResourceList {
    sched::ResourceList {
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

/// Capacity of a type as the kubelet will report it.
pub fn capacity(info: &TypeInfo, ctx: &Context) -> BTreeMap<String, i64> {
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_string(), info.vcpus * 1000);
    capacity.insert(
        "memory".to_string(),
        memory_capacity_bytes(info, ctx.vm_memory_overhead_percent),
    );
    capacity.insert("ephemeral-storage".to_string(), ctx.ephemeral_storage_bytes);
    capacity.insert("pods".to_string(), pods(info, ctx));
    if let Some(gpu) = &info.gpu {
        let resource = match gpu.manufacturer.as_str() {
            "nvidia" => Some(l::RESOURCE_NVIDIA_GPU),
            "amd" => Some(l::RESOURCE_AMD_GPU),
            "habana" => Some(l::RESOURCE_HABANA_GAUDI),
            _ => None,
        };
        if let Some(resource) = resource {
            capacity.insert(resource.to_string(), gpu.count);
        }
    }
    if let Some(acc) = &info.accelerator
        && (acc.name.contains("inferentia")
            || acc.name.contains("trainium")
            || acc.manufacturer == "aws")
    {
        capacity.insert(l::RESOURCE_AWS_NEURON.to_string(), acc.count);
    }
    if info.efa_interfaces > 0 {
        capacity.insert(l::RESOURCE_EFA.to_string(), info.efa_interfaces);
    }
    capacity
}

/// kube-reserved, system-reserved and eviction thresholds.
pub fn overhead(info: &TypeInfo, ctx: &Context) -> sched::InstanceTypeOverhead {
    let pods = pods(info, ctx);
    let mut kube = BTreeMap::new();
    kube.insert("cpu".to_string(), kube_reserved_cpu_millis(info.vcpus));
    kube.insert("memory".to_string(), kube_reserved_memory_bytes(pods));
    kube.insert("ephemeral-storage".to_string(), 1 << 30);
    let mut system = BTreeMap::new();
    let mut eviction = BTreeMap::new();
    eviction.insert("memory".to_string(), 100 * 1024 * 1024);
    eviction.insert(
        "ephemeral-storage".to_string(),
        ((ctx.ephemeral_storage_bytes as f64) * 0.10).ceil() as i64,
    );
    if let Some(kubelet) = &ctx.kubelet {
        kube.extend(reserved_from(&kubelet.kube_reserved));
        system.extend(reserved_from(&kubelet.system_reserved));
        let memory_total = memory_capacity_bytes(info, ctx.vm_memory_overhead_percent);
        let mut apply = |signals: &BTreeMap<String, String>, keep_max: bool| {
            for (signal, value) in signals {
                let (resource, total) = match signal.as_str() {
                    "memory.available" => ("memory", memory_total),
                    "nodefs.available" => ("ephemeral-storage", ctx.ephemeral_storage_bytes),
                    _ => continue,
                };
                if let Some(v) = quantity::parse_threshold(value, total) {
                    let entry = eviction.entry(resource.to_string()).or_insert(0);
                    *entry = if keep_max { (*entry).max(v) } else { v };
                }
            }
        };
        apply(&kubelet.eviction_hard, false);
        apply(&kubelet.eviction_soft, true);
    }
    sched::InstanceTypeOverhead {
        kube_reserved: Some(resource_list(kube)),
        system_reserved: Some(resource_list(system)),
        eviction_threshold: Some(resource_list(eviction)),
    }
}

/// The labels (as single-value requirements, or `DoesNotExist`) of a type.
pub fn type_requirements(info: &TypeInfo, ctx: &Context) -> Vec<sched::Requirement> {
    let os = match ctx.family {
        AMIFamily::Windows2019 | AMIFamily::Windows2022 => "windows",
        _ => "linux",
    };
    let mut out = vec![
        req_in(l::INSTANCE_TYPE, [info.name.clone()]),
        req_in(l::ARCH, [info.arch.clone()]),
        req_in(l::OS, [os]),
        req_in(l::TOPOLOGY_REGION, [ctx.region.clone()]),
        req_in(l::AWS_INSTANCE_CATEGORY, [info.category()]),
        req_in(l::AWS_INSTANCE_FAMILY, [info.family()]),
        req_in(l::AWS_INSTANCE_SIZE, [info.size()]),
        req_in(l::AWS_INSTANCE_CPU, [info.vcpus.to_string()]),
        req_in(l::AWS_INSTANCE_MEMORY, [info.memory_mib.to_string()]),
        req_in(
            l::AWS_INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            [info.encryption_in_transit.to_string()],
        ),
    ];
    match ctx.family {
        AMIFamily::Windows2019 => out.push(req_in(l::WINDOWS_BUILD, ["10.0.17763"])),
        AMIFamily::Windows2022 => out.push(req_in(l::WINDOWS_BUILD, ["10.0.20348"])),
        _ => {}
    }
    let mut optional = |key: &str, value: Option<String>| {
        out.push(match value {
            Some(v) if !v.is_empty() => req_in(key, [v]),
            _ => req_absent(key),
        });
    };
    optional(
        l::AWS_INSTANCE_GENERATION,
        info.generation().map(str::to_string),
    );
    optional(l::AWS_INSTANCE_HYPERVISOR, info.hypervisor.clone());
    optional(
        l::AWS_INSTANCE_CPU_MANUFACTURER,
        info.cpu_manufacturer.clone(),
    );
    optional(
        l::AWS_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
        info.clock_mhz.map(|m| m.to_string()),
    );
    optional(
        l::AWS_INSTANCE_NETWORK_BANDWIDTH,
        info.network_mbps.map(|m| m.to_string()),
    );
    optional(
        l::AWS_INSTANCE_EBS_BANDWIDTH,
        info.ebs_mbps.map(|m| m.to_string()),
    );
    optional(
        l::AWS_INSTANCE_LOCAL_NVME,
        info.local_nvme_gib.map(|g| g.to_string()),
    );
    let gpu = info.gpu.as_ref();
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
    let acc = info.accelerator.as_ref();
    optional(
        l::AWS_INSTANCE_ACCELERATOR_NAME,
        acc.map(|a| a.name.clone()),
    );
    optional(
        l::AWS_INSTANCE_ACCELERATOR_MANUFACTURER,
        acc.map(|a| a.manufacturer.clone()),
    );
    optional(
        l::AWS_INSTANCE_ACCELERATOR_COUNT,
        acc.map(|a| a.count.to_string()),
    );
    optional(
        l::AWS_INSTANCE_CAPABILITY_FLEX,
        info.family().contains("flex").then(|| "true".to_string()),
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
) -> Vec<sched::Offering> {
    let zones: Vec<(String, Option<String>)> = if ctx.zones.is_empty() {
        type_zones.iter().map(|z| (z.clone(), None)).collect()
    } else {
        ctx.zones
            .iter()
            .filter(|(z, _)| type_zones.contains(z))
            .cloned()
            .collect()
    };
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
            let available =
                price.is_some() && !source.is_unavailable(&info.name, &zone, capacity_type);
            let mut requirements = vec![
                req_in(l::CAPACITY_TYPE, [capacity_type]),
                req_in(l::TOPOLOGY_ZONE, [zone.clone()]),
            ];
            if let Some(id) = &zone_id {
                requirements.push(req_in(l::AWS_TOPOLOGY_ZONE_ID, [id.clone()]));
            }
            out.push(sched::Offering {
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
) -> Option<sched::InstanceType> {
    let offerings = offerings(info, ctx, type_zones, source);
    if offerings.is_empty() {
        return None;
    }
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
    Some(sched::InstanceType {
        name: info.name.clone(),
        requirements,
        offerings,
        capacity: Some(resource_list(capacity(info, ctx))),
        overhead: Some(overhead(info, ctx)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reserved_cpu_follows_karpenter() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
    }

    #[test]
    fn memory_and_pods() {
        assert_eq!(kube_reserved_memory_bytes(29), (11 * 29 + 255) << 20);
    }
}
