//! AL2 (`/etc/eks/bootstrap.sh` in a MIME archive after the user's parts)
//! and Windows (`Start-EKSBootstrap.ps1` after the user's PowerShell): both
//! hand the kubelet its settings as command-line flags.

use std::collections::BTreeMap;

use karpenter_api::GoDuration;

use super::mime::{self, Part};
use super::nodeadm::SHELL;
use super::{Bootstrap, UserDataError, node_labels};

/// `k=v,k=v` of a map, sorted by key (the kubelet reads it either way; a
/// stable order keeps launch templates shared).
fn pairs<V: std::fmt::Display>(map: &BTreeMap<String, V>, separator: &str) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}{separator}{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The kubelet flags both families pass: labels, taints, pods and the
/// kubelet settings of the node class.
fn kubelet_flags(b: &Bootstrap<'_>) -> Vec<String> {
    let mut flags = Vec::new();
    let labels = node_labels(&b.labels);
    if !labels.is_empty() {
        flags.push(format!("--node-labels=\"{}\"", pairs(&labels, "=")));
    }
    let taints: Vec<String> = b.taints.iter().map(|t| t.flag()).collect();
    flags.push(format!("--register-with-taints=\"{}\"", taints.join(",")));
    flags.push(format!("--max-pods={}", b.max_pods));
    let Some(k) = b.kubelet else {
        return flags;
    };
    if let Some(per_core) = k.pods_per_core {
        flags.push(format!("--pods-per-core={per_core}"));
    }
    let mut map_flag = |name: &str, map: &BTreeMap<String, String>, separator: &str| {
        if !map.is_empty() {
            flags.push(format!("--{name}=\"{}\"", pairs(map, separator)));
        }
    };
    map_flag("system-reserved", &k.system_reserved, "=");
    map_flag("kube-reserved", &k.kube_reserved, "=");
    map_flag("eviction-hard", &k.eviction_hard, "<");
    map_flag("eviction-soft", &k.eviction_soft, "<");
    if !k.eviction_soft_grace_period.is_empty() {
        let canonical: BTreeMap<String, String> = k
            .eviction_soft_grace_period
            .iter()
            .map(|(signal, d)| (signal.clone(), GoDuration::from_std(d.as_std()).to_string()))
            .collect();
        flags.push(format!(
            "--eviction-soft-grace-period=\"{}\"",
            pairs(&canonical, "=")
        ));
    }
    if let Some(seconds) = k.eviction_max_pod_grace_period {
        flags.push(format!("--eviction-max-pod-grace-period={seconds}"));
    }
    if let Some(high) = k.image_gc_high_threshold_percent {
        flags.push(format!("--image-gc-high-threshold={high}"));
    }
    if let Some(low) = k.image_gc_low_threshold_percent {
        flags.push(format!("--image-gc-low-threshold={low}"));
    }
    if let Some(quota) = k.cpu_cfs_quota {
        flags.push(format!("--cpu-cfs-quota={quota}"));
    }
    flags
}

/// The user's data as parts of the archive: a MIME archive's own parts,
/// else one shell-script part.
pub(super) fn user_parts(user: &str) -> Result<Vec<Part>, UserDataError> {
    if mime::is_mime(user) {
        Ok(mime::parse(user)?)
    } else {
        Ok(vec![Part::new(SHELL, user)])
    }
}

fn require_cluster(b: &Bootstrap<'_>) -> Result<(), UserDataError> {
    if b.cluster.endpoint.is_empty() || b.cluster.ca_bundle.is_empty() {
        return Err(UserDataError::Invalid(
            "the cluster's endpoint and CA bundle are not known".into(),
        ));
    }
    Ok(())
}

pub(super) fn al2(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    require_cluster(b)?;
    let mut options = vec![format!(
        "/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}' --b64-cluster-ca '{}'",
        b.cluster.name, b.cluster.endpoint, b.cluster.ca_bundle
    )];
    if b.cluster.ipv6() {
        options.push("--ip-family ipv6".into());
    }
    if let Some(dns) = b.cluster_dns() {
        options.push(format!("--dns-cluster-ip '{dns}'"));
    }
    options.push("--use-max-pods false".into());
    options.push(format!(
        "--kubelet-extra-args '{}'",
        kubelet_flags(b).join(" ")
    ));
    if b.raid0 {
        options.push("--local-disks raid0".into());
    }
    let script = format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n{}\n",
        options.join(" \\\n")
    );
    let mut parts = match b.user() {
        Some(user) => user_parts(user)?,
        None => Vec::new(),
    };
    parts.push(Part::new(SHELL, script));
    Ok(mime::serialize(&parts))
}

pub(super) fn windows(b: &Bootstrap<'_>) -> String {
    let mut out = String::from("<powershell>\n");
    if let Some(user) = b.user() {
        let user = user
            .trim()
            .trim_start_matches("<powershell>")
            .trim_end_matches("</powershell>");
        out.push_str(user.trim());
        out.push('\n');
    }
    out.push_str(&format!(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n& $EKSBootstrapScriptFile -EKSClusterName '{}' -APIServerEndpoint '{}' -Base64ClusterCA '{}' -KubeletExtraArgs '{}'",
        b.cluster.name,
        b.cluster.endpoint,
        b.cluster.ca_bundle,
        kubelet_flags(b).join(" ")
    ));
    if let Some(dns) = b.cluster_dns() {
        out.push_str(&format!(" -DNSClusterIP '{dns}'"));
    }
    out.push_str("\n</powershell>");
    out
}
