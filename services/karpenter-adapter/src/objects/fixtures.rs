//! Objects for the adapter's unit tests: a NodeClaim is written as what a
//! test cares about, laid over a minimal valid claim.

use karpenter_api::NodeClaim;
use serde_json::{Value, json};

/// Lays `from` over `into` as a JSON merge patch does, except that `null`
/// is kept as a value.
pub(crate) fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// A NodeClaim named `c` of provider-kwok's default node class, with
/// `fields` laid over it.
pub(crate) fn node_claim(fields: Value) -> NodeClaim {
    let mut claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c"},
        "spec": {"requirements": [],
                 "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}
    });
    merge(&mut claim, fields);
    serde_json::from_value(claim).unwrap_or_else(|e| panic!("test claim: {e}"))
}
