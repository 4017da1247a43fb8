//! Writes to the API, each guarded so a write made from a stale snapshot
//! fails with a conflict instead of undoing someone else's change.
//!
//! Lists (finalizers, taints, conditions) are replaced whole by a merge
//! patch, so every patch that carries one also carries the
//! `resourceVersion` it was computed from: the API server then applies it
//! only if nothing changed in between (409 otherwise, and the controller
//! reads again).

use std::fmt::Debug;

use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::{Result, is_not_found};

/// The field manager of every write.
pub const MANAGER: &str = "karpenter";

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// `patch` with `metadata.resourceVersion` of `object` added.
pub fn guarded<K: Resource>(object: &K, mut patch: Value) -> Value {
    let version = object.meta().resource_version.clone().unwrap_or_default();
    if let Some(map) = patch.as_object_mut() {
        let metadata = map.entry("metadata").or_insert_with(|| json!({}));
        metadata["resourceVersion"] = json!(version);
    }
    patch
}

/// A JSON merge patch of the object, applied only if `object` is current.
pub async fn merge<K>(api: &Api<K>, object: &K, patch: Value) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let patch = guarded(object, patch);
    Ok(api
        .patch(&object.name_any(), &params(), &Patch::Merge(&patch))
        .await?)
}

/// Sets (or, with `null`, removes) annotations of the object named like
/// `object`, whatever its version: a merge patch of map keys touches no
/// other key, so there is nothing a stale read could undo. The object must
/// still be the same one (its UID).
pub async fn annotate<K>(api: &Api<K>, object: &K, annotations: Value) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut patch = json!({"metadata": {"annotations": annotations}});
    if let Some(uid) = object.uid() {
        patch["metadata"]["uid"] = json!(uid);
    }
    Ok(api
        .patch(&object.name_any(), &params(), &Patch::Merge(&patch))
        .await?)
}

/// A JSON merge patch of the status subresource, applied only if `object`
/// is current.
pub async fn merge_status<K>(api: &Api<K>, object: &K, status: Value) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let patch = guarded(object, json!({ "status": status }));
    Ok(api
        .patch_status(&object.name_any(), &params(), &Patch::Merge(&patch))
        .await?)
}

/// An object whose status the adapter writes.
pub trait WithStatus {
    type Status: Serialize;
    fn status_part(&self) -> Option<&Self::Status>;
}

impl WithStatus for karpenter_api::NodeClaim {
    type Status = karpenter_api::nodeclaim::NodeClaimStatus;
    fn status_part(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
}

impl WithStatus for karpenter_api::NodeOverlay {
    type Status = karpenter_api::nodeoverlay::NodeOverlayStatus;
    fn status_part(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
}

impl WithStatus for karpenter_api::CapacityBuffer {
    type Status = karpenter_api::CapacityBufferStatus;
    fn status_part(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
}

impl WithStatus for karpenter_api::NodePool {
    type Status = karpenter_api::nodepool::NodePoolStatus;
    fn status_part(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
}

/// Writes `updated`'s whole status, applied only if `guard` (the object as
/// last read or written) is current.
pub async fn status<K>(api: &Api<K>, guard: &K, updated: &K) -> Result<K>
where
    K: WithStatus + Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let status = serde_json::to_value(updated.status_part()).map_err(|e| {
        crate::error::Error::Invalid(format!(
            "{} {}: status: {e}",
            K::kind(&()),
            guard.name_any()
        ))
    })?;
    merge_status(api, guard, status).await
}

/// Deletes the object (this very one: the UID is a precondition, so a
/// replacement with the same name is never deleted by mistake); gone
/// already is fine.
pub async fn delete<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if object.meta().deletion_timestamp.is_some() {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: object.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&object.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) if matches!(&e, kube::Error::Api(s) if s.code == 409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn a_guarded_patch_carries_the_version_it_was_computed_from() {
        let mut node = Node::default();
        node.metadata.resource_version = Some("42".into());
        let patch = guarded(
            &node,
            json!({"metadata": {"labels": {"a": "b"}}, "spec": {}}),
        );
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["metadata"]["labels"]["a"], "b");
    }
}
