//! Bottlerocket: the user's TOML settings with Karpenter's merged in. The
//! cluster (name, API server, CA) and the kubelet settings capacity was
//! planned with are always Karpenter's; labels and taints are merged, the
//! claim's winning a label and every taint kept once per key and value
//! (`key = ["value:Effect", ...]`, so one key never appears twice).

use karpenter_api::GoDuration;
use toml_edit::{Array, DocumentMut, Item, Table, Value, value};

use super::{Bootstrap, UserDataError, node_labels};

/// The user's TOML (duplicate keys and other invalid TOML are refused).
pub(super) fn parse(user: &str) -> Result<DocumentMut, UserDataError> {
    user.parse::<DocumentMut>()
        .map_err(|e| UserDataError::Toml(e.to_string().trim().to_string()))
}

/// The table under `key`, made when missing; an inline table becomes a
/// regular one and dotted keys a section, so what is added is written in
/// one place.
fn table<'t>(parent: &'t mut Table, key: &str, path: &str) -> Result<&'t mut Table, UserDataError> {
    let item = parent.entry(key).or_insert_with(|| {
        let mut table = Table::new();
        table.set_implicit(true);
        Item::Table(table)
    });
    if let Some(inline) = item.as_inline_table().cloned() {
        *item = Item::Table(inline.into_table());
    }
    match item.as_table_mut() {
        Some(table) => {
            table.set_dotted(false);
            Ok(table)
        }
        None => Err(UserDataError::Toml(format!("{path} must be a table"))),
    }
}

fn string_table<'a>(entries: impl IntoIterator<Item = (&'a String, String)>) -> Item {
    let mut table = Table::new();
    for (k, v) in entries {
        table.insert(k, value(v));
    }
    Item::Table(table)
}

/// Karpenter's kubelet settings under `[settings.kubernetes]`.
fn kubelet_settings(kubernetes: &mut Table, b: &Bootstrap<'_>) {
    kubernetes.insert("max-pods", value(b.max_pods));
    if let Some(dns) = b.cluster_dns() {
        kubernetes.insert("cluster-dns-ip", value(dns));
    }
    let Some(k) = b.kubelet else {
        return;
    };
    for (key, map) in [
        ("kube-reserved", &k.kube_reserved),
        ("system-reserved", &k.system_reserved),
        ("eviction-hard", &k.eviction_hard),
        ("eviction-soft", &k.eviction_soft),
    ] {
        if !map.is_empty() {
            kubernetes.insert(key, string_table(map.iter().map(|(k, v)| (k, v.clone()))));
        }
    }
    if !k.eviction_soft_grace_period.is_empty() {
        kubernetes.insert(
            "eviction-soft-grace-period",
            string_table(
                k.eviction_soft_grace_period
                    .iter()
                    .map(|(k, d)| (k, GoDuration::from_std(d.as_std()).to_string())),
            ),
        );
    }
    if let Some(seconds) = k.eviction_max_pod_grace_period {
        kubernetes.insert("eviction-max-pod-grace-period", value(i64::from(seconds)));
    }
    if let Some(high) = k.image_gc_high_threshold_percent {
        kubernetes.insert("image-gc-high-threshold-percent", value(high.to_string()));
    }
    if let Some(low) = k.image_gc_low_threshold_percent {
        kubernetes.insert("image-gc-low-threshold-percent", value(low.to_string()));
    }
    if let Some(quota) = k.cpu_cfs_quota {
        kubernetes.insert("cpu-cfs-quota-enforced", value(quota));
    }
}

/// The claim's taints merged into the user's, each `value:Effect` once per key.
fn merge_taints(taints: &mut Table, b: &Bootstrap<'_>) -> Result<(), UserDataError> {
    for taint in &b.taints {
        let entry = taints
            .entry(&taint.key)
            .or_insert_with(|| Item::Value(Value::Array(Array::new())));
        if let Some(single) = entry.as_str().map(str::to_string) {
            let mut list = Array::new();
            list.push(single);
            *entry = Item::Value(Value::Array(list));
        }
        let list = entry.as_array_mut().ok_or_else(|| {
            UserDataError::Toml(format!(
                "settings.kubernetes.node-taints.{} must be a list of \"value:Effect\"",
                taint.key
            ))
        })?;
        let wanted = format!("{}:{}", taint.value, taint.effect);
        if !list.iter().any(|v| v.as_str() == Some(wanted.as_str())) {
            list.push(wanted);
        }
    }
    Ok(())
}

/// The command that puts the instance store together as RAID0 and binds the
/// kubelet's and containerd's directories onto it.
fn raid0_command(settings: &mut Table) -> Result<(), UserDataError> {
    let commands = table(
        settings,
        "bootstrap-commands",
        "settings.bootstrap-commands",
    )?;
    let mut command = Table::new();
    let mut lists = Array::new();
    for args in [
        &["apiclient", "ephemeral-storage", "init"][..],
        &["apiclient", "ephemeral-storage", "bind"][..],
    ] {
        lists.push(Value::Array(args.iter().copied().collect()));
    }
    command.insert("commands", value(lists));
    command.insert("mode", value("always"));
    command.insert("essential", value(true));
    commands.insert("000-mount-instance-storage", Item::Table(command));
    Ok(())
}

pub(super) fn render(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    if b.cluster.endpoint.is_empty() || b.cluster.ca_bundle.is_empty() {
        return Err(UserDataError::Invalid(
            "the cluster's endpoint and CA bundle are not known".into(),
        ));
    }
    let mut doc = match b.user() {
        Some(user) => parse(user)?,
        None => DocumentMut::new(),
    };
    let settings = table(doc.as_table_mut(), "settings", "settings")?;
    {
        let kubernetes = table(settings, "kubernetes", "settings.kubernetes")?;
        kubernetes.insert("cluster-name", value(b.cluster.name.as_str()));
        kubernetes.insert("api-server", value(b.cluster.endpoint.as_str()));
        kubernetes.insert("cluster-certificate", value(b.cluster.ca_bundle.as_str()));
        kubelet_settings(kubernetes, b);
        let labels = table(kubernetes, "node-labels", "settings.kubernetes.node-labels")?;
        for (k, v) in node_labels(&b.labels) {
            labels.insert(&k, value(v));
        }
        let taints = table(kubernetes, "node-taints", "settings.kubernetes.node-taints")?;
        merge_taints(taints, b)?;
    }
    if b.raid0 {
        raid0_command(settings)?;
    }
    Ok(doc.to_string())
}
