//! The NodeClaim controllers (Karpenter's `pkg/controllers/nodeclaim`):
//! each claim's lifecycle from launch to finalization, its disruption
//! conditions (`Drifted`, `Consolidatable`), its last pod event, expiry,
//! and the garbage collection of claims and instances that lost each other.

pub mod consistency;
pub mod disruption;
pub mod expiration;
pub mod gc;
pub mod lifecycle;
pub mod pod_events;
