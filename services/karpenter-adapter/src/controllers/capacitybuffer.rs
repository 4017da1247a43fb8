//! CapacityBuffer status (gate `CapacityBuffer`), as Karpenter's
//! `capacitybuffer` controller and its provisioner write it:
//!
//! - [`CapacityBuffers`] resolves each buffer with the rule the snapshot
//!   plans with (`karpenter_snapshot::buffer::resolve`) and writes
//!   `replicas`, `podTemplateRef`/`podTemplateGeneration`,
//!   `provisioningStrategy` and `ReadyForProvisioning`; again when the
//!   buffer or what it names changes, and every 30 s.
//! - [`record_provisioning`] is called by the provisioner after each Solve:
//!   `Provisioning` says whether the buffer's virtual pods fit on existing
//!   capacity or needed new claims.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use karpenter_api::capacitybuffer::{
    self as cb, CONDITION_PROVISIONING, CONDITION_READY_FOR_PROVISIONING, LocalObjectRef,
};
use karpenter_api::{CapacityBuffer, ConditionStatus};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_snapshot::buffer::{Resolution, Workloads, resolve};
use kube::Resource;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::objects::conditions::Conditions;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// Upstream requeues every buffer this often (a workload's replicas move
/// its percentage).
const REQUEUE: Duration = Duration::from_secs(30);

/// What buffers may name, from the index.
pub fn workloads(index: &Index) -> Workloads<'_> {
    Workloads::of(
        index.pod_templates.iter().map(AsRef::as_ref),
        index.deployments.iter().map(AsRef::as_ref),
        index.stateful_sets.iter().map(AsRef::as_ref),
        index.replica_sets.iter().map(AsRef::as_ref),
    )
}

/// The buffer status controller.
pub struct CapacityBuffers {
    pub ctx: Context,
}

impl Reconciler for CapacityBuffers {
    const NAME: &'static str = "capacitybuffer";

    fn relevant(versions: &Versions) -> u64 {
        versions.other
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        index
            .capacity_buffers
            .iter()
            .map(|buffer| {
                let namespace = buffer.metadata.namespace.clone().unwrap_or_default();
                let name = buffer.metadata.name.clone().unwrap_or_default();
                let named = named_version(index, buffer);
                let versions = [buffer.meta().resource_version.as_deref(), named.as_deref()];
                ((namespace, name), fingerprint(versions))
            })
            .collect()
    }

    async fn reconcile(&self, (namespace, name): Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(current) = index.capacity_buffers.get(&namespace, &name) else {
            return Ok(None);
        };
        let mut next = (**current).clone();
        resolved_status(&mut next, &workloads(&index));
        if next.status != current.status {
            let api = kube::Api::<CapacityBuffer>::namespaced(self.ctx.client.clone(), &namespace);
            patch::status(&api, current.as_ref(), &next).await?;
        }
        Ok(Some(REQUEUE))
    }
}

/// The resource version of what `buffer` names, if it is in the index.
fn named_version(index: &Index, buffer: &CapacityBuffer) -> Option<String> {
    let namespace = buffer.metadata.namespace.as_deref().unwrap_or_default();
    let version = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.resource_version.clone()
    };
    if let Some(reference) = &buffer.spec.pod_template_ref {
        return index
            .pod_templates
            .get(namespace, &reference.name)
            .and_then(|t| version(&t.metadata));
    }
    let reference = buffer.spec.scalable_ref.as_ref()?;
    let name = reference.name.as_str();
    match reference.kind.as_str() {
        "Deployment" => index
            .deployments
            .get(namespace, name)
            .and_then(|o| version(&o.metadata)),
        "StatefulSet" => index
            .stateful_sets
            .get(namespace, name)
            .and_then(|o| version(&o.metadata)),
        "ReplicaSet" => index
            .replica_sets
            .get(namespace, name)
            .and_then(|o| version(&o.metadata)),
        _ => None,
    }
}

/// Writes what resolving the buffer says into its status.
pub fn resolved_status(buffer: &mut CapacityBuffer, workloads: &Workloads<'_>) {
    let resolution = resolve(buffer, workloads);
    let generation = buffer.metadata.generation.unwrap_or(0);
    let strategy = buffer.provisioning_strategy().to_owned();
    let status = buffer.status.get_or_insert_with(Default::default);
    status.provisioning_strategy = Some(strategy);
    let mut conditions = Conditions::without_root(&mut status.conditions, generation);
    match resolution {
        Resolution::Ready(resolved) => {
            conditions.set(
                CONDITION_READY_FOR_PROVISIONING,
                ConditionStatus::True,
                cb::REASON_RESOLVED,
                "Pod template resolved successfully",
            );
            status.replicas = Some(resolved.replicas);
            match resolved.pod_template {
                Some((name, generation)) => {
                    status.pod_template_ref = Some(LocalObjectRef { name });
                    status.pod_template_generation = Some(generation);
                }
                None => {
                    status.pod_template_ref = None;
                    status.pod_template_generation = None;
                }
            }
        }
        // As upstream: the last replicas and template stay.
        Resolution::NotReady { reason, message } => conditions.set(
            CONDITION_READY_FOR_PROVISIONING,
            ConditionStatus::False,
            reason,
            &message,
        ),
    }
}

/// Where one Solve put a buffer's virtual pods.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// Planned (at most `MAX_VIRTUAL_PODS`).
    pub planned: usize,
    pub existing: usize,
    pub new_claims: usize,
    pub failed: usize,
}

/// Buffer key → where its virtual pods went; `virtual_pods` maps each
/// virtual pod (`namespace`, `name`) to its buffer's key.
pub fn placements(
    virtual_pods: &BTreeMap<(String, String), String>,
    solved: &sched::SolveResponse,
) -> BTreeMap<String, Placed> {
    let mut out: BTreeMap<String, Placed> = BTreeMap::new();
    for buffer in virtual_pods.values() {
        out.entry(buffer.clone()).or_default().planned += 1;
    }
    let mut count = |pod: &sched::PodRef, field: fn(&mut Placed) -> &mut usize| {
        let key = (pod.namespace.clone(), pod.name.clone());
        if let Some(buffer) = virtual_pods.get(&key)
            && let Some(placed) = out.get_mut(buffer)
        {
            *field(placed) += 1;
        }
    };
    for placement in &solved.existing_nodes {
        placement
            .pods
            .iter()
            .for_each(|p| count(p, |s| &mut s.existing));
    }
    for claim in &solved.node_claims {
        claim
            .pods
            .iter()
            .for_each(|p| count(p, |s| &mut s.new_claims));
    }
    for pod in solved.unschedulable.iter().filter_map(|u| u.pod.as_ref()) {
        count(pod, |s| &mut s.failed);
    }
    out
}

/// Upstream's `Provisioning` condition for a buffer: `None` leaves it as
/// it is.
fn provisioning_condition(
    buffer: &CapacityBuffer,
    placed: Option<&Placed>,
) -> Option<(ConditionStatus, &'static str, String)> {
    let status = buffer.status.as_ref();
    let ready = status
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == CONDITION_READY_FOR_PROVISIONING)
        })
        .is_some_and(|c| c.status == ConditionStatus::True);
    if !ready {
        let message = "Buffer is not ReadyForProvisioning".to_owned();
        return Some((
            ConditionStatus::False,
            cb::REASON_NOT_READY_FOR_PROVISIONING,
            message,
        ));
    }
    if status.and_then(|s| s.replicas).unwrap_or(0) == 0 {
        let message = "Buffer has zero desired replicas".to_owned();
        return Some((ConditionStatus::False, cb::REASON_BUFFER_EMPTY, message));
    }
    let placed = placed?;
    if placed.new_claims > 0 || placed.failed > 0 {
        let message = format!(
            "{}/{} virtual pods required new capacity, {} failed",
            placed.new_claims, placed.planned, placed.failed
        );
        return Some((
            ConditionStatus::False,
            cb::REASON_REQUIRES_NEW_CAPACITY,
            message,
        ));
    }
    if placed.planned > 0 && placed.existing == placed.planned {
        let message = format!(
            "All {} virtual pods fit on existing capacity",
            placed.planned
        );
        return Some((
            ConditionStatus::True,
            cb::REASON_FITS_EXISTING_CAPACITY,
            message,
        ));
    }
    None
}

/// Writes each buffer's `Provisioning` condition after a Solve. A failed
/// write is logged: the next batch writes it again.
pub async fn record_provisioning(
    ctx: &Context,
    index: &Index,
    virtual_pods: &BTreeMap<(String, String), String>,
    solved: &sched::SolveResponse,
) {
    let placed = placements(virtual_pods, solved);
    for current in index.capacity_buffers.iter() {
        let Some((status, reason, message)) =
            provisioning_condition(current, placed.get(&current.key()))
        else {
            continue;
        };
        let mut next = (**current).clone();
        let generation = next.metadata.generation.unwrap_or(0);
        let conditions = &mut next.status.get_or_insert_with(Default::default).conditions;
        Conditions::without_root(conditions, generation).set(
            CONDITION_PROVISIONING,
            status,
            reason,
            &message,
        );
        if next.status == current.status {
            continue;
        }
        let namespace = current.metadata.namespace.as_deref().unwrap_or("default");
        let api = kube::Api::<CapacityBuffer>::namespaced(ctx.client.clone(), namespace);
        if let Err(error) = patch::status(&api, current.as_ref(), &next).await {
            tracing::warn!(%error, buffer = %current.key(), "writing the Provisioning condition");
        }
    }
}
