//! NodeOverlay status (Karpenter's `nodeoverlay` controller, gate
//! `NodeOverlay`): every overlay's `ValidationSucceeded` and its roll-up
//! `Ready`, from the live snapshot provisioning and disruption plan with
//! ([`crate::scheduling::prepare`]: the provisioning pools, their catalogs,
//! the overlays over them): `RuntimeValidation` for an overlay the API
//! server took but Karpenter's rules refuse, `Conflict` for one an overlay
//! of its weight already covers. Re-evaluated when an overlay, a pool or a
//! node class changes, and every 6 hours (the provider's prices move), as
//! upstream.

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::ConditionsExt as _;
use karpenter_api::nodeoverlay::{
    CONDITION_VALIDATION_SUCCEEDED, CONFLICT_MESSAGE, REASON_CONFLICT, REASON_RUNTIME_VALIDATION,
};
use karpenter_api::nodepool::NodeClassReadiness;
use karpenter_snapshot::overlay::Verdict;
use kube::Resource;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::objects::conditions::Conditions;
use crate::objects::patch;
use crate::scheduling::{prepare, provisioning_pools};
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// How often overlays are evaluated again without a change (Karpenter's
/// requeue: instance types and prices change under them).
const REEVALUATE: Duration = Duration::from_secs(6 * 60 * 60);

/// The overlay status controller.
pub struct NodeOverlays {
    pub ctx: Context,
}

impl Reconciler for NodeOverlays {
    const NAME: &'static str = "nodeoverlay";

    fn relevant(versions: &Versions) -> u64 {
        // Overlays wake the pool controllers (they change pools' catalogs).
        versions.node_pools + versions.node_classes
    }

    /// One key for all overlays: a verdict depends on every other overlay.
    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        if index.node_overlays.is_empty() {
            return Vec::new();
        }
        // Pools and classes by what changes a verdict (their spec and their
        // readiness), not every status write (a pool's usage moves with
        // every node).
        let pools = index.node_pools.iter().map(|p| {
            let ready = p.status.as_ref().is_some_and(|s| s.conditions.is_ready());
            format!("{:?}/{ready}", p.metadata.generation)
        });
        let classes = index.node_classes.iter().map(|c| {
            let ready = NodeClassReadiness::of(Some(c)).ready;
            format!("{:?}/{ready}", c.metadata.generation)
        });
        let states: Vec<String> = pools.chain(classes).collect();
        let versions = index
            .node_overlays
            .iter()
            .map(|o| o.meta().resource_version.as_deref())
            .chain(states.iter().map(|v| Some(v.as_str())));
        vec![((String::new(), String::new()), fingerprint(versions))]
    }

    async fn reconcile(&self, _key: Key, index: Arc<Index>) -> Result<Requeue> {
        // The very evaluation provisioning and disruption make.
        let pools = provisioning_pools(&self.ctx, &index);
        let verdicts = prepare(&self.ctx, &index, pools).await.overlays;
        let api = kube::Api::<karpenter_api::NodeOverlay>::all(self.ctx.client.clone());
        for (name, verdict) in verdicts {
            let Some(current) = index.node_overlays.named(&name) else {
                continue;
            };
            let mut next = (**current).clone();
            let generation = next.metadata.generation.unwrap_or(0);
            let created = next.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let status = next.status.get_or_insert_with(Default::default);
            let mut conditions = Conditions::new(
                &mut status.conditions,
                generation,
                created,
                &[CONDITION_VALIDATION_SUCCEEDED],
            );
            match verdict {
                Verdict::Applied => conditions.set_true(CONDITION_VALIDATION_SUCCEEDED),
                Verdict::Invalid(message) => conditions.set_false(
                    CONDITION_VALIDATION_SUCCEEDED,
                    REASON_RUNTIME_VALIDATION,
                    &message,
                ),
                Verdict::Conflict => conditions.set_false(
                    CONDITION_VALIDATION_SUCCEEDED,
                    REASON_CONFLICT,
                    CONFLICT_MESSAGE,
                ),
            }
            if next.status != current.status {
                patch::status(&api, current.as_ref(), &next).await?;
            }
        }
        Ok(Some(REEVALUATE))
    }
}
