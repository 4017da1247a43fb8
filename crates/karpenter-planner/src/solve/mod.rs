//! Provisioning: Karpenter's scheduler loop.
//!
//! Pods are taken largest first (CPU, then memory). Each goes to the first
//! existing or in-flight node that takes it, else the first claim planned in
//! this round (fewest pods first), else a new claim from the first node pool
//! (weight, then name) that can hold it. A pod that fits nowhere has its
//! preferences relaxed one at a time and is tried again; the queue ends when
//! a whole pass places nothing.
//!
//! This module holds the entry, [`solve`], and what it answers with; the
//! loop is laid out by the question each part answers:
//!
//! ```text
//!   prepared        what every run on one snapshot shares: pool templates, limits,
//!                   existing nodes as they stand, the topology universe
//!   scheduler       one run: the pod queue, and each pod tried on
//!   existing          1. existing / in-flight nodes
//!   claims            2. claims planned in this run, then 3. a new claim
//!   instance_types  which of a claim's instance types still hold its pods, and why none does
//!   preferences     what relaxing a pod that fits nowhere removes, in Karpenter's order
//!   launch          a claim's options by price, cut to what a launch carries
//! ```

mod claims;
mod existing;
mod instance_types;
mod launch;
mod preferences;
mod prepared;
mod scheduler;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use crate::model::{Cluster, PodKey};
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::taints::Taint;

// Disruption simulates many runs on one snapshot through these.
pub use existing::ClosedNodes;
pub(crate) use instance_types::{min_values_not_met, min_values_prefix, min_values_shortfall};
pub use prepared::Prepared;

/// Karpenter's cap on the instance types a launch carries.
pub const MAX_INSTANCE_TYPES: usize = 60;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MinValuesPolicy {
    #[default]
    Strict,
    BestEffort,
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub min_values_policy: MinValuesPolicy,
    pub ignore_preferences: bool,
    /// Label keys the provider defines, beyond Karpenter's own.
    pub well_known_labels: Vec<String>,
    /// Plan pods with DRA requests on their other requests (Karpenter's
    /// `IGNORE_DRA_REQUESTS=false`; devices are not simulated). Off, as
    /// Karpenter's default, such pods are unschedulable with
    /// [`DRA_NOT_SUPPORTED`] and such DaemonSets are no overhead.
    pub plan_dra_pods: bool,
    /// Set by the caller once the answer is no longer wanted (its deadline
    /// passed): runs stop at the next pod and plans at the next round, so a
    /// hostile or huge request cannot hold a thread. The planner reads no
    /// clock itself.
    pub interrupt: Option<Arc<AtomicBool>>,
}

impl Options {
    /// Whether the caller asked to stop.
    pub fn interrupted(&self) -> bool {
        self.interrupt
            .as_ref()
            .is_some_and(|flag| flag.load(AtomicOrdering::Relaxed))
    }
}

/// Why a pod with DRA requests is not planned for (Karpenter's `DRAError`).
pub const DRA_NOT_SUPPORTED: &str =
    "pod has Dynamic Resource Allocation requirements that are not yet supported by Karpenter";

/// Why a pod was left unplaced when the caller interrupted the run.
pub const INTERRUPTED: &str = "not scheduled: the request was interrupted (its deadline passed)";

/// A node claim to launch.
#[derive(Clone, Debug)]
pub struct PlannedClaim {
    pub node_pool: String,
    /// Cheapest compatible offering first, at most [`MAX_INSTANCE_TYPES`].
    pub instance_types: Vec<String>,
    pub cheapest: Option<Cheapest>,
    pub requirements: Requirements,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub pods: Vec<PodKey>,
    pub requests: Resources,
    pub min_values_relaxed: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cheapest {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Solution {
    /// Ready pools whose requirements leave no instance type (Karpenter's
    /// `NoCompatibleInstanceTypes`); set by [`solve`].
    pub pools_without_instance_types: Vec<PoolWithoutInstanceTypes>,
    pub new_claims: Vec<PlannedClaim>,
    /// Existing or in-flight node name -> pods placed on it.
    pub existing: BTreeMap<String, Vec<PodKey>>,
    pub unschedulable: BTreeMap<PodKey, String>,
}

impl Solution {
    pub fn cost_per_hour(&self) -> f64 {
        self.new_claims
            .iter()
            .filter_map(|c| c.cheapest.as_ref().map(|o| o.price))
            .sum()
    }
}

/// A ready pool that can launch nothing: its requirements filter out every
/// instance type it is offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolWithoutInstanceTypes {
    pub node_pool: String,
    /// Types were left but too few for the requirements' minValues.
    pub min_values: bool,
}

/// Solves one provisioning round.
pub fn solve(cluster: &Cluster, options: &Options) -> Solution {
    let prepared = Prepared::new(cluster, options);
    // Pods of nodes on their way out need a place too, when they will be
    // evicted (Karpenter's IsCurrentlyReschedulable): not a do-not-disrupt
    // pod, nor one a PDB forbids ever evicting; those stay until that
    // changes, and capacity launched for them would sit idle.
    let leaving = cluster
        .nodes
        .iter()
        .filter(|n| n.marked_for_deletion)
        .flat_map(|n| n.pods.iter())
        .filter(|p| {
            p.is_reschedulable()
                && !p.do_not_disrupt
                && !cluster.pdbs.iter().any(|pdb| pdb.always_blocks(p))
        });
    let mut solution = prepared.run(&[], cluster.pending.iter().chain(leaving));
    solution.pools_without_instance_types = prepared.empty_pools.clone();
    solution
}
