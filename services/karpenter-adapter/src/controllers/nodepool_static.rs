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
//! - Drift: the disruption controller replaces a drifted node from the
//!   template (the planner's static drift). While the command runs, the
//!   old claim is pending disruption (`NodeClaim::is_pending_disruption`):
//!   it counts toward `replicas` for scale up, not for scale down, so
//!   neither the replacement nor the old node is taken for an excess.
//! - Deprovisioning: running claims over `replicas` are deleted (graceful
//!   termination drains them), taken in Karpenter's order: claims that never
//!   launched, then claims whose node has nothing to move, then the rest,
//!   nodes without do-not-disrupt pods before those with them, fewest pods
//!   to move first. Budgets do not apply, as upstream.
//!
//! The runner may run a pool again on an index from before this
//! controller's own writes (the watch lags); the claims it created or
//! deleted and the index does not show yet are counted as they will be
//! (Karpenter reserves node counts in its cluster state for the same
//! reason), so a pool never gets twice what it lacks, nor loses twice its
//! excess.
//!
//! Static pools are never provisioned for pending pods, consolidated or
//! emptied (`NodePool::provisions`, the planner's candidates).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
/// Claims created or deleted in one pass at most (`replicas` has no upper
/// bound); the rest follow in the next pass, at once.
const MAX_PER_PASS: i64 = 100;
/// How long a write the index does not show yet is counted.
const UNSEEN_FOR: Duration = Duration::from_secs(60);

/// Scales static pools up and down to `replicas`.
pub struct StaticPools {
    pub ctx: Context,
    unseen: Mutex<Unseen>,
}

/// This controller's writes the index may not show yet, by claim name.
#[derive(Default)]
struct Unseen {
    /// Created, with their pool.
    created: HashMap<String, (String, Instant)>,
    deleted: HashMap<String, Instant>,
}

impl Unseen {
    /// Forgets what the index shows now, or what is too old to wait for.
    fn prune(&mut self, index: &Index) {
        self.created.retain(|name, (_, at)| {
            at.elapsed() < UNSEEN_FOR && index.node_claims.named(name).is_none()
        });
        self.deleted.retain(|name, at| {
            at.elapsed() < UNSEEN_FOR
                && index
                    .node_claims
                    .named(name)
                    .is_some_and(|c| c.meta().deletion_timestamp.is_none())
        });
    }
}

/// A static pool's claims as they will be once the index shows this
/// controller's writes: those running (not being deleted, not taken by a
/// disruption command), those a command took (static drift replaces them:
/// their replacements are running already), and how many in any state.
struct Counted {
    running: Vec<Arc<NodeClaim>>,
    pending_disruption: i64,
    /// Created but not shown yet.
    created: i64,
    total: i64,
}

impl Counted {
    /// The claims that serve the pool: scale down never goes below
    /// `replicas` of them (a replacement in flight is not an excess).
    fn running(&self) -> i64 {
        i64::try_from(self.running.len())
            .unwrap_or(i64::MAX)
            .saturating_add(self.created)
    }

    /// The claims not being deleted: scale up fills `replicas` of them.
    fn active(&self) -> i64 {
        self.running().saturating_add(self.pending_disruption)
    }
}

impl StaticPools {
    pub fn new(ctx: Context) -> Self {
        Self {
            ctx,
            unseen: Mutex::default(),
        }
    }

    fn unseen(&self) -> std::sync::MutexGuard<'_, Unseen> {
        // A panic while holding it leaves plain data; go on with it.
        self.unseen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, index: &Index, pool: &str) -> Counted {
        let mut unseen = self.unseen();
        unseen.prune(index);
        let all: Vec<&Arc<NodeClaim>> = index
            .node_claims
            .iter()
            .filter(|c| c.node_pool() == Some(pool))
            .collect();
        let (pending, running): (Vec<Arc<NodeClaim>>, Vec<Arc<NodeClaim>>) = all
            .iter()
            .filter(|c| c.meta().deletion_timestamp.is_none())
            .filter(|c| !unseen.deleted.contains_key(&c.name_any()))
            .map(|c| Arc::clone(c))
            .partition(|c| c.is_pending_disruption());
        let created = unseen.created.values().filter(|(p, _)| p == pool).count();
        let created = i64::try_from(created).unwrap_or(i64::MAX);
        let total = i64::try_from(all.len())
            .unwrap_or(i64::MAX)
            .saturating_add(created);
        Counted {
            running,
            pending_disruption: i64::try_from(pending.len()).unwrap_or(i64::MAX),
            created,
            total,
        }
    }

    /// The order Karpenter removes a static pool's claims in (cheapest to
    /// lose first): never launched, nothing to move, then do-not-disrupt
    /// last and the fewest pods to move first.
    fn removal_order(&self, index: &Index, mut claims: Vec<Arc<NodeClaim>>) -> Vec<Arc<NodeClaim>> {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let rank = |claim: &NodeClaim| {
            let launched = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|id| !id.is_empty());
            let Some(node) = index.node_of(claim).filter(|_| launched) else {
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

    async fn scale_down(
        &self,
        index: &Index,
        pool: &str,
        counted: Counted,
        excess: i64,
    ) -> Result<Requeue> {
        tracing::info!(nodepool = %pool, current = counted.running(), deprovision = excess,
            "deprovisioning nodeclaims to satisfy replica count");
        let api = self.ctx.node_claims();
        let doomed = self.removal_order(index, counted.running);
        let take = usize::try_from(excess.min(MAX_PER_PASS)).unwrap_or(0);
        for claim in doomed.iter().take(take) {
            patch::delete(&api, claim.as_ref()).await?;
            self.unseen()
                .deleted
                .insert(claim.name_any(), Instant::now());
        }
        Ok(Some(if excess > MAX_PER_PASS {
            Duration::ZERO
        } else {
            RECHECK
        }))
    }

    async fn scale_up(
        &self,
        index: &Arc<Index>,
        pool: &Arc<NodePool>,
        counted: &Counted,
    ) -> Result<Requeue> {
        let name = pool.name_any();
        let missing = pool
            .spec
            .static_claims_to_create(counted.active(), counted.total);
        if missing <= 0 {
            if pool.spec.static_claims_to_create(counted.active(), 0) > 0 {
                tracing::info!(nodepool = %name, "nodepool node limit reached");
                return Ok(Some(AT_LIMIT));
            }
            return Ok(Some(RECHECK));
        }
        tracing::info!(
            nodepool = %name,
            current = counted.active(),
            desired = pool.spec.replicas.unwrap_or(0),
            provision = missing,
            "provisioning nodeclaims to satisfy replica count"
        );
        let this_pass = usize::try_from(missing.min(MAX_PER_PASS)).unwrap_or(0);
        let plans = vec![karpenter_snapshot::static_claim_plan(pool); this_pass];
        let created = create_all(
            &self.ctx,
            index,
            std::slice::from_ref(pool),
            &plans,
            "provisioned",
        )
        .await?;
        let now = Instant::now();
        let mut unseen = self.unseen();
        for claim in created {
            unseen.created.insert(claim, (name.clone(), now));
        }
        Ok(Some(if missing > MAX_PER_PASS {
            Duration::ZERO
        } else {
            RECHECK
        }))
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
                let claims = index
                    .node_claims
                    .iter()
                    .filter(|c| c.node_pool() == Some(name.as_str()));
                let versions = std::iter::once(pool.meta().resource_version.as_deref())
                    .chain(claims.map(|c| c.meta().resource_version.as_deref()));
                let print = fingerprint(versions);
                ((String::new(), name), print)
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
        let counted = self.count(&index, &key.1);
        let excess = pool.spec.static_claims_in_excess(counted.running());
        if excess > 0 {
            return self.scale_down(&index, &key.1, counted, excess).await;
        }
        // Karpenter provisions only for a Ready pool.
        if !pool
            .status
            .as_ref()
            .is_some_and(|s| s.conditions.is_ready())
        {
            return Ok(None);
        }
        self.scale_up(&index, &pool, &counted).await
    }
}
