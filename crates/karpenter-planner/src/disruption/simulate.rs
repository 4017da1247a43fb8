//! Where pods go when their nodes are removed: a scheduling run on the
//! snapshot with the nodes gone and their pods pending, as every method
//! checks its command.

use std::collections::{BTreeMap, HashSet};

use crate::model::{Cluster, Pod, PodKey};
use crate::solve::{ClosedNodes, PlannedClaim, Prepared};

use super::candidates::Candidate;

/// Where pods go when their nodes are removed: a scheduling run with the
/// nodes gone and the pods pending.
pub(super) struct Moved {
    /// The first moving pod that found no place, and why.
    pub(super) stranded: Option<String>,
    /// A moving pod landed on a node that is still starting.
    pub(super) on_starting_node: Option<String>,
    /// New claims holding moving pods.
    pub(super) replacements: Vec<PlannedClaim>,
    /// Existing node -> the moving pods placed there.
    pub(super) placements: BTreeMap<String, Vec<PodKey>>,
}

impl Moved {
    pub(super) fn replacement_price(&self) -> f64 {
        self.replacements
            .iter()
            .filter_map(|r| r.cheapest.as_ref())
            .map(|c| c.price)
            .sum()
    }
}

/// Simulates `moving` leaving the `removed` nodes (with the pending pods,
/// which must not be left worse off). A consolidation passes the nodes its
/// pods may not move onto.
pub(super) fn move_pods(
    prepared: &Prepared<'_>,
    cluster: &Cluster,
    removed: &[usize],
    moving: &[&Pod],
    closed: Option<&ClosedNodes>,
) -> Moved {
    let moving_keys: HashSet<&PodKey> = moving.iter().map(|p| &p.key).collect();
    let pods = cluster.pending.iter().chain(moving.iter().copied());
    let solution = match closed {
        Some(closed) => prepared.run_consolidation(removed, closed, pods),
        None => prepared.run(removed, pods),
    };
    let stranded = solution
        .unschedulable
        .iter()
        .find(|(pod, _)| moving_keys.contains(pod))
        .map(|(pod, reason)| format!("not all pods would schedule, {pod} => {reason}"));
    let mut placements = BTreeMap::new();
    let mut on_starting_node = None;
    for (node_name, pods) in &solution.existing {
        let moved: Vec<PodKey> = pods
            .iter()
            .filter(|p| moving_keys.contains(p))
            .cloned()
            .collect();
        if moved.is_empty() {
            continue;
        }
        let starting = cluster
            .nodes
            .iter()
            .find(|n| &n.name == node_name)
            .is_some_and(|n| !n.initialized);
        if starting && on_starting_node.is_none() {
            on_starting_node = Some(node_name.clone());
        }
        placements.insert(node_name.clone(), moved);
    }
    // A claim only CapacityBuffer room needs is a replacement too: the
    // removal takes the room the buffer holds (Karpenter simulates its
    // virtual pods with the pending ones).
    let buffer_keys: HashSet<&PodKey> = cluster
        .pending
        .iter()
        .filter(|p| p.buffer)
        .map(|p| &p.key)
        .collect();
    let replacements = solution
        .new_claims
        .into_iter()
        .filter(|c| {
            c.pods
                .iter()
                .any(|p| moving_keys.contains(p) || buffer_keys.contains(p))
        })
        .collect();
    Moved {
        stranded,
        on_starting_node,
        replacements,
        placements,
    }
}

/// The candidates' pods that must move: reschedulable ones, except those
/// no eviction may ever take (do-not-disrupt, or a fully blocking PDB):
/// the simulation does not move those.
pub(super) fn candidate_pods<'c>(cluster: &'c Cluster, candidates: &[&Candidate]) -> Vec<&'c Pod> {
    candidates
        .iter()
        .flat_map(|c| {
            let node = &cluster.nodes[c.node];
            c.reschedulable.iter().map(move |i| &node.pods[*i])
        })
        .filter(|pod| !pod.do_not_disrupt && !cluster.pdbs.iter().any(|pdb| pdb.always_blocks(pod)))
        .collect()
}
