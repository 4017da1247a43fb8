//! The `karpenter.sh/disrupted:NoSchedule` taint: put on a node when a
//! disruption command takes it and when it terminates, so nothing new
//! lands there; taken off when a command is rolled back.

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

/// Whether the node carries the taint (with Karpenter's effect).
pub fn has_taint(node: &Node) -> bool {
    taints(node)
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY && t.effect == EFFECT)
}

/// The node's taints with the disrupted taint in place (one with the same
/// key and another effect or value is replaced).
pub fn with_taint(node: &Node) -> Vec<Taint> {
    let mut taints: Vec<Taint> = taints(node)
        .iter()
        .filter(|t| t.key != labels::DISRUPTED_TAINT_KEY)
        .cloned()
        .collect();
    taints.push(Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_owned(),
        value: None,
        effect: EFFECT.to_owned(),
        time_added: None,
    });
    taints
}

/// Taints the node (optimistically locked; a no-op when it has the taint).
pub async fn taint(ctx: &Context, node: &Node) -> Result<()> {
    if has_taint(node) {
        return Ok(());
    }
    let patch = json!({"spec": {"taints": with_taint(node)}});
    match patch::merge(&ctx.nodes(), node, patch).await {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}

/// Removes the taint (optimistically locked; a no-op without it).
pub async fn untaint(ctx: &Context, node: &Node) -> Result<()> {
    if !taints(node)
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
    {
        return Ok(());
    }
    let kept: Vec<&Taint> = taints(node)
        .iter()
        .filter(|t| t.key != labels::DISRUPTED_TAINT_KEY)
        .collect();
    match patch::merge(&ctx.nodes(), node, json!({"spec": {"taints": kept}})).await {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}
