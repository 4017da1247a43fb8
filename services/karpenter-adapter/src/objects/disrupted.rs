//! Karpenter's `NoSchedule` taints on nodes it is taking out of service:
//! `karpenter.sh/disrupted`, put on a node when a disruption command takes
//! it and when it terminates, taken off when a command is rolled back; and
//! `karpenter.sh/rebooting`, on a node rebooted for repair until it is back.

use k8s_openapi::api::core::v1::{Node, Taint};
use karpenter_core::labels;
use serde_json::json;

use crate::controllers::Context;
use crate::error::Result;
use crate::objects::patch;

const EFFECT: &str = "NoSchedule";

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// Whether the node carries the disrupted taint (with Karpenter's effect).
pub fn has_taint(node: &Node) -> bool {
    has(node, labels::DISRUPTED_TAINT_KEY)
}

/// Whether the node carries the `key` taint with Karpenter's effect.
pub fn has(node: &Node, key: &str) -> bool {
    taints(node)
        .iter()
        .any(|t| t.key == key && t.effect == EFFECT)
}

/// The node's taints with the disrupted taint in place (one with the same
/// key and another effect or value is replaced).
pub fn with_taint(node: &Node) -> Vec<Taint> {
    with(node, labels::DISRUPTED_TAINT_KEY, None)
}

fn with(
    node: &Node,
    key: &str,
    added: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> Vec<Taint> {
    let mut taints: Vec<Taint> = taints(node)
        .iter()
        .filter(|t| t.key != key)
        .cloned()
        .collect();
    taints.push(Taint {
        key: key.to_owned(),
        value: None,
        effect: EFFECT.to_owned(),
        time_added: added,
    });
    taints
}

/// Taints the node (optimistically locked; a no-op when it has the taint).
pub async fn taint(ctx: &Context, node: &Node) -> Result<()> {
    add(ctx, node, labels::DISRUPTED_TAINT_KEY).await
}

/// Puts the `key` taint on the node (optimistically locked; a no-op when
/// it is there).
pub async fn add(ctx: &Context, node: &Node, key: &str) -> Result<()> {
    add_at(ctx, node, key, None).await
}

/// Puts the `key` taint on the node with its `timeAdded` (optimistically
/// locked; a no-op when it is there).
pub async fn add_at(
    ctx: &Context,
    node: &Node,
    key: &str,
    added: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> Result<()> {
    if has(node, key) {
        return Ok(());
    }
    let patch = json!({"spec": {"taints": with(node, key, added)}});
    match patch::merge(&ctx.nodes(), node, patch).await {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}

/// When the `key` taint was put on the node, if it says.
pub fn added_at(node: &Node, key: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    taints(node)
        .iter()
        .find(|t| t.key == key)
        .and_then(|t| t.time_added.as_ref())
        .map(|t| t.0)
}

/// Removes the disrupted taint (optimistically locked; a no-op without it).
pub async fn untaint(ctx: &Context, node: &Node) -> Result<()> {
    remove(ctx, node, labels::DISRUPTED_TAINT_KEY).await
}

/// Removes the `key` taint (optimistically locked; a no-op without it).
pub async fn remove(ctx: &Context, node: &Node, key: &str) -> Result<()> {
    if !taints(node).iter().any(|t| t.key == key) {
        return Ok(());
    }
    let kept: Vec<&Taint> = taints(node).iter().filter(|t| t.key != key).collect();
    match patch::merge(&ctx.nodes(), node, json!({"spec": {"taints": kept}})).await {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}
