//! User data per AMI family, merged with the user's `spec.userData`:
//! AL2 a bootstrap.sh MIME part, AL2023 a nodeadm `NodeConfig` MIME part,
//! Bottlerocket TOML settings, Windows a PowerShell bootstrap; Custom passes
//! the user's data through unchanged.

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::{AMIFamily, KubeletConfiguration};
use karpenter_api::labels as l;

const BOUNDARY: &str = "//";

/// What the node needs to join the cluster.
#[derive(Debug, Clone)]
pub struct Bootstrap<'a> {
    pub cluster_name: &'a str,
    pub cluster_endpoint: &'a str,
    pub ca_bundle: Option<&'a str>,
    pub cluster_cidr: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// `key=value:Effect` (value may be empty), including the unregistered taint.
    pub taints: &'a [String],
    pub kubelet: Option<&'a KubeletConfiguration>,
    pub user_data: Option<&'a str>,
}

/// The unregistered taint every node starts with until it registers.
pub fn unregistered_taint() -> String {
    format!("{}:NoExecute", l::UNREGISTERED_TAINT_KEY)
}

/// The MIME parts of a user-data document, or the whole text as one part.
fn mime_parts(user: &str) -> Vec<(String, String)> {
    let user = user.trim();
    if !user.starts_with("MIME-Version") {
        return Vec::new();
    }
    let boundary = user
        .lines()
        .find_map(|line| {
            let idx = line.find("boundary=")?;
            Some(line[idx + 9..].trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| BOUNDARY.to_string());
    let marker = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in user.split(&marker).skip(1) {
        let chunk = chunk.trim_start_matches(['\r', '\n']);
        if chunk.starts_with("--") {
            break;
        }
        let (headers, body) = chunk
            .split_once("\n\n")
            .or_else(|| chunk.split_once("\r\n\r\n"))
            .unwrap_or(("", chunk));
        let content_type = headers
            .lines()
            .find_map(|h| {
                h.strip_prefix("Content-Type:")
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_else(|| "text/x-shellscript".into());
        parts.push((content_type, body.trim_end().to_string()));
    }
    parts
}

fn mime(parts: &[(String, String)]) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for (content_type, body) in parts {
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {content_type}\n\n{body}\n\n"
        ));
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

fn user_parts(user: Option<&str>, default_type: &str) -> Vec<(String, String)> {
    match user {
        None => Vec::new(),
        Some(text) if text.trim().is_empty() => Vec::new(),
        Some(text) => {
            let parts = mime_parts(text);
            if parts.is_empty() {
                vec![(default_type.to_string(), text.trim_end().to_string())]
            } else {
                parts
            }
        }
    }
}

fn labels_arg(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The user data of `family`, not yet base64-encoded.
pub fn render(family: AMIFamily, b: &Bootstrap<'_>) -> String {
    match family {
        AMIFamily::AL2 => al2(b),
        AMIFamily::AL2023 => al2023(b),
        AMIFamily::Bottlerocket => bottlerocket(b),
        AMIFamily::Windows2019 | AMIFamily::Windows2022 => windows(b),
        AMIFamily::Custom => b.user_data.unwrap_or_default().to_string(),
    }
}

fn al2(b: &Bootstrap<'_>) -> String {
    let mut kubelet_args = vec![
        format!("--node-labels={}", labels_arg(b.labels)),
        format!("--register-with-taints={}", b.taints.join(",")),
    ];
    let mut script = format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}'",
        b.cluster_name, b.cluster_endpoint
    );
    if let Some(ca) = b.ca_bundle {
        script.push_str(&format!(" --b64-cluster-ca '{ca}'"));
    }
    if let Some(k) = b.kubelet {
        if let Some(max) = k.max_pods {
            script.push_str(" --use-max-pods false");
            kubelet_args.push(format!("--max-pods={max}"));
        }
        if let Some(dns) = k.cluster_dns.first() {
            script.push_str(&format!(" --dns-cluster-ip '{dns}'"));
        }
    }
    script.push_str(&format!(
        " --kubelet-extra-args '{}'",
        kubelet_args.join(" ")
    ));
    let mut parts = user_parts(b.user_data, "text/x-shellscript; charset=\"us-ascii\"");
    parts.push(("text/x-shellscript; charset=\"us-ascii\"".into(), script));
    mime(&parts)
}

fn al2023(b: &Bootstrap<'_>) -> String {
    let mut config = format!(
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {}\n    apiServerEndpoint: {}\n",
        b.cluster_name, b.cluster_endpoint
    );
    if let Some(ca) = b.ca_bundle {
        config.push_str(&format!("    certificateAuthority: {ca}\n"));
    }
    config.push_str(&format!(
        "    cidr: {}\n  kubelet:\n    config:\n",
        b.cluster_cidr
    ));
    let mut wrote_config = false;
    if let Some(k) = b.kubelet {
        if let Some(max) = k.max_pods {
            config.push_str(&format!("      maxPods: {max}\n"));
            wrote_config = true;
        }
        if !k.cluster_dns.is_empty() {
            config.push_str("      clusterDNS:\n");
            for dns in &k.cluster_dns {
                config.push_str(&format!("      - {dns}\n"));
            }
            wrote_config = true;
        }
    }
    if !wrote_config {
        config.push_str("      {}\n");
    }
    config.push_str(&format!(
        "    flags:\n    - --node-labels=\"{}\"\n    - --register-with-taints=\"{}\"\n",
        labels_arg(b.labels),
        b.taints.join(",")
    ));
    // The user's NodeConfig parts come first: nodeadm merges later ones over them.
    let mut parts = user_parts(b.user_data, "application/node.eks.aws");
    parts.push(("application/node.eks.aws".into(), config));
    mime(&parts)
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn bottlerocket(b: &Bootstrap<'_>) -> String {
    let user = b.user_data.unwrap_or_default();
    let mut ours: Vec<(String, String)> = vec![
        ("cluster-name".into(), toml_string(b.cluster_name)),
        ("api-server".into(), toml_string(b.cluster_endpoint)),
    ];
    if let Some(ca) = b.ca_bundle {
        ours.push(("cluster-certificate".into(), toml_string(ca)));
    }
    if let Some(max) = b.kubelet.and_then(|k| k.max_pods) {
        ours.push(("max-pods".into(), max.to_string()));
    }
    if let Some(dns) = b.kubelet.map(|k| &k.cluster_dns).filter(|d| !d.is_empty()) {
        let list: Vec<String> = dns.iter().map(|d| toml_string(d)).collect();
        ours.push(("cluster-dns-ip".into(), format!("[{}]", list.join(", "))));
    }
    // Keys the user already set under [settings.kubernetes] win.
    let mut section = String::new();
    let mut user_keys = Vec::new();
    let mut in_kubernetes = false;
    for line in user.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_kubernetes = trimmed == "[settings.kubernetes]";
        } else if in_kubernetes && let Some((key, _)) = trimmed.split_once('=') {
            user_keys.push(key.trim().to_string());
        }
    }
    for (key, value) in ours {
        if !user_keys.contains(&key) {
            section.push_str(&format!("{key} = {value}\n"));
        }
    }
    let mut labels = String::from("[settings.kubernetes.node-labels]\n");
    for (k, v) in b.labels {
        labels.push_str(&format!("{} = {}\n", toml_string(k), toml_string(v)));
    }
    let mut taints = String::from("[settings.kubernetes.node-taints]\n");
    for taint in b.taints {
        let (kv, effect) = taint.split_once(':').unwrap_or((taint, "NoSchedule"));
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        taints.push_str(&format!(
            "{} = [{}]\n",
            toml_string(key),
            toml_string(&format!("{value}:{effect}"))
        ));
    }
    let mut out = String::new();
    if user_keys.is_empty() && !user.contains("[settings.kubernetes]") {
        out.push_str(user.trim_end());
        out.push_str("\n\n[settings.kubernetes]\n");
        out.push_str(&section);
    } else {
        // Insert our keys right after the user's [settings.kubernetes] header.
        for line in user.lines() {
            out.push_str(line);
            out.push('\n');
            if line.trim() == "[settings.kubernetes]" {
                out.push_str(&section);
            }
        }
    }
    if !user.contains("[settings.kubernetes.node-labels]") {
        out.push('\n');
        out.push_str(&labels);
    }
    if !user.contains("[settings.kubernetes.node-taints]") {
        out.push('\n');
        out.push_str(&taints);
    }
    out.trim_start().to_string()
}

fn windows(b: &Bootstrap<'_>) -> String {
    let mut out = String::from("<powershell>\n");
    if let Some(user) = b.user_data {
        let user = user
            .trim()
            .trim_start_matches("<powershell>")
            .trim_end_matches("</powershell>");
        out.push_str(user.trim());
        out.push('\n');
    }
    out.push_str(&format!(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n& $EKSBootstrapScriptFile -EKSClusterName '{}' -APIServerEndpoint '{}'",
        b.cluster_name, b.cluster_endpoint
    ));
    if let Some(ca) = b.ca_bundle {
        out.push_str(&format!(" -Base64ClusterCA '{ca}'"));
    }
    out.push_str(&format!(
        " -KubeletExtraArgs '--node-labels=\"{}\" --register-with-taints=\"{}\"'\n</powershell>",
        labels_arg(b.labels),
        b.taints.join(",")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bootstrap<'a>(
        labels: &'a BTreeMap<String, String>,
        taints: &'a [String],
        user: Option<&'a str>,
    ) -> Bootstrap<'a> {
        Bootstrap {
            cluster_name: "c",
            cluster_endpoint: "https://api",
            ca_bundle: Some("Q0E="),
            cluster_cidr: "10.100.0.0/16",
            labels,
            taints,
            kubelet: None,
            user_data: user,
        }
    }

    #[test]
    fn al2023_merges_user_node_config_first() {
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "default".to_string())]);
        let taints = vec![unregistered_taint()];
        let user = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: application/node.eks.aws\n\nkind: NodeConfig\n\n--BOUNDARY--\n";
        let out = render(AMIFamily::AL2023, &bootstrap(&labels, &taints, Some(user)));
        let user_at = out.find("kind: NodeConfig\n\n").unwrap_or(usize::MAX);
        let ours_at = out.find("apiVersion: node.eks.aws").unwrap_or(0);
        assert!(user_at < ours_at, "{out}");
        assert!(out.contains("karpenter.sh/unregistered:NoExecute"));
    }

    #[test]
    fn bottlerocket_keeps_user_keys() {
        let labels = BTreeMap::new();
        let taints = vec![unregistered_taint()];
        let user = "[settings.kubernetes]\nmax-pods = 7\n";
        let out = render(
            AMIFamily::Bottlerocket,
            &bootstrap(&labels, &taints, Some(user)),
        );
        assert_eq!(out.matches("[settings.kubernetes]").count(), 1, "{out}");
        assert_eq!(out.matches("max-pods").count(), 1, "{out}");
        assert!(out.contains("cluster-name = \"c\""));
        assert!(out.contains("\"karpenter.sh/unregistered\" = [\":NoExecute\"]"));
    }

    #[test]
    fn al2_and_windows_bootstrap() {
        let labels = BTreeMap::from([("a".to_string(), "b".to_string())]);
        let taints = vec![unregistered_taint()];
        let al2 = render(
            AMIFamily::AL2,
            &bootstrap(&labels, &taints, Some("#!/bin/bash\necho hi")),
        );
        assert!(al2.starts_with("MIME-Version: 1.0"));
        assert!(
            al2.find("echo hi") < al2.find("/etc/eks/bootstrap.sh 'c'"),
            "{al2}"
        );
        assert!(al2.contains("--register-with-taints=karpenter.sh/unregistered:NoExecute"));
        let win = render(AMIFamily::Windows2022, &bootstrap(&labels, &taints, None));
        assert!(win.starts_with("<powershell>") && win.contains("-EKSClusterName 'c'"));
        let custom = render(AMIFamily::Custom, &bootstrap(&labels, &taints, Some("raw")));
        assert_eq!(custom, "raw");
    }
}
