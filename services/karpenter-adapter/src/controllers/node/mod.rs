//! The Node controllers (Karpenter's `pkg/controllers/node`): termination
//! (taint, drain, wait for volumes, delete the claim), reboot (the repair
//! action that reboots in place) and health (the legacy repair controller,
//! `--legacy-node-repair`; otherwise repair is a disruption method the
//! scheduler plans).

pub mod health;
pub mod reboot;
pub mod termination;
