//! The validation of built-in kinds outside the core group's pods and
//! nodes: PodDisruptionBudgets, Leases, Events (both APIs) and CRDs
//! themselves, each in its group's module.

use serde_json::Value;

use crate::resources::ResourceInfo;
use crate::validation::FieldError;

/// The rules of `res`'s strategy for `obj` (`old` on updates, `sub` the
/// subresource written), past the ObjectMeta ones.
pub fn check(
    res: &ResourceInfo,
    obj: &mut Value,
    old: Option<&Value>,
    sub: Option<&str>,
) -> Vec<FieldError> {
    if res.crd.is_some() {
        return Vec::new();
    }
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match (res.group.as_str(), res.plural.as_str()) {
        ("policy", "poddisruptionbudgets") => crate::policy::pdb(obj, sub == Some("status")),
        ("coordination.k8s.io", "leases") => crate::coordination::lease(obj),
        ("", "events") => crate::events::event(obj, old, false),
        ("events.k8s.io", "events") => crate::events::event(obj, old, true),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            crate::custom::definition_errors(&name, obj)
        }
        _ => Vec::new(),
    }
}
