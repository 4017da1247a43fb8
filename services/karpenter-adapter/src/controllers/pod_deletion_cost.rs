//! PodDeletionCostManagement (Karpenter v1.15): writes the planner's
//! ranking (`PlanDisruptionResponse.deletion_costs`, decided by the
//! planner's `disruption::deletion_cost`) into the
//! `controller.kubernetes.io/pod-deletion-cost` annotation of each node's
//! ReplicaSet pods, so that a Deployment's scale-in removes pods from the
//! nodes disruption would take first.
//!
//! - At most one pass a minute (`Timing::deletion_cost_every`), one at a
//!   time, off the disruption loop.
//! - Nodes being removed are always written; of the ranked and the cleared,
//!   at most [`MAX_NODES_PER_PASS`] nodes that need a write (a node whose
//!   pods already say the right thing costs nothing).
//! - Each write is a merge patch guarded by the pod's resourceVersion: a
//!   conflict is left for the next pass (`skipped_conflict`), a pod gone is
//!   `skipped_notfound`. A value someone else set is overwritten, as
//!   upstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as sched;
use kube::ResourceExt;
use serde_json::json;

use crate::controllers::Context;
use crate::metrics::{PoolLabels, ResultLabels};
use crate::objects::patch;
use crate::state::index::Index;
use crate::state::pod_entry::PodEntry;

/// Ranked or cleared nodes written per pass (nodes being removed aside).
pub const MAX_NODES_PER_PASS: usize = 50;

/// One writer per adapter: when it last ran, whether it runs now, and the
/// pass in flight (stopped with the controllers, before the lease goes).
#[derive(Clone, Debug, Default)]
pub struct DeletionCostWriter {
    last_pass: Arc<Mutex<Option<Instant>>>,
    running: Arc<AtomicBool>,
    pass: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl DeletionCostWriter {
    /// Starts a pass over `costs` in the background, when a pod needs a
    /// write, unless one ran within the minute or still runs.
    pub fn offer(&self, ctx: &Context, index: &Arc<Index>, costs: &[sched::NodeDeletionCost]) {
        if costs.is_empty() {
            return;
        }
        let writes = {
            let mut last = self.last_pass.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| at.elapsed() < ctx.timing.deletion_cost_every)
                || self.running.load(Ordering::Acquire)
            {
                return;
            }
            let writes = planned_writes(index, costs);
            if writes.writes.is_empty() || self.running.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(Instant::now());
            writes
        };
        let (ctx, running) = (ctx.clone(), Arc::clone(&self.running));
        let pass = tokio::spawn(async move {
            write_all(&ctx, writes).await;
            running.store(false, Ordering::Release);
        });
        *self.pass.lock().unwrap_or_else(|e| e.into_inner()) = Some(pass);
    }

    /// Stops the pass in flight: this replica no longer leads.
    pub fn stop(&self) {
        if let Some(pass) = self.pass.lock().unwrap_or_else(|e| e.into_inner()).take() {
            pass.abort();
        }
        self.running.store(false, Ordering::Release);
    }
}

/// One pod's write: the value, or `None` to clear it.
struct PodWrite {
    pod: Arc<PodEntry>,
    value: Option<String>,
}

/// Whether the pod's controlling owner is a ReplicaSet: only those pods
/// are written (the ReplicaSet controller is what reads the annotation).
fn replica_set_pod(pod: &PodEntry) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "ReplicaSet")
}

/// The writes of a pass, by node in the ranking's order, and the nodes
/// written per pool.
fn planned_writes(index: &Index, costs: &[sched::NodeDeletionCost]) -> Planned {
    let mut planned = Planned::default();
    let mut capped_nodes = 0;
    for entry in costs {
        let removing = entry.cost == Some(i32::MIN);
        if !removing && capped_nodes >= MAX_NODES_PER_PASS {
            break;
        }
        let value = entry.cost.map(|c| c.to_string());
        let writes: Vec<PodWrite> = index
            .pods_on(&entry.node)
            .iter()
            .filter(|pod| replica_set_pod(pod))
            .filter(|pod| {
                pod.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(labels::POD_DELETION_COST))
                    != value.as_ref()
            })
            .map(|pod| PodWrite {
                pod: Arc::clone(pod),
                value: value.clone(),
            })
            .collect();
        if writes.is_empty() {
            continue;
        }
        if !removing {
            capped_nodes += 1;
        }
        let pool = index
            .nodes
            .named(&entry.node)
            .and_then(|n| n.labels().get(labels::NODE_POOL).cloned())
            .unwrap_or_default();
        *planned.nodes_by_pool.entry(pool).or_default() += 1;
        planned.writes.extend(writes);
    }
    planned
}

#[derive(Default)]
struct Planned {
    writes: Vec<PodWrite>,
    nodes_by_pool: BTreeMap<String, i64>,
}

async fn write_all(ctx: &Context, planned: Planned) {
    ctx.metrics.deletion_cost_pending_nodes.clear();
    for (pool, nodes) in &planned.nodes_by_pool {
        ctx.metrics
            .deletion_cost_pending_nodes
            .get_or_create(&PoolLabels {
                nodepool: pool.clone(),
            })
            .set(*nodes);
    }
    for write in planned.writes {
        let result = write_one(ctx, &write).await;
        ctx.metrics
            .deletion_cost_writes
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }
}

async fn write_one(ctx: &Context, write: &PodWrite) -> &'static str {
    let namespace = write.pod.metadata.namespace.clone().unwrap_or_default();
    let pod = Pod {
        metadata: write.pod.metadata.clone(),
        ..Pod::default()
    };
    let body = json!({"metadata": {"annotations": {labels::POD_DELETION_COST: write.value}}});
    match patch::merge(&ctx.pods(&namespace), &pod, body).await {
        Ok(_) => "updated",
        Err(error) if error.is_conflict() => "skipped_conflict",
        Err(error) if error.is_not_found() => "skipped_notfound",
        Err(error) => {
            tracing::warn!(pod = %pod.name_any(), %namespace, %error, "writing pod-deletion-cost failed");
            "error"
        }
    }
}
