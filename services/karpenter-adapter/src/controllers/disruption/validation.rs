//! Karpenter's validation of graceful commands: after the delay, the
//! command is carried out only if a fresh plan still makes it.
//!
//! - Emptiness: the candidates a fresh plan still deletes as empty (a
//!   subset is fine).
//! - Consolidation: a fresh plan disrupts the same candidates with no more
//!   replacements (none if the command had none), or nothing is done.
//! - Drift and expiration are not validated.

use std::collections::BTreeSet;

use karpenter_proto::scheduler::v1::{self as sched, DisruptionMethod, DisruptionReason};

/// Whether a command waits out the validation delay.
pub fn needs_validation(command: &sched::DisruptionCommand) -> bool {
    matches!(
        command.method(),
        DisruptionMethod::Emptiness
            | DisruptionMethod::MultiNodeConsolidation
            | DisruptionMethod::SingleNodeConsolidation
    )
}

/// The budget reason of a command, as Karpenter writes it.
pub fn reason(command: &sched::DisruptionCommand) -> &'static str {
    reason_name(command.reason())
}

/// Karpenter's name of a disruption reason.
pub fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => "Empty",
        DisruptionReason::Drifted => "Drifted",
        DisruptionReason::Expired => "Expired",
        DisruptionReason::Unhealthy => "Unhealthy",
        _ => "Underutilized",
    }
}

fn candidates(command: &sched::DisruptionCommand) -> BTreeSet<&str> {
    command.candidates.iter().map(String::as_str).collect()
}

/// What validation made of the waited commands.
#[derive(Debug, Default)]
pub struct Validated {
    /// Still supported by the fresh plan (narrowed where Karpenter narrows).
    pub valid: Vec<sched::DisruptionCommand>,
    /// Abandoned, with why (Karpenter's wording).
    pub rejected: Vec<(sched::DisruptionCommand, &'static str)>,
}

/// Emptiness abandoned: every candidate got a pod.
pub const POD_CHURN: &str = "pod churn, command is no longer valid";
/// Consolidation abandoned: the fresh plan does something else.
pub const NEW_RESULTS: &str = "scheduling simulation produced new results";

/// The commands of `waited` that `fresh` (a plan made after the delay)
/// still supports, and those it does not.
pub fn validate(
    waited: &[sched::DisruptionCommand],
    fresh: &[sched::DisruptionCommand],
) -> Validated {
    let fresh_empty: BTreeSet<&str> = fresh
        .iter()
        .filter(|c| c.method() == DisruptionMethod::Emptiness)
        .flat_map(|c| c.candidates.iter().map(String::as_str))
        .collect();
    let mut out = Validated::default();
    for command in waited {
        if command.method() == DisruptionMethod::Emptiness {
            let kept: Vec<String> = command
                .candidates
                .iter()
                .filter(|n| fresh_empty.contains(n.as_str()))
                .cloned()
                .collect();
            if kept.is_empty() {
                tracing::info!(nodes = ?command.candidates, "abandoning empty node consolidation attempt due to {POD_CHURN}");
                out.rejected.push((command.clone(), POD_CHURN));
            } else {
                out.valid.push(sched::DisruptionCommand {
                    candidates: kept,
                    ..command.clone()
                });
            }
            continue;
        }
        let same = fresh.iter().any(|f| {
            needs_validation(f)
                && f.method() != DisruptionMethod::Emptiness
                && candidates(f) == candidates(command)
                && f.replacements.len() <= command.replacements.len()
                && (f.replacements.is_empty() == command.replacements.is_empty())
        });
        if same {
            out.valid.push(command.clone());
        } else {
            tracing::info!(nodes = ?command.candidates, "abandoning consolidation attempt: {NEW_RESULTS}");
            out.rejected.push((command.clone(), NEW_RESULTS));
        }
    }
    out
}

/// The commands of `waited` that `fresh` still supports.
#[cfg(test)]
fn still_valid(
    waited: &[sched::DisruptionCommand],
    fresh: &[sched::DisruptionCommand],
) -> Vec<sched::DisruptionCommand> {
    validate(waited, fresh).valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(
        method: DisruptionMethod,
        nodes: &[&str],
        replacements: usize,
    ) -> sched::DisruptionCommand {
        sched::DisruptionCommand {
            reason: if method == DisruptionMethod::Emptiness {
                DisruptionReason::Empty as i32
            } else {
                DisruptionReason::Underutilized as i32
            },
            method: method as i32,
            candidates: nodes.iter().map(|n| n.to_string()).collect(),
            replacements: vec![sched::NodeClaimPlan::default(); replacements],
            ..sched::DisruptionCommand::default()
        }
    }

    #[test]
    fn an_empty_command_keeps_the_nodes_still_empty() {
        let waited = [command(DisruptionMethod::Emptiness, &["a", "b", "c"], 0)];
        let fresh = [command(DisruptionMethod::Emptiness, &["c", "a", "d"], 0)];
        let valid = still_valid(&waited, &fresh);
        assert_eq!(valid.len(), 1);
        assert_eq!(valid[0].candidates, ["a", "c"], "b got a pod; d is new");
        let none = validate(&waited, &[]);
        assert!(none.valid.is_empty(), "nothing empty any more");
        assert_eq!(none.rejected.len(), 1);
        assert_eq!(none.rejected[0].1, POD_CHURN);
    }

    #[test]
    fn a_consolidation_holds_only_if_planned_the_same_way_again() {
        let single = DisruptionMethod::SingleNodeConsolidation;
        let multi = DisruptionMethod::MultiNodeConsolidation;
        let replace = [command(single, &["a"], 1)];
        assert_eq!(
            still_valid(&replace, &[command(single, &["a"], 1)]).len(),
            1
        );
        assert!(
            still_valid(&replace, &[command(single, &["a"], 0)]).is_empty(),
            "now a delete: new results"
        );
        assert!(still_valid(&replace, &[command(single, &["b"], 1)]).is_empty());
        let delete = [command(multi, &["a", "b"], 0)];
        assert_eq!(
            still_valid(&delete, &[command(multi, &["b", "a"], 0)]).len(),
            1
        );
        assert!(
            still_valid(&delete, &[command(multi, &["a", "b"], 1)]).is_empty(),
            "now needs a replacement"
        );
        assert!(
            still_valid(&delete, &[command(multi, &["a"], 0)]).is_empty(),
            "every candidate must hold"
        );
    }
}
