//! Pod specs (of Pods, workload templates, DaemonSets) to wire pods.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

use crate::fields::{self, FieldError, join};
use crate::placed::{Finish, PlacedPod};
use crate::{Builder, Mode, ObjectError, Objects, Source};

/// Cluster objects pods refer to: priority classes and storage.
#[derive(Debug, Default)]
pub struct PodContext {
    /// PriorityClass name → value.
    pub priority_classes: BTreeMap<String, i32>,
    /// The value of the PriorityClass with `globalDefault: true`.
    pub default_priority: Option<i32>,
    /// `namespace/name` → PersistentVolumeClaim spec.
    pub claims: BTreeMap<String, core::PersistentVolumeClaimSpec>,
    pub volumes: BTreeMap<String, core::PersistentVolumeSpec>,
    pub storage_classes: BTreeMap<String, k8s_openapi::api::storage::v1::StorageClass>,
    /// The StorageClass annotated as the default.
    pub default_storage_class: Option<String>,
    /// The scheduler's default topology spread constraints, when configured.
    pub default_spread: Option<crate::spread::DefaultSpread>,
}

const DEFAULT_STORAGE_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

impl PodContext {
    pub(crate) fn new(objects: &Objects<'_>, builder: &mut Builder) -> Result<Self, ObjectError> {
        let mut context = PodContext::default();
        for source in &objects.priority_classes {
            let class = source.object;
            let name = class.metadata.name.clone().unwrap_or_default();
            if name.is_empty() {
                builder.keep::<()>(Err(ObjectError {
                    id: source.id,
                    kind: "PriorityClass",
                    namespace: String::new(),
                    name,
                    field: "metadata.name".into(),
                    message: "is required".into(),
                }))?;
                continue;
            }
            let Some(value) = class.value else {
                builder.keep::<()>(Err(ObjectError {
                    id: source.id,
                    kind: "PriorityClass",
                    namespace: String::new(),
                    name,
                    field: "value".into(),
                    message: "is required".into(),
                }))?;
                continue;
            };
            if class.global_default == Some(true) {
                context.default_priority = Some(value);
            }
            context.priority_classes.insert(name, value);
        }
        for source in &objects.persistent_volume_claims {
            let meta = &source.object.metadata;
            let key = format!(
                "{}/{}",
                namespace_of(meta),
                meta.name.clone().unwrap_or_default()
            );
            context
                .claims
                .insert(key, source.object.spec.clone().unwrap_or_default());
        }
        for source in &objects.persistent_volumes {
            context.volumes.insert(
                source.object.metadata.name.clone().unwrap_or_default(),
                source.object.spec.clone().unwrap_or_default(),
            );
        }
        for source in &objects.storage_classes {
            let class = source.object;
            let name = class.metadata.name.clone().unwrap_or_default();
            let default = class
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_STORAGE_CLASS))
                .is_some_and(|v| v == "true");
            if default {
                context.default_storage_class = Some(name.clone());
            }
            context.storage_classes.insert(name, class.clone());
        }
        context.default_spread = default_spread(objects, builder.mode);
        Ok(context)
    }
}

/// What default constraints need, when a scheduler configuration sets some.
fn default_spread(objects: &Objects<'_>, mode: Mode) -> Option<crate::spread::DefaultSpread> {
    let config = objects.scheduler_config.filter(|c| !c.is_empty())?;
    let mut spread = crate::spread::DefaultSpread::new(config);
    objects
        .services
        .iter()
        .for_each(|s| spread.service(s.object));
    objects
        .replica_sets
        .iter()
        .for_each(|r| spread.replica_set(r.object));
    objects
        .stateful_sets
        .iter()
        .for_each(|s| spread.stateful_set(s.object));
    if mode == Mode::Manifests {
        objects
            .deployments
            .iter()
            .for_each(|d| spread.deployment(d.object));
    }
    Some(spread)
}

/// The namespace of an object, `default` when unset.
pub fn namespace_of(meta: &ObjectMeta) -> String {
    meta.namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// What a pod is made from, beyond its spec.
pub struct PodSource<'a> {
    pub namespace: String,
    pub name: String,
    /// Labels and annotations (`metadata` of the pod or template).
    pub metadata: Option<&'a ObjectMeta>,
    pub metadata_path: &'static str,
    pub spec: &'a core::PodSpec,
    pub spec_path: &'static str,
    pub owner_kind: String,
    pub owner_name: String,
    /// StatefulSet volumeClaimTemplates: volume name → claim spec.
    pub claim_templates: BTreeMap<String, core::PersistentVolumeClaimSpec>,
    /// `status.startTime`, for duration-valued do-not-disrupt.
    pub start_time: Option<prost_types::Timestamp>,
}

/// A Pod object read on its own: `None` when it does not take part
/// (terminal; in live mode an unbound pod kube-scheduler did not give up
/// on, or that is not Karpenter's to provision for).
pub type PreparedObject = Result<Option<PreparedPod>, ObjectError>;

/// Reads a Pod object as far as it depends on nothing else; [`build`]
/// finishes it (see [`PreparedPod`]).
///
/// [`build`]: crate::build
pub fn prepare_object(source: &Source<'_, core::Pod>, mode: Mode) -> PreparedObject {
    let object = source.object;
    let meta = &object.metadata;
    let namespace = namespace_of(meta);
    let (name, error) = crate::named(source.id, "Pod", &namespace, meta)?;
    let status = object.status.as_ref();
    let phase = status.and_then(|s| s.phase.clone()).unwrap_or_default();
    if matches!(phase.as_str(), "Succeeded" | "Failed") {
        return Ok(None);
    }
    let spec = object
        .spec
        .as_ref()
        .ok_or_else(|| error(FieldError::new("spec", "is required")))?;
    let bound = spec.node_name.as_deref().is_some_and(|n| !n.is_empty());
    let (owner_kind, owner_name) = controller(meta);
    // A DaemonSet's pod is never provisioned for, but its newest one, bound
    // or not, is what the DaemonSet counts as on new nodes.
    if mode == Mode::Live && !bound && !provisionable(object) && owner_kind != "DaemonSet" {
        return Ok(None);
    }
    let mut prepared = prepare(&PodSource {
        namespace: namespace.clone(),
        name: name.clone(),
        metadata: Some(meta),
        metadata_path: "metadata",
        spec,
        spec_path: "spec",
        owner_kind,
        owner_name,
        claim_templates: BTreeMap::new(),
        start_time: fields::optional_timestamp(status.and_then(|s| s.start_time.as_ref())),
    })
    .map_err(&error)?;
    // Not shared yet: no copy.
    let pod = Arc::make_mut(&mut prepared.pod);
    pod.phase = if !phase.is_empty() {
        phase
    } else if pod.node_name.is_empty() {
        "Pending".into()
    } else {
        "Running".into()
    };
    pod.nominated_node_name = status
        .and_then(|s| s.nominated_node_name.clone())
        .unwrap_or_default();
    pod.not_ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "False")
        });
    Ok(Some(prepared))
}

/// Finishes a prepared Pod object (`id` is its source's).
pub(crate) fn finish_object(
    id: usize,
    prepared: &PreparedPod,
    context: &PodContext,
) -> Result<PlacedPod, ObjectError> {
    prepared.place(context).map_err(|e| ObjectError {
        id,
        kind: "Pod",
        namespace: prepared.namespace().to_owned(),
        name: prepared.name().to_owned(),
        field: e.field,
        message: e.message,
    })
}

/// Karpenter's `IsProvisionable`: kube-scheduler said `Unschedulable`, no
/// node, not preempting (nominated), and not a DaemonSet's or a Node's (a
/// scheduling-gated pod has reason `SchedulingGated`, so it is not one).
pub fn provisionable(pod: &core::Pod) -> bool {
    let status = pod.status.as_ref();
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"));
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let gated = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let (owner, _) = controller(&pod.metadata);
    let terminal = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    unschedulable && !nominated && !gated && !terminal && owner != "DaemonSet" && owner != "Node"
}

/// The kind and name of the controlling owner.
pub fn controller(meta: &ObjectMeta) -> (String, String) {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()))
        .unwrap_or_default()
}

/// What `karpenter.sh/do-not-disrupt` on a pod asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// No annotation, or a value that is neither `"true"` nor a positive
    /// duration (Karpenter ignores those).
    No,
    /// `"true"`, or a duration on a pod whose start time is unknown.
    Always,
    /// A duration (v1.12+): protected until the pod's start time plus it.
    Until(prost_types::Timestamp),
}

impl DoNotDisrupt {
    /// Karpenter's `IsDoNotDisruptActive` at `now` (seconds).
    pub fn active_at(&self, now: i64) -> bool {
        match self {
            DoNotDisrupt::No => false,
            DoNotDisrupt::Always => true,
            DoNotDisrupt::Until(until) => (until.seconds, until.nanos) > (now, 0),
        }
    }
}

/// Karpenter's reading of a `karpenter.sh/do-not-disrupt` value: `"true"`
/// (`None`: always) or a positive duration; why not otherwise, in
/// Karpenter's words (its `InvalidDoNotDisruptAnnotation` event says it).
///
/// # Errors
/// The value is neither `"true"` nor a positive Go duration.
pub fn parse_do_not_disrupt(value: &str) -> Result<Option<std::time::Duration>, String> {
    if value == "true" {
        return Ok(None);
    }
    match karpenter_core::duration::parse_signed_go_duration(value) {
        Err(error) => Err(format!("failed to parse {value:?} as a duration: {error}")),
        Ok(nanos) if nanos <= 0 => Err(format!("duration {value:?} must be positive")),
        Ok(nanos) => Ok(Some(std::time::Duration::from_nanos(nanos.unsigned_abs()))),
    }
}

/// Reads the annotation of a pod that started at `start`.
pub fn do_not_disrupt_of(
    annotations: &BTreeMap<String, String>,
    start: Option<&prost_types::Timestamp>,
) -> DoNotDisrupt {
    let Some(value) = annotations.get(labels::DO_NOT_DISRUPT) else {
        return DoNotDisrupt::No;
    };
    let duration = match parse_do_not_disrupt(value) {
        Ok(None) => return DoNotDisrupt::Always,
        Ok(Some(duration)) => duration,
        Err(_) => return DoNotDisrupt::No,
    };
    let Some(start) = start else {
        return DoNotDisrupt::Always;
    };
    let seconds = i64::try_from(duration.as_secs()).unwrap_or(i64::MAX);
    let nanos = i64::from(start.nanos) + i64::from(duration.subsec_nanos());
    DoNotDisrupt::Until(prost_types::Timestamp {
        seconds: start
            .seconds
            .saturating_add(seconds)
            .saturating_add(nanos / 1_000_000_000),
        nanos: (nanos % 1_000_000_000) as i32,
    })
}

/// Karpenter's `IsDoNotDisruptActive`: `"true"`, or a positive duration not
/// yet passed since the pod started (protected when the start is unknown);
/// anything else does not protect.
pub fn do_not_disrupt(
    annotations: &BTreeMap<String, String>,
    start: Option<&prost_types::Timestamp>,
    now: i64,
) -> bool {
    do_not_disrupt_of(annotations, start).active_at(now)
}

/// A pod in wire form but for what other objects and the clock decide:
/// its priority (from its PriorityClass unless the spec gives one), its
/// volumes' placement (from claims, volumes and storage classes) and the
/// duration form of do-not-disrupt. A caller that sees the same pod in
/// many snapshots (the adapter's index) prepares it once and finishes it
/// per snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedPod {
    /// Shared with every snapshot the pod is placed in ([`PlacedPod`]).
    pod: Arc<sched::Pod>,
    explicit_priority: Option<i32>,
    claims: Vec<crate::volumes::ClaimRef>,
    do_not_disrupt: Option<String>,
    start: Option<prost_types::Timestamp>,
    spec_path: &'static str,
}

impl PreparedPod {
    pub fn namespace(&self) -> &str {
        &self.pod.namespace
    }

    pub fn name(&self) -> &str {
        &self.pod.name
    }

    /// The pod as far as it is read, before its context finishes it (its
    /// containers, requests, limits and owner are final).
    pub fn wire(&self) -> &sched::Pod {
        &self.pod
    }

    /// The pod placed among `ctx`'s objects.
    pub fn place(&self, ctx: &PodContext) -> fields::Result<PlacedPod> {
        let priority = priority(
            self.explicit_priority,
            &self.pod.priority_class_name,
            ctx,
            self.spec_path,
        )?;
        let mut annotations = BTreeMap::new();
        if let Some(value) = &self.do_not_disrupt {
            annotations.insert(labels::DO_NOT_DISRUPT.to_owned(), value.clone());
        }
        let protection = do_not_disrupt_of(&annotations, self.start.as_ref());
        let spread = match &ctx.default_spread {
            Some(defaults) if self.pod.topology_spread_constraints.is_empty() => {
                defaults.for_pod(&self.pod)
            }
            _ => Vec::new(),
        };
        let finish = Finish {
            spread,
            priority,
            volumes: crate::volumes::resolve(&self.claims, ctx),
            do_not_disrupt: protection == DoNotDisrupt::Always,
            do_not_disrupt_until: match protection {
                DoNotDisrupt::Until(until) => Some(until),
                _ => None,
            },
        };
        Ok(PlacedPod::new(Arc::clone(&self.pod), finish))
    }
}

/// A pod spec to wire form among `ctx`'s objects.
pub fn pod(src: &PodSource<'_>, ctx: &PodContext) -> fields::Result<sched::Pod> {
    let placed = prepare(src)?.place(ctx)?;
    Ok(placed.into_pod())
}

/// What of a pod spec depends on nothing but the pod.
pub fn prepare(src: &PodSource<'_>) -> fields::Result<PreparedPod> {
    let spec = src.spec;
    let sp = src.spec_path;
    let mp = src.metadata_path;
    let empty = ObjectMeta::default();
    let meta = src.metadata.unwrap_or(&empty);
    let pod_labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key));

    let containers_path = join(sp, "containers");
    let containers = containers(&spec.containers, &containers_path)?;
    if containers.is_empty() {
        return Err(FieldError::new(
            containers_path,
            "a pod needs at least one container",
        ));
    }
    let init_containers = self::containers(
        spec.init_containers.as_deref().unwrap_or_default(),
        &join(sp, "initContainers"),
    )?;
    let affinity = affinity(spec.affinity.as_ref(), &join(sp, "affinity"))?;
    let topology_spread_constraints = spread(
        spec.topology_spread_constraints
            .as_deref()
            .unwrap_or_default(),
        &join(sp, "topologySpreadConstraints"),
    )?;
    let tolerations = tolerations(
        spec.tolerations.as_deref().unwrap_or_default(),
        &join(sp, "tolerations"),
    )?;
    let deletion_cost = match annotation(labels::POD_DELETION_COST) {
        Some(text) => text.parse::<i32>().map_err(|_| {
            FieldError::new(
                format!("{}.{}", join(mp, "annotations"), labels::POD_DELETION_COST),
                format!("must be a 32-bit integer, got {text:?}"),
            )
        })?,
        None => 0,
    };
    // Not validated by the API server: a value that is not an int32 counts
    // for nothing, as upstream.
    let disruption_cost = annotation(labels::DISRUPTION_COST).and_then(|t| t.parse::<i32>().ok());
    let uid = meta
        .uid
        .clone()
        .unwrap_or_else(|| format!("{}/{}", src.namespace, src.name));
    let creation_timestamp = fields::optional_timestamp(meta.creation_timestamp.as_ref());
    let pod = sched::Pod {
        namespace: src.namespace.clone(),
        name: src.name.clone(),
        uid,
        labels: pod_labels,
        node_name: spec.node_name.clone().unwrap_or_default(),
        containers,
        init_containers,
        overhead: fields::resources(spec.overhead.as_ref(), &join(sp, "overhead"))?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        required_node_affinity: affinity.required_node,
        preferred_node_affinity: affinity.preferred_node,
        required_pod_affinity: affinity.required_pod,
        preferred_pod_affinity: affinity.preferred_pod,
        required_pod_anti_affinity: affinity.required_anti,
        preferred_pod_anti_affinity: affinity.preferred_anti,
        topology_spread_constraints,
        tolerations,
        volumes: Vec::new(),
        priority: 0,
        priority_class_name: spec.priority_class_name.clone().unwrap_or_default(),
        do_not_disrupt: false,
        deletion_cost,
        disruption_cost,
        owner_kind: src.owner_kind.clone(),
        owner_name: src.owner_name.clone(),
        creation_timestamp,
        phase: String::new(),
        terminating: meta.deletion_timestamp.is_some(),
        nominated_node_name: String::new(),
        termination_grace_period_seconds: spec.termination_grace_period_seconds,
        not_ready: false,
        do_not_disrupt_until: None,
        dra_requests: dra_requests(spec),
        capacity_buffer: String::new(),
    };
    Ok(PreparedPod {
        pod: Arc::new(pod),
        explicit_priority: spec.priority,
        claims: crate::volumes::claims(src),
        do_not_disrupt: annotation(labels::DO_NOT_DISRUPT).cloned(),
        start: src.start_time,
        spec_path: sp,
    })
}

/// Karpenter's `HasDRARequirements`: the pod lists resource claims, or a
/// container or init container asks for one.
fn dra_requests(spec: &core::PodSpec) -> bool {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty())
        || containers
            .filter_map(|c| c.resources.as_ref()?.claims.as_ref())
            .any(|claims| !claims.is_empty())
}

fn priority(
    explicit: Option<i32>,
    class: &str,
    ctx: &PodContext,
    spec_path: &str,
) -> fields::Result<i32> {
    if let Some(priority) = explicit {
        return Ok(priority);
    }
    if class.is_empty() {
        return Ok(ctx.default_priority.unwrap_or(0));
    }
    match ctx.priority_classes.get(class) {
        Some(value) => Ok(*value),
        None if class == "system-cluster-critical" => Ok(2_000_000_000),
        None if class == "system-node-critical" => Ok(2_000_001_000),
        None => Err(FieldError::new(
            join(spec_path, "priorityClassName"),
            format!("no PriorityClass {class:?} in the input"),
        )),
    }
}

fn containers(list: &[core::Container], path: &str) -> fields::Result<Vec<sched::Container>> {
    let mut out = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let rp = join(&p, "resources");
        let resources = c.resources.clone().unwrap_or_default();
        let ports = c
            .ports
            .iter()
            .flatten()
            .map(|port| sched::ContainerPort {
                container_port: port.container_port,
                host_port: port.host_port.unwrap_or(0),
                protocol: port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                host_ip: port.host_ip.clone().unwrap_or_default(),
            })
            .collect();
        out.push(sched::Container {
            name: c.name.clone(),
            requests: fields::resources(resources.requests.as_ref(), &join(&rp, "requests"))?,
            limits: fields::resources(resources.limits.as_ref(), &join(&rp, "limits"))?,
            ports,
            restart_policy_always: c.restart_policy.as_deref() == Some("Always"),
        });
    }
    Ok(out)
}

#[derive(Default)]
struct Affinity {
    required_node: Vec<sched::NodeSelectorTerm>,
    preferred_node: Vec<sched::PreferredSchedulingTerm>,
    required_pod: Vec<sched::PodAffinityTerm>,
    preferred_pod: Vec<sched::WeightedPodAffinityTerm>,
    required_anti: Vec<sched::PodAffinityTerm>,
    preferred_anti: Vec<sched::WeightedPodAffinityTerm>,
}

fn affinity(affinity: Option<&core::Affinity>, path: &str) -> fields::Result<Affinity> {
    let mut out = Affinity::default();
    let Some(affinity) = affinity else {
        return Ok(out);
    };
    if let Some(node) = &affinity.node_affinity {
        let nap = join(path, "nodeAffinity");
        if let Some(required) = &node.required_during_scheduling_ignored_during_execution {
            let p = join(
                &join(&nap, "requiredDuringSchedulingIgnoredDuringExecution"),
                "nodeSelectorTerms",
            );
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                out.required_node
                    .push(fields::node_selector_term(term, &format!("{p}[{i}]"))?);
            }
        }
        let pp = join(&nap, "preferredDuringSchedulingIgnoredDuringExecution");
        for (i, term) in node
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let p = format!("{pp}[{i}]");
            out.preferred_node.push(sched::PreferredSchedulingTerm {
                weight: term.weight,
                preference: Some(fields::node_selector_term(
                    &term.preference,
                    &join(&p, "preference"),
                )?),
            });
        }
    }
    if let Some(pod) = &affinity.pod_affinity {
        (out.required_pod, out.preferred_pod) = pod_terms(
            pod.required_during_scheduling_ignored_during_execution
                .as_deref(),
            pod.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
            &join(path, "podAffinity"),
        )?;
    }
    if let Some(anti) = &affinity.pod_anti_affinity {
        (out.required_anti, out.preferred_anti) = pod_terms(
            anti.required_during_scheduling_ignored_during_execution
                .as_deref(),
            anti.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
            &join(path, "podAntiAffinity"),
        )?;
    }
    Ok(out)
}

type AffinityTerms = (
    Vec<sched::PodAffinityTerm>,
    Vec<sched::WeightedPodAffinityTerm>,
);

fn pod_terms(
    required: Option<&[core::PodAffinityTerm]>,
    preferred: Option<&[core::WeightedPodAffinityTerm]>,
    path: &str,
) -> fields::Result<AffinityTerms> {
    let rp = join(path, "requiredDuringSchedulingIgnoredDuringExecution");
    let required = required
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, t)| affinity_term(t, &format!("{rp}[{i}]")))
        .collect::<fields::Result<Vec<_>>>()?;
    let pp = join(path, "preferredDuringSchedulingIgnoredDuringExecution");
    let preferred = preferred
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let p = format!("{pp}[{i}]");
            Ok(sched::WeightedPodAffinityTerm {
                weight: t.weight,
                term: Some(affinity_term(
                    &t.pod_affinity_term,
                    &join(&p, "podAffinityTerm"),
                )?),
            })
        })
        .collect::<fields::Result<Vec<_>>>()?;
    Ok((required, preferred))
}

fn affinity_term(t: &core::PodAffinityTerm, p: &str) -> fields::Result<sched::PodAffinityTerm> {
    if t.topology_key.is_empty() {
        return Err(FieldError::new(join(p, "topologyKey"), "is required"));
    }
    Ok(sched::PodAffinityTerm {
        label_selector: fields::label_selector(
            t.label_selector.as_ref(),
            &join(p, "labelSelector"),
        )?,
        namespaces: t.namespaces.clone().unwrap_or_default(),
        namespace_selector: fields::label_selector(
            t.namespace_selector.as_ref(),
            &join(p, "namespaceSelector"),
        )?,
        topology_key: t.topology_key.clone(),
        match_label_keys: t.match_label_keys.clone().unwrap_or_default(),
        mismatch_label_keys: t.mismatch_label_keys.clone().unwrap_or_default(),
    })
}

pub(crate) fn spread(
    list: &[core::TopologySpreadConstraint],
    path: &str,
) -> fields::Result<Vec<sched::TopologySpreadConstraint>> {
    use sched::topology_spread_constraint::{InclusionPolicy, WhenUnsatisfiable};
    let mut out = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
            "" | "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(FieldError::new(
                    join(&p, "whenUnsatisfiable"),
                    format!("must be DoNotSchedule or ScheduleAnyway, got {other:?}"),
                ));
            }
        };
        let policy = |key: &str, value: &Option<String>| match value.as_deref() {
            None | Some("") => Ok(InclusionPolicy::Unspecified),
            Some("Honor") => Ok(InclusionPolicy::Honor),
            Some("Ignore") => Ok(InclusionPolicy::Ignore),
            Some(other) => Err(FieldError::new(
                join(&p, key),
                format!("must be Honor or Ignore, got {other:?}"),
            )),
        };
        if c.topology_key.is_empty() {
            return Err(FieldError::new(join(&p, "topologyKey"), "is required"));
        }
        out.push(sched::TopologySpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: when_unsatisfiable as i32,
            label_selector: fields::label_selector(
                c.label_selector.as_ref(),
                &join(&p, "labelSelector"),
            )?,
            min_domains: c.min_domains,
            node_affinity_policy: policy("nodeAffinityPolicy", &c.node_affinity_policy)? as i32,
            node_taints_policy: policy("nodeTaintsPolicy", &c.node_taints_policy)? as i32,
            match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

fn tolerations(list: &[core::Toleration], path: &str) -> fields::Result<Vec<sched::Toleration>> {
    use sched::toleration::TolerationOperator;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let operator = match t.operator.as_deref() {
            None | Some("") => TolerationOperator::Unspecified,
            Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(FieldError::new(
                    join(&p, "operator"),
                    format!("must be Equal or Exists, got {other:?}"),
                ));
            }
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => types::TaintEffect::Unspecified,
            Some(effect) => fields::taint_effect(effect, &join(&p, "effect"))?,
        };
        out.push(sched::Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator: operator as i32,
            value: t.value.clone().unwrap_or_default(),
            effect: effect as i32,
            toleration_seconds: t.toleration_seconds,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(labels::DO_NOT_DISRUPT.to_owned(), value.to_owned())])
    }

    /// Upstream's parseDoNotDisrupt: "true", a positive duration, or an
    /// error that names the value (the InvalidDoNotDisruptAnnotation event).
    #[test]
    fn do_not_disrupt_values_parse_as_upstream() {
        assert_eq!(parse_do_not_disrupt("true"), Ok(None));
        assert_eq!(
            parse_do_not_disrupt("1h30m"),
            Ok(Some(std::time::Duration::from_secs(5400)))
        );
        assert_eq!(
            parse_do_not_disrupt("0s"),
            Err("duration \"0s\" must be positive".to_owned())
        );
        assert_eq!(
            parse_do_not_disrupt("-5m"),
            Err("duration \"-5m\" must be positive".to_owned())
        );
        let garbled = parse_do_not_disrupt("forever").expect_err("not a duration");
        assert!(
            garbled.starts_with("failed to parse \"forever\" as a duration: "),
            "{garbled}"
        );
        assert_eq!(
            do_not_disrupt_of(&annotated("forever"), None),
            DoNotDisrupt::No
        );
    }

    #[test]
    fn a_duration_protects_until_the_start_plus_it_to_the_nanosecond() {
        let start = prost_types::Timestamp {
            seconds: 100,
            nanos: 700_000_000,
        };
        let until = |value: &str| do_not_disrupt_of(&annotated(value), Some(&start));
        assert_eq!(
            until("500ms"),
            DoNotDisrupt::Until(prost_types::Timestamp {
                seconds: 101,
                nanos: 200_000_000
            })
        );
        assert_eq!(
            until("2m"),
            DoNotDisrupt::Until(prost_types::Timestamp {
                seconds: 220,
                nanos: 700_000_000
            })
        );
        assert!(until("500ms").active_at(101) && !until("500ms").active_at(102));
        assert_eq!(until("true"), DoNotDisrupt::Always);
        for ignored in ["false", "invalid-format", "-5m", "0s", ""] {
            assert_eq!(until(ignored), DoNotDisrupt::No, "{ignored:?}");
        }
        assert_eq!(
            do_not_disrupt_of(&annotated("2m"), None),
            DoNotDisrupt::Always,
            "an unknown start keeps the pod protected"
        );
        assert_eq!(
            do_not_disrupt_of(&BTreeMap::new(), Some(&start)),
            DoNotDisrupt::No
        );
    }
}
