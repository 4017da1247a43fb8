//! AL2023: a MIME archive read by cloud-init (shell scripts) and nodeadm
//! (`application/node.eks.aws` NodeConfigs, merged in order, later values
//! winning). Karpenter's NodeConfig comes last: the cluster, the kubelet
//! settings capacity was planned with, the taints to register with, the
//! labels, and RAID0 for the instance store.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::mime::{self, Part};
use super::{Bootstrap, UserDataError, node_labels};

pub(super) const NODE_CONFIG: &str = "application/node.eks.aws";
pub(super) const SHELL: &str = "text/x-shellscript; charset=\"us-ascii\"";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeConfig {
    api_version: &'static str,
    kind: &'static str,
    spec: Spec,
}

#[derive(Serialize)]
struct Spec {
    cluster: ClusterSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<InstanceSpec>,
    kubelet: KubeletSpec,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterSpec {
    name: String,
    api_server_endpoint: String,
    certificate_authority: String,
    cidr: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceSpec {
    local_storage: LocalStorage,
}

#[derive(Serialize)]
struct LocalStorage {
    strategy: &'static str,
}

#[derive(Serialize)]
struct KubeletSpec {
    config: Map<String, Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    flags: Vec<String>,
}

/// The user's data as parts: a MIME archive's own parts, else one part
/// typed by what it is (a script, or a NodeConfig document). A part
/// labelled NodeConfig must read as a YAML mapping, or nodeadm would stop.
pub(super) fn user_parts(user: &str) -> Result<Vec<Part>, UserDataError> {
    let parts = if mime::is_mime(user) {
        mime::parse(user)?
    } else if !user.trim_start().starts_with("#!") && is_yaml_mapping(user) {
        vec![Part::new(NODE_CONFIG, user)]
    } else {
        vec![Part::new(SHELL, user)]
    };
    for (i, part) in parts.iter().enumerate() {
        if part.media_type() == NODE_CONFIG && !is_yaml_mapping(&part.content) {
            return Err(UserDataError::Invalid(format!(
                "part {} is labelled {NODE_CONFIG} but is not a YAML NodeConfig",
                i + 1
            )));
        }
    }
    Ok(parts)
}

fn is_yaml_mapping(text: &str) -> bool {
    serde_yaml::from_str::<serde_yaml::Mapping>(text).is_ok()
}

/// The kubelet configuration: the node class's (every field it sets: only
/// AL2023's nodeadm takes fields beyond the ones Karpenter reads), with the
/// pods planned per instance type, the cluster DNS and the taints to
/// register with.
fn kubelet_config(b: &Bootstrap<'_>) -> Result<Map<String, Value>, UserDataError> {
    let mut config = match b.kubelet.map(serde_json::to_value).transpose() {
        Ok(Some(Value::Object(map))) => map,
        Ok(_) => Map::new(),
        Err(e) => return Err(UserDataError::Invalid(format!("kubelet settings: {e}"))),
    };
    if let Some(kubelet) = b.kubelet {
        for (field, value) in &kubelet.passthrough {
            config.entry(field.clone()).or_insert_with(|| value.clone());
        }
    }
    config.entry("maxPods").or_insert_with(|| json!(b.max_pods));
    if let Some(dns) = b.cluster_dns() {
        config.entry("clusterDNS").or_insert_with(|| json!([dns]));
    }
    let taints: Vec<Value> = b
        .taints
        .iter()
        .map(|t| {
            let mut taint = json!({"key": t.key, "effect": t.effect});
            if !t.value.is_empty() {
                taint["value"] = json!(t.value);
            }
            taint
        })
        .collect();
    config.insert("registerWithTaints".into(), Value::Array(taints));
    Ok(config)
}

fn node_config(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let labels = node_labels(&b.labels);
    let flags = if labels.is_empty() {
        Vec::new()
    } else {
        let joined: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        vec![format!("--node-labels=\"{}\"", joined.join(","))]
    };
    let config = NodeConfig {
        api_version: "node.eks.aws/v1alpha1",
        kind: "NodeConfig",
        spec: Spec {
            cluster: ClusterSpec {
                name: b.cluster.name.clone(),
                api_server_endpoint: b.cluster.endpoint.clone(),
                certificate_authority: b.cluster.ca_bundle.clone(),
                cidr: b.cluster.service_cidr.clone(),
            },
            instance: b.raid0.then_some(InstanceSpec {
                local_storage: LocalStorage { strategy: "RAID0" },
            }),
            kubelet: KubeletSpec {
                config: kubelet_config(b)?,
                flags,
            },
        },
    };
    let yaml = serde_yaml::to_string(&config)
        .map_err(|e| UserDataError::Invalid(format!("writing the NodeConfig: {e}")))?;
    Ok(format!("# Karpenter Generated NodeConfig\n{yaml}"))
}

/// The whole archive: the user's parts, then Karpenter's NodeConfig.
pub(super) fn render(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let cluster = b.cluster;
    if cluster.endpoint.is_empty() || cluster.ca_bundle.is_empty() || cluster.dns_ip().is_none() {
        return Err(UserDataError::Invalid(
            "nodeadm needs the cluster's endpoint, CA bundle and service CIDR, and they are not known".into(),
        ));
    }
    let mut parts = match b.user() {
        Some(user) => user_parts(user)?,
        None => Vec::new(),
    };
    parts.push(Part::new(NODE_CONFIG, node_config(b)?));
    Ok(mime::serialize(&parts))
}
