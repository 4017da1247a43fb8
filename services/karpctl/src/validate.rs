//! `karpctl validate`: Karpenter documents against the generated CRDs,
//! as the API server would check them (defaults, OpenAPI schema, CEL rules).

use crd_validation::{CrdValidator, ValidateOptions};
use serde_json::Value;

use crate::input::Document;

/// The validators of every generated CRD, with each CRD's JSON (for
/// did-you-mean suggestions).
pub struct Validators {
    crds: Vec<(CrdValidator, Value)>,
}

/// What `validate` found in one document.
#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// Fields the schema does not know, each with a did-you-mean hint
    /// (also among `warnings`, as `validate` prints them).
    pub unknown_fields: Vec<(String, String)>,
    /// Not a Karpenter document: not checked.
    pub skipped: bool,
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
        Ok(Validators { crds })
    }

    /// Validates one document.
    pub fn check(&self, doc: &Document) -> Report {
        let mut report = Report::default();
        let (group, version, kind) = (doc.group(), doc.version(), doc.kind());
        if !matches!(group, "karpenter.sh" | "karpenter.k8s.aws") {
            report.skipped = true;
            return report;
        }
        if version != "v1" {
            report.errors.push(format!(
                "apiVersion: {}/{version} is no longer served: convert first with `karpctl convert -f {}`",
                group, doc.origin.file
            ));
            return report;
        }
        let Some((validator, json)) = self
            .crds
            .iter()
            .find(|(v, _)| v.handles(doc.api_version(), kind))
        else {
            report
                .errors
                .push(format!("kind: {group}/v1 has no kind {kind:?}"));
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
                for field in &outcome.unknown_fields {
                    let hint = suggestion(json, field)
                        .map(|s| format!(" (did you mean {s:?}?)"))
                        .unwrap_or_default();
                    report.warnings.push(format!(
                        "{field}: unknown field, ignored by the API server{hint}"
                    ));
                    report
                        .unknown_fields
                        .push((field.clone(), format!("unknown field{hint}")));
                }
                report.warnings.extend(outcome.warnings.iter().cloned());
            }
        }
        report
    }
}

/// The closest known sibling of an unknown field, by edit distance.
fn suggestion(crd: &Value, field: &str) -> Option<String> {
    let schema = crd.pointer("/spec/versions/0/schema/openAPIV3Schema")?;
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
        .map(|k| (k, edit_distance(k, last)))
        .min_by_key(|(_, d)| *d)?;
    (distance <= 2.max(last.len() / 3)).then(|| {
        let mut path = parents.join(".");
        if !path.is_empty() {
            path.push('.');
        }
        path + best
    })
}

/// Levenshtein distance (field and kind suggestions).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("limit", "limits"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
