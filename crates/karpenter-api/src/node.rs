//! What Karpenter reads of a Kubernetes Node, decided once: whether it is
//! Ready (initialization, garbage collection, termination and the
//! scheduler's snapshot ask; the snapshot of a manifest, which has no
//! status, takes a node without conditions as ready by its own choice).

use k8s_openapi::api::core::v1::{Node, NodeCondition};

use crate::common::CONDITION_READY;

/// Whether the conditions include `Ready=True` (kubelet's heartbeat).
pub fn ready_condition(conditions: &[NodeCondition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == CONDITION_READY && c.status == "True")
}

/// Whether the node reports `Ready=True`; a node without status is not ready.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .is_some_and(ready_condition)
}
