//! The planning engine: Karpenter's provisioning and disruption decisions
//! as pure functions over the planner's own model of a cluster.
//!
//! ```text
//!   model::Cluster (built by the caller; the scheduler service builds it from its wire request)
//!        │
//!        ├──solve::solve──▶ Solution     pods ordered (CPU, memory desc) and placed on
//!        │                                 1. existing / in-flight nodes
//!        │                                 2. node claims planned in this round
//!        │                                 3. a new claim from the first pool that fits
//!        │                               preferences relaxed one at a time on failure
//!        │
//!        └──disruption::plan──▶ DisruptionPlan   expiration, then rounds of emptiness, drift,
//!                                                multi- and single-node consolidation
//! ```
//!
//! Nothing here reads a clock, a file or the network, nor knows a wire
//! format: the same cluster gives the same answer, byte for byte. The
//! requirement algebra, resources, taints and selectors it reasons with are
//! `karpenter-core`'s.

#![forbid(unsafe_code)]

mod columns;
pub mod cron;
mod daemons;
pub mod disruption;
pub mod hostports;
pub mod model;
mod pods;
pub mod solve;
pub mod topology;
pub mod volumes;

use karpenter_core::{labels, requirements, resources, selector, taints};
