//! Which API calls were made, as RBAC sees them: the verb, the resource
//! (group, plural, subresource) and the namespace, by client. Tests compare
//! them with the permissions a chart grants.

use std::collections::BTreeSet;
use std::sync::Mutex;

use axum::http::Method;
use serde::Serialize;

/// One kind of request, as an RBAC rule would have to allow it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ApiCall {
    /// The client's `User-Agent` (empty when it sent none).
    pub user_agent: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verb: String,
    pub group: String,
    /// The plural, with `/subresource` when there is one (`pods/eviction`).
    pub resource: String,
    /// Empty for a cluster-scoped resource or a request across namespaces.
    pub namespace: String,
    /// The object's name, for rules scoped by `resourceNames`.
    pub name: String,
}

/// Every distinct call so far.
#[derive(Debug, Default)]
pub struct CallLog {
    calls: Mutex<BTreeSet<ApiCall>>,
}

/// RBAC's verb of a request, as kube-apiserver derives it.
pub fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method.as_str(), named) {
        ("GET" | "HEAD", _) if watch => "watch",
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

impl CallLog {
    pub fn record(&self, call: ApiCall) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call);
    }

    /// The calls so far, sorted.
    pub fn all(&self) -> Vec<ApiCall> {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_kube_apiserver() {
        assert_eq!(verb(&Method::GET, true, false), "get");
        assert_eq!(verb(&Method::GET, false, false), "list");
        assert_eq!(verb(&Method::GET, false, true), "watch");
        assert_eq!(verb(&Method::POST, false, false), "create");
        assert_eq!(verb(&Method::POST, true, false), "create");
        assert_eq!(verb(&Method::PUT, true, false), "update");
        assert_eq!(verb(&Method::PATCH, true, false), "patch");
        assert_eq!(verb(&Method::DELETE, true, false), "delete");
        assert_eq!(verb(&Method::DELETE, false, false), "deletecollection");
    }
}
