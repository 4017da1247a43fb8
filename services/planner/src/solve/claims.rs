//! Node claims a run plans: whether a pod may join one, what joining
//! changes, and which claims are known to refuse a class of pods so a scan
//! can skip them.

use crate::hostports::HostPortUsage;
use crate::labels;
use crate::model::Pod;
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::taints::first_untolerated;

use super::MinValuesPolicy;
use super::instance_types::{FilterInput, Filtered, Totals, filter_instance_types};
use super::scheduler::{PodData, Reject, Scheduler, changed, merge};

pub(super) struct Claim {
    pub(super) template: usize,
    pub(super) hostname: String,
    pub(super) requirements: Requirements,
    pub(super) instance_types: Vec<usize>,
    /// The pods' requests; daemon overhead depends on the instance type.
    pub(super) requests: Resources,
    /// The most any remaining instance type could still take, for a cheap
    /// first check.
    pub(super) headroom: Resources,
    /// The most any remaining instance type leaves for pods.
    pub(super) max_room: Resources,
    pub(super) pods: Vec<usize>,
    pub(super) ports: HostPortUsage,
    pub(super) min_values_relaxed: bool,
}

/// A set of claim indices.
#[derive(Default)]
pub(super) struct ClaimSet {
    bits: Vec<u64>,
    count: usize,
}

impl ClaimSet {
    pub(super) fn contains(&self, claim: usize) -> bool {
        self.bits
            .get(claim / 64)
            .is_some_and(|word| word & (1 << (claim % 64)) != 0)
    }

    pub(super) fn insert(&mut self, claim: usize) {
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
pub(super) struct ClassMemo {
    pub(super) permanent: ClaimSet,
    pub(super) until_affinity_changes: ClaimSet,
    pub(super) epoch: u64,
}

impl ClassMemo {
    pub(super) fn contains(&self, claim: usize) -> bool {
        self.permanent.contains(claim) || self.until_affinity_changes.contains(claim)
    }

    pub(super) fn count(&self) -> usize {
        self.permanent.count + self.until_affinity_changes.count
    }
}

impl Scheduler<'_> {
    /// `explain` builds the error message (a new claim's error explains the
    /// pod) and skips the early rejection on the claim's resource headroom.
    pub(super) fn can_add_claim(
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

    pub(super) fn commit_claim(
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
}
