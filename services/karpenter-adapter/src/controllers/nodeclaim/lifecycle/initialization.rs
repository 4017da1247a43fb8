//! Initialization: a registered claim's Node is ready for pods once it is
//! `Ready`, its startup taints and the known starting taints are gone, and
//! it reports every resource the claim asked for. Then the Node gets
//! `karpenter.sh/initialized=true` and the claim `Initialized=True`.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_REGISTERED};
use karpenter_core::labels;
use karpenter_core::taints::{Effect, is_known_ephemeral};
use kube::ResourceExt;
use serde_json::json;

use crate::controllers::Context;
use crate::error::Result;
use crate::metrics::PoolLabels;
use crate::objects::claim::claim_conditions;
use crate::state::index::Index;

pub(super) async fn initialize(
    ctx: &Context,
    index: &Index,
    registered_node: Option<&Node>,
    claim: &mut NodeClaim,
) -> Result<()> {
    {
        let mut conditions = claim_conditions(claim);
        if !conditions.is_unknown(CONDITION_INITIALIZED) {
            conditions.refresh(CONDITION_INITIALIZED);
            return Ok(());
        }
        if !conditions.is_true(CONDITION_REGISTERED) {
            return Ok(());
        }
    }
    let node = registered_node
        .cloned()
        .or_else(|| index.node_of(claim).map(|n| (**n).clone()));
    let Some(node) = node else {
        claim_conditions(claim).set_unknown(
            CONDITION_INITIALIZED,
            "NodeNotFound",
            "Node not registered with cluster",
        );
        return Ok(());
    };
    if let Some((reason, message)) = not_initialized(claim, &node) {
        claim_conditions(claim).set_unknown(CONDITION_INITIALIZED, reason, &message);
        return Ok(());
    }
    if node.labels().get(labels::INITIALIZED).map(String::as_str) != Some("true") {
        let patch = json!({"metadata": {"labels": {labels::INITIALIZED: "true"}}});
        ctx.nodes()
            .patch(
                &node.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
    }
    claim_conditions(claim).set_true(CONDITION_INITIALIZED);
    let pool = claim.node_pool().unwrap_or_default().to_owned();
    ctx.metrics
        .nodeclaims_initialized
        .get_or_create(&PoolLabels { nodepool: pool })
        .inc();
    tracing::info!(node = %node.name_any(), "initialized nodeclaim");
    Ok(())
}

fn effect(text: &str) -> Option<Effect> {
    match text {
        "NoSchedule" => Some(Effect::NoSchedule),
        "PreferNoSchedule" => Some(Effect::PreferNoSchedule),
        "NoExecute" => Some(Effect::NoExecute),
        _ => None,
    }
}

/// Why the Node is not initialized yet (reason, message), or `None`.
pub(crate) fn not_initialized(claim: &NodeClaim, node: &Node) -> Option<(&'static str, String)> {
    if !karpenter_api::node::is_ready(node) {
        return Some(("NodeNotReady", "Node status is NotReady".to_owned()));
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    for startup in &claim.spec.startup_taints {
        if taints
            .iter()
            .any(|t| t.key == startup.key && t.effect == startup.effect.as_str())
        {
            let taint = taint_text(
                &startup.key,
                startup.value.as_deref(),
                startup.effect.as_str(),
            );
            return Some((
                "StartupTaintsExist",
                format!("StartupTaint \"{taint}\" still exists"),
            ));
        }
    }
    for taint in &taints {
        if effect(&taint.effect).is_some_and(|e| is_known_ephemeral(&taint.key, e)) {
            let taint = taint_text(&taint.key, taint.value.as_deref(), &taint.effect);
            return Some((
                "KnownEphemeralTaintsExist",
                format!("KnownEphemeralTaint \"{taint}\" still exists"),
            ));
        }
    }
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default();
    for (name, Quantity(requested)) in &claim.spec.resources.requests {
        let requested = karpenter_core::quantity::parse_resource(name, requested).unwrap_or(0);
        let reported = allocatable
            .get(name)
            .and_then(|Quantity(q)| karpenter_core::quantity::parse_resource(name, q).ok())
            .unwrap_or(0);
        if requested > 0 && reported == 0 {
            return Some((
                "ResourceNotRegistered",
                format!("Resource \"{name}\" was requested but not registered"),
            ));
        }
    }
    None
}

/// A taint as Karpenter writes it in messages: `key=value:effect`, or
/// `key:effect` without a value.
fn taint_text(key: &str, value: Option<&str>, effect: &str) -> String {
    match value {
        Some(value) => format!("{key}={value}:{effect}"),
        None => format!("{key}:{effect}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::node_claim;
    use serde_json::json;

    fn claim() -> NodeClaim {
        node_claim(json!({"spec": {
            "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}},
            "startupTaints": [{"key": "example.com/agent", "value": "x", "effect": "NoSchedule"}]}}))
    }

    fn node(ready: &str, taints: serde_json::Value, allocatable: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}], "allocatable": allocatable}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn each_gate_holds_initialization_back_with_karpenters_reason() {
        let claim = claim();
        let full = json!({"cpu": "4", "example.com/gpu": "1"});
        let reason = |n: &Node| not_initialized(&claim, n);
        assert_eq!(
            reason(&node("False", json!([]), full.clone())).map(|r| r.0),
            Some("NodeNotReady")
        );
        assert_eq!(
            reason(&node(
                "True",
                json!([{"key": "example.com/agent", "effect": "NoSchedule"}]),
                full.clone()
            )),
            Some((
                "StartupTaintsExist",
                "StartupTaint \"example.com/agent=x:NoSchedule\" still exists".to_owned()
            ))
        );
        assert_eq!(
            reason(&node(
                "True",
                json!([{"key": "readiness.k8s.io/net", "effect": "NoSchedule"}]),
                full.clone()
            ))
            .map(|r| r.0),
            Some("KnownEphemeralTaintsExist")
        );
        assert_eq!(
            reason(&node(
                "True",
                json!([]),
                json!({"cpu": "4", "example.com/gpu": "0"})
            )),
            Some((
                "ResourceNotRegistered",
                "Resource \"example.com/gpu\" was requested but not registered".to_owned()
            ))
        );
        assert_eq!(
            reason(&node(
                "True",
                json!([{"key": "dedicated", "effect": "NoSchedule"}]),
                full
            )),
            None
        );
    }
}
