//! The passes the apiserver runs over a custom resource, in its order:
//!
//! 1. pruning of unknown fields (reported, then removed),
//! 2. pruning of `null`s in non-nullable fields, then defaulting,
//! 3. OpenAPI value validation (kube-openapi's messages and paths),
//! 4. embedded resources' `apiVersion`/`kind`/`metadata`,
//! 5. `x-kubernetes-list-type` `set`/`map` uniqueness,
//! 6. `x-kubernetes-validations` rules.

use karpenter_core::object_meta;
use serde_json::{Map, Value as Json};

use crate::cel::{self, RuleNode, RuleResults};
use crate::error::{BadValue, Source, Violation, ViolationKind, go_float, go_quote};
use crate::formats;
use crate::meta;
use crate::schema::{ListType, Schema, SchemaType};

/// `base.child` (a field path).
pub(crate) fn child(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_string()
    } else {
        format!("{base}.{name}")
    }
}

fn index(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

fn key(base: &str, k: &str) -> String {
    format!("{base}[{k}]")
}

// ---------------------------------------------------------------- pruning

/// Removes the fields the schema does not know, recording their paths.
pub(crate) fn prune(
    v: &mut Json,
    s: &Schema,
    path: &str,
    resource_root: bool,
    unknown: &mut Vec<String>,
) {
    match v {
        Json::Object(map) => {
            let root_like = resource_root || s.embedded;
            let mut pruned: Vec<String> = Vec::new();
            for (k, c) in map.iter_mut() {
                let cpath = child(path, k);
                if root_like && k == "metadata" {
                    prune_metadata(c, &cpath, unknown);
                    continue;
                }
                if root_like && (k == "apiVersion" || k == "kind") && s.prop(k).is_none() {
                    continue;
                }
                if let Some(p) = s.prop(k) {
                    prune(c, p, &cpath, false, unknown);
                } else if let Some(ap) = s.additional_schema() {
                    prune(c, ap, &cpath, false, unknown);
                } else if !s.keeps_unknown() {
                    pruned.push(k.clone());
                    unknown.push(cpath);
                }
            }
            if !pruned.is_empty() {
                map.retain(|k, _| !pruned.contains(k));
            }
        }
        Json::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item, is, &index(path, i), false, unknown);
                }
            }
        }
        _ => {}
    }
}

fn prune_metadata(v: &mut Json, path: &str, unknown: &mut Vec<String>) {
    if let Json::Object(map) = v {
        let mut pruned = Vec::new();
        for k in map.keys() {
            if !object_meta::is_field(k) {
                pruned.push(k.clone());
                unknown.push(child(path, k));
            }
        }
        if !pruned.is_empty() {
            map.retain(|k, _| !pruned.contains(k));
        }
    }
}

/// `PruneNonNullableNullsWithoutDefaults`.
pub(crate) fn prune_nulls(v: &mut Json, s: &Schema) {
    match v {
        Json::Object(map) => {
            map.retain(|k, c| match s.child(k) {
                Some(cs) => !(c.is_null() && !cs.nullable && cs.default.is_none()),
                None => true,
            });
            for (k, c) in map.iter_mut() {
                if let Some(cs) = s.child(k) {
                    prune_nulls(c, cs);
                }
            }
        }
        Json::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for item in items {
                    prune_nulls(item, is);
                }
            }
        }
        _ => {}
    }
}

// -------------------------------------------------------------- defaulting

/// `structuraldefaulting.Default`: fills in missing (or non-nullable
/// `null`) fields with their `default`, then defaults inside every field,
/// the defaulted ones included.
pub(crate) fn apply_defaults(v: &mut Json, s: &Schema) {
    match v {
        Json::Object(map) => {
            for (k, p) in &s.properties {
                let Some(d) = &p.default else { continue };
                match map.get_mut(k) {
                    None => {
                        map.insert(k.clone(), d.clone());
                    }
                    Some(existing) if existing.is_null() && !p.nullable => *existing = d.clone(),
                    Some(_) => {}
                }
            }
            for (k, c) in map.iter_mut() {
                if let Some(p) = s.prop(k) {
                    apply_defaults(c, p);
                } else if let Some(ap) = s.additional_schema() {
                    if c.is_null()
                        && !ap.nullable
                        && let Some(d) = &ap.default
                    {
                        *c = d.clone();
                    }
                    apply_defaults(c, ap);
                }
            }
        }
        Json::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for item in items.iter_mut() {
                    if item.is_null()
                        && !is.nullable
                        && let Some(d) = &is.default
                    {
                        *item = d.clone();
                    }
                    apply_defaults(item, is);
                }
            }
        }
        _ => {}
    }
}

// ------------------------------------------------------- schema validation

/// Collects violations, setting aside those a ratcheting apiserver turns
/// into warnings (value validations of fields that did not change).
#[derive(Default)]
pub(crate) struct Collector {
    pub violations: Vec<Violation>,
    pub ratcheted: Vec<Violation>,
}

impl Collector {
    fn push(&mut self, v: Violation, ratchet: bool) {
        if ratchet {
            self.ratcheted.push(v);
        } else {
            self.violations.push(v);
        }
    }
}

fn json_type(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(n) => {
            if n.is_i64() || n.is_u64() {
                "integer"
            } else {
                "number"
            }
        }
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

fn is_json_integer(f: f64) -> bool {
    f.is_finite() && (f - f.round()).abs() <= 1e-9 * f.abs().max(1.0)
}

fn schema_violation(path: &str, kind: ViolationKind, value: BadValue, detail: String) -> Violation {
    Violation::new(path, kind, value, detail, Source::Schema)
}

/// A composite (`anyOf`, `oneOf`, `not`) failure: kube-openapi reports
/// them without a field path.
fn composite(path: &str, what: &str) -> Violation {
    Violation::new(
        "<nil>",
        ViolationKind::Invalid,
        BadValue::string(""),
        format!("{} {what}", go_quote(path)),
        Source::Schema,
    )
}

/// Where a value stands in the object under validation, for both walks
/// (OpenAPI and rules): kube-openapi's path (`spec.limits.cpu`,
/// `spec.requirements[0].key`), the correlated old value, whether an
/// ancestor is unchanged (ratcheting), and whether the value is a
/// resource's root (whose `metadata` is ObjectMeta).
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) path: &'a str,
    pub(crate) old: Option<&'a Json>,
    pub(crate) parent_unchanged: bool,
    pub(crate) resource_root: bool,
}

impl<'a> At<'a> {
    /// The top of a walk, with its old value.
    pub(crate) fn top(old: Option<&'a Json>, resource_root: bool) -> Self {
        At {
            path: "",
            old,
            parent_unchanged: false,
            resource_root,
        }
    }

    /// A value below another, not a resource's root.
    fn below(path: &'a str, old: Option<&'a Json>, parent_unchanged: bool) -> Self {
        At {
            path,
            old,
            parent_unchanged,
            resource_root: false,
        }
    }

    /// Whether `v` here is unchanged: an ancestor is, or it equals its
    /// old value (what ratcheting forgives).
    fn unchanged(&self, v: &Json) -> bool {
        self.parent_unchanged || self.old.is_some_and(|o| o == v)
    }

    /// The same place, a resource's root or not.
    fn root(self, resource_root: bool) -> Self {
        At {
            resource_root,
            ..self
        }
    }
}

/// Whether `v` satisfies `s` (for `anyOf`/`oneOf`/`not`).
fn satisfies(v: &Json, s: &Schema, path: &str) -> bool {
    let mut c = Collector::default();
    validate_value(v, s, At::below(path, None, false), &mut c);
    c.violations.is_empty() && c.ratcheted.is_empty()
}

fn is_int_or_string_any_of(s: &Schema) -> bool {
    s.int_or_string
        && s.any_of.len() == 2
        && s.any_of.iter().any(|a| a.ty == Some(SchemaType::Integer))
        && s.any_of.iter().any(|a| a.ty == Some(SchemaType::String))
}

/// OpenAPI validation of `v` against `s`, as kube-openapi's schema
/// validator does it for custom resources.
pub(crate) fn validate_value(v: &Json, s: &Schema, at: At<'_>, out: &mut Collector) {
    let (path, old, resource_root) = (at.path, at.old, at.resource_root);
    let unchanged = at.unchanged(v);
    // A value of the wrong type is reported once; nothing else is checked.
    if !check_type(v, s, path, out) {
        return;
    }
    validate_composites(v, s, path, old, unchanged, out);
    match v {
        Json::String(st) => validate_string(st, s, path, unchanged, out),
        Json::Number(n) => validate_number(v, n, s, path, unchanged, out),
        Json::Array(items) => validate_array(items, s, path, old, unchanged, out),
        _ => {}
    }
    validate_enum(v, s, path, unchanged, out);
    if let Json::Object(map) = v {
        validate_object(map, s, path, old, unchanged, resource_root, out);
    }
}

/// `type` (with `nullable` and `x-kubernetes-int-or-string`). Returns
/// whether the value's type is acceptable and validation goes on; a `null`
/// that is allowed stops it too.
fn check_type(v: &Json, s: &Schema, path: &str, out: &mut Collector) -> bool {
    let data_ty = json_type(v);
    let type_invalid = |bad: &str, expected: &str, got: &str| {
        schema_violation(
            path,
            ViolationKind::TypeInvalid,
            BadValue::string(bad),
            format!("{path} in body must be of type {expected}: {got}"),
        )
    };
    if v.is_null() {
        if s.nullable || (s.ty.is_none() && !s.int_or_string) {
            return false;
        }
        let t = if s.int_or_string {
            "integer,string"
        } else {
            s.type_name()
        };
        out.push(type_invalid("null", t, "\"null\""), false);
        return false;
    }
    if s.int_or_string {
        if data_ty != "integer" && data_ty != "string" {
            let v = type_invalid(data_ty, "integer,string", &go_quote(data_ty));
            out.push(v, false);
            return false;
        }
    } else if let Some(t) = s.ty {
        let ok = t.as_str() == data_ty
            || (t == SchemaType::Integer
                && data_ty == "number"
                && v.as_f64().is_some_and(is_json_integer))
            || (t == SchemaType::Number && data_ty == "integer");
        if !ok {
            out.push(type_invalid(data_ty, t.as_str(), &go_quote(data_ty)), false);
            return false;
        }
    }
    true
}

/// `allOf`, `anyOf`, `oneOf` and `not`.
fn validate_composites(
    v: &Json,
    s: &Schema,
    path: &str,
    old: Option<&Json>,
    unchanged: bool,
    out: &mut Collector,
) {
    for sub in &s.all_of {
        validate_value(v, sub, At::below(path, old, unchanged), out);
    }
    if !s.any_of.is_empty()
        && !is_int_or_string_any_of(s)
        && !s.any_of.iter().any(|a| satisfies(v, a, path))
    {
        out.push(
            composite(path, "must validate at least one schema (anyOf)"),
            unchanged,
        );
    }
    if !s.one_of.is_empty() {
        let n = s.one_of.iter().filter(|a| satisfies(v, a, path)).count();
        if n != 1 {
            let found = if n == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {n} valid alternatives")
            };
            out.push(
                composite(
                    path,
                    &format!("must validate one and only one schema (oneOf). {found}"),
                ),
                unchanged,
            );
        }
    }
    if let Some(not) = &s.not
        && satisfies(v, not, path)
    {
        out.push(
            composite(path, "must not validate the schema (not)"),
            unchanged,
        );
    }
}

/// `minItems`, `maxItems`, then each item against `items` (correlated with
/// the old list's item, for ratcheting).
fn validate_array(
    items: &[Json],
    s: &Schema,
    path: &str,
    old: Option<&Json>,
    unchanged: bool,
    out: &mut Collector,
) {
    let size = items.len() as u64;
    check_min_count(path, size, s.min_items, "items", unchanged, out);
    check_max_count(path, size, s.max_items, unchanged, out);
    if let Some(is) = s.items.as_deref() {
        let old_items = old.and_then(Json::as_array);
        for (i, item) in items.iter().enumerate() {
            let old_item = correlate_item(s, is, item, old_items);
            let item_path = index(path, i);
            let at = At::below(&item_path, old_item, unchanged);
            validate_value(item, is, at.root(is.embedded), out);
        }
    }
}

/// `minItems` or `minProperties` (`noun` says which).
fn check_min_count(
    path: &str,
    count: u64,
    min: Option<u64>,
    noun: &str,
    unchanged: bool,
    out: &mut Collector,
) {
    if let Some(min) = min
        && count < min
    {
        out.push(
            schema_violation(
                path,
                ViolationKind::Invalid,
                BadValue::Json(Json::from(count)),
                format!("{path} in body should have at least {min} {noun}"),
            ),
            unchanged,
        );
    }
}

/// `maxItems` or `maxProperties`: kube-openapi words both as items.
fn check_max_count(path: &str, count: u64, max: Option<u64>, unchanged: bool, out: &mut Collector) {
    if let Some(max) = max
        && count > max
    {
        out.push(
            schema_violation(
                path,
                ViolationKind::TooMany,
                BadValue::Json(Json::from(count)),
                format!("must have at most {max} items"),
            ),
            unchanged,
        );
    }
}

/// `enum`: the value must be one of the listed ones.
fn validate_enum(v: &Json, s: &Schema, path: &str, unchanged: bool, out: &mut Collector) {
    let Some(allowed) = &s.enum_values else {
        return;
    };
    if allowed.iter().any(|a| a == v) {
        return;
    }
    let supported: Vec<String> = allowed
        .iter()
        .map(|a| match a {
            Json::String(s) => go_quote(s),
            other => go_quote(&other.to_string()),
        })
        .collect();
    out.push(
        schema_violation(
            path,
            ViolationKind::NotSupported,
            BadValue::Json(v.clone()),
            format!("supported values: {}", supported.join(", ")),
        ),
        unchanged,
    );
}

fn validate_string(st: &str, s: &Schema, path: &str, unchanged: bool, out: &mut Collector) {
    let value = || BadValue::string(st);
    let len = st.chars().count() as u64;
    if let Some(max) = s.max_length
        && len > max
    {
        let unit = if max == 1 { "byte" } else { "bytes" };
        out.push(
            schema_violation(
                path,
                ViolationKind::TooLong,
                value(),
                format!("may not be more than {max} {unit}"),
            ),
            unchanged,
        );
    }
    if let Some(min) = s.min_length
        && len < min
    {
        out.push(
            schema_violation(
                path,
                ViolationKind::Invalid,
                value(),
                format!("{path} in body should be at least {min} chars long"),
            ),
            unchanged,
        );
    }
    if let Some(p) = &s.pattern
        && !p.regex.is_match(st)
    {
        out.push(
            schema_violation(
                path,
                ViolationKind::Invalid,
                value(),
                format!("{path} in body should match '{}'", p.source),
            ),
            unchanged,
        );
    }
    if let Some(f) = &s.format
        && s.ty != Some(SchemaType::Integer)
        && s.ty != Some(SchemaType::Number)
        && !formats::is_valid(f, st)
    {
        out.push(
            schema_violation(
                path,
                ViolationKind::TypeInvalid,
                value(),
                format!("{path} in body must be of type {f}: {}", go_quote(st)),
            ),
            unchanged,
        );
    }
}

fn validate_number(
    v: &Json,
    n: &serde_json::Number,
    s: &Schema,
    path: &str,
    unchanged: bool,
    out: &mut Collector,
) {
    let value = || BadValue::Json(v.clone());
    let f = n.as_f64().unwrap_or(f64::NAN);

    // Is the value within the range of its type and format?
    let (kind, in_range) = match (s.ty, s.format.as_deref()) {
        (Some(SchemaType::Integer), Some("int32")) => (
            "int32",
            n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
        ),
        (Some(SchemaType::Integer), Some("uint32")) => (
            "uint32",
            n.as_u64().is_some_and(|i| u32::try_from(i).is_ok()),
        ),
        (Some(SchemaType::Integer), Some("uint64")) => ("uint64", n.as_u64().is_some()),
        (Some(SchemaType::Integer), Some("int64")) => ("int64", n.as_i64().is_some()),
        (Some(SchemaType::Integer), _) => ("integer", n.as_i64().is_some() || !n.is_u64()),
        (_, Some("float")) => ("float", f.abs() <= f64::from(f32::MAX)),
        _ => ("", true),
    };
    if !in_range {
        out.push(
            schema_violation(
                path,
                ViolationKind::TypeInvalid,
                value(),
                format!("{path} in Checked must be of type {kind}"),
            ),
            false,
        );
    }

    if let Some(m) = s.multiple_of {
        let ok = match n.as_i64() {
            Some(i) if m.fract() == 0.0 && m.abs() < 9.2e18 => i % (m as i64) == 0,
            _ => is_json_integer(if m < 1.0 { 1.0 / m * f } else { f / m }),
        };
        if !ok {
            out.push(
                schema_violation(
                    path,
                    ViolationKind::Invalid,
                    value(),
                    format!("{path} in body should be a multiple of {}", go_float(m)),
                ),
                unchanged,
            );
        }
    }
    // `maximum` and `minimum`, each maybe exclusive.
    let bounds = [
        (s.maximum, s.exclusive_maximum, true, "less than"),
        (s.minimum, s.exclusive_minimum, false, "greater than"),
    ];
    for (bound, exclusive, upper, relation) in bounds {
        let Some(bound) = bound else {
            continue;
        };
        let beyond = if upper { f > bound } else { f < bound };
        if beyond || (exclusive && f == bound) {
            let rel = if exclusive {
                relation.to_string()
            } else {
                format!("{relation} or equal to")
            };
            out.push(
                schema_violation(
                    path,
                    ViolationKind::Invalid,
                    value(),
                    format!("{path} in body should be {rel} {}", go_float(bound)),
                ),
                unchanged,
            );
        }
    }
}

fn validate_object(
    map: &Map<String, Json>,
    s: &Schema,
    path: &str,
    old: Option<&Json>,
    unchanged: bool,
    resource_root: bool,
    out: &mut Collector,
) {
    let count = map.len() as u64;
    check_max_count(path, count, s.max_properties, unchanged, out);
    check_min_count(path, count, s.min_properties, "properties", unchanged, out);
    for r in &s.required {
        if !map.contains_key(r) {
            out.push(
                schema_violation(
                    &child(path, r),
                    ViolationKind::Required,
                    BadValue::Omitted,
                    String::new(),
                ),
                false,
            );
        }
    }
    let old_map = if s.map_type_atomic {
        None
    } else {
        old.and_then(Json::as_object)
    };
    for (k, c) in map {
        let cs = s.child(k);
        let Some(cs) = cs else { continue };
        let old_c = old_map.and_then(|m| m.get(k));
        // The resource root's metadata is checked as ObjectMeta; only the
        // schema's constraints on name/generateName apply.
        let child_root = cs.embedded && !(resource_root && k == "metadata");
        let child_path = child(path, k);
        let at = At::below(&child_path, old_c, unchanged);
        validate_value(c, cs, at.root(child_root), out);
    }
}

/// The old item correlated with `item`: by key for `map` lists, none otherwise.
fn correlate_item<'o>(
    list: &Schema,
    items: &Schema,
    item: &Json,
    old_items: Option<&'o Vec<Json>>,
) -> Option<&'o Json> {
    if list.list_type != Some(ListType::Map) {
        return None;
    }
    let old_items = old_items?;
    let keys = map_key(list, items, item)?;
    old_items
        .iter()
        .find(|o| map_key(list, items, o).is_some_and(|k| k == keys))
}

/// The values of a `map` list item's keys (defaults filled in).
fn map_key(list: &Schema, items: &Schema, item: &Json) -> Option<Vec<Json>> {
    let obj = item.as_object()?;
    list.list_map_keys
        .iter()
        .map(|k| {
            obj.get(k)
                .cloned()
                .or_else(|| items.prop(k).and_then(|p| p.default.clone()))
        })
        .collect()
}

// ------------------------------------------------------ embedded resources

/// Calls `visit` with every child of `v` that `s` has a schema for, that schema and the child's
/// path (`path.k` for a property, `path[k]` for an additionalProperties entry, `path[i]` for a
/// list item): the descent of the read-only passes.
fn for_each_child<'v>(
    v: &'v Json,
    s: &'v Schema,
    path: &str,
    mut visit: impl FnMut(&'v Json, &'v Schema, &str),
) {
    match v {
        Json::Object(map) => {
            for (k, c) in map {
                if let Some(p) = s.prop(k) {
                    visit(c, p, &child(path, k));
                } else if let Some(ap) = s.additional_schema() {
                    visit(c, ap, &key(path, k));
                }
            }
        }
        Json::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for (i, item) in items.iter().enumerate() {
                    visit(item, is, &index(path, i));
                }
            }
        }
        _ => {}
    }
}

/// `schemaobjectmeta.Validate`: embedded resources' type and object meta.
pub(crate) fn validate_embedded(
    v: &Json,
    s: &Schema,
    path: &str,
    is_root: bool,
    out: &mut Vec<Violation>,
) {
    if let Json::Object(map) = v
        && s.embedded
        && !is_root
    {
        meta::validate_embedded(map, path, out);
    }
    for_each_child(v, s, path, |c, cs, cpath| {
        validate_embedded(c, cs, cpath, false, out);
    });
}

// ------------------------------------------------------------- list types

/// `ValidateListSetsAndMaps`: items of `set` lists and keys of `map` lists
/// are unique.
pub(crate) fn validate_list_types(v: &Json, s: &Schema, path: &str, out: &mut Vec<Violation>) {
    if let Json::Array(items) = v {
        match s.list_type {
            Some(ListType::Set) => validate_set(items, path, out),
            Some(ListType::Map) => {
                if let Some(is) = s.items.as_deref() {
                    validate_map_list(items, s, is, path, out);
                }
            }
            _ => {}
        }
    }
    for_each_child(v, s, path, |c, cs, cpath| {
        validate_list_types(c, cs, cpath, out);
    });
}

fn list_violation(path: String, kind: ViolationKind, value: BadValue, detail: &str) -> Violation {
    Violation::new(path, kind, value, detail, Source::ListType)
}

fn validate_set(items: &[Json], path: &str, out: &mut Vec<Violation>) {
    let mut seen: Vec<(&Json, usize)> = Vec::with_capacity(items.len());
    for (i, x) in items.iter().enumerate() {
        match seen.iter_mut().find(|(v, _)| *v == x) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    out.push(list_violation(
                        index(path, i),
                        ViolationKind::Duplicate,
                        BadValue::Json(x.clone()),
                        "",
                    ));
                }
            }
            None => seen.push((x, 1)),
        }
    }
}

fn validate_map_list(
    items: &[Json],
    list: &Schema,
    is: &Schema,
    path: &str,
    out: &mut Vec<Violation>,
) {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            out.push(list_violation(
                index(path, i),
                ViolationKind::Invalid,
                BadValue::Json(x.clone()),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if items.len() <= 1 {
        return;
    }
    let mut seen: Vec<(Vec<Json>, usize)> = Vec::new();
    for (i, x) in items.iter().enumerate() {
        let Some(obj) = x.as_object() else { continue };
        let mut keys = Vec::with_capacity(list.list_map_keys.len());
        for k in &list.list_map_keys {
            match obj
                .get(k)
                .cloned()
                .or_else(|| is.prop(k).and_then(|p| p.default.clone()))
            {
                Some(val) => keys.push(val),
                None => {
                    out.push(list_violation(
                        child(&index(path, i), k),
                        ViolationKind::Required,
                        BadValue::Omitted,
                        "",
                    ));
                    return;
                }
            }
        }
        match seen.iter_mut().find(|(v, _)| *v == keys) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    let value: Map<String, Json> = list
                        .list_map_keys
                        .iter()
                        .cloned()
                        .zip(keys.iter().cloned())
                        .collect();
                    out.push(list_violation(
                        index(path, i),
                        ViolationKind::Duplicate,
                        BadValue::Json(Json::Object(value)),
                        "",
                    ));
                }
            }
            None => seen.push((keys, 1)),
        }
    }
}

// ------------------------------------------------------------------ rules

/// Evaluates every `x-kubernetes-validations` rule below `s`, with
/// `oldSelf` correlated the way the apiserver correlates it.
pub(crate) fn eval_rules(v: &Json, s: &Schema, at: At<'_>, out: &mut RuleResults) {
    if !s.has_rules || v.is_null() {
        return;
    }
    let (path, old, resource_root) = (at.path, at.old, at.resource_root);
    let unchanged = at.unchanged(v);
    let node = RuleNode {
        schema: s,
        rules: &s.rules,
        resource_root: resource_root || s.embedded,
    };
    cel::eval_node(&node, v, old, path, unchanged, out);
    for sub in &s.all_of {
        let node = RuleNode {
            schema: s,
            rules: &sub.rules,
            resource_root: resource_root || s.embedded,
        };
        cel::eval_node(&node, v, old, path, unchanged, out);
    }
    match v {
        Json::Object(map) => {
            let old_map = if s.map_type_atomic {
                None
            } else {
                old.and_then(Json::as_object)
            };
            for (k, c) in map {
                let old_c = old_map.and_then(|m| m.get(k));
                if let Some(p) = s.prop(k) {
                    if resource_root && k == "metadata" {
                        continue;
                    }
                    eval_rules(c, p, At::below(&child(path, k), old_c, unchanged), out);
                } else if let Some(ap) = s.additional_schema() {
                    eval_rules(c, ap, At::below(&key(path, k), old_c, unchanged), out);
                }
            }
        }
        Json::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                let old_items = old.and_then(Json::as_array);
                for (i, item) in items.iter().enumerate() {
                    let old_item = correlate_item(s, is, item, old_items);
                    eval_rules(
                        item,
                        is,
                        At::below(&index(path, i), old_item, unchanged),
                        out,
                    );
                }
            }
        }
        _ => {}
    }
}
