//! Building, rendering and writing the CustomResourceDefinitions.

use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde_json::{Value, json};

use crate::capacitybuffer::{self, CapacityBuffer};
use crate::ec2nodeclass::{self, EC2NodeClass};
use crate::nodeclaim::{self, NodeClaim};
use crate::nodeoverlay::{self, NodeOverlay};
use crate::nodepool::{self, NodePool};
use crate::schema::structural_schema_for;

/// Directories, relative to the repository root, that hold the generated CRD files.
pub const CRD_OUTPUT_DIRS: &[&str] = &["deploy/crds", "charts/karpenter/crds"];

/// The command that regenerates the CRD files.
pub const REGENERATE_COMMAND: &str = "cargo run -p karpctl -- crds --write";

/// The CRDs of NodePool, NodeClaim, NodeOverlay, CapacityBuffer and EC2NodeClass, in that order.
///
/// # Panics
/// Only if this crate's own types produce a schema that is not a valid `JSONSchemaProps`, which
/// the crate's tests rule out.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        build::<NodePool>(true, nodepool::PRINTER_COLUMNS),
        build::<NodeClaim>(true, nodeclaim::PRINTER_COLUMNS),
        build::<NodeOverlay>(true, nodeoverlay::PRINTER_COLUMNS),
        also_served_as(
            build::<CapacityBuffer>(true, capacitybuffer::PRINTER_COLUMNS),
            "v1alpha1",
        ),
        build::<EC2NodeClass>(false, ec2nodeclass::PRINTER_COLUMNS),
    ]
}

/// A column `kubectl get` prints for a kind (`additionalPrinterColumns`).
/// Each kind lists its columns beside its type; the ones several kinds
/// share are written once here.
pub(crate) struct Column {
    name: &'static str,
    type_: &'static str,
    json_path: &'static str,
    /// Shown only with `-o wide`.
    wide: bool,
}

impl Column {
    /// The object's `Ready` condition.
    pub(crate) const READY: Column =
        Column::text("Ready", ".status.conditions[?(@.type==\"Ready\")].status");
    /// The object's age.
    pub(crate) const AGE: Column = Column::new("Age", "date", ".metadata.creationTimestamp");

    /// A column of text.
    pub(crate) const fn text(name: &'static str, json_path: &'static str) -> Self {
        Column::new(name, "string", json_path)
    }

    /// A column of whole numbers.
    pub(crate) const fn integer(name: &'static str, json_path: &'static str) -> Self {
        Column::new(name, "integer", json_path)
    }

    const fn new(name: &'static str, type_: &'static str, json_path: &'static str) -> Self {
        Column {
            name,
            type_,
            json_path,
            wide: false,
        }
    }

    /// The same column, shown only with `-o wide`.
    pub(crate) const fn wide(self) -> Self {
        Column { wide: true, ..self }
    }

    fn definition(&self) -> CustomResourceColumnDefinition {
        CustomResourceColumnDefinition {
            name: self.name.to_owned(),
            type_: self.type_.to_owned(),
            json_path: self.json_path.to_owned(),
            priority: self.wide.then_some(1),
            ..Default::default()
        }
    }
}

/// The CRD also served at an older `version` of the same schema (not
/// stored: objects written at it are stored at the CRD's version). A
/// CapacityBuffer written as Karpenter v1.15's documentation and Cluster
/// Autoscaler's older releases write it, `autoscaling.x-k8s.io/v1alpha1`,
/// applies as it is.
fn also_served_as(mut crd: CustomResourceDefinition, version: &str) -> CustomResourceDefinition {
    if let Some(stored) = crd.spec.versions.first() {
        let mut older = stored.clone();
        older.name = version.to_owned();
        older.storage = false;
        crd.spec.versions.push(older);
    }
    crd
}

fn build<K: CustomResourceExt + JsonSchema>(
    spec_required: bool,
    columns: &[Column],
) -> CustomResourceDefinition {
    let mut crd = K::crd();
    let mut schema = structural_schema_for::<K>();
    finish_root(&mut schema, spec_required);
    let props: JSONSchemaProps = serde_json::from_value(schema).unwrap_or_else(|e| {
        panic!(
            "schema of {} is not a valid JSONSchemaProps: {e}",
            K::crd_name()
        )
    });
    crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
    for version in &mut crd.spec.versions {
        if let Some(validation) = version.schema.as_mut() {
            validation.open_api_v3_schema = Some(props.clone());
        }
        version.additional_printer_columns = Some(columns.iter().map(Column::definition).collect());
    }
    crd
}

/// Adds the standard top-level fields every Kubernetes object schema has.
fn finish_root(schema: &mut Value, spec_required: bool) {
    let Some(root) = schema.as_object_mut() else {
        return;
    };
    let props = root.entry("properties").or_insert_with(|| json!({}));
    if let Some(props) = props.as_object_mut() {
        props.insert(
            "apiVersion".into(),
            json!({
                "description": "APIVersion is the versioned schema of this object (group/version). Servers convert recognized versions to the latest internal value and may reject unrecognized ones.",
                "type": "string",
            }),
        );
        props.insert(
            "kind".into(),
            json!({
                "description": "Kind is the REST resource this object represents, in CamelCase. Servers may infer it from the endpoint the request was sent to. It cannot be updated.",
                "type": "string",
            }),
        );
        props.insert("metadata".into(), json!({ "type": "object" }));
    }
    if spec_required {
        root.insert("required".into(), json!(["spec"]));
    } else {
        root.remove("required");
    }
    root.insert("type".into(), json!("object"));
}

/// The file name Karpenter uses for a CRD: `<group>_<plural>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// Renders a CRD as a YAML document with a "generated" header.
///
/// # Panics
/// Only if YAML serialization of the CRD fails, which does not happen for these types.
pub fn render_crd_yaml(crd: &CustomResourceDefinition) -> String {
    let name = &crd.metadata.name;
    let mut value = serde_json::to_value(crd)
        .unwrap_or_else(|e| panic!("CRD {name:?} cannot be serialized: {e}"));
    integral_bounds(&mut value);
    let body = serde_yaml::to_string(&value)
        .unwrap_or_else(|e| panic!("CRD {name:?} cannot be rendered as YAML: {e}"));
    format!(
        "# Generated by the karpenter-api crate from its Rust types. Do not edit.\n# Regenerate with: {REGENERATE_COMMAND}\n---\n{body}"
    )
}

/// Writes whole-number `minimum`/`maximum` bounds as integers (`JSONSchemaProps` stores them as
/// floats, which would render as `1.0`).
fn integral_bounds(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if let ("minimum" | "maximum", Some(f)) = (key.as_str(), v.as_f64())
                    && f.fract() == 0.0
                    && f.abs() < 9.0e15
                {
                    // Exact: the value is a whole number well inside i64's range.
                    *v = Value::from(f as i64);
                } else {
                    integral_bounds(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_bounds),
        _ => {}
    }
}

/// `(file name, YAML)` for every CRD, e.g. `("karpenter.sh_nodepools.yaml", "...")`.
pub fn crd_files() -> Vec<(String, String)> {
    crds()
        .iter()
        .map(|crd| (crd_file_name(crd), render_crd_yaml(crd)))
        .collect()
}

/// Writes every CRD file into each of [`CRD_OUTPUT_DIRS`] under `repo_root`, creating the
/// directories. Returns the paths written.
///
/// # Errors
/// Returns the first I/O error, with the path it happened on.
pub fn write_crd_files(repo_root: &Path) -> Result<Vec<PathBuf>, CrdFileError> {
    let files = crd_files();
    let mut written = Vec::new();
    for dir in CRD_OUTPUT_DIRS {
        let dir = repo_root.join(dir);
        std::fs::create_dir_all(&dir).map_err(|source| CrdFileError {
            path: dir.clone(),
            source,
        })?;
        for (name, yaml) in &files {
            let path = dir.join(name);
            std::fs::write(&path, yaml).map_err(|source| CrdFileError {
                path: path.clone(),
                source,
            })?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Compares the CRD files under `repo_root` with freshly generated ones.
///
/// Returns the paths that are missing or differ (empty when everything is up to date).
pub fn stale_crd_files(repo_root: &Path) -> Vec<PathBuf> {
    let files = crd_files();
    let mut stale = Vec::new();
    for dir in CRD_OUTPUT_DIRS {
        for (name, yaml) in &files {
            let path = repo_root.join(dir).join(name);
            match std::fs::read_to_string(&path) {
                Ok(on_disk) if on_disk == *yaml => {}
                _ => stale.push(path),
            }
        }
    }
    stale
}

/// An I/O error while writing a CRD file.
#[derive(Debug, thiserror::Error)]
pub struct CrdFileError {
    /// The file or directory involved.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: std::io::Error,
}

impl fmt::Display for CrdFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.source)
    }
}
