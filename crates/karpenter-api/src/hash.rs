//! The NodePool hash Karpenter writes as `karpenter.sh/nodepool-hash`
//! (version [`NODE_POOL_HASH_VERSION`]), computed exactly as upstream does,
//! so nodes launched by Karpenter and by this project agree on drift.
//!
//! Upstream hashes `spec.template` with `hashstructure` v2 (format 2, slices
//! as sets, zero values skipped, nil pointers as zero) over FNV-1 64:
//!
//! ```text
//!   struct  = fnv(type name) then, per non-zero field f:  h = finish(h ^ ordered(fnv(f.name), hash(f)))
//!   map     = finish(XOR of ordered(fnv(key), fnv(value)))
//!   slice   = XOR of element hashes (a set: order does not matter)
//!   string  = fnv(bytes);  integer = fnv(little-endian bytes)
//!   ordered(a, b) = fnv(a ‖ b as little-endian u64s);  finish(a) = fnv(a as little-endian u64)
//! ```
//!
//! What is hashed: the template's labels and annotations, taints, startup
//! taints, node class reference, terminationGracePeriod and expireAfter
//! (not its requirements, nor anything outside the template).

use std::collections::BTreeMap;

use crate::common::{NodeClassReference, Taint};
use crate::duration::NillableDuration;
use crate::nodepool::NodeClaimTemplate;

/// The hash scheme version written as `karpenter.sh/nodepool-hash-version`.
pub const NODE_POOL_HASH_VERSION: &str = "v3";

use karpenter_core::hash::fnv1_64 as fnv1;

fn text(s: &str) -> u64 {
    fnv1(s.as_bytes())
}

fn int(v: i64) -> u64 {
    fnv1(&v.to_le_bytes())
}

fn ordered(a: u64, b: u64) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    fnv1(&bytes)
}

fn finish(a: u64) -> u64 {
    fnv1(&a.to_le_bytes())
}

/// A struct being hashed: its type name, then its non-zero fields in
/// declaration order.
struct Struct(u64);

impl Struct {
    fn new(type_name: &str) -> Self {
        Struct(text(type_name))
    }

    /// A field; `None` is a zero value, which is skipped.
    fn field(mut self, name: &str, value: Option<u64>) -> Self {
        if let Some(value) = value {
            self.0 = finish(self.0 ^ ordered(text(name), value));
        }
        self
    }

    fn done(self) -> u64 {
        self.0
    }
}

fn non_empty(s: &str) -> Option<u64> {
    (!s.is_empty()).then(|| text(s))
}

fn map(map: &BTreeMap<String, String>) -> Option<u64> {
    (!map.is_empty()).then(|| {
        finish(
            map.iter()
                .fold(0, |h, (k, v)| h ^ ordered(text(k), text(v))),
        )
    })
}

fn set<T>(items: &[T], hash: impl Fn(&T) -> u64) -> Option<u64> {
    (!items.is_empty()).then(|| items.iter().fold(0, |h, item| h ^ hash(item)))
}

/// Go's `time.Time.MarshalBinary` for a UTC time: version 1, seconds since
/// year 1 and nanoseconds (big-endian), offset -1 (UTC).
fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> u64 {
    const SECONDS_FROM_YEAR_1_TO_1970: i64 = 62_135_596_800;
    let mut bytes = Vec::with_capacity(15);
    bytes.push(1u8);
    bytes.extend_from_slice(&(t.0.as_second() + SECONDS_FROM_YEAR_1_TO_1970).to_be_bytes());
    bytes.extend_from_slice(&t.0.subsec_nanosecond().to_be_bytes());
    bytes.extend_from_slice(&(-1i16).to_be_bytes());
    let inner = fnv1(&bytes);
    // metav1.Time is a struct embedding time.Time.
    Struct::new("Time").field("Time", Some(inner)).done()
}

fn taint(t: &Taint) -> u64 {
    Struct::new("Taint")
        .field("Key", non_empty(&t.key))
        .field("Value", t.value.as_deref().and_then(non_empty))
        .field("Effect", non_empty(t.effect.as_str()))
        .field("TimeAdded", t.time_added.as_ref().map(time))
        .done()
}

fn class_ref(r: &NodeClassReference) -> u64 {
    Struct::new("NodeClassReference")
        .field("Kind", non_empty(&r.kind))
        .field("Name", non_empty(&r.name))
        .field("Group", non_empty(&r.group))
        .done()
}

fn nanos(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Upstream's `NillableDuration`: `Never` still counts as set (its raw
/// text is), with no duration inside.
fn nillable(d: &NillableDuration) -> u64 {
    Struct::new("NillableDuration")
        // A pointer: set (even to zero) is hashed, unset is skipped.
        .field("Duration", d.as_std().map(nanos).map(int))
        .done()
}

/// `karpenter.sh/nodepool-hash` of a NodePool template.
pub fn template_hash(template: &NodeClaimTemplate) -> String {
    let meta = &template.metadata;
    let object_meta = (!meta.labels.is_empty() || !meta.annotations.is_empty()).then(|| {
        Struct::new("ObjectMeta")
            .field("Labels", map(&meta.labels))
            .field("Annotations", map(&meta.annotations))
            .done()
    });
    let spec = &template.spec;
    let tgp = spec.termination_grace_period.as_ref().map(|d| {
        Struct::new("Duration")
            .field(
                "Duration",
                Some(nanos(d.as_std())).filter(|n| *n != 0).map(int),
            )
            .done()
    });
    let spec_hash = Struct::new("NodeClaimTemplateSpec")
        .field("Taints", set(&spec.taints, taint))
        .field("StartupTaints", set(&spec.startup_taints, taint))
        .field("NodeClassRef", Some(class_ref(&spec.node_class_ref)))
        .field("TerminationGracePeriod", tgp)
        .field("ExpireAfter", Some(nillable(&spec.expire_after)))
        .done();
    Struct::new("NodeClaimTemplate")
        .field("ObjectMeta", object_meta)
        .field("Spec", Some(spec_hash))
        .done()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodepool::tests::pool_with as pool;

    fn spec(extra: serde_json::Value) -> serde_json::Value {
        let mut spec = serde_json::json!({
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
            "expireAfter": "720h"
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                spec.insert(k.clone(), v.clone());
            }
        }
        spec
    }

    // The expected values come from upstream's hashstructure v2 run on the
    // same templates (Go types with Karpenter's type and field names).
    #[test]
    fn matches_upstream_byte_for_byte() {
        let minimal = pool(serde_json::json!({"spec": spec(serde_json::json!({}))}));
        assert_eq!(template_hash(&minimal.spec.template), "6821555240594823858");
        let never =
            pool(serde_json::json!({"spec": spec(serde_json::json!({"expireAfter": "Never"}))}));
        assert_eq!(template_hash(&never.spec.template), "9594794698745994005");
        let labelled = pool(serde_json::json!({
            "metadata": {"labels": {"team": "b"}},
            "spec": spec(serde_json::json!({}))
        }));
        assert_eq!(
            template_hash(&labelled.spec.template),
            "2206156644763247185"
        );
        let full = pool(serde_json::json!({
            "metadata": {"labels": {"team": "a", "env": "prod"}, "annotations": {"example.com/owner": "platform"}},
            "spec": spec(serde_json::json!({
                "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                           {"key": "spot", "effect": "PreferNoSchedule"}],
                "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}],
                "terminationGracePeriod": "48h"
            }))
        }));
        assert_eq!(template_hash(&full.spec.template), "6692250839696967306");
    }

    #[test]
    fn requirements_and_taint_order_do_not_change_it() {
        let a = pool(serde_json::json!({"spec": spec(serde_json::json!({
            "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]
        }))}));
        let b = pool(serde_json::json!({"spec": spec(serde_json::json!({
            "taints": [{"key": "b", "effect": "NoExecute"}, {"key": "a", "effect": "NoSchedule"}],
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]
        }))}));
        assert_eq!(
            template_hash(&a.spec.template),
            template_hash(&b.spec.template)
        );
    }
}
