//! Reboot as a repair action (Karpenter v1.15's `nodeclaim.reboot`): a
//! repair command whose policy reboots takes the node out of service, lets
//! its pods leave, asks the provider to reboot the instance in place, and
//! waits for the node to come back with a new boot ID and `Ready=True`.
//!
//! ```text
//!   disruption starts a reboot (once: a claim already Rebooting is left):
//!     claim Rebooting=True (RebootRequested), DisruptionReason=Unhealthy;
//!     drain bound, boot ID and the request time noted on the claim; then
//!     the rebooting taint
//!   RebootRequested: drain (with a bound: until requested + max(bound, 5 s),
//!     pods left deleted then; without one: until drained, PDBs honoured)
//!     ─▶ Reboot(provider ID, operation ID) ─▶ RebootIssued (time noted)
//!       UNIMPLEMENTED / NOT_FOUND / refused, or failing for 5 min ─▶ failed
//!   RebootIssued: new boot ID and Ready ─▶ taint off, Rebooting=False
//!     (RebootSucceeded), the end noted (its conditions count from then;
//!     the third reboot within a day becomes a replacement)
//!       not back within 20 min of the reboot ─▶ failed
//!   failed: RebootFailed event, the claim deleted (provisioning replaces it)
//! ```
//!
//! A reboot's history lives on its NodeClaim (`karpenter_api::repair`'s
//! annotations), so a restarted or new leader knows it, and a new node that
//! takes an old name starts with none. A rebooting taint whose claim is not
//! rebooting (a start that failed half-way) is removed by disruption's
//! leftover cleanup.
//!
//! The operation ID is derived from the claim's UID, the request time and
//! the boot ID before it, so a retried call (or a restarted adapter) never
//! reboots twice.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_api::repair::{
    REBOOT_FINISHED_ANNOTATION, REBOOT_REQUESTED_ANNOTATION, RebootHistory,
};
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
const FAILED: &str = "RebootFailed";
/// How long a drain without a bound may wait for pods before the reboot is
/// given up (the node is replaced instead).
const UNBOUNDED_DRAIN_LIMIT: SignedDuration = SignedDuration::from_mins(15);
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
/// When the reboot was issued (RFC 3339), on the claim.
const ISSUED_AT_ANNOTATION: &str = "karpenter.sh/reboot-issued-at";
/// Since when the provider has been failing to take the reboot, on the claim.
const FAILING_SINCE_ANNOTATION: &str = "karpenter.sh/reboot-failing-since";
/// A rebooting taint older than this whose claim is not rebooting is a
/// leftover of a start that failed half-way.
pub const LEFTOVER_TAINT_AGE: SignedDuration = SignedDuration::from_mins(1);

fn boot_id(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .unwrap_or_default()
}

/// Starts a reboot for repair of `node` (a command the scheduler planned):
/// the claim's conditions and what the reboot controller needs, then the
/// taint. A claim already rebooting is left as it is.
pub async fn start(
    ctx: &Context,
    index: &Index,
    node: &Node,
    condition: &str,
    drain_bound: Option<Duration>,
) -> Result<bool> {
    let Some(cached) = index.claim_of(node).filter(|c| ctx.acts_on(c)) else {
        return Err(Error::Invalid(format!(
            "node {} has no claim to reboot",
            node.name_any()
        )));
    };
    let api = ctx.node_claims();
    let claim = api.get(&cached.name_any()).await?;
    let now = Timestamp::now();
    let added = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    if holds_node(&claim) {
        // Started before (this plan ran on a stale index, or the taint
        // failed): only the taint is made sure of.
        disrupted::add_at(ctx, node, labels::REBOOTING_TAINT_KEY, Some(added)).await?;
        return Ok(false);
    }
    let pre_boot = boot_id(node);
    if pre_boot.is_empty() {
        // Without a boot ID there is no telling a rebooted node from one
        // that never went down.
        return Err(Error::Invalid(format!(
            "node {} reports no boot ID; it cannot be rebooted for repair",
            node.name_any()
        )));
    }
    let bound =
        drain_bound.or_else(|| Some(claim.spec.termination_grace_period.as_ref()?.as_std()));
    let mut annotations = json!({
        PRE_BOOT_ID_ANNOTATION: pre_boot,
        ISSUED_AT_ANNOTATION: null,
        FAILING_SINCE_ANNOTATION: null,
    });
    annotations[GRACE_ANNOTATION] = match bound {
        Some(bound) => json!(karpenter_core::duration::format_go_duration(bound)),
        None => serde_json::Value::Null,
    };
    let latest = patch::annotate(&api, &claim, annotations).await?;
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
    patch::status(&api, &latest, &updated).await?;
    disrupted::add_at(ctx, node, labels::REBOOTING_TAINT_KEY, Some(added)).await?;
    Ok(true)
}

/// Whether a rebooting taint on `node` is a leftover: old enough, and its
/// claim (if any) neither rebooting nor failed at it (being replaced).
pub fn leftover_taint(node: &Node, claim: Option<&NodeClaim>) -> bool {
    let Some(added) = disrupted::added_at(node, labels::REBOOTING_TAINT_KEY) else {
        return disrupted::has(node, labels::REBOOTING_TAINT_KEY)
            && claim.is_none_or(|c| !holds_node(c));
    };
    Timestamp::now().duration_since(added) > LEFTOVER_TAINT_AGE
        && claim.is_none_or(|c| !holds_node(c))
}

/// The reboot controller; a key is a NodeClaim's name.
pub struct NodeClaimReboot {
    pub ctx: Context,
}

/// Whether the claim's reboot keeps its node out of service: it is
/// rebooting, or its reboot failed and it is to be replaced.
fn holds_node(claim: &NodeClaim) -> bool {
    rebooting(claim).is_some() || failed(claim)
}

fn failed(claim: &NodeClaim) -> bool {
    claim
        .conditions()
        .condition(CONDITION_REBOOTING)
        .is_some_and(|c| c.status == ConditionStatus::False && c.reason == FAILED)
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
            holds_node(claim).then_some(())?;
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
        if failed(&claim) {
            // The delete after a failed reboot did not go through: again.
            return delete(ctx, &claim).await;
        }
        let Some(condition) = rebooting(&claim).cloned() else {
            return Ok(None);
        };
        let Some(node) = index.node_of(&claim).cloned() else {
            return fail(ctx, &claim, None, "provider_error", "the node is gone").await;
        };
        let since = condition.last_transition_time.0;
        match condition.reason.as_str() {
            ISSUED => {
                let issued = claim
                    .annotations()
                    .get(ISSUED_AT_ANNOTATION)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(since);
                observe(ctx, &claim, &node, issued).await
            }
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
    let annotation = |key: &str| claim.annotations().get(key).cloned();
    // With a bound, pods still there at its end are deleted; without one
    // the drain waits for them (the planner only reboots a node whose pods
    // may be evicted, or one with a bound).
    let deadline = annotation(GRACE_ANNOTATION)
        .and_then(|d| karpenter_core::duration::parse_go_duration(&d).ok())
        .map(|bound| {
            let bound =
                SignedDuration::try_from(bound.max(MIN_DRAIN)).unwrap_or(SignedDuration::MAX);
            requested.checked_add(bound).unwrap_or(Timestamp::MAX)
        });
    let now = Timestamp::now();
    if !disrupted::has(node, labels::REBOOTING_TAINT_KEY) {
        let added = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
        disrupted::add_at(ctx, node, labels::REBOOTING_TAINT_KEY, Some(added)).await?;
    }
    let pods = index.pods_on(&node.name_any());
    if let Drain::Waiting(left) = drain(ctx, node, pods, deadline, "reboot").await? {
        match deadline {
            Some(deadline) if now < deadline => return Ok(Some(Duration::from_secs(1))),
            Some(_) => {}
            None if now.duration_since(requested) > UNBOUNDED_DRAIN_LIMIT => {
                let message = format!(
                    "{left} pod(s) did not leave within 15m0s and no drain bound allows deleting them"
                );
                return fail(ctx, claim, Some(node), "drain_timeout", &message).await;
            }
            None => return Ok(Some(Duration::from_secs(1))),
        }
    }
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();
    let operation = format!(
        "{}-{}-{}",
        claim.uid().unwrap_or_default(),
        requested.as_nanosecond(),
        annotation(PRE_BOOT_ID_ANNOTATION).unwrap_or_default()
    );
    let api = ctx.node_claims();
    match ctx.clients.reboot(&provider_id, &operation).await {
        Ok(()) => {
            tracing::info!(node = %node.name_any(), %operation, "reboot issued");
            // Guarded by the claim this pass read: a pass that ran on a
            // stale index gets a conflict instead of issuing twice.
            // The reboot joins the claim's history only once issued.
            let history = RebootHistory::from_annotations(claim.metadata.annotations.as_ref());
            let stamp = json!({"metadata": {"annotations": {
                ISSUED_AT_ANNOTATION: now.to_string(),
                REBOOT_REQUESTED_ANNOTATION: history.requested_with(requested.as_second()),
            }}});
            let latest = match patch::merge(&api, claim, stamp).await {
                Ok(latest) => latest,
                Err(error) if error.is_conflict() => return Ok(Some(Duration::from_secs(1))),
                Err(error) => return Err(error),
            };
            set_rebooting(ctx, &latest, ConditionStatus::True, ISSUED, "reboot issued").await?;
            Ok(Some(ctx.timing.reboot_poll))
        }
        Err(status) if refused(status.code()) => {
            let message = format!("the provider refused the reboot: {}", status.message());
            fail(ctx, claim, Some(node), "provider_error", &message).await
        }
        Err(status) => {
            let since =
                annotation(FAILING_SINCE_ANNOTATION).and_then(|t| t.parse::<Timestamp>().ok());
            match since {
                Some(since) if now.duration_since(since) > ISSUANCE_TIMEOUT => {
                    let message =
                        format!("the provider did not take the reboot: {}", status.message());
                    fail(ctx, claim, Some(node), "provider_error", &message).await
                }
                Some(_) => Ok(Some(Duration::from_secs(5))),
                None => {
                    tracing::warn!(node = %node.name_any(), error = %status.message(), "reboot not issued yet");
                    let stamp = json!({"metadata": {"annotations": { FAILING_SINCE_ANNOTATION: now.to_string() }}});
                    match patch::merge(&api, claim, stamp).await {
                        Ok(_) => {}
                        Err(error) if error.is_conflict() => {}
                        Err(error) => return Err(error),
                    }
                    Ok(Some(Duration::from_secs(5)))
                }
            }
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
        // Guarded by the claim this pass read, so the end is recorded (and
        // counted) once.
        let finished = json!({"metadata": {"annotations": {
            REBOOT_FINISHED_ANNOTATION: Timestamp::now().as_second().to_string() }}});
        let latest = match patch::merge(&ctx.node_claims(), claim, finished).await {
            Ok(latest) => latest,
            Err(error) if error.is_conflict() => return Ok(Some(Duration::from_secs(1))),
            Err(error) => return Err(error),
        };
        disrupted::remove(ctx, node, labels::REBOOTING_TAINT_KEY).await?;
        let mut updated = latest.clone();
        let mut conditions = claim_conditions(&mut updated);
        conditions.set(
            CONDITION_REBOOTING,
            ConditionStatus::False,
            SUCCEEDED,
            "the node came back",
        );
        conditions.clear(karpenter_api::nodeclaim::CONDITION_DISRUPTION_REASON);
        patch::status(&ctx.node_claims(), &latest, &updated).await?;
        count(ctx, "succeeded");
        let message = "Node came back from a reboot for repair";
        ctx.recorder
            .emit(Event::new(node, Kind::Normal, "RebootObserved", message));
        ctx.recorder
            .emit(Event::new(claim, Kind::Normal, "RebootObserved", message));
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
    set_rebooting(ctx, claim, ConditionStatus::False, FAILED, message).await?;
    count(ctx, result);
    let mut events = vec![Event::new(claim, Kind::Warning, "RebootFailed", message)];
    if let Some(node) = node {
        events.push(Event::new(node, Kind::Warning, "RebootFailed", message));
    }
    for event in events {
        ctx.recorder.emit(event);
    }
    delete(ctx, claim).await
}

async fn delete(ctx: &Context, claim: &NodeClaim) -> Result<Requeue> {
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
