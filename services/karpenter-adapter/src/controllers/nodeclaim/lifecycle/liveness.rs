//! Liveness: a claim that does not launch within the launch timeout, or
//! whose Node does not register within the registration timeout, is
//! deleted, so its pods are planned again. Both clocks run from the last
//! transition of their condition, which for a claim still waiting is its
//! creation.

use karpenter_api::NodeClaim;
use karpenter_api::nodeclaim::{CONDITION_LAUNCHED, CONDITION_REGISTERED};

use super::Step;
use crate::controllers::Context;
use crate::error::Result;
use crate::metrics::Disrupted;
use crate::objects::claim::since_transition;
use crate::objects::patch;

pub(super) async fn check(ctx: &Context, claim: &NodeClaim) -> Result<Step> {
    if claim.is_registered() {
        return Ok(Step::Continue(None));
    }
    let (timeout, condition, reason) = if claim.is_launched() {
        (
            ctx.timing.registration_ttl,
            CONDITION_REGISTERED,
            "registration_timeout",
        )
    } else {
        (ctx.timing.launch_ttl, CONDITION_LAUNCHED, "launch_timeout")
    };
    let waited = since_transition(claim, condition);
    if waited < timeout {
        return Ok(Step::Continue(Some(timeout - waited)));
    }
    tracing::warn!(?waited, reason, "terminating due to timeout");
    patch::delete(&ctx.node_claims(), claim).await?;
    ctx.metrics
        .claim_disrupted(claim, Disrupted::because(reason));
    Ok(Step::Deleted)
}
