//! One scheduling run: the pods admitted and ordered, the queue that ends
//! when a pass places nothing, and each pod tried on existing nodes, then
//! planned claims, then a new claim, its preferences relaxed on failure.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::labels;
use crate::model::{Cluster, InstanceType, Pod, PodKey};
use crate::pods::pod_requirements;
use crate::requirements::{Requirements, WellKnown};
use crate::taints::Taint;
use crate::topology::Topology;

use super::claims::{Claim, ClassMemo};
use super::existing::{ClosedNodes, ExistingNode};
use super::launch::{FinalizeMemo, finalize};
use super::preferences::{relax, strip_preferences};
use super::prepared::{Prepared, Template, WellKnownSet, limit_cost, validate_pod};
use super::{INTERRUPTED, Options, Solution};

impl Prepared<'_> {
    /// One scheduling run: `pods` placed on the snapshot with the `removed`
    /// nodes gone.
    pub fn run<'p>(&self, removed: &[usize], pods: impl Iterator<Item = &'p Pod>) -> Solution {
        self.run_with(removed, None, pods)
    }

    /// As [`Prepared::run`], for a consolidation: moving pods do not land on
    /// the `closed` nodes.
    pub fn run_consolidation<'p, 's>(
        &'s self,
        removed: &[usize],
        closed: &'s ClosedNodes,
        pods: impl Iterator<Item = &'p Pod>,
    ) -> Solution {
        self.run_with(removed, Some(closed), pods)
    }

    /// The run behind [`Prepared::run`] and [`Prepared::run_consolidation`].
    fn run_with<'p, 's>(
        &'s self,
        removed: &[usize],
        closed: Option<&'s ClosedNodes>,
        pods: impl Iterator<Item = &'p Pod>,
    ) -> Solution {
        let mut solution = Solution::default();
        let pending = self.admit(pods, &mut solution);
        let mut scheduler = Scheduler::new(self, removed, &pending);
        scheduler.closed = closed;
        for (index, error) in scheduler.schedule(&pending) {
            solution
                .unschedulable
                .insert(pending[index].key.clone(), error);
        }
        scheduler.answer(&pending, &mut solution);
        solution
    }

    /// The pods Karpenter would schedule, preferences stripped when they
    /// are ignored; the others go to `solution` as unschedulable.
    fn admit<'p>(
        &self,
        pods: impl Iterator<Item = &'p Pod>,
        solution: &mut Solution,
    ) -> Vec<Cow<'p, Pod>> {
        let mut pending: Vec<Cow<'_, Pod>> = Vec::new();
        for pod in pods {
            if let Err(reason) = validate_pod(pod, &self.well_known) {
                solution.unschedulable.insert(pod.key.clone(), reason);
                continue;
            }
            if pod.dra_requests && !self.options.plan_dra_pods {
                solution
                    .unschedulable
                    .insert(pod.key.clone(), super::DRA_NOT_SUPPORTED.to_owned());
                continue;
            }
            if pod.is_daemon() {
                // Karpenter's IsProvisionable: the DaemonSet is overhead on
                // every node it selects, never a reason to launch one.
                solution.unschedulable.insert(
                    pod.key.clone(),
                    "owned by a DaemonSet, which is not provisioned for: it counts as overhead on the nodes it selects".to_owned(),
                );
                continue;
            }
            let mut pod = Cow::Borrowed(pod);
            if self.options.ignore_preferences {
                strip_preferences(pod.to_mut());
            }
            pending.push(pod);
        }
        pending
    }
}

/// One scheduling run on a prepared snapshot: the existing nodes and the
/// claims as pods land on them, the limits left, the topology counts, and
/// which claims are known to refuse which class of pods.
pub(super) struct Scheduler<'c> {
    pub(super) cluster: &'c Cluster,
    pub(super) options: &'c Options,
    pub(super) well_known: &'c WellKnownSet,
    pub(super) templates: &'c [Template],
    pub(super) existing: Vec<ExistingNode<'c>>,
    pub(super) claims: Vec<Claim>,
    /// Claims in Karpenter's try order: fewest pods first, and among equals
    /// the one that came first in the previous order.
    pub(super) claim_order: BTreeMap<usize, VecDeque<usize>>,
    pub(super) remaining_limits: HashMap<usize, BTreeMap<String, i64>>,
    pub(super) topology: Topology<'c>,
    tolerate_prefer_no_schedule: bool,
    /// Claims that refuse a pod class for good, by class.
    pub(super) blocked: HashMap<u64, ClassMemo>,
    /// Why each ready pool that offers nothing was skipped.
    pub(super) skipped_pools: &'c [String],
    /// In a consolidation simulation: nodes pods may not move onto.
    pub(super) closed: Option<&'c ClosedNodes>,
}

impl<'c> Scheduler<'c> {
    /// A run on the prepared snapshot with the `removed` nodes gone (their
    /// capacity no longer counts against limits) and `pending` to place.
    fn new(
        prepared: &'c Prepared<'c>,
        removed: &[usize],
        pending: &[Cow<'_, Pod>],
    ) -> Scheduler<'c> {
        let cluster = prepared.cluster;
        let mut removed_mask = vec![false; cluster.nodes.len()];
        for index in removed {
            if let Some(slot) = removed_mask.get_mut(*index) {
                *slot = true;
            }
        }
        let mut remaining_limits = prepared.limits.clone();
        for index in removed {
            let Some(node) = cluster.nodes.get(*index) else {
                continue;
            };
            if node.marked_for_deletion {
                continue;
            }
            for template in &prepared.templates {
                let pool = &cluster.node_pools[template.pool];
                if pool.name == node.node_pool
                    && let Some(limits) = remaining_limits.get_mut(&template.pool)
                {
                    for (name, limit) in limits.iter_mut() {
                        *limit += limit_cost(&node.capacity, name);
                    }
                }
            }
        }
        let mut topology = Topology::new(
            cluster,
            &prepared.topology,
            removed_mask.clone(),
            pending,
            !prepared.options.ignore_preferences,
        );
        let mut existing = Vec::with_capacity(prepared.node_order.len());
        for &index in &prepared.node_order {
            if removed_mask[index] {
                continue;
            }
            let Some(base) = prepared.nodes[index].as_ref() else {
                continue;
            };
            let node = &cluster.nodes[index];
            topology.register(
                labels::HOSTNAME,
                node.labels.get(labels::HOSTNAME).map_or(&node.name, |h| h),
            );
            existing.push(ExistingNode {
                node: index,
                base,
                state: None,
                pods: Vec::new(),
            });
        }
        Scheduler {
            cluster,
            options: prepared.options,
            well_known: &prepared.well_known,
            templates: &prepared.templates,
            existing,
            claims: Vec::new(),
            claim_order: BTreeMap::new(),
            remaining_limits,
            topology,
            tolerate_prefer_no_schedule: prepared.tolerate_prefer_no_schedule,
            blocked: HashMap::new(),
            skipped_pools: &prepared.skipped_pools,
            closed: None,
        }
    }

    /// Places the pending pods, largest first, until a whole pass places
    /// nothing or the caller interrupts. Returns why each unplaced pod is.
    fn schedule(&mut self, pending: &[Cow<'_, Pod>]) -> BTreeMap<usize, String> {
        let mut order: Vec<usize> = (0..pending.len()).collect();
        order.sort_by(|a, b| {
            let (a, b) = (&pending[*a], &pending[*b]);
            b.requests
                .cpu
                .cmp(&a.requests.cpu)
                .then_with(|| b.requests.memory.cmp(&a.requests.memory))
                .then_with(|| a.creation_seconds.cmp(&b.creation_seconds))
                .then_with(|| a.uid.cmp(&b.uid))
        });
        let mut queue = Queue {
            pods: order.into_iter().collect(),
            last_len: HashMap::new(),
        };
        let mut errors: BTreeMap<usize, String> = BTreeMap::new();
        while let Some(index) = queue.pop() {
            if self.options.interrupted() {
                errors.insert(index, INTERRUPTED.to_owned());
                errors.extend(queue.pods.drain(..).map(|i| (i, INTERRUPTED.to_owned())));
                break;
            }
            match self.try_schedule(index, &pending[index]) {
                Ok(()) => {
                    errors.remove(&index);
                }
                Err(error) => {
                    errors.insert(index, error);
                    self.topology.update(&pending[index]);
                    queue.push(index);
                }
            }
        }
        errors
    }

    /// Places the pod, relaxing its preferences one at a time until it fits
    /// or none is left. Returns the error of the last attempt.
    fn try_schedule(&mut self, index: usize, original: &Pod) -> Result<(), String> {
        // Most pods fit as they are: copy one only to relax it.
        let mut pod = Cow::Borrowed(original);
        loop {
            let data = self.pod_data(&pod);
            let error = match self.add(index, &pod, &data) {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            if self.options.ignore_preferences
                || !relax(pod.to_mut(), self.tolerate_prefer_no_schedule)
            {
                return Err(error);
            }
            self.topology.update(&pod);
        }
    }

    /// Places the pod on the first existing node that takes it, else the
    /// first planned claim, else a new claim; the error explains why no
    /// node pool could launch one for it.
    fn add(&mut self, pod_index: usize, pod: &Pod, data: &PodData) -> Result<(), String> {
        if self.add_to_existing(pod_index, pod, data) || self.add_to_planned(pod_index, pod, data) {
            return Ok(());
        }
        self.add_to_new_claim(pod_index, pod, data)
    }

    /// Writes where the run placed the pods: existing nodes, then the
    /// claims to launch (a claim that fails minValues strands its pods).
    fn answer(&self, pending: &[Cow<'_, Pod>], solution: &mut Solution) {
        for existing in &self.existing {
            if existing.pods.is_empty() {
                continue;
            }
            let mut pods: Vec<PodKey> = existing
                .pods
                .iter()
                .map(|i| pending[*i].key.clone())
                .collect();
            pods.sort();
            solution
                .existing
                .insert(self.cluster.nodes[existing.node].name.clone(), pods);
        }
        let mut memo = FinalizeMemo::default();
        for claim in &self.claims {
            match finalize(self, claim, self.options, &mut memo) {
                Ok(planned) => {
                    let mut planned = planned;
                    planned.pods = claim.pods.iter().map(|i| pending[*i].key.clone()).collect();
                    planned.pods.sort();
                    solution.new_claims.push(planned);
                }
                Err(error) => {
                    for index in &claim.pods {
                        solution.unschedulable.insert(
                        pending[*index].key.clone(),
                        format!("pod didn't schedule because NodePool couldn't meet minValues requirements, {error}"),
                    );
                    }
                }
            }
        }
    }

    fn pod_data(&self, pod: &Pod) -> PodData {
        let strict = pod_requirements(pod, false);
        let requirements = if self.options.ignore_preferences {
            strict.clone()
        } else {
            pod_requirements(pod, true)
        };
        PodData {
            strict: if pod.preferred_terms.is_empty() || self.options.ignore_preferences {
                requirements.clone()
            } else {
                strict
            },
            requirements,
            class: constraint_class(pod),
        }
    }

    /// Merges the pod's topology into `requirements`. `None` as the error
    /// when `explain` is off: the caller discards it, so nothing is built.
    pub(super) fn add_topology<'r>(
        &self,
        pod: &Pod,
        taints: &[Taint],
        data: &PodData,
        requirements: Cow<'r, Requirements>,
        well_known: &dyn WellKnown,
        explain: bool,
    ) -> Result<Cow<'r, Requirements>, Reject> {
        let topology = self
            .topology
            .add_requirements(
                pod,
                taints,
                &data.strict,
                &requirements,
                well_known,
                explain,
            )
            .map_err(|blocked| Reject {
                permanent: blocked.permanent,
                until_affinity_changes: blocked.until_affinity_changes,
                message: blocked.error.map(|e| e.to_string()),
            })?;
        if topology.is_empty() {
            return Ok(requirements);
        }
        let topology = Requirements::from_requirements(topology);
        requirements
            .compatible(&topology, well_known)
            .map_err(|e| Reject::transient(explain.then(|| e.to_string())))?;
        let mut requirements = requirements.into_owned();
        requirements.add_all(&topology);
        Ok(Cow::Owned(requirements))
    }

    pub(super) fn catalog(&self, template: usize) -> &'c [InstanceType] {
        let cluster = self.cluster;
        let pool = &cluster.node_pools[self.templates[template].pool];
        cluster
            .catalogs
            .get(pool.catalog)
            .map_or(&[][..], Vec::as_slice)
    }

    pub(super) fn pool_taints(&self, template: usize) -> &'c [Taint] {
        let cluster = self.cluster;
        &cluster.node_pools[self.templates[template].pool].taints
    }
}

/// Pops pods in order until a whole pass makes no progress.
struct Queue {
    pods: VecDeque<usize>,
    last_len: HashMap<usize, usize>,
}

impl Queue {
    fn pop(&mut self) -> Option<usize> {
        let front = *self.pods.front()?;
        if self.last_len.get(&front) == Some(&self.pods.len()) {
            return None;
        }
        self.pods.pop_front()
    }

    fn push(&mut self, pod: usize) {
        self.pods.push_back(pod);
        self.last_len.insert(pod, self.pods.len());
    }
}

/// What a pod asks of a node, derived from its (possibly relaxed) spec.
pub(super) struct PodData {
    pub(super) requirements: Requirements,
    strict: Requirements,
    /// Pods with equal classes ask the same of a node apart from resources.
    pub(super) class: u64,
}

/// Everything about a pod that decides where it may go, except its size.
fn constraint_class(pod: &Pod) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = karpenter_core::hash::Fnv1a64::default();
    pod.key.namespace.hash(&mut hasher);
    pod.labels.hash(&mut hasher);
    pod.node_selector.hash(&mut hasher);
    pod.required_terms.hash(&mut hasher);
    pod.preferred_terms.hash(&mut hasher);
    pod.pod_affinity.hash(&mut hasher);
    pod.preferred_pod_affinity.hash(&mut hasher);
    pod.pod_anti_affinity.hash(&mut hasher);
    pod.preferred_pod_anti_affinity.hash(&mut hasher);
    pod.spread.hash(&mut hasher);
    pod.tolerations.hash(&mut hasher);
    pod.host_ports.hash(&mut hasher);
    hasher.finish()
}

/// Why a node or claim refused a pod.
pub(super) struct Reject {
    /// It will refuse every pod of the same class from now on (taints, host
    /// ports, requirements and hostname counts only ever tighten).
    pub(super) permanent: bool,
    /// It will refuse the class until an affinity domain is newly populated.
    pub(super) until_affinity_changes: bool,
    pub(super) message: Option<String>,
}

impl Reject {
    pub(super) fn permanent(message: Option<String>) -> Self {
        Self {
            permanent: true,
            until_affinity_changes: false,
            message,
        }
    }

    pub(super) fn transient(message: Option<String>) -> Self {
        Self {
            permanent: false,
            until_affinity_changes: false,
            message,
        }
    }
}

/// New requirements, or `None` when they are still the borrowed ones.
pub(super) fn changed(requirements: Cow<'_, Requirements>) -> Option<Requirements> {
    match requirements {
        Cow::Borrowed(_) => None,
        Cow::Owned(requirements) => Some(requirements),
    }
}

/// The node's requirements with the pod's added; borrowed when the pod adds
/// nothing (most pods select on nothing), so the common case copies nothing.
pub(super) fn merge<'a>(node: &'a Requirements, pod: &Requirements) -> Cow<'a, Requirements> {
    let adds_nothing = pod.iter().all(|r| {
        node.get(r.key())
            .is_some_and(|existing| existing.intersection(r) == *existing)
    });
    if adds_nothing {
        Cow::Borrowed(node)
    } else {
        let mut merged = node.clone();
        merged.add_all(pod);
        Cow::Owned(merged)
    }
}
