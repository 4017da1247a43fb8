//! Helpers over single Kubernetes objects, the equivalent of Karpenter's
//! `pkg/utils`: a claim's conditions, times and wire form ([`claim`]),
//! condition bookkeeping ([`conditions`]), guarded writes ([`patch`]),
//! finalizers ([`finalizers`]), and the disrupted taint ([`disrupted`]).

pub mod claim;
pub mod conditions;
pub mod disrupted;
pub mod finalizers;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod patch;
