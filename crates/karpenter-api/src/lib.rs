//! Kubernetes API types for Karpenter v1 and the CustomResourceDefinitions generated from them.
//!
//! # Model
//!
//! Users describe *what* nodes may be launched with cluster-scoped custom resources, the same
//! ones Karpenter uses, so existing manifests work unchanged:
//!
//! * [`NodePool`] (`karpenter.sh/v1`): a template for nodes (labels, taints, requirements on
//!   instance type / zone / capacity type, a reference to a node class), resource limits, a
//!   weight, and disruption settings (consolidation policy and delay, disruption budgets,
//!   `expireAfter`).
//! * [`NodeClaim`] (`karpenter.sh/v1`): one requested node, created by the controller from a
//!   NodePool template narrowed by pending pods; its status tracks the instance
//!   (`providerID`, capacity, conditions `Launched`/`Registered`/`Initialized`).
//! * [`EC2NodeClass`] (`karpenter.k8s.aws/v1`): the AWS specifics of how to launch (subnets,
//!   security groups, AMIs, IAM role, kubelet settings, block devices, IMDS options); its status
//!   holds what those selectors resolved to.
//! * [`NodeOverlay`] (`karpenter.sh/v1alpha1`, gate `NodeOverlay`): a price, price adjustment
//!   or extra extended resources for the instance types and offerings its requirements select.
//! * [`CapacityBuffer`] (`autoscaling.x-k8s.io/v1beta1`, gate `CapacityBuffer`, namespaced):
//!   headroom kept as virtual pods made from a PodTemplate or a workload's template.
//!
//! The Rust types are the single source of truth for the CRDs: [`crds`] builds them (OpenAPI
//! schema with defaults, patterns, enums, limits and the CEL `x-kubernetes-validations` rules of
//! upstream Karpenter, printer columns, short names, categories, status and scale subresources),
//! [`crd_files`] renders them to the YAML files kept in `deploy/crds/` and
//! `charts/karpenter/crds/`.
//!
//! Always take CRDs from [`crds`] / [`crd_files`], not from kube's `NodePool::crd()`, which
//! lacks the normalization described in [`schema`].
//!
//! Deserializing a manifest applies the same defaults the API server would (`expireAfter: 720h`,
//! `consolidationPolicy: WhenEmptyOrUnderutilized`, one `10%` budget, `consolidateAfter: 0s`,
//! IMDS options), so code reading plain manifests sees what the cluster would store. Unknown
//! fields are ignored, as the API server prunes them.
//!
//! Supporting modules: [`labels`] (well-known labels, taints, annotations and the label-domain
//! rules, from `karpenter-core`), [`duration`] (Go duration fields and `Never`), [`common`] (taints, requirements,
//! conditions), [`schema`] (how the structural schema is produced).

pub mod aws;
pub mod capacitybuffer;
pub mod common;
mod crd;
pub mod duration;
pub mod ec2nodeclass;
pub mod hash;
pub mod kubelet;
pub mod node;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod repair;
pub mod schema;

/// Well-known label, annotation, taint and tag keys (their home is `karpenter-core`).
pub use karpenter_core::labels;

pub use capacitybuffer::{CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus};
pub use common::{
    CONDITION_READY, Condition, ConditionStatus, ConditionsExt, NodeClassReference,
    NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorRequirementWithMinValues,
    ResourceList, Taint, TaintEffect,
};
pub use crd::{
    CRD_OUTPUT_DIRS, CrdFileError, REGENERATE_COMMAND, crd_file_name, crd_files, crds,
    render_crd_yaml, stale_crd_files, write_crd_files,
};
pub use duration::{DurationError, GoDuration, NillableDuration};
pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus};
pub use nodepool::{
    Budget, ConsolidationPolicy, Disruption, DisruptionReason, NodePool, NodePoolSpec,
    NodePoolStatus,
};

/// Re-exported for `crd_name()`, `api_resource()` and `shortnames()`. To get a CRD, call
/// [`crds`] rather than `NodePool::crd()`: kube's own `crd()` skips this crate's schema
/// normalization (it marks optional fields `nullable` and mangles int-or-string quantities).
pub use kube::CustomResourceExt;
