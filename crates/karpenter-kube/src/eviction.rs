//! The Eviction API, as kube-apiserver reads it. kube-client's `evict`
//! writes the eviction's options as `delete_options`, a field the API server
//! does not know and drops, so a UID precondition sent through it is never
//! checked: a pod replaced under the same name (a StatefulSet's) could be
//! evicted in place of the one meant. This sends `deleteOptions`.

/// Evicts the pod `name`, only while it is still the pod with `uid` (the
/// API server answers 409 Conflict otherwise). Answers as `Api::evict`.
pub async fn evict_pod<K>(
    pods: &kube::Api<K>,
    name: &str,
    uid: Option<&str>,
) -> Result<kube::core::Status, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut eviction = serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name},
    });
    if let Some(uid) = uid {
        eviction["deleteOptions"] = serde_json::json!({"preconditions": {"uid": uid}});
    }
    pods.create_subresource(
        "eviction",
        name,
        &kube::api::PostParams::default(),
        &eviction,
    )
    .await
}
