//! `karpctl`, the project's command-line tool.
//!
//! # Model
//!
//! Every command reads plain Kubernetes manifests ([`input`]: files,
//! directories, `-`, multi-document YAML, `kind: List`), each document
//! keeping its origin so that any error names the file, the document and
//! the field (exit status 2 for input the command cannot use).
//!
//! * `plan` ([`plan`]) turns the manifests into the scheduler's
//!   `ClusterSnapshot` ([`snapshot`] over `karpenter-snapshot`, [`catalog`]),
//!   solves it in-process with
//!   the scheduler's planner or through a running scheduler (`--scheduler`),
//!   and prints the decisions ([`output`]): the stable JSON of
//!   `PLAN_CLI.md`, the same as YAML, or a table. Instance types come from
//!   `InstanceTypeCatalog` documents, `--instance-types`, a running provider
//!   (`--provider`), or else `karpenter-catalog`'s kwok-shaped one.
//!   `--example NAME` plans an embedded manifest set ([`example`]).
//! * `disrupt` ([`disrupt`]) reads the same manifests into a snapshot
//!   for disruption (NodeClaim conditions, expiry, do-not-disrupt, PDBs
//!   with `disruptionsAllowed` computed when the manifest has no status),
//!   taken at `--now` or the wall clock, asks the scheduling core's
//!   disruption planner (in-process or `--scheduler`) and prints its
//!   commands, blocked candidates and cost ([`output::disrupt_value`]).
//! * `crds` prints, writes or checks the generated CRDs ([`crds`]).
//! * `convert` upgrades older Karpenter manifests to v1 ([`mod@convert`]).
//! * `validate` checks Karpenter v1 documents against the generated CRDs
//!   with `crd-validation` ([`validate`]).
//! * `up` starts the whole product on this machine, each service its own
//!   process on loopback, and can replay a seed scenario ([`up`]).

pub mod catalog;
pub mod cli;
pub mod convert;
pub mod crds;
pub mod disrupt;
pub mod example;
pub mod input;
pub mod kinds;
pub mod output;
pub mod plan;
pub mod snapshot;
pub mod up;
pub mod validate;

pub use input::InputError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input: exit status 2.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Anything else (a service unreachable, an I/O error): exit status 1.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Other(_) => 1,
        }
    }
}
