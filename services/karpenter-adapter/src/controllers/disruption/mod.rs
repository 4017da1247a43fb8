//! Disruption (Karpenter's disruption controller): the scheduler plans,
//! the adapter checks the plan still holds and carries it out.
//!
//! ```text
//!   each pass (cluster synced):
//!     commands in flight ─advance─▶ (queue)
//!     nodes tainted karpenter.sh/disrupted, not in flight, not deleting ─▶ untainted
//!     every 10 s, or 3 s after the last plan when pods, nodes, claims or
//!     pools changed: PlanDisruption(live snapshot)
//!       drift ─────────────────────────────▶ start now
//!       emptiness, consolidation ─ 15 s ─▶ PlanDisruption again: still planned? ─▶ start
//! ```
//!
//! The scheduler applies budgets, PDBs, do-not-disrupt and consolidateAfter;
//! nodes in flight carry the disrupted taint, so the next plan counts them
//! against budgets and never picks them again.

mod consolidation_events;
mod pod_events;
pub mod queue;
pub mod validation;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use karpenter_proto::scheduler::v1 as sched;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::controllers::Context;
use crate::error::{Error, Result};
use crate::events::{Event, Kind};
use crate::metrics::{
    ConsolidationTypeLabels, CostLabels, DecisionLabels, PoolDecisionLabels, PoolReasonLabels,
};
use crate::scheduling;
use crate::state::index::Index;
use crate::state::watch::Published;
use queue::Queue;

/// How often the loop looks at in-flight commands and leftovers.
const TICK: Duration = Duration::from_secs(1);
/// How soon after the last plan a change in pods, nodes, claims or pools
/// plans again (without changes, every `disruption_poll`).
const REPLAN_AFTER_CHANGE: Duration = Duration::from_secs(3);

/// Commands waiting out the validation delay.
struct Validating {
    commands: Vec<sched::DisruptionCommand>,
    due: Instant,
}

/// Runs the disruption loop until the snapshots end.
pub async fn run(ctx: Context, mut snapshots: watch::Receiver<Published>) {
    if snapshots.wait_for(|p| p.index.listed()).await.is_err() {
        return;
    }
    let kind = ctx.node_class_kind().to_owned();
    let mut queue = Queue::default();
    let mut validating: Option<Validating> = None;
    let mut rejections = consolidation_events::Rejections::default();
    let mut next_plan = Instant::now();
    let mut seen_changes = None;
    loop {
        let published = snapshots.borrow_and_update().clone();
        let index = published.index;
        let v = published.versions;
        let changes = v.pods + v.nodes + v.node_claims + v.node_pools;
        if seen_changes
            .replace(changes)
            .is_some_and(|seen| seen != changes)
        {
            // Soon after a change (a claim became consolidatable, a pod
            // left), but never more often than every few seconds.
            let soonest = next_plan
                .checked_sub(ctx.timing.disruption_poll)
                .map_or_else(Instant::now, |planned| planned + REPLAN_AFTER_CHANGE);
            next_plan = next_plan.min(soonest.max(Instant::now()));
        }
        if index.synced(&kind) {
            let span = tracing::info_span!("reconcile", controller = "disruption");
            let pass = pass(
                &ctx,
                &index,
                &mut queue,
                &mut validating,
                &mut rejections,
                &mut next_plan,
            );
            if let Err(error) = tracing::Instrument::instrument(pass, span).await {
                tracing::warn!(%error, "disruption pass failed");
                next_plan = Instant::now() + ctx.timing.disruption_poll;
            }
        }
        tokio::time::sleep(TICK).await;
        if snapshots.has_changed().is_err() {
            return;
        }
    }
}

async fn pass(
    ctx: &Context,
    index: &Arc<Index>,
    queue: &mut Queue,
    validating: &mut Option<Validating>,
    rejections: &mut consolidation_events::Rejections,
    next_plan: &mut Instant,
) -> Result<()> {
    queue
        .advance(ctx, index, ctx.timing.disruption_timeout)
        .await;
    release_leftovers(ctx, index, queue).await;
    if let Some(pending) = validating.take_if(|v| v.due <= Instant::now()) {
        let (pools, plan) = plan(ctx, index).await?;
        let validated = validation::validate(&pending.commands, &plan.commands);
        for (command, why) in &validated.rejected {
            consolidation_events::rejected(ctx, index, command, why);
            let consolidation_type = decision_labels(command).consolidation_type;
            let candidates = u64::try_from(command.candidates.len()).unwrap_or(u64::MAX);
            ctx.metrics
                .disruption_failed_validations
                .get_or_create(&ConsolidationTypeLabels { consolidation_type })
                .inc_by(candidates);
        }
        for command in validated.valid {
            start(ctx, index, queue, &pools, &command).await;
        }
        *next_plan = Instant::now();
        return Ok(());
    }
    if validating.is_some() || Instant::now() < *next_plan {
        return Ok(());
    }
    *next_plan = Instant::now() + ctx.timing.disruption_poll;
    let (pools, plan) = plan(ctx, index).await?;
    record_budgets(ctx, &plan.pool_budgets);
    rejections.count(ctx, index, &plan.rejected_moves);
    let (now, later): (Vec<_>, Vec<_>) = plan
        .commands
        .into_iter()
        .filter(|c| !c.candidates.iter().any(|n| queue.holds(n)))
        .partition(|c| !validation::needs_validation(c));
    for command in &now {
        start(ctx, index, queue, &pools, command).await;
    }
    for command in &later {
        consolidation_events::candidate(ctx, index, command);
    }
    if !later.is_empty() {
        *validating = Some(Validating {
            commands: later,
            due: Instant::now() + ctx.timing.validation_delay,
        });
    }
    Ok(())
}

async fn start(
    ctx: &Context,
    index: &Arc<Index>,
    queue: &mut Queue,
    pools: &[Arc<karpenter_api::NodePool>],
    command: &sched::DisruptionCommand,
) {
    let reason = validation::reason(command);
    if command.reboot {
        match start_reboot(ctx, index, command).await {
            Ok(true) => {}
            // Already rebooting (a plan on a stale index): nothing new started.
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(%error, nodes = ?command.candidates, "starting a reboot for repair failed");
                return;
            }
        }
    } else if let Err(error) = queue.start(ctx, index, pools, command, reason).await {
        tracing::warn!(%error, nodes = ?command.candidates, "starting a disruption command failed");
        return;
    }
    consolidation_events::approved(ctx, index, command);
    if command.method() == sched::DisruptionMethod::Repair {
        repair_started(ctx, index, command);
    }
    let decision = decision_labels(command);
    ctx.metrics
        .disruption_decisions
        .get_or_create(&decision)
        .inc();
    for nodepool in command_pools(index, command) {
        let labels = PoolDecisionLabels {
            nodepool,
            decision: decision.decision.clone(),
            reason: decision.reason.clone(),
            consolidation_type: decision.consolidation_type.clone(),
        };
        ctx.metrics
            .disruption_decisions_by_pool
            .get_or_create(&labels)
            .inc();
    }
}

/// Karpenter's budget gauges, per pool and reason, from the plan.
fn record_budgets(ctx: &Context, budgets: &[sched::NodePoolBudget]) {
    // A deleted pool's series go; the families are a few series a pool.
    ctx.metrics.nodepool_allowed_disruptions.clear();
    ctx.metrics.nodepool_disrupting_nodes.clear();
    for budget in budgets {
        let labels = PoolReasonLabels {
            nodepool: budget.node_pool.clone(),
            reason: validation::reason_name(budget.reason()).to_owned(),
        };
        ctx.metrics
            .nodepool_allowed_disruptions
            .get_or_create(&labels)
            .set(budget.allowed);
        ctx.metrics
            .nodepool_disrupting_nodes
            .get_or_create(&labels)
            .set(budget.disrupting);
    }
}

/// The pools of a command's candidates, each once.
fn command_pools(index: &Index, command: &sched::DisruptionCommand) -> BTreeSet<String> {
    command
        .candidates
        .iter()
        .filter_map(|name| index.nodes.named(name))
        .filter_map(|node| {
            kube::ResourceExt::labels(node.as_ref())
                .get(karpenter_core::labels::NODE_POOL)
                .cloned()
        })
        .collect()
}

/// Karpenter's labels for a started command.
pub(super) fn decision_labels(command: &sched::DisruptionCommand) -> DecisionLabels {
    use sched::DisruptionMethod as Method;
    let consolidation_type = match command.method() {
        Method::Emptiness => "empty",
        Method::SingleNodeConsolidation => "single",
        Method::MultiNodeConsolidation => "multi",
        _ => "",
    };
    DecisionLabels {
        decision: if command.reboot {
            "reboot"
        } else if command.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        }
        .to_owned(),
        reason: validation::reason(command).to_lowercase(),
        consolidation_type: consolidation_type.to_owned(),
    }
}

/// PlanDisruption over the live snapshot; the pools it was planned with.
async fn plan(
    ctx: &Context,
    index: &Arc<Index>,
) -> Result<(
    Vec<Arc<karpenter_api::NodePool>>,
    sched::PlanDisruptionResponse,
)> {
    let pools = scheduling::disruption_pools(ctx, index);
    let scheduling::Prepared {
        pools, mut built, ..
    } = scheduling::prepare(ctx, index, pools).await;
    ctx.nominations.mark(&mut built.snapshot);
    let plan = ctx
        .clients
        .plan_disruption(built, scheduling::options(ctx))
        .await
        .map_err(Error::peer("PlanDisruption"))?;
    report_blocked(ctx, index, &plan.blocked);
    report_repair_blocked(ctx, index, &plan.repair_blocked);
    pod_events::report(ctx, index, k8s_openapi::jiff::Timestamp::now());
    consolidation_events::unconsolidatable(ctx, index, &plan.unconsolidatable);
    ctx.deletion_costs.offer(ctx, index, &plan.deletion_costs);
    if let Some(cost) = &plan.cost {
        for (estimate, value) in [
            ("current", cost.before),
            ("planned", cost.after),
            ("lower_bound", cost.lower_bound),
        ] {
            ctx.metrics
                .disruption_cost
                .get_or_create(&CostLabels {
                    estimate: estimate.to_owned(),
                })
                .set(value);
        }
        ctx.metrics.nodepool_cost.clear();
        for (nodepool, value) in &cost.node_pools {
            let labels = crate::metrics::PoolLabels {
                nodepool: nodepool.clone(),
            };
            ctx.metrics.nodepool_cost.get_or_create(&labels).set(*value);
        }
    }
    Ok((pools, plan))
}

/// How long the same `DisruptionBlocked` event is not repeated.
const BLOCKED_DEDUPE: Duration = Duration::from_secs(120);

/// A `DisruptionBlocked` event on the Node and its NodeClaim for each node
/// the plan could not take, saying why (as Karpenter words it).
fn report_blocked(ctx: &Context, index: &Index, blocked: &[sched::BlockedCandidate]) {
    for entry in blocked {
        let Some(node) = index.nodes.named(&entry.node) else {
            continue;
        };
        let Some(claim) = index.claim_of(node) else {
            continue;
        };
        let message = capitalized(&entry.reason);
        tracing::debug!(node = %entry.node, reason = %message, "disruption blocked");
        let event = NodeEvent {
            kind: Kind::Normal,
            reason: "DisruptionBlocked",
            message: &message,
            dedupe_on: &message,
            dedupe_for: BLOCKED_DEDUPE,
        };
        event.emit(ctx, node, Some(claim));
    }
}

/// An event said of a Node and of its NodeClaim alike.
pub(super) struct NodeEvent<'a> {
    pub(super) kind: Kind,
    pub(super) reason: &'static str,
    pub(super) message: &'a str,
    /// What makes a repeat the same event (besides the object and reason).
    pub(super) dedupe_on: &'a str,
    pub(super) dedupe_for: Duration,
}

impl NodeEvent<'_> {
    pub(super) fn emit(
        &self,
        ctx: &Context,
        node: &k8s_openapi::api::core::v1::Node,
        claim: Option<&Arc<karpenter_api::NodeClaim>>,
    ) {
        let mut events = vec![Event::new(node, self.kind, self.reason, self.message)];
        if let Some(claim) = claim {
            events.push(Event::new(
                claim.as_ref(),
                self.kind,
                self.reason,
                self.message,
            ));
        }
        for event in events {
            ctx.recorder.emit(
                event
                    .dedupe_on(self.dedupe_on.to_owned())
                    .dedupe_for(self.dedupe_for),
            );
        }
    }
}

/// How long the same `NodeRepairBlocked` event is not repeated.
const REPAIR_BLOCKED_DEDUPE: Duration = Duration::from_secs(15 * 60);

/// A `NodeRepairBlocked` warning on the Node (only, as Karpenter's) for
/// each unhealthy node the breaker holds back.
fn report_repair_blocked(ctx: &Context, index: &Index, blocked: &[sched::BlockedCandidate]) {
    for entry in blocked {
        let Some(node) = index.nodes.named(&entry.node) else {
            continue;
        };
        // Karpenter publishes the breaker's message as it is.
        let message = &entry.reason;
        tracing::info!(node = %entry.node, reason = %message, "node repair blocked");
        let event = NodeEvent {
            kind: Kind::Warning,
            reason: "NodeRepairBlocked",
            message,
            dedupe_on: message,
            dedupe_for: REPAIR_BLOCKED_DEDUPE,
        };
        event.emit(ctx, node, None);
    }
}

/// Starts a repair command that reboots its node in place; whether a
/// reboot was newly started.
async fn start_reboot(
    ctx: &Context,
    index: &Index,
    command: &sched::DisruptionCommand,
) -> Result<bool> {
    let mut started = false;
    for name in &command.candidates {
        let node = index
            .nodes
            .named(name)
            .ok_or_else(|| Error::Invalid(format!("node {name} to reboot is gone")))?;
        let condition = &command.repair_condition;
        let bound = command
            .termination_grace_period
            .and_then(|d| Duration::try_from(d).ok());
        if crate::controllers::node::reboot::start(ctx, index, node, condition, bound).await? {
            tracing::info!(node = %name, %condition, "rebooting node for repair");
            started = true;
        }
    }
    Ok(started)
}

/// Karpenter's per-condition repair metric, for a repair command started.
fn repair_started(ctx: &Context, index: &Index, command: &sched::DisruptionCommand) {
    use crate::metrics::UnhealthyLabels;
    for name in &command.candidates {
        let Some(node) = index.nodes.named(name) else {
            continue;
        };
        // The metric is by condition type, as upstream's.
        let condition = command
            .repair_condition
            .split('/')
            .next()
            .unwrap_or_default();
        let labels_of = |key: &str| {
            node.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let image_id = index
            .claim_of(node)
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.image_id.clone())
            .unwrap_or_default();
        ctx.metrics
            .nodeclaims_unhealthy_disrupted
            .get_or_create(&UnhealthyLabels {
                condition: crate::controllers::node::health::snake_case(condition),
                nodepool: labels_of(karpenter_core::labels::NODE_POOL),
                capacity_type: labels_of(karpenter_core::labels::CAPACITY_TYPE),
                image_id,
            })
            .inc();
    }
}

pub(super) fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Karpenter's crash cleanup: a node carrying the disrupted taint that no
/// command holds and that is not being deleted was left by a command that
/// failed half-way or a process that stopped; it is released. So is a
/// rebooting taint whose claim is not rebooting.
async fn release_leftovers(ctx: &Context, index: &Index, queue: &Queue) {
    let held = queue.nodes();
    for node in index.nodes.iter() {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if node.metadata.deletion_timestamp.is_none()
            && crate::controllers::node::reboot::leftover_taint(
                node,
                index.claim_of(node).map(AsRef::as_ref),
            )
        {
            let key = karpenter_core::labels::REBOOTING_TAINT_KEY;
            match crate::objects::disrupted::remove(ctx, node, key).await {
                Ok(()) => tracing::info!(node = %name, "removed a leftover rebooting taint"),
                Err(error) => {
                    tracing::warn!(node = %name, %error, "removing a leftover rebooting taint failed")
                }
            }
        }
        if held.contains(name) || !crate::objects::disrupted::has_taint(node) {
            continue;
        }
        if !index.claim_of(node).is_some_and(|claim| ctx.acts_on(claim)) {
            continue;
        }
        match queue::release(ctx, index, node).await {
            Ok(()) => tracing::info!(node = %name, "removed a leftover disrupted taint"),
            Err(error) => {
                tracing::warn!(node = %name, %error, "removing a leftover disrupted taint failed")
            }
        }
    }
}
