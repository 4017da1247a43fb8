//! From a planned claim to a launch: its options ordered by price and cut
//! to what a launch carries, minValues checked, and its requirements and
//! labels narrowed to what the chosen offerings allow.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::labels;
use crate::model::{InstanceType, OfferingFilter};
use crate::requirements::{Requirement, Requirements, WellKnown};

use super::claims::Claim;
use super::instance_types::{min_values_not_met, min_values_shortfall};
use super::scheduler::Scheduler;
use super::{Cheapest, MAX_INSTANCE_TYPES, MinValuesPolicy, Options, PlannedClaim};

/// What finalizing claims works out once for many: a template's options by
/// price under the offerings a claim allows, and what a set of launch
/// options and offerings means for the launch.
#[derive(Default)]
pub(super) struct FinalizeMemo {
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

/// Karpenter's resolveCustomLabelsFromRequirements: a custom key the
/// requirements allow more than one value for (`In` several, `NotIn`,
/// `Exists`, `Gt`, `Lt`) still labels the node, with a value that meets
/// them. Well-known and restricted keys are the provider's and the
/// kubelet's to set.
fn label_custom_keys(
    node_labels: &mut BTreeMap<String, String>,
    requirements: &Requirements,
    well_known: &dyn WellKnown,
) {
    for requirement in requirements.iter() {
        let key = requirement.key();
        if node_labels.contains_key(key)
            || well_known.is_well_known(key)
            || labels::in_restricted_domain(key, labels::NEUTRAL_RESTRICTED_LABEL_DOMAINS)
        {
            continue;
        }
        if let Some(value) = requirement.any_value() {
            node_labels.insert(key.to_owned(), value);
        }
    }
}

/// Orders a claim's options by price, cuts them to the launch maximum and
/// narrows its requirements to what the launch will carry.
pub(super) fn finalize(
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
                "validating minValues, {}",
                min_values_not_met(&shortfall)
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
    label_custom_keys(&mut node_labels, &launch, scheduler.well_known);
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
