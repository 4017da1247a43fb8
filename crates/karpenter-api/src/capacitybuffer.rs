//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer (the Kubernetes autoscaling
//! SIG's kind, served by Karpenter behind the `CapacityBuffer` feature
//! gate): headroom kept free in the cluster as "virtual" pods, made from a
//! PodTemplate or from the pod template of a scalable workload
//! (Deployment, StatefulSet, ReplicaSet), sized by `replicas`, by a
//! `percentage` of the workload's replicas, and capped by `limits`.
//!
//! Virtual pods never exist in the API server: provisioning plans nodes for
//! them as for pending pods, consolidation must still fit them, and
//! emptiness keeps a node that holds them. Real pods take their room
//! through kube-scheduler; the next provisioning pass finds the buffer short
//! and launches for it again.
//!
//! This module holds the object and its constants. Resolving a buffer
//! against the cluster (its template and size) and building its virtual
//! pods is `karpenter_snapshot::buffer`'s.

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use crate::common::{Condition, ResourceList, empty, nullable};
use crate::crd::Column;
use crate::schema::{self, add_rules, rule};

/// The only provisioning strategy: the buffer actively scales the cluster up.
pub const ACTIVE_PROVISIONING_STRATEGY: &str = "buffer.x-k8s.io/active-capacity";
/// Condition: the buffer's template and size are resolved.
pub const CONDITION_READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// Condition: where the last provisioning pass put the buffer's pods.
pub const CONDITION_PROVISIONING: &str = "Provisioning";
/// `ReadyForProvisioning=True`.
pub const REASON_RESOLVED: &str = "Resolved";
/// `ReadyForProvisioning=False`: the `scalableRef` workload is missing.
pub const REASON_SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
/// `ReadyForProvisioning=False`: the `podTemplateRef` PodTemplate is missing.
pub const REASON_POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
/// `ReadyForProvisioning=False`: anything else (an unsupported kind, no reference).
pub const REASON_RESOLUTION_FAILED: &str = "ResolutionFailed";
/// `Provisioning=True`: every virtual pod fits on existing capacity.
pub const REASON_FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
/// `Provisioning=False`: some virtual pods need new nodes (or fit nowhere).
pub const REASON_REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
/// `Provisioning=False`: the buffer is not `ReadyForProvisioning`.
pub const REASON_NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
/// `Provisioning=False`: the buffer's size is zero.
pub const REASON_BUFFER_EMPTY: &str = "BufferEmpty";
/// Annotation marking a virtual pod.
pub const VIRTUAL_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// Annotation: the name of the buffer a virtual pod belongs to.
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
/// Annotation: the namespace of that buffer.
pub const BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";
/// Virtual pods have the lowest priority there is: every real pod goes first.
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;
/// The workload kinds a `scalableRef` may name (API group `apps`).
pub const SCALABLE_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];

/// What `kubectl get capacitybuffers` prints.
pub(crate) const PRINTER_COLUMNS: &[Column] = &[
    Column::text("Strategy", ".spec.provisioningStrategy"),
    Column::text("PodTemplate", ".status.podTemplateRef.name"),
    Column::integer("Replicas", ".status.replicas"),
    Column::text("ConditionsType", ".status.conditions[*].type"),
    Column::text("ConditionsStatus", ".status.conditions[*].status"),
    Column::text("ConditionsReason", ".status.conditions[*].reason"),
    Column::AGE,
];

/// The desired state of a CapacityBuffer.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    shortname = "cb",
    namespaced,
    status = "CapacityBufferStatus",
    category = "autoscaling",
    derive = "PartialEq",
    doc = "CapacityBuffer is the configuration that an autoscaler can use to provision buffer capacity within a cluster"
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = capacity_buffer_spec_rules)]
pub struct CapacityBufferSpec {
    /// How the buffer is provided; `buffer.x-k8s.io/active-capacity` (the
    /// default) keeps it as virtual pods the autoscaler provisions for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = ACTIVE_PROVISIONING_STRATEGY))]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate of the buffer's namespace: the shape of one buffer pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A workload of the buffer's namespace whose pod template is the shape
    /// of one buffer pod, and whose replicas `percentage` is taken of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// How many buffer pods to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Buffer pods as a percentage of the `scalableRef` workload's replicas
    /// (rounded up); with `replicas` too, the larger of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// The most the buffer's pods may request together; alone, the buffer
    /// holds as many pods as fit within it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_resource_list")]
    pub limits: Option<ResourceList>,
}

fn optional_resource_list(generator: &mut schemars::SchemaGenerator) -> Schema {
    schema::resource_list(generator)
}

fn capacity_buffer_spec_rules(schema: &mut Schema) {
    add_rules(
        schema,
        [
            rule(
                "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
                "If podTemplateRef is set, replicas or limits must also be set",
            ),
            rule(
                "!(has(self.podTemplateRef) && has(self.scalableRef))",
                "You must define either PodTemplateRef or ScalableRef, but not both",
            ),
        ],
    );
}

/// An object of the buffer's namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalObjectRef {
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A workload of the buffer's namespace that has a pod template and replicas.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// `apps` when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[schemars(length(min = 1))]
    pub kind: String,
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The observed state of a CapacityBuffer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the buffer's pods are made from (a `podTemplateRef`
    /// buffer only).
    // Unset is written as `null` (not left out), so a status patch clears
    // it when the buffer moves to a `scalableRef`; so is the generation.
    #[serde(default)]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// How many virtual pods the buffer holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The `metadata.generation` of that PodTemplate.
    #[serde(default)]
    pub pod_template_generation: Option<i64>,
    /// `ReadyForProvisioning` and `Provisioning`.
    #[serde(default, skip_serializing_if = "empty", deserialize_with = "nullable")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The spec's strategy, as last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

impl CapacityBuffer {
    /// `namespace/name`, how virtual pods and statuses refer to the buffer.
    pub fn key(&self) -> String {
        let namespace = self.metadata.namespace.as_deref().unwrap_or("default");
        let name = self.metadata.name.as_deref().unwrap_or_default();
        format!("{namespace}/{name}")
    }

    /// The strategy, defaulted as the API server defaults it.
    pub fn provisioning_strategy(&self) -> &str {
        self.spec
            .provisioning_strategy
            .as_deref()
            .unwrap_or(ACTIVE_PROVISIONING_STRATEGY)
    }
}

/// The name of a buffer's `index`-th virtual pod (from 1).
pub fn virtual_pod_name(buffer: &str, index: i32) -> String {
    format!("capacity-buffer-{buffer}-{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status whose buffer no longer names a PodTemplate clears the
    /// template fields in a merge patch (they are written as `null`).
    #[test]
    fn unset_template_fields_are_written_as_null() {
        let status = CapacityBufferStatus {
            replicas: Some(2),
            ..CapacityBufferStatus::default()
        };
        let value = serde_json::to_value(&status).expect("serializes");
        assert_eq!(value["podTemplateRef"], serde_json::Value::Null);
        assert!(
            value
                .as_object()
                .is_some_and(|o| o.contains_key("podTemplateRef"))
        );
        assert!(
            value
                .as_object()
                .is_some_and(|o| o.contains_key("podTemplateGeneration"))
        );
        assert!(
            !value
                .as_object()
                .is_some_and(|o| o.contains_key("provisioningStrategy"))
        );
    }
}
