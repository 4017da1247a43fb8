//! Finalizers, the one way: whether an object holds one, putting one on an
//! object being built, and adding or removing one through the API with the
//! object's resource version as a guard (so a finalizer list another writer
//! changed is never overwritten).

use std::fmt::Debug;

use kube::api::Api;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::{Result, is_not_found};
use crate::objects::patch;

/// Whether `object` holds `finalizer`.
pub fn holds<K: Resource>(object: &K, finalizer: &str) -> bool {
    object.finalizers().iter().any(|f| f == finalizer)
}

/// Puts `finalizer` on `object` (one not yet written) unless it holds it.
pub fn ensure<K: Resource>(object: &mut K, finalizer: &str) {
    if !holds(object, finalizer) {
        object.finalizers_mut().push(finalizer.to_owned());
    }
}

/// Adds `finalizer` unless present; returns the object as stored.
pub async fn add<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if holds(object, finalizer) {
        return Ok(object.clone());
    }
    let mut finalizers = object.finalizers().to_vec();
    finalizers.push(finalizer.to_owned());
    patch::merge(api, object, json!({"metadata": {"finalizers": finalizers}})).await
}

/// Removes `finalizer`; an object already gone is fine. Whether this call
/// released it: a pass on a stale read finds the object gone (or the
/// finalizer off) and must not count a termination a second time.
pub async fn remove<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    if !holds(object, finalizer) {
        return Ok(false);
    }
    let finalizers: Vec<&String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .collect();
    match patch::merge(api, object, json!({"metadata": {"finalizers": finalizers}})).await {
        Ok(_) => Ok(true),
        Err(crate::error::Error::Kube(e)) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}
