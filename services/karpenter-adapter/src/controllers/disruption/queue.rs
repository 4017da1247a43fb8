//! The orchestration queue: commands being carried out.
//!
//! ```text
//!   start:   taint candidates karpenter.sh/disrupted:NoSchedule, DisruptionReason
//!            ─▶ create the replacements
//!   advance: every replacement Initialized ─▶ delete the candidates' NodeClaims
//!                                             (termination drains them) ─▶ done
//!            a replacement gone, or too long ─▶ untaint the candidates (the
//!                                               replacements stay as capacity)
//! ```
//!
//! Nothing here is persisted, as upstream: after a restart the disruption
//! loop untaints every candidate that is not being deleted, and replacements
//! already launched are ordinary nodes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use karpenter_api::nodeclaim::{CONDITION_DISRUPTION_REASON, CONDITION_INITIALIZED};
use karpenter_api::{ConditionsExt as _, NodeClaim, NodePool};
use karpenter_proto::scheduler::v1 as sched;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use crate::controllers::Context;
use crate::controllers::provisioning;
use crate::error::{Error, Result};
use crate::events::{Event, Kind};
use crate::metrics::{Disrupted, consolidation_policy_label};
use crate::objects::claim::claim_conditions;
use crate::objects::{disrupted, patch};
use crate::state::index::Index;

/// How long a created replacement may be missing from the watch before it
/// counts as deleted.
const VISIBLE_WITHIN: Duration = Duration::from_secs(10);

/// One command in flight.
#[derive(Debug)]
pub struct InFlight {
    /// `Underutilized`, `Empty` or `Drifted`.
    pub reason: &'static str,
    /// Candidate Node names and their NodeClaims.
    pub nodes: Vec<String>,
    pub claims: Vec<String>,
    /// Names of the replacement NodeClaims created.
    pub replacements: Vec<String>,
    pub started: Instant,
    /// The candidates' NodeClaims have been deleted.
    pub deleted: bool,
    /// Repair: the drain bound stamped as the claims' termination deadline
    /// when they are deleted (an earlier deadline is kept).
    pub drain_bound: Option<Duration>,
    /// Claims this command stamped a deadline on (taken off on rollback).
    pub stamped: Vec<String>,
    /// Karpenter's labels of the decision, for a failure's metric.
    pub decision: crate::metrics::DecisionLabels,
}

/// Commands in flight; a node is in at most one.
#[derive(Debug, Default)]
pub struct Queue {
    pub commands: Vec<InFlight>,
}

impl Queue {
    /// Whether the node is a candidate of a command in flight.
    pub fn holds(&self, node: &str) -> bool {
        self.nodes().contains(node)
    }

    /// Marks the candidates and launches the replacements. A node already
    /// in flight makes the whole command wait for a later plan.
    pub async fn start(
        &mut self,
        ctx: &Context,
        index: &Arc<Index>,
        pools: &[Arc<NodePool>],
        command: &sched::DisruptionCommand,
        reason: &'static str,
    ) -> Result<()> {
        if command.candidates.iter().any(|n| self.holds(n)) {
            return Ok(());
        }
        let mut nodes = Vec::new();
        let mut claims = Vec::new();
        for name in &command.candidates {
            let Some(node) = index.nodes.named(name) else {
                continue;
            };
            let claim = index.claim_of(node);
            let Some(claim) = claim else { continue };
            match mark(ctx, node, claim, reason).await {
                Ok(()) => {
                    nodes.push(name.clone());
                    claims.push(claim.name_any());
                }
                Err(error) => tracing::warn!(node = %name, %error, "marking disrupted failed"),
            }
        }
        if nodes.is_empty()
            || (nodes.len() < command.candidates.len() && !command.replacements.is_empty())
        {
            // The next pass untaints whatever was marked.
            return Err(Error::Invalid(format!(
                "marking disrupted: {} of {} candidates marked",
                nodes.len(),
                command.candidates.len()
            )));
        }
        tracing::info!(
            decision = if command.replacements.is_empty() { "delete" } else { "replace" },
            reason,
            disrupted_node_count = nodes.len(),
            replacement_node_count = command.replacements.len(),
            nodes = ?nodes,
            "disrupting node(s)"
        );
        let created = provisioning::create_all(
            ctx,
            index,
            pools,
            &command.replacements,
            &reason.to_lowercase(),
        )
        .await?;
        if created.len() != command.replacements.len() {
            return Err(Error::Invalid(format!(
                "launched {} of {} replacements",
                created.len(),
                command.replacements.len()
            )));
        }
        for name in &created {
            if let Some(claim) = index.node_claims.named(name) {
                ctx.recorder.emit(Event::new(
                    claim.as_ref(),
                    Kind::Normal,
                    "DisruptionLaunching",
                    format!("Launching NodeClaim: {reason}"),
                ));
            }
        }
        self.commands.push(InFlight {
            reason,
            nodes,
            claims,
            replacements: created,
            started: Instant::now(),
            deleted: false,
            drain_bound: command
                .termination_grace_period
                .and_then(|d| Duration::try_from(d).ok()),
            stamped: Vec::new(),
            decision: super::decision_labels(command),
        });
        Ok(())
    }

    /// Moves every command on: deletes candidates whose replacements are
    /// ready, rolls back those that cannot finish, forgets finished ones.
    pub async fn advance(&mut self, ctx: &Context, index: &Index, timeout: Duration) {
        let mut keep = Vec::new();
        for mut command in std::mem::take(&mut self.commands) {
            match step(ctx, index, &mut command, timeout).await {
                Ok(true) => keep.push(command),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, nodes = ?command.nodes, "failed terminating nodes while executing a disruption command");
                    ctx.metrics
                        .disruption_queue_failures
                        .get_or_create(&command.decision)
                        .inc();
                    rollback(ctx, index, &command).await;
                }
            }
        }
        self.commands = keep;
    }

    /// Candidate nodes of every command in flight.
    pub fn nodes(&self) -> BTreeSet<&str> {
        self.commands
            .iter()
            .flat_map(|c| c.nodes.iter().map(String::as_str))
            .collect()
    }
}

/// One step of a command; whether it stays in the queue.
async fn step(
    ctx: &Context,
    index: &Index,
    command: &mut InFlight,
    timeout: Duration,
) -> Result<bool> {
    if command.deleted {
        // Until the watch shows the deletions, so the leftover cleanup
        // never sees a tainted candidate that is neither queued nor deleting.
        let settled = command.claims.iter().all(|name| {
            index
                .node_claims
                .named(name)
                .is_none_or(|c| c.meta().deletion_timestamp.is_some())
        });
        return Ok(!settled);
    }
    let mut waiting = false;
    for name in &command.replacements {
        match index.node_claims.named(name) {
            None if command.started.elapsed() > VISIBLE_WITHIN => {
                return Err(Error::Invalid(format!("replacement {name} was deleted")));
            }
            None => waiting = true,
            Some(claim) if !claim.conditions().is_true(CONDITION_INITIALIZED) => {
                if claim.meta().deletion_timestamp.is_some() {
                    return Err(Error::Invalid(format!("replacement {name} was deleted")));
                }
                ctx.recorder.emit(Event::new(
                    claim.as_ref(),
                    Kind::Normal,
                    "DisruptionWaitingReadiness",
                    "Waiting on readiness to continue disruption",
                ));
                waiting = true;
            }
            Some(_) => {}
        }
    }
    if command.started.elapsed() > timeout {
        return Err(Error::Invalid("command reached timeout".to_owned()));
    }
    if waiting {
        return Ok(true);
    }
    for name in &command.claims {
        let Some(claim) = index.node_claims.named(name) else {
            continue;
        };
        if let Some(bound) = command.drain_bound
            && stamp_deadline(ctx, claim, bound).await?
        {
            command.stamped.push(name.clone());
        }
        match patch::delete(&ctx.node_claims(), claim.as_ref()).await {
            Ok(()) => {}
            Err(error) if error.is_not_found() => continue,
            Err(error) => return Err(error),
        }
        // Deleted: its deadline now bounds its drain, whatever happens to
        // the rest of the command.
        command.stamped.retain(|stamped| stamped != name);
        // Drift goes through this queue too; only consolidation has a policy.
        let consolidation_policy = match command.reason {
            "Drifted" | "Unhealthy" => "",
            _ => claim
                .node_pool()
                .and_then(|pool| index.node_pools.named(pool))
                .map_or("", |pool| {
                    consolidation_policy_label(pool.spec.disruption.consolidation_policy)
                }),
        };
        let reschedulable_pods = index.reschedulable_pods_of(claim);
        ctx.metrics.claim_disrupted(
            claim,
            Disrupted {
                reason: &command.reason.to_lowercase(),
                consolidation_policy,
                reschedulable_pods: Some(reschedulable_pods),
            },
        );
        if let Some(node) = index.node_of(claim) {
            ctx.recorder.emit(Event::new(
                node.as_ref(),
                Kind::Normal,
                "DisruptionTerminating",
                format!("Disrupting Node: {}", command.reason),
            ));
        }
        ctx.recorder.emit(Event::new(
            claim.as_ref(),
            Kind::Normal,
            "DisruptionTerminating",
            format!("Disrupting NodeClaim: {}", command.reason),
        ));
    }
    command.deleted = true;
    Ok(true)
}

/// Stamps the claim's termination deadline `bound` from now, just before
/// it is deleted (after its replacement is ready, so the wait for it does
/// not eat the drain), unless an earlier deadline is already set; whether
/// it stamped one. A bound too far to write is no deadline.
async fn stamp_deadline(ctx: &Context, claim: &NodeClaim, bound: Duration) -> Result<bool> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let Some(deadline) = k8s_openapi::jiff::SignedDuration::try_from(bound)
        .ok()
        .and_then(|bound| now.checked_add(bound).ok())
    else {
        return Ok(false);
    };
    if crate::objects::claim::termination_deadline(claim).is_some_and(|at| at <= deadline) {
        return Ok(false);
    }
    let stamp = deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let key = karpenter_core::labels::NODE_CLAIM_TERMINATION_TIMESTAMP;
    match patch::annotate(&ctx.node_claims(), claim, json!({ key: stamp })).await {
        Ok(_) => Ok(true),
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(error),
    }
}

/// Untaints the candidates that are not being deleted and clears their
/// `DisruptionReason`; replacements stay as ordinary capacity.
async fn rollback(ctx: &Context, index: &Index, command: &InFlight) {
    // A deadline stamped for a deletion that did not happen would make a
    // later, graceful deletion of the claim forceful.
    for name in &command.stamped {
        if let Some(claim) = index.node_claims.named(name)
            && claim.meta().deletion_timestamp.is_none()
        {
            let key = karpenter_core::labels::NODE_CLAIM_TERMINATION_TIMESTAMP;
            if let Err(error) =
                patch::annotate(&ctx.node_claims(), claim.as_ref(), json!({ key: null })).await
            {
                tracing::warn!(claim = %name, %error, "removing a stamped termination deadline failed");
            }
        }
    }
    for name in &command.nodes {
        if let Some(node) = index.nodes.named(name)
            && let Err(error) = release(ctx, index, node).await
        {
            tracing::warn!(node = %name, %error, "removing the disrupted taint failed");
        }
    }
}

/// Taints the node and sets the claim's `DisruptionReason`.
async fn mark(
    ctx: &Context,
    node: &k8s_openapi::api::core::v1::Node,
    claim: &NodeClaim,
    reason: &str,
) -> Result<()> {
    disrupted::taint(ctx, node).await?;
    let mut updated = claim.clone();
    claim_conditions(&mut updated).set(
        CONDITION_DISRUPTION_REASON,
        karpenter_api::ConditionStatus::True,
        reason,
        reason,
    );
    write_status(ctx, claim, &updated).await
}

/// Takes the disrupted taint off a node that is not being deleted and
/// clears its claim's `DisruptionReason`.
pub async fn release(
    ctx: &Context,
    index: &Index,
    node: &k8s_openapi::api::core::v1::Node,
) -> Result<()> {
    if node.meta().deletion_timestamp.is_some() {
        return Ok(());
    }
    disrupted::untaint(ctx, node).await?;
    let claim = index.claim_of(node);
    if let Some(claim) = claim
        && claim
            .conditions()
            .iter()
            .any(|c| c.type_ == CONDITION_DISRUPTION_REASON)
    {
        let mut updated = claim.as_ref().clone();
        claim_conditions(&mut updated).clear(CONDITION_DISRUPTION_REASON);
        write_status(ctx, claim, &updated).await?;
    }
    Ok(())
}

async fn write_status(ctx: &Context, stored: &NodeClaim, updated: &NodeClaim) -> Result<()> {
    match patch::status(&ctx.node_claims(), stored, updated).await {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Ok(()),
        Err(error) => Err(error),
    }
}
