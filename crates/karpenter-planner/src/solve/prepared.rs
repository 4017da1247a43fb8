//! What every scheduling run on one snapshot shares, worked out once: the
//! well-known labels, a template per ready pool (its instance types, daemon
//! overhead and requirement columns), the limits left per pool, existing
//! nodes as they stand and the topology universe. Disruption simulates many
//! runs on one snapshot; each starts from this instead of rebuilding it.
//!
//! Also which pods are not Karpenter's to schedule at all.

use crate::model::NODES_LIMIT;
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::columns::TypeColumns;
use crate::daemons::DaemonGroups;
use crate::labels;
use crate::model::{Cluster, DaemonSet, Pod};
use crate::requirements::{Operator, Requirements, WellKnown};
use crate::resources::Resources;
use crate::taints::Effect;
use crate::topology::{PoolDomains, TopologyBase};

use super::existing::{NodeBase, node_base};
use super::instance_types::{FilterInput, Totals, filter_instance_types, is_min_values_reason};
use super::{MinValuesPolicy, Options};

/// Everything about a snapshot that does not change between scheduling runs
/// on it: templates per ready pool, existing nodes as they stand, limits,
/// the topology universe. Disruption simulates many runs on one snapshot;
/// each starts from this instead of rebuilding it.
pub struct Prepared<'c> {
    pub(super) cluster: &'c Cluster,
    pub(super) options: &'c Options,
    pub(super) well_known: WellKnownSet,
    pub(super) templates: Vec<Template>,
    pub(super) skipped_pools: Vec<String>,
    /// The skipped pools, as [`super::solve`] reports them.
    pub(super) empty_pools: Vec<super::PoolWithoutInstanceTypes>,
    pub(super) tolerate_prefer_no_schedule: bool,
    /// Pool index -> limits left, counting every node not being deleted.
    pub(super) limits: HashMap<usize, BTreeMap<String, i64>>,
    /// Per cluster node; None for nodes being deleted.
    pub(super) nodes: Vec<Option<NodeBase>>,
    /// Existing nodes in the order pods try them: initialized first, then
    /// by name.
    pub(super) node_order: Vec<usize>,
    pub(super) topology: TopologyBase,
}

impl<'c> Prepared<'c> {
    /// Works out what every run on the snapshot shares.
    pub fn new(cluster: &'c Cluster, options: &'c Options) -> Prepared<'c> {
        let well_known = well_known_labels(cluster, options);
        let mut templates = Vec::new();
        let mut pool_domains = Vec::new();
        let mut skipped_pools = Vec::new();
        let mut empty_pools = Vec::new();
        for pool_index in pool_order(cluster) {
            match template(cluster, options, &well_known, pool_index) {
                Ok((template, domains)) => {
                    templates.push(template);
                    pool_domains.push(domains);
                }
                Err((skipped, min_values)) => {
                    skipped_pools.push(skipped);
                    empty_pools.push(super::PoolWithoutInstanceTypes {
                        node_pool: cluster.node_pools[pool_index].name.clone(),
                        min_values,
                    });
                }
            }
        }

        let tolerate_prefer_no_schedule = templates.iter().any(|t| {
            cluster.node_pools[t.pool]
                .taints
                .iter()
                .any(|taint| taint.effect == Effect::PreferNoSchedule)
        });

        let limits = templates
            .iter()
            .map(|template| (template.pool, limits_left(cluster, template.pool)))
            .collect();

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
            empty_pools,
            tolerate_prefer_no_schedule,
            limits,
            nodes,
            node_order,
            topology,
        }
    }
}

/// Karpenter's well-known labels, the provider's, and every key an
/// instance type defines: a pod may select on these before any node has
/// them.
fn well_known_labels(cluster: &Cluster, options: &Options) -> WellKnownSet {
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
    WellKnownSet(well_known)
}

/// The ready pools in the order a new claim tries them.
fn pool_order(cluster: &Cluster) -> Vec<usize> {
    let mut pool_order: Vec<usize> = (0..cluster.node_pools.len())
        .filter(|i| cluster.node_pools[*i].ready)
        .collect();
    pool_order.sort_by(|a, b| {
        let (a, b) = (&cluster.node_pools[*a], &cluster.node_pools[*b]);
        // Karpenter's OrderByWeight: heavier first, then the name later
        // in the alphabet.
        b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name))
    });
    pool_order
}

/// The template of a ready pool and the domains it adds to the topology;
/// the error says why the pool offers nothing.
fn template<'c>(
    cluster: &'c Cluster,
    options: &Options,
    well_known: &WellKnownSet,
    pool_index: usize,
) -> Result<(Template, PoolDomains<'c>), (String, bool)> {
    let pool = &cluster.node_pools[pool_index];
    let catalog = cluster
        .catalogs
        .get(pool.catalog)
        .map_or(&[][..], Vec::as_slice);
    let no_requests = Resources::default();
    let filtered = filter_instance_types(
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
    )
    .map_err(|reason| {
        let reason = reason.unwrap_or_default();
        let min_values = is_min_values_reason(&reason);
        (
            format!(
                "nodepool requirements filtered out all available instance types (nodepool {:?}: {reason})",
                pool.name,
            ),
            min_values,
        )
    })?;
    let domains = PoolDomains {
        requirements: &pool.requirements,
        taints: &pool.taints,
        instance_types: catalog,
    };
    let instance_types = filtered
        .remaining
        .unwrap_or_else(|| (0..catalog.len()).collect());
    // Karpenter leaves DaemonSets whose pods need DRA devices out of the
    // overhead unless it plans such pods.
    let daemon_sets: Vec<&DaemonSet> = cluster
        .daemon_sets
        .iter()
        .filter(|ds| options.plan_dra_pods || !ds.pod.dra_requests)
        .collect();
    let daemons = DaemonGroups::build(&daemon_sets, pool, catalog, &instance_types, well_known);
    let columns = TypeColumns::build(catalog, &instance_types);
    let max_room = daemons.max_room(catalog, &instance_types);
    let mut max_capacity = Resources::default();
    for index in &instance_types {
        max_capacity.max_with(&catalog[*index].capacity);
    }
    let template = Template {
        max_room,
        max_capacity,
        pool: pool_index,
        requirements: pool.requirements.clone(),
        instance_types,
        daemons,
        columns,
    };
    Ok((template, domains))
}

/// What the pool's limits leave, counting every node of the pool not being
/// deleted (the pool's reported usage when it has none here).
fn limits_left(cluster: &Cluster, pool_index: usize) -> BTreeMap<String, i64> {
    let pool = &cluster.node_pools[pool_index];
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
    remaining
}

/// A ready pool as new claims start from it: the instance types its
/// requirements allow, their daemon overhead and requirement columns.
pub(super) struct Template {
    pub(super) pool: usize,
    pub(super) requirements: Requirements,
    pub(super) instance_types: Vec<usize>,
    pub(super) daemons: DaemonGroups,
    /// The requirements of `instance_types`, by key.
    pub(super) columns: TypeColumns,
    /// The most any of `instance_types` leaves for pods.
    pub(super) max_room: Resources,
    /// The largest capacity of `instance_types`, per resource.
    pub(super) max_capacity: Resources,
}

/// Label keys a pod may select on although no node has them yet.
pub(super) struct WellKnownSet(HashSet<String>);

impl WellKnown for WellKnownSet {
    fn is_well_known(&self, key: &str) -> bool {
        self.0.contains(key)
    }
}

/// What one node with `capacity` costs against the limit `name`: its
/// capacity, or 1 for the `nodes` limit.
pub(super) fn limit_cost(capacity: &Resources, name: &str) -> i64 {
    if name == NODES_LIMIT {
        1
    } else {
        capacity.get(name)
    }
}

/// Keys Kubernetes reserves: a pod that selects on them (other than the
/// well-known ones) is not Karpenter's to schedule.
fn restricted_label(key: &str, well_known: &dyn WellKnown) -> bool {
    !well_known.is_well_known(key)
        && labels::in_restricted_domain(key, labels::NEUTRAL_RESTRICTED_LABEL_DOMAINS)
}

/// Whether Karpenter schedules the pod at all: it selects on no
/// restricted label and does not refuse Karpenter's nodes.
pub(super) fn validate_pod(pod: &Pod, well_known: &dyn WellKnown) -> Result<(), String> {
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
