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
//! The crate is laid out as its readers look for things:
//!
//! - [`state`]: the cluster as the adapter knows it: the watches that feed
//!   one index (owned by one task, read as snapshots), pod entries,
//!   nominations and claim traces; pure, tested with synthetic events.
//! - [`objects`]: helpers over single objects (a claim's conditions and
//!   times, guarded writes, finalizers, the disrupted taint), Karpenter's
//!   `pkg/utils`.
//! - [`scheduling`]: the pools that provision, their instance types and the
//!   live `ClusterSnapshot`, the one place Solve and PlanDisruption requests
//!   are built from.
//! - [`controllers`]: one module per Karpenter controller, grouped as
//!   upstream's `pkg/controllers` (provisioning, disruption,
//!   `nodeclaim/{lifecycle, disruption, gc, expiration, pod_events}`,
//!   `node/{termination, health}`, nodepool, nodeclass, interruption), with
//!   the runner and the shared context beside them; each decides from the
//!   objects as they are, so a restart resumes where the last process
//!   stopped.
//! - [`clients`]: the scheduler and provider over gRPC, with deadlines and
//!   retries, carrying the trace context.
//! - [`run`]: the wiring, with [`leader`] election and [`settings`] named as
//!   Karpenter's.

#![forbid(unsafe_code)]

pub mod clients;
pub mod controllers;
pub mod error;
pub mod events;
pub mod leader;
pub mod metrics;
pub mod objects;
pub mod run;
pub mod scheduling;
pub mod settings;
pub mod state;
