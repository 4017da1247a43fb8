//! Provisioning: Karpenter's scheduler loop.
//!
//! Pods are taken largest first (CPU, then memory). Each goes to the first
//! existing or in-flight node that takes it, else the first claim planned in
//! this round (fewest pods first), else a new claim from the first node pool
//! (weight, then name) that can hold it. A pod that fits nowhere has its
//! preferences relaxed one at a time and is tried again; the queue ends when
//! a whole pass places nothing.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

use crate::columns::{ColumnCheck, TypeColumns};
use crate::daemons::DaemonGroups;
use crate::hostports::HostPortUsage;
use crate::labels;
use crate::model::{
    Cluster, InstanceType, OfferingFilter, OfferingSpace, Pod, PodKey, WhenUnsatisfiable,
};
use crate::pods::pod_requirements;
use crate::requirements::{Operator, Requirement, Requirements, WellKnown};
use crate::resources::Resources;
use crate::taints::{Effect, Taint, Toleration, first_untolerated};
use crate::topology::{PoolDomains, Topology, TopologyBase};

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

struct WellKnownSet(HashSet<String>);

impl WellKnown for WellKnownSet {
    fn is_well_known(&self, key: &str) -> bool {
        self.0.contains(key)
    }
}

struct Template {
    pool: usize,
    requirements: Requirements,
    instance_types: Vec<usize>,
    daemons: DaemonGroups,
    /// The requirements of `instance_types`, by key.
    columns: TypeColumns,
    /// The most any of `instance_types` leaves for pods.
    max_room: Resources,
    /// The largest capacity of `instance_types`, per resource.
    max_capacity: Resources,
}

/// An existing node as a run starts: shared by every run on the snapshot.
struct NodeBase {
    requirements: Arc<Requirements>,
    remaining: Resources,
    ports: HostPortUsage,
}

/// What a run changed on an existing node.
#[derive(Clone)]
struct NodeState {
    requirements: Requirements,
    remaining: Resources,
    ports: HostPortUsage,
}

/// An existing node in one run: its shared base until a pod lands on it.
struct ExistingNode<'a> {
    node: usize,
    base: &'a NodeBase,
    state: Option<Box<NodeState>>,
    pods: Vec<usize>,
}

impl ExistingNode<'_> {
    fn requirements(&self) -> &Requirements {
        self.state
            .as_ref()
            .map_or(&*self.base.requirements, |s| &s.requirements)
    }

    fn remaining(&self) -> &Resources {
        self.state
            .as_ref()
            .map_or(&self.base.remaining, |s| &s.remaining)
    }

    fn ports(&self) -> &HostPortUsage {
        self.state.as_ref().map_or(&self.base.ports, |s| &s.ports)
    }

    fn state_mut(&mut self) -> &mut NodeState {
        let base = self.base;
        self.state.get_or_insert_with(|| {
            Box::new(NodeState {
                requirements: (*base.requirements).clone(),
                remaining: base.remaining.clone(),
                ports: base.ports.clone(),
            })
        })
    }
}

struct Claim {
    template: usize,
    hostname: String,
    requirements: Requirements,
    instance_types: Vec<usize>,
    /// The pods' requests; daemon overhead depends on the instance type.
    requests: Resources,
    /// The most any remaining instance type could still take, for a cheap
    /// first check.
    headroom: Resources,
    /// The most any remaining instance type leaves for pods.
    max_room: Resources,
    pods: Vec<usize>,
    ports: HostPortUsage,
    min_values_relaxed: bool,
}

/// What a pod asks of a node, derived from its (possibly relaxed) spec.
struct PodData {
    requirements: Requirements,
    strict: Requirements,
    /// Pods with equal classes ask the same of a node apart from resources.
    class: u64,
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
struct Reject {
    /// It will refuse every pod of the same class from now on (taints, host
    /// ports, requirements and hostname counts only ever tighten).
    permanent: bool,
    /// It will refuse the class until an affinity domain is newly populated.
    until_affinity_changes: bool,
    message: Option<String>,
}

impl Reject {
    fn permanent(message: Option<String>) -> Self {
        Self {
            permanent: true,
            until_affinity_changes: false,
            message,
        }
    }

    fn transient(message: Option<String>) -> Self {
        Self {
            permanent: false,
            until_affinity_changes: false,
            message,
        }
    }
}

/// A set of claim indices.
#[derive(Default)]
struct ClaimSet {
    bits: Vec<u64>,
    count: usize,
}

impl ClaimSet {
    fn contains(&self, claim: usize) -> bool {
        self.bits
            .get(claim / 64)
            .is_some_and(|word| word & (1 << (claim % 64)) != 0)
    }

    fn insert(&mut self, claim: usize) {
        let word = claim / 64;
        if self.bits.len() <= word {
            self.bits.resize(word + 1, 0);
        }
        if self.bits[word] & (1 << (claim % 64)) == 0 {
            self.bits[word] |= 1 << (claim % 64);
            self.count += 1;
        }
    }
}

/// Claims known to refuse a pod class, so a scan skips them. The decisions
/// are the same as trying each claim: only refusals that cannot turn into
/// acceptance (before the affinity epoch moves) are remembered.
#[derive(Default)]
struct ClassMemo {
    permanent: ClaimSet,
    until_affinity_changes: ClaimSet,
    epoch: u64,
}

impl ClassMemo {
    fn contains(&self, claim: usize) -> bool {
        self.permanent.contains(claim) || self.until_affinity_changes.contains(claim)
    }

    fn count(&self) -> usize {
        self.permanent.count + self.until_affinity_changes.count
    }
}

fn remove_heaviest<T>(list: &mut Vec<(i32, T)>) -> bool {
    let Some(index) = list
        .iter()
        .enumerate()
        .fold(None::<(usize, i32)>, |best, (i, (w, _))| match best {
            Some((_, bw)) if bw >= *w => best,
            _ => Some((i, *w)),
        })
        .map(|(i, _)| i)
    else {
        return false;
    };
    list.remove(index);
    true
}

/// Removes one soft constraint, in Karpenter's order. False when none is left.
fn relax(pod: &mut Pod, tolerate_prefer_no_schedule: bool) -> bool {
    if pod.required_terms.len() > 1 {
        pod.required_terms.remove(0);
        return true;
    }
    if remove_heaviest(&mut pod.preferred_pod_affinity) {
        return true;
    }
    if remove_heaviest(&mut pod.preferred_pod_anti_affinity) {
        return true;
    }
    if remove_heaviest(&mut pod.preferred_terms) {
        return true;
    }
    if let Some(index) = pod
        .spread
        .iter()
        .position(|c| c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
    {
        pod.spread.swap_remove(index);
        return true;
    }
    if tolerate_prefer_no_schedule {
        let toleration = Toleration {
            key: String::new(),
            exists: true,
            value: String::new(),
            effect: Some(Effect::PreferNoSchedule),
        };
        if !pod.tolerations.contains(&toleration) {
            pod.tolerations.push(toleration);
            return true;
        }
    }
    false
}

fn strip_preferences(pod: &mut Pod) {
    pod.preferred_terms.clear();
    pod.preferred_pod_affinity.clear();
    pod.preferred_pod_anti_affinity.clear();
    pod.spread
        .retain(|c| c.when_unsatisfiable != WhenUnsatisfiable::ScheduleAnyway);
}

/// Keys Kubernetes reserves: a pod that selects on them (other than the
/// well-known ones) is not Karpenter's to schedule.
fn restricted_label(key: &str, well_known: &dyn WellKnown) -> bool {
    !well_known.is_well_known(key)
        && labels::in_restricted_domain(key, labels::NEUTRAL_RESTRICTED_LABEL_DOMAINS)
}

fn validate_pod(pod: &Pod, well_known: &dyn WellKnown) -> Result<(), String> {
    let selector_keys = pod.node_selector.keys().map(String::as_str);
    let term_keys = pod.required_terms.iter().flat_map(|t| t.keys());
    for key in selector_keys.chain(term_keys) {
        if restricted_label(key, well_known) {
            return Err(format!(
                "label {key:?} is restricted; Karpenter does not schedule pods that select on it"
            ));
        }
    }
    for term in &pod.required_terms {
        if let Some(requirement) = term.get(labels::NODE_POOL)
            && requirement.operator() == Operator::DoesNotExist
        {
            return Err("configured to not run on a Karpenter provisioned node (karpenter.sh/nodepool DoesNotExist)".to_owned());
        }
    }
    Ok(())
}

/// Result of filtering a claim's instance types for one more pod.
struct Filtered {
    /// The options still possible; None when every option is (the common
    /// case, so nothing is copied).
    remaining: Option<Vec<usize>>,
    /// Keys whose minValues were lowered to what the options allow.
    relaxed_min_values: BTreeMap<String, usize>,
}

fn min_values_shortfall(
    catalog: &[InstanceType],
    options: &[usize],
    requirements: &Requirements,
) -> BTreeMap<String, usize> {
    let mut shortfall = BTreeMap::new();
    for requirement in requirements.iter() {
        let Some(min) = requirement.min_values() else {
            continue;
        };
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for index in options {
            if let Some(values) = catalog[*index].requirements.get(requirement.key()) {
                seen.extend(values.values().iter().map(String::as_str));
            }
            if seen.len() >= min {
                break;
            }
        }
        if seen.len() < min {
            shortfall.insert(requirement.key().to_owned(), seen.len());
        }
    }
    shortfall
}

/// What the instance types are checked against.
struct FilterInput<'a> {
    requirements: &'a Requirements,
    /// The requirements `options` already passed: only keys that changed
    /// since are checked again. None: check every key.
    previous: Option<&'a Requirements>,
    space: &'a OfferingSpace,
    totals: Totals<'a>,
    /// The options' requirements by key, when known.
    columns: Option<&'a TypeColumns>,
    relax_min_values: bool,
    explain: bool,
}

/// The requests an instance type must hold.
#[derive(Clone, Copy)]
enum Totals<'a> {
    /// The same for every instance type.
    Same(&'a Resources),
    /// Per daemon group (pods plus the group's daemons); `None` leaves the
    /// group's instance types out.
    PerGroup {
        totals: &'a [Option<Resources>],
        group_of: &'a [usize],
    },
}

impl Totals<'_> {
    fn for_type(&self, index: usize) -> Option<&Resources> {
        match self {
            Totals::Same(total) => Some(total),
            Totals::PerGroup { totals, group_of } => totals
                .get(group_of.get(index).copied().unwrap_or(0))?
                .as_ref(),
        }
    }

    /// For messages: the total, or its smallest and largest per resource
    /// when daemon overhead differs between instance types.
    fn describe(&self) -> String {
        let all: Vec<&Resources> = match self {
            Totals::Same(total) => vec![*total],
            Totals::PerGroup { totals, .. } => totals.iter().flatten().collect(),
        };
        let Some((first, rest)) = all.split_first() else {
            return Resources::default().to_string();
        };
        let (mut min, mut max) = ((*first).clone(), (*first).clone());
        for total in rest {
            min.min_with(total);
            max.max_with(total);
        }
        if min == max {
            min.to_string()
        } else {
            format!("min={min}, max={max}")
        }
    }
}

fn filter_instance_types(
    catalog: &[InstanceType],
    options: &[usize],
    input: &FilterInput<'_>,
) -> Result<Filtered, Option<String>> {
    let FilterInput {
        requirements,
        previous,
        space,
        totals,
        columns,
        relax_min_values,
        explain,
    } = *input;
    let changed: Option<Vec<&Requirement>> = previous.map(|previous| {
        requirements
            .iter()
            .filter(|r| previous.get(r.key()) != Some(*r))
            .collect()
    });
    let offerings_affected = match &changed {
        None => true,
        Some(keys) => {
            keys.iter()
                .any(|r| r.key() == labels::TOPOLOGY_ZONE || r.key() == labels::CAPACITY_TYPE)
                || (space.has_offering_requirements && !keys.is_empty())
        }
    };
    let offering_filter = offerings_affected.then(|| OfferingFilter::new(requirements, space));
    // With columns, each changed key is compared with the options' few
    // distinct values once; a key no option defines rules none out.
    let column_checks: Option<Vec<ColumnCheck<'_>>> = match (&changed, columns) {
        (Some(keys), Some(columns)) => Some(keys.iter().filter_map(|r| columns.check(r)).collect()),
        _ => None,
    };
    // None while every option so far is kept.
    let mut dropped: Option<Vec<usize>> = None;
    let (mut met, mut fits_any, mut offered) = (false, false, false);
    let (mut met_fits, mut met_offered, mut fits_offered) = (false, false, false);
    let mut held_ports = 0;
    for (position, index) in options.iter().enumerate() {
        let it = &catalog[*index];
        let Some(total) = totals.for_type(*index) else {
            // A daemon pod on this type holds one of the pod's host ports.
            held_ports += 1;
            if dropped.is_none() {
                dropped = Some(options[..position].to_vec());
            }
            continue;
        };
        let fits = total.fits(&it.allocatable);
        let compatible = match (&column_checks, &changed) {
            (Some(checks), _) => checks.iter().all(|check| check.allows(*index)),
            (None, None) => it.requirements.intersects(requirements).is_ok(),
            (None, Some(keys)) => keys.iter().all(|incoming| {
                it.requirements
                    .get(incoming.key())
                    .is_none_or(|own| own.compatible_with(incoming))
            }),
        };
        let offering = offering_filter
            .as_ref()
            .is_none_or(|filter| it.has_compatible_offering(filter));
        met |= compatible;
        fits_any |= fits;
        offered |= offering;
        met_fits |= compatible && fits && !offering;
        met_offered |= compatible && offering && !fits;
        fits_offered |= fits && offering && !compatible;
        let keep = compatible && fits && offering;
        match (&mut dropped, keep) {
            (None, true) | (Some(_), false) => {}
            (None, false) => dropped = Some(options[..position].to_vec()),
            (Some(kept), true) => kept.push(*index),
        }
    }
    let mut remaining: Cow<'_, [usize]> = match dropped {
        None => Cow::Borrowed(options),
        Some(kept) => Cow::Owned(kept),
    };
    let mut relaxed_min_values = BTreeMap::new();
    let mut min_values_error = None;
    if !remaining.is_empty() && requirements.has_min_values() {
        let shortfall = min_values_shortfall(catalog, &remaining, requirements);
        if !shortfall.is_empty() {
            if relax_min_values {
                relaxed_min_values = shortfall;
            } else {
                min_values_error = Some(format!(
                    "minValues requirement is not met for label(s) (label(s)=[{}])",
                    shortfall.keys().cloned().collect::<Vec<_>>().join(" ")
                ));
                remaining = Cow::Owned(Vec::new());
            }
        }
    }
    if !remaining.is_empty() {
        return Ok(Filtered {
            remaining: match remaining {
                Cow::Borrowed(_) => None,
                Cow::Owned(kept) => Some(kept),
            },
            relaxed_min_values,
        });
    }
    if !explain {
        return Err(None);
    }
    let reason = if let Some(error) = min_values_error {
        error
    } else if !met && !fits_any && !offered {
        "no instance type met the scheduling requirements or had enough resources or had a required offering".to_owned()
    } else if !met && !fits_any {
        "no instance type met the scheduling requirements or had enough resources".to_owned()
    } else if !met && !offered {
        "no instance type met the scheduling requirements or had a required offering".to_owned()
    } else if !fits_any && !offered {
        "no instance type had enough resources or had a required offering".to_owned()
    } else if !met {
        "no instance type met all requirements".to_owned()
    } else if !fits_any {
        let mut message = "no instance type has enough resources".to_owned();
        if options
            .iter()
            .filter_map(|i| totals.for_type(*i))
            .any(|total| total.cpu >= 1_000_000_000)
        {
            message.push_str(" (CPU request >= 1 Million, m vs M typo?)");
        }
        message
    } else if !offered {
        "no instance type has the required offering".to_owned()
    } else if met_fits {
        "no instance type which met the scheduling requirements and had enough resources, had a required offering".to_owned()
    } else if fits_offered {
        "no instance type which had enough resources and the required offering met the scheduling requirements".to_owned()
    } else if met_offered {
        "no instance type which met the scheduling requirements and the required offering had the required resources".to_owned()
    } else {
        "no instance type met the requirements/resources/offering tuple".to_owned()
    };
    let held = if held_ports > 0 {
        format!("; a daemonset holds a requested host port on {held_ports} other instance type(s)")
    } else {
        String::new()
    };
    Err(Some(format!(
        "{reason}, requirements={}, resources={}{held}",
        display_requirements(requirements),
        totals.describe()
    )))
}

/// Requirements as Karpenter prints them: hostname hidden.
fn display_requirements(requirements: &Requirements) -> String {
    requirements
        .iter()
        .filter(|r| r.key() != labels::HOSTNAME)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pool limit on how many nodes it may have (`limits.nodes`).
const NODES_LIMIT: &str = "nodes";

/// What one node with `capacity` costs against the limit `name`: its
/// capacity, or 1 for the `nodes` limit.
fn limit_cost(capacity: &Resources, name: &str) -> i64 {
    if name == NODES_LIMIT {
        1
    } else {
        capacity.get(name)
    }
}

/// Everything about a snapshot that does not change between scheduling runs
/// on it: templates per ready pool, existing nodes as they stand, limits,
/// the topology universe. Disruption simulates many runs on one snapshot;
/// each starts from this instead of rebuilding it.
pub struct Prepared<'c> {
    cluster: &'c Cluster,
    options: &'c Options,
    well_known: WellKnownSet,
    templates: Vec<Template>,
    skipped_pools: Vec<String>,
    tolerate_prefer_no_schedule: bool,
    /// Pool index -> limits left, counting every node not being deleted.
    limits: HashMap<usize, BTreeMap<String, i64>>,
    /// Per cluster node; None for nodes being deleted.
    nodes: Vec<Option<NodeBase>>,
    /// Existing nodes in the order pods try them: initialized first, then
    /// by name.
    node_order: Vec<usize>,
    topology: TopologyBase,
}

impl<'c> Prepared<'c> {
    pub fn new(cluster: &'c Cluster, options: &'c Options) -> Prepared<'c> {
        let mut well_known: HashSet<String> = labels::NEUTRAL_WELL_KNOWN_LABELS
            .iter()
            .map(|k| (*k).to_owned())
            .collect();
        well_known.extend(options.well_known_labels.iter().cloned());
        for catalog in &cluster.catalogs {
            for it in catalog {
                well_known.extend(it.requirements.keys().map(str::to_owned));
            }
        }
        let well_known = WellKnownSet(well_known);
        let mut pool_order: Vec<usize> = (0..cluster.node_pools.len())
            .filter(|i| cluster.node_pools[*i].ready)
            .collect();
        pool_order.sort_by(|a, b| {
            let (a, b) = (&cluster.node_pools[*a], &cluster.node_pools[*b]);
            // Karpenter's OrderByWeight: heavier first, then the name later
            // in the alphabet.
            b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name))
        });
        let mut templates = Vec::new();
        let mut pool_domains = Vec::new();
        let mut skipped_pools = Vec::new();
        for pool_index in pool_order {
            let pool = &cluster.node_pools[pool_index];
            let catalog = cluster
                .catalogs
                .get(pool.catalog)
                .map_or(&[][..], Vec::as_slice);
            let no_requests = Resources::default();
            let filtered = match filter_instance_types(
                catalog,
                &(0..catalog.len()).collect::<Vec<_>>(),
                &FilterInput {
                    requirements: &pool.requirements,
                    previous: None,
                    space: &cluster.offering_space,
                    totals: Totals::Same(&no_requests),
                    columns: None,
                    relax_min_values: options.min_values_policy == MinValuesPolicy::BestEffort,
                    explain: true,
                },
            ) {
                Ok(filtered) => filtered,
                Err(reason) => {
                    skipped_pools.push(format!(
                        "nodepool requirements filtered out all available instance types (nodepool {:?}: {})",
                        pool.name,
                        reason.unwrap_or_default()
                    ));
                    continue;
                }
            };
            pool_domains.push(PoolDomains {
                requirements: &pool.requirements,
                taints: &pool.taints,
                instance_types: catalog,
            });
            let instance_types = filtered
                .remaining
                .unwrap_or_else(|| (0..catalog.len()).collect());
            let daemons = DaemonGroups::build(
                &cluster.daemon_sets,
                pool,
                catalog,
                &instance_types,
                &well_known,
            );
            let columns = TypeColumns::build(catalog, &instance_types);
            let max_room = daemons.max_room(catalog, &instance_types);
            let mut max_capacity = Resources::default();
            for index in &instance_types {
                max_capacity.max_with(&catalog[*index].capacity);
            }
            templates.push(Template {
                max_room,
                max_capacity,
                pool: pool_index,
                requirements: pool.requirements.clone(),
                instance_types,
                daemons,
                columns,
            });
        }

        let tolerate_prefer_no_schedule = templates.iter().any(|t| {
            cluster.node_pools[t.pool]
                .taints
                .iter()
                .any(|taint| taint.effect == Effect::PreferNoSchedule)
        });

        let mut limits: HashMap<usize, BTreeMap<String, i64>> = HashMap::new();
        for template in &templates {
            let pool = &cluster.node_pools[template.pool];
            let mut remaining = pool.limits.clone();
            let nodes: Vec<_> = cluster
                .nodes
                .iter()
                .filter(|n| n.node_pool == pool.name && !n.marked_for_deletion)
                .collect();
            let (used, node_count) = if nodes.is_empty() {
                (pool.usage.clone(), pool.usage.get(NODES_LIMIT))
            } else {
                let mut sum = Resources::default();
                for node in &nodes {
                    sum.add(&node.capacity);
                }
                (sum, nodes.len() as i64)
            };
            for (name, limit) in remaining.iter_mut() {
                *limit -= if name == NODES_LIMIT {
                    node_count
                } else {
                    used.get(name)
                };
            }
            limits.insert(template.pool, remaining);
        }

        let topology = TopologyBase::new(cluster, &pool_domains);

        let mut node_order: Vec<usize> = (0..cluster.nodes.len())
            .filter(|i| !cluster.nodes[*i].marked_for_deletion)
            .collect();
        node_order.sort_by(|a, b| {
            let (a, b) = (&cluster.nodes[*a], &cluster.nodes[*b]);
            b.initialized
                .cmp(&a.initialized)
                .then_with(|| a.name.cmp(&b.name))
        });
        let nodes = cluster
            .nodes
            .iter()
            .map(|node| (!node.marked_for_deletion).then(|| node_base(cluster, node)))
            .collect();
        Prepared {
            cluster,
            options,
            well_known,
            templates,
            skipped_pools,
            tolerate_prefer_no_schedule,
            limits,
            nodes,
            node_order,
            topology,
        }
    }
}

fn node_base(cluster: &Cluster, node: &crate::model::StateNode) -> NodeBase {
    let requirements = Arc::clone(&node.label_requirements);
    let mut used = Resources::default();
    let mut ports = HostPortUsage::default();
    let mut daemon_used = Resources::default();
    for pod in &node.pods {
        if pod.is_terminal() {
            continue;
        }
        used.add(&pod.requests);
        ports.add(&pod.host_ports);
        if pod.is_daemon() {
            daemon_used.add(&pod.requests);
        }
    }
    // Daemonsets that will land on the node but have not yet.
    let mut daemon_expected = Resources::default();
    for ds in &cluster.daemon_sets {
        if first_untolerated(&node.taints, &ds.pod.tolerations).is_none()
            && requirements
                .compatible(
                    &pod_requirements(&ds.pod, false),
                    &crate::requirements::NoneWellKnown,
                )
                .is_ok()
        {
            daemon_expected.add(&ds.pod.requests);
        }
    }
    let mut daemon_missing = daemon_expected.minus(&daemon_used);
    floor_at_zero(&mut daemon_missing);
    NodeBase {
        remaining: node.allocatable.minus(&used).minus(&daemon_missing),
        requirements,
        ports,
    }
}

struct Scheduler<'c> {
    cluster: &'c Cluster,
    options: &'c Options,
    well_known: &'c WellKnownSet,
    templates: &'c [Template],
    existing: Vec<ExistingNode<'c>>,
    claims: Vec<Claim>,
    /// Claims in Karpenter's try order: fewest pods first, and among equals
    /// the one that came first in the previous order.
    claim_order: BTreeMap<usize, VecDeque<usize>>,
    remaining_limits: HashMap<usize, BTreeMap<String, i64>>,
    topology: Topology<'c>,
    tolerate_prefer_no_schedule: bool,
    /// Claims that refuse a pod class for good, by class.
    blocked: HashMap<u64, ClassMemo>,
    /// Why each ready pool that offers nothing was skipped.
    skipped_pools: &'c [String],
    /// In a consolidation simulation: nodes pods may not move onto.
    closed: Option<&'c ClosedNodes>,
}

/// Existing nodes a consolidation may not move pods onto (Karpenter's
/// `isUnderConsolidateAfter`: their pool's `consolidateAfter` window is
/// still open); pending pods and pods of deleting nodes may still go there.
#[derive(Clone, Debug, Default)]
pub struct ClosedNodes {
    /// By node index.
    pub closed: Vec<bool>,
    /// Names of nodes marked for deletion.
    pub deleting: HashSet<String>,
}

impl ClosedNodes {
    fn refuses(&self, node: usize, pod: &Pod) -> bool {
        self.closed.get(node).copied().unwrap_or(false)
            && !pod.node_name.is_empty()
            && !self.deleting.contains(&pod.node_name)
    }
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

    fn catalog(&self, template: usize) -> &'c [InstanceType] {
        let cluster = self.cluster;
        let pool = &cluster.node_pools[self.templates[template].pool];
        cluster
            .catalogs
            .get(pool.catalog)
            .map_or(&[][..], Vec::as_slice)
    }

    fn pool_taints(&self, template: usize) -> &'c [Taint] {
        let cluster = self.cluster;
        &cluster.node_pools[self.templates[template].pool].taints
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
    fn add_topology<'r>(
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

    fn can_add_existing(
        &self,
        existing: &ExistingNode,
        pod: &Pod,
        data: &PodData,
    ) -> Result<Option<Requirements>, Reject> {
        let node = &self.cluster.nodes[existing.node];
        if first_untolerated(&node.taints, &pod.tolerations).is_some() {
            return Err(Reject::permanent(None));
        }
        if existing.ports().conflict(&pod.host_ports).is_some() {
            return Err(Reject::permanent(None));
        }
        if !pod.requests.fits(existing.remaining()) {
            return Err(Reject::transient(None));
        }
        let none = crate::requirements::NoneWellKnown;
        existing
            .requirements()
            .compatible(&data.requirements, &none)
            .map_err(|_| Reject::permanent(None))?;
        let requirements = merge(existing.requirements(), &data.requirements);
        self.add_topology(pod, &node.taints, data, requirements, &none, false)
            .map(changed)
    }

    /// `explain` builds the error message (a new claim's error explains the
    /// pod) and skips the early rejection on the claim's resource headroom.
    fn can_add_claim(
        &self,
        claim: &Claim,
        pod: &Pod,
        data: &PodData,
        explain: bool,
    ) -> Result<(Option<Requirements>, Filtered), Reject> {
        let taints = self.pool_taints(claim.template);
        if let Some(taint) = first_untolerated(taints, &pod.tolerations) {
            return Err(Reject::permanent(
                explain.then(|| format!("did not tolerate taint (taint={taint})")),
            ));
        }
        let daemons = &self.templates[claim.template].daemons;
        if let Some(port) = claim
            .ports
            .conflict(&pod.host_ports)
            .or_else(|| daemons.port_held_everywhere(&claim.instance_types, &pod.host_ports))
        {
            return Err(Reject::permanent(explain.then(|| {
                format!("checking host port usage, host port {port} is in use")
            })));
        }
        if !explain && !pod.requests.fits(&claim.headroom) {
            return Err(Reject::transient(None));
        }
        claim
            .requirements
            .compatible(&data.requirements, self.well_known)
            .map_err(|e| {
                Reject::permanent(explain.then(|| format!("incompatible requirements, {e}")))
            })?;
        let merged = merge(&claim.requirements, &data.requirements);
        let mut requirements =
            self.add_topology(pod, taints, data, merged, self.well_known, explain)?;
        let totals = daemons.totals(&claim.requests.plus(&pod.requests), &pod.host_ports);
        let filtered = filter_instance_types(
            self.catalog(claim.template),
            &claim.instance_types,
            &FilterInput {
                requirements: &requirements,
                previous: Some(&claim.requirements),
                space: &self.cluster.offering_space,
                totals: Totals::PerGroup {
                    totals: &totals,
                    group_of: daemons.group_of(),
                },
                columns: Some(&self.templates[claim.template].columns),
                relax_min_values: self.options.min_values_policy == MinValuesPolicy::BestEffort,
                explain,
            },
        )
        .map_err(Reject::transient)?;
        for (key, count) in &filtered.relaxed_min_values {
            if let Some(requirement) = requirements.to_mut().remove(key) {
                requirements
                    .to_mut()
                    .add(requirement.with_min_values(Some(*count)));
            }
        }
        Ok((changed(requirements), filtered))
    }

    fn commit_claim(
        &mut self,
        claim_index: usize,
        pod_index: usize,
        pod: &Pod,
        requirements: Option<Requirements>,
        filtered: Filtered,
    ) {
        let template = self.claims[claim_index].template;
        let catalog = self.catalog(template);
        let taints = self.pool_taints(template);
        let daemons = &self.templates[template].daemons;
        let claim = &mut self.claims[claim_index];
        claim.pods.push(pod_index);
        claim.requests.add(&pod.requests);
        claim.min_values_relaxed |= !filtered.relaxed_min_values.is_empty();
        if let Some(remaining) = filtered.remaining {
            // The room is an upper bound for a cheap first check: a stale
            // one only lets more claims through to the exact filter, so it
            // is recomputed when the options have halved, not every time.
            if remaining.len() * 2 <= claim.instance_types.len() {
                claim.max_room = daemons.max_room(catalog, &remaining);
            }
            claim.instance_types = remaining;
        }
        claim.headroom = claim.max_room.minus(&claim.requests);
        claim.ports.add(&pod.host_ports);
        if let Some(requirements) = requirements {
            claim.requirements = requirements;
        }
        let hostname = claim.hostname.clone();
        self.topology.register(labels::HOSTNAME, &hostname);
        let claim = &self.claims[claim_index];
        self.topology
            .record(pod, taints, &claim.requirements, self.well_known);
    }

    fn add(&mut self, pod_index: usize, pod: &Pod, data: &PodData) -> Result<(), String> {
        for e in 0..self.existing.len() {
            if self
                .closed
                .as_ref()
                .is_some_and(|c| c.refuses(self.existing[e].node, pod))
            {
                continue;
            }
            if let Ok(requirements) = self.can_add_existing(&self.existing[e], pod, data) {
                let node = &self.cluster.nodes[self.existing[e].node];
                let existing = &mut self.existing[e];
                existing.pods.push(pod_index);
                let state = existing.state_mut();
                state.remaining.subtract(&pod.requests);
                state.ports.add(&pod.host_ports);
                if let Some(requirements) = requirements {
                    state.requirements = requirements;
                }
                self.topology.record(
                    pod,
                    &node.taints,
                    self.existing[e].requirements(),
                    &crate::requirements::NoneWellKnown,
                );
                return Ok(());
            }
        }

        let mut found = None;
        let mut newly_blocked = Vec::new();
        let epoch = self.topology.affinity_epoch();
        if let Some(memo) = self.blocked.get_mut(&data.class)
            && memo.epoch != epoch
        {
            memo.until_affinity_changes = ClaimSet::default();
            memo.epoch = epoch;
        }
        let memo = self.blocked.get(&data.class);
        if memo.is_none_or(|m| m.count() < self.claims.len()) {
            'search: for (count, bucket) in &self.claim_order {
                for (position, claim_index) in bucket.iter().enumerate() {
                    if memo.is_some_and(|m| m.contains(*claim_index)) {
                        continue;
                    }
                    match self.can_add_claim(&self.claims[*claim_index], pod, data, false) {
                        Ok(result) => {
                            found = Some((*count, position, *claim_index, result));
                            break 'search;
                        }
                        Err(reject) if reject.permanent => newly_blocked.push((*claim_index, true)),
                        Err(reject) if reject.until_affinity_changes => {
                            newly_blocked.push((*claim_index, false));
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        if !newly_blocked.is_empty() {
            let memo = self.blocked.entry(data.class).or_insert_with(|| ClassMemo {
                epoch,
                ..ClassMemo::default()
            });
            for (claim, permanent) in newly_blocked {
                if permanent {
                    memo.permanent.insert(claim);
                } else if !memo.permanent.contains(claim) {
                    memo.until_affinity_changes.insert(claim);
                }
            }
        }
        if let Some((count, position, claim_index, (requirements, filtered))) = found {
            if let Some(bucket) = self.claim_order.get_mut(&count) {
                bucket.remove(position);
                if bucket.is_empty() {
                    self.claim_order.remove(&count);
                }
            }
            self.claim_order
                .entry(count + 1)
                .or_default()
                .push_front(claim_index);
            self.commit_claim(claim_index, pod_index, pod, requirements, filtered);
            return Ok(());
        }

        if self.templates.is_empty() {
            return Err(if !self.skipped_pools.is_empty() {
                self.skipped_pools.join("; ")
            } else if self.cluster.node_pools.is_empty() {
                "no node pool exists".to_owned()
            } else {
                let names: Vec<String> = self
                    .cluster
                    .node_pools
                    .iter()
                    .map(|p| format!("{:?}", p.name))
                    .collect();
                format!("no node pool is ready (not ready: {})", names.join(", "))
            });
        }
        let mut errors = Vec::new();
        for t in 0..self.templates.len() {
            let template = &self.templates[t];
            let pool = &self.cluster.node_pools[template.pool];
            let catalog = self.catalog(t);
            let limits = &self.remaining_limits[&template.pool];
            let within_limits = |capacity: &Resources| {
                limits
                    .iter()
                    .all(|(name, remaining)| limit_cost(capacity, name) <= *remaining)
            };
            let instance_types: Vec<usize> = if within_limits(&template.max_capacity) {
                template.instance_types.clone()
            } else {
                template
                    .instance_types
                    .iter()
                    .copied()
                    .filter(|i| within_limits(&catalog[*i].capacity))
                    .collect()
            };
            if instance_types.is_empty() {
                errors.push(format!(
                    "all available instance types exceed limits for nodepool: {:?}",
                    pool.name
                ));
                continue;
            }
            let hostname = format!("hostname-placeholder-{:04}", self.claims.len() + 1);
            let mut requirements = template.requirements.clone();
            requirements.add(Requirement::single(labels::HOSTNAME, &hostname));
            let max_room = if instance_types.len() == template.instance_types.len() {
                template.max_room.clone()
            } else {
                template.daemons.max_room(catalog, &instance_types)
            };
            let claim = Claim {
                template: t,
                hostname,
                requirements,
                headroom: max_room.clone(),
                max_room,
                instance_types,
                requests: Resources::default(),
                pods: Vec::new(),
                ports: HostPortUsage::default(),
                min_values_relaxed: false,
            };
            match self.can_add_claim(&claim, pod, data, true) {
                Ok((requirements, filtered)) => {
                    self.claims.push(claim);
                    let claim_index = self.claims.len() - 1;
                    self.claim_order
                        .entry(1)
                        .or_default()
                        .push_back(claim_index);
                    self.commit_claim(claim_index, pod_index, pod, requirements, filtered);
                    let claim = &self.claims[claim_index];
                    let mut max_capacity = Resources::default();
                    for i in &claim.instance_types {
                        max_capacity.max_with(&catalog[*i].capacity);
                    }
                    if let Some(limits) = self.remaining_limits.get_mut(&self.templates[t].pool) {
                        for (name, remaining) in limits.iter_mut() {
                            *remaining -= limit_cost(&max_capacity, name);
                        }
                    }
                    return Ok(());
                }
                Err(reject) => errors.push(format!(
                    "incompatible with nodepool {:?}, daemonset overhead={}, {}",
                    pool.name,
                    template.daemons.min_overhead(&template.instance_types),
                    reject.message.unwrap_or_default()
                )),
            }
        }
        Err(errors.join("; "))
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
}

/// New requirements, or `None` when they are still the borrowed ones.
fn changed(requirements: Cow<'_, Requirements>) -> Option<Requirements> {
    match requirements {
        Cow::Borrowed(_) => None,
        Cow::Owned(requirements) => Some(requirements),
    }
}

/// The node's requirements with the pod's added; borrowed when the pod adds
/// nothing (most pods select on nothing), so the common case copies nothing.
fn merge<'a>(node: &'a Requirements, pod: &Requirements) -> Cow<'a, Requirements> {
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

fn floor_at_zero(resources: &mut Resources) {
    resources.cpu = resources.cpu.max(0);
    resources.memory = resources.memory.max(0);
    resources.pods = resources.pods.max(0);
    resources.ephemeral_storage = resources.ephemeral_storage.max(0);
    let names: Vec<String> = resources.extended.iter().map(|(n, _)| n.clone()).collect();
    for name in names {
        let value = resources.get(&name);
        resources.set(&name, value.max(0));
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

/// Solves one provisioning round.
pub fn solve(cluster: &Cluster, options: &Options) -> Solution {
    let prepared = Prepared::new(cluster, options);
    // Pods of nodes on their way out need a place too (unless a PDB forbids
    // ever evicting them, in which case they stay until it changes).
    let leaving = cluster
        .nodes
        .iter()
        .filter(|n| n.marked_for_deletion)
        .flat_map(|n| n.pods.iter())
        .filter(|p| p.is_reschedulable() && !cluster.pdbs.iter().any(|pdb| pdb.always_blocks(p)));
    prepared.run(&[], cluster.pending.iter().chain(leaving))
}

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

    fn run_with<'p, 's>(
        &'s self,
        removed: &[usize],
        closed: Option<&'s ClosedNodes>,
        pods: impl Iterator<Item = &'p Pod>,
    ) -> Solution {
        let cluster = self.cluster;
        let options = self.options;
        let mut solution = Solution::default();
        let mut pending: Vec<Cow<'_, Pod>> = Vec::new();
        for pod in pods {
            if let Err(reason) = validate_pod(pod, &self.well_known) {
                solution.unschedulable.insert(pod.key.clone(), reason);
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
            if options.ignore_preferences {
                strip_preferences(pod.to_mut());
            }
            pending.push(pod);
        }
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
        let mut scheduler = Scheduler::new(self, removed, &pending);
        scheduler.closed = closed;
        let mut queue = Queue {
            pods: order.into_iter().collect(),
            last_len: HashMap::new(),
        };
        let mut errors: BTreeMap<usize, String> = BTreeMap::new();
        while let Some(index) = queue.pop() {
            if options.interrupted() {
                errors.insert(index, INTERRUPTED.to_owned());
                errors.extend(queue.pods.drain(..).map(|i| (i, INTERRUPTED.to_owned())));
                break;
            }
            match scheduler.try_schedule(index, &pending[index]) {
                Ok(()) => {
                    errors.remove(&index);
                }
                Err(error) => {
                    errors.insert(index, error);
                    scheduler.topology.update(&pending[index]);
                    queue.push(index);
                }
            }
        }
        for (index, error) in errors {
            solution
                .unschedulable
                .insert(pending[index].key.clone(), error);
        }
        for existing in &scheduler.existing {
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
                .insert(cluster.nodes[existing.node].name.clone(), pods);
        }
        let mut memo = FinalizeMemo::default();
        for claim in &scheduler.claims {
            match finalize(&scheduler, claim, options, &mut memo) {
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
        solution
    }
}

/// What finalizing claims works out once for many: a template's options by
/// price under the offerings a claim allows, and what a set of launch
/// options and offerings means for the launch.
#[derive(Default)]
struct FinalizeMemo {
    price_orders: HashMap<(usize, OfferingFilter), Vec<usize>>,
    launches: HashMap<(Vec<usize>, OfferingFilter), LaunchFacts>,
}

/// What the chosen launch options, with the offerings a claim allows, add
/// to its requirements and labels.
struct LaunchFacts {
    /// The capacity types some allowed offering has.
    capacity_types: Requirement,
    /// The zones some allowed offering is in.
    zones: Requirement,
    cheapest: Option<Cheapest>,
    /// Keys every option pins to listed values: whichever launches, the
    /// node carries one of them.
    type_labels: Vec<Requirement>,
}

impl LaunchFacts {
    fn new(catalog: &[InstanceType], chosen: &[usize], filter: &OfferingFilter) -> LaunchFacts {
        let allowed = || {
            chosen
                .iter()
                .flat_map(|i| catalog[*i].offerings.iter())
                .filter(|o| o.available && filter.allows(o))
        };
        let capacity_types: BTreeSet<&str> = allowed().map(|o| o.capacity_type.as_str()).collect();
        let zones: BTreeSet<&str> = allowed().map(|o| o.zone.as_str()).collect();
        let cheapest = chosen
            .iter()
            .filter_map(|i| {
                catalog[*i]
                    .cheapest_allowed(filter)
                    .map(|o| (&catalog[*i], o))
            })
            .min_by(|a, b| {
                a.1.price
                    .total_cmp(&b.1.price)
                    .then_with(|| a.0.name.cmp(&b.0.name))
            })
            .map(|(it, o)| Cheapest {
                instance_type: it.name.clone(),
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                price: o.price,
            });
        let mut type_labels = Vec::new();
        if let Some(first) = chosen.first() {
            for requirement in catalog[*first].requirements.iter() {
                let key = requirement.key();
                // Zones and capacity types come from the offerings; the
                // instance type is already exactly the chosen names.
                if key == labels::TOPOLOGY_ZONE
                    || key == labels::CAPACITY_TYPE
                    || key == labels::INSTANCE_TYPE
                {
                    continue;
                }
                let mut values: BTreeSet<&str> = BTreeSet::new();
                let all_listed = chosen
                    .iter()
                    .all(|i| match catalog[*i].requirements.get(key) {
                        Some(r) if !r.is_complement() => {
                            values.extend(r.values().iter().map(String::as_str));
                            true
                        }
                        _ => false,
                    });
                if all_listed {
                    type_labels.push(Requirement::in_values(key, values));
                }
            }
        }
        LaunchFacts {
            capacity_types: Requirement::in_values(labels::CAPACITY_TYPE, capacity_types),
            zones: Requirement::in_values(labels::TOPOLOGY_ZONE, zones),
            cheapest,
            type_labels,
        }
    }
}

/// `instance_types` by the price of their cheapest offering `filter`
/// allows (none: last), then by name: Karpenter's launch order.
fn price_order(
    catalog: &[InstanceType],
    instance_types: &[usize],
    filter: &OfferingFilter,
) -> Vec<usize> {
    let mut ranked: Vec<(f64, usize)> = instance_types
        .iter()
        .map(|i| {
            let price = catalog[*i]
                .cheapest_allowed(filter)
                .map_or(f64::MAX, |o| o.price);
            (price, *i)
        })
        .collect();
    ranked.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then_with(|| catalog[a.1].name.cmp(&catalog[b.1].name))
    });
    ranked.into_iter().map(|(_, i)| i).collect()
}

/// Orders a claim's options by price, cuts them to the launch maximum and
/// narrows its requirements to what the launch will carry.
fn finalize(
    scheduler: &Scheduler<'_>,
    claim: &Claim,
    options: &Options,
    memo: &mut FinalizeMemo,
) -> Result<PlannedClaim, String> {
    let catalog = scheduler.catalog(claim.template);
    let pool = &scheduler.cluster.node_pools[scheduler.templates[claim.template].pool];
    let mut requirements = claim.requirements.clone();
    requirements.remove(labels::HOSTNAME);
    let space = &scheduler.cluster.offering_space;
    let filter = OfferingFilter::new(&requirements, space);
    let template = &scheduler.templates[claim.template];
    let order = memo
        .price_orders
        .entry((claim.template, filter))
        .or_insert_with_key(|(_, filter)| price_order(catalog, &template.instance_types, filter));
    let mut kept = vec![false; catalog.len()];
    for index in &claim.instance_types {
        kept[*index] = true;
    }
    // The cheapest few of the claim's options are its launch options.
    let chosen: Vec<usize> = order
        .iter()
        .copied()
        .filter(|i| kept[*i])
        .take(MAX_INSTANCE_TYPES)
        .collect();
    if requirements.has_min_values() && options.min_values_policy == MinValuesPolicy::Strict {
        let shortfall = min_values_shortfall(catalog, &chosen, &requirements);
        if !shortfall.is_empty() {
            return Err(format!(
                "validating minValues, minValues requirement is not met for label(s) (label(s)=[{}])",
                shortfall.keys().cloned().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    let names: Vec<&str> = chosen.iter().map(|i| catalog[*i].name.as_str()).collect();
    let instance_type_min = requirements
        .get(labels::INSTANCE_TYPE)
        .and_then(Requirement::min_values);
    requirements.add(
        Requirement::in_values(labels::INSTANCE_TYPE, names.iter().copied())
            .with_min_values(instance_type_min),
    );
    let filter = OfferingFilter::new(&requirements, space);
    let facts = memo
        .launches
        .entry((chosen.clone(), filter))
        .or_insert_with_key(|(chosen, filter)| LaunchFacts::new(catalog, chosen, filter));
    requirements.add(facts.capacity_types.clone());
    let cheapest = facts.cheapest.clone();
    let mut launch = requirements.clone();
    for requirement in &facts.type_labels {
        launch.add(requirement.clone());
    }
    launch.add(facts.zones.clone());
    requirements.add(facts.zones.clone());
    let mut node_labels = launch.labels();
    node_labels.remove(labels::HOSTNAME);
    Ok(PlannedClaim {
        node_pool: pool.name.clone(),
        instance_types: names.iter().map(|n| (*n).to_owned()).collect(),
        cheapest,
        labels: node_labels,
        requirements,
        taints: pool.taints.clone(),
        startup_taints: pool.startup_taints.clone(),
        pods: Vec::new(),
        requests: claim.requests.plus(
            &scheduler.templates[claim.template]
                .daemons
                .min_overhead(&chosen),
        ),
        min_values_relaxed: claim.min_values_relaxed,
    })
}
