//! `karpctl validate`, and the field checks `plan` and `disrupt` share:
//! Karpenter documents against the generated CRDs, as the API server would
//! check them (defaults, OpenAPI schema, CEL rules), and the fields of
//! built-in kinds against the schema of their API types, for what strict
//! field validation refuses.

use std::cell::RefCell;
use std::collections::HashMap;

use crd_validation::{CrdValidator, StructuralSchema, ValidateOptions};
use serde_json::Value;

use crate::CliError;
use crate::input::{Document, InputError};

/// The validators of every generated CRD, with each CRD's JSON (for
/// did-you-mean suggestions), and the schemas of the built-in kinds met so
/// far (compiled on first use: a Pod's inlined schema is large).
pub struct Validators {
    crds: Vec<(CrdValidator, Value)>,
    builtins: RefCell<HashMap<(String, String), Option<BuiltinSchema>>>,
}

/// A built-in kind's schema, compiled and as JSON (for suggestions).
struct BuiltinSchema {
    compiled: StructuralSchema,
    json: Value,
}

/// CapacityBuffer's API group (its CRD serves `v1beta1` and `v1alpha1`).
const BUFFER_GROUP: &str = "autoscaling.x-k8s.io";

/// What the validators found in one document.
#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// Fields the schema does not know, each with its message (`unknown
    /// field`, with a did-you-mean hint when a known field is near).
    pub unknown_fields: Vec<(String, String)>,
    /// Not a Karpenter document: only its fields were looked at (built-in
    /// kinds), or nothing at all (other kinds).
    pub skipped: bool,
}

/// kubectl's `--validate` values (`true` and `false` are its older spellings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FieldValidation {
    #[value(alias = "true")]
    Strict,
    Warn,
    #[value(alias = "false")]
    Ignore,
}

impl Validators {
    pub fn new() -> anyhow::Result<Self> {
        let mut crds = Vec::new();
        for crd in karpenter_api::crds() {
            let json = serde_json::to_value(&crd)?;
            let validator = CrdValidator::new(&json).map_err(|e| {
                anyhow::anyhow!("compiling the generated CRD {:?}: {e}", crd.metadata.name)
            })?;
            crds.push((validator, json));
        }
        Ok(Validators {
            crds,
            builtins: RefCell::default(),
        })
    }

    /// Validates one document.
    pub fn check(&self, doc: &Document) -> Report {
        let (group, version, kind) = (doc.group(), doc.version(), doc.kind());
        if !matches!(group, "karpenter.sh" | "karpenter.k8s.aws" | BUFFER_GROUP) {
            return Report {
                unknown_fields: self.builtin_unknown_fields(doc),
                skipped: true,
                ..Report::default()
            };
        }
        let mut report = Report::default();
        let Some((validator, json)) = self
            .crds
            .iter()
            .find(|(v, _)| v.handles(doc.api_version(), kind))
        else {
            // v1 and NodeOverlay's v1alpha1 are served; Karpenter's older
            // versions (v1alpha5, v1beta1, the AWS group's v1alpha1) are not.
            let served = version == "v1"
                || (group, version) == ("karpenter.sh", "v1alpha1")
                || group == BUFFER_GROUP;
            let error = if served {
                kind_error(doc)
                    .unwrap_or_else(|| format!("kind: {} has no kind {kind:?}", doc.api_version()))
            } else {
                format!(
                    "apiVersion: {}/{version} is no longer served: convert first with `karpctl convert -f {}`",
                    group, doc.origin.file
                )
            };
            report.errors.push(error);
            return report;
        };
        let mut object = doc.value.clone();
        let options = ValidateOptions {
            rules_despite_errors: true,
            ratcheting: false,
        };
        match validator.validate_with(version, &mut object, None, &options) {
            Err(e) => report.errors.push(e.to_string()),
            Ok(outcome) => {
                for v in &outcome.violations {
                    report.errors.push(v.to_string());
                }
                let schema = json.pointer("/spec/versions/0/schema/openAPIV3Schema");
                report.unknown_fields = with_hints(schema, outcome.unknown_fields);
                report.warnings.extend(outcome.warnings.iter().cloned());
            }
        }
        report
    }

    /// The unknown fields of a document of a built-in kind planning reads
    /// (none for other kinds: they are skipped, not judged).
    fn builtin_unknown_fields(&self, doc: &Document) -> Vec<(String, String)> {
        if doc.version() != "v1" {
            return Vec::new();
        }
        let key = (doc.group().to_string(), doc.kind().to_string());
        let mut builtins = self.builtins.borrow_mut();
        let entry = builtins.entry(key).or_insert_with(|| {
            let json = builtin_schema(doc.group(), doc.kind())?;
            // The derived schemas are plain OpenAPI; one that did not
            // compile would be a bug of ours, not of the input: skip it.
            let compiled = StructuralSchema::new(&json).ok()?;
            Some(BuiltinSchema { compiled, json })
        });
        match entry {
            Some(schema) => with_hints(
                Some(&schema.json),
                schema.compiled.unknown_fields(&doc.value),
            ),
            None => Vec::new(),
        }
    }
}

/// What to do with one document's unknown fields under `mode`: the errors
/// (`strict`) or warnings (`warn`) to report, each `field: message`.
pub fn judge_unknown_fields(
    report: &Report,
    mode: FieldValidation,
) -> (Vec<(String, String)>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for (field, message) in &report.unknown_fields {
        match mode {
            FieldValidation::Strict => errors.push((
                field.clone(),
                format!("{message} (--validate=warn accepts it)"),
            )),
            FieldValidation::Warn => {
                warnings.push(format!("{field}: {message}, ignored by the API server"))
            }
            FieldValidation::Ignore => {}
        }
    }
    (errors, warnings)
}

/// `karpctl validate`: every document's report, then a summary line; the
/// exit status is 2 when a document is invalid. Karpenter documents are
/// checked in full; built-in kinds only for their kind and fields, and
/// counted as skipped when those are fine.
pub fn run(
    docs: &[Document],
    mode: FieldValidation,
    files: &[std::path::PathBuf],
) -> Result<(String, u8), CliError> {
    let validators = Validators::new()?;
    let (mut valid, mut invalid, mut skipped) = (0, 0, 0);
    let mut text = String::new();
    for doc in docs {
        let report = validators.check(doc);
        let (unknown, warned) = judge_unknown_fields(&report, mode);
        let mut errors = report.errors;
        if report.skipped {
            errors.extend(kind_error(doc));
        }
        errors.extend(unknown.into_iter().map(|(f, m)| format!("{f}: {m}")));
        for w in report.warnings.iter().chain(&warned) {
            text.push_str(&format!("warning: {}: {w}\n", doc.origin));
        }
        for e in &errors {
            text.push_str(&format!("{}: {e}\n", doc.origin));
        }
        match (errors.is_empty(), report.skipped) {
            (false, _) => invalid += 1,
            (true, true) => skipped += 1,
            (true, false) => valid += 1,
        }
    }
    if valid + invalid == 0 {
        return Err(InputError::file(
            files
                .first()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            "no karpenter.sh or karpenter.k8s.aws documents to validate",
        )
        .into());
    }
    let skipped = if skipped > 0 {
        format!(", {skipped} skipped (not Karpenter)")
    } else {
        String::new()
    };
    text.push_str(&format!(
        "{valid} document{} valid, {invalid} invalid{skipped}\n",
        if valid == 1 { "" } else { "s" }
    ));
    // Invalid manifests are bad input, as for plan and disrupt.
    Ok((text, if invalid > 0 { 2 } else { 0 }))
}

/// Why a document that is not Karpenter's cannot be applied by its kind:
/// none, or an unknown kind of an API group `kubectl apply` knows.
fn kind_error(doc: &Document) -> Option<String> {
    if doc.kind().is_empty() {
        return Some("kind: is required".to_string());
    }
    crate::kinds::unknown(doc.group(), doc.api_version(), doc.kind()).map(|r| format!("kind: {r}"))
}

/// Each unknown field with its message and, when a known sibling is near,
/// a did-you-mean hint.
fn with_hints(schema: Option<&Value>, fields: Vec<String>) -> Vec<(String, String)> {
    fields
        .into_iter()
        .map(|field| {
            let hint = schema
                .and_then(|s| suggestion(s, &field))
                .map(|s| format!(" (did you mean {s:?}?)"))
                .unwrap_or_default();
            (field, format!("unknown field{hint}"))
        })
        .collect()
}

/// The schema of a built-in kind `plan` and `disrupt` read, derived from
/// the Kubernetes API types with every subschema inlined.
fn builtin_schema(group: &str, kind: &str) -> Option<Value> {
    use k8s_openapi::api::{
        apps::v1 as apps, batch::v1 as batch, core::v1 as core, policy::v1 as policy,
        scheduling::v1 as scheduling, storage::v1 as storage,
    };
    fn schema_of<T: schemars::JsonSchema>() -> Value {
        schemars::generate::SchemaSettings::openapi3()
            .with(|s| s.inline_subschemas = true)
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value()
    }
    Some(match (group, kind) {
        ("", "Pod") => schema_of::<core::Pod>(),
        ("", "Node") => schema_of::<core::Node>(),
        ("", "PersistentVolume") => schema_of::<core::PersistentVolume>(),
        ("", "PersistentVolumeClaim") => schema_of::<core::PersistentVolumeClaim>(),
        ("", "ReplicationController") => schema_of::<core::ReplicationController>(),
        ("apps", "Deployment") => schema_of::<apps::Deployment>(),
        ("apps", "ReplicaSet") => schema_of::<apps::ReplicaSet>(),
        ("apps", "StatefulSet") => schema_of::<apps::StatefulSet>(),
        ("apps", "DaemonSet") => schema_of::<apps::DaemonSet>(),
        ("batch", "Job") => schema_of::<batch::Job>(),
        ("batch", "CronJob") => schema_of::<batch::CronJob>(),
        ("policy", "PodDisruptionBudget") => schema_of::<policy::PodDisruptionBudget>(),
        ("scheduling.k8s.io", "PriorityClass") => schema_of::<scheduling::PriorityClass>(),
        ("storage.k8s.io", "StorageClass") => schema_of::<storage::StorageClass>(),
        ("storage.k8s.io", "CSINode") => schema_of::<storage::CSINode>(),
        _ => return None,
    })
}

/// The closest known sibling of an unknown field, by edit distance.
fn suggestion(schema: &Value, field: &str) -> Option<String> {
    let parts: Vec<&str> = field.split('.').collect();
    let (last, parents) = parts.split_last()?;
    let mut node = schema;
    for part in parents {
        let name = part.split('[').next().unwrap_or(part);
        node = node.get("properties")?.get(name)?;
        if part.contains('[') {
            node = node.get("items")?;
        }
    }
    let properties = node.get("properties")?.as_object()?;
    let (best, distance) = properties
        .keys()
        .map(|k| (k, karpenter_core::hash::edit_distance(k, last)))
        .min_by_key(|(_, d)| *d)?;
    (distance <= 2.max(last.len() / 3)).then(|| {
        let mut path = parents.join(".");
        if !path.is_empty() {
            path.push('.');
        }
        path + best
    })
}
