//! Helpers shared by the integration tests.

#![allow(dead_code)]

use crd_validation::{CompileError, CrdValidator, Outcome, ValidateOptions};
use serde_json::{Value, json};

/// A cluster-scoped `Widget` CRD (`example.com/v1`) whose `spec` has `spec_schema`.
pub fn crd_with_spec(spec_schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Cluster",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema
                    }
                }}
            }]
        }
    })
}

pub fn validator(spec_schema: Value) -> CrdValidator {
    CrdValidator::new(&crd_with_spec(spec_schema)).expect("CRD compiles")
}

pub fn compile_error(spec_schema: Value) -> CompileError {
    CrdValidator::new(&crd_with_spec(spec_schema)).expect_err("CRD must be rejected")
}

pub fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

pub fn messages(o: &Outcome) -> Vec<String> {
    o.violations.iter().map(ToString::to_string).collect()
}

/// Validates `spec` (create), every rule evaluated.
pub fn check(v: &CrdValidator, spec: Value) -> Vec<String> {
    let mut obj = widget(spec);
    let opts = ValidateOptions {
        rules_despite_errors: true,
        ..ValidateOptions::default()
    };
    messages(
        &v.validate_with("v1", &mut obj, None, &opts)
            .expect("served"),
    )
}

/// Validates an update from `old_spec` to `spec`.
pub fn check_update(v: &CrdValidator, old_spec: Value, spec: Value) -> Vec<String> {
    let old = widget(old_spec);
    let mut obj = widget(spec);
    messages(&v.validate("v1", &mut obj, Some(&old)).expect("served"))
}

/// Evaluates one rule on `spec.value` (of `value_schema`) and returns the
/// violations.
pub fn eval(rule: &str, value_schema: Value, value: Value) -> Vec<String> {
    let v = validator(json!({
        "type": "object",
        "properties": {"value": value_schema},
        "x-kubernetes-validations": [{"rule": rule}]
    }));
    check(&v, json!({"value": value}))
}

/// Whether `rule` holds for `spec.value`.
pub fn holds(rule: &str, value_schema: Value, value: Value) -> bool {
    let out = eval(rule, value_schema, value);
    assert!(
        out.iter().all(|m| m.contains("failed rule")),
        "{rule} errored: {out:?}"
    );
    out.is_empty()
}
