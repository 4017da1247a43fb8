//! Reboot as a repair action (Karpenter v1.15's `nodeclaim.reboot`): a
//! repair command whose policy reboots takes the node out of service, lets
//! its pods leave, asks the provider to reboot the instance in place, and
//! waits for the node to come back with a new boot ID and `Ready=True`.
//!
//! ```text
//!   disruption starts a reboot: rebooting taint; claim Rebooting=True
//!     (RebootRequested), DisruptionReason=Unhealthy; drain bound and boot ID
//!     noted on the claim
//!   RebootRequested: drain until requested + max(bound, 5 s) (pods left are
//!     deleted then) ─▶ Reboot(provider ID, operation ID) ─▶ RebootIssued
//!       UNIMPLEMENTED / NOT_FOUND / refused, or no answer in 5 min ─▶ failed
//!   RebootIssued: new boot ID and Ready ─▶ Rebooting=False (RebootSucceeded),
//!     taint off, the reboot remembered (its conditions count from now;
//!     the third reboot within a day becomes a replacement)
//!       not back within 20 min ─▶ failed
//!   failed: RebootFailed event, the claim deleted (provisioning replaces it)
//! ```
//!
//! The operation ID is derived from the claim's UID, the request time and
//! the boot ID before it, so a retried call (or a restarted adapter) never
//! reboots twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_api::repair::{REBOOT_HISTORY_SECONDS, RebootHistory};
use karpenter_api::{ConditionStatus, ConditionsExt as _, NodeClaim};
use karpenter_core::labels;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tonic::Code;

use crate::controllers::node::termination::drain::{Drain, drain};
use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::{Error, Result};
use crate::events::{Event, Kind};
use crate::metrics::ResultLabels;
use crate::objects::claim::claim_conditions;
use crate::objects::{disrupted, patch};
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// The claim condition a reboot is tracked by.
pub const CONDITION_REBOOTING: &str = "Rebooting";
const REQUESTED: &str = "RebootRequested";
const ISSUED: &str = "RebootIssued";
const SUCCEEDED: &str = "RebootSucceeded";
/// The drain bound of the reboot (a Go duration), on the claim.
pub const GRACE_ANNOTATION: &str = "karpenter.sh/reboot-termination-grace-period";
/// The node's boot ID before the reboot, on the claim.
pub const PRE_BOOT_ID_ANNOTATION: &str = "karpenter.sh/reboot-pre-boot-id";
/// Pods get at least this long to leave before the reboot.
const MIN_DRAIN: Duration = Duration::from_secs(5);
/// How long the provider may keep failing to take the reboot.
const ISSUANCE_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);
/// How long the node may take to come back.
const RECOVERY_TIMEOUT: SignedDuration = SignedDuration::from_mins(20);

/// The reboots this adapter asked for, by node name (forgotten a day after
/// the last one).
#[derive(Clone, Default)]
pub struct Reboots {
    nodes: Arc<Mutex<BTreeMap<String, RebootHistory>>>,
}

impl Reboots {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, RebootHistory>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every node's history, as of `now` (older entries pruned).
    pub fn history(&self, now: i64) -> BTreeMap<String, RebootHistory> {
        let mut nodes = self.lock();
        nodes.retain(|_, h| {
            h.requested
                .retain(|at| now.saturating_sub(*at) < REBOOT_HISTORY_SECONDS);
            !h.requested.is_empty()
        });
        nodes.clone()
    }

    fn requested(&self, node: &str, at: i64) {
        self.lock()
            .entry(node.to_owned())
            .or_default()
            .requested
            .push(at);
    }

    fn finished(&self, node: &str, at: i64) {
        self.lock().entry(node.to_owned()).or_default().finished = Some(at);
    }
}

fn boot_id(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .unwrap_or_default()
}

/// Starts a reboot for repair of `node` (a command the scheduler planned):
/// the taint, the claim's conditions and what the reboot controller needs.
pub async fn start(
    ctx: &Context,
    index: &Index,
    node: &Node,
    condition: &str,
    drain_bound: Option<Duration>,
) -> Result<()> {
    let Some(claim) = index.claim_of(node).filter(|c| ctx.acts_on(c)) else {
        return Err(Error::Invalid(format!(
            "node {} has no claim to reboot",
            node.name_any()
        )));
    };
    disrupted::add(ctx, node, labels::REBOOTING_TAINT_KEY).await?;
    let bound =
        drain_bound.or_else(|| Some(claim.spec.termination_grace_period.as_ref()?.as_std()));
    let mut annotations = json!({ PRE_BOOT_ID_ANNOTATION: boot_id(node) });
    annotations[GRACE_ANNOTATION] = match bound {
        Some(bound) => json!(karpenter_core::duration::format_go_duration(bound)),
        None => serde_json::Value::Null,
    };
    let latest = patch::merge(
        &ctx.node_claims(),
        claim.as_ref(),
        json!({"metadata": {"annotations": annotations}}),
    )
    .await?;
    let mut updated = latest.clone();
    let mut conditions = claim_conditions(&mut updated);
    conditions.set(
        karpenter_api::nodeclaim::CONDITION_DISRUPTION_REASON,
        ConditionStatus::True,
        "Unhealthy",
        "Unhealthy",
    );
    conditions.set(
        CONDITION_REBOOTING,
        ConditionStatus::True,
        REQUESTED,
        &format!("rebooting for {condition}"),
    );
    patch::status(&ctx.node_claims(), &latest, &updated).await?;
    ctx.reboots
        .requested(&node.name_any(), Timestamp::now().as_second());
    Ok(())
}

/// The reboot controller; a key is a NodeClaim's name.
pub struct NodeClaimReboot {
    pub ctx: Context,
}

fn rebooting(claim: &NodeClaim) -> Option<&karpenter_api::Condition> {
    claim
        .conditions()
        .condition(CONDITION_REBOOTING)
        .filter(|c| c.status == ConditionStatus::True)
}

impl Reconciler for NodeClaimReboot {
    const NAME: &'static str = "nodeclaim.reboot";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_claims + versions.nodes + versions.pods
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        self.ctx.claim_keys(index, |claim| {
            rebooting(claim)?;
            let node = index.node_of(claim);
            Some(fingerprint([
                claim.meta().resource_version.as_deref(),
                node.and_then(|n| n.meta().resource_version.as_deref()),
            ]))
        })
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let ctx = &self.ctx;
        let Some(claim) = ctx.claim_to_act_on(&index, &key.1) else {
            return Ok(None);
        };
        let Some(condition) = rebooting(&claim).cloned() else {
            return Ok(None);
        };
        let Some(node) = index.node_of(&claim).cloned() else {
            return fail(ctx, &claim, None, "provider_error", "the node is gone").await;
        };
        let since = condition.last_transition_time.0;
        match condition.reason.as_str() {
            ISSUED => observe(ctx, &claim, &node, since).await,
            _ => issue(ctx, &index, &claim, &node, since).await,
        }
    }
}

/// Drains, then asks the provider to reboot.
async fn issue(
    ctx: &Context,
    index: &Index,
    claim: &NodeClaim,
    node: &Node,
    requested: Timestamp,
) -> Result<Requeue> {
    let bound = claim
        .annotations()
        .get(GRACE_ANNOTATION)
        .and_then(|d| karpenter_core::duration::parse_go_duration(d).ok())
        .unwrap_or_default()
        .max(MIN_DRAIN);
    let deadline = requested
        .checked_add(SignedDuration::try_from(bound).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    let now = Timestamp::now();
    let pods = index.pods_on(&node.name_any());
    if let Drain::Waiting(_) = drain(ctx, node, pods, Some(deadline), "reboot").await?
        && now < deadline
    {
        return Ok(Some(Duration::from_secs(1)));
    }
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    let pre_boot = claim
        .annotations()
        .get(PRE_BOOT_ID_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let operation = format!(
        "{}-{}-{pre_boot}",
        claim.uid().unwrap_or_default(),
        requested.as_nanosecond()
    );
    match ctx.clients.reboot(&provider_id, &operation).await {
        Ok(()) => {
            tracing::info!(node = %node.name_any(), %operation, "reboot issued");
            set_rebooting(ctx, claim, ConditionStatus::True, ISSUED, "reboot issued").await?;
            Ok(Some(ctx.timing.reboot_poll))
        }
        Err(status) if refused(status.code()) => {
            let message = format!("the provider refused the reboot: {}", status.message());
            fail(ctx, claim, Some(node), "provider_error", &message).await
        }
        Err(status) if now.duration_since(requested) > ISSUANCE_TIMEOUT => {
            let message = format!("the provider did not take the reboot: {}", status.message());
            fail(ctx, claim, Some(node), "provider_error", &message).await
        }
        Err(status) => {
            tracing::warn!(node = %node.name_any(), error = %status.message(), "reboot not issued yet");
            Ok(Some(Duration::from_secs(5)))
        }
    }
}

/// Answers a retry cannot change.
fn refused(code: Code) -> bool {
    matches!(
        code,
        Code::Unimplemented
            | Code::NotFound
            | Code::InvalidArgument
            | Code::PermissionDenied
            | Code::FailedPrecondition
    )
}

/// Waits for the node to come back from the reboot.
async fn observe(
    ctx: &Context,
    claim: &NodeClaim,
    node: &Node,
    issued: Timestamp,
) -> Result<Requeue> {
    let pre_boot = claim.annotations().get(PRE_BOOT_ID_ANNOTATION);
    let back = pre_boot.is_none_or(|before| *before != boot_id(node))
        && karpenter_api::node::is_ready(node);
    if back {
        disrupted::remove(ctx, node, labels::REBOOTING_TAINT_KEY).await?;
        let mut updated = claim.clone();
        let mut conditions = claim_conditions(&mut updated);
        conditions.set(
            CONDITION_REBOOTING,
            ConditionStatus::False,
            SUCCEEDED,
            "the node came back",
        );
        conditions.clear(karpenter_api::nodeclaim::CONDITION_DISRUPTION_REASON);
        patch::status(&ctx.node_claims(), claim, &updated).await?;
        ctx.reboots
            .finished(&node.name_any(), Timestamp::now().as_second());
        count(ctx, "succeeded");
        for event in [
            Event::new(
                node,
                Kind::Normal,
                "RebootObserved",
                "Node came back from a reboot for repair",
            ),
            Event::new(
                claim,
                Kind::Normal,
                "RebootObserved",
                "Node came back from a reboot for repair",
            ),
        ] {
            ctx.recorder.emit(event);
        }
        return Ok(None);
    }
    if Timestamp::now().duration_since(issued) > RECOVERY_TIMEOUT {
        let message = "the node did not come back within 20m0s of the reboot";
        return fail(ctx, claim, Some(node), "recovery_timeout", message).await;
    }
    Ok(Some(ctx.timing.reboot_poll))
}

async fn set_rebooting(
    ctx: &Context,
    claim: &NodeClaim,
    status: ConditionStatus,
    reason: &str,
    message: &str,
) -> Result<()> {
    let mut updated = claim.clone();
    claim_conditions(&mut updated).set(CONDITION_REBOOTING, status, reason, message);
    patch::status(&ctx.node_claims(), claim, &updated)
        .await
        .map(|_| ())
}

/// A reboot that did not repair the node: the node is replaced instead.
async fn fail(
    ctx: &Context,
    claim: &NodeClaim,
    node: Option<&Node>,
    result: &str,
    message: &str,
) -> Result<Requeue> {
    tracing::warn!(claim = %claim.name_any(), result, message, "reboot failed; replacing the node");
    set_rebooting(ctx, claim, ConditionStatus::False, "RebootFailed", message).await?;
    count(ctx, result);
    let mut events = vec![Event::new(claim, Kind::Warning, "RebootFailed", message)];
    if let Some(node) = node {
        events.push(Event::new(node, Kind::Warning, "RebootFailed", message));
    }
    for event in events {
        ctx.recorder.emit(event);
    }
    match patch::delete(&ctx.node_claims(), claim).await {
        Ok(()) => Ok(None),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

fn count(ctx: &Context, result: &str) {
    ctx.metrics
        .nodeclaims_reboots
        .get_or_create(&ResultLabels {
            result: result.to_owned(),
        })
        .inc();
}
