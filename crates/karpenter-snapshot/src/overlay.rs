//! NodeOverlays applied to the instance types each NodePool sees, as
//! Karpenter's overlay controller and store apply them (gate `NodeOverlay`).
//!
//! ```text
//!   overlays, by weight (then name, later first) ──▶ for each overlay:
//!     runtime validation fails            ──▶ Invalid (applied nowhere)
//!     for every pool × instance type × offering it selects:
//!       an update of the same weight already there ──▶ Conflict (applied nowhere)
//!     otherwise its updates are recorded: the first (highest-weight) value of
//!     an offering's price or of a resource wins; lower weights only fill gaps
//!   a pool's catalog is overlaid in place when only that pool plans with
//!   it (the adapter's, one per pool); a pool sharing it gets an overlaid copy
//! ```
//!
//! An instance type is selected in a pool when the overlay's requirements
//! are compatible with the type's requirements plus the pool's name and
//! template labels (not its requirements), and at least one offering's
//! zone, capacity type and offering requirements intersect them. A price
//! applies to the offerings selected; capacity to the whole type.

use std::collections::BTreeMap;

use karpenter_api::NodeOverlay;
use karpenter_api::nodeoverlay::order_by_weight;
use karpenter_core::labels::{self, LabelRules};
use karpenter_core::requirements::{NoneWellKnown, Requirement, Requirements};
use karpenter_proto::convert::pool_catalog_index;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

use crate::fields;

/// What became of one overlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and without conflict: its updates are applied where they win.
    Applied,
    /// Runtime validation failed, with the message.
    Invalid(String),
    /// An overlay of the same weight already sets an offering's price or a
    /// resource this one sets.
    Conflict,
}

/// Each overlay's name and verdict, in the order overlays apply.
pub type Verdicts = Vec<(String, Verdict)>;

/// Applies `overlays` to the catalogs of the snapshot's pools. A catalog
/// only one pool plans with is overlaid in place; a pool sharing its
/// catalog gets its own overlaid copy (named `<catalog>/overlaid/<pool>`).
/// Returns every overlay's verdict.
pub fn apply(
    snapshot: &mut sched::ClusterSnapshot,
    overlays: &[&NodeOverlay],
    rules: &LabelRules,
) -> Verdicts {
    let mut ordered = overlays.to_vec();
    order_by_weight(&mut ordered);
    let catalogs = &snapshot.instance_type_catalogs;
    let pools: Vec<PoolView> = snapshot
        .node_pools
        .iter()
        .filter_map(|pool| PoolView::new(pool, catalogs))
        .collect();
    let mut updates = vec![PoolUpdates::default(); pools.len()];
    let mut verdicts = Vec::new();
    for overlay in ordered {
        let name = overlay.metadata.name.clone().unwrap_or_default();
        let verdict = match Parsed::new(overlay, rules) {
            Err(message) => Verdict::Invalid(message),
            Ok(parsed) => {
                // What it selects is worked out once, for both steps.
                let touched: Vec<Touch> = parsed.touches(&pools).collect();
                if parsed.conflicts(&touched, &updates) {
                    Verdict::Conflict
                } else {
                    parsed.record(touched, &mut updates);
                    Verdict::Applied
                }
            }
        };
        verdicts.push((name, verdict));
    }
    let changed: Vec<(String, usize, PoolUpdates)> = pools
        .into_iter()
        .zip(updates)
        .filter(|(_, u)| !u.is_empty())
        .map(|(pool, u)| (pool.name.to_owned(), pool.catalog, u))
        .collect();
    for (pool_name, catalog, updates) in changed {
        write(snapshot, &pool_name, catalog, &updates);
    }
    verdicts
}

/// Writes one pool's updates into its catalog, or into a copy of it when
/// other pools plan with the same catalog.
fn write(
    snapshot: &mut sched::ClusterSnapshot,
    pool_name: &str,
    catalog: usize,
    updates: &PoolUpdates,
) {
    let Some(original) = snapshot.instance_type_catalogs.get(catalog) else {
        return;
    };
    let names = || {
        snapshot
            .instance_type_catalogs
            .iter()
            .map(|c| c.name.as_str())
    };
    let sharing = snapshot
        .node_pools
        .iter()
        .filter(|p| pool_catalog_index(names(), &p.instance_type_catalog) == Some(catalog))
        .count();
    if sharing <= 1 {
        if let Some(own) = snapshot.instance_type_catalogs.get_mut(catalog) {
            updates.write(own);
        }
        return;
    }
    let mut copy = original.clone();
    copy.name = format!("{}/overlaid/{pool_name}", original.name);
    updates.write(&mut copy);
    if let Some(pool) = snapshot.node_pools.iter_mut().find(|p| p.name == pool_name) {
        pool.instance_type_catalog = copy.name.clone();
    }
    snapshot.instance_type_catalogs.push(copy);
}

/// Karpenter's `AdjustedPrice`: `adjustment` empty leaves `base`; without a
/// sign it is the price itself; `+x%` / `-x%` scales and `+x` / `-x` adds,
/// never below zero.
pub fn adjusted_price(base: f64, adjustment: &str) -> f64 {
    let text = adjustment.trim();
    if text.is_empty() {
        return base;
    }
    if !text.starts_with(['+', '-']) {
        return text.parse().unwrap_or(base);
    }
    let adjusted = match text.strip_suffix('%') {
        Some(percent) => percent
            .parse::<f64>()
            .map(|p| base * (1.0 + p / 100.0))
            .unwrap_or(base),
        None => text.parse::<f64>().map(|x| base + x).unwrap_or(base),
    };
    adjusted.max(0.0)
}

/// A pool as overlays see it: its catalog, and each of its instance types
/// with what the type and its offerings are matched on (worked out once,
/// for every overlay).
struct PoolView<'s> {
    name: &'s str,
    /// The catalog's index in the snapshot.
    catalog: usize,
    /// By the catalog's order; `None` for a type whose requirements cannot
    /// be read (nothing selects it).
    types: Vec<Option<TypeView>>,
}

/// An instance type as overlays match it in one pool.
struct TypeView {
    /// Its requirements with the pool's name and template labels, and the
    /// zones and capacity types of its offerings when it does not say them.
    type_side: Requirements,
    /// Each offering's zone, capacity type and requirements; `None` when
    /// they cannot be read.
    offerings: Vec<Option<Requirements>>,
}

impl<'s> PoolView<'s> {
    /// `None` for a pool that does not plan this round (not ready, or its
    /// instance types could not be had): overlays are judged over the
    /// pools that plan.
    fn new(pool: &'s sched::NodePool, catalogs: &[sched::InstanceTypeCatalog]) -> Option<Self> {
        if !pool.ready {
            return None;
        }
        let names = catalogs.iter().map(|c| c.name.as_str());
        let catalog = pool_catalog_index(names, &pool.instance_type_catalog)?;
        let mut pool_side = Requirements::from_labels(&pool.labels);
        pool_side.add(Requirement::single(labels::NODE_POOL, &pool.name));
        let types = catalogs
            .get(catalog)?
            .instance_types
            .iter()
            .map(|it| TypeView::new(it, &pool_side))
            .collect();
        Some(PoolView {
            name: &pool.name,
            catalog,
            types,
        })
    }

    /// The offerings of instance type `i` that `requirements` select, when
    /// the type itself is selected.
    fn selected(&self, i: usize, requirements: &Requirements) -> Vec<usize> {
        let Some(Some(view)) = self.types.get(i) else {
            return Vec::new();
        };
        if view
            .type_side
            .compatible(requirements, &NoneWellKnown)
            .is_err()
        {
            return Vec::new();
        }
        view.offerings
            .iter()
            .enumerate()
            .filter(|(_, side)| {
                side.as_ref()
                    .is_some_and(|side| requirements.intersects(side).is_ok())
            })
            .map(|(j, _)| j)
            .collect()
    }
}

impl TypeView {
    fn new(it: &types::InstanceType, pool_side: &Requirements) -> Option<Self> {
        let own = karpenter_proto::convert::requirements("", &it.requirements).ok()?;
        let mut type_side = pool_side.clone();
        type_side.add_all(&own);
        let zones = it.offerings.iter().map(|o| o.zone.as_str());
        let capacity_types = it.offerings.iter().map(|o| o.capacity_type.as_str());
        if !type_side.has(labels::TOPOLOGY_ZONE) {
            type_side.add(Requirement::in_values(labels::TOPOLOGY_ZONE, zones));
        }
        if !type_side.has(labels::CAPACITY_TYPE) {
            type_side.add(Requirement::in_values(
                labels::CAPACITY_TYPE,
                capacity_types,
            ));
        }
        Some(TypeView {
            type_side,
            offerings: it.offerings.iter().map(offering_side).collect(),
        })
    }
}

/// What an offering is matched on; `None` when its requirements cannot be
/// read (then nothing selects it).
fn offering_side(offering: &types::Offering) -> Option<Requirements> {
    let mut side = karpenter_proto::convert::requirements("", &offering.requirements).ok()?;
    side.add(Requirement::single(labels::TOPOLOGY_ZONE, &offering.zone));
    side.add(Requirement::single(
        labels::CAPACITY_TYPE,
        &offering.capacity_type,
    ));
    Some(side)
}

/// A value an overlay set and the lowest weight that selected the same
/// thing since (a later overlay of that weight conflicts).
#[derive(Clone, Debug)]
struct Update<T> {
    value: T,
    lowest_weight: i32,
}

/// One pool's recorded updates.
#[derive(Clone, Debug, Default)]
struct PoolUpdates {
    /// (instance type, offering) → price text.
    prices: BTreeMap<(usize, usize), Update<String>>,
    /// Instance type → resource → quantity in wire units.
    capacity: BTreeMap<usize, BTreeMap<String, Update<i64>>>,
}

impl PoolUpdates {
    fn is_empty(&self) -> bool {
        self.prices.is_empty() && self.capacity.is_empty()
    }

    /// Writes these updates into `catalog` (the pool's), marking the
    /// types they change.
    fn write(&self, catalog: &mut sched::InstanceTypeCatalog) {
        for ((i, j), update) in &self.prices {
            let Some(it) = catalog.instance_types.get_mut(*i) else {
                continue;
            };
            if let Some(offering) = it.offerings.get_mut(*j) {
                offering.price = adjusted_price(offering.price, &update.value);
                it.price_overlaid = true;
            }
        }
        for (i, resources) in &self.capacity {
            let Some(it) = catalog.instance_types.get_mut(*i) else {
                continue;
            };
            it.capacity_overlaid = true;
            let capacity = it.capacity.get_or_insert_with(Default::default);
            for (name, update) in resources {
                capacity.quantities.insert(name.clone(), update.value);
            }
        }
    }
}

/// A pool (by position), one of its instance types, and the offerings of
/// it an overlay selects.
type Touch = (usize, usize, Vec<usize>);

/// A valid overlay, read.
struct Parsed {
    weight: i32,
    requirements: Requirements,
    /// `price` or `priceAdjustment`.
    price: Option<String>,
    capacity: BTreeMap<String, i64>,
}

impl Parsed {
    fn new(overlay: &NodeOverlay, rules: &LabelRules) -> Result<Self, String> {
        overlay.validate_runtime(rules)?;
        let spec = &overlay.spec;
        let wire = fields::karpenter_requirements(&spec.requirements);
        let requirements = karpenter_proto::convert::requirements("spec.requirements", &wire)
            .map_err(|e| e.to_string())?;
        let capacity = fields::resources(Some(&spec.capacity), "spec.capacity")
            .map_err(|e| format!("{}: {}", e.field, e.message))?
            .map(|r| r.quantities)
            .unwrap_or_default();
        Ok(Parsed {
            weight: overlay.weight(),
            requirements,
            price: spec.price.clone().or_else(|| spec.price_adjustment.clone()),
            capacity,
        })
    }

    /// Every (pool, instance type, selected offerings) this overlay touches.
    fn touches<'p>(&self, pools: &'p [PoolView<'_>]) -> impl Iterator<Item = Touch> + use<'_, 'p> {
        pools.iter().enumerate().flat_map(move |(p, pool)| {
            (0..pool.types.len())
                .map(move |i| (p, i, pool.selected(i, &self.requirements)))
                .filter(|(_, _, offerings)| !offerings.is_empty())
        })
    }

    /// Whether an overlay of the same weight already set what this one sets,
    /// anywhere: then it applies nowhere.
    fn conflicts(&self, touched: &[Touch], updates: &[PoolUpdates]) -> bool {
        touched.iter().any(|&(p, i, ref offerings)| {
            let pool = &updates[p];
            let price_conflict = self.price.is_some()
                && offerings.iter().any(|j| {
                    pool.prices
                        .get(&(i, *j))
                        .is_some_and(|u| u.lowest_weight == self.weight)
                });
            let capacity_conflict = pool.capacity.get(&i).is_some_and(|resources| {
                self.capacity.keys().any(|name| {
                    resources
                        .get(name)
                        .is_some_and(|u| u.lowest_weight == self.weight)
                })
            });
            price_conflict || capacity_conflict
        })
    }

    /// Records this overlay's updates where no higher weight set them.
    fn record(&self, touched: Vec<Touch>, updates: &mut [PoolUpdates]) {
        for (p, i, offerings) in touched {
            let pool = &mut updates[p];
            if let Some(price) = &self.price {
                for j in offerings {
                    settle(pool.prices.entry((i, j)), price.clone(), self.weight);
                }
            }
            if !self.capacity.is_empty() {
                let resources = pool.capacity.entry(i).or_default();
                for (name, quantity) in &self.capacity {
                    settle(resources.entry(name.clone()), *quantity, self.weight);
                }
            }
        }
    }
}

/// The first value stays; a later (lower or equal) weight only lowers the
/// weight a further overlay is compared with.
fn settle<K: Ord, T>(
    entry: std::collections::btree_map::Entry<'_, K, Update<T>>,
    value: T,
    weight: i32,
) {
    entry
        .and_modify(|u| u.lowest_weight = u.lowest_weight.min(weight))
        .or_insert(Update {
            value,
            lowest_weight: weight,
        });
}
