//! Validates and defaults Kubernetes custom resources against their
//! `CustomResourceDefinition`, the way kube-apiserver does, from the CRD
//! document alone (any CRD, no generated types).
//!
//! A [`CrdValidator`] is built once per CRD: it parses every version's
//! `openAPIV3Schema` into a structural schema, compiles its `pattern`s and
//! its `x-kubernetes-validations` CEL rules (rejecting the CRD, as the
//! apiserver would, if a rule does not compile), and then validates any
//! number of objects:
//!
//! ```text
//!  CRD (JSON/YAML) ──► CrdValidator::new ──► per version: Schema tree
//!                                             ├─ regexes (Go RE2 semantics)
//!                                             └─ CEL programs (checked against the schema)
//!
//!  object ──► validate(version, &mut object, old)
//!     1. apiVersion / kind
//!     2. prune unknown fields ───────────────► Outcome::unknown_fields
//!     3. drop non-nullable nulls, apply defaults (in place)
//!     4. ObjectMeta (name, namespace, labels, annotations, finalizers)
//!     5. OpenAPI schema (type, enum, pattern, min/max, format, ...)
//!     6. embedded resources, x-kubernetes-list-type set/map uniqueness
//!     7. CEL rules, oldSelf correlated on update ──► Outcome::violations
//!        (skipped, as by the apiserver, if 4-6 found a blocking violation)
//! ```
//!
//! Violations print like the apiserver's errors
//! (`spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1`),
//! and unknown fields are reported apart from them: a real apiserver prunes
//! them silently, or rejects them with `unknown field "spec.foo"` under
//! strict field validation ([`Outcome::strict_errors`]).
//!
//! ```
//! use crd_validation::CrdValidator;
//! use serde_json::json;
//!
//! let crd = json!({
//!     "apiVersion": "apiextensions.k8s.io/v1",
//!     "kind": "CustomResourceDefinition",
//!     "metadata": {"name": "widgets.example.com"},
//!     "spec": {
//!         "group": "example.com",
//!         "names": {"kind": "Widget", "plural": "widgets"},
//!         "scope": "Cluster",
//!         "versions": [{
//!             "name": "v1", "served": true, "storage": true,
//!             "schema": {"openAPIV3Schema": {
//!                 "type": "object",
//!                 "properties": {"spec": {
//!                     "type": "object",
//!                     "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must not exceed max"}],
//!                     "properties": {
//!                         "min": {"type": "integer", "default": 0},
//!                         "max": {"type": "integer", "minimum": 1}
//!                     }
//!                 }}
//!             }}
//!         }]
//!     }
//! });
//! let validator = CrdValidator::new(&crd).unwrap();
//! let mut widget = json!({
//!     "apiVersion": "example.com/v1", "kind": "Widget",
//!     "metadata": {"name": "w"},
//!     "spec": {"max": 0, "colour": "red"}
//! });
//! let outcome = validator.validate("v1", &mut widget, None).unwrap();
//! assert_eq!(widget["spec"]["min"], 0, "defaulted");
//! assert_eq!(outcome.unknown_fields, ["spec.colour"]);
//! assert_eq!(
//!     outcome.violations[0].to_string(),
//!     "spec.max: Invalid value: 0: spec.max in body should be greater than or equal to 1"
//! );
//! ```

mod cel;
mod crd;
mod definition;
mod error;
mod formats;
pub mod meta;
mod re2;
mod schema;
mod validate;

use serde_json::Value as Json;

pub use crate::crd::{Names, Scope, Version};
pub use crate::definition::{default_names, validate_definition};
pub use crate::error::{
    BadValue, CompileError, Source, ValidateError, Violation, ViolationKind, go_quote, go_value,
};

use crate::cel::RuleResults;
use crate::validate::Collector;

/// How to validate. The defaults are the apiserver's.
#[derive(Clone, Debug)]
pub struct ValidateOptions {
    /// Evaluate the CEL rules even when the object has blocking violations
    /// (wrong type, missing required field, unsupported enum value, too
    /// long, too many). The apiserver skips them and says so; a linter may
    /// prefer to report everything at once.
    pub rules_despite_errors: bool,
    /// On updates, turn violations of fields that did not change into
    /// warnings (`CRDValidationRatcheting`, on by default since 1.30).
    pub ratcheting: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            rules_despite_errors: false,
            ratcheting: true,
        }
    }
}

/// The result of validating one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// What the apiserver would reject the object for, in its words.
    pub violations: Vec<Violation>,
    /// Fields the schema does not know (already pruned from the object), as
    /// paths like `spec.template.spec.foo`.
    pub unknown_fields: Vec<String>,
    /// What the apiserver would only warn about (ratcheted violations of
    /// unchanged fields, deprecated versions).
    pub warnings: Vec<String>,
}

impl Outcome {
    /// No violations (unknown fields aside).
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// The errors of strict field validation (`kubectl --validate=strict`):
    /// `unknown field "spec.foo"`, one per unknown field.
    pub fn strict_errors(&self) -> Vec<String> {
        self.unknown_fields
            .iter()
            .map(|f| format!("unknown field {}", go_quote(f)))
            .collect()
    }
}

/// An OpenAPI v3 schema on its own, outside any CRD: the schema of a
/// built-in kind (as `schemars` derives it from the API types, subschemas
/// inlined), used for what strict field validation refuses, the fields the
/// schema does not know. Only pruning is done with it: built-in kinds have
/// validation rules no schema states, so their violations are not its job.
#[derive(Debug)]
pub struct StructuralSchema {
    root: schema::Schema,
}

impl StructuralSchema {
    /// Compiles `schema` (an `openAPIV3Schema`-shaped object; `$ref`s are
    /// not followed, so subschemas must be inlined).
    pub fn new(schema: &Json) -> Result<Self, CompileError> {
        Ok(StructuralSchema {
            root: schema::parse(schema, "openAPIV3Schema")?,
        })
    }

    /// The paths of the fields of `obj` this schema does not know
    /// (`spec.containers[0].resource`), as a resource root: `apiVersion`,
    /// `kind` and `metadata`'s own fields are known.
    pub fn unknown_fields(&self, obj: &Json) -> Vec<String> {
        let mut copy = obj.clone();
        let mut unknown = Vec::new();
        validate::prune(&mut copy, &self.root, "", true, &mut unknown);
        unknown
    }
}

/// Validates and defaults the objects of one CRD. Cheap to share: build it
/// once per CRD (compilation is the expensive part).
#[derive(Debug)]
pub struct CrdValidator {
    crd: crd::Crd,
}

impl CrdValidator {
    /// Loads a CRD (`apiextensions.k8s.io/v1`, as JSON). Fails, like the
    /// apiserver, if a schema is malformed or a CEL rule does not compile.
    pub fn new(crd: &Json) -> Result<Self, CompileError> {
        Ok(CrdValidator {
            crd: crd::parse(crd)?,
        })
    }

    /// Loads a CRD from YAML (or JSON) text.
    pub fn from_yaml(text: &str) -> Result<Self, CompileError> {
        let doc: Json =
            serde_yaml::from_str(text).map_err(|e| CompileError::Parse(e.to_string()))?;
        Self::new(&doc)
    }

    /// `metadata.name` of the CRD (`nodepools.karpenter.sh`).
    pub fn name(&self) -> &str {
        &self.crd.name
    }

    /// `spec.group` (`karpenter.sh`).
    pub fn group(&self) -> &str {
        &self.crd.group
    }

    /// `spec.names.kind` (`NodePool`).
    pub fn kind(&self) -> &str {
        &self.crd.names.kind
    }

    /// `spec.names`.
    pub fn names(&self) -> &Names {
        &self.crd.names
    }

    /// `spec.scope`.
    pub fn scope(&self) -> Scope {
        self.crd.scope
    }

    /// The versions, in the CRD's order.
    pub fn versions(&self) -> &[Version] {
        &self.crd.versions
    }

    /// A version by name.
    pub fn version(&self, name: &str) -> Option<&Version> {
        self.crd.versions.iter().find(|v| v.name == name)
    }

    /// The storage version.
    pub fn storage_version(&self) -> Option<&Version> {
        self.crd.versions.iter().find(|v| v.storage)
    }

    /// Whether `apiVersion`/`kind` name this CRD's kind in a served version.
    pub fn handles(&self, api_version: &str, kind: &str) -> bool {
        kind == self.crd.names.kind
            && api_version.split_once('/').is_some_and(|(g, v)| {
                g == self.crd.group && self.version(v).is_some_and(|v| v.served)
            })
    }

    fn served_version(&self, version: &str) -> Result<&Version, ValidateError> {
        let v = self
            .version(version)
            .ok_or_else(|| ValidateError::UnknownVersion {
                crd: self.crd.name.clone(),
                version: version.to_string(),
            })?;
        if !v.served {
            return Err(ValidateError::NotServed {
                crd: self.crd.name.clone(),
                version: version.to_string(),
            });
        }
        Ok(v)
    }

    /// Prunes unknown fields and applies defaults in place, without
    /// validating. Returns the pruned fields' paths.
    pub fn default_object(
        &self,
        version: &str,
        obj: &mut Json,
    ) -> Result<Vec<String>, ValidateError> {
        let v = self.served_version(version)?;
        let mut unknown = Vec::new();
        if let Some(schema) = &v.schema {
            validate::prune(obj, schema, "", true, &mut unknown);
            validate::prune_nulls(obj, schema);
            validate::apply_defaults(obj, schema);
        }
        Ok(unknown)
    }

    /// Validates `obj` as `version` of this CRD, pruning unknown fields and
    /// applying defaults in place first. `old` is the stored object on
    /// updates (it enables transition rules and ratcheting).
    pub fn validate(
        &self,
        version: &str,
        obj: &mut Json,
        old: Option<&Json>,
    ) -> Result<Outcome, ValidateError> {
        self.validate_with(version, obj, old, &ValidateOptions::default())
    }

    /// [`validate`](Self::validate), taking the version from the object's
    /// `apiVersion`.
    pub fn validate_object(
        &self,
        obj: &mut Json,
        old: Option<&Json>,
    ) -> Result<Outcome, ValidateError> {
        let api_version = obj
            .get("apiVersion")
            .and_then(Json::as_str)
            .ok_or(ValidateError::NoApiVersion)?;
        let version = api_version
            .rsplit_once('/')
            .map_or(api_version, |(_, v)| v)
            .to_string();
        self.validate(&version, obj, old)
    }

    /// [`validate`](Self::validate) with options.
    pub fn validate_with(
        &self,
        version: &str,
        obj: &mut Json,
        old: Option<&Json>,
        opts: &ValidateOptions,
    ) -> Result<Outcome, ValidateError> {
        self.validate_part(version, obj, old, opts, Part::Whole)
    }

    /// Validates a write to the `status` subresource: the schema checks
    /// only `status`, against `properties.status` as its own root, so the
    /// messages name fields from there (`status.observed: Invalid value:
    /// 15: observed in body should be ...`), as the apiserver's status
    /// strategy does; metadata and CEL rules are checked on the whole
    /// object.
    pub fn validate_status(
        &self,
        version: &str,
        obj: &mut Json,
        old: Option<&Json>,
    ) -> Result<Outcome, ValidateError> {
        self.validate_part(version, obj, old, &ValidateOptions::default(), Part::Status)
    }

    /// Applies the schema's defaults in place (no pruning, no validation),
    /// as the apiserver does to objects it reads from storage: a default
    /// added to the CRD later shows on objects stored before.
    pub fn apply_defaults(&self, version: &str, obj: &mut Json) -> Result<(), ValidateError> {
        let v = self.served_version(version)?;
        if let Some(schema) = &v.schema {
            validate::apply_defaults(obj, schema);
        }
        Ok(())
    }

    fn validate_part(
        &self,
        version: &str,
        obj: &mut Json,
        old: Option<&Json>,
        opts: &ValidateOptions,
        part: Part,
    ) -> Result<Outcome, ValidateError> {
        let v = self.served_version(version)?;
        let mut outcome = Outcome::default();
        if let Some(w) = &v.deprecation_warning {
            outcome.warnings.push(w.clone());
        }

        // apiVersion and kind (the apiserver stops here if they are wrong).
        let expected_api_version = format!("{}/{}", self.crd.group, v.name);
        let kind = obj.get("kind").and_then(Json::as_str).unwrap_or_default();
        if kind != self.crd.names.kind {
            outcome.violations.push(Violation::new(
                "kind",
                ViolationKind::Invalid,
                BadValue::string(kind),
                format!("must be {}", self.crd.names.kind),
                Source::Metadata,
            ));
        }
        let api_version = obj
            .get("apiVersion")
            .and_then(Json::as_str)
            .unwrap_or_default();
        if api_version != expected_api_version {
            outcome.violations.push(Violation::new(
                "apiVersion",
                ViolationKind::Invalid,
                BadValue::string(api_version),
                format!("must be {expected_api_version}"),
                Source::Metadata,
            ));
        }
        if !outcome.violations.is_empty() {
            return Ok(outcome);
        }

        let Some(schema) = &v.schema else {
            meta::validate_object_meta(
                obj.get("metadata"),
                "metadata",
                self.crd.scope == Scope::Namespaced,
                meta::NameRule::Dns1123Subdomain,
                &mut outcome.violations,
            );
            return Ok(outcome);
        };

        validate::prune(obj, schema, "", true, &mut outcome.unknown_fields);
        validate::prune_nulls(obj, schema);
        validate::apply_defaults(obj, schema);
        let obj: &Json = obj;
        let old = old.filter(|o| o.is_object());
        let ratchet_old = if opts.ratcheting { old } else { None };

        let mut violations = Vec::new();
        meta::validate_object_meta(
            obj.get("metadata"),
            "metadata",
            self.crd.scope == Scope::Namespaced,
            meta::NameRule::Dns1123Subdomain,
            &mut violations,
        );
        let mut collector = Collector::default();
        match part {
            Part::Whole => {
                let at = validate::At::top(ratchet_old, true);
                validate::validate_value(obj, schema, at, &mut collector);
            }
            Part::Status => status_schema_violations(obj, schema, ratchet_old, &mut collector),
        }
        violations.append(&mut collector.violations);
        validate::validate_embedded(obj, schema, "", true, &mut violations);
        validate::validate_list_types(obj, schema, "", &mut violations);
        let mut ratcheted = collector.ratcheted;

        let blocked = violations.iter().any(|v| v.kind.blocks_rules());
        if blocked && !opts.rules_despite_errors {
            if schema.has_rules {
                violations.push(Violation::new(
                    "<nil>",
                    ViolationKind::Invalid,
                    BadValue::string("null"),
                    "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                    Source::RulesSkipped,
                ));
            }
        } else {
            let mut results = RuleResults::default();
            // Ratcheting compares with the old object; transition rules need
            // it regardless.
            validate::eval_rules(obj, schema, validate::At::top(old, true), &mut results);
            violations.append(&mut results.violations);
            if opts.ratcheting {
                ratcheted.append(&mut results.ratcheted);
            } else {
                violations.append(&mut results.ratcheted);
            }
        }
        outcome.violations = violations;
        outcome
            .warnings
            .extend(ratcheted.iter().map(|v| v.to_string()));
        Ok(outcome)
    }
}

/// What of an object a validation covers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Whole,
    /// A `status` subresource write.
    Status,
}

/// The schema violations of `obj.status` against `properties.status`,
/// validated as a root of its own and reported under `status`.
fn status_schema_violations(
    obj: &Json,
    schema: &schema::Schema,
    old: Option<&Json>,
    out: &mut Collector,
) {
    let (Some(status), Some(status_schema)) = (obj.get("status"), schema.prop("status")) else {
        return;
    };
    let mut part = Collector::default();
    let old_status = old.and_then(|o| o.get("status"));
    let at = validate::At::top(old_status, false);
    validate::validate_value(status, status_schema, at, &mut part);
    let under_status = |mut v: Violation| {
        v.path = match v.path.as_str() {
            "<nil>" => "status".to_string(),
            p if p.starts_with('[') => format!("status{p}"),
            p => format!("status.{p}"),
        };
        v
    };
    out.violations
        .extend(part.violations.into_iter().map(under_status));
    out.ratcheted
        .extend(part.ratcheted.into_iter().map(under_status));
}
