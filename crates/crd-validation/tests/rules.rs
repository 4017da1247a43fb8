//! `x-kubernetes-validations`: rule options, transition rules, the
//! Kubernetes CEL libraries, and CRDs rejected for rules that do not compile.

mod common;

use common::{check, check_update, compile_error, holds, validator};
use crd_validation::CompileError;
use serde_json::json;

fn str_schema() -> serde_json::Value {
    json!({"type": "string"})
}

#[test]
fn message_expression_field_path_and_reason() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "min": {"type": "integer"},
            "max": {"type": "integer"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.min <= self.max",
                "messageExpression": "'min (' + string(self.min) + ') exceeds max (' + string(self.max) + ')'",
                "fieldPath": ".max"
            },
            {"rule": "!has(self.labels) || !('owner' in self.labels)", "message": "owner is set by the system", "fieldPath": ".labels['owner']", "reason": "FieldValueForbidden"},
            {"rule": "has(self.max)", "reason": "FieldValueRequired", "message": "max is required"},
            {"rule": "self.min >= 0", "messageExpression": "''", "message": "min must not be negative"}
        ]
    }));
    assert_eq!(
        check(&v, json!({"min": 5, "max": 3, "labels": {"owner": "me"}})),
        [
            "spec.max: Invalid value: min (5) exceeds max (3)",
            "spec.labels[owner]: Forbidden: owner is set by the system",
        ]
    );
    assert_eq!(
        check(&v, json!({"min": -1})),
        [
            "spec: Invalid value: \"object\": no such key: max evaluating rule: self.min <= self.max",
            "spec: Required value: max is required",
            "spec: Invalid value: min must not be negative",
        ]
    );
}

#[test]
fn rules_without_message_say_which_rule_failed() {
    assert_eq!(
        common::eval("self.value.size() < 3", str_schema(), json!("abcd")),
        ["spec: Invalid value: failed rule: self.value.size() < 3"]
    );
}

#[test]
fn transition_rules_and_optional_old_self() {
    let v = validator(json!({
        "type": "object",
        "properties": {
            "replicas": {
                "type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "replicas may not decrease"}]
            },
            "name": {
                "type": "string",
                "x-kubernetes-validations": [{
                    "rule": "oldSelf.hasValue() ? self == oldSelf.value() : self.startsWith('app-')",
                    "optionalOldSelf": true,
                    "message": "name starts with app- and never changes"
                }]
            },
            "items": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["id"],
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "size may not shrink"}]}
                    }
                }
            }
        }
    }));
    // Create: plain transition rules do not run, optionalOldSelf ones do.
    assert_eq!(
        check(&v, json!({"replicas": 1, "name": "db"})),
        ["spec.name: Invalid value: \"db\": name starts with app- and never changes"]
    );
    assert!(check(&v, json!({"replicas": 1, "name": "app-db"})).is_empty());
    // Update.
    assert_eq!(
        check_update(
            &v,
            json!({"replicas": 3, "name": "app-db"}),
            json!({"replicas": 2, "name": "app-web"})
        ),
        [
            "spec.replicas: Invalid value: 2: replicas may not decrease",
            "spec.name: Invalid value: \"app-web\": name starts with app- and never changes",
        ]
    );
    // Map-list items correlate by key, wherever they move in the list.
    assert_eq!(
        check_update(
            &v,
            json!({"items": [{"id": "a", "size": 5}, {"id": "b", "size": 5}]}),
            json!({"items": [{"id": "b", "size": 6}, {"id": "a", "size": 4}, {"id": "c", "size": 1}]})
        ),
        ["spec.items[1].size: Invalid value: 4: size may not shrink"]
    );
}

#[test]
fn rules_see_typed_values() {
    let ts = json!({"type": "string", "format": "date-time"});
    assert!(holds(
        "self.value > timestamp('2024-01-01T00:00:00Z')",
        ts.clone(),
        json!("2024-06-01T00:00:00Z")
    ));
    assert!(holds(
        "self.value.getFullYear() == 2024",
        ts,
        json!("2024-06-01T00:00:00Z")
    ));
    let dur = json!({"type": "string", "format": "duration"});
    assert!(holds(
        "self.value <= duration('2h')",
        dur.clone(),
        json!("90m")
    ));
    assert!(!holds("self.value <= duration('1h')", dur, json!("90m")));
    assert!(holds(
        "self.value == 2.0",
        json!({"type": "number"}),
        json!(2)
    ));
    assert!(holds(
        "self.value == 2",
        json!({"type": "integer"}),
        json!(2)
    ));
    assert!(holds(
        "type(self.value) == string",
        json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
        json!("50%")
    ));
    assert!(holds(
        "self.value == b'hi'",
        json!({"type": "string", "format": "byte"}),
        json!("aGk=")
    ));
}

#[test]
fn standard_macros_and_strings() {
    let list = json!({"type": "array", "items": {"type": "string"}});
    assert!(holds(
        "self.value.all(x, x.size() > 0)",
        list.clone(),
        json!(["a", "b"])
    ));
    assert!(holds(
        "self.value.exists(x, x == 'b')",
        list.clone(),
        json!(["a", "b"])
    ));
    assert!(holds(
        "self.value.exists_one(x, x == 'b')",
        list.clone(),
        json!(["a", "b"])
    ));
    assert!(holds(
        "self.value.map(x, x + '!') == ['a!', 'b!']",
        list.clone(),
        json!(["a", "b"])
    ));
    assert!(holds(
        "self.value.filter(x, x != 'a') == ['b']",
        list.clone(),
        json!(["a", "b"])
    ));
    assert!(holds("has(self.value)", list.clone(), json!([])));
    assert!(holds(
        "self.value.join(',') == 'a,b'",
        list,
        json!(["a", "b"])
    ));
    let s = str_schema();
    for rule in [
        "self.value.split('/') == ['karpenter.sh', 'nodepool']",
        "self.value.upperAscii() == 'KARPENTER.SH/NODEPOOL'",
        "self.value.lowerAscii() == 'karpenter.sh/nodepool'",
        "self.value.replace('karpenter.sh', 'k') == 'k/nodepool'",
        "self.value.indexOf('/') == 12",
        "self.value.lastIndexOf('e') == 16",
        "self.value.substring(13) == 'nodepool'",
        "' x '.trim() == 'x'",
        "self.value.matches('^karpenter')",
        "self.value.find('[a-z]+$') == 'nodepool'",
        "self.value.findAll('[a-z]+') == ['karpenter', 'sh', 'nodepool']",
        "self.value.findAll('[a-z]+', 2) == ['karpenter', 'sh']",
        "'%s has %d'.format(['pool', 3]) == 'pool has 3'",
        "self.value.startsWith('karpenter') && self.value.endsWith('pool') && self.value.contains('.sh/')",
        "self.?value.orValue('') != ''",
        "optional.of(1).hasValue() && !optional.none().hasValue()",
    ] {
        assert!(
            holds(rule, s.clone(), json!("karpenter.sh/nodepool")),
            "{rule}"
        );
    }
}

#[test]
fn kubernetes_list_and_set_libraries() {
    let ints = json!({"type": "array", "items": {"type": "integer"}});
    for rule in [
        "self.value.isSorted()",
        "self.value.sum() == 6",
        "self.value.min() == 1 && self.value.max() == 3",
        "self.value.indexOf(2) == 1 && self.value.lastIndexOf(9) == -1",
        "sets.contains(self.value, [1, 2])",
        "sets.equivalent(self.value, [3, 2, 1])",
        "sets.intersects(self.value, [3, 4])",
        "[].sum() == 0",
    ] {
        assert!(holds(rule, ints.clone(), json!([1, 2, 3])), "{rule}");
    }
    assert!(!holds("self.value.isSorted()", ints.clone(), json!([2, 1])));
    assert_eq!(
        common::eval("self.value.min() > 0", ints, json!([])),
        [
            "spec: Invalid value: \"object\": min called on empty list evaluating rule: self.value.min() > 0"
        ]
    );
}

#[test]
fn kubernetes_quantity_library() {
    let q = json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]});
    for rule in [
        "isQuantity(self.value)",
        "quantity(self.value).isGreaterThan(quantity('1G'))",
        "quantity(self.value).isLessThan(quantity('2Gi'))",
        "quantity(self.value).compareTo(quantity('1024Mi')) == 0",
        "quantity(self.value) == quantity('1073741824')",
        "quantity(self.value).asInteger() == 1073741824",
        "quantity(self.value).isInteger()",
        "quantity(self.value).sign() == 1",
        "quantity(self.value).add(quantity('1Gi')) == quantity('2Gi')",
        "quantity(self.value).sub(1073741824).sign() == 0",
        "quantity('500m').asApproximateFloat() == 0.5",
        "!isQuantity('1.5.5')",
    ] {
        assert!(holds(rule, q.clone(), json!("1Gi")), "{rule}");
    }
    assert!(holds(
        "quantity(string(self.value)).asInteger() == 4",
        q.clone(),
        json!(4)
    ));
    assert_eq!(
        common::eval("quantity(self.value).sign() >= 0", q, json!("lots")),
        [
            "spec: Invalid value: \"object\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' evaluating rule: quantity(self.value).sign() >= 0"
        ]
    );
}

#[test]
fn kubernetes_url_ip_cidr_and_format_libraries() {
    let s = str_schema();
    for (rule, value) in [
        (
            "isURL(self.value) && url(self.value).getScheme() == 'https'",
            "https://example.com:8443/a/b?x=1&x=2",
        ),
        (
            "url(self.value).getHostname() == 'example.com' && url(self.value).getPort() == '8443'",
            "https://example.com:8443/a/b?x=1&x=2",
        ),
        (
            "url(self.value).getEscapedPath() == '/a/b' && url(self.value).getQuery()['x'] == ['1', '2']",
            "https://example.com:8443/a/b?x=1&x=2",
        ),
        (
            "isIP(self.value) && ip(self.value).family() == 4 && ip(self.value).isGlobalUnicast()",
            "10.1.2.3",
        ),
        ("ip.isCanonical(self.value)", "2001:db8::1"),
        ("!isIP(self.value)", "::ffff:10.0.0.1"),
        (
            "cidr(self.value).containsIP('10.0.0.7') && !cidr(self.value).containsIP(ip('11.0.0.1'))",
            "10.0.0.0/8",
        ),
        (
            "cidr(self.value).prefixLength() == 8 && cidr(self.value).containsCIDR('10.1.0.0/16')",
            "10.0.0.0/8",
        ),
        (
            "string(cidr('10.1.2.3/8').masked()) == self.value",
            "10.0.0.0/8",
        ),
        (
            "!format.dns1123Label().validate(self.value).hasValue()",
            "my-pool",
        ),
        (
            "format.dns1123Label().validate(self.value).hasValue()",
            "My_Pool",
        ),
        (
            "format.named('labelValue').hasValue() && !format.named('nope').hasValue()",
            "x",
        ),
    ] {
        assert!(holds(rule, s.clone(), json!(value)), "{rule} on {value}");
    }
}

#[test]
fn rules_at_the_resource_root_see_name_and_type() {
    let mut crd = common::crd_with_spec(
        json!({"type": "object", "properties": {"size": {"type": "integer"}}}),
    );
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = json!([
        {"rule": "self.metadata.name.startsWith('w') && self.kind == 'Widget'", "message": "widgets are named w*"}
    ]);
    let v = crd_validation::CrdValidator::new(&crd).expect("compiles");
    let mut obj = common::widget(json!({}));
    assert!(v.validate("v1", &mut obj, None).expect("served").is_valid());
    obj["metadata"]["name"] = json!("x");
    assert_eq!(
        common::messages(&v.validate("v1", &mut obj, None).expect("served")),
        ["<nil>: Invalid value: widgets are named w*"]
    );
}

fn rule_error(rule: &str) -> String {
    match compile_error(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
        "x-kubernetes-validations": [{"rule": "has(self.name)"}, {"rule": rule}]
    })) {
        CompileError::Rule { path, message, .. } => format!("{path}: {message}"),
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn crds_whose_rules_do_not_compile_are_rejected() {
    assert_eq!(
        rule_error("self.nmae == 'x'"),
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule: compilation failed: ERROR: <input>:1:5: undefined field 'nmae'\n | self.nmae == 'x'\n | ....^"
    );
    assert!(rule_error("self.name.lenght() > 0").contains("undeclared reference to 'lenght'"));
    assert!(rule_error("nosuch == 1").contains("undeclared reference to 'nosuch'"));
    assert!(rule_error("self.name ==").starts_with(
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule: compilation failed: "
    ));
    assert!(rule_error("self.labels.all(k, self.labels[k].sizee() > 0)").contains("'sizee'"));
    // Maps may be indexed by any key.
    let v = validator(json!({
        "type": "object",
        "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}},
        "x-kubernetes-validations": [{"rule": "!has(self.labels) || !has(self.labels.team) || self.labels.team != ''"}]
    }));
    assert!(check(&v, json!({"labels": {"team": "a"}})).is_empty());

    let err = compile_error(json!({
        "type": "object",
        "properties": {"tags": {
            "type": "array",
            "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}
        }}
    }));
    assert_eq!(
        err.to_string(),
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].items"
    );

    let err = compile_error(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "true", "fieldPath": ".nope"}]
    }));
    assert!(
        err.to_string()
            .contains("fieldPath must be a valid path: does not refer to a valid field"),
        "{err}"
    );
    let err = compile_error(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "true", "reason": "Sometimes"}]
    }));
    assert!(
        err.to_string()
            .contains("x-kubernetes-validations[0].reason"),
        "{err}"
    );
    let err = compile_error(json!({"type": "string", "pattern": "a(b"}));
    assert!(err.to_string().starts_with("spec.versions[0].schema.openAPIV3Schema.properties[spec].pattern: Invalid value: \"a(b\""), "{err}");
}
