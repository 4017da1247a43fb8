//! The planner behind its wire contract.
//!
//! ```text
//!   SolveRequest ──from_wire──▶ planner model::Cluster ──solve──▶ Solution ──to_wire──▶ SolveResponse
//!   PlanDisruptionRequest ──from_wire──▶ Cluster ──disruption::plan──▶ plan ──to_wire──▶ response
//!        │ bad field: InvalidField naming its path (the service answers INVALID_ARGUMENT)
//! ```
//!
//! [`requests`] runs the whole path in process: the scheduler service calls
//! it off its I/O threads, `karpctl plan` and `disrupt` call it without a
//! scheduler. Nothing here serves, listens or keeps state.

#![forbid(unsafe_code)]

pub mod from_wire;
pub mod requests;
pub mod to_wire;

pub use requests::{
    plan_disruption_request, plan_disruption_request_until, solve_request, solve_request_until,
};
