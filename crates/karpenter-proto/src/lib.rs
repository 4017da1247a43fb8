//! The wire contracts of the project, compiled from `proto/karpenter/**`.
//!
//! ```text
//!   adapter ──Solve / PlanDisruption──▶ scheduler      (karpenter.scheduler.v1)
//!   adapter ──GetInstanceTypes / Create / …──▶ provider (karpenter.provider.v1)
//!   both import the shared vocabulary                  (karpenter.types.v1)
//! ```
//!
//! `karpenter.types.v1` holds what both services speak (resources,
//! requirements, taints, instance types, offerings), so the instance types
//! a provider answers go to the scheduler unchanged. In Rust each package
//! has one alias: `types` for `karpenter_proto::types::v1`, `sched` for the
//! scheduler's package and `pv` for the provider's.
//! These are the only types that cross a process boundary; [`convert`]
//! turns the shared vocabulary into `karpenter-core`'s types and back.

#![forbid(unsafe_code)]

pub mod bounds;
pub mod codec;
pub mod convert;

pub mod types {
    pub mod v1 {
        tonic::include_proto!("karpenter.types.v1");
    }
}

pub mod scheduler {
    pub mod v1 {
        tonic::include_proto!("karpenter.scheduler.v1");
    }
}

pub mod provider {
    pub mod v1 {
        tonic::include_proto!("karpenter.provider.v1");
    }
}

/// The encoded `FileDescriptorSet` of every contract, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/karpenter_descriptor.bin"));
