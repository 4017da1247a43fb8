//! DaemonSet overhead on the nodes a node pool would launch: which daemon
//! pods a node of each instance type would run, what they request and which
//! host ports they hold (Karpenter's daemon overhead groups).
//!
//! ```text
//!   pool template ─┬─ instance type a ─┐  same daemons  ─▶ group 0: overhead, ports
//!                  ├─ instance type b ─┘
//!                  └─ instance type c ──── other daemons ─▶ group 1: overhead, ports
//! ```
//!
//! A daemon pod counts on an instance type when it tolerates the pool's
//! taints (a PreferNoSchedule taint never keeps it away), and some step of
//! relaxing its required node affinity (dropping the first term while more
//! than one is left) both fits the pool's requirements, with the node's
//! `karpenter.sh/registered` and `karpenter.sh/initialized` labels assumed
//! as they will be once the node runs, and intersects the instance type's
//! own requirements. Preferences never keep a daemon pod away.

use crate::hostports::{HostPort, HostPortUsage};
use crate::labels;
use crate::model::{DaemonSet, InstanceType, NodePool, Pod};
use crate::pods::pod_requirements;
use crate::requirements::{Requirement, Requirements, WellKnown};
use crate::resources::Resources;
use crate::taints::{Effect, Toleration, first_untolerated};

/// The daemon pods every instance type of a group runs.
#[derive(Debug, Default)]
pub(crate) struct DaemonGroup {
    pub overhead: Resources,
    pub ports: HostPortUsage,
}

/// A template's instance types, grouped by the daemon pods they would run.
#[derive(Debug, Default)]
pub(crate) struct DaemonGroups {
    groups: Vec<DaemonGroup>,
    /// Catalog index -> index in `groups`; meaningful for the template's
    /// instance types only.
    group_of: Vec<usize>,
    /// Catalog index -> what the type leaves for pods once its daemons run.
    room: Vec<Resources>,
}

impl DaemonGroups {
    /// Groups `instance_types` (indices into `catalog`) of `pool` by the
    /// daemon pods of `daemon_sets` that would run on them.
    pub fn build(
        daemon_sets: &[&DaemonSet],
        pool: &NodePool,
        catalog: &[InstanceType],
        instance_types: &[usize],
        well_known: &dyn WellKnown,
    ) -> DaemonGroups {
        let mut template = pool.requirements.clone();
        template.add(Requirement::single(labels::REGISTERED, "true"));
        template.add(Requirement::single(labels::INITIALIZED, "true"));
        let candidates: Vec<Vec<Requirements>> = daemon_sets
            .iter()
            .map(|ds| fitting_relaxations(&ds.pod, pool, &template, well_known))
            .collect();
        let mut groups = DaemonGroups {
            groups: Vec::new(),
            group_of: vec![0; catalog.len()],
            room: vec![Resources::default(); catalog.len()],
        };
        let mut keys: Vec<Vec<usize>> = Vec::new();
        for &index in instance_types {
            let it = &catalog[index];
            let running: Vec<usize> = candidates
                .iter()
                .enumerate()
                .filter(|(_, steps)| steps.iter().any(|r| it.requirements.intersects(r).is_ok()))
                .map(|(ds, _)| ds)
                .collect();
            let group = match keys.iter().position(|k| *k == running) {
                Some(group) => group,
                None => {
                    let mut group = DaemonGroup::default();
                    for ds in &running {
                        let pod = &daemon_sets[*ds].pod;
                        group.overhead.add(&pod.requests);
                        group.ports.add(&pod.host_ports);
                    }
                    groups.groups.push(group);
                    keys.push(running);
                    keys.len() - 1
                }
            };
            groups.group_of[index] = group;
            groups.room[index] = it.allocatable.minus(&groups.groups[group].overhead);
        }
        if groups.groups.is_empty() {
            groups.groups.push(DaemonGroup::default());
        }
        groups
    }

    /// Group index per catalog index.
    pub fn group_of(&self) -> &[usize] {
        &self.group_of
    }

    fn group(&self, instance_type: usize) -> &DaemonGroup {
        &self.groups[self.group_of.get(instance_type).copied().unwrap_or(0)]
    }

    /// What a node of each group would need with `requests` on top of its
    /// daemons; `None` for a group whose daemon pods hold one of `ports`.
    pub fn totals(&self, requests: &Resources, ports: &[HostPort]) -> Vec<Option<Resources>> {
        self.groups
            .iter()
            .map(|g| {
                g.ports
                    .conflict(ports)
                    .is_none()
                    .then(|| requests.plus(&g.overhead))
            })
            .collect()
    }

    /// The first of `ports` a daemon pod holds on every one of
    /// `instance_types`, if any.
    pub fn port_held_everywhere<'p>(
        &self,
        instance_types: &[usize],
        ports: &'p [HostPort],
    ) -> Option<&'p HostPort> {
        let mut first = None;
        for index in instance_types {
            let held = self.group(*index).ports.conflict(ports)?;
            first.get_or_insert(held);
        }
        first
    }

    /// The smallest overhead among the groups of `instance_types`: what
    /// Karpenter adds to a claim's requests whichever type launches.
    pub fn min_overhead(&self, instance_types: &[usize]) -> Resources {
        let mut min: Option<Resources> = None;
        for index in instance_types {
            let overhead = &self.group(*index).overhead;
            match &mut min {
                None => min = Some(overhead.clone()),
                Some(min) => min.min_with(overhead),
            }
        }
        min.unwrap_or_default()
    }

    /// The most any of `instance_types` leaves for pods once its daemons
    /// run, per resource: a cheap first check before filtering.
    pub fn max_room(&self, catalog: &[InstanceType], instance_types: &[usize]) -> Resources {
        let mut max = Resources::default();
        for index in instance_types {
            match self.room.get(*index) {
                Some(room) => max.max_with(room),
                None => max.max_with(&catalog[*index].allocatable),
            }
        }
        max
    }
}

/// The requirement sets, one per relaxation step of the daemon pod's
/// required node affinity, that fit the pool: empty when the pod does not
/// tolerate the pool's taints or no step fits.
fn fitting_relaxations(
    pod: &Pod,
    pool: &NodePool,
    template: &Requirements,
    well_known: &dyn WellKnown,
) -> Vec<Requirements> {
    let mut tolerations = pod.tolerations.clone();
    tolerations.push(Toleration {
        key: String::new(),
        exists: true,
        value: String::new(),
        effect: Some(Effect::PreferNoSchedule),
    });
    if first_untolerated(&pool.taints, &tolerations).is_some() {
        return Vec::new();
    }
    let mut candidate = pod.clone();
    let mut fitting = Vec::new();
    loop {
        let requirements = pod_requirements(&candidate, false);
        if template.compatible(&requirements, well_known).is_ok() {
            fitting.push(requirements);
        }
        if candidate.required_terms.len() > 1 {
            candidate.required_terms.remove(0);
        } else {
            return fitting;
        }
    }
}
