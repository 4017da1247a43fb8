//! Existing and in-flight nodes in a run: what each has left as the run
//! starts (shared by every run on the snapshot), what the run changed on it,
//! and whether a pod may land there. Pods try these before any claim. A
//! consolidation's simulation also closes some of them to moving pods.

use std::collections::HashSet;
use std::sync::Arc;

use crate::hostports::HostPortUsage;
use crate::model::{Cluster, Pod};
use crate::pods::pod_requirements;
use crate::requirements::Requirements;
use crate::resources::Resources;
use crate::taints::first_untolerated;
use crate::volumes::VolumeUsage;

use super::scheduler::{PodData, Reject, Scheduler, changed, merge};

/// An existing node as a run starts: shared by every run on the snapshot.
pub(super) struct NodeBase {
    requirements: Arc<Requirements>,
    remaining: Resources,
    ports: HostPortUsage,
    volumes: VolumeUsage,
}

/// What a run changed on an existing node.
#[derive(Clone)]
pub(super) struct NodeState {
    requirements: Requirements,
    remaining: Resources,
    ports: HostPortUsage,
    volumes: VolumeUsage,
}

/// An existing node in one run: its shared base until a pod lands on it.
pub(super) struct ExistingNode<'a> {
    pub(super) node: usize,
    pub(super) base: &'a NodeBase,
    pub(super) state: Option<Box<NodeState>>,
    pub(super) pods: Vec<usize>,
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

    fn volumes(&self) -> &VolumeUsage {
        self.state
            .as_ref()
            .map_or(&self.base.volumes, |s| &s.volumes)
    }

    fn state_mut(&mut self) -> &mut NodeState {
        let base = self.base;
        self.state.get_or_insert_with(|| {
            Box::new(NodeState {
                requirements: (*base.requirements).clone(),
                remaining: base.remaining.clone(),
                ports: base.ports.clone(),
                volumes: base.volumes.clone(),
            })
        })
    }
}

/// An existing node as every run starts from it: what its pods (and the
/// daemon pods still to come) leave of its allocatable, its host ports and
/// attached volumes.
pub(super) fn node_base(cluster: &Cluster, node: &crate::model::StateNode) -> NodeBase {
    let requirements = Arc::clone(&node.label_requirements);
    let mut used = Resources::default();
    let mut ports = HostPortUsage::default();
    let mut volumes = VolumeUsage::default();
    let mut daemon_used = Resources::default();
    for pod in &node.pods {
        if pod.is_terminal() {
            continue;
        }
        used.add(&pod.requests);
        ports.add(&pod.host_ports);
        volumes.add(&pod.volumes);
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
        volumes,
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

impl Scheduler<'_> {
    /// Places the pod on the first existing node, in try order, that takes
    /// it (a consolidation's closed nodes excepted). False when none does.
    pub(super) fn add_to_existing(&mut self, pod_index: usize, pod: &Pod, data: &PodData) -> bool {
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
                state.volumes.add(&pod.volumes);
                if let Some(requirements) = requirements {
                    state.requirements = requirements;
                }
                self.topology.record(
                    pod,
                    &node.taints,
                    self.existing[e].requirements(),
                    &crate::requirements::NoneWellKnown,
                );
                return true;
            }
        }
        false
    }

    /// Whether the pod may land on the node, and the node's requirements
    /// with the pod's added when they changed.
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
        // Transient: pods of one class may attach different claims.
        if existing
            .volumes()
            .exceeds(&pod.volumes, &node.volume_limits)
            .is_some()
        {
            return Err(Reject::transient(None));
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
}
