//! `kind: InstanceTypeCatalog` documents (see PLAN_CLI.md) to wire
//! instance types, with errors naming the file and document: the format
//! itself is `karpenter-catalog`'s.

use karpenter_proto::types::v1 as types;

use crate::input::{Document, InputError};

pub use karpenter_catalog::KIND;

/// The instance types of one catalog document.
pub fn instance_types(doc: &Document) -> Result<Vec<types::InstanceType>, InputError> {
    karpenter_catalog::instance_types(&doc.value).map_err(|e| doc.error(e.field, e.message))
}
