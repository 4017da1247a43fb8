//! Block devices: what the launch template maps (the node class's mappings,
//! else the family's defaults; none for Custom, whose AMI's own apply) and
//! which volume the kubelet's ephemeral storage lives on.

use aws_sdk_ec2::types::{
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    VolumeType as Ec2VolumeType,
};
use karpenter_api::ec2nodeclass::{AMIFamily, BlockDeviceMapping};
use karpenter_core::quantity::{self, Unit};

use crate::nodeclass::NodeClass;

/// A block device as the launch template gets it; unset fields are EC2's
/// (or the AMI's) to decide.
#[derive(Debug, Clone, PartialEq, Hash)]
pub struct Volume {
    pub device: String,
    pub size_gib: Option<i64>,
    pub volume_type: Option<String>,
    pub encrypted: Option<bool>,
    pub delete_on_termination: Option<bool>,
    pub iops: Option<i64>,
    pub throughput: Option<i64>,
    pub kms_key_id: Option<String>,
    pub snapshot_id: Option<String>,
}

/// Karpenter's default EBS volume: 20 GiB (or as given), gp3, encrypted.
fn default_volume(device: &str, gib: i64) -> Volume {
    Volume {
        device: device.into(),
        size_gib: Some(gib),
        volume_type: Some("gp3".into()),
        encrypted: Some(true),
        delete_on_termination: None,
        iops: None,
        throughput: None,
        kms_key_id: None,
        snapshot_id: None,
    }
}

/// The device the family's kubelet keeps its ephemeral storage on.
pub fn ephemeral_device(family: AMIFamily) -> &'static str {
    match family {
        AMIFamily::Bottlerocket => "/dev/xvdb",
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => "/dev/sda1",
        _ => "/dev/xvda",
    }
}

/// The family's mappings when the node class has none: Bottlerocket's OS
/// and data volumes, Windows' 50 GiB root, 20 GiB otherwise; nothing for
/// Custom, so that the AMI's own mappings apply.
fn default_volumes(family: AMIFamily) -> Vec<Volume> {
    match family {
        AMIFamily::Bottlerocket => vec![
            default_volume("/dev/xvda", 4),
            default_volume("/dev/xvdb", 20),
        ],
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => {
            vec![default_volume("/dev/sda1", 50)]
        }
        AMIFamily::Custom => Vec::new(),
        AMIFamily::AL2 | AMIFamily::AL2023 => vec![default_volume("/dev/xvda", 20)],
    }
}

fn size_bytes(mapping: &BlockDeviceMapping) -> Option<i64> {
    mapping
        .ebs
        .as_ref()
        .and_then(|e| e.volume_size.as_ref())
        .and_then(|q| quantity::parse(&q.0, Unit::Base).ok())
}

/// The launch template's block device mappings.
pub fn volumes(nc: &NodeClass) -> Vec<Volume> {
    if nc.spec.block_device_mappings.is_empty() {
        return default_volumes(nc.family());
    }
    nc.spec
        .block_device_mappings
        .iter()
        .filter_map(|m| {
            let device = m.device_name.clone()?;
            let ebs = m.ebs.clone().unwrap_or_default();
            Some(Volume {
                // EC2 takes whole GiB: a size in G is rounded up.
                size_gib: size_bytes(m)
                    .map(|bytes| bytes / (1 << 30) + i64::from(bytes % (1 << 30) != 0)),
                volume_type: ebs
                    .volume_type
                    .and_then(|t| serde_json::to_value(t).ok())
                    .and_then(|v| v.as_str().map(str::to_string)),
                encrypted: ebs.encrypted,
                delete_on_termination: ebs.delete_on_termination,
                iops: ebs.iops,
                throughput: ebs.throughput,
                kms_key_id: ebs.kms_key_id,
                snapshot_id: ebs.snapshot_id,
                device,
            })
        })
        .collect()
}

/// The mappings as CreateLaunchTemplate takes them (none at all rather
/// than an empty list, which EC2 refuses).
pub fn mappings(volumes: &[Volume]) -> Option<Vec<LaunchTemplateBlockDeviceMappingRequest>> {
    if volumes.is_empty() {
        return None;
    }
    Some(
        volumes
            .iter()
            .map(|v| {
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .device_name(&v.device)
                    .ebs(
                        LaunchTemplateEbsBlockDeviceRequest::builder()
                            .set_volume_size(
                                v.size_gib.map(|g| i32::try_from(g).unwrap_or(i32::MAX)),
                            )
                            .set_volume_type(v.volume_type.as_deref().map(Ec2VolumeType::from))
                            .set_encrypted(v.encrypted)
                            .set_delete_on_termination(v.delete_on_termination)
                            .set_iops(v.iops.map(|i| i32::try_from(i).unwrap_or(i32::MAX)))
                            .set_throughput(
                                v.throughput.map(|t| i32::try_from(t).unwrap_or(i32::MAX)),
                            )
                            .set_kms_key_id(v.kms_key_id.clone())
                            .set_snapshot_id(v.snapshot_id.clone())
                            .build(),
                    )
                    .build()
            })
            .collect(),
    )
}

/// Bytes of ephemeral storage, as Karpenter finds the kubelet's volume: the
/// mapping marked `rootVolume`; for Custom the last mapping; otherwise the
/// family's ephemeral device (sizes taken as written, `100G` is 10^11
/// bytes); without mappings the family's default (20 GiB for Custom).
pub fn ephemeral_storage_bytes(nc: &NodeClass) -> i64 {
    let family = nc.family();
    let mappings = &nc.spec.block_device_mappings;
    let chosen = if mappings.is_empty() {
        None
    } else if let Some(root) = mappings.iter().find(|m| m.root_volume) {
        size_bytes(root)
    } else if family == AMIFamily::Custom {
        mappings.last().and_then(size_bytes)
    } else {
        let device = ephemeral_device(family);
        mappings
            .iter()
            .find(|m| m.device_name.as_deref() == Some(device))
            .and_then(size_bytes)
    };
    chosen.unwrap_or_else(|| {
        let device = ephemeral_device(family);
        default_volumes(family)
            .iter()
            .find(|v| v.device == device)
            .and_then(|v| v.size_gib)
            .unwrap_or(20)
            .saturating_mul(1 << 30)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_class(family: &str, mappings: serde_json::Value) -> NodeClass {
        NodeClass::from_wire(
            "node_class",
            Some(&karpenter_proto::provider::v1::NodeClass {
                name: "default".into(),
                spec_json: serde_json::json!({
                    "amiFamily": family,
                    "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "role": "KarpenterNodeRole",
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                    "blockDeviceMappings": mappings,
                })
                .to_string(),
                ..Default::default()
            }),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn bdm(device: &str, size: &str, root: bool) -> serde_json::Value {
        serde_json::json!({"deviceName": device, "rootVolume": root, "ebs": {"volumeSize": size}})
    }

    #[test]
    fn ephemeral_storage_is_the_kubelets_volume_as_written() {
        use serde_json::json;
        let cases: [(&str, serde_json::Value, i64, &str); 7] = [
            (
                "AL2023",
                json!([bdm("/dev/xvda", "100G", false)]),
                100_000_000_000,
                "decimal sizes are not rounded to GiB",
            ),
            (
                "AL2023",
                json!([
                    bdm("/dev/xvda", "20Gi", false),
                    bdm("/dev/xvdc", "80Gi", true)
                ]),
                80 << 30,
                "the mapping marked rootVolume wins",
            ),
            (
                "Custom",
                json!([
                    bdm("/dev/sda1", "30Gi", false),
                    bdm("/dev/sdb", "60Gi", false)
                ]),
                60 << 30,
                "Custom: the last mapping",
            ),
            ("Custom", json!([]), 20 << 30, "Custom without mappings"),
            ("Bottlerocket", json!([]), 20 << 30, "the data volume"),
            ("Windows2022", json!([]), 50 << 30, "Windows' root volume"),
            (
                "AL2023",
                json!([bdm("/dev/xvda", "9223372036854775806", true)]),
                9_223_372_036_854_775_806,
                "a huge size does not overflow",
            ),
        ];
        for (family, mappings, want, why) in cases {
            assert_eq!(
                ephemeral_storage_bytes(&node_class(family, mappings)),
                want,
                "{family}: {why}"
            );
        }
    }

    #[test]
    fn custom_amis_keep_their_own_mappings_and_unset_fields_stay_unset() {
        assert!(volumes(&node_class("Custom", serde_json::json!([]))).is_empty());
        assert!(mappings(&[]).is_none());
        let user = volumes(&node_class(
            "AL2023",
            serde_json::json!([bdm("/dev/xvda", "100G", true)]),
        ));
        assert_eq!(user.len(), 1);
        assert_eq!(user[0].size_gib, Some(94), "100G is 93.1Gi, rounded up");
        assert_eq!(
            (user[0].encrypted, user[0].volume_type.as_deref()),
            (None, None)
        );
        let defaults = volumes(&node_class("AL2023", serde_json::json!([])));
        assert_eq!(defaults, vec![default_volume("/dev/xvda", 20)]);
    }
}
