//! The four patch kinds the apiserver accepts, and field ownership for
//! server-side apply.
//!
//! ```text
//!   application/merge-patch+json            RFC 7386 (any kind)
//!   application/json-patch+json             RFC 6902 (any kind)
//!   application/strategic-merge-patch+json  lists merged by their Go struct's
//!                                           patchMergeKey (built-ins only)
//!   application/apply-patch+yaml            server-side apply: merge the
//!                                           applied config, record its fields
//!                                           under the manager, drop fields the
//!                                           manager stopped applying, 409 on
//!                                           another manager's field
//! ```

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::store::ApiError;

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn pointer_tokens(path: &str) -> Result<Vec<String>, ApiError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| ApiError::unprocessable(format!("invalid JSON pointer {path:?}")))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn json_patch_add(
    doc: &mut Value,
    path: &str,
    value: Value,
    replace: bool,
) -> Result<(), ApiError> {
    let mut tokens = pointer_tokens(path)?;
    let Some(last) = tokens.pop() else {
        *doc = value;
        return Ok(());
    };
    let mut cur = doc;
    for t in &tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| ApiError::unprocessable(format!("doc is missing path: {path:?}")))?;
    }
    match cur {
        Value::Object(m) => {
            if replace && !m.contains_key(&last) {
                return Err(ApiError::unprocessable(format!(
                    "replace operation does not apply: doc is missing key: {path}"
                )));
            }
            m.insert(last, value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last
                    .parse()
                    .map_err(|_| ApiError::unprocessable(format!("invalid index in {path:?}")))?;
                if replace {
                    *a.get_mut(i).ok_or_else(|| {
                        ApiError::unprocessable(format!("index out of range in {path:?}"))
                    })? = value;
                } else if i <= a.len() {
                    a.insert(i, value);
                } else {
                    return Err(ApiError::unprocessable(format!(
                        "index out of range in {path:?}"
                    )));
                }
            }
        }
        _ => {
            return Err(ApiError::unprocessable(format!(
                "doc is missing path: {path:?}"
            )));
        }
    }
    Ok(())
}

fn json_patch_remove(doc: &mut Value, path: &str) -> Result<Value, ApiError> {
    let mut tokens = pointer_tokens(path)?;
    let last = tokens
        .pop()
        .ok_or_else(|| ApiError::unprocessable("cannot remove the whole document"))?;
    let parent: String = tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect();
    let missing = || {
        ApiError::unprocessable(format!(
            "remove operation does not apply: doc is missing path: {path:?}"
        ))
    };
    match doc.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i < a.len() {
                Ok(a.remove(i))
            } else {
                Err(missing())
            }
        }
        _ => Err(missing()),
    }
}

/// RFC 6902 JSON patch. A patch that is no list of operations is a 400;
/// one that does not apply is the handler's generic 422 (the patch
/// library's own words are not passed on).
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), ApiError> {
    let ops = ops
        .as_array()
        .ok_or_else(|| ApiError::bad_request("json patch must be an array of operations"))?;
    apply_operations(doc, ops).map_err(|e| {
        tracing::debug!(error = %e, "json patch does not apply");
        ApiError::unprocessable("the server rejected our request due to an error in our request")
    })
}

fn apply_operations(doc: &mut Value, ops: &[Value]) -> Result<(), ApiError> {
    for op in ops {
        let path = op["path"].as_str().unwrap_or_default();
        match op["op"].as_str().unwrap_or_default() {
            "add" => json_patch_add(doc, path, op["value"].clone(), false)?,
            "replace" => json_patch_add(doc, path, op["value"].clone(), true)?,
            "remove" => {
                json_patch_remove(doc, path)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&op["value"]) {
                    return Err(ApiError::unprocessable(format!(
                        "testing value {path} failed: test failed"
                    )));
                }
            }
            "move" => {
                let from = op["from"].as_str().unwrap_or_default();
                let v = json_patch_remove(doc, from)?;
                json_patch_add(doc, path, v, false)?;
            }
            "copy" => {
                let from = op["from"].as_str().unwrap_or_default();
                let v = doc.pointer(from).cloned().ok_or_else(|| {
                    ApiError::unprocessable(format!("copy from {from:?}: missing path"))
                })?;
                json_patch_add(doc, path, v, false)?;
            }
            other => {
                return Err(ApiError::unprocessable(format!(
                    "unexpected json patch op {other:?}"
                )));
            }
        }
    }
    Ok(())
}

/// The `patchMergeKey` of a built-in list field, by field name (the Go
/// structs' tags), for lists of objects.
pub fn merge_key(field: &str, sample: Option<&Value>) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "readinessGates"
        | "resourceClaims" => match field {
            "readinessGates" => "conditionType",
            _ => "name",
        },
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => {
            if sample.is_some_and(|s| s.get("containerPort").is_some()) {
                "containerPort"
            } else {
                "port"
            }
        }
        "conditions" | "addresses" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "taints" => "key",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists of scalars that strategic merge patch unions (`patchStrategy:merge`).
fn merges_primitives(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch, as the apiserver applies it to built-in kinds.
pub fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut p = p.clone();
            p.remove("$patch");
            *target = Value::Object(p);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };
    if let Some(retain) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: BTreeSet<&str> = retain.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(k.as_str()));
    }
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (t.get_mut(field), v.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(Value::Array(orig)), Value::Array(items)) => {
                merge_list(k, orig, items)?;
            }
            (Some(existing @ Value::Object(_)), Value::Object(_)) => {
                strategic_merge(existing, v)?;
                if existing.is_null() {
                    t.remove(k);
                }
            }
            _ => {
                let mut fresh = Value::Null;
                if v.is_object() {
                    strategic_merge(&mut fresh, v)?;
                } else if let Value::Array(items) = v {
                    let mut list = Vec::new();
                    merge_list(k, &mut list, items)?;
                    fresh = Value::Array(list);
                } else {
                    fresh = v.clone();
                }
                if !fresh.is_null() {
                    t.insert(k.clone(), fresh);
                }
            }
        }
    }
    Ok(())
}

fn merge_list(field: &str, orig: &mut Vec<Value>, items: &[Value]) -> Result<(), ApiError> {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *orig = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect();
        return Ok(());
    }
    if merges_primitives(field) {
        for i in items {
            if !orig.contains(i) {
                orig.push(i.clone());
            }
        }
        return Ok(());
    }
    let sample = items.first().or(orig.first());
    let Some(key) = merge_key(field, sample).filter(|_| sample.is_some_and(Value::is_object))
    else {
        *orig = items.to_vec();
        return Ok(());
    };
    for item in items {
        let id = &item[key];
        let pos = orig.iter().position(|o| &o[key] == id);
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(pos) = pos {
                orig.remove(pos);
            }
            continue;
        }
        match pos {
            Some(pos) => strategic_merge(&mut orig[pos], item)?,
            None => {
                let mut fresh = Value::Null;
                strategic_merge(&mut fresh, item)?;
                orig.push(fresh);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Server-side apply.

/// One path element of a managed field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathElem {
    Field(String),
    /// A list item by its key (`k:{"name":"app"}`).
    Key(String, String),
}

pub type FieldPath = Vec<PathElem>;

const SKIPPED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
];

/// The leaf paths an object sets (what a manager owns when it sets them).
pub fn leaf_paths(obj: &Value, keyed_lists: bool) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    if let Value::Object(m) = obj {
        for (k, v) in m {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            let mut path = vec![PathElem::Field(k.clone())];
            if k == "metadata" {
                if let Value::Object(meta) = v {
                    for (mk, mv) in meta {
                        if SKIPPED_META.contains(&mk.as_str()) {
                            continue;
                        }
                        path.push(PathElem::Field(mk.clone()));
                        walk(mv, mk, &mut path, &mut out, keyed_lists);
                        path.pop();
                    }
                }
                continue;
            }
            walk(v, k, &mut path, &mut out, keyed_lists);
        }
    }
    out
}

fn walk(v: &Value, field: &str, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>, keyed: bool) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(PathElem::Field(k.clone()));
                walk(child, k, path, out, keyed);
                path.pop();
            }
        }
        Value::Array(items) if keyed && !items.is_empty() => {
            match merge_key(field, items.first()).filter(|_| items.iter().all(Value::is_object)) {
                Some(key) => {
                    for item in items {
                        path.push(PathElem::Key(key.to_string(), key_repr(&item[key])));
                        walk(item, "", path, out, keyed);
                        path.pop();
                    }
                }
                None => {
                    out.insert(path.clone());
                }
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

fn key_repr(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The value at a managed path, if present.
pub fn get_path<'a>(obj: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = obj;
    for e in path {
        cur = match e {
            PathElem::Field(f) => cur.get(f)?,
            PathElem::Key(k, v) => cur
                .as_array()?
                .iter()
                .find(|i| key_repr(&i[k.as_str()]) == *v)?,
        };
    }
    Some(cur)
}

/// Removes the value at a managed path (a list item when the path ends in a key).
pub fn remove_path(obj: &mut Value, path: &[PathElem]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for e in parent {
        let next = match e {
            PathElem::Field(f) => cur.get_mut(f),
            PathElem::Key(k, v) => cur
                .as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| key_repr(&i[k.as_str()]) == *v)),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        PathElem::Field(f) => {
            if let Value::Object(m) = cur {
                m.remove(f);
            }
        }
        PathElem::Key(k, v) => {
            if let Value::Array(a) = cur {
                a.retain(|i| key_repr(&i[k.as_str()]) != *v);
            }
        }
    }
}

/// Structured merge of an applied configuration into the live object:
/// maps merge, keyed lists merge by key, everything else is replaced.
pub fn apply_merge(live: &mut Value, applied: &Value, field: &str, keyed: bool) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, v) in a {
                match l.get_mut(k) {
                    Some(existing) => apply_merge(existing, v, k, keyed),
                    None => {
                        l.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(a)) if keyed => {
            match merge_key(field, a.first())
                .filter(|_| a.iter().chain(l.iter()).all(Value::is_object))
            {
                Some(key) => {
                    for item in a {
                        match l.iter_mut().find(|i| i[key] == item[key]) {
                            Some(existing) => apply_merge(existing, item, "", keyed),
                            None => l.push(item.clone()),
                        }
                    }
                }
                None => *l = a.clone(),
            }
        }
        (l, a) => *l = a.clone(),
    }
}

/// `managedFields` entries, parsed: manager → (operation, subresource, paths).
#[derive(Debug, Clone, Default)]
pub struct Managers(pub BTreeMap<(String, String, String), (String, BTreeSet<FieldPath>)>);

impl Managers {
    pub fn from_object(obj: &Value) -> Self {
        let mut out = BTreeMap::new();
        for e in obj["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let manager = e["manager"].as_str().unwrap_or_default().to_string();
            let op = e["operation"].as_str().unwrap_or("Update").to_string();
            let sub = e["subresource"].as_str().unwrap_or_default().to_string();
            let api_version = e["apiVersion"].as_str().unwrap_or_default().to_string();
            let mut paths = BTreeSet::new();
            fields_to_paths(&e["fieldsV1"], &mut Vec::new(), &mut paths);
            out.insert((manager, op, sub), (api_version, paths));
        }
        Managers(out)
    }

    pub fn write(&self, obj: &mut Value, now: &str) {
        let entries: Vec<Value> = self
            .0
            .iter()
            .filter(|(_, (_, p))| !p.is_empty())
            .map(|((manager, op, sub), (api_version, paths))| {
                let mut e = json!({
                    "manager": manager,
                    "operation": op,
                    "apiVersion": api_version,
                    "time": now,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": paths_to_fields(paths),
                });
                if !sub.is_empty() {
                    e["subresource"] = json!(sub);
                }
                e
            })
            .collect();
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            if entries.is_empty() {
                meta.remove("managedFields");
            } else {
                meta.insert("managedFields".into(), Value::Array(entries));
            }
        }
    }

    /// Records that `manager` (by an update, not an apply) set `changed`:
    /// it takes them over from every other manager.
    pub fn record_update(
        &mut self,
        manager: &str,
        api_version: &str,
        sub: &str,
        changed: BTreeSet<FieldPath>,
    ) {
        if changed.is_empty() {
            return;
        }
        let me = (manager.to_string(), "Update".to_string(), sub.to_string());
        for (k, (_, paths)) in self.0.iter_mut() {
            if *k != me {
                paths.retain(|p| !changed.contains(p));
            }
        }
        let entry = self
            .0
            .entry(me)
            .or_insert_with(|| (api_version.to_string(), BTreeSet::new()));
        entry.0 = api_version.to_string();
        entry.1.extend(changed);
    }
}

fn fields_to_paths(f: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Value::Object(m) = f else { return };
    let mut leaf = true;
    for (k, v) in m {
        if k == "." {
            continue;
        }
        if let Some(name) = k.strip_prefix("f:") {
            path.push(PathElem::Field(name.to_string()));
        } else if let Some(key) = k.strip_prefix("k:") {
            let Ok(Value::Object(kv)) = serde_json::from_str::<Value>(key) else {
                continue;
            };
            let Some((kk, kv)) = kv.into_iter().next() else {
                continue;
            };
            path.push(PathElem::Key(kk, key_repr(&kv)));
        } else {
            continue;
        }
        leaf = false;
        fields_to_paths(v, path, out);
        path.pop();
    }
    if leaf && !path.is_empty() {
        out.insert(path.clone());
    }
}

fn paths_to_fields(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for e in p {
            let k = match e {
                PathElem::Field(f) => format!("f:{f}"),
                PathElem::Key(k, v) => {
                    let mut m = Map::new();
                    let val = if k == "containerPort" || k == "port" {
                        v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n))
                    } else {
                        json!(v)
                    };
                    m.insert(k.clone(), val);
                    format!("k:{}", Value::Object(m))
                }
            };
            cur = cur
                .entry(k)
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("inserted as object");
        }
    }
    Value::Object(root)
}

/// How a path prints in a conflict message (`.spec.replicas`).
pub fn path_string(p: &[PathElem]) -> String {
    p.iter()
        .map(|e| match e {
            PathElem::Field(f) => format!(".{f}"),
            PathElem::Key(k, v) => format!("[{k}=\"{v}\"]"),
        })
        .collect()
}

/// Server-side apply of `applied` by `manager` onto `live` (None to
/// create), through subresource `sub` (`""` for the object itself).
/// Returns the merged object with `managedFields` updated.
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    sub: &str,
    force: bool,
    keyed: bool,
    now: &str,
) -> Result<Value, ApiError> {
    let api_version = applied["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let new_paths = leaf_paths(applied, keyed);
    let me = (manager.to_string(), "Apply".to_string(), sub.to_string());
    let Some(live) = live else {
        let mut obj = applied.clone();
        let mut managers = Managers::default();
        managers.0.insert(me, (api_version, new_paths));
        managers.write(&mut obj, now);
        return Ok(obj);
    };
    let mut managers = Managers::from_object(live);
    // Conflicts: another manager owns a path we set, with a different value.
    let mut conflicts = Vec::new();
    for (k, (version, paths)) in &managers.0 {
        // An apply to the object leaves what status writers own alone (the
        // status strategy resets those fields for it).
        if *k == me || (sub.is_empty() && !k.2.is_empty()) {
            continue;
        }
        for p in paths.intersection(&new_paths) {
            if get_path(live, p) != get_path(applied, p) {
                conflicts.push((manager_name(k, version), p.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    let previous = managers
        .0
        .get(&me)
        .map(|(_, p)| p.clone())
        .unwrap_or_default();
    let mut obj = live.clone();
    apply_merge(&mut obj, applied, "", keyed);
    // Forced: the others lose what we took.
    for (k, (_, paths)) in managers.0.iter_mut() {
        if *k != me {
            paths.retain(|p| !new_paths.contains(p));
        }
    }
    // Fields we applied before and no longer apply, owned by nobody else, go.
    let others: BTreeSet<FieldPath> = managers
        .0
        .iter()
        .filter(|(k, _)| **k != me)
        .flat_map(|(_, (_, p))| p.iter().cloned())
        .collect();
    for p in previous.difference(&new_paths) {
        if others.contains(p) {
            continue;
        }
        remove_path(&mut obj, p);
        // A keyed item nobody sets any more goes as a whole.
        for i in (0..p.len()).rev() {
            if matches!(p[i], PathElem::Key(..)) {
                let prefix = &p[..=i];
                let still = new_paths
                    .iter()
                    .chain(others.iter())
                    .any(|q| q.starts_with(prefix));
                if !still {
                    remove_path(&mut obj, prefix);
                }
                break;
            }
        }
    }
    managers.0.insert(me, (api_version, new_paths));
    managers.write(&mut obj, now);
    Ok(obj)
}

/// How a conflict names a manager (managedfields' printManager): the
/// quoted name, its subresource, and for an updater the version it used.
fn manager_name(key: &(String, String, String), api_version: &str) -> String {
    let (manager, operation, sub) = key;
    let mut name = format!("{manager:?}");
    if !sub.is_empty() {
        name = format!("{name} with subresource {sub:?}");
    }
    if operation == "Update" {
        name = format!("{name} using {api_version}");
    }
    name
}

/// The 409 of an apply that would take fields other managers own
/// (managedfields' NewConflictError): one conflict on one line, more
/// grouped by manager in name order.
fn conflict_error(conflicts: &[(String, FieldPath)]) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m}"), "field": path_string(p)})
        })
        .collect();
    let message = match conflicts {
        [(m, p)] => format!(
            "Apply failed with 1 conflict: conflict with {m}: {}",
            path_string(p)
        ),
        _ => {
            let mut by_manager: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (m, p) in conflicts {
                by_manager.entry(m).or_default().push(path_string(p));
            }
            let lines: Vec<String> = by_manager
                .into_iter()
                .flat_map(|(m, paths)| {
                    std::iter::once(format!("conflicts with {m}:"))
                        .chain(paths.into_iter().map(|p| format!("- {p}")))
                })
                .collect();
            format!(
                "Apply failed with {} conflicts: {}",
                conflicts.len(),
                lines.join("\n")
            )
        }
    };
    ApiError::conflict_with_causes(message, causes)
}

/// Leaf paths whose value differs between `old` and `new`.
pub fn changed_paths(old: Option<&Value>, new: &Value, keyed: bool) -> BTreeSet<FieldPath> {
    let paths = leaf_paths(new, keyed);
    match old {
        None => paths,
        Some(old) => paths
            .into_iter()
            .filter(|p| get_path(old, p) != get_path(new, p))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategic_merge_keys_containers_by_name() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
            "metadata": {"finalizers": ["f1"]}});
        strategic_merge(
            &mut pod,
            &json!({"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "a", "$patch": "delete"}]},
                    "metadata": {"finalizers": ["f2"]}}),
        )
        .unwrap();
        assert_eq!(
            pod["spec"]["containers"],
            json!([{"name": "b", "image": "z"}])
        );
        assert_eq!(pod["metadata"]["finalizers"], json!(["f1", "f2"]));
    }

    #[test]
    fn apply_removes_fields_the_manager_dropped_and_conflicts_with_others() {
        let a1 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"x": "1", "y": "2"}}, "data": {"k": "v"}});
        let live = server_side_apply(None, &a1, "m1", "", false, true, "t").unwrap();
        let a2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"x": "1"}}, "data": {"k": "v"}});
        let live = server_side_apply(Some(&live), &a2, "m1", "", false, true, "t").unwrap();
        assert_eq!(live["metadata"]["labels"], json!({"x": "1"}));
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "w"}});
        let err = server_side_apply(Some(&live), &other, "m2", "", false, true, "t").unwrap_err();
        assert_eq!(err.code, 409);
        let forced = server_side_apply(Some(&live), &other, "m2", "", true, true, "t").unwrap();
        assert_eq!(forced["data"]["k"], "w");
    }
}
