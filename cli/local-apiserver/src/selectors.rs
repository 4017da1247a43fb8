//! Label and field selectors, as `?labelSelector=` and `?fieldSelector=`
//! spell them (`app=web,tier!=db,env in (a,b),!legacy` and
//! `spec.nodeName=n1,status.phase!=Succeeded`).

use serde_json::Value;

use super::resources::ResourceInfo;
use super::store::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_values(rest: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{rest}', expected: '('"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            if let Some(key) = part.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(key.trim().to_string()));
            } else if let Some((k, v)) = part.split_once("!=") {
                reqs.push(LabelReq::NotEq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = part.split_once("==") {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = part.split_once('=') {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                reqs.push(LabelReq::NotIn(k.trim().into(), set_values(rest)?));
            } else if let Some((k, rest)) = part.split_once(" in ") {
                reqs.push(LabelReq::In(k.trim().into(), set_values(rest)?));
            } else if part.contains(' ') || part.contains('(') {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {part}"
                )));
            } else {
                reqs.push(LabelReq::Exists(part.to_string()));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// From a `metav1.LabelSelector` object (`matchLabels`,
    /// `matchExpressions`). `None` for a null selector (matches nothing).
    pub fn from_object(sel: &Value) -> Option<Self> {
        let obj = sel.as_object()?;
        let mut reqs = Vec::new();
        if let Some(ml) = obj.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in ml {
                reqs.push(LabelReq::Eq(
                    k.clone(),
                    v.as_str().unwrap_or_default().into(),
                ));
            }
        }
        for e in obj
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e["key"].as_str().unwrap_or_default().to_string();
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            reqs.push(match e["operator"].as_str().unwrap_or_default() {
                "In" => LabelReq::In(key, values),
                "NotIn" => LabelReq::NotIn(key, values),
                "Exists" => LabelReq::Exists(key),
                _ => LabelReq::NotExists(key),
            });
        }
        Some(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj["metadata"]["labels"].as_object();
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value` / `path!=value` terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in split_top(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            terms.push((path.trim().to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The selector as `res` serves it: each field label must be one the
    /// kind's field label conversion knows (a 400 otherwise, worded as
    /// kube-apiserver words it), and old spellings become the field they
    /// stand for. Only the core group's kinds are checked; the other
    /// kinds take any field, as this server always has.
    pub fn for_resource(&self, res: &ResourceInfo) -> Result<Self, ApiError> {
        if res.crd.is_some() || !res.group.is_empty() {
            return Ok(self.clone());
        }
        let known = field_labels(&res.plural);
        let mut terms = Vec::with_capacity(self.0.len());
        for (label, eq, value) in &self.0 {
            let path = match (res.plural.as_str(), label.as_str()) {
                ("pods", "spec.host") => "spec.nodeName",
                ("events", "source") => "source.component",
                (_, l) if known.contains(&l) => l,
                _ if known == DEFAULT_FIELD_LABELS => {
                    return Err(ApiError::bad_request(format!(
                        "{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    )));
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {label}"
                    )));
                }
            };
            terms.push((path.to_string(), *eq, value.clone()));
        }
        Ok(FieldSelector(terms))
    }

    /// The value a field-selector path names in `obj` (missing fields are
    /// the empty string, as the apiserver's field sets have them; a
    /// missing flag is `false` and a missing count `0`, as Go prints the
    /// zero values).
    fn field(obj: &Value, path: &str) -> String {
        let mut cur = obj;
        for seg in path.split('.') {
            cur = &cur[seg];
        }
        match cur {
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            Value::Null if matches!(path, "spec.unschedulable" | "spec.hostNetwork") => {
                "false".to_string()
            }
            Value::Null if path == "status.replicas" => "0".to_string(),
            _ => String::new(),
        }
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(path, eq, value)| (Self::field(obj, path) == *value) == *eq)
    }

    /// The value required for `metadata.name`, if the selector pins it
    /// (`kubectl get -w` of one object watches with this).
    pub fn name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, eq, _)| p == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

/// The labels of the default field label conversion.
const DEFAULT_FIELD_LABELS: &[&str] = &["metadata.name", "metadata.namespace"];

/// The field labels a core kind's field selectors may use
/// (pkg/apis/core/v1/conversion.go; the default conversion's two for
/// kinds without their own).
fn field_labels(plural: &str) -> &'static [&'static str] {
    match plural {
        "pods" => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        "nodes" => &["metadata.name", "spec.unschedulable"],
        "replicationcontrollers" => &["metadata.name", "metadata.namespace", "status.replicas"],
        "events" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        "namespaces" => &["status.phase", "metadata.name"],
        "secrets" => &["type", "metadata.namespace", "metadata.name"],
        "services" => &[
            "metadata.namespace",
            "metadata.name",
            "spec.clusterIP",
            "spec.type",
        ],
        _ => DEFAULT_FIELD_LABELS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_forms() {
        let pod = json!({"metadata": {"labels": {"app": "web", "env": "prod"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,env=prod", true),
            ("app!=web", false),
            ("env in (prod, dev)", true),
            ("env notin (prod)", false),
            ("app", true),
            ("!app", false),
            ("!legacy", true),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&pod),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selector_forms() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let f = |s: &str| FieldSelector::parse(s).unwrap().matches(&pod);
        assert!(f("spec.nodeName=n1"));
        assert!(f("metadata.name=p,status.phase!=Succeeded"));
        assert!(!f("spec.nodeName="));
        assert!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .matches(&json!({"spec": {}}))
        );
    }

    #[test]
    fn field_labels_are_checked_per_kind() {
        let builtin = |plural: &str| {
            crate::resources::builtins()
                .into_iter()
                .find(|r| r.group.is_empty() && r.plural == plural)
                .expect("builtin")
        };
        let check = |plural: &str, sel: &str| {
            FieldSelector::parse(sel)
                .unwrap()
                .for_resource(&builtin(plural))
                .map_err(|e| e.message)
        };
        assert!(check("pods", "spec.nodeName=n,status.phase=Running").is_ok());
        assert_eq!(
            check("pods", "spec.priority=1").unwrap_err(),
            "field label not supported: spec.priority"
        );
        assert_eq!(
            check("configmaps", "data.k=v").unwrap_err(),
            "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert!(check("nodes", "metadata.namespace=x").is_err());
        // An old client's spec.host is spec.nodeName; a missing flag is false.
        let host = check("pods", "spec.host=n1").unwrap();
        assert!(host.matches(&json!({"spec": {"nodeName": "n1"}})));
        let schedulable = check("nodes", "spec.unschedulable=false").unwrap();
        assert!(schedulable.matches(&json!({"spec": {}})));
    }
}
