//! Events (`pkg/apis/core/validation/events.go`): every Event passes the
//! legacy rules; one written through `events.k8s.io/v1` also the strict
//! ones (`ValidateEventCreate`, `ValidateEventUpdate`).
//!
//! Both APIs store the same internal Event, so errors name its fields:
//! `regarding` is `involvedObject`, `note` is `message`,
//! `deprecatedCount` is `count`, core v1's `reportingComponent` is
//! `reportingController`.

use karpenter_core::names::{dns1123_subdomain, qualified_name};
use serde_json::Value;

use crate::field_errors::immutable;
use crate::validation::FieldError;

/// An Event in the internal API's terms.
struct Internal<'a> {
    namespace: &'a str,
    involved: &'a Value,
    message: &'a Value,
    count: &'a Value,
    source: &'a Value,
    first: &'a Value,
    last: &'a Value,
    event_time: &'a Value,
    series: &'a Value,
    controller: &'a Value,
    instance: &'a Value,
    action: &'a Value,
    reason: &'a Value,
    kind: &'a Value,
    related: &'a Value,
}

impl<'a> Internal<'a> {
    /// `strict`: the object is an `events.k8s.io/v1` Event.
    fn of(e: &'a Value, strict: bool) -> Self {
        let (involved, message, count, source, first, last, controller) = if strict {
            (
                &e["regarding"],
                &e["note"],
                &e["deprecatedCount"],
                &e["deprecatedSource"],
                &e["deprecatedFirstTimestamp"],
                &e["deprecatedLastTimestamp"],
                &e["reportingController"],
            )
        } else {
            (
                &e["involvedObject"],
                &e["message"],
                &e["count"],
                &e["source"],
                &e["firstTimestamp"],
                &e["lastTimestamp"],
                &e["reportingComponent"],
            )
        };
        Internal {
            namespace: e["metadata"]["namespace"].as_str().unwrap_or_default(),
            involved,
            message,
            count,
            source,
            first,
            last,
            event_time: &e["eventTime"],
            series: &e["series"],
            controller,
            instance: &e["reportingInstance"],
            action: &e["action"],
            reason: &e["reason"],
            kind: &e["type"],
            related: &e["related"],
        }
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// Go's zero value: absent, null, `""`, `0`, or an empty object or list.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
    }
}

/// Too long: `Invalid value: "": can have at most N characters`.
fn at_most(field: &str, v: &Value, limit: usize, out: &mut Vec<FieldError>) {
    if text(v).len() > limit {
        out.push(FieldError::invalid(
            field,
            "",
            &format!("can have at most {limit} characters"),
        ));
    }
}

/// `legacyValidateEvent`: every Event, whatever API wrote it.
fn legacy(e: &Internal<'_>) -> Vec<FieldError> {
    let mut out = Vec::new();
    let involved_ns = text(&e.involved["namespace"]);
    let namespace_mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            involved_ns,
            "does not match event.namespace",
        )
    };
    if is_zero(e.event_time) {
        let fits = if involved_ns.is_empty() {
            matches!(e.namespace, "" | "default")
        } else {
            e.namespace == involved_ns
        };
        if !fits {
            out.push(namespace_mismatch());
        }
    } else {
        if involved_ns.is_empty() && !matches!(e.namespace, "default" | "kube-system") {
            out.push(namespace_mismatch());
        }
        let controller = text(e.controller);
        if controller.is_empty() {
            out.push(FieldError::required("reportingController", ""));
        }
        for detail in qualified_name(controller) {
            out.push(FieldError::invalid(
                "reportingController",
                controller,
                &detail,
            ));
        }
        for (field, v, limit) in [
            ("reportingInstance", e.instance, 128),
            ("action", e.action, 128),
            ("reason", e.reason, 128),
        ] {
            if text(v).is_empty() {
                out.push(FieldError::required(field, ""));
            }
            at_most(field, v, limit, &mut out);
        }
        at_most("message", e.message, 1024, &mut out);
    }
    for detail in dns1123_subdomain(e.namespace) {
        out.push(FieldError::invalid("namespace", e.namespace, &detail));
    }
    out
}

/// `validateV1EventSeries`.
fn series(e: &Internal<'_>, out: &mut Vec<FieldError>) {
    if e.series.is_null() {
        return;
    }
    if e.series["count"].as_i64().unwrap_or(0) < 2 {
        out.push(FieldError::invalid(
            "series.count",
            "",
            "should be at least 2",
        ));
    }
    if is_zero(&e.series["lastObservedTime"]) {
        out.push(FieldError::required("series.lastObservedTime", ""));
    }
}

/// The strict rules of an `events.k8s.io/v1` create.
fn strict_create(e: &Internal<'_>) -> Vec<FieldError> {
    // The name (a DNS subdomain here) is checked with the rest of the
    // metadata.
    let mut out = Vec::new();
    series(e, &mut out);
    if is_zero(e.event_time) {
        out.push(FieldError::required("eventTime", ""));
    }
    let kind = text(e.kind);
    if !matches!(kind, "Normal" | "Warning") {
        out.push(FieldError::invalid(
            "type",
            "",
            &format!("has invalid value: {kind}"),
        ));
    }
    for (field, v) in [
        ("firstTimestamp", e.first),
        ("lastTimestamp", e.last),
        ("count", e.count),
        ("source", e.source),
    ] {
        if !is_zero(v) {
            out.push(FieldError::invalid(field, "", "needs to be unset"));
        }
    }
    out
}

/// The strict rules of an `events.k8s.io/v1` update: a changed series is
/// checked again, the rest may not change.
fn strict_update(new: &Internal<'_>, old: &Internal<'_>) -> Vec<FieldError> {
    let mut out = Vec::new();
    if new.series != old.series {
        series(new, &mut out);
    }
    let canonical = |v: &Value| if is_zero(v) { Value::Null } else { v.clone() };
    // ValidateEventUpdate lists `reason` twice; so do its errors.
    let pairs = [
        ("involvedObject", new.involved, old.involved),
        ("reason", new.reason, old.reason),
        ("message", new.message, old.message),
        ("source", new.source, old.source),
        ("firstTimestamp", new.first, old.first),
        ("lastTimestamp", new.last, old.last),
        ("count", new.count, old.count),
        ("reason", new.reason, old.reason),
        ("type", new.kind, old.kind),
        ("eventTime", new.event_time, old.event_time),
        ("action", new.action, old.action),
        ("related", new.related, old.related),
        ("reportingController", new.controller, old.controller),
        ("reportingInstance", new.instance, old.instance),
    ];
    for (field, n, o) in pairs {
        if let Some(e) = immutable(field, &canonical(n), &canonical(o)) {
            out.push(e);
        }
    }
    out
}

/// An Event's rules. `strict` for `events.k8s.io/v1` (the API the object
/// was written through); `old` on updates.
pub fn event(object: &Value, old: Option<&Value>, strict: bool) -> Vec<FieldError> {
    let new = Internal::of(object, strict);
    let mut errors = legacy(&new);
    if !strict {
        return errors;
    }
    match old {
        None => errors.extend(strict_create(&new)),
        Some(old) => errors.extend(strict_update(&new, &Internal::of(old, true))),
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(object: &Value, old: Option<&Value>, strict: bool) -> Vec<String> {
        event(object, old, strict)
            .iter()
            .map(FieldError::text)
            .collect()
    }

    #[test]
    fn core_events_get_the_legacy_rules_only() {
        let about_job = json!({"metadata": {"name": "Bad_Name", "namespace": "default"},
            "involvedObject": {"kind": "Job", "namespace": "foo"}});
        assert_eq!(
            texts(&about_job, None, false),
            ["involvedObject.namespace: Invalid value: \"foo\": does not match event.namespace"]
        );
        // What the adapter sends: a cluster-scoped object's event in default.
        let adapter = json!({"metadata": {"generateName": "n1.", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "R", "message": "m",
            "type": "Normal", "source": {"component": "karpenter"}, "reportingComponent": "karpenter",
            "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T10:00:00Z", "count": 1});
        assert!(texts(&adapter, None, false).is_empty());
    }

    #[test]
    fn new_events_get_the_strict_rules() {
        let good = json!({"metadata": {"name": "e1", "namespace": "default"},
            "eventTime": "2024-05-01T10:00:00.000000Z", "reportingController": "k8s.io/c",
            "reportingInstance": "i", "action": "Do", "reason": "Because", "type": "Normal",
            "regarding": {"kind": "Node", "name": "n1"}});
        assert!(texts(&good, None, true).is_empty());
        let mut counted = good.clone();
        counted["deprecatedCount"] = json!(3);
        assert_eq!(
            texts(&counted, None, true),
            ["count: Invalid value: \"\": needs to be unset"]
        );
        let mut renamed = good.clone();
        renamed["note"] = json!("new");
        assert_eq!(
            texts(&renamed, Some(&good), true),
            ["message: Invalid value: \"new\": field is immutable"]
        );
    }
}
