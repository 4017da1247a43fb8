//! A generated instance-type catalog shaped like Karpenter's kwok provider
//! (kubernetes-sigs/karpenter `kwok/tools/gen_instance_types.go`), for when
//! no real catalog is given.
//!
//! Types are every combination of
//! * CPU: 1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256 vCPU,
//! * memory: 2, 4 or 8 GiB per vCPU (families `c`, `s`, `m`),
//! * architecture: amd64, arm64 (Linux only),
//!
//! named like kwok's (`c-4x-amd64-linux`), with `pods` = 16 per vCPU (at
//! most 1024), 20Gi ephemeral storage, kube-reserved 100m CPU and 10Mi
//! memory, and the labels kwok sets (`karpenter.kwok.sh/instance-size`,
//! `-family`, `-cpu`, `-memory`). Each type is offered in [`ZONES`] as
//! on-demand at kwok's price (0.025 per vCPU + 0.001 per GB of memory, per
//! hour) and as spot at 70% of it.
//!
//! Unlike kwok, the zones are `us-west-2a..d` rather than `test-zone-a..d`,
//! so plans read like a real region.

use std::collections::BTreeMap;

use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

/// The zones every type is offered in.
pub const ZONES: [&str; 4] = ["us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"];
/// vCPU counts.
pub const CPUS: [i64; 12] = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256];
/// GiB of memory per vCPU, with the family letter kwok gives it.
pub const MEMORY_FACTORS: [(i64, &str); 3] = [(2, "c"), (4, "s"), (8, "m")];
pub const ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];
/// The label group of kwok's instance labels.
pub const LABEL_GROUP: &str = "karpenter.kwok.sh";
/// Name of the catalog in snapshots.
pub const CATALOG_NAME: &str = "builtin-kwok";

const GIB: i64 = 1 << 30;

/// kwok's price formula: 0.025 per vCPU plus 0.001 per (decimal) GB.
pub fn on_demand_price(cpu: i64, memory_bytes: i64) -> f64 {
    0.025 * cpu as f64 + 0.001 * memory_bytes as f64 / 1e9
}

fn label(key: &str, value: impl Into<String>) -> types::Requirement {
    types::Requirement {
        key: key.to_string(),
        operator: types::Operator::In as i32,
        values: vec![value.into()],
        min_values: None,
    }
}

fn resources(pairs: &[(&str, i64)]) -> types::ResourceList {
    types::ResourceList {
        quantities: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// One generated type.
pub fn instance_type(
    cpu: i64,
    memory_factor: i64,
    family: &str,
    arch: &str,
) -> types::InstanceType {
    let name = format!("{family}-{cpu}x-{arch}-linux");
    let memory_gib = cpu * memory_factor;
    let memory = memory_gib * GIB;
    let pods = (cpu * 16).clamp(0, 1024);
    let price = on_demand_price(cpu, memory);
    let mut offerings = Vec::new();
    for zone in ZONES {
        for (capacity_type, price) in [("spot", price * 0.7), ("on-demand", price)] {
            offerings.push(types::Offering {
                zone: zone.to_string(),
                capacity_type: capacity_type.to_string(),
                price,
                available: true,
                requirements: Vec::new(),
            });
        }
    }
    types::InstanceType {
        requirements: vec![
            label(labels::INSTANCE_TYPE, name.clone()),
            label(labels::ARCH, arch),
            label(labels::OS, "linux"),
            label(&format!("{LABEL_GROUP}/instance-size"), format!("{cpu}x")),
            label(&format!("{LABEL_GROUP}/instance-family"), family),
            label(&format!("{LABEL_GROUP}/instance-cpu"), cpu.to_string()),
            label(
                &format!("{LABEL_GROUP}/instance-memory"),
                format!("{memory_gib}Gi"),
            ),
            types::Requirement {
                key: labels::TOPOLOGY_ZONE.to_string(),
                operator: types::Operator::In as i32,
                values: ZONES.iter().map(|z| z.to_string()).collect(),
                min_values: None,
            },
            types::Requirement {
                key: labels::CAPACITY_TYPE.to_string(),
                operator: types::Operator::In as i32,
                values: vec!["on-demand".to_string(), "spot".to_string()],
                min_values: None,
            },
        ],
        name,
        offerings,
        capacity: Some(resources(&[
            ("cpu", cpu * 1000),
            ("memory", memory),
            ("pods", pods),
            ("ephemeral-storage", 20 * GIB),
        ])),
        overhead: Some(types::InstanceTypeOverhead {
            kube_reserved: Some(resources(&[("cpu", 100), ("memory", 10 << 20)])),
            system_reserved: None,
            eviction_threshold: None,
        }),
        price_overlaid: false,
        capacity_overlaid: false,
        volume_attachment_limits: Default::default(),
    }
}

/// Every generated type, in a fixed order.
pub fn instance_types() -> Vec<types::InstanceType> {
    let mut out = Vec::new();
    for cpu in CPUS {
        for (factor, family) in MEMORY_FACTORS {
            for arch in ARCHITECTURES {
                out.push(instance_type(cpu, factor, family, arch));
            }
        }
    }
    out
}

/// The generated types as a snapshot catalog named [`CATALOG_NAME`].
pub fn catalog() -> sched::InstanceTypeCatalog {
    sched::InstanceTypeCatalog {
        name: CATALOG_NAME.to_string(),
        instance_types: instance_types(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_matches_kwok() {
        let types = instance_types();
        assert_eq!(types.len(), 12 * 3 * 2);
        let c4 = types.iter().find(|t| t.name == "c-4x-amd64-linux").unwrap();
        let cap = &c4.capacity.as_ref().unwrap().quantities;
        assert_eq!(cap["cpu"], 4000);
        assert_eq!(cap["memory"], 8 * GIB);
        assert_eq!(cap["pods"], 64);
        assert_eq!(c4.offerings.len(), 8);
        let od = c4
            .offerings
            .iter()
            .find(|o| o.capacity_type == "on-demand")
            .unwrap();
        let spot = c4
            .offerings
            .iter()
            .find(|o| o.capacity_type == "spot")
            .unwrap();
        assert!((od.price - (0.1 + 0.001 * 8.0 * GIB as f64 / 1e9)).abs() < 1e-12);
        assert!(spot.price < od.price);
        let big = types
            .iter()
            .find(|t| t.name == "m-256x-arm64-linux")
            .unwrap();
        assert_eq!(big.capacity.as_ref().unwrap().quantities["pods"], 1024);
    }
}
