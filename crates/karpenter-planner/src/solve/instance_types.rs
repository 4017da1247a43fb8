//! Which of a claim's instance types can still hold its pods (requirements,
//! resources with daemon overhead, offerings, minValues), and, when none
//! can, Karpenter's message saying why.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use crate::columns::{ColumnCheck, TypeColumns};
use crate::labels;
use crate::model::{InstanceType, OfferingFilter, OfferingSpace};
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

/// Result of filtering a claim's instance types for one more pod.
pub(super) struct Filtered {
    /// The options still possible; None when every option is (the common
    /// case, so nothing is copied).
    pub(super) remaining: Option<Vec<usize>>,
    /// Keys whose minValues were lowered to what the options allow.
    pub(super) relaxed_min_values: BTreeMap<String, usize>,
}

/// The keys whose minValues `options` cannot meet, with how many distinct
/// values they do offer.
pub(crate) fn min_values_shortfall(
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

/// How many of `options`, taken in order, it takes to meet every minValues
/// of `requirements`: 0 without minValues, all of them when they never do.
pub(crate) fn min_values_prefix(
    catalog: &[InstanceType],
    options: &[usize],
    requirements: &Requirements,
) -> usize {
    let wanted: Vec<(&str, usize)> = requirements
        .iter()
        .filter_map(|r| Some((r.key(), r.min_values()?)))
        .collect();
    if wanted.is_empty() {
        return 0;
    }
    let mut seen: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); wanted.len()];
    for (position, index) in options.iter().enumerate() {
        for ((key, _), values) in wanted.iter().zip(&mut seen) {
            if let Some(own) = catalog[*index].requirements.get(key) {
                values.extend(own.values().iter().map(String::as_str));
            }
        }
        if wanted
            .iter()
            .zip(&seen)
            .all(|((_, min), v)| v.len() >= *min)
        {
            return position + 1;
        }
    }
    options.len()
}

/// Karpenter's words for a minValues shortfall, naming the keys.
pub(crate) fn min_values_not_met(shortfall: &BTreeMap<String, usize>) -> String {
    format!(
        "{MIN_VALUES_NOT_MET} (label(s)=[{}])",
        shortfall.keys().cloned().collect::<Vec<_>>().join(" ")
    )
}

const MIN_VALUES_NOT_MET: &str = "minValues requirement is not met for label(s)";

/// Whether a filter's reason is [`min_values_not_met`]'s.
pub(crate) fn is_min_values_reason(reason: &str) -> bool {
    reason.starts_with(MIN_VALUES_NOT_MET)
}

/// What the instance types are checked against.
pub(super) struct FilterInput<'a> {
    pub(super) requirements: &'a Requirements,
    /// The requirements `options` already passed: only keys that changed
    /// since are checked again. None: check every key.
    pub(super) previous: Option<&'a Requirements>,
    pub(super) space: &'a OfferingSpace,
    pub(super) totals: Totals<'a>,
    /// The options' requirements by key, when known.
    pub(super) columns: Option<&'a TypeColumns>,
    pub(super) relax_min_values: bool,
    pub(super) explain: bool,
}

/// The requests an instance type must hold.
#[derive(Clone, Copy)]
pub(super) enum Totals<'a> {
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

/// Which of `options` can still hold the pods with `input`'s requirements
/// and totals. The error is Karpenter's message when `input.explain` asks
/// for one.
pub(super) fn filter_instance_types(
    catalog: &[InstanceType],
    options: &[usize],
    input: &FilterInput<'_>,
) -> Result<Filtered, Option<String>> {
    let requirements = input.requirements;
    let checks = Checks::new(input);
    // The pass over the options stays in this function: it is the
    // planner's hottest loop, and its tallies stay in registers here.
    let mut tally = Tally::default();
    for (position, index) in options.iter().enumerate() {
        let it = &catalog[*index];
        let Some(total) = input.totals.for_type(*index) else {
            // A daemon pod on this type holds one of the pod's host ports.
            tally.held_ports += 1;
            if tally.dropped.is_none() {
                tally.dropped = Some(options[..position].to_vec());
            }
            continue;
        };
        let fits = total.fits(&it.allocatable);
        let compatible = checks.compatible(it, *index, requirements);
        let offering = checks
            .offering_filter
            .as_ref()
            .is_none_or(|filter| it.has_compatible_offering(filter));
        tally.count(compatible, fits, offering);
        match (&mut tally.dropped, compatible && fits && offering) {
            (None, true) | (Some(_), false) => {}
            (None, false) => tally.dropped = Some(options[..position].to_vec()),
            (Some(kept), true) => kept.push(*index),
        }
    }
    let mut remaining: Cow<'_, [usize]> = match tally.dropped.take() {
        None => Cow::Borrowed(options),
        Some(kept) => Cow::Owned(kept),
    };
    let mut relaxed_min_values = BTreeMap::new();
    let mut min_values_error = None;
    if !remaining.is_empty() && requirements.has_min_values() {
        let shortfall = min_values_shortfall(catalog, &remaining, requirements);
        if !shortfall.is_empty() {
            if input.relax_min_values {
                relaxed_min_values = shortfall;
            } else {
                min_values_error = Some(min_values_not_met(&shortfall));
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
    if !input.explain {
        return Err(None);
    }
    let reason = min_values_error.unwrap_or_else(|| tally.reason(options, &input.totals));
    let held = if tally.held_ports > 0 {
        format!(
            "; a daemonset holds a requested host port on {} other instance type(s)",
            tally.held_ports
        )
    } else {
        String::new()
    };
    Err(Some(format!(
        "{reason}, requirements={}, resources={}{held}",
        display_requirements(requirements),
        input.totals.describe()
    )))
}

/// One pass over a claim's options: which stay and, for the message when
/// none does, which of requirements, resources and offerings they met.
#[derive(Default)]
struct Tally {
    /// The options kept; None while every option so far is.
    dropped: Option<Vec<usize>>,
    met: bool,
    fits_any: bool,
    offered: bool,
    met_fits: bool,
    met_offered: bool,
    fits_offered: bool,
    /// Options left out because a daemon pod on them holds one of the
    /// pod's host ports.
    held_ports: usize,
}

/// What one pass over a claim's options compares: with the requirements
/// the options already passed (`input.previous`), only the keys that
/// changed since, and offerings only when zone, capacity type or an
/// offering's own requirements could be affected.
struct Checks<'a> {
    changed: Option<Vec<&'a Requirement>>,
    offering_filter: Option<OfferingFilter>,
    column_checks: Option<Vec<ColumnCheck<'a>>>,
}

impl<'a> Checks<'a> {
    fn new(input: &FilterInput<'a>) -> Self {
        let FilterInput {
            requirements,
            previous,
            space,
            columns,
            ..
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
        let column_checks = match (&changed, columns) {
            (Some(keys), Some(columns)) => {
                Some(keys.iter().filter_map(|r| columns.check(r)).collect())
            }
            _ => None,
        };
        Checks {
            changed,
            offering_filter,
            column_checks,
        }
    }

    /// Whether `it` (option `index`) meets the requirements.
    #[inline]
    fn compatible(&self, it: &InstanceType, index: usize, requirements: &Requirements) -> bool {
        match (&self.column_checks, &self.changed) {
            (Some(checks), _) => checks.iter().all(|check| check.allows(index)),
            (None, None) => it.requirements.intersects(requirements).is_ok(),
            (None, Some(keys)) => keys.iter().all(|incoming| {
                it.requirements
                    .get(incoming.key())
                    .is_none_or(|own| own.compatible_with(incoming))
            }),
        }
    }
}

impl Tally {
    /// Notes which of requirements, resources and offering one option met.
    #[inline]
    fn count(&mut self, compatible: bool, fits: bool, offering: bool) {
        self.met |= compatible;
        self.fits_any |= fits;
        self.offered |= offering;
        self.met_fits |= compatible && fits && !offering;
        self.met_offered |= compatible && offering && !fits;
        self.fits_offered |= fits && offering && !compatible;
    }

    /// Karpenter's words for why no option is left, most general first.
    fn reason(&self, options: &[usize], totals: &Totals<'_>) -> String {
        let Tally {
            met,
            fits_any,
            offered,
            met_fits,
            met_offered,
            fits_offered,
            ..
        } = *self;
        if !met && !fits_any && !offered {
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
        }
    }
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
