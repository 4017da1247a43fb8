//! The validation of request options, as the handlers run it before they
//! touch storage: `dryRun` of every write, `PatchOptions`, and the
//! `ListOptions` of lists and watches. A bad option is a 422 on the
//! options kind (`PatchOptions.meta.k8s.io "" is invalid: ...`).
//!
//! ```text
//!   ?dryRun=          CreateOptions / UpdateOptions / PatchOptions / DeleteOptions
//!   ?force= ?fieldManager=                              PatchOptions
//!   ?resourceVersionMatch= ?sendInitialEvents=          ListOptions (list, watch)
//! ```

use std::collections::HashMap;

use axum::http::Method;
use serde_json::json;

use super::field_errors::not_supported_printed;
use super::store::ApiError;
use super::validation::FieldError;

fn check(kind: &str, errors: Vec<FieldError>) -> Result<(), ApiError> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_options(kind, &errors))
    }
}

/// The options kind of a write by its method.
fn options_kind(method: &Method) -> &'static str {
    match *method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        Method::PATCH => "PatchOptions",
        _ => "DeleteOptions",
    }
}

/// Whether a request is a dry run; any `dryRun` but `All` is invalid on a
/// write (reads ignore it).
pub fn dry_run(method: &Method, value: Option<&str>) -> Result<bool, ApiError> {
    match value {
        None | Some("") => Ok(false),
        Some("All") => Ok(*method != Method::GET),
        Some(_) if *method == Method::GET => Ok(false),
        Some(other) => Err(ApiError::invalid_options(
            options_kind(method),
            &[not_supported_printed(
                "dryRun",
                &json!([other]).to_string(),
                &["All"],
            )],
        )),
    }
}

/// `PatchOptions` (ValidatePatchOptions): `force` only for apply, which
/// needs a `fieldManager`.
pub fn patch(query: &HashMap<String, String>, apply: bool) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    if apply {
        if query.get("fieldManager").is_none_or(String::is_empty) {
            errors.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
    } else if query.contains_key("force") {
        errors.push(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    check("PatchOptions", errors)
}

/// `ListOptions` of a list or a watch (meta/internalversion
/// ValidateListOptions, with the WatchList feature on).
pub fn list(query: &HashMap<String, String>, watch: bool) -> Result<(), ApiError> {
    let get = |k: &str| query.get(k).map(String::as_str).unwrap_or_default();
    let (rv, matching, cont) = (
        get("resourceVersion"),
        get("resourceVersionMatch"),
        get("continue"),
    );
    let initial_events = query.contains_key("sendInitialEvents");
    let mut errors = Vec::new();
    let field = "resourceVersionMatch";
    if watch {
        if initial_events && matching != "NotOlderThan" {
            errors.push(FieldError::forbidden(
                field,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !matching.is_empty() {
            if !initial_events {
                errors.push(FieldError::forbidden(
                    field,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if matching != "NotOlderThan" {
                errors.push(not_supported_printed(
                    field,
                    &json!(matching).to_string(),
                    &["NotOlderThan"],
                ));
            }
            if !cont.is_empty() {
                errors.push(FieldError::forbidden(
                    field,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        return check("ListOptions", errors);
    }
    if !matching.is_empty() {
        if rv.is_empty() {
            errors.push(FieldError::forbidden(
                field,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !cont.is_empty() {
            errors.push(FieldError::forbidden(
                field,
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if matching != "Exact" && matching != "NotOlderThan" {
            errors.push(not_supported_printed(
                field,
                &json!(matching).to_string(),
                &["Exact", "NotOlderThan", ""],
            ));
        }
        if matching == "Exact" && rv == "0" {
            errors.push(FieldError::forbidden(
                field,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if initial_events {
        errors.push(FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    check("ListOptions", errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn list_options_as_kube_apiserver_validates_them() {
        assert!(
            list(
                &q(&[
                    ("resourceVersion", "0"),
                    ("resourceVersionMatch", "NotOlderThan")
                ]),
                false
            )
            .is_ok()
        );
        let e = list(
            &q(&[("resourceVersionMatch", "Exact"), ("resourceVersion", "0")]),
            false,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message.starts_with(
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden"
            ),
            "{}",
            e.message
        );
        let two = list(
            &q(&[("resourceVersionMatch", "foo"), ("continue", "x")]),
            false,
        )
        .unwrap_err();
        assert!(
            two.message.contains(": [resourceVersionMatch: Forbidden"),
            "{}",
            two.message
        );
        assert!(
            list(
                &q(&[
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan")
                ]),
                true
            )
            .is_ok()
        );
        assert!(list(&q(&[("sendInitialEvents", "true")]), true).is_err());
    }

    #[test]
    fn dry_run_values() {
        assert_eq!(dry_run(&Method::POST, Some("All")).ok(), Some(true));
        assert_eq!(dry_run(&Method::GET, Some("foo")).ok(), Some(false));
        let e = dry_run(&Method::PUT, Some("foo")).unwrap_err();
        assert!(e.message.contains("UpdateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: [\"foo\"]: supported values: \"All\""), "{}", e.message);
    }
}
