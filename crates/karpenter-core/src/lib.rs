//! The domain pieces every crate of the project shares, each with one home.
//!
//! ```text
//!   text from manifests, requests, kubelet settings
//!     "1.5Gi", "100m" ──quantity──▶ i64 in wire units ──resources──▶ Resources, allocatable
//!     "720h", "1h30m" ──duration──▶ std::time::Duration
//!   requirements (In, NotIn, Exists, Gt, ...) ──requirements──▶ Requirements (intersect, compatible)
//!   taints / tolerations ──taints──▶ does this pod tolerate this node?
//!   label selectors ──selector──▶ does this selector match these labels?
//!   kubelet resource and eviction-signal names ──kubelet──▶ one list each
//!   well-known keys ──labels──▶ karpenter.sh/nodepool, topology.kubernetes.io/zone, ...
//!   label keys and values, DNS names ──names──▶ what apimachinery says is wrong with them
//!   metadata field names ──object_meta──▶ which a client writes, which the API server sets
//!   bytes ──hash──▶ FNV-1 / FNV-1a (stable across processes); edit distance
//!   consolidateAfter, initialization, last pod event ──consolidation──▶ consolidatable now, never, or later
//!   "NodeOverlay=true,..." ──feature_gates──▶ Karpenter's gates over their defaults
//! ```
//!
//! Nothing here does I/O or knows a wire format: the scheduler, the
//! providers, the CLI, the API types and the local API server all call it,
//! so a quantity or a duration means the same thing everywhere.

#![forbid(unsafe_code)]

pub mod consolidation;
pub mod duration;
pub mod feature_gates;
pub mod hash;
pub mod kubelet;
pub mod labels;
pub mod names;
pub mod object_meta;
pub mod quantity;
pub mod rate;
pub mod repair;
pub mod requirements;
pub mod resources;
pub mod selector;
pub mod taints;
