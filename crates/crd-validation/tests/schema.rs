//! Structural schema validation, pruning and defaulting on a small CRD.

mod common;

use common::{check, check_update, messages, validator, widget};
use crd_validation::ValidateOptions;
use serde_json::json;

#[test]
fn types_and_nullability() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "name": {"type": "string"},
            "flag": {"type": "boolean"},
            "note": {"type": "string", "nullable": true},
            "items": {"type": "array", "items": {"type": "string"}}
        }
    }));
    assert_eq!(
        check(
            &v,
            json!({"count": "3", "ratio": 1, "name": 5, "flag": "yes", "note": null, "items": ["a", null]})
        ),
        [
            "spec.count: Invalid value: \"string\": spec.count in body must be of type integer: \"string\"",
            "spec.name: Invalid value: \"integer\": spec.name in body must be of type string: \"integer\"",
            "spec.flag: Invalid value: \"string\": spec.flag in body must be of type boolean: \"string\"",
            "spec.items[1]: Invalid value: \"null\": spec.items[1] in body must be of type string: \"null\"",
        ]
    );
    // 2.0 is an integer to the apiserver; 2.5 is not.
    assert!(check(&v, json!({"count": 2.0})).is_empty());
    assert_eq!(
        check(&v, json!({"count": 2.5})),
        [
            "spec.count: Invalid value: \"number\": spec.count in body must be of type integer: \"number\""
        ]
    );
}

#[test]
fn nulls_of_non_nullable_fields_are_dropped_or_defaulted() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "string", "default": "bee"},
            "c": {"type": "string", "nullable": true}
        }
    }));
    let mut obj = widget(json!({"a": null, "b": null, "c": null}));
    let out = v.validate("v1", &mut obj, None).expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));
    assert_eq!(obj["spec"], json!({"b": "bee", "c": null}));
}

#[test]
fn strings_numbers_lists_and_maps() {
    let v = validator(json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
            "emoji": {"type": "string", "maxLength": 2},
            "size": {"type": "integer", "minimum": 1, "maximum": 10, "exclusiveMaximum": true, "multipleOf": 2},
            "ratio": {"type": "number", "minimum": 0.5, "exclusiveMinimum": true},
            "big": {"type": "integer", "maximum": 1000000},
            "port": {"type": "integer", "format": "int32"},
            "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
            "labels": {"type": "object", "maxProperties": 1, "minProperties": 1, "additionalProperties": {"type": "string"}},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "level": {"type": "integer", "enum": [1, 2]}
        }
    }));
    assert_eq!(
        check(
            &v,
            json!({
                "name": "ABCDEFG", "emoji": "😀😀😀", "size": 10, "ratio": 0.5, "big": 2000000,
                "port": 3000000000u64, "tags": [], "labels": {"a": "1", "b": "2"}, "mode": "medium", "level": 3
            })
        ),
        [
            "spec.name: Too long: may not be more than 5 bytes",
            "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
            "spec.emoji: Too long: may not be more than 2 bytes",
            "spec.size: Invalid value: 10: spec.size in body should be less than 10",
            "spec.ratio: Invalid value: 0.5: spec.ratio in body should be greater than 0.5",
            "spec.big: Invalid value: 2000000: spec.big in body should be less than or equal to 1e+06",
            "spec.port: Invalid value: 3000000000: spec.port in Checked must be of type int32",
            "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
            "spec.labels: Too many: 2: must have at most 1 items",
            "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\"",
            "spec.level: Unsupported value: 3: supported values: \"1\", \"2\"",
        ]
    );
    assert_eq!(
        check(
            &v,
            json!({"name": "a", "size": 3, "tags": ["a", "b", "c"], "labels": {}})
        ),
        [
            "spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long",
            "spec.size: Invalid value: 3: spec.size in body should be a multiple of 2",
            "spec.tags: Too many: 3: must have at most 2 items",
            "spec.labels: Invalid value: 0: spec.labels in body should have at least 1 properties",
        ]
    );
    assert_eq!(check(&v, json!({})), ["spec.name: Required value"]);
}

#[test]
fn formats() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "every": {"type": "string", "format": "duration"},
            "id": {"type": "string", "format": "uuid"},
            "data": {"type": "string", "format": "byte"},
            "addr": {"type": "string", "format": "ipv4"},
            "custom": {"type": "string", "format": "my-own-format"}
        }
    }));
    assert!(
        check(&v, json!({
            "at": "2024-06-01T10:00:00Z", "day": "2024-06-01", "every": "1h30m",
            "id": "123e4567-e89b-12d3-a456-426614174000", "data": "aGVsbG8=", "addr": "10.0.0.1",
            "custom": "anything"
        }))
        .is_empty()
    );
    assert_eq!(
        check(
            &v,
            json!({"at": "tomorrow", "day": "2024-13-01", "every": "soon", "addr": "10.0.0"})
        ),
        [
            "spec.at: Invalid value: \"tomorrow\": spec.at in body must be of type date-time: \"tomorrow\"",
            "spec.day: Invalid value: \"2024-13-01\": spec.day in body must be of type date: \"2024-13-01\"",
            "spec.every: Invalid value: \"soon\": spec.every in body must be of type duration: \"soon\"",
            "spec.addr: Invalid value: \"10.0.0\": spec.addr in body must be of type ipv4: \"10.0.0\"",
        ]
    );
}

#[test]
fn int_or_string() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "port": {
                "x-kubernetes-int-or-string": true,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": "^[0-9]+%?$"
            }
        }
    }));
    assert!(check(&v, json!({"port": 80})).is_empty());
    assert!(check(&v, json!({"port": "50%"})).is_empty());
    assert_eq!(
        check(&v, json!({"port": true})),
        [
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
        ]
    );
    assert_eq!(
        check(&v, json!({"port": "http"})),
        ["spec.port: Invalid value: \"http\": spec.port in body should match '^[0-9]+%?$'"]
    );
}

#[test]
fn composition_keywords() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "a": {"type": "string", "anyOf": [{"pattern": "^x"}, {"pattern": "y$"}]},
            "b": {"type": "integer", "oneOf": [{"minimum": 5}, {"maximum": 10}]},
            "c": {"type": "string", "not": {"enum": ["forbidden"]}},
            "d": {"type": "string", "allOf": [{"minLength": 2}, {"pattern": "^d"}]}
        }
    }));
    assert!(check(&v, json!({"a": "xa", "b": 20, "c": "ok", "d": "dd"})).is_empty());
    assert_eq!(
        check(&v, json!({"a": "aa", "b": 7, "c": "forbidden", "d": "x"})),
        [
            "<nil>: Invalid value: \"\": \"spec.a\" must validate at least one schema (anyOf)",
            "<nil>: Invalid value: \"\": \"spec.b\" must validate one and only one schema (oneOf). Found 2 valid alternatives",
            "<nil>: Invalid value: \"\": \"spec.c\" must not validate the schema (not)",
            "spec.d: Invalid value: \"x\": spec.d in body should be at least 2 chars long",
            "spec.d: Invalid value: \"x\": spec.d in body should match '^d'",
        ]
    );
}

#[test]
fn pruning_preserve_unknown_fields_and_embedded_resources() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "known": {"type": "string"},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "partly": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"inner": {"type": "object", "properties": {"x": {"type": "integer"}}}}
            },
            "any": {"type": "object", "additionalProperties": true},
            "pod": {
                "type": "object",
                "x-kubernetes-embedded-resource": true,
                "x-kubernetes-preserve-unknown-fields": true
            }
        }
    }));
    let mut obj = widget(json!({
        "known": "k", "unknown": 1,
        "free": {"anything": {"goes": true}},
        "partly": {"extra": 1, "inner": {"x": 1, "y": 2}},
        "any": {"a": [1]},
        "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1}, "spec": {"containers": []}}
    }));
    let out = v.validate("v1", &mut obj, None).expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));
    assert_eq!(
        out.unknown_fields,
        [
            "spec.unknown",
            "spec.partly.inner.y",
            "spec.pod.metadata.bogus"
        ]
    );
    assert_eq!(obj["spec"]["free"]["anything"]["goes"], true);
    assert_eq!(obj["spec"]["partly"]["extra"], 1);

    assert_eq!(
        check(&v, json!({"pod": {"metadata": {"name": "a/b"}}})),
        [
            "spec.pod.apiVersion: Required value: must not be empty",
            "spec.pod.kind: Required value: must not be empty",
            "spec.pod.metadata.name: Invalid value: \"a/b\": may not contain '/'",
        ]
    );
}

#[test]
fn defaults_apply_recursively_inside_defaults() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "settings": {
                "type": "object",
                "default": {},
                "properties": {
                    "mode": {"type": "string", "default": "auto"},
                    "limits": {
                        "type": "object",
                        "default": {"cpu": "1"},
                        "properties": {"cpu": {"type": "string"}, "memory": {"type": "string", "default": "1Gi"}}
                    }
                }
            },
            "rules": {
                "type": "array",
                "items": {"type": "object", "properties": {"action": {"type": "string", "default": "allow"}}}
            },
            "extra": {"type": "object", "additionalProperties": {"type": "object", "properties": {"on": {"type": "boolean", "default": true}}}}
        }
    }));
    let mut obj = widget(json!({"rules": [{}, {"action": "deny"}], "extra": {"a": {}}}));
    let out = v.validate("v1", &mut obj, None).expect("served");
    assert!(out.is_valid());
    assert_eq!(
        obj["spec"],
        json!({
            "rules": [{"action": "allow"}, {"action": "deny"}],
            "extra": {"a": {"on": true}},
            "settings": {"mode": "auto", "limits": {"cpu": "1", "memory": "1Gi"}}
        })
    );
    // Defaulting alone, for tools that only want the defaulted object.
    let mut obj = widget(json!({"bogus": 1}));
    let pruned = v.default_object("v1", &mut obj).expect("served");
    assert_eq!(pruned, ["spec.bogus"]);
    assert_eq!(obj["spec"]["settings"]["mode"], "auto");
}

#[test]
fn list_types_set_and_map() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "zones": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name", "protocol"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "protocol": {"type": "string", "default": "TCP"}, "port": {"type": "integer"}}
                }
            }
        }
    }));
    assert!(check(&v, json!({"zones": ["a", "b"], "ports": [{"name": "http"}, {"name": "http", "protocol": "UDP"}]})).is_empty());
    assert_eq!(
        check(
            &v,
            json!({
                "zones": ["a", "b", "a", "a"],
                "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 8080}]
            })
        ),
        [
            "spec.zones[2]: Duplicate value: \"a\"",
            "spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"http\", \"protocol\":\"TCP\"}",
        ]
    );
}

#[test]
fn namespaced_resources_need_a_namespace() {
    let mut crd = common::crd_with_spec(json!({"type": "object"}));
    crd["spec"]["scope"] = json!("Namespaced");
    let v = crd_validation::CrdValidator::new(&crd).expect("compiles");
    let mut obj = widget(json!({}));
    assert_eq!(
        messages(&v.validate("v1", &mut obj, None).expect("served")),
        ["metadata.namespace: Required value"]
    );
    obj["metadata"]["namespace"] = json!("Team_A");
    assert_eq!(
        messages(&v.validate("v1", &mut obj, None).expect("served"))[0],
        "metadata.namespace: Invalid value: \"Team_A\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    );
}

#[test]
fn schema_ratcheting_on_update() {
    let v = validator(json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 3}, "other": {"type": "string"}}
    }));
    // A value stored before maxLength was added may stay...
    assert!(
        check_update(
            &v,
            json!({"name": "toolong"}),
            json!({"name": "toolong", "other": "x"})
        )
        .is_empty()
    );
    // ...but may not be changed to another invalid value.
    assert_eq!(
        check_update(&v, json!({"name": "toolong"}), json!({"name": "toolonger"})),
        ["spec.name: Too long: may not be more than 3 bytes"]
    );
    let strict = ValidateOptions {
        ratcheting: false,
        ..ValidateOptions::default()
    };
    let old = widget(json!({"name": "toolong"}));
    let mut obj = widget(json!({"name": "toolong"}));
    assert!(
        !v.validate_with("v1", &mut obj, Some(&old), &strict)
            .expect("served")
            .is_valid()
    );
}
