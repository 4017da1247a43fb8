//! Expiration (Karpenter's `nodeclaim.expiration`): a claim whose
//! `spec.expireAfter` has passed since its creation is deleted. This is
//! forceful disruption: no budget, do-not-disrupt annotation or PDB holds
//! it back; the termination flow drains the node, bounded by the claim's
//! `terminationGracePeriod`. `expireAfter` is the claim's own (copied from
//! its pool at creation), so changing the pool does not move it.
//!
//! ```text
//!   claim ──creationTimestamp + expireAfter ≤ now?──▶ Expired=True, delete (reason "expired")
//!         └─ not yet ──▶ requeue at expiry;  Never ──▶ nothing
//! ```

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::NodeClaim;
use kube::Resource;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::metrics::Disrupted;
use crate::objects::claim::elapsed;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// The condition an expired claim carries while it drains.
pub const CONDITION_EXPIRED: &str = "Expired";

/// How long until `claim` expires: `None` for `Never`, zero once expired.
pub fn remaining(claim: &NodeClaim) -> Option<Duration> {
    let expire_after = claim.spec.expire_after()?;
    let age = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| elapsed(t.0))
        .unwrap_or_default();
    Some(expire_after.saturating_sub(age))
}

/// The expiration controller.
pub struct Expiration {
    pub ctx: Context,
}

impl Reconciler for Expiration {
    const NAME: &'static str = "nodeclaim.expiration";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_claims
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        self.ctx.claim_keys(index, |claim| {
            Some(fingerprint([claim.meta().resource_version.as_deref()]))
        })
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(claim) = self.ctx.claim_to_act_on(&index, &key.1) else {
            return Ok(None);
        };
        match remaining(&claim) {
            None => Ok(None),
            Some(left) if !left.is_zero() => Ok(Some(left)),
            Some(_) => {
                tracing::info!(
                    nodepool = claim.node_pool().unwrap_or_default(),
                    "deleting expired nodeclaim"
                );
                // Say why on the claim while it drains.
                let mut marked = (*claim).clone();
                crate::objects::claim::claim_conditions(&mut marked).set(
                    CONDITION_EXPIRED,
                    karpenter_api::ConditionStatus::True,
                    "Expired",
                    "expireAfter has passed since the claim was created",
                );
                patch::status(&self.ctx.node_claims(), claim.as_ref(), &marked).await?;
                patch::delete(&self.ctx.node_claims(), &claim).await?;
                let reschedulable_pods = index.reschedulable_pods_of(&claim);
                self.ctx.metrics.claim_disrupted(
                    &claim,
                    Disrupted {
                        reason: "expired",
                        reschedulable_pods: Some(reschedulable_pods),
                        ..Disrupted::default()
                    },
                );
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::node_claim;
    use serde_json::json;

    fn claim(expire_after: &str, age_seconds: i64) -> NodeClaim {
        let created = k8s_openapi::jiff::Timestamp::now()
            - k8s_openapi::jiff::SignedDuration::from_secs(age_seconds);
        node_claim(json!({
            "metadata": {"creationTimestamp": created.to_string()},
            "spec": {"expireAfter": expire_after}
        }))
    }

    #[test]
    fn a_claim_expires_its_own_expire_after_past_its_creation() {
        let young = remaining(&claim("1h", 600)).expect("expires");
        assert!(
            young > Duration::from_secs(2_900) && young <= Duration::from_secs(3_000),
            "{young:?}"
        );
        assert_eq!(remaining(&claim("1h", 7_200)), Some(Duration::ZERO));
        assert_eq!(remaining(&claim("Never", 1_000_000)), None);
    }
}
