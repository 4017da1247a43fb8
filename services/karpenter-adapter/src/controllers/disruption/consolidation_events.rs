//! Karpenter's consolidation events, on the Node and NodeClaim of each
//! candidate:
//!
//! ```text
//!   consolidation planned (single, multi)       ─▶ ConsolidationCandidate "Consolidation candidate: <command> (savings: $x)"
//!   abandoned after the validation delay        ─▶ ConsolidationRejected  "Consolidation rejected: <command>, reason: <why> (savings: $x)"
//!   started, approved by a Balanced pool        ─▶ ConsolidationApproved  "score s >= threshold t (k: K, savings a%, disruption b%)"
//!                                                  (a multi-node command's approval goes on its NodePool)
//!   a candidate consolidation cannot take       ─▶ Unconsolidatable       "<why>" (once per node per 15 minutes)
//! ```

use karpenter_proto::scheduler::v1 as sched;

use crate::controllers::Context;
use crate::events::{Event, Kind};
use crate::state::index::Index;

use super::validation;

/// How long a node's `Unconsolidatable` event is not repeated, whatever its
/// reason (Karpenter's dedupe timeout).
const UNCONSOLIDATABLE_DEDUPE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// `delete` or `replace`, as Karpenter names a command's decision.
fn decision(command: &sched::DisruptionCommand) -> &'static str {
    if command.replacements.is_empty() {
        "delete"
    } else {
        "replace"
    }
}

/// A command as Karpenter describes it: its reason, decision, pools,
/// candidates, replacements and savings.
fn describe(index: &Index, command: &sched::DisruptionCommand) -> String {
    let mut pools: Vec<String> = command
        .candidates
        .iter()
        .filter_map(|name| index.nodes.named(name))
        .filter_map(|node| {
            node.metadata
                .labels
                .as_ref()?
                .get(karpenter_core::labels::NODE_POOL)
                .cloned()
        })
        .collect();
    pools.sort();
    pools.dedup();
    let replacements = match command.replacements.len() {
        0 => String::new(),
        1 => " -> [1 replacement]".to_owned(),
        n => format!(" -> [{n} replacements]"),
    };
    format!(
        "{}: {}: nodepools=[{}]: [{}]{replacements} (savings: ${:.2})",
        validation::reason(command),
        decision(command),
        pools.join(","),
        command.candidates.join(", "),
        command.savings_per_hour
    )
}

/// The description of `command` from one candidate's side: the whole
/// command for a single node, the node and the command's size otherwise.
fn describe_for(index: &Index, command: &sched::DisruptionCommand, node: &str) -> String {
    if command.candidates.len() == 1 {
        return describe(index, command);
    }
    format!(
        "{}: [{node}] (part of {}-node consolidation)",
        decision(command),
        command.candidates.len()
    )
}

/// One event of `reason` on each candidate's Node and NodeClaim, with the
/// message `message` makes for it.
fn on_candidates(
    ctx: &Context,
    index: &Index,
    command: &sched::DisruptionCommand,
    reason: &str,
    message: impl Fn(&str) -> String,
) {
    for name in &command.candidates {
        let Some(node) = index.nodes.named(name) else {
            continue;
        };
        let text = message(name);
        ctx.recorder
            .emit(Event::new(node.as_ref(), Kind::Normal, reason, &text).dedupe_on(text.clone()));
        if let Some(claim) = index.claim_of(node) {
            ctx.recorder.emit(
                Event::new(claim.as_ref(), Kind::Normal, reason, &text).dedupe_on(text.clone()),
            );
        }
    }
}

/// Whether `command` is a consolidation (single- or multi-node): the only
/// commands with these events (emptiness has none, as upstream's).
fn is_consolidation(command: &sched::DisruptionCommand) -> bool {
    matches!(
        command.method(),
        sched::DisruptionMethod::SingleNodeConsolidation
            | sched::DisruptionMethod::MultiNodeConsolidation
    )
}

/// `ConsolidationCandidate` for a planned consolidation.
pub fn candidate(ctx: &Context, index: &Index, command: &sched::DisruptionCommand) {
    if !is_consolidation(command) {
        return;
    }
    on_candidates(ctx, index, command, "ConsolidationCandidate", |node| {
        format!(
            "Consolidation candidate: {} (savings: ${:.2})",
            describe_for(index, command, node),
            command.savings_per_hour
        )
    });
}

/// `ConsolidationRejected` for a command validation abandoned.
pub fn rejected(ctx: &Context, index: &Index, command: &sched::DisruptionCommand, reason: &str) {
    on_candidates(ctx, index, command, "ConsolidationRejected", |node| {
        format!(
            "Consolidation rejected: {}, reason: {reason} (savings: ${:.2})",
            describe_for(index, command, node),
            command.savings_per_hour
        )
    });
}

fn score_message(score: &sched::BalancedScore) -> String {
    format!(
        "score {:.2} >= threshold {:.2} (k: {}, savings {:.1}%, disruption {:.1}%)",
        score.score,
        score.threshold,
        score.k,
        score.savings_fraction * 100.0,
        score.disruption_fraction * 100.0
    )
}

/// `ConsolidationApproved` for a started command its Balanced pools
/// approved: on the candidate of a single-node command, on each Balanced
/// NodePool of a multi-node one.
pub fn approved(ctx: &Context, index: &Index, command: &sched::DisruptionCommand) {
    count_move(ctx, index, command);
    if command.candidates.len() == 1 {
        if let Some(score) = command.balanced_scores.first() {
            let text = score_message(score);
            on_candidates(ctx, index, command, "ConsolidationApproved", |_| {
                text.clone()
            });
        }
        return;
    }
    for score in &command.balanced_scores {
        let Some(pool) = index.node_pools.named(&score.node_pool) else {
            continue;
        };
        let text = score_message(score);
        ctx.recorder.emit(
            Event::new(pool.as_ref(), Kind::Normal, "ConsolidationApproved", &text)
                .dedupe_on(text.clone()),
        );
    }
}

/// Karpenter's consolidation move metrics for a started consolidation:
/// `karpenter_consolidation_moves_total` once for each pool of its
/// candidates, and `karpenter_consolidation_score` for each Balanced pool's
/// score.
fn count_move(ctx: &Context, index: &Index, command: &sched::DisruptionCommand) {
    if !is_consolidation(command) {
        return;
    }
    let labels = |nodepool: &str| move_labels(index, nodepool, "approved");
    let pools: std::collections::BTreeSet<&str> = command
        .candidates
        .iter()
        .filter_map(|name| index.nodes.named(name))
        .filter_map(|node| {
            kube::ResourceExt::labels(node.as_ref()).get(karpenter_api::labels::NODE_POOL)
        })
        .map(String::as_str)
        .collect();
    for pool in pools {
        ctx.metrics
            .consolidation_moves
            .get_or_create(&labels(pool))
            .inc();
    }
    for score in &command.balanced_scores {
        ctx.metrics
            .consolidation_score
            .get_or_create(&labels(&score.node_pool))
            .observe(score.score);
    }
}

/// The labels of Karpenter's consolidation move metrics for a move of
/// `nodepool`'s nodes: `decision`, the pool, its consolidation policy.
fn move_labels(index: &Index, nodepool: &str, decision: &str) -> crate::metrics::MoveLabels {
    let policy = index
        .node_pools
        .named(nodepool)
        .map(|p| p.spec.disruption.consolidation_policy.as_str())
        .unwrap_or_default()
        .to_owned();
    crate::metrics::MoveLabels {
        decision: decision.to_owned(),
        nodepool: nodepool.to_owned(),
        policy,
    }
}

/// The single-node moves a Balanced pool rejected, counted once each:
/// the plan runs every poll, and Karpenter weighs a move again only when
/// the cluster changed, so a rejection the previous plan already counted
/// (same candidate, same scores) is not counted again.
#[derive(Debug, Default)]
pub struct Rejections {
    counted: std::collections::HashMap<String, Vec<u64>>,
}

impl Rejections {
    /// Karpenter's metrics for the plan's new rejections:
    /// `karpenter_consolidation_moves_total` and
    /// `karpenter_consolidation_score` with `decision="rejected"` (never an
    /// event: upstream keeps rejections out of events, they are routine).
    pub fn count(&mut self, ctx: &Context, index: &Index, moves: &[sched::RejectedMove]) {
        let previous = std::mem::take(&mut self.counted);
        for rejected in moves {
            let scores: Vec<u64> = rejected.scores.iter().map(|s| s.score.to_bits()).collect();
            if previous.get(&rejected.candidate) != Some(&scores) {
                count_rejected(ctx, index, rejected);
            }
            self.counted.insert(rejected.candidate.clone(), scores);
        }
    }
}

fn count_rejected(ctx: &Context, index: &Index, rejected: &sched::RejectedMove) {
    for score in &rejected.scores {
        let labels = move_labels(index, &score.node_pool, "rejected");
        ctx.metrics.consolidation_moves.get_or_create(&labels).inc();
        ctx.metrics
            .consolidation_score
            .get_or_create(&labels)
            .observe(score.score);
    }
}

/// `Unconsolidatable` on the Node and NodeClaim of each candidate the plan
/// could not consolidate, saying why.
pub fn unconsolidatable(ctx: &Context, index: &Index, reasons: &[sched::BlockedCandidate]) {
    for entry in reasons {
        let Some(node) = index.nodes.named(&entry.node) else {
            continue;
        };
        let message = super::capitalized(&entry.reason);
        let event = super::NodeEvent {
            kind: Kind::Normal,
            reason: "Unconsolidatable",
            message: &message,
            dedupe_on: &entry.node,
            dedupe_for: UNCONSOLIDATABLE_DEDUPE,
        };
        event.emit(ctx, node, index.claim_of(node));
    }
}
