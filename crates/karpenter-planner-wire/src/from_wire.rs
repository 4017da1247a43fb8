//! From the wire request to the planner's model: every field checked, and
//! a bad one reported with its path (`cluster.pending_pods[3].containers[0]`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use karpenter_core::labels;
use karpenter_core::requirements::{Requirement, Requirements};
use karpenter_core::resources::Resources;
use karpenter_core::selector::LabelSelector;
use karpenter_core::taints::{Effect, Taint};
use karpenter_planner::cron::Cron;
use karpenter_planner::disruption::Reason;
use karpenter_planner::hostports::HostPort;
use karpenter_planner::model::{
    AffinityTerm, Budget, Cluster, DaemonSet, DisruptionState, InstanceType, NodePool, NodeRepair,
    Offering, OfferingSpace, Pdb, Pod, PodKey, SpreadConstraint, StateNode, WhenUnsatisfiable,
};
use karpenter_planner::volumes::{VolumeLimits, VolumeRef};
use karpenter_proto::convert::{
    InvalidField, checked_resources, label_selector, non_empty, pod_requests, requirement,
    requirements, resources, taints, tolerations,
};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

fn seconds(timestamp: Option<&prost_types::Timestamp>) -> i64 {
    timestamp.map_or(0, |t| t.seconds)
}

/// A wire duration as the planner's model holds durations (a negative one,
/// which no API object can hold, is zero).
pub fn duration(duration: Option<&prost_types::Duration>) -> Option<std::time::Duration> {
    duration.map(|d| std::time::Duration::try_from(*d).unwrap_or(std::time::Duration::ZERO))
}

fn namespaces_for(
    field: &str,
    term: &sched::PodAffinityTerm,
    pod_namespace: &str,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<Option<BTreeSet<String>>, InvalidField> {
    let mut selected: BTreeSet<String> = term.namespaces.iter().cloned().collect();
    if let Some(ns_selector) = &term.namespace_selector {
        let ns_selector = label_selector(&format!("{field}.namespace_selector"), ns_selector)?;
        if ns_selector.expressions.is_empty() {
            // An empty namespace selector selects every namespace.
            return Ok(None);
        }
        selected.extend(
            namespaces
                .iter()
                .filter(|(_, labels)| ns_selector.matches(labels))
                .map(|(name, _)| name.clone()),
        );
    } else if selected.is_empty() {
        selected.insert(pod_namespace.to_owned());
    }
    Ok(Some(selected))
}

fn affinity_term(
    field: &str,
    term: &sched::PodAffinityTerm,
    pod_namespace: &str,
    pod_labels: &BTreeMap<String, String>,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<AffinityTerm, InvalidField> {
    let topology_key = topology_key(field, &term.topology_key)?;
    let selector = pod_selector(
        field,
        term.label_selector.as_ref(),
        pod_labels,
        &term.match_label_keys,
        &term.mismatch_label_keys,
    )?;
    Ok(AffinityTerm {
        selector,
        namespaces: namespaces_for(field, term, pod_namespace, namespaces)?,
        topology_key,
    })
}

/// The `topology_key` of an affinity term or spread constraint, which must be set.
fn topology_key(field: &str, key: &str) -> Result<String, InvalidField> {
    non_empty(field, "topology_key", key)?;
    Ok(labels::normalize_label(key).to_owned())
}

/// The `label_selector` of an affinity term or spread constraint, with the pod's own values of
/// `match_keys` required and of `mismatch_keys` refused (`matchLabelKeys`,
/// `mismatchLabelKeys`).
fn pod_selector(
    field: &str,
    selector: Option<&sched::LabelSelector>,
    pod_labels: &BTreeMap<String, String>,
    match_keys: &[String],
    mismatch_keys: &[String],
) -> Result<Option<LabelSelector>, InvalidField> {
    let Some(selector) = selector else {
        return Ok(None);
    };
    let mut selector = label_selector(&format!("{field}.label_selector"), selector)?;
    for key in match_keys {
        if let Some(value) = pod_labels.get(key) {
            selector.require(key, value);
        }
    }
    for key in mismatch_keys {
        if let Some(value) = pod_labels.get(key) {
            selector.require_not(key, value);
        }
    }
    Ok(Some(selector))
}

fn node_selector_term(
    field: &str,
    term: &sched::NodeSelectorTerm,
) -> Result<Requirements, InvalidField> {
    let mut result = requirements(
        &format!("{field}.match_expressions"),
        &term.match_expressions,
    )?;
    for (i, r) in term.match_fields.iter().enumerate() {
        // metadata.name pins the pod to one node: the node's hostname label
        // is the closest thing Karpenter can reason about.
        let field = format!("{field}.match_fields[{i}]");
        let mut converted = r.clone();
        if r.key == "metadata.name" {
            converted.key = labels::HOSTNAME.to_owned();
        }
        result.add(requirement(&field, &converted)?);
    }
    Ok(result)
}

/// A wire pod in the planner's model; `now` (seconds, nanos) is the
/// snapshot's, against which a duration-valued do-not-disrupt is compared.
pub fn pod(
    field: &str,
    p: &sched::Pod,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    now: (i64, i32),
) -> Result<Pod, InvalidField> {
    non_empty(field, "name", &p.name)?;
    check_pod_resources(field, p)?;
    let namespace = if p.namespace.is_empty() {
        "default".to_owned()
    } else {
        p.namespace.clone()
    };
    let affinity = PodAffinities {
        field,
        pod: p,
        namespace: &namespace,
        namespaces,
    };
    Ok(Pod {
        key: PodKey {
            namespace: namespace.clone(),
            name: p.name.clone(),
        },
        uid: if p.uid.is_empty() {
            format!("{namespace}/{}", p.name)
        } else {
            p.uid.clone()
        },
        labels: p.labels.clone().into_iter().collect(),
        node_name: p.node_name.clone(),
        requests: pod_requests(p),
        node_selector: p
            .node_selector
            .iter()
            .map(|(k, v)| (labels::normalize_label(k).to_owned(), v.clone()))
            .collect(),
        required_terms: required_terms(field, p)?,
        preferred_terms: preferred_terms(field, p)?,
        pod_affinity: affinity.required("required_pod_affinity", &p.required_pod_affinity)?,
        preferred_pod_affinity: affinity
            .weighted("preferred_pod_affinity", &p.preferred_pod_affinity)?,
        pod_anti_affinity: affinity
            .required("required_pod_anti_affinity", &p.required_pod_anti_affinity)?,
        preferred_pod_anti_affinity: affinity.weighted(
            "preferred_pod_anti_affinity",
            &p.preferred_pod_anti_affinity,
        )?,
        spread: spread_constraints(field, p)?,
        tolerations: tolerations(&format!("{field}.tolerations"), &p.tolerations)?,
        host_ports: host_ports(p),
        priority: p.priority,
        do_not_disrupt: p.do_not_disrupt
            || p.do_not_disrupt_until
                .is_some_and(|until| (until.seconds, until.nanos) > now),
        deletion_cost: p.deletion_cost,
        disruption_cost: p.disruption_cost,
        owner_kind: p.owner_kind.clone(),
        creation_seconds: seconds(p.creation_timestamp.as_ref()),
        phase: p.phase.clone(),
        terminating: p.terminating,
        not_ready: p.not_ready,
        dra_requests: p.dra_requests,
        buffer: !p.capacity_buffer.is_empty(),
        volumes: p
            .volumes
            .iter()
            .filter(|v| !v.driver.is_empty() && !v.claim_id.is_empty())
            .map(|v| VolumeRef {
                driver: v.driver.clone(),
                claim: v.claim_id.clone(),
            })
            .collect(),
    })
}

/// Every request, limit and the overhead of a pod are non-negative, each
/// error naming where it is.
fn check_pod_resources(field: &str, p: &sched::Pod) -> Result<(), InvalidField> {
    let containers = p
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| ("containers", i, c));
    let init = p.init_containers.iter().enumerate();
    for (list, i, c) in containers.chain(init.map(|(i, c)| ("init_containers", i, c))) {
        let at = format!("{field}.{list}[{i}]");
        checked_resources(&format!("{at}.requests"), c.requests.as_ref())?;
        checked_resources(&format!("{at}.limits"), c.limits.as_ref())?;
    }
    checked_resources(&format!("{field}.overhead"), p.overhead.as_ref())?;
    Ok(())
}

/// The pod's required node-affinity terms, with its volumes' topology
/// joined to every one (Karpenter's VolumeTopology): the pod must run where
/// its volumes are.
fn required_terms(field: &str, p: &sched::Pod) -> Result<Vec<Requirements>, InvalidField> {
    let mut required_terms = p
        .required_node_affinity
        .iter()
        .enumerate()
        .map(|(i, t)| node_selector_term(&format!("{field}.required_node_affinity[{i}]"), t))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, volume) in p.volumes.iter().enumerate() {
        if let Some(term) = volume.topology.first() {
            let volume_requirements =
                node_selector_term(&format!("{field}.volumes[{i}].topology[0]"), term)?;
            if required_terms.is_empty() {
                required_terms.push(volume_requirements);
            } else {
                for term in &mut required_terms {
                    term.add_all(&volume_requirements);
                }
            }
        }
    }
    Ok(required_terms)
}

fn preferred_terms(field: &str, p: &sched::Pod) -> Result<Vec<(i32, Requirements)>, InvalidField> {
    p.preferred_node_affinity
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let field = format!("{field}.preferred_node_affinity[{i}]");
            let term = t.preference.clone().unwrap_or_default();
            Ok((
                t.weight,
                node_selector_term(&format!("{field}.preference"), &term)?,
            ))
        })
        .collect()
}

/// What a pod's (anti-)affinity terms are read against: its namespace and
/// labels, and the cluster's namespaces for namespace selectors.
struct PodAffinities<'a> {
    field: &'a str,
    pod: &'a sched::Pod,
    namespace: &'a str,
    namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
}

impl PodAffinities<'_> {
    fn term(
        &self,
        field: &str,
        term: &sched::PodAffinityTerm,
    ) -> Result<AffinityTerm, InvalidField> {
        affinity_term(
            field,
            term,
            self.namespace,
            &self.pod.labels,
            self.namespaces,
        )
    }

    fn required(
        &self,
        name: &str,
        list: &[sched::PodAffinityTerm],
    ) -> Result<Vec<AffinityTerm>, InvalidField> {
        list.iter()
            .enumerate()
            .map(|(i, t)| self.term(&format!("{}.{name}[{i}]", self.field), t))
            .collect()
    }

    fn weighted(
        &self,
        name: &str,
        list: &[sched::WeightedPodAffinityTerm],
    ) -> Result<Vec<(i32, AffinityTerm)>, InvalidField> {
        list.iter()
            .enumerate()
            .map(|(i, t)| {
                let term = t.term.clone().unwrap_or_default();
                let field = format!("{}.{name}[{i}].term", self.field);
                Ok((t.weight, self.term(&field, &term)?))
            })
            .collect()
    }
}

fn spread_constraints(field: &str, p: &sched::Pod) -> Result<Vec<SpreadConstraint>, InvalidField> {
    p.topology_spread_constraints
        .iter()
        .enumerate()
        .map(|(i, c)| spread_constraint(&format!("{field}.topology_spread_constraints[{i}]"), c, p))
        .collect()
}

fn spread_constraint(
    field: &str,
    c: &sched::TopologySpreadConstraint,
    p: &sched::Pod,
) -> Result<SpreadConstraint, InvalidField> {
    if c.max_skew < 1 {
        return Err(InvalidField::new(
            format!("{field}.max_skew"),
            format!("must be at least 1, got {}", c.max_skew),
        ));
    }
    let topology_key = topology_key(field, &c.topology_key)?;
    let selector = pod_selector(
        field,
        c.label_selector.as_ref(),
        &p.labels,
        &c.match_label_keys,
        &[],
    )?;
    use sched::topology_spread_constraint::{InclusionPolicy, WhenUnsatisfiable as W};
    Ok(SpreadConstraint {
        max_skew: c.max_skew,
        topology_key,
        when_unsatisfiable: if c.when_unsatisfiable == W::ScheduleAnyway as i32 {
            WhenUnsatisfiable::ScheduleAnyway
        } else {
            WhenUnsatisfiable::DoNotSchedule
        },
        selector,
        min_domains: c.min_domains,
        honor_node_affinity: c.node_affinity_policy != InclusionPolicy::Ignore as i32,
        honor_node_taints: c.node_taints_policy == InclusionPolicy::Honor as i32,
    })
}

fn host_ports(p: &sched::Pod) -> Vec<HostPort> {
    let mut host_ports = Vec::new();
    for c in p.containers.iter().chain(&p.init_containers) {
        for port in &c.ports {
            if port.host_port > 0 {
                host_ports.push(HostPort {
                    ip: port.host_ip.clone(),
                    port: port.host_port,
                    protocol: if port.protocol.is_empty() {
                        "TCP".to_owned()
                    } else {
                        port.protocol.clone()
                    },
                });
            }
        }
    }
    host_ports
}

pub fn instance_type(field: &str, it: &types::InstanceType) -> Result<InstanceType, InvalidField> {
    non_empty(field, "name", &it.name)?;
    let mut reqs = requirements(&format!("{field}.requirements"), &it.requirements)?;
    if !reqs.has(labels::INSTANCE_TYPE) {
        reqs.add(Requirement::single(labels::INSTANCE_TYPE, &it.name));
    }
    let mut offerings = Vec::with_capacity(it.offerings.len());
    for (i, o) in it.offerings.iter().enumerate() {
        let field = format!("{field}.offerings[{i}]");
        non_empty(&field, "zone", &o.zone)?;
        non_empty(&field, "capacity_type", &o.capacity_type)?;
        if !o.price.is_finite() || o.price < 0.0 {
            return Err(InvalidField::new(
                format!("{field}.price"),
                format!("must be a non-negative number, got {}", o.price),
            ));
        }
        offerings.push(Offering {
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.clone(),
            price: o.price,
            available: o.available,
            requirements: requirements(&format!("{field}.requirements"), &o.requirements)?,
            zone_id: 0,
            capacity_type_id: 0,
        });
    }
    if !reqs.has(labels::TOPOLOGY_ZONE) {
        reqs.add(Requirement::in_values(
            labels::TOPOLOGY_ZONE,
            offerings.iter().map(|o| o.zone.as_str()),
        ));
    }
    if !reqs.has(labels::CAPACITY_TYPE) {
        reqs.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            offerings.iter().map(|o| o.capacity_type.as_str()),
        ));
    }
    let capacity = checked_resources(&format!("{field}.capacity"), it.capacity.as_ref())?;
    let mut overheads = Vec::new();
    if let Some(o) = &it.overhead {
        for (name, list) in [
            ("kube_reserved", &o.kube_reserved),
            ("system_reserved", &o.system_reserved),
            ("eviction_threshold", &o.eviction_threshold),
        ] {
            checked_resources(&format!("{field}.overhead.{name}"), list.as_ref())?;
            overheads.extend(list.as_ref().map(|l| &l.quantities));
        }
    }
    let allocatable = karpenter_core::resources::allocatable(&capacity.to_map(), overheads);
    Ok(InstanceType {
        name: it.name.clone(),
        requirements: reqs,
        offerings,
        allocatable: Resources::from_map(&allocatable),
        capacity,
        volume_limits: volume_limits(
            &format!("{field}.volume_attachment_limits"),
            &it.volume_attachment_limits,
        )?,
    })
}

fn disruption_reasons(field: &str, reasons: &[i32]) -> Result<Vec<Reason>, InvalidField> {
    reasons
        .iter()
        .enumerate()
        .map(|(i, r)| match sched::DisruptionReason::try_from(*r) {
            Ok(sched::DisruptionReason::Empty) => Ok(Reason::Empty),
            Ok(sched::DisruptionReason::Underutilized) => Ok(Reason::Underutilized),
            Ok(sched::DisruptionReason::Drifted) => Ok(Reason::Drifted),
            Ok(sched::DisruptionReason::Expired) => Ok(Reason::Expired),
            Ok(sched::DisruptionReason::Unhealthy) => Ok(Reason::Unhealthy),
            _ => Err(InvalidField::new(
                format!("{field}[{i}]"),
                format!("unknown reason {r}"),
            )),
        })
        .collect()
}

fn disruption_state(state: Option<&sched::NodeClaimDisruptionState>) -> DisruptionState {
    let Some(state) = state else {
        return DisruptionState::default();
    };
    let at = |t: &Option<prost_types::Timestamp>| t.as_ref().map(|t| t.seconds);
    DisruptionState {
        drifted_reason: state.drifted_reason.clone(),
        consolidatable: state.consolidatable,
        last_pod_event_seconds: at(&state.last_pod_event_time),
        do_not_disrupt: state.do_not_disrupt,
        expiration_seconds: at(&state.expiration_time),
        node_pool_hash: state.node_pool_hash.clone(),
        disrupting: state.disrupting,
        node_not_ready: state.node_not_ready,
        nominated: state.nominated,
        termination_grace_period: duration(state.termination_grace_period.as_ref()),
        initialized_seconds: at(&state.initialized_time),
        drifted_seconds: at(&state.drifted_time),
        instance_terminating: state.instance_terminating,
        repair: state.repair.as_ref().map(node_repair),
    }
}

fn node_repair(repair: &sched::NodeRepair) -> NodeRepair {
    NodeRepair {
        condition: repair.condition_type.clone(),
        reason: repair.condition_reason.clone(),
        eligible: repair.eligible,
        reboot: repair.action() == sched::NodeRepairAction::Reboot,
        termination_grace_period: duration(repair.termination_grace_period.as_ref()),
        // A score that is not a number orders as the lowest.
        score: if repair.score.is_finite() {
            repair.score
        } else {
            f64::MIN
        },
        do_not_repair: repair.do_not_repair,
    }
}

pub fn node_pool(
    field: &str,
    np: &sched::NodePool,
    catalog_names: &[String],
) -> Result<NodePool, InvalidField> {
    non_empty(field, "name", &np.name)?;
    if !(0..=100).contains(&np.weight) {
        return Err(InvalidField::new(
            format!("{field}.weight"),
            format!("must be between 0 and 100, got {}", np.weight),
        ));
    }
    let mut reqs = requirements(&format!("{field}.requirements"), &np.requirements)?;
    let mut pool_labels: BTreeMap<String, String> = np.labels.clone().into_iter().collect();
    pool_labels.insert(labels::NODE_POOL.to_owned(), np.name.clone());
    for (key, value) in &pool_labels {
        reqs.add(Requirement::single(key, value));
    }
    let names = catalog_names.iter().map(String::as_str);
    let catalog = karpenter_proto::convert::pool_catalog_index(names, &np.instance_type_catalog)
        // A pool with no catalog at all plans with none.
        .or(np.instance_type_catalog.is_empty().then_some(0))
        .ok_or_else(|| {
            InvalidField::new(
                format!("{field}.instance_type_catalog"),
                format!(
                    "no instance type catalog named {:?}",
                    np.instance_type_catalog
                ),
            )
        })?;
    let disruption = np.disruption.clone().unwrap_or_default();
    let mut budgets = Vec::new();
    for (i, b) in disruption.budgets.iter().enumerate() {
        let bfield = format!("{field}.disruption.budgets[{i}]");
        let nodes = b.nodes.trim();
        let valid = match nodes.strip_suffix('%') {
            Some(percent) => percent.parse::<u32>().is_ok_and(|p| p <= 100),
            None => nodes.parse::<u32>().is_ok(),
        };
        if !valid {
            return Err(InvalidField::new(
                format!("{bfield}.nodes"),
                format!(
                    "must be a count or a percentage such as \"10%\", got {:?}",
                    b.nodes
                ),
            ));
        }
        let window = match (b.schedule.is_empty(), &b.duration) {
            (true, None) => None,
            (false, Some(duration)) => {
                let cron = Cron::parse(&b.schedule)
                    .map_err(|e| InvalidField::new(format!("{bfield}.schedule"), e))?;
                if duration.seconds < 0 {
                    return Err(InvalidField::new(
                        format!("{bfield}.duration"),
                        "must not be negative",
                    ));
                }
                Some((cron, duration.seconds))
            }
            _ => {
                return Err(InvalidField::new(
                    bfield,
                    "schedule and duration must be set together",
                ));
            }
        };
        budgets.push(Budget {
            nodes: nodes.to_owned(),
            window,
            reasons: disruption_reasons(&format!("{bfield}.reasons"), &b.reasons)?,
        });
    }
    if np.replicas.is_some_and(|r| r < 0) {
        return Err(InvalidField::new(
            format!("{field}.replicas"),
            "must not be negative",
        ));
    }
    Ok(NodePool {
        name: np.name.clone(),
        weight: np.weight,
        requirements: reqs,
        labels: pool_labels,
        taints: taints(&format!("{field}.taints"), &np.taints)?,
        startup_taints: taints(&format!("{field}.startup_taints"), &np.startup_taints)?,
        limits: np
            .limits
            .as_ref()
            .map(|l| l.quantities.clone().into_iter().collect())
            .unwrap_or_default(),
        usage: resources(np.usage.as_ref()),
        ready: np.ready,
        catalog,
        consolidation: consolidation_policy(disruption.consolidation_policy),
        consolidate_after: duration(disruption.consolidate_after.as_ref()),
        budgets,
        expire_after: duration(np.expire_after.as_ref()),
        template_hash: np.template_hash.clone(),
        replicas: np.replicas,
    })
}

fn state_node(
    field: &str,
    n: &sched::StateNode,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    now: (i64, i32),
) -> Result<StateNode, InvalidField> {
    non_empty(field, "name", &n.name)?;
    let mut node_taints = taints(&format!("{field}.taints"), &n.taints)?;
    let startup = taints(&format!("{field}.startup_taints"), &n.startup_taints)?;
    if !n.initialized {
        // Until a node is initialized, its startup taints (and Karpenter's
        // unregistered taint) are expected to go away: pods may be planned
        // onto it regardless.
        node_taints.retain(|t| !startup.contains(t) && t.key != labels::UNREGISTERED_TAINT_KEY);
    }
    if n.unschedulable {
        // A cordoned node: kube-scheduler sees this taint.
        node_taints.push(Taint {
            key: labels::UNSCHEDULABLE_TAINT_KEY.to_owned(),
            value: String::new(),
            effect: Effect::NoSchedule,
        });
    }
    let mut node_labels: BTreeMap<String, String> = n
        .labels
        .iter()
        .map(|(k, v)| (labels::normalize_label(k).to_owned(), v.clone()))
        .collect();
    if !n.node_pool.is_empty() {
        node_labels
            .entry(labels::NODE_POOL.to_owned())
            .or_insert_with(|| n.node_pool.clone());
    }
    node_labels
        .entry(labels::HOSTNAME.to_owned())
        .or_insert_with(|| n.name.clone());
    let pods = n
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| pod(&format!("{field}.pods[{i}]"), p, namespaces, now))
        .collect::<Result<Vec<_>, _>>()?;
    // A field the snapshot leaves empty is read from the node's label.
    let or_label = |field: &str, key: &str| match field {
        "" => node_labels.get(key).cloned().unwrap_or_default(),
        set => set.to_owned(),
    };
    let capacity_type = or_label(&n.capacity_type, labels::CAPACITY_TYPE);
    let zone = or_label(&n.zone, labels::TOPOLOGY_ZONE);
    let instance_type = or_label(&n.instance_type, labels::INSTANCE_TYPE);
    Ok(StateNode {
        name: n.name.clone(),
        node_claim_name: n.node_claim_name.clone(),
        node_pool: n.node_pool.clone(),
        label_requirements: Arc::new(Requirements::from_labels(&node_labels)),
        labels: node_labels,
        taints: node_taints,
        allocatable: checked_resources(&format!("{field}.allocatable"), n.allocatable.as_ref())?,
        capacity: checked_resources(&format!("{field}.capacity"), n.capacity.as_ref())?,
        pods,
        has_node: n.has_node,
        initialized: n.initialized,
        marked_for_deletion: n.marked_for_deletion,
        unschedulable: n.unschedulable,
        price: n.price,
        creation_seconds: seconds(n.creation_timestamp.as_ref()),
        disruption: disruption_state(n.disruption.as_ref()),
        capacity_type,
        zone,
        instance_type,
        planned: false,
        volume_limits: volume_limits(&format!("{field}.volume_limits"), &n.volume_limits)?,
    })
}

/// Attach limits per CSI driver, none negative.
fn volume_limits(
    field: &str,
    limits: &BTreeMap<String, i64>,
) -> Result<VolumeLimits, InvalidField> {
    limits
        .iter()
        .map(|(driver, count)| {
            if *count < 0 {
                return Err(InvalidField::new(
                    format!("{field}[{driver}]"),
                    format!("must not be negative, got {count}"),
                ));
            }
            Ok((driver.clone(), *count))
        })
        .collect()
}

/// A request understood: the planner's model, plus what was left out.
#[derive(Debug, Default)]
pub struct Parsed {
    pub cluster: Cluster,
    /// Pending pods that could not be understood, with why: they are
    /// reported unschedulable.
    pub invalid_pods: Vec<(sched::PodRef, InvalidField)>,
    /// Other objects left out of the planning.
    pub rejected: Vec<sched::RejectedObject>,
}

fn rejected(kind: &str, namespace: &str, name: &str, error: InvalidField) -> sched::RejectedObject {
    sched::RejectedObject {
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        field: error.field,
        message: error.message,
    }
}

/// The whole snapshot, checked. One object that cannot be understood (a
/// pod, node, node pool, daemonset or PDB) is left out and reported; only a
/// request broken as a whole (its instance-type catalogs) is an error.
/// A label some types of a catalog carry is absent (`DoesNotExist`) on the
/// types that do not list it, as Karpenter's providers declare every label
/// they know on every type: `Exists` on it then picks only the types that
/// have it, and `DoesNotExist` only the others.
fn declare_absent_labels(mut types: Vec<InstanceType>) -> Vec<InstanceType> {
    let keys: BTreeSet<String> = types
        .iter()
        .flat_map(|it| it.requirements.keys().map(str::to_owned))
        .collect();
    for it in &mut types {
        for key in &keys {
            if !it.requirements.has(key) {
                it.requirements.add(Requirement::does_not_exist(key));
            }
        }
    }
    types
}

pub fn cluster(snapshot: &sched::ClusterSnapshot) -> Result<Parsed, InvalidField> {
    let mut rejections = Vec::new();
    let now = snapshot
        .now
        .as_ref()
        .map_or((0, 0), |t| (t.seconds, t.nanos));
    let namespaces: BTreeMap<String, BTreeMap<String, String>> = snapshot
        .namespaces
        .iter()
        .map(|ns| (ns.name.clone(), ns.labels.clone().into_iter().collect()))
        .collect();
    let mut catalogs = catalogs(snapshot)?;
    let offering_space = OfferingSpace::number(&mut catalogs);
    let catalog_names: Vec<String> = snapshot
        .instance_type_catalogs
        .iter()
        .map(|c| c.name.clone())
        .collect();
    let mut node_pools = Vec::with_capacity(snapshot.node_pools.len());
    for (i, np) in snapshot.node_pools.iter().enumerate() {
        match node_pool(&format!("cluster.node_pools[{i}]"), np, &catalog_names) {
            Ok(pool) => node_pools.push(pool),
            Err(e) => rejections.push(rejected("NodePool", "", &np.name, e)),
        }
    }
    let (pending, invalid_pods) = pending_pods(snapshot, &namespaces, now, &mut rejections);
    let mut nodes = Vec::with_capacity(snapshot.nodes.len());
    for (i, n) in snapshot.nodes.iter().enumerate() {
        match state_node(&format!("cluster.nodes[{i}]"), n, &namespaces, now) {
            Ok(node) => nodes.push(node),
            Err(e) => rejections.push(rejected("Node", "", &n.name, e)),
        }
    }
    let mut daemon_sets = Vec::with_capacity(snapshot.daemon_sets.len());
    for (i, ds) in snapshot.daemon_sets.iter().enumerate() {
        match daemon_set(&format!("cluster.daemon_sets[{i}]"), ds, &namespaces) {
            Ok(parsed) => daemon_sets.push(parsed),
            Err(e) => rejections.push(rejected("DaemonSet", &ds.namespace, &ds.name, e)),
        }
    }
    let pdbs = snapshot
        .pod_disruption_budgets
        .iter()
        .enumerate()
        .map(|(i, pdb)| {
            let field = format!("cluster.pod_disruption_budgets[{i}]");
            pod_disruption_budget(&field, pdb, &mut rejections)
        })
        .collect();
    Ok(Parsed {
        cluster: Cluster {
            pending,
            nodes,
            node_pools,
            catalogs,
            offering_space,
            daemon_sets,
            pdbs,
            namespaces,
            now_seconds: seconds(snapshot.now.as_ref()),
        },
        invalid_pods,
        rejected: rejections,
    })
}

/// Every catalog's instance types; a broken one fails the request (pools
/// refer to catalogs by name, so none could be planned without it).
fn catalogs(snapshot: &sched::ClusterSnapshot) -> Result<Vec<Vec<InstanceType>>, InvalidField> {
    let catalogs = snapshot
        .instance_type_catalogs
        .iter()
        .enumerate()
        .map(|(c, catalog)| {
            catalog
                .instance_types
                .iter()
                .enumerate()
                .map(|(i, it)| {
                    instance_type(
                        &format!("cluster.instance_type_catalogs[{c}].instance_types[{i}]"),
                        it,
                    )
                })
                .collect::<Result<Vec<_>, _>>()
                .map(declare_absent_labels)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !snapshot.node_pools.is_empty() && catalogs.is_empty() {
        return Err(InvalidField::new(
            "cluster.instance_type_catalogs",
            "node pools are given but no instance type catalog",
        ));
    }
    Ok(catalogs)
}

/// The pending pods the planner can read; an invalid one is reported as
/// unschedulable with its field, one given twice is rejected.
fn pending_pods(
    snapshot: &sched::ClusterSnapshot,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    now: (i64, i32),
    rejections: &mut Vec<sched::RejectedObject>,
) -> (Vec<Pod>, Vec<(sched::PodRef, InvalidField)>) {
    let mut seen = BTreeSet::new();
    let mut pending = Vec::with_capacity(snapshot.pending_pods.len());
    let mut invalid_pods = Vec::new();
    for (i, p) in snapshot.pending_pods.iter().enumerate() {
        let field = format!("cluster.pending_pods[{i}]");
        match pod(&field, p, namespaces, now) {
            Ok(parsed) if !seen.insert(parsed.key.clone()) => rejections.push(rejected(
                "Pod",
                &p.namespace,
                &p.name,
                InvalidField::new(
                    format!("{field}.name"),
                    format!("pod {} appears twice", parsed.key),
                ),
            )),
            Ok(parsed) => pending.push(parsed),
            Err(e) => invalid_pods.push((
                sched::PodRef {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                },
                e,
            )),
        }
    }
    (pending, invalid_pods)
}

/// A PodDisruptionBudget; one whose selector cannot be read is rejected and
/// protects every pod of its namespace, so nothing it might cover is
/// evicted.
fn pod_disruption_budget(
    field: &str,
    pdb: &sched::PodDisruptionBudget,
    rejections: &mut Vec<sched::RejectedObject>,
) -> Pdb {
    let key = PodKey {
        namespace: pdb.namespace.clone(),
        name: pdb.name.clone(),
    };
    let selector = pdb
        .selector
        .as_ref()
        .map(|s| label_selector(&format!("{field}.selector"), s))
        .transpose();
    match selector {
        Ok(selector) => Pdb {
            key,
            selector,
            disruptions_allowed: pdb.disruptions_allowed,
            always_allow_unhealthy: pdb.unhealthy_pod_eviction_policy == "AlwaysAllow",
            fully_blocking: matches!(pdb.max_unavailable.trim(), "0" | "0%")
                || pdb.min_available.trim() == "100%",
        },
        Err(e) => {
            rejections.push(rejected(
                "PodDisruptionBudget",
                &pdb.namespace,
                &pdb.name,
                e,
            ));
            Pdb {
                key,
                selector: Some(LabelSelector::default()),
                disruptions_allowed: 0,
                always_allow_unhealthy: false,
                fully_blocking: true,
            }
        }
    }
}

fn daemon_set(
    field: &str,
    ds: &sched::DaemonSet,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<DaemonSet, InvalidField> {
    let mut template = ds.template.clone().unwrap_or_default();
    if template.name.is_empty() {
        template.name = ds.name.clone();
    }
    if template.namespace.is_empty() {
        template.namespace = ds.namespace.clone();
    }
    // A template protects nothing: it is not a running pod.
    let mut pod = pod(&format!("{field}.template"), &template, namespaces, (0, 0))?;
    pod.owner_kind = "DaemonSet".to_owned();
    Ok(DaemonSet {
        key: PodKey {
            namespace: ds.namespace.clone(),
            name: ds.name.clone(),
        },
        pod,
    })
}

/// The planner's policy of a wire policy; an unknown value is the default,
/// as the field's comment in the proto says.
fn consolidation_policy(policy: i32) -> karpenter_planner::model::ConsolidationPolicy {
    use karpenter_planner::model::ConsolidationPolicy as Policy;
    use sched::disruption::ConsolidationPolicy as Wire;
    match Wire::try_from(policy) {
        Ok(Wire::WhenEmpty) => Policy::WhenEmpty,
        Ok(Wire::Balanced) => Policy::Balanced,
        Ok(Wire::WhenEmptyOrUnderutilized | Wire::Unspecified) | Err(_) => {
            Policy::WhenEmptyOrUnderutilized
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_consolidation_policy_reaches_the_planner() {
        use karpenter_planner::model::ConsolidationPolicy as Policy;
        use karpenter_proto::scheduler::v1::disruption::ConsolidationPolicy as Wire;
        for (wire, policy) in [
            (Wire::Unspecified as i32, Policy::WhenEmptyOrUnderutilized),
            (Wire::WhenEmpty as i32, Policy::WhenEmpty),
            (
                Wire::WhenEmptyOrUnderutilized as i32,
                Policy::WhenEmptyOrUnderutilized,
            ),
            (Wire::Balanced as i32, Policy::Balanced),
            (99, Policy::WhenEmptyOrUnderutilized),
        ] {
            assert_eq!(super::consolidation_policy(wire), policy, "{wire}");
        }
    }

    use super::*;

    fn list(pairs: &[(&str, i64)]) -> Option<types::ResourceList> {
        Some(types::ResourceList {
            quantities: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        })
    }

    fn container(cpu: i64, sidecar: bool) -> sched::Container {
        sched::Container {
            requests: list(&[("cpu", cpu)]),
            restart_policy_always: sidecar,
            ..Default::default()
        }
    }

    #[test]
    fn init_containers_count_at_their_peak_and_sidecars_add_up() {
        // containers 1000m; init 2000m alone; sidecar 500m then init 1800m:
        // peak during init = max(2000, 500 + 1800) = 2300; running = 1000 + 500.
        let p = sched::Pod {
            name: "p".into(),
            containers: vec![container(1000, false)],
            init_containers: vec![
                container(2000, false),
                container(500, true),
                container(1800, false),
            ],
            overhead: list(&[("cpu", 100)]),
            ..Default::default()
        };
        let requests = pod_requests(&p);
        assert_eq!(requests.cpu, 2300 + 100);
        assert_eq!(requests.pods, 1);
    }

    #[test]
    fn limits_stand_in_for_missing_requests() {
        let p = sched::Pod {
            name: "p".into(),
            containers: vec![sched::Container {
                requests: list(&[("cpu", 250)]),
                limits: list(&[("cpu", 500), ("memory", 1 << 30)]),
                ..Default::default()
            }],
            ..Default::default()
        };
        let requests = pod_requests(&p);
        assert_eq!((requests.cpu, requests.memory), (250, 1 << 30));
    }
}
