//! Workloads of a manifest set expanded into the pods their controllers
//! would make (`<name>-<i>`), and DaemonSets as overhead templates.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use karpenter_proto::scheduler::v1 as sched;

use crate::fields::{FieldError, join};
use crate::placed::PlacedPod;
use crate::pod::{self, PodContext, PodSource, namespace_of};
use crate::{ObjectError, Objects, Source};

/// What expanding needs from any workload kind.
struct Workload<'a> {
    id: usize,
    kind: &'static str,
    meta: &'a ObjectMeta,
    count_field: &'static str,
    count: Option<i32>,
    template: Option<&'a core::PodTemplateSpec>,
    claim_templates: BTreeMap<String, core::PersistentVolumeClaimSpec>,
}

impl<'a> Workload<'a> {
    /// A workload without volume claim templates; its kind and metadata are the object's.
    fn new<T: Resource + Metadata<Ty = ObjectMeta>>(
        source: &Source<'a, T>,
        count_field: &'static str,
        count: Option<i32>,
        template: Option<&'a core::PodTemplateSpec>,
    ) -> Self {
        Workload {
            id: source.id,
            kind: T::KIND,
            meta: source.object.metadata(),
            count_field,
            count,
            template,
            claim_templates: BTreeMap::new(),
        }
    }
}

/// Every workload's pods, in input order of the kinds.
pub(crate) fn expand(
    objects: &Objects<'_>,
    context: &PodContext,
) -> Result<Vec<(usize, sched::Pod)>, ObjectError> {
    let mut workloads = Vec::new();
    for s in &objects.deployments {
        let spec = &s.object.spec;
        workloads.push(Workload::new(
            s,
            "spec.replicas",
            spec.replicas,
            Some(&spec.template),
        ));
    }
    for s in &objects.replica_sets {
        let spec = &s.object.spec;
        workloads.push(Workload::new(
            s,
            "spec.replicas",
            spec.replicas,
            spec.template.as_ref(),
        ));
    }
    for s in &objects.stateful_sets {
        let spec = &s.object.spec;
        let claim_templates = spec
            .volume_claim_templates
            .iter()
            .flatten()
            .map(|t| {
                (
                    t.metadata.name.clone().unwrap_or_default(),
                    t.spec.clone().unwrap_or_default(),
                )
            })
            .collect();
        workloads.push(Workload {
            claim_templates,
            ..Workload::new(s, "spec.replicas", spec.replicas, Some(&spec.template))
        });
    }
    for s in &objects.jobs {
        let spec = s.object.spec.as_ref();
        workloads.push(Workload::new(
            s,
            "spec.parallelism",
            spec.and_then(|s| s.parallelism),
            spec.map(|s| &s.template),
        ));
    }
    workloads.sort_by_key(|w| w.id);
    let mut pods = Vec::new();
    for workload in &workloads {
        pods.extend(
            pods_of(workload, context)?
                .into_iter()
                .map(|p| (workload.id, p)),
        );
    }
    Ok(pods)
}

fn pods_of(w: &Workload<'_>, context: &PodContext) -> Result<Vec<sched::Pod>, ObjectError> {
    let name = w.meta.name.clone().unwrap_or_default();
    let namespace = namespace_of(w.meta);
    let error = |e: FieldError| ObjectError::at(w.id, w.kind, &namespace, &name, e);
    if name.is_empty() {
        return Err(error(FieldError::new("metadata.name", "is required")));
    }
    let count = w.count.unwrap_or(1);
    if !(0..=100_000).contains(&count) {
        return Err(error(FieldError::new(
            w.count_field,
            format!("must be between 0 and 100000, got {count}"),
        )));
    }
    let template = w
        .template
        .and_then(|t| t.spec.as_ref().map(|spec| (t.metadata.as_ref(), spec)))
        .ok_or_else(|| error(FieldError::new("spec.template.spec", "is required")))?;
    // A Deployment's pods are controlled by its ReplicaSet.
    let owner_kind = if w.kind == "Deployment" {
        "ReplicaSet"
    } else {
        w.kind
    };
    let mut pods = Vec::with_capacity(count as usize);
    for i in 0..count {
        let mut pod = pod::pod(
            &PodSource {
                namespace: namespace.clone(),
                name: format!("{name}-{i}"),
                metadata: template.0,
                metadata_path: "spec.template.metadata",
                spec: template.1,
                spec_path: "spec.template.spec",
                owner_kind: owner_kind.to_string(),
                owner_name: name.clone(),
                claim_templates: w.claim_templates.clone(),
                start_time: None,
            },
            context,
        )
        .map_err(&error)?;
        pod.uid = format!("{namespace}/{name}-{i}");
        pod.node_name.clear();
        pod.phase = "Pending".into();
        pod.creation_timestamp = None;
        pods.push(pod);
    }
    Ok(pods)
}

/// A DaemonSet: the pod it would run on every node it selects. As
/// Karpenter does, that is its newest existing pod when it has one
/// (`running`), since admission (LimitRanges, webhooks) may have changed
/// the requests, with the template's required node affinity put back: the
/// DaemonSet controller pins each of its pods to its node.
pub(crate) fn daemon_set(
    source: &Source<'_, DaemonSet>,
    context: &PodContext,
    running: Option<sched::Pod>,
) -> Result<sched::DaemonSet, ObjectError> {
    let meta = &source.object.metadata;
    let namespace = namespace_of(meta);
    let (name, error) = crate::named(source.id, "DaemonSet", &namespace, meta)?;
    let template = source
        .object
        .spec
        .template
        .spec
        .as_ref()
        .map(|spec| (source.object.spec.template.metadata.as_ref(), spec))
        .ok_or_else(|| {
            error(FieldError::new(
                join("spec.template", "spec"),
                "is required",
            ))
        })?;
    let pod = pod::pod(
        &PodSource {
            namespace: namespace.clone(),
            name: name.clone(),
            metadata: template.0,
            metadata_path: "spec.template.metadata",
            spec: template.1,
            spec_path: "spec.template.spec",
            owner_kind: "DaemonSet".into(),
            owner_name: name.clone(),
            claim_templates: BTreeMap::new(),
            start_time: None,
        },
        context,
    )
    .map_err(&error)?;
    let pod = match running {
        Some(running) => sched::Pod {
            required_node_affinity: pod.required_node_affinity,
            node_name: String::new(),
            ..running
        },
        None => pod,
    };
    Ok(sched::DaemonSet {
        namespace,
        name,
        template: Some(pod),
    })
}

/// Each DaemonSet's newest pod among `pods`, by namespace and name of the
/// DaemonSet.
pub(crate) fn newest_daemon_pods<'p>(
    pods: impl Iterator<Item = &'p PlacedPod>,
) -> BTreeMap<(&'p str, &'p str), &'p PlacedPod> {
    let mut newest: BTreeMap<(&str, &str), &PlacedPod> = BTreeMap::new();
    for placed in pods.filter(|p| p.base().owner_kind == "DaemonSet") {
        let pod = placed.base();
        let key = (pod.namespace.as_str(), pod.owner_name.as_str());
        let created = |p: &sched::Pod| p.creation_timestamp.map(|t| (t.seconds, t.nanos));
        match newest.get(&key) {
            Some(current) if created(current.base()) >= created(pod) => {}
            _ => {
                newest.insert(key, placed);
            }
        }
    }
    newest
}
