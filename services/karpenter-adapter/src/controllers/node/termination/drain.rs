//! Draining a Node the way Karpenter's terminator does: pods leave through
//! the Eviction API (so PodDisruptionBudgets hold), in tiers (non-critical
//! before critical, DaemonSet pods after the others of their tier), a tier
//! only once the one before it is gone; `karpenter.sh/do-not-disrupt` pods
//! are waited for. Once the claim's termination deadline is near, a pod is
//! deleted regardless, early enough that its own grace period ends by the
//! deadline.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use karpenter_core::labels;
use karpenter_core::taints::{Effect, Taint, Toleration};
use kube::ResourceExt;
use kube::api::{DeleteParams, Preconditions};

use crate::controllers::Context;
use crate::error::{Result, is_not_found};
use crate::events::{Event, Kind};
use crate::metrics::{CodeLabels, ReasonLabels};
use crate::state::index::PodEntry;

/// Where a drain stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Drain {
    /// No pod that must leave is left.
    Done,
    /// This many pods are still to leave.
    Waiting(usize),
}

const CRITICAL_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// A pod stuck terminating this long past its deletion is not waited for.
const STUCK_AFTER_SECONDS: i64 = 60;

fn toleration(t: &k8s_openapi::api::core::v1::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone().unwrap_or_default(),
        exists: t.operator.as_deref() == Some("Exists"),
        value: t.value.clone().unwrap_or_default(),
        effect: match t.effect.as_deref() {
            Some("NoSchedule") => Some(Effect::NoSchedule),
            Some("PreferNoSchedule") => Some(Effect::PreferNoSchedule),
            Some("NoExecute") => Some(Effect::NoExecute),
            _ => None,
        },
    }
}

fn tolerates_disrupted(pod: &PodEntry) -> bool {
    let disrupted = Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_owned(),
        value: String::new(),
        effect: Effect::NoSchedule,
    };
    pod.tolerations
        .iter()
        .any(|t| toleration(t).tolerates(&disrupted))
}

fn is_mirror(pod: &PodEntry) -> bool {
    pod.annotations()
        .contains_key("kubernetes.io/config.mirror")
        || pod.owner_references().iter().any(|o| o.kind == "Node")
}

fn owned_by_daemon_set(pod: &PodEntry) -> bool {
    pod.owner_references().iter().any(|o| o.kind == "DaemonSet")
}

fn is_critical(pod: &PodEntry) -> bool {
    pod.priority_class_name
        .as_deref()
        .is_some_and(|c| CRITICAL_CLASSES.contains(&c))
}

fn stuck_terminating(pod: &PodEntry, now: Timestamp) -> bool {
    pod.metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now.as_second().saturating_sub(t.0.as_second()) > STUCK_AFTER_SECONDS)
}

/// Pods the drain waits for: not finished, not tolerating the disrupted
/// taint (those may stay), not stuck terminating, not static.
pub fn waiting(pods: &[Arc<PodEntry>], now: Timestamp) -> Vec<Arc<PodEntry>> {
    pods.iter()
        .filter(|p| {
            !p.is_terminal()
                && !tolerates_disrupted(p)
                && !stuck_terminating(p, now)
                && !is_mirror(p)
        })
        .cloned()
        .collect()
}

/// Whether the pod must be deleted now to be gone by `deadline`.
pub fn needs_force_delete(pod: &PodEntry, deadline: Option<Timestamp>, now: Timestamp) -> bool {
    let Some(deadline) = deadline else {
        return false;
    };
    if let Some(deleted) = &pod.metadata.deletion_timestamp {
        return deleted.0 > deadline;
    }
    let Some(grace) = pod.termination_grace_period_seconds else {
        return false;
    };
    now.as_second() > deadline.as_second().saturating_sub(grace)
}

/// The tier a graceful pod leaves in (0 first).
fn tier(pod: &PodEntry) -> usize {
    usize::from(is_critical(pod)) * 2 + usize::from(owned_by_daemon_set(pod))
}

/// One pass of the drain: deletes what must go now, evicts the first tier
/// still present, and says how many pods are left.
pub async fn drain(
    ctx: &Context,
    node: &Node,
    pods: &[Arc<PodEntry>],
    deadline: Option<Timestamp>,
    reason: &str,
) -> Result<Drain> {
    let now = Timestamp::now();
    let waiting = waiting(pods, now);
    if waiting.is_empty() {
        return Ok(Drain::Done);
    }
    let (forced, graceful): (Vec<_>, Vec<_>) = waiting
        .iter()
        .partition(|p| needs_force_delete(p, deadline, now));
    for pod in &forced {
        force_delete(ctx, pod, deadline.unwrap_or(now), now, reason).await?;
    }
    if let Some(first) = graceful.iter().map(|p| tier(p)).min() {
        let tier_pods = graceful.iter().filter(|p| tier(p) == first);
        for pod in tier_pods {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if pod.do_not_disrupt(now.as_second()) {
                continue;
            }
            evict(ctx, node, pod, reason).await?;
        }
    }
    Ok(Drain::Waiting(waiting.len()))
}

/// Deletes a pod that must be gone by `deadline`, with what grace is left
/// (at least a second), past PDBs and do-not-disrupt.
async fn force_delete(
    ctx: &Context,
    pod: &PodEntry,
    deadline: Timestamp,
    now: Timestamp,
    reason: &str,
) -> Result<()> {
    let left = deadline.as_second().saturating_sub(now.as_second()).max(1);
    let granted = u32::try_from(left).unwrap_or(u32::MAX);
    let params = DeleteParams {
        grace_period_seconds: Some(granted),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let namespace = pod.namespace().unwrap_or_default();
    match ctx.pods(&namespace).delete(&pod.name_any(), &params).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let own = pod.termination_grace_period_seconds.unwrap_or(30);
    ctx.recorder.emit(Event::new(
        pod,
        Kind::Normal,
        "Disrupted",
        format!(
            "Deleting the pod to accommodate the terminationTime {} of the node. The pod was granted {granted} seconds of grace-period of its {own} terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt annotation.",
            deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
    ));
    ctx.metrics
        .pods_drained
        .get_or_create(&ReasonLabels {
            reason: reason.to_owned(),
        })
        .inc();
    Ok(())
}

/// Asks the Eviction API to move the pod, unless its last refusal is too
/// recent (see [`super::evictions`]). A PodDisruptionBudget that says no
/// (429) is reported on the Node; the API server throttling (429 without a
/// budget) is only backed off; either way the drain goes on with the next
/// pod.
async fn evict(ctx: &Context, node: &Node, pod: &PodEntry, reason: &str) -> Result<()> {
    let uid = pod.uid().unwrap_or_default();
    let now = tokio::time::Instant::now();
    if !ctx.evictions.due(&uid, now) {
        return Ok(());
    }
    let namespace = pod.namespace().unwrap_or_default();
    // Only the pod meant: a pod recreated under its name (a StatefulSet's)
    // is refused with 409 and handled as gone.
    let result =
        karpenter_kube::evict_pod(&ctx.pods(&namespace), &pod.name_any(), pod.uid().as_deref())
            .await;
    let code = match &result {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(_) => 0,
    };
    ctx.metrics
        .pods_eviction_requests
        .get_or_create(&CodeLabels {
            code: code.to_string(),
        })
        .inc();
    let status = match result {
        Ok(_) => {
            ctx.evictions.accepted(&uid);
            evicted(ctx, pod, reason);
            return Ok(());
        }
        Err(kube::Error::Api(status)) => status,
        Err(error) => {
            ctx.evictions.refused(&uid, now);
            return Err(error.into());
        }
    };
    if status.code == 404 || status.code == 409 {
        ctx.evictions.accepted(&uid);
        return Ok(());
    }
    ctx.evictions.refused(&uid, now);
    let why = if status.message.contains("more than one PodDisruptionBudget") {
        "eviction does not support multiple PDBs"
    } else if status.code == 429 && blocked_by_a_budget(&status) {
        "evicting pod violates a PDB"
    } else if status.code == 429 {
        tracing::debug!(pod = %pod.name_any(), "eviction throttled by the API server; backing off");
        return Ok(());
    } else {
        return Err(kube::Error::Api(status).into());
    };
    ctx.recorder.emit(Event::new(
        node,
        Kind::Warning,
        "FailedDraining",
        format!(
            "Failed to drain node, {why} (Pod={namespace}/{})",
            pod.name_any()
        ),
    ));
    Ok(())
}

/// Whether a 429 is a PodDisruptionBudget's answer (its cause says so;
/// the message, for servers that give no cause) rather than throttling.
fn blocked_by_a_budget(status: &kube::core::Status) -> bool {
    status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "DisruptionBudget"))
        || status.message.contains("disruption budget")
}

/// Records an eviction that went through.
fn evicted(ctx: &Context, pod: &PodEntry, reason: &str) {
    ctx.recorder.emit(
        Event::new(
            pod,
            Kind::Normal,
            "Evicted",
            format!("Evicted pod: {reason}"),
        )
        .dedupe_on(pod.name_any()),
    );
    ctx.metrics
        .pods_drained
        .get_or_create(&ReasonLabels {
            reason: reason.to_owned(),
        })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::fixtures::merge;
    use serde_json::json;

    fn pod(name: &str, extra: serde_json::Value) -> Arc<PodEntry> {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
            "status": {"phase": "Running"}
        });
        merge(&mut value, extra);
        let pod: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        Arc::new(PodEntry::new(pod))
    }

    #[test]
    fn the_drain_waits_for_what_must_leave_in_karpenters_order() {
        let now = Timestamp::now();
        let app = pod("app", json!({}));
        let daemon = pod(
            "daemon",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}}),
        );
        let critical = pod(
            "dns",
            json!({"spec": {"priorityClassName": "system-cluster-critical"}}),
        );
        let done = pod("job", json!({"status": {"phase": "Succeeded"}}));
        let tolerant = pod(
            "tolerant",
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        );
        let mirror = pod(
            "static",
            json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}),
        );
        let all = vec![
            app.clone(),
            daemon.clone(),
            critical.clone(),
            done,
            tolerant,
            mirror,
        ];
        let waiting = waiting(&all, now);
        let names: Vec<String> = waiting.iter().map(|p| p.name_any()).collect();
        assert_eq!(names, ["app", "daemon", "dns"]);
        assert_eq!((tier(&app), tier(&daemon), tier(&critical)), (0, 1, 2));
    }

    #[test]
    fn pods_are_deleted_early_enough_to_finish_by_the_deadline() {
        let now = Timestamp::now();
        let deadline = now
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(100))
            .ok();
        let short = pod(
            "short",
            json!({"spec": {"terminationGracePeriodSeconds": 30}}),
        );
        let long = pod(
            "long",
            json!({"spec": {"terminationGracePeriodSeconds": 120}}),
        );
        assert!(!needs_force_delete(&short, deadline, now));
        assert!(
            needs_force_delete(&long, deadline, now),
            "120 s of grace no longer fit in 100"
        );
        assert!(
            !needs_force_delete(&long, None, now),
            "no deadline, no force"
        );
    }
}
