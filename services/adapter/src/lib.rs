//! The adapter: the only service that talks to Kubernetes. It watches the
//! cluster into one index, hands the scheduler snapshots of it, and carries
//! the plans out through the cloud provider, with Karpenter v1's
//! controllers and their semantics (objects, conditions, events, metrics).
//!
//! ```text
//!                   ┌──────────── adapter ─────────────────────────────────────────┐
//!   API server ──watch──▶ watch ──▶ index (one owner task) ──snapshots──▶ controllers │
//!        ▲          │                                                   │           │
//!        │          │   provisioning ── Solve ─────────────────────────────▶ scheduler
//!        └─ writes ─┤   lifecycle, termination, gc ── Create/Delete/Get/List ──▶ provider
//!                   │   nodepool, nodeclass ── ResolveNodeClass/FinalizeNodeClass ──▶ provider
//!                   └── leader (Lease) · events · /metrics /healthz /readyz ──────────┘
//! ```
//!
//! - [`index`] and [`watch`]: the cluster as the adapter knows it, pure and
//!   tested with synthetic events; [`live`] turns it into the scheduler's
//!   `ClusterSnapshot` (through `karpenter-snapshot`).
//! - [`controllers`]: one module per Karpenter controller, each deciding
//!   from the objects as they are, so a restart resumes where the last
//!   process stopped.
//! - [`clients`]: the scheduler and provider over gRPC, with deadlines and
//!   retries, carrying the trace context; [`patch`]: API writes guarded by
//!   resource versions; [`claim_traces`]: a claim's launch continues the
//!   trace that created it.
//! - [`run`]: the wiring, with [`leader`] election and [`settings`] named as
//!   Karpenter's.

#![forbid(unsafe_code)]

pub mod claim;
pub mod claim_traces;
pub mod clients;
pub mod conditions;
pub mod controllers;
pub mod disrupted;
pub mod error;
pub mod events;
pub mod index;
pub mod leader;
pub mod live;
pub mod metrics;
pub mod nominations;
pub mod patch;
pub mod pod_entry;
pub mod run;
pub mod settings;
pub mod watch;
