//! Documents that are passed through: Karpenter v1 objects (checked for the
//! mistakes users make, never changed), settings ConfigMaps of old
//! Karpenter releases (explained), and everything else.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::Value;

use crate::ctx::{Ctx, child_path, index_path, suggest};
use crate::note::NoteKind;

/// The stored version's schema of this crate's CRD of `kind`: the one
/// place that says which fields a v1 object has.
fn schema_of(kind: &str) -> Option<&'static Value> {
    static SCHEMAS: LazyLock<BTreeMap<String, Value>> = LazyLock::new(|| {
        karpenter_api::crds()
            .into_iter()
            .filter_map(|crd| {
                let version = crd.spec.versions.iter().find(|v| v.storage)?;
                let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
                Some((
                    crd.spec.names.kind.clone(),
                    serde_json::to_value(schema).ok()?,
                ))
            })
            .collect()
    });
    SCHEMAS.get(kind)
}

/// Notes for a Karpenter v1 document: unknown fields under `spec` (with a
/// guess at the intended one) and empty values, as the CRD's schema has
/// them. The document itself is not changed.
pub(crate) fn lint_v1(ctx: &mut Ctx<'_>, kind: &str, doc: &Value) {
    if !matches!(kind, "NodePool" | "EC2NodeClass") {
        return;
    }
    let (Some(spec), Some(schema)) = (
        doc.get("spec"),
        schema_of(kind).and_then(|s| s.pointer("/properties/spec")),
    ) else {
        return;
    };
    lint_object(ctx, kind, "spec", spec, schema);
}

/// The fields of the object at `path` against its `schema` (objects with
/// declared properties only: maps and open objects take any key).
fn lint_object(ctx: &mut Ctx<'_>, kind: &str, path: &str, value: &Value, schema: &Value) {
    let open = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let (Some(properties), Some(map), false) = (
        schema.get("properties").and_then(Value::as_object),
        value.as_object(),
        open,
    ) else {
        return;
    };
    let known: Vec<&str> = properties.keys().map(String::as_str).collect();
    for (key, field) in map {
        let child = child_path(path, key);
        match properties.get(key) {
            None => {
                let mut message = format!(
                    "`{key}` is not a field of a v1 {kind}; the API server rejects it (strict validation) or silently drops it"
                );
                if let Some(s) = suggest(key, &known) {
                    message.push_str(&format!(". Did you mean `{s}`?"));
                }
                if kind == "NodePool" && path == "spec.template.spec" && key == "kubelet" {
                    message = "kubelet moved to EC2NodeClass.spec.kubelet in v1".to_string();
                }
                ctx.note(NoteKind::ActionRequired, &child, message);
            }
            Some(_) if field.is_null() => {
                let mut message =
                    format!("`{key}` is present but empty (null); Kubernetes treats it as not set");
                if key == "weight" {
                    message.push_str(" (a NodePool without weight is ordered like weight 0)");
                }
                ctx.note(NoteKind::Info, &child, message);
            }
            Some(field_schema) => lint_object(ctx, kind, &child, field, field_schema),
        }
    }
}

/// Settings ConfigMaps of Karpenter before v0.32: they are no longer read.
pub(crate) fn configmap_notes(ctx: &mut Ctx<'_>, doc: &Value) {
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(data) = doc.get("data").and_then(Value::as_object) else {
        return;
    };
    match name {
        "karpenter-global-settings" => {
            for key in data.keys() {
                let path = child_path("data", key);
                let message = match key.as_str() {
                    "aws.clusterName" => "now the Helm value settings.clusterName (env CLUSTER_NAME)".to_string(),
                    "aws.clusterEndpoint" => "now the Helm value settings.clusterEndpoint (env CLUSTER_ENDPOINT)".to_string(),
                    "aws.interruptionQueueName" => "now the Helm value settings.interruptionQueue (env INTERRUPTION_QUEUE)".to_string(),
                    "batchMaxDuration" => "now the Helm value settings.batchMaxDuration (env BATCH_MAX_DURATION)".to_string(),
                    "batchIdleDuration" => "now the Helm value settings.batchIdleDuration (env BATCH_IDLE_DURATION)".to_string(),
                    "aws.isolatedVPC" => "now the Helm value settings.isolatedVPC (env ISOLATED_VPC)".to_string(),
                    "aws.vmMemoryOverheadPercent" => "now the Helm value settings.vmMemoryOverheadPercent (env VM_MEMORY_OVERHEAD_PERCENT)".to_string(),
                    "aws.defaultInstanceProfile" => "removed: set role (or instanceProfile) on each EC2NodeClass".to_string(),
                    "aws.enablePodENI" => "removed: pod ENI resources are always reported".to_string(),
                    "aws.enableENILimitedPodDensity" => "removed: set kubelet maxPods / podsPerCore on the EC2NodeClass".to_string(),
                    "aws.tags" => "removed: set tags on each EC2NodeClass".to_string(),
                    "aws.nodeNameConvention" => "removed: nodes are named after their private DNS name".to_string(),
                    "featureGates.driftEnabled" => "removed: drift is always on in v1".to_string(),
                    other => format!("{other} is no longer read; see the Karpenter settings reference"),
                };
                ctx.note(
                    NoteKind::ActionRequired,
                    &path,
                    format!(
                        "the karpenter-global-settings ConfigMap is not read since v0.33: {message}"
                    ),
                );
            }
        }
        "config-logging" => {
            for key in data.keys() {
                ctx.note(
                    NoteKind::ActionRequired,
                    &child_path("data", key),
                    "the config-logging ConfigMap is not read since Karpenter v1: use the Helm value logLevel (env LOG_LEVEL) and logOutputPaths / logErrorOutputPaths",
                );
            }
        }
        _ => {}
    }
}

/// `${VAR}` placeholders left in string values (shell-style templates
/// copied from docs).
pub(crate) fn placeholder_notes(ctx: &mut Ctx<'_>, path: &str, value: &Value) {
    match value {
        Value::String(s) => {
            if let Some(start) = s.find("${")
                && let Some(len) = s[start..].find('}')
            {
                let var = &s[start..start + len + 1];
                ctx.note(
                    NoteKind::ActionRequired,
                    path,
                    format!(
                        "unexpanded placeholder {var}; substitute it (e.g. with envsubst) before applying"
                    ),
                );
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                placeholder_notes(ctx, &index_path(path, i), item);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                placeholder_notes(ctx, &child_path(path, key), item);
            }
        }
        _ => {}
    }
}
