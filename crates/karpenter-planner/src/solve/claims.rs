//! Node claims a run plans: whether a pod may join one, what joining
//! changes, and which claims are known to refuse a class of pods so a scan
//! can skip them.

use std::borrow::Cow;

use crate::hostports::HostPortUsage;
use crate::labels;
use crate::model::Pod;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::first_untolerated;
use crate::volumes::{VolumeUsage, exceeded_message, first_over};

use super::MinValuesPolicy;
use super::instance_types::{FilterInput, Filtered, Totals, filter_instance_types};
use super::prepared::limit_cost;
use super::scheduler::{PodData, Reject, Scheduler, changed, merge};

/// A node claim planned in this run: the pods it holds and the instance
/// types that can still hold them all.
pub(super) struct Claim {
    pub(super) template: usize,
    hostname: String,
    pub(super) requirements: Requirements,
    pub(super) instance_types: Vec<usize>,
    /// The pods' requests; daemon overhead depends on the instance type.
    pub(super) requests: Resources,
    /// The most any remaining instance type could still take, for a cheap
    /// first check.
    headroom: Resources,
    /// The most any remaining instance type leaves for pods.
    max_room: Resources,
    pub(super) pods: Vec<usize>,
    ports: HostPortUsage,
    volumes: VolumeUsage,
    pub(super) min_values_relaxed: bool,
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
pub(super) struct ClassMemo {
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

/// A planned claim that takes a pod: where it stands in the try order and
/// what taking the pod changes on it.
struct Fit {
    /// Its bucket in the try order (its pod count), and its place there.
    count: usize,
    position: usize,
    claim: usize,
    requirements: Option<Requirements>,
    filtered: Filtered,
}

impl Scheduler<'_> {
    /// Places the pod on the first planned claim, in try order, that takes
    /// it. Claims known to refuse the pod's class are skipped and new
    /// refusals remembered. False when no planned claim takes it.
    pub(super) fn add_to_planned(&mut self, pod_index: usize, pod: &Pod, data: &PodData) -> bool {
        let epoch = self.topology.affinity_epoch();
        if let Some(memo) = self.blocked.get_mut(&data.class)
            && memo.epoch != epoch
        {
            memo.until_affinity_changes = ClaimSet::default();
            memo.epoch = epoch;
        }
        let (fit, refusals) = self.find_planned(pod, data);
        self.remember_refusals(data.class, epoch, refusals);
        let Some(fit) = fit else {
            return false;
        };
        // The claim moves to the front of the next bucket: among claims
        // with as many pods, the one that took a pod last is tried first.
        if let Some(bucket) = self.claim_order.get_mut(&fit.count) {
            bucket.remove(fit.position);
            if bucket.is_empty() {
                self.claim_order.remove(&fit.count);
            }
        }
        self.claim_order
            .entry(fit.count + 1)
            .or_default()
            .push_front(fit.claim);
        self.commit_claim(fit.claim, pod_index, pod, fit.requirements, fit.filtered);
        true
    }

    /// The first planned claim that takes the pod, and the claims that
    /// refused it on the way: for good (`true`) or until the affinity epoch
    /// moves (`false`).
    fn find_planned(&self, pod: &Pod, data: &PodData) -> (Option<Fit>, Vec<(usize, bool)>) {
        let mut refusals = Vec::new();
        let memo = self.blocked.get(&data.class);
        if memo.is_none_or(|m| m.count() < self.claims.len()) {
            for (count, bucket) in &self.claim_order {
                for (position, claim_index) in bucket.iter().enumerate() {
                    if memo.is_some_and(|m| m.contains(*claim_index)) {
                        continue;
                    }
                    match self.can_add_claim(&self.claims[*claim_index], pod, data, false) {
                        Ok((requirements, filtered)) => {
                            let fit = Fit {
                                count: *count,
                                position,
                                claim: *claim_index,
                                requirements,
                                filtered,
                            };
                            return (Some(fit), refusals);
                        }
                        Err(reject) if reject.permanent => refusals.push((*claim_index, true)),
                        Err(reject) if reject.until_affinity_changes => {
                            refusals.push((*claim_index, false));
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        (None, refusals)
    }

    /// Remembers which claims refused a pod class, so later pods of the
    /// class skip them.
    fn remember_refusals(&mut self, class: u64, epoch: u64, refusals: Vec<(usize, bool)>) {
        if refusals.is_empty() {
            return;
        }
        let memo = self.blocked.entry(class).or_insert_with(|| ClassMemo {
            epoch,
            ..ClassMemo::default()
        });
        for (claim, permanent) in refusals {
            if permanent {
                memo.permanent.insert(claim);
            } else if !memo.permanent.contains(claim) {
                memo.until_affinity_changes.insert(claim);
            }
        }
    }

    /// Opens a claim for the pod from the first template, in pool order,
    /// that can hold it within its pool's limits; the error gives each
    /// pool's reason.
    pub(super) fn add_to_new_claim(
        &mut self,
        pod_index: usize,
        pod: &Pod,
        data: &PodData,
    ) -> Result<(), String> {
        if self.templates.is_empty() {
            return Err(self.no_template());
        }
        let mut errors = Vec::new();
        for t in 0..self.templates.len() {
            let template = &self.templates[t];
            let pool = &self.cluster.node_pools[template.pool];
            let Some(claim) = self.new_claim(t) else {
                errors.push(format!(
                    "all available instance types exceed limits for nodepool: {:?}",
                    pool.name
                ));
                continue;
            };
            match self.can_add_claim(&claim, pod, data, true) {
                Ok((requirements, filtered)) => {
                    self.open_claim(claim, pod_index, pod, requirements, filtered);
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

    /// Why no pool can launch anything: none offers an instance type, none
    /// exists, or none is ready.
    fn no_template(&self) -> String {
        if !self.skipped_pools.is_empty() {
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
        }
    }

    /// An empty claim from template `t` with the instance types its pool's
    /// remaining limits allow; None when they allow none.
    fn new_claim(&self, t: usize) -> Option<Claim> {
        let template = &self.templates[t];
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
            return None;
        }
        let hostname = format!("hostname-placeholder-{:04}", self.claims.len() + 1);
        let mut requirements = template.requirements.clone();
        requirements.add(Requirement::single(labels::HOSTNAME, &hostname));
        let max_room = if instance_types.len() == template.instance_types.len() {
            template.max_room.clone()
        } else {
            template.daemons.max_room(catalog, &instance_types)
        };
        Some(Claim {
            template: t,
            hostname,
            requirements,
            headroom: max_room.clone(),
            max_room,
            instance_types,
            requests: Resources::default(),
            pods: Vec::new(),
            ports: HostPortUsage::default(),
            volumes: VolumeUsage::default(),
            min_values_relaxed: false,
        })
    }

    /// Adds a new claim holding the pod. Its pool's limits count the
    /// largest instance type it may still launch as.
    fn open_claim(
        &mut self,
        claim: Claim,
        pod_index: usize,
        pod: &Pod,
        requirements: Option<Requirements>,
        filtered: Filtered,
    ) {
        let t = claim.template;
        let catalog = self.catalog(t);
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
        let options = self.within_volume_limits(claim, pod, explain)?;
        let totals = daemons.totals(&claim.requests.plus(&pod.requests), &pod.host_ports);
        let mut filtered = filter_instance_types(
            self.catalog(claim.template),
            &options,
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
        if let Cow::Owned(options) = options
            && filtered.remaining.is_none()
        {
            filtered.remaining = Some(options);
        }
        for (key, count) in &filtered.relaxed_min_values {
            if let Some(requirement) = requirements.to_mut().remove(key) {
                requirements
                    .to_mut()
                    .add(requirement.with_min_values(Some(*count)));
            }
        }
        Ok((changed(requirements), filtered))
    }

    /// The claim's instance types that can attach the pod's volumes too
    /// (each type's limit per CSI driver); all of them, borrowed, when the
    /// pod has none or no type limits them.
    fn within_volume_limits<'c>(
        &self,
        claim: &'c Claim,
        pod: &Pod,
        explain: bool,
    ) -> Result<Cow<'c, [usize]>, Reject> {
        if pod.volumes.is_empty() {
            return Ok(Cow::Borrowed(&claim.instance_types));
        }
        let catalog = self.catalog(claim.template);
        // What the claim would attach does not depend on the type.
        let attached = claim.volumes.attached_with(&pod.volumes);
        let mut exceeded = None;
        let within: Vec<usize> = claim
            .instance_types
            .iter()
            .copied()
            .filter(
                |i| match first_over(&attached, &catalog[*i].volume_limits) {
                    None => true,
                    Some(found) => {
                        exceeded.get_or_insert(found);
                        false
                    }
                },
            )
            .collect();
        match exceeded {
            None => Ok(Cow::Borrowed(&claim.instance_types)),
            Some(_) if !within.is_empty() => Ok(Cow::Owned(within)),
            Some(found) => {
                Err(Reject::transient(explain.then(|| {
                    format!("checking volume usage, {}", exceeded_message(&found))
                })))
            }
        }
    }

    /// Adds the pod to the claim with what `can_add_claim` worked out, and
    /// records it in the topology.
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
        claim.volumes.add(&pod.volumes);
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
