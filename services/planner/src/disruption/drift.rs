//! Drift: a node whose claim no longer matches its pool is replaced, with
//! as many claims as its pods need and no price check.

use crate::model::{Cluster, Reason};
use crate::solve::Prepared;

use super::candidates::Candidate;
use super::simulate::{candidate_pods, move_pods};
use super::{Command, Method};

/// Drift replaces without a price check, with as many claims as it takes.
pub(super) fn drift_command(
    prepared: &Prepared<'_>,
    cluster: &Cluster,
    candidate: &Candidate,
) -> Result<Command, String> {
    let moved = move_pods(
        prepared,
        cluster,
        &[candidate.node],
        &candidate_pods(cluster, &[candidate]),
        None,
    );
    if let Some(reason) = moved.stranded {
        return Err(reason);
    }
    Ok(Command {
        reason: Reason::Drifted,
        method: Method::Drift,
        candidates: vec![cluster.nodes[candidate.node].name.clone()],
        savings_per_hour: candidate.price - moved.replacement_price(),
        replacements: moved.replacements,
        placements: moved.placements,
    })
}
