//! The disruption state of each NodeClaim (Karpenter's
//! `nodeclaim.disruption`): the `Drifted` and `Consolidatable` conditions
//! that the disruption controller reads.
//!
//! ```text
//!   Drifted (once launched; the first reason wins, rechecked every 5 min):
//!     NodePoolDrifted       pool hash ≠ claim hash, same hash version
//!     RequirementsDrifted   the claim's labels no longer meet the pool's requirements
//!     <provider reason>     IsDrifted (node class hash, image, ...)
//!   Consolidatable: karpenter-core's consolidation rule (initialized, and
//!     consolidateAfter, unless Never, passed since the last pod event)
//! ```
//!
//! Both conditions are removed, not set False, when they do not hold.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use karpenter_api::nodeclaim::{
    CONDITION_CONSOLIDATABLE, CONDITION_DRIFTED, CONDITION_INITIALIZED,
};
use karpenter_api::{ConditionsExt as _, NodeClaim, NodePool};
use karpenter_core::consolidation::Consolidatable;
use karpenter_core::labels;
use karpenter_core::requirements::{NoneWellKnown, Requirements};
use kube::{Resource, ResourceExt};

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue, sooner};
use crate::error::{Error, Result};
use crate::objects::claim::claim_conditions;
use crate::objects::claim::wire_claim;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;
use karpenter_proto::provider::v1 as pv;

/// How often drift is checked again while nothing else changes.
pub const DRIFT_RECHECK: Duration = Duration::from_secs(300);

pub const NODE_POOL_DRIFTED: &str = "NodePoolDrifted";
pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";

/// Static drift: the pool's template hash moved away from the one the
/// claim was made from (only when both carry the same hash version).
pub fn static_drift(pool: &NodePool, claim: &NodeClaim) -> bool {
    let (p, c) = (pool.annotations(), claim.annotations());
    match (
        p.get(labels::NODE_POOL_HASH),
        p.get(labels::NODE_POOL_HASH_VERSION),
        c.get(labels::NODE_POOL_HASH),
        c.get(labels::NODE_POOL_HASH_VERSION),
    ) {
        (Some(pool_hash), Some(pool_version), Some(claim_hash), Some(claim_version)) => {
            pool_version == claim_version && pool_hash != claim_hash
        }
        _ => false,
    }
}

/// Requirements drift: the claim's labels no longer meet the pool's
/// template requirements (a key the pool requires and the claim lacks, or
/// values that no longer intersect).
pub fn requirements_drift(pool: &NodePool, claim: &NodeClaim) -> bool {
    let required = pool
        .spec
        .template
        .spec
        .requirements
        .iter()
        .filter_map(|r| r.to_requirement().ok());
    let required = Requirements::from_requirements(required);
    Requirements::from_labels(claim.labels().iter())
        .compatible(&required, &NoneWellKnown)
        .is_err()
}

/// What karpenter-core's consolidation rule says of `claim` now, from its
/// `Initialized` condition and last pod event.
pub fn consolidatable(pool: &NodePool, claim: &NodeClaim) -> Consolidatable {
    let initialized_at = claim
        .conditions()
        .condition(CONDITION_INITIALIZED)
        .filter(|c| c.status == karpenter_api::ConditionStatus::True)
        .map(|c| c.last_transition_time.0.as_second());
    let last_pod_event_at = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(|t| t.0.as_second());
    karpenter_core::consolidation::consolidatable(
        pool.spec.disruption.consolidate_after(),
        initialized_at,
        last_pod_event_at,
        Timestamp::now().as_second(),
    )
}

/// The NodeClaim disruption-state controller.
pub struct ClaimDisruption {
    pub ctx: Context,
}

impl ClaimDisruption {
    async fn provider_drift(&self, index: &Index, claim: &NodeClaim) -> Result<String> {
        let Some(provider_id) = claim.provider_id() else {
            return Ok(String::new());
        };
        let class = index.node_classes.named(&claim.spec.node_class_ref.name);
        let annotation = |key: &str| {
            (!key.is_empty())
                .then(|| claim.annotations().get(key).cloned())
                .flatten()
                .unwrap_or_default()
        };
        let request = pv::IsDriftedRequest {
            node_claim: Some(wire_claim(claim, class.map(|c| c.as_ref()))),
            provider_id: provider_id.to_owned(),
            image_id: claim
                .status
                .as_ref()
                .and_then(|s| s.image_id.clone())
                .unwrap_or_default(),
            node_class_hash: annotation(&self.ctx.info.node_class_hash_annotation),
            node_class_hash_version: annotation(&self.ctx.info.node_class_hash_version_annotation),
        };
        self.ctx
            .clients
            .is_drifted(request)
            .await
            .map_err(Error::peer("IsDrifted"))
    }

    /// Sets or clears `Drifted`; when to look again.
    async fn drift(&self, index: &Index, pool: &NodePool, claim: &mut NodeClaim) -> Requeue {
        if !claim.is_launched() {
            clear(claim, CONDITION_DRIFTED);
            return None;
        }
        let reason = if static_drift(pool, claim) {
            NODE_POOL_DRIFTED.to_owned()
        } else if requirements_drift(pool, claim) {
            REQUIREMENTS_DRIFTED.to_owned()
        } else {
            match self.provider_drift(index, claim).await {
                Ok(reason) => reason,
                Err(error) => {
                    // Unknown is not drifted: keep what was decided before.
                    tracing::warn!(%error, "checking drift with the provider failed");
                    return Some(DRIFT_RECHECK);
                }
            }
        };
        if reason.is_empty() {
            clear(claim, CONDITION_DRIFTED);
        } else {
            claim_conditions(claim).set(
                CONDITION_DRIFTED,
                karpenter_api::ConditionStatus::True,
                &reason,
                &reason,
            );
        }
        Some(DRIFT_RECHECK)
    }
}

/// Removes a condition if the claim has it (without materializing the
/// others, which the lifecycle owns).
fn clear(claim: &mut NodeClaim, type_: &str) {
    if claim.conditions().iter().any(|c| c.type_ == type_) {
        claim_conditions(claim).clear(type_);
    }
}

impl Reconciler for ClaimDisruption {
    const NAME: &'static str = "nodeclaim.disruption";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_claims + versions.node_pools + versions.node_classes
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        let pools: BTreeMap<String, Option<&str>> = index
            .node_pools
            .iter()
            .map(|p| (p.name_any(), p.meta().resource_version.as_deref()))
            .collect();
        self.ctx.claim_keys(index, |claim| {
            let pool = pools.get(claim.node_pool()?)?;
            let class = index
                .node_classes
                .named(&claim.spec.node_class_ref.name)
                .and_then(|c| c.meta().resource_version.as_deref());
            let parts = [claim.meta().resource_version.as_deref(), *pool, class];
            Some(fingerprint(parts))
        })
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(stored) = self.ctx.claim_to_act_on(&index, &key.1) else {
            return Ok(None);
        };
        let Some(pool) = stored
            .node_pool()
            .and_then(|p| index.node_pools.named(p))
            .cloned()
        else {
            return Ok(None);
        };
        let mut claim = (*stored).clone();
        let mut requeue = self.drift(&index, &pool, &mut claim).await;
        match consolidatable(&pool, &claim) {
            Consolidatable::Now => claim_conditions(&mut claim).set_true(CONDITION_CONSOLIDATABLE),
            Consolidatable::No => clear(&mut claim, CONDITION_CONSOLIDATABLE),
            Consolidatable::After(wait) => {
                clear(&mut claim, CONDITION_CONSOLIDATABLE);
                requeue = sooner(requeue, Some(wait));
            }
        }
        if claim.status != stored.status {
            patch::status(&self.ctx.node_claims(), &stored, &claim).await?;
        }
        Ok(requeue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::{merge, node_claim};
    use serde_json::{Value, json};

    fn pool(extra: Value) -> NodePool {
        let mut pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "annotations": {
                "karpenter.sh/nodepool-hash": "111", "karpenter.sh/nodepool-hash-version": "v3"}},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]}},
                "disruption": {"consolidateAfter": "30s"}}
        });
        merge(&mut pool, extra);
        serde_json::from_value(pool).expect("pool")
    }

    fn claim(extra: Value) -> NodeClaim {
        let mut claim = json!({
            "metadata": {"name": "default-x", "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "spot"},
                         "annotations": {"karpenter.sh/nodepool-hash": "111", "karpenter.sh/nodepool-hash-version": "v3"}}
        });
        merge(&mut claim, extra);
        node_claim(claim)
    }

    #[test]
    fn static_drift_needs_both_hashes_at_the_same_version() {
        assert!(!static_drift(&pool(json!({})), &claim(json!({}))));
        let moved =
            pool(json!({"metadata": {"annotations": {"karpenter.sh/nodepool-hash": "222"}}}));
        assert!(static_drift(&moved, &claim(json!({}))));
        let other_version = claim(
            json!({"metadata": {"annotations": {"karpenter.sh/nodepool-hash-version": "v2"}}}),
        );
        assert!(
            !static_drift(&moved, &other_version),
            "a new hash version re-stamps, it does not drift"
        );
        let unstamped = claim(json!({"metadata": {"annotations": null}}));
        assert!(!static_drift(&moved, &unstamped));
    }

    #[test]
    fn requirements_drift_when_the_claims_labels_no_longer_fit() {
        assert!(!requirements_drift(&pool(json!({})), &claim(json!({}))));
        let narrowed = pool(json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}}));
        assert!(requirements_drift(&narrowed, &claim(json!({}))));
        let new_key = pool(json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "example.com/team", "operator": "In", "values": ["a"]}]}}}}));
        assert!(requirements_drift(&new_key, &claim(json!({}))));
        let excluded = pool(json!({"spec": {"template": {"spec": {"requirements": [
            {"key": "example.com/team", "operator": "DoesNotExist"}]}}}}));
        assert!(!requirements_drift(&excluded, &claim(json!({}))));
    }

    fn initialized(ago_seconds: i64, last_pod_event_ago: Option<i64>) -> NodeClaim {
        let at = |s: i64| {
            (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(s))
                .to_string()
        };
        let mut status = json!({"conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized",
            "message": "", "lastTransitionTime": at(ago_seconds)}]});
        if let Some(ago) = last_pod_event_ago {
            status["lastPodEventTime"] = json!(at(ago));
        }
        claim(json!({"status": status}))
    }

    #[test]
    fn consolidatable_after_consolidate_after_since_the_last_pod_event() {
        let pool = pool(json!({}));
        assert_eq!(
            consolidatable(&pool, &claim(json!({}))),
            Consolidatable::No,
            "not initialized"
        );
        assert_eq!(
            consolidatable(&pool, &initialized(60, None)),
            Consolidatable::Now
        );
        let Consolidatable::After(wait) = consolidatable(&pool, &initialized(60, Some(10))) else {
            panic!("waits");
        };
        assert!(
            wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        let never = self::pool(json!({"spec": {"disruption": {"consolidateAfter": "Never"}}}));
        assert_eq!(
            consolidatable(&never, &initialized(6000, None)),
            Consolidatable::No
        );
        let at_once = self::pool(json!({"spec": {"disruption": {"consolidateAfter": "0s"}}}));
        assert_eq!(
            consolidatable(&at_once, &initialized(0, Some(0))),
            Consolidatable::Now
        );
    }
}
