//! Instance-type catalogs, for whoever needs instance types without a cloud:
//! `karpctl plan` (from manifests or `--instance-types`) and provider-kwok.
//!
//! ```text
//!   kind: InstanceTypeCatalog (YAML / JSON) ──document::instance_types──▶ Vec<pb::InstanceType>
//!   file text (several documents)           ──document::load──────────▶ Vec<pb::InstanceType>
//!   nothing given                           ──kwok::instance_types────▶ the built-in kwok-shaped catalog
//! ```
//!
//! The document format is a public contract (`PLAN_CLI.md`): names, capacity
//! and overhead as Kubernetes quantities, labels (a string or a list), and
//! offerings (zone, capacity type, price, availability). Every error names
//! the field it is about (`instanceTypes[2].offerings[0].price`).

#![forbid(unsafe_code)]

pub mod document;
pub mod kwok;

pub use document::{CatalogError, KIND, instance_types, load};
