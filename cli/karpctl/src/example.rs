//! Manifest sets embedded in the binary (`karpctl plan --example NAME`,
//! `karpctl disrupt --example NAME`), kept under `deploy/examples/` in the
//! repository.

use crate::input::{self, Document, InputError, Source};

/// Names accepted by `--example`.
pub const NAMES: &[&str] = &["seed-001", "consolidation"];

/// The files of an example: (path shown in messages, text).
pub fn files(name: &str) -> Option<Vec<(&'static str, &'static str)>> {
    match name {
        "seed-001" => Some(vec![
            (
                "deploy/examples/seed-001/nodes.yaml",
                include_str!("../../../deploy/examples/seed-001/nodes.yaml"),
            ),
            (
                "deploy/examples/seed-001/daemonsets.yaml",
                include_str!("../../../deploy/examples/seed-001/daemonsets.yaml"),
            ),
            (
                "deploy/examples/seed-001/nodepool.yaml",
                include_str!("../../../deploy/examples/seed-001/nodepool.yaml"),
            ),
            (
                "deploy/examples/seed-001/catalog.yaml",
                include_str!("../../../deploy/examples/seed-001/catalog.yaml"),
            ),
            (
                "deploy/examples/seed-001/app.yaml",
                include_str!("../../../deploy/examples/seed-001/app.yaml"),
            ),
        ]),
        "consolidation" => Some(vec![
            (
                "deploy/examples/consolidation/catalog.yaml",
                include_str!("../../../deploy/examples/consolidation/catalog.yaml"),
            ),
            (
                "deploy/examples/consolidation/nodepool.yaml",
                include_str!("../../../deploy/examples/consolidation/nodepool.yaml"),
            ),
            (
                "deploy/examples/consolidation/nodes.yaml",
                include_str!("../../../deploy/examples/consolidation/nodes.yaml"),
            ),
            (
                "deploy/examples/consolidation/pods.yaml",
                include_str!("../../../deploy/examples/consolidation/pods.yaml"),
            ),
        ]),
        _ => None,
    }
}

/// The parsed documents of an example.
pub fn documents(name: &str) -> Result<Vec<Document>, InputError> {
    let files = files(name).ok_or_else(|| {
        InputError::file(
            "--example",
            format!("unknown example {name:?} (known: {})", NAMES.join(", ")),
        )
    })?;
    let mut docs = Vec::new();
    for (path, text) in files {
        docs.extend(input::parse_source(&Source {
            name: path.to_string(),
            text: text.to_string(),
        })?);
    }
    Ok(docs)
}
