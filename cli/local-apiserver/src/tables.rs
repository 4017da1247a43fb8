//! Server-side printing: `meta.k8s.io/v1 Table` responses for `kubectl get`
//! (printer columns of CRDs, the usual columns of built-ins), and the small
//! JSONPath subset printer columns use.

use serde_json::{Value, json};

use super::resources::ResourceInfo;

/// `5s`, `3m2s`, `4h`, `12d`, as kubectl prints ages.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

fn age(ts: &Value) -> Value {
    match ts
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    {
        Some(t) => json!(human_duration(
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()
        )),
        None => json!("<unknown>"),
    }
}

/// Evaluates a printer-column JSONPath (`.spec.x`, `.a[0].b`,
/// `.status.conditions[?(@.type=="Ready")].status`); the first match.
pub fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = vec![obj.clone()];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let (field, after) = field_name(r);
            rest = after;
            if field.is_empty() {
                continue;
            }
            cur = cur.iter().filter_map(|v| v.get(&field).cloned()).collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(key) = quoted(inner) {
                cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
            } else if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')'))
            {
                let (lhs, rhs) = filter.split_once("==")?;
                let field = lhs.trim().strip_prefix("@.")?;
                let want = rhs.trim().trim_matches(['"', '\'']);
                cur = cur
                    .iter()
                    .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                    .filter(|item| {
                        json_path(item, &format!(".{field}")).is_some_and(|v| match &v {
                            Value::String(s) => s == want,
                            Value::Bool(b) => want == if *b { "true" } else { "false" },
                            other => {
                                other.as_f64().is_some()
                                    && other.as_f64() == want.parse::<f64>().ok()
                            }
                        })
                    })
                    .collect();
            } else if inner == "*" {
                cur = cur
                    .iter()
                    .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                    .collect();
            } else {
                let i: usize = inner.parse().ok()?;
                cur = cur.iter().filter_map(|v| v.get(i).cloned()).collect();
            }
        } else {
            return None;
        }
    }
    cur.into_iter().next()
}

/// A field name up to the next unescaped `.` or `[`: `node\.kubernetes\.io/zone`
/// names the label key `node.kubernetes.io/zone`.
fn field_name(path: &str) -> (String, &str) {
    let mut name = String::new();
    let mut chars = path.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    name.push(escaped);
                }
            }
            '.' | '[' => return (name, &path[i..]),
            other => name.push(other),
        }
    }
    (name, "")
}

/// `'key'` or `"key"`: JSONPath's bracket form of a field name.
fn quoted(inner: &str) -> Option<&str> {
    let inner = inner.trim();
    inner
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
}

fn column(name: &str, ty: &str, priority: i64, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": if name == "Name" { "name" } else { "" }, "description": description, "priority": priority})
}

fn columns(res: &ResourceInfo, version: &str) -> (Vec<Value>, Vec<(String, String)>) {
    let mut defs = vec![column(
        "Name",
        "string",
        0,
        "Name must be unique within a namespace.",
    )];
    let mut paths = Vec::new();
    if let Some(crd) = &res.crd {
        let printer = crd
            .version(version)
            .and_then(|v| v["additionalPrinterColumns"].as_array().cloned());
        match printer {
            Some(cols) => {
                for c in cols {
                    let name = c["name"].as_str().unwrap_or_default();
                    let ty = c["type"].as_str().unwrap_or("string");
                    defs.push(column(
                        name,
                        ty,
                        c["priority"].as_i64().unwrap_or(0),
                        c["description"].as_str().unwrap_or_default(),
                    ));
                    paths.push((
                        ty.to_string(),
                        c["jsonPath"].as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
            None => {
                defs.push(column("Age", "date", 0, ""));
                paths.push(("date".into(), ".metadata.creationTimestamp".into()));
            }
        }
        return (defs, paths);
    }
    let builtin: &[(&str, &str, i64)] = match res.plural.as_str() {
        "pods" => &[
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
        ],
        "nodes" => &[
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
        ],
        "deployments" => &[
            ("Ready", "string", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            ("Age", "string", 0),
        ],
        "replicasets" => &[
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Age", "string", 0),
        ],
        "namespaces" => &[("Status", "string", 0), ("Age", "string", 0)],
        "poddisruptionbudgets" => &[
            ("Min Available", "string", 0),
            ("Max Unavailable", "string", 0),
            ("Allowed Disruptions", "integer", 0),
            ("Age", "string", 0),
        ],
        _ => &[("Age", "string", 0)],
    };
    for (n, t, p) in builtin {
        defs.push(column(n, t, *p, ""));
    }
    (defs, paths)
}

fn or_none(v: &Value) -> Value {
    match v {
        Value::Null => json!("<none>"),
        Value::String(s) if s.is_empty() => json!("<none>"),
        other => other.clone(),
    }
}

fn builtin_cells(res: &ResourceInfo, o: &Value) -> Vec<Value> {
    let created = age(&o["metadata"]["creationTimestamp"]);
    match res.plural.as_str() {
        "pods" => {
            let statuses = o["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = statuses.iter().filter(|s| s["ready"] == true).count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|s| s["restartCount"].as_i64())
                .sum();
            let status = if o["metadata"].get("deletionTimestamp").is_some() {
                json!("Terminating")
            } else {
                o["status"]["reason"]
                    .as_str()
                    .map_or_else(|| or_none(&o["status"]["phase"]), |r| json!(r))
            };
            vec![
                json!(format!("{ready}/{total}")),
                status,
                json!(restarts.to_string()),
                created,
                or_none(&o["status"]["podIP"]),
                or_none(&o["spec"]["nodeName"]),
            ]
        }
        "nodes" => {
            let ready = super::store::is_ready(o);
            let mut status = if ready {
                "Ready".to_string()
            } else {
                "NotReady".to_string()
            };
            if o["spec"]["unschedulable"] == true {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<String> = o["metadata"]["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| {
                    k.strip_prefix("node-role.kubernetes.io/")
                        .map(str::to_string)
                })
                .collect();
            vec![
                json!(status),
                json!(if roles.is_empty() {
                    "<none>".to_string()
                } else {
                    roles.join(",")
                }),
                created,
                or_none(&o["status"]["nodeInfo"]["kubeletVersion"]),
            ]
        }
        "deployments" => vec![
            json!(format!(
                "{}/{}",
                o["status"]["readyReplicas"].as_i64().unwrap_or(0),
                o["spec"]["replicas"].as_i64().unwrap_or(0)
            )),
            json!(o["status"]["updatedReplicas"].as_i64().unwrap_or(0)),
            json!(o["status"]["availableReplicas"].as_i64().unwrap_or(0)),
            created,
        ],
        "replicasets" => vec![
            json!(o["spec"]["replicas"].as_i64().unwrap_or(0)),
            json!(o["status"]["replicas"].as_i64().unwrap_or(0)),
            json!(o["status"]["readyReplicas"].as_i64().unwrap_or(0)),
            created,
        ],
        "namespaces" => vec![or_none(&o["status"]["phase"]), created],
        "poddisruptionbudgets" => vec![
            json!(
                o["spec"]["minAvailable"]
                    .as_str()
                    .map(str::to_string)
                    .or_else(|| o["spec"]["minAvailable"].as_i64().map(|n| n.to_string()))
                    .unwrap_or_else(|| "N/A".into())
            ),
            json!(
                o["spec"]["maxUnavailable"]
                    .as_str()
                    .map(str::to_string)
                    .or_else(|| o["spec"]["maxUnavailable"].as_i64().map(|n| n.to_string()))
                    .unwrap_or_else(|| "N/A".into())
            ),
            json!(o["status"]["disruptionsAllowed"].as_i64().unwrap_or(0)),
            created,
        ],
        _ => vec![created],
    }
}

/// One row for `obj`.
fn row(res: &ResourceInfo, paths: &[(String, String)], obj: &Value, include_object: bool) -> Value {
    let mut cells = vec![obj["metadata"]["name"].clone()];
    if res.crd.is_some() {
        for (ty, path) in paths {
            let v = json_path(obj, path);
            cells.push(match (ty.as_str(), v) {
                ("date", Some(ts)) => age(&ts),
                (_, Some(Value::String(s))) => json!(s),
                (_, Some(v @ (Value::Number(_) | Value::Bool(_)))) => v,
                (_, Some(v)) => json!(v.to_string()),
                (_, None) => Value::Null,
            });
        }
    } else {
        cells.extend(builtin_cells(res, obj));
    }
    let object = if include_object {
        obj.clone()
    } else {
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
    };
    json!({"cells": cells, "object": object})
}

/// A Table of `objs`.
pub fn table(
    res: &ResourceInfo,
    version: &str,
    objs: &[Value],
    rv: &str,
    cont: Option<&str>,
    include_object: bool,
) -> Value {
    let (defs, paths) = columns(res, version);
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| row(res, &paths, o, include_object))
        .collect();
    let mut meta = json!({"resourceVersion": rv});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_filters() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}, "spec": {"w": 3}});
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(json_path(&o, ".spec.w"), Some(json!(3)));
        assert_eq!(json_path(&o, ".spec.missing"), None);
        let claim = json!({"metadata": {"labels": {"node.kubernetes.io/instance-type": "c-4x", "karpenter.sh/nodepool": "default"}}});
        assert_eq!(
            json_path(
                &claim,
                ".metadata.labels.node\\.kubernetes\\.io/instance-type"
            ),
            Some(json!("c-4x"))
        );
        assert_eq!(
            json_path(&claim, ".metadata.labels['karpenter.sh/nodepool']"),
            Some(json!("default"))
        );
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(185), "3m5s");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
    }
}
