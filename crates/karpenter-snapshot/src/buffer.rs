//! CapacityBuffers resolved against the cluster, and their virtual pods.
//!
//! ```text
//!   CapacityBuffer ──resolve(workloads)──▶ Resolution ──virtual_pods──▶ pending wire pods
//!     podTemplateRef → PodTemplate.template          (replicas, limits)
//!     scalableRef    → Deployment/StatefulSet/ReplicaSet .spec.template
//!                      (replicas, percentage of the workload's replicas, limits)
//! ```
//!
//! One reading for both callers: the snapshot turns a ready buffer into
//! pending pods (`capacity-buffer-<name>-<i>`, priority `MinInt32`,
//! `capacity_buffer` set) and the adapter's buffer controller writes the
//! same resolution into the buffer's status. The size is Karpenter's: the
//! larger of `replicas` and `ceil(percentage% of the workload's replicas)`
//! (at least one when both are positive), capped by how many pods fit in
//! `limits` (`floor(limit / request)` over the resources the template
//! requests), or that number alone when no other size is given.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::CapacityBuffer;
use karpenter_api::capacitybuffer::{
    self as cb, BUFFER_NAME_ANNOTATION, BUFFER_NAMESPACE_ANNOTATION, VIRTUAL_POD_ANNOTATION,
    VIRTUAL_POD_PRIORITY,
};
use karpenter_proto::scheduler::v1 as sched;

use crate::fields::FieldError;
use crate::pod::{self, PodContext, PodSource, namespace_of};

/// The most virtual pods a snapshot is planned with, over all buffers: a
/// buffer sized by a large limit over a tiny request, or many buffers,
/// cannot make the planner hold millions of pods.
pub const MAX_VIRTUAL_PODS: i32 = 10_000;

/// What buffers may refer to, by namespace and name.
#[derive(Default)]
pub struct Workloads<'a> {
    pod_templates: BTreeMap<(String, String), &'a core::PodTemplate>,
    /// (kind, namespace, name) → template and `spec.replicas`.
    scalable: BTreeMap<(&'static str, String, String), Scalable<'a>>,
}

struct Scalable<'a> {
    template: Option<&'a core::PodTemplateSpec>,
    replicas: Option<i32>,
}

fn key(meta: &ObjectMeta) -> (String, String) {
    (namespace_of(meta), meta.name.clone().unwrap_or_default())
}

impl<'a> Workloads<'a> {
    /// The PodTemplates and scalable workloads among `objects`.
    pub fn from_objects(objects: &crate::Objects<'a>) -> Self {
        Self::of(
            objects.pod_templates.iter().map(|s| s.object),
            objects.deployments.iter().map(|s| s.object),
            objects.stateful_sets.iter().map(|s| s.object),
            objects.replica_sets.iter().map(|s| s.object),
        )
    }

    /// These PodTemplates and scalable workloads.
    pub fn of(
        pod_templates: impl IntoIterator<Item = &'a core::PodTemplate>,
        deployments: impl IntoIterator<Item = &'a Deployment>,
        stateful_sets: impl IntoIterator<Item = &'a StatefulSet>,
        replica_sets: impl IntoIterator<Item = &'a ReplicaSet>,
    ) -> Self {
        let mut workloads = Workloads::default();
        pod_templates
            .into_iter()
            .for_each(|t| workloads.pod_template(t));
        deployments
            .into_iter()
            .for_each(|d| workloads.deployment(d));
        stateful_sets
            .into_iter()
            .for_each(|s| workloads.stateful_set(s));
        replica_sets
            .into_iter()
            .for_each(|r| workloads.replica_set(r));
        workloads
    }

    pub fn pod_template(&mut self, template: &'a core::PodTemplate) {
        self.pod_templates.insert(key(&template.metadata), template);
    }

    pub fn deployment(&mut self, d: &'a Deployment) {
        let spec = &d.spec;
        self.scalable(
            "Deployment",
            &d.metadata,
            Some(&spec.template),
            spec.replicas,
        );
    }

    pub fn stateful_set(&mut self, s: &'a StatefulSet) {
        let spec = &s.spec;
        self.scalable(
            "StatefulSet",
            &s.metadata,
            Some(&spec.template),
            spec.replicas,
        );
    }

    pub fn replica_set(&mut self, r: &'a ReplicaSet) {
        let spec = &r.spec;
        self.scalable(
            "ReplicaSet",
            &r.metadata,
            spec.template.as_ref(),
            spec.replicas,
        );
    }

    fn scalable(
        &mut self,
        kind: &'static str,
        meta: &ObjectMeta,
        template: Option<&'a core::PodTemplateSpec>,
        replicas: Option<i32>,
    ) {
        let (namespace, name) = key(meta);
        self.scalable
            .insert((kind, namespace, name), Scalable { template, replicas });
    }
}

/// A buffer's template and size, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution<'a> {
    Ready(Resolved<'a>),
    /// `ReadyForProvisioning=False` with this reason and message.
    NotReady {
        reason: &'static str,
        message: String,
    },
}

/// A resolved buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved<'a> {
    pub template: &'a core::PodTemplateSpec,
    /// The PodTemplate's name and generation (a `podTemplateRef` buffer).
    pub pod_template: Option<(String, i64)>,
    /// How many virtual pods the buffer holds.
    pub replicas: i32,
}

fn not_ready(reason: &'static str, message: impl Into<String>) -> Resolution<'static> {
    Resolution::NotReady {
        reason,
        message: message.into(),
    }
}

/// Resolves `buffer` among `workloads`.
pub fn resolve<'a>(buffer: &CapacityBuffer, workloads: &Workloads<'a>) -> Resolution<'a> {
    let namespace = namespace_of(&buffer.metadata);
    let spec = &buffer.spec;
    let (template, pod_template, scalable_replicas) =
        match (&spec.pod_template_ref, &spec.scalable_ref) {
            (Some(reference), _) => {
                let found = workloads
                    .pod_templates
                    .get(&(namespace.clone(), reference.name.clone()));
                let Some(found) = found else {
                    return not_ready(
                        cb::REASON_POD_TEMPLATE_NOT_FOUND,
                        format!("podtemplates {:?} not found", reference.name),
                    );
                };
                let Some(template) = found.template.as_ref() else {
                    return not_ready(
                        cb::REASON_RESOLUTION_FAILED,
                        format!("podtemplates {:?} has no template", reference.name),
                    );
                };
                let generation = found.metadata.generation.unwrap_or(0);
                (template, Some((reference.name.clone(), generation)), None)
            }
            (None, Some(reference)) => {
                let group = if reference.api_group.is_empty() {
                    "apps"
                } else {
                    reference.api_group.as_str()
                };
                if group != "apps" {
                    return not_ready(
                        cb::REASON_RESOLUTION_FAILED,
                        format!(
                            "unsupported scalableRef API group {:?}",
                            reference.api_group
                        ),
                    );
                }
                let Some(kind) = cb::SCALABLE_KINDS.iter().find(|k| **k == reference.kind) else {
                    return not_ready(
                        cb::REASON_RESOLUTION_FAILED,
                        format!("unsupported kind {:?}", reference.kind),
                    );
                };
                let found =
                    workloads
                        .scalable
                        .get(&(*kind, namespace.clone(), reference.name.clone()));
                let Some(found) = found else {
                    return not_ready(
                        cb::REASON_SCALABLE_REF_NOT_FOUND,
                        format!(
                            "{}.apps {:?} not found",
                            kind.to_ascii_lowercase() + "s",
                            reference.name
                        ),
                    );
                };
                let Some(template) = found.template else {
                    return not_ready(
                        cb::REASON_RESOLUTION_FAILED,
                        format!("{kind} {:?} has no pod template", reference.name),
                    );
                };
                (template, None, Some(found.replicas.unwrap_or(1)))
            }
            (None, None) => {
                return not_ready(
                    cb::REASON_RESOLUTION_FAILED,
                    "Neither podTemplateRef nor scalableRef is set",
                );
            }
        };
    match replicas(buffer, template, scalable_replicas) {
        Ok(replicas) => Resolution::Ready(Resolved {
            template,
            pod_template,
            replicas,
        }),
        Err(message) => not_ready(cb::REASON_RESOLUTION_FAILED, message),
    }
}

/// Karpenter's buffer size (see the [module docs](self)).
fn replicas(
    buffer: &CapacityBuffer,
    template: &core::PodTemplateSpec,
    scalable_replicas: Option<i32>,
) -> Result<i32, String> {
    let spec = &buffer.spec;
    let mut sizes = Vec::new();
    if let (Some(percentage), Some(workload)) = (spec.percentage, scalable_replicas)
        && workload > 0
    {
        // Both are at least zero here (the schema's minimum; a negative
        // percentage from a raw manifest counts as zero).
        let percentage = percentage.max(0);
        let wanted = (i64::from(workload) * i64::from(percentage) + 99) / 100;
        let wanted = i32::try_from(wanted).unwrap_or(i32::MAX);
        sizes.push(if percentage > 0 {
            wanted.max(1)
        } else {
            wanted
        });
    }
    if let Some(replicas) = spec.replicas {
        sizes.push(replicas);
    }
    let desired = sizes.iter().copied().max();
    let within_limits = match &spec.limits {
        Some(limits) => fit_in_limits(limits, template)?,
        None => None,
    };
    Ok(match (desired, within_limits) {
        (Some(desired), Some(limit)) => desired.min(limit),
        (Some(desired), None) => desired,
        (None, Some(limit)) => limit,
        (None, None) => 0,
    }
    .max(0))
}

/// How many template pods fit in `limits`: the least `floor(limit /
/// request)` over the resources the template requests; `None` when it
/// requests none of them.
fn fit_in_limits(
    limits: &karpenter_api::ResourceList,
    template: &core::PodTemplateSpec,
) -> Result<Option<i32>, String> {
    let requests =
        template_requests(template).map_err(|e| format!("{}: {}", e.field, e.message))?;
    let mut fit: Option<i64> = None;
    for (name, quantity) in limits {
        let request = requests.get(name.as_str());
        if request <= 0 || name == karpenter_core::resources::PODS {
            continue;
        }
        let limit = karpenter_core::quantity::parse_resource(name, &quantity.0)
            .map_err(|e| format!("spec.limits.{name}: invalid quantity {:?}: {e}", quantity.0))?;
        let count = limit.max(0) / request;
        fit = Some(fit.map_or(count, |f| f.min(count)));
    }
    Ok(fit.map(|f| i32::try_from(f).unwrap_or(i32::MAX)))
}

fn template_requests(
    template: &core::PodTemplateSpec,
) -> Result<karpenter_core::resources::Resources, FieldError> {
    let empty = core::PodSpec::default();
    let spec = template.spec.as_ref().unwrap_or(&empty);
    let source = source("", "", template.metadata.as_ref(), spec);
    let prepared = pod::prepare(&source)?;
    Ok(karpenter_proto::convert::pod_requests(prepared.wire()))
}

fn source<'s>(
    namespace: &str,
    name: &str,
    metadata: Option<&'s ObjectMeta>,
    spec: &'s core::PodSpec,
) -> PodSource<'s> {
    PodSource {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        metadata,
        metadata_path: "template.metadata",
        spec,
        spec_path: "template.spec",
        owner_kind: String::new(),
        owner_name: String::new(),
        claim_templates: BTreeMap::new(),
        start_time: None,
    }
}

/// The virtual pods of a resolved buffer (at most `at_most`): the
/// template without its PersistentVolumeClaim and ephemeral volumes, at the
/// lowest priority, marked with the buffer's key.
pub fn virtual_pods(
    buffer: &CapacityBuffer,
    resolved: &Resolved<'_>,
    at_most: i32,
    ctx: &PodContext,
) -> Result<Vec<sched::Pod>, FieldError> {
    let count = resolved.replicas.clamp(0, at_most.max(0));
    if count == 0 {
        return Ok(Vec::new());
    }
    let namespace = namespace_of(&buffer.metadata);
    let name = buffer.metadata.name.clone().unwrap_or_default();
    let mut spec = without_claimed_volumes(resolved.template.spec.clone().unwrap_or_default());
    spec.priority = Some(VIRTUAL_POD_PRIORITY);
    spec.node_name = None;
    let metadata = ObjectMeta {
        labels: resolved
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone()),
        annotations: Some(BTreeMap::from([
            (VIRTUAL_POD_ANNOTATION.to_owned(), "true".to_owned()),
            (BUFFER_NAME_ANNOTATION.to_owned(), name.clone()),
            (BUFFER_NAMESPACE_ANNOTATION.to_owned(), namespace.clone()),
        ])),
        ..ObjectMeta::default()
    };
    let template = pod::pod(&source(&namespace, "", Some(&metadata), &spec), ctx)?;
    let uid = buffer.metadata.uid.clone().unwrap_or_else(|| buffer.key());
    let mut pods = Vec::with_capacity(count as usize);
    for i in 1..=count {
        let mut pod = template.clone();
        pod.name = cb::virtual_pod_name(&name, i);
        pod.uid = format!("{uid}-{i}");
        pod.phase = "Pending".into();
        pod.capacity_buffer = buffer.key();
        pods.push(pod);
    }
    Ok(pods)
}

/// Karpenter drops the volumes a virtual pod cannot have (claims, generic
/// ephemeral volumes) and their mounts.
fn without_claimed_volumes(mut spec: core::PodSpec) -> core::PodSpec {
    let mut dropped = Vec::new();
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| {
            let claimed = v.persistent_volume_claim.is_some() || v.ephemeral.is_some();
            if claimed {
                dropped.push(v.name.clone());
            }
            !claimed
        });
    }
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for container in containers {
        if let Some(mounts) = container.volume_mounts.as_mut() {
            mounts.retain(|m| !dropped.contains(&m.name));
        }
    }
    spec
}
