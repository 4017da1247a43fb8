//! Provisioning (Karpenter's provisioner): batches of pending pods become
//! NodeClaims.
//!
//! ```text
//!   batcher ──window closed──▶ wait until synced (every claim launched)
//!     ──▶ ready pools of the provider's kind ──GetInstanceTypes──▶ catalogs
//!     ──▶ live snapshot ──Solve──▶ plans ──▶ NodeClaims created (limits re-checked)
//!     ──▶ events: Nominated / FailedScheduling ──▶ wait until the index shows the new claims
//! ```
//!
//! Every claim created is handed to the index at once (`Writes::created`),
//! so the next snapshot holds it as an in-flight node and counts it against
//! its pool's limits even while the NodeClaim watch lags: a batch never
//! plans again for pods the previous one already asked capacity for.

pub mod batcher;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use karpenter_api::NodePool;
use karpenter_proto::scheduler::v1 as sched;
use kube::ResourceExt;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::controllers::{Context, capacitybuffer};
use crate::error::{Error, Result};
use crate::events::{Event, Kind};
use crate::metrics::{ControllerLabels, CreatedLabels};
use crate::objects::claim::{self, Template};
use crate::scheduling;
use crate::state::index::Index;
use crate::state::watch::Published;
use batcher::Batcher;

/// How long `FailedScheduling` is not repeated for the same pod.
const FAILED_SCHEDULING_DEDUPE: Duration = Duration::from_secs(300);
/// How long a batch waits for the index to show the claims it created.
const CREATED_VISIBLE_WITHIN: Duration = Duration::from_secs(10);
/// Claims created at once.
const CREATE_CONCURRENCY: usize = 16;

/// Runs the provisioner until the snapshots end.
pub async fn run(ctx: Context, mut snapshots: watch::Receiver<Published>) {
    if snapshots.wait_for(|p| p.index.listed()).await.is_err() {
        return;
    }
    let mut batcher = Batcher::new(
        ctx.settings.batch_idle_duration,
        ctx.settings.batch_max_duration,
    );
    let kind = ctx.node_class_kind().to_owned();
    let mut failures = 0u32;
    loop {
        if batcher.next(&mut snapshots).await.is_none() {
            return;
        }
        let synced = snapshots.wait_for(|p| p.index.synced(&kind)).await;
        let Ok(published) = synced.map(|p| p.clone()) else {
            return;
        };
        let span = tracing::info_span!("reconcile", controller = "provisioner");
        let result = tracing::Instrument::instrument(provision(&ctx, &published.index), span).await;
        match result {
            Ok(created) => {
                failures = 0;
                await_visible(&mut snapshots, &created).await;
            }
            Err(error) => {
                failures += 1;
                let wait = error.backoff(failures);
                tracing::warn!(%error, retry_in = ?wait, "provisioning failed");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// Waits (a while at most) until every claim in `names` is in the index.
async fn await_visible(snapshots: &mut watch::Receiver<Published>, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let visible =
        snapshots.wait_for(|p| names.iter().all(|n| p.index.node_claims.named(n).is_some()));
    if tokio::time::timeout(CREATED_VISIBLE_WITHIN, visible)
        .await
        .is_err()
    {
        tracing::warn!(claims = ?names, "created node claims did not appear in the watch in time");
    }
}

/// One batch: plan and create. Returns the names of the claims created.
async fn provision(ctx: &Context, index: &Arc<Index>) -> Result<Vec<String>> {
    let started = Instant::now();
    let pools = scheduling::provisioning_pools(ctx, index);
    if pools.is_empty() {
        tracing::warn!("pods are pending but no node pool is ready to provision for them");
        return Ok(Vec::new());
    }
    let scheduling::Prepared { pools, built, .. } = scheduling::prepare(ctx, index, pools).await;
    report_skipped(ctx, index, &built.skipped);
    let ignored = built.skipped.iter().filter(|e| e.kind == "Pod").count();
    ctx.metrics
        .ignored_pods
        .set(i64::try_from(ignored).unwrap_or(i64::MAX));
    let pending = built.pending_pod_count();
    if pending == 0 {
        // Buffers that hold no pods still get their Provisioning condition
        // (not ready, or empty).
        if !index.capacity_buffers.is_empty() {
            let nothing = sched::SolveResponse::default();
            capacitybuffer::record_provisioning(ctx, index, &BTreeMap::new(), &nothing).await;
        }
        return Ok(Vec::new());
    }
    let virtual_pods = virtual_pods(&built);
    // The batch's pods wait for this Solve; none once it answered.
    let queued = i64::try_from(pending).unwrap_or(i64::MAX);
    ctx.metrics.queue_depth.set(queued);
    let solved = ctx.clients.solve(built, scheduling::options(ctx)).await;
    ctx.metrics.queue_depth.set(0);
    let solved = solved.map_err(Error::peer("Solve"))?;
    ctx.metrics
        .scheduling_duration
        .get_or_create(&ControllerLabels {
            controller: "provisioner".to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics
        .unschedulable_pods
        .get_or_create(&ControllerLabels {
            controller: "provisioner".to_owned(),
        })
        .set(i64::try_from(solved.unschedulable.len()).unwrap_or(i64::MAX));
    tracing::info!(
        pods = pending,
        nodeclaims = solved.node_claims.len(),
        unschedulable = solved.unschedulable.len(),
        "computed new nodeclaim(s) to fit pod(s)"
    );
    record_scheduling_times(ctx, &solved);
    let created = create_all(ctx, index, &pools, &solved.node_claims, "provisioned").await;
    nominate_existing(ctx, index, &solved.existing_nodes);
    if !index.capacity_buffers.is_empty() {
        capacitybuffer::record_provisioning(ctx, index, &virtual_pods, &solved).await;
    }
    report_pools_without_instance_types(ctx, index, &solved.pools_without_instance_types);
    for unschedulable in &solved.unschedulable {
        if let Some(pod) = pod_of(index, unschedulable.pod.as_ref()) {
            ctx.recorder.emit(
                Event::new(
                    pod.as_ref(),
                    Kind::Warning,
                    "FailedScheduling",
                    format!("Failed to schedule pod, {}", unschedulable.reason),
                )
                .dedupe_for(FAILED_SCHEDULING_DEDUPE),
            );
        }
    }
    created
}

/// When this Solve first decided about each pod, and first placed it (for
/// Karpenter's pod scheduling metrics).
fn record_scheduling_times(ctx: &Context, solved: &sched::SolveResponse) {
    // The observability pass reads and prunes them; it is off with
    // cluster-state observability.
    if ctx.settings.disable_cluster_state_observability {
        return;
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let placed = solved
        .node_claims
        .iter()
        .flat_map(|claim| &claim.pods)
        .chain(solved.existing_nodes.iter().flat_map(|node| &node.pods));
    for pod in placed {
        ctx.scheduling_times.record(&pod.uid, true, now);
    }
    for pod in solved.unschedulable.iter().filter_map(|u| u.pod.as_ref()) {
        ctx.scheduling_times.record(&pod.uid, false, now);
    }
}

/// How long a pool's `NoCompatibleInstanceTypes` is not repeated.
const NO_COMPATIBLE_DEDUPE: Duration = Duration::from_secs(60);

/// Karpenter's `NoCompatibleInstanceTypes` warning on each ready pool whose
/// requirements leave none of its instance types.
fn report_pools_without_instance_types(
    ctx: &Context,
    index: &Index,
    pools: &[sched::PoolWithoutInstanceTypes],
) {
    for entry in pools {
        let Some(pool) = index.node_pools.named(&entry.node_pool) else {
            continue;
        };
        let message = if entry.min_values {
            "NodePool requirements filtered out all compatible available instance types due to minValues incompatibility"
        } else {
            "NodePool requirements filtered out all compatible available instance types"
        };
        tracing::info!(nodepool = %entry.node_pool, min_values = entry.min_values, "skipping, nodepool requirements filtered out all instance types");
        ctx.recorder.emit(
            Event::new(
                pool.as_ref(),
                Kind::Warning,
                "NoCompatibleInstanceTypes",
                message,
            )
            .dedupe_for(NO_COMPATIBLE_DEDUPE),
        );
    }
}

fn pod_of<'a>(
    index: &'a Index,
    pod: Option<&sched::PodRef>,
) -> Option<&'a Arc<crate::state::index::PodEntry>> {
    let pod = pod?;
    index.pods.get(&pod.namespace, &pod.name)
}

/// Objects the snapshot could not read: a warning on each pod, a log line
/// for anything else; the batch goes on without them.
fn report_skipped(ctx: &Context, index: &Index, skipped: &[karpenter_snapshot::ObjectError]) {
    for error in skipped {
        if error.kind == "Pod"
            && let Some(pod) = index.pods.get(&error.namespace, &error.name)
        {
            ctx.recorder.emit(
                Event::new(
                    pod.as_ref(),
                    Kind::Warning,
                    "FailedScheduling",
                    format!("Failed to schedule pod, {}: {}", error.field, error.message),
                )
                .dedupe_for(FAILED_SCHEDULING_DEDUPE),
            );
        } else {
            tracing::warn!(%error, "left out of planning");
        }
    }
}

/// Creates a claim per plan (a few at once), counted under `reason`
/// (`provisioned`, or a disruption command's `underutilized`, `empty`,
/// `drifted` for its replacements); the names of those created. A failed
/// create is logged and its pods are planned again next batch.
pub(crate) async fn create_all(
    ctx: &Context,
    index: &Arc<Index>,
    pools: &[Arc<NodePool>],
    plans: &[sched::NodeClaimPlan],
    reason: &str,
) -> Result<Vec<String>> {
    let by_name: BTreeMap<String, &Arc<NodePool>> =
        pools.iter().map(|p| (p.name_any(), p)).collect();
    let creates: Vec<_> = plans
        .iter()
        .map(|plan| {
            let pool = by_name.get(&plan.node_pool).copied();
            async move {
                match pool {
                    Some(pool) => create(ctx, index, pool, plan, reason).await,
                    None => Err(Error::Invalid(format!(
                        "the scheduler planned a claim for node pool {:?}, which was not offered",
                        plan.node_pool
                    ))),
                }
            }
        })
        .collect();
    let results: Vec<Result<Option<String>>> = futures_util::stream::iter(creates)
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    let mut created = Vec::new();
    let mut first_error = None;
    for result in results {
        match result {
            Ok(Some(name)) => created.push(name),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "creating node claim failed");
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) if created.is_empty() => Err(error),
        _ => Ok(created),
    }
}

/// Whether the pool's usage already exceeds a limit (then nothing more is
/// created from it); the message names the resource.
fn exceeded(pool: &NodePool, usage: &BTreeMap<String, i64>) -> Option<String> {
    pool.spec.limits.iter().find_map(|(name, quantity)| {
        let limit = karpenter_core::quantity::parse_resource(name, &quantity.0).ok()?;
        let used = usage.get(name).copied().unwrap_or(0);
        (used > limit).then(|| {
            format!(
                "resource usage exceeds limit (limit={}, resource-name={name}, usage={used})",
                quantity.0
            )
        })
    })
}

async fn create(
    ctx: &Context,
    index: &Index,
    pool: &Arc<NodePool>,
    plan: &sched::NodeClaimPlan,
    reason: &str,
) -> Result<Option<String>> {
    let pool_name = pool.name_any();
    if let Some(why) = exceeded(pool, &scheduling::pool_usage(index, &pool_name)) {
        tracing::warn!(nodepool = %pool_name, "{why}");
        return Ok(None);
    }
    let class = index
        .node_classes
        .named(&pool.spec.template.spec.node_class_ref.name);
    let node_class_hash: BTreeMap<String, String> = class
        .map(|c| {
            [
                &ctx.info.node_class_hash_annotation,
                &ctx.info.node_class_hash_version_annotation,
            ]
            .into_iter()
            .filter(|key| !key.is_empty())
            .filter_map(|key| c.annotations().get(key).map(|v| (key.clone(), v.clone())))
            .collect()
        })
        .unwrap_or_default();
    let template = Template {
        pool,
        provider_well_known: &ctx.info.well_known_labels,
        node_class_hash,
    };
    let claim = claim::node_claim(plan, &template);
    let created = ctx
        .node_claims()
        .create(&PostParams::default(), &claim)
        .await?;
    let name = created.name_any();
    // What the claim was planned for is remembered before the index shows
    // it: its launch may run at once, and a refusal tells these pods.
    ctx.created_claims.remember(&name, &plan.pods);
    ctx.writes.created(created).await;
    let shown: Vec<&str> = plan
        .instance_types
        .iter()
        .take(5)
        .map(String::as_str)
        .collect();
    tracing::info!(
        nodeclaim = %name,
        nodepool = %pool_name,
        requests = ?plan.requests.as_ref().map(|r| &r.quantities),
        instance_types = %describe_types(&shown, plan.instance_types.len()),
        "created nodeclaim"
    );
    ctx.metrics
        .nodeclaims_created
        .get_or_create(&CreatedLabels {
            reason: reason.to_owned(),
            nodepool: pool_name,
            min_values_relaxed: plan.min_values_relaxed.to_string(),
        })
        .inc();
    nominated(ctx, index, &plan.pods, &format!("nodeclaim/{name}"));
    Ok(Some(name))
}

/// Karpenter's `Nominated` event on each of `pods`: where it should run.
fn nominated(ctx: &Context, index: &Index, pods: &[sched::PodRef], target: &str) {
    for pod in pods {
        if let Some(object) = index.pods.get(&pod.namespace, &pod.name) {
            ctx.recorder.emit(Event::new(
                object.as_ref(),
                Kind::Normal,
                "Nominated",
                format!("Pod should schedule on: {target}"),
            ));
        }
    }
}

fn describe_types(shown: &[&str], total: usize) -> String {
    let mut text = shown.join(", ");
    if total > shown.len() {
        text.push_str(&format!(" and {} other(s)", total - shown.len()));
    }
    text
}

/// The CapacityBuffer virtual pods among the pending pods: (namespace,
/// name) → the buffer's key.
fn virtual_pods(built: &karpenter_snapshot::Built) -> BTreeMap<(String, String), String> {
    built
        .snapshot
        .pending_pods
        .iter()
        .chain(built.pods.pending.iter().map(|p| p.base()))
        .filter(|p| !p.capacity_buffer.is_empty())
        .map(|p| {
            let key = (p.namespace.clone(), p.name.clone());
            (key, p.capacity_buffer.clone())
        })
        .collect()
}

/// Pods planned onto existing or in-flight capacity are told where, and
/// the nodes are nominated (disruption leaves them alone for a while). Only
/// real pods nominate: CapacityBuffer virtual pods (not in the index) come
/// back every batch, and a nomination would keep their nodes from ever
/// being disrupted (emptiness keeps nodes holding them instead).
fn nominate_existing(ctx: &Context, index: &Index, placements: &[sched::NodePlacement]) {
    ctx.nominations.nominate(
        placements
            .iter()
            .filter(|p| {
                p.pods
                    .iter()
                    .any(|pod| index.pods.get(&pod.namespace, &pod.name).is_some())
            })
            .map(|p| p.node.as_str()),
        crate::state::nominations::window(ctx.settings.batch_max_duration),
    );
    for placement in placements {
        let target = if let Some(node) = index.nodes.named(&placement.node) {
            let pid = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .unwrap_or_default();
            match index.claim_for_provider_id(pid) {
                Some(claim) => format!("nodeclaim/{}, node/{}", claim.name_any(), placement.node),
                None => format!("node/{}", placement.node),
            }
        } else {
            format!("nodeclaim/{}", placement.node)
        };
        nominated(ctx, index, &placement.pods, &target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pool_over_its_limit_gets_no_more_claims() {
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"limits": {"cpu": "20"}, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": []}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let usage = |cpu: i64| {
            [("cpu".to_owned(), cpu)]
                .into_iter()
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            exceeded(&pool, &usage(20_000)),
            None,
            "at the limit is not over it"
        );
        assert_eq!(
            exceeded(&pool, &usage(20_001)),
            Some(
                "resource usage exceeds limit (limit=20, resource-name=cpu, usage=20001)"
                    .to_owned()
            )
        );
        assert_eq!(describe_types(&["a", "b"], 7), "a, b and 5 other(s)");
    }
}
