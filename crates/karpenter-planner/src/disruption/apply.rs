//! Carrying a command out on the plan's working copy, so the next round
//! starts from the cluster as the command leaves it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::labels;
use crate::model::{Cluster, Pod, PodKey, StateNode};
use crate::requirements::Requirements;
use crate::solve::PlannedClaim;

use super::candidates::is_evictable;
use super::{Command, Method};

/// Carries a command out on the working copy: candidates marked for
/// deletion (they count against budgets until gone), their pods moved where
/// the simulation put them, replacements added as running nodes.
pub(super) fn apply(cluster: &mut Cluster, command: &Command) {
    let candidates: HashSet<&str> = command.candidates.iter().map(String::as_str).collect();
    if command.repair.as_ref().is_some_and(|r| r.reboot) {
        // A reboot keeps the node; its pods are drained first (spending
        // their PDBs) and it takes no new ones until it is back, while it
        // counts against its pool's budget like any node being disrupted.
        spend_pdb_allowances(cluster, &candidates);
        for node in &mut cluster.nodes {
            if candidates.contains(node.name.as_str()) {
                node.disruption.disrupting = true;
                node.taints.push(crate::taints::Taint {
                    key: labels::REBOOTING_TAINT_KEY.to_owned(),
                    value: String::new(),
                    effect: crate::taints::Effect::NoSchedule,
                });
            }
        }
        return;
    }
    spend_pdb_allowances(cluster, &candidates);
    let mut moved = drain(cluster, &candidates);
    place(cluster, command, &mut moved);
    for (i, claim) in command.replacements.iter().enumerate() {
        let node = match replacement(cluster, command, i, claim, &mut moved) {
            Some(node) => Some(node),
            None if matches!(command.method, Method::StaticDrift | Method::Repair) => {
                template_stand_in(cluster, command)
            }
            None => None,
        };
        if let Some(node) = node {
            cluster.nodes.push(node);
        }
    }
}

/// A static pool's template replacement (static drift, repair) in the working copy: the provider picks its
/// instance type at launch, so the plan counts it (against `replicas`,
/// `limits.nodes` and the cost) as the node it replaces, with no pods. It
/// is still launching: budgets count initialized nodes only, so it does not
/// raise a percentage budget while its predecessor still counts.
fn template_stand_in(cluster: &Cluster, command: &Command) -> Option<StateNode> {
    let replaced = command.candidates.first()?;
    let node = cluster.nodes.iter().find(|n| &n.name == replaced)?;
    let name = format!("{replaced}-replacement-{}-0", node.node_pool);
    let mut node_labels = node.labels.clone();
    node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
    Some(StateNode {
        name: name.clone(),
        node_claim_name: name,
        label_requirements: Arc::new(Requirements::from_labels(&node_labels)),
        labels: node_labels,
        pods: Vec::new(),
        has_node: true,
        initialized: false,
        marked_for_deletion: false,
        unschedulable: false,
        creation_seconds: cluster.now_seconds,
        disruption: crate::model::DisruptionState::default(),
        planned: true,
        ..node.clone()
    })
}

/// Evictions use up the PDBs' allowances for the rest of the plan.
fn spend_pdb_allowances(cluster: &mut Cluster, candidates: &HashSet<&str>) {
    let evicted: Vec<Pod> = cluster
        .nodes
        .iter()
        .filter(|n| candidates.contains(n.name.as_str()))
        .flat_map(|n| n.pods.iter().filter(|p| is_evictable(p)).cloned())
        .collect();
    for pod in &evicted {
        if let Some(pdb) = cluster.pdbs.iter_mut().find(|pdb| pdb.selects(pod))
            && !pdb.lets_unhealthy_go(pod)
        {
            pdb.disruptions_allowed -= 1;
        }
    }
}

/// Marks the candidates for deletion and takes their pods off them; the
/// pods that must find another node are returned.
fn drain(cluster: &mut Cluster, candidates: &HashSet<&str>) -> HashMap<PodKey, Pod> {
    let mut moved: HashMap<PodKey, Pod> = HashMap::new();
    for node in cluster
        .nodes
        .iter_mut()
        .filter(|n| candidates.contains(n.name.as_str()))
    {
        node.marked_for_deletion = true;
        for pod in node.pods.drain(..) {
            if pod.is_reschedulable() {
                moved.insert(pod.key.clone(), pod);
            }
        }
    }
    moved
}

/// Puts moved pods on the existing nodes the simulation chose for them.
fn place(cluster: &mut Cluster, command: &Command, moved: &mut HashMap<PodKey, Pod>) {
    let now = cluster.now_seconds;
    for (target, pods) in &command.placements {
        if let Some(node) = cluster.nodes.iter_mut().find(|n| &n.name == target) {
            // Pods arriving are pod events: the node's consolidateAfter
            // window opens again, as it will on the cluster.
            if !pods.is_empty() {
                node.disruption.last_pod_event_seconds = Some(now);
            }
            for key in pods {
                if let Some(mut pod) = moved.remove(key) {
                    pod.node_name = node.name.clone();
                    node.pods.push(pod);
                }
            }
        }
    }
}

/// The `i`th replacement of a command as a running node holding its moved
/// pods, priced and sized as its cheapest offering; None for a claim no
/// offering prices.
fn replacement(
    cluster: &Cluster,
    command: &Command,
    i: usize,
    claim: &PlannedClaim,
    moved: &mut HashMap<PodKey, Pod>,
) -> Option<StateNode> {
    let cheapest = claim.cheapest.as_ref()?;
    let pool = cluster
        .node_pools
        .iter()
        .find(|p| p.name == claim.node_pool);
    let it = pool
        .and_then(|p| cluster.catalogs.get(p.catalog))
        .and_then(|c| c.iter().find(|it| it.name == cheapest.instance_type))
        .cloned();
    let name = format!(
        "{}-replacement-{}-{i}",
        command.candidates.first().map_or("node", String::as_str),
        claim.node_pool
    );
    let mut node_labels = claim.labels.clone();
    node_labels.insert(
        labels::INSTANCE_TYPE.to_owned(),
        cheapest.instance_type.clone(),
    );
    node_labels.insert(labels::TOPOLOGY_ZONE.to_owned(), cheapest.zone.clone());
    node_labels.insert(
        labels::CAPACITY_TYPE.to_owned(),
        cheapest.capacity_type.clone(),
    );
    node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
    let pods = claim
        .pods
        .iter()
        .filter_map(|key| moved.remove(key))
        .map(|mut pod| {
            pod.node_name = name.clone();
            pod
        })
        .collect();
    Some(StateNode {
        name: name.clone(),
        node_claim_name: name,
        node_pool: claim.node_pool.clone(),
        label_requirements: Arc::new(Requirements::from_labels(&node_labels)),
        labels: node_labels,
        taints: claim.taints.clone(),
        allocatable: it
            .as_ref()
            .map(|it| it.allocatable.clone())
            .unwrap_or_default(),
        capacity: it
            .as_ref()
            .map(|it| it.capacity.clone())
            .unwrap_or_default(),
        volume_limits: it
            .as_ref()
            .map(|it| it.volume_limits.clone())
            .unwrap_or_default(),
        pods,
        // Later rounds of the plan run after the replacement is up (as
        // Karpenter's later loops do); it is never a candidate itself.
        has_node: true,
        initialized: true,
        marked_for_deletion: false,
        unschedulable: false,
        price: cheapest.price,
        creation_seconds: cluster.now_seconds,
        disruption: crate::model::DisruptionState::default(),
        planned: true,
        capacity_type: cheapest.capacity_type.clone(),
        zone: cheapest.zone.clone(),
        instance_type: cheapest.instance_type.clone(),
    })
}
