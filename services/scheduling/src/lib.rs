//! The scheduling core: Karpenter's provisioning and disruption decisions as
//! pure functions over a cluster snapshot.
//!
//! ```text
//!   proto ClusterSnapshot ──model::Cluster::from_snapshot──▶ Cluster
//!                                                              │
//!                     solve::solve ◀───────────────────────────┘
//!                        │  pods ordered (CPU, memory desc) and placed on
//!                        │    1. existing / in-flight nodes
//!                        │    2. node claims planned in this round
//!                        │    3. a new claim from the first pool that fits
//!                        │  preferences relaxed one at a time on failure
//!                        ▼
//!                     Solution ──wire──▶ proto SolveResponse
//! ```
//!
//! Nothing here reads a clock, a file or the network: the same snapshot gives
//! the same answer, byte for byte.

#![forbid(unsafe_code)]

pub mod disruption;
pub mod hostports;
pub mod model;
pub mod solve;
pub mod topology;
pub mod wire;

pub use karpenter_core::{labels, requirements, resources, selector, taints};
