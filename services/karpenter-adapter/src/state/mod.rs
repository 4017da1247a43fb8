//! The cluster as the adapter knows it: the watches that feed it, the
//! index one task owns (pods kept as [`pod_entry::PodEntry`]), and the
//! adapter's own memory beside it (nominations of pods onto nodes, the
//! trace each claim was created in). Pure except for [`watch`], so it is
//! tested with synthetic events.

pub mod created_claims;
pub mod index;
pub mod nominations;
pub mod pod_entry;
pub mod scheduling_times;
pub mod watch;
