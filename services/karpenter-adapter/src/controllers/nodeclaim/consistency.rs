//! Consistency (Karpenter's `nodeclaim.consistency`): a launched claim's
//! Node must be the shape the claim promised. Each initialized claim is
//! checked every ten minutes:
//!
//! ```text
//!   for each resource the claim requests (non-zero, with a promised capacity):
//!     node capacity < 90% of the claim's ─▶ FailedConsistencyCheck (Warning) on the claim,
//!                                           "expected <q> of resource <r>, but found <q'> (<p>% of expected)"
//!   any issue ─▶ ConsistentStateFound=False (ConsistencyCheckFailed);  none ─▶ True
//! ```
//!
//! A Node smaller than promised means the provider's catalog is wrong
//! about it: plans made with the catalog overfill such nodes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::nodeclaim::{CONDITION_CONSISTENT_STATE_FOUND, CONDITION_INITIALIZED};
use karpenter_api::{ConditionStatus, ConditionsExt as _, NodeClaim};
use kube::{Resource, ResourceExt};

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::events::{Event, Kind};
use crate::objects::claim::claim_conditions;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// How often a claim is checked again.
pub const SCAN_PERIOD: Duration = Duration::from_secs(10 * 60);
/// The share of a promised resource a Node must have.
const MIN_SHARE: f64 = 0.9;

/// The consistency controller.
pub struct Consistency {
    pub ctx: Context,
}

/// What is wrong with `node` as `claim`'s Node (Karpenter's NodeShape
/// check): each requested resource the Node has less than 90% of.
pub fn issues(claim: &NodeClaim, node: &Node) -> Vec<String> {
    let expected = claim.status.as_ref().map(|s| &s.capacity);
    let found = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    let mut issues = Vec::new();
    for (resource, requested) in &claim.spec.resources.requests {
        let parse = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
            karpenter_core::quantity::parse_resource(resource, &q.0).unwrap_or(0)
        };
        let Some(promised) = expected.and_then(|e| e.get(resource)) else {
            continue;
        };
        let (requested_units, promised_units) = (parse(requested), parse(promised));
        if requested_units == 0 || promised_units == 0 {
            continue;
        }
        let actual = found.and_then(|f| f.get(resource));
        let actual_units = actual.map_or(0, parse);
        let share = actual_units as f64 / promised_units as f64;
        if share < MIN_SHARE {
            issues.push(format!(
                "expected {} of resource {resource}, but found {} ({:.1}% of expected)",
                promised.0,
                actual.map_or("0", |q| q.0.as_str()),
                share * 100.0
            ));
        }
    }
    issues
}

impl Reconciler for Consistency {
    const NAME: &'static str = "nodeclaim.consistency";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_claims + versions.nodes
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        self.ctx.claim_keys(index, |claim| {
            // A Node's heartbeats change it all the time; its shape is
            // rescanned every SCAN_PERIOD, so only its arrival counts.
            let node = index.node_of(claim);
            let versions = [
                claim.meta().resource_version.as_deref(),
                node.and_then(|n| n.meta().name.as_deref()),
            ];
            Some(fingerprint(versions))
        })
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(claim) = self.ctx.claim_to_act_on(&index, &key.1) else {
            return Ok(None);
        };
        if claim.meta().deletion_timestamp.is_some()
            || !claim.conditions().is_true(CONDITION_INITIALIZED)
        {
            return Ok(None);
        }
        let Some(node) = index.node_of(&claim) else {
            return Ok(None);
        };
        let found = issues(&claim, node);
        for issue in &found {
            tracing::info!(nodeclaim = %claim.name_any(), %issue, "failed consistency check");
            self.ctx.recorder.emit(
                Event::new(
                    claim.as_ref(),
                    Kind::Warning,
                    "FailedConsistencyCheck",
                    issue,
                )
                .dedupe_on(issue.clone())
                .dedupe_for(SCAN_PERIOD),
            );
        }
        let (status, reason, message) = if found.is_empty() {
            (ConditionStatus::True, CONDITION_CONSISTENT_STATE_FOUND, "")
        } else {
            (
                ConditionStatus::False,
                "ConsistencyCheckFailed",
                "Consistency Check Failed",
            )
        };
        let mut marked = (*claim).clone();
        claim_conditions(&mut marked).set(
            CONDITION_CONSISTENT_STATE_FOUND,
            status,
            reason,
            message,
        );
        if marked.status != claim.status {
            patch::status(&self.ctx.node_claims(), claim.as_ref(), &marked).await?;
        }
        Ok(Some(SCAN_PERIOD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::node_claim;
    use serde_json::json;

    fn claim() -> NodeClaim {
        node_claim(json!({
            "spec": {"resources": {"requests": {"cpu": "8", "memory": "64Gi", "pods": "5"}}},
            "status": {"capacity": {"cpu": "16", "memory": "128Gi", "pods": "10"}}
        }))
    }

    fn node(capacity: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "status": {"capacity": capacity}}))
            .expect("node")
    }

    /// Upstream's "should detect issues that launch with much fewer
    /// resources than expected" and its consistent counterpart.
    #[test]
    fn a_node_smaller_than_promised_is_an_issue() {
        let short = node(json!({"cpu": "16", "memory": "64Gi", "pods": "10"}));
        assert_eq!(
            issues(&claim(), &short),
            ["expected 128Gi of resource memory, but found 64Gi (50.0% of expected)"]
        );
        let close = node(json!({"cpu": "15", "memory": "120Gi", "pods": "10"}));
        assert!(issues(&claim(), &close).is_empty(), "within 10%");
        let bare = node(json!({}));
        assert_eq!(issues(&claim(), &bare).len(), 3, "nothing reported");
    }
}
