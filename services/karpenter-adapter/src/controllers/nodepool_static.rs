//! Static NodePools (`spec.replicas`, gate `StaticCapacity`; Karpenter's
//! `static.provisioning` and `static.deprovisioning`): a static pool keeps
//! exactly `replicas` NodeClaims.
//!
//! - Provisioning: a Ready static pool gets what `replicas` lacks, counting
//!   its claims that are not being deleted, within the room `limits.nodes`
//!   leaves counting every claim (`NodePoolSpec::static_claims_to_create`);
//!   each new claim is the pool's template with no pods
//!   (`karpenter_snapshot::static_claim_plan`), created as provisioning
//!   creates claims.
//! - Deprovisioning: claims over `replicas` are deleted (graceful
//!   termination drains them), taken in Karpenter's order: claims that never
//!   launched, then claims whose node has nothing to move, then the rest,
//!   nodes without do-not-disrupt pods before those with them, fewest pods
//!   to move first. Budgets do not apply, as upstream.
//!
//! Static pools are never provisioned for pending pods, consolidated or
//! emptied (`NodePool::provisions`, the planner's candidates).

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::{ConditionsExt as _, NodeClaim, NodePool};
use kube::{Resource, ResourceExt};

use crate::controllers::provisioning::create_all;
use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// How often a static pool is looked at again without a change.
const RECHECK: Duration = Duration::from_secs(60);
/// How soon a pool at its `limits.nodes` is looked at again.
const AT_LIMIT: Duration = Duration::from_secs(30);

/// Scales static pools up and down to `replicas`.
pub struct StaticPools {
    pub ctx: Context,
}

/// A static pool's claims: all of them, and those not being deleted.
fn claims_of<'a>(index: &'a Index, pool: &str) -> (Vec<&'a Arc<NodeClaim>>, i64) {
    let all: Vec<&Arc<NodeClaim>> = index
        .node_claims
        .iter()
        .filter(|c| c.node_pool() == Some(pool))
        .collect();
    let total = i64::try_from(all.len()).unwrap_or(i64::MAX);
    (all, total)
}

fn active(claims: &[&Arc<NodeClaim>]) -> Vec<Arc<NodeClaim>> {
    claims
        .iter()
        .filter(|c| c.meta().deletion_timestamp.is_none())
        .map(|c| Arc::clone(c))
        .collect()
}

impl StaticPools {
    /// The order Karpenter removes a static pool's claims in (cheapest to
    /// lose first).
    fn removal_order(&self, index: &Index, mut claims: Vec<Arc<NodeClaim>>) -> Vec<Arc<NodeClaim>> {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let rank = |claim: &NodeClaim| {
            let Some(node) = index.node_of(claim).filter(|_| {
                claim
                    .status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|id| !id.is_empty())
            }) else {
                return (0, false, 0);
            };
            let pods = index.pods_on(&node.name_any());
            let moving = pods.iter().filter(|p| p.is_reschedulable()).count();
            let protected = pods.iter().any(|p| p.do_not_disrupt(now));
            let tier = if moving == 0 && !protected { 1 } else { 2 };
            (tier, protected, moving)
        };
        claims.sort_by_cached_key(|c| rank(c));
        claims
    }

    async fn scale_up(
        &self,
        index: &Arc<Index>,
        pool: &Arc<NodePool>,
        active: i64,
        total: i64,
    ) -> Result<Requeue> {
        let missing = pool.spec.static_claims_to_create(active, total);
        let lacking = pool.spec.replicas.unwrap_or(0) > active;
        if missing <= 0 {
            if lacking {
                tracing::info!(nodepool = %pool.name_any(), "nodepool node limit reached");
                return Ok(Some(AT_LIMIT));
            }
            return Ok(Some(RECHECK));
        }
        tracing::info!(
            nodepool = %pool.name_any(),
            current = active,
            desired = pool.spec.replicas.unwrap_or(0),
            provision = missing,
            "provisioning nodeclaims to satisfy replica count"
        );
        let plan = karpenter_snapshot::static_claim_plan(pool);
        let plans = vec![plan; usize::try_from(missing).unwrap_or(0)];
        create_all(
            &self.ctx,
            index,
            std::slice::from_ref(pool),
            &plans,
            "provisioned",
        )
        .await?;
        Ok(Some(RECHECK))
    }
}

impl Reconciler for StaticPools {
    const NAME: &'static str = "nodepool.static";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_pools + versions.node_claims + versions.nodes + versions.pods
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        index
            .node_pools
            .iter()
            .filter(|p| p.spec.is_static() && self.ctx.manages_pool(p))
            .map(|pool| {
                let name = pool.name_any();
                let (claims, _) = claims_of(index, &name);
                let versions = std::iter::once(pool.meta().resource_version.as_deref())
                    .chain(claims.iter().map(|c| c.meta().resource_version.as_deref()));
                ((String::new(), name), fingerprint(versions))
            })
            .collect()
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(pool) = index.node_pools.named(&key.1).cloned() else {
            return Ok(None);
        };
        if !pool.spec.is_static()
            || !self.ctx.manages_pool(&pool)
            || pool.meta().deletion_timestamp.is_some()
        {
            return Ok(None);
        }
        let (claims, total) = claims_of(&index, &key.1);
        let active = active(&claims);
        let active_count = i64::try_from(active.len()).unwrap_or(i64::MAX);
        let excess = pool.spec.static_claims_in_excess(active_count);
        if excess > 0 {
            tracing::info!(nodepool = %key.1, current = active_count, desired = pool.spec.replicas.unwrap_or(0),
                deprovision = excess, "deprovisioning nodeclaims to satisfy replica count");
            let api = self.ctx.node_claims();
            let doomed = self.removal_order(&index, active);
            for claim in doomed.iter().take(usize::try_from(excess).unwrap_or(0)) {
                patch::delete(&api, claim.as_ref()).await?;
            }
            return Ok(Some(RECHECK));
        }
        // Karpenter provisions only for a Ready pool.
        if !pool
            .status
            .as_ref()
            .is_some_and(|s| s.conditions.is_ready())
        {
            return Ok(None);
        }
        self.scale_up(&index, &pool, active_count, total).await
    }
}
