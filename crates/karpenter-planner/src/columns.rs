//! A catalog's instance type requirements by label key, each distinct value
//! stored once: checking one incoming requirement against hundreds of types
//! compares it with the few distinct values and then indexes per type,
//! instead of looking the key up in every type's requirements.
//!
//! ```text
//!   key "topology.kubernetes.io/zone": values [In(a,b), In(a,b,c)]
//!                                      per type [0, 0, 1, NONE, ...]
//! ```

use std::collections::HashMap;

use crate::model::InstanceType;
use crate::requirements::Requirement;

/// Marks a type that does not define the key.
const UNDEFINED: u32 = u32::MAX;

#[derive(Debug, Default)]
pub(crate) struct Column {
    values: Vec<Requirement>,
    /// Catalog index -> index in `values`, or [`UNDEFINED`].
    of_type: Vec<u32>,
}

/// One incoming requirement checked against a column's distinct values.
pub(crate) struct ColumnCheck<'c> {
    column: &'c Column,
    compatible: Vec<bool>,
}

impl ColumnCheck<'_> {
    /// Whether the type at `index` may take the incoming requirement: it
    /// does not define the key, or its own requirement is compatible.
    pub fn allows(&self, index: usize) -> bool {
        match self.column.of_type.get(index).copied() {
            None | Some(UNDEFINED) => true,
            Some(value) => self.compatible[value as usize],
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct TypeColumns {
    by_key: HashMap<String, Column>,
}

impl TypeColumns {
    /// Columns over `instance_types` (indices into `catalog`).
    pub fn build(catalog: &[InstanceType], instance_types: &[usize]) -> TypeColumns {
        let mut by_key: HashMap<String, Column> = HashMap::new();
        for &index in instance_types {
            for requirement in catalog[index].requirements.iter() {
                let column = by_key
                    .entry(requirement.key().to_owned())
                    .or_insert_with(|| Column {
                        values: Vec::new(),
                        of_type: vec![UNDEFINED; catalog.len()],
                    });
                let value = match column.values.iter().position(|v| v == requirement) {
                    Some(value) => value,
                    None => {
                        column.values.push(requirement.clone());
                        column.values.len() - 1
                    }
                };
                column.of_type[index] = u32::try_from(value).unwrap_or(UNDEFINED);
            }
        }
        TypeColumns { by_key }
    }

    /// The check of `incoming`; `None` when no type defines its key, so it
    /// rules none out.
    pub fn check(&self, incoming: &Requirement) -> Option<ColumnCheck<'_>> {
        let column = self.by_key.get(incoming.key())?;
        Some(ColumnCheck {
            column,
            compatible: column
                .values
                .iter()
                .map(|own| own.compatible_with(incoming))
                .collect(),
        })
    }
}
