//! How the index keeps a Pod: what the controllers read, and the pod read
//! once for the scheduler.
//!
//! ```text
//!   watched Pod ─┬─▶ fields controllers read: metadata (no labels), node, phase,
//!                │   start, Ready since, tolerations, priority class, grace period
//!                └─▶ prepared: the wire pod but for priority, volumes and
//!                    do-not-disrupt (finished per snapshot by karpenter-snapshot)
//! ```
//!
//! A typed Pod is about 5 KB inline with one container (k8s-openapi keeps
//! every optional field of the spec, and of each container, in place)
//! before its strings and maps; at 20,000 pending pods the full objects
//! were most of the adapter's memory, and turning them into the Solve
//! request again for every batch was its peak. The entry keeps what
//! controllers read; containers, volumes, affinity and the rest live only
//! in their wire form.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use karpenter_snapshot::{Mode, PreparedObject, Source};
use kube::Resource;
use kube::core::NamespaceResourceScope;

/// One Pod of the index. Labels are left out of the metadata: only the
/// scheduler reads them, from the prepared pod.
#[derive(Debug)]
pub struct PodEntry {
    pub metadata: ObjectMeta,
    pub node_name: Option<String>,
    pub tolerations: Vec<Toleration>,
    pub priority_class_name: Option<String>,
    pub termination_grace_period_seconds: Option<i64>,
    pub phase: Option<String>,
    pub start_time: Option<Time>,
    /// When the pod's `Ready` condition last became `True`, while it is.
    pub ready_since: Option<Time>,
    /// When the pod was bound (its `PodScheduled` condition became `True`).
    pub scheduled_since: Option<Time>,
    /// Karpenter provisions for it ([`karpenter_snapshot::provisionable`]).
    pub provisionable: bool,
    prepared: PreparedObject,
}

impl PodEntry {
    pub fn new(pod: Pod) -> Self {
        let prepared = karpenter_snapshot::prepare_object(
            &Source {
                id: 0,
                object: &pod,
            },
            Mode::Live,
        );
        let provisionable = karpenter_snapshot::provisionable(&pod);
        let spec = pod.spec.unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        let since = |kind: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == kind && c.status == "True")
                .and_then(|c| c.last_transition_time.clone())
        };
        let ready_since = since("Ready");
        let scheduled_since = since("PodScheduled");
        let mut metadata = pod.metadata;
        metadata.labels = None;
        Self {
            metadata,
            node_name: spec.node_name.filter(|n| !n.is_empty()),
            tolerations: spec.tolerations.unwrap_or_default(),
            priority_class_name: spec.priority_class_name,
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            phase: status.phase,
            start_time: status.start_time,
            ready_since,
            scheduled_since,
            provisionable,
            prepared,
        }
    }

    /// The pod as the live snapshot reads it.
    pub fn prepared(&self) -> &PreparedObject {
        &self.prepared
    }

    /// Succeeded or Failed.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }

    /// Whether `karpenter.sh/do-not-disrupt` protects the pod at `now`
    /// (seconds).
    pub fn do_not_disrupt(&self, now: i64) -> bool {
        let start = self.start_time.as_ref().map(|t| prost_types::Timestamp {
            seconds: t.0.as_second(),
            nanos: 0,
        });
        let annotations = self.metadata.annotations.as_ref();
        let empty = std::collections::BTreeMap::new();
        karpenter_snapshot::do_not_disrupt(annotations.unwrap_or(&empty), start.as_ref(), now)
    }

    /// A pod that must find another node when its node goes (Karpenter's
    /// IsReschedulable): running, or a StatefulSet's pod still terminating
    /// (its replacement keeps its name and waits for it); never a
    /// DaemonSet's or a static (mirror) pod.
    pub fn is_reschedulable(&self) -> bool {
        let owned_by = |kind: &str| {
            self.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == kind)
        };
        let terminating = self.metadata.deletion_timestamp.is_some();
        let active = !self.is_terminal() && !terminating;
        (active || owned_by("StatefulSet") && terminating)
            && !owned_by("DaemonSet")
            && !owned_by("Node")
    }
}

/// A Pod for the API's purposes (events, object references, `ResourceExt`).
impl Resource for PodEntry {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Pod::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Pod::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Pod::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Pod::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(cpu: &str, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "default", "uid": "u1"},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "priorityClassName": "high",
                "terminationGracePeriodSeconds": 5
            },
            "status": {"phase": "Pending", "conditions": conditions}
        }))
        .expect("pod")
    }

    fn unschedulable() -> serde_json::Value {
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
    }

    #[test]
    fn the_entry_keeps_what_controllers_read() {
        let entry = PodEntry::new(pod("1", unschedulable()));
        assert_eq!(entry.priority_class_name.as_deref(), Some("high"));
        assert_eq!(entry.termination_grace_period_seconds, Some(5));
        assert_eq!(entry.tolerations.len(), 1);
        assert_eq!(entry.phase.as_deref(), Some("Pending"));
        assert!(
            entry.metadata.labels.is_none(),
            "labels live in the prepared pod"
        );
        let prepared = entry.prepared().as_ref().expect("readable");
        let prepared = prepared.as_ref().expect("pending");
        assert_eq!(prepared.name(), "a");
    }

    #[test]
    fn a_pod_the_scheduler_cannot_read_keeps_its_error_and_header() {
        let entry = PodEntry::new(pod("lots", unschedulable()));
        let error = entry.prepared().as_ref().expect_err("bad request");
        assert_eq!(error.name, "a");
        assert!(error.field.contains("requests"), "{error}");
        assert_eq!(entry.metadata.uid.as_deref(), Some("u1"));
    }

    #[test]
    fn a_pod_kube_scheduler_did_not_give_up_on_takes_no_part() {
        let entry = PodEntry::new(pod("1", json!([])));
        assert!(matches!(entry.prepared(), Ok(None)));
    }
}
