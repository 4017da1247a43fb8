//! The controller IAM policies of `deploy/iam` evaluated as AWS evaluates
//! an identity policy: seed 003's (`karpenter-controller-policy.json`, its
//! Terraform written as policy JSON, what users have) and the scoped one
//! upstream v1 documents (`karpenter-controller-policy-scoped.json`:
//! cluster-tag conditions on every create, tag and delete, reads in the
//! cluster's region, SSM limited to the public AMI parameters). A request
//! is allowed when some Allow statement matches its action (`*`
//! wildcards, case-insensitive), its resource ARN, and every condition, and
//! no Deny statement matches. The test proxy asks both on every call.
//!
//! Conditions: `StringEquals`, `StringLike` (`*`, `?`), their `Not` forms,
//! `ForAllValues:` / `ForAnyValue:` prefixes, `IfExists`, and `Null`. Keys
//! are case-insensitive; a key the request does not carry fails a positive
//! operator, as in AWS.

use std::collections::BTreeMap;

use serde_json::Value;

const SEED_POLICY: &str = include_str!("../../../../deploy/iam/karpenter-controller-policy.json");
const SCOPED_POLICY: &str =
    include_str!("../../../../deploy/iam/karpenter-controller-policy-scoped.json");

/// One permission a request needs: an action on a resource, with the
/// condition keys AWS would supply (lower-cased keys, one or more values).
#[derive(Debug, Clone)]
pub struct Check {
    pub action: String,
    pub resource: String,
    pub context: BTreeMap<String, Vec<String>>,
}

impl Check {
    pub fn new(action: &str, resource: impl Into<String>) -> Self {
        Self {
            action: action.into(),
            resource: resource.into(),
            context: BTreeMap::new(),
        }
    }

    /// Adds `key` with `value` (keys compare case-insensitively).
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.context
            .entry(key.to_ascii_lowercase())
            .or_default()
            .push(value.into());
        self
    }

    /// Adds the tags as `<prefix>/<key>` keys and their keys as `aws:TagKeys`
    /// when `prefix` is `aws:RequestTag`.
    pub fn tags(mut self, prefix: &str, tags: &BTreeMap<String, String>) -> Self {
        for (k, v) in tags {
            self = self.with(&format!("{prefix}/{k}"), v.clone());
            if prefix == "aws:RequestTag" {
                self = self.with("aws:TagKeys", k.clone());
            }
        }
        self
    }
}

/// The policy, for one cluster, region and account.
pub struct Policy {
    statements: Vec<Value>,
}

/// `*` and `?` matching, AWS's glob.
fn glob(pattern: &str, text: &str) -> bool {
    fn matches(p: &[char], t: &[char]) -> bool {
        match (p.first(), t.first()) {
            (None, None) => true,
            (Some('*'), _) => matches(&p[1..], t) || (!t.is_empty() && matches(p, &t[1..])),
            (Some('?'), Some(_)) => matches(&p[1..], &t[1..]),
            (Some(a), Some(b)) if a == b => matches(&p[1..], &t[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    matches(&p, &t)
}

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Value::Bool(b) => vec![b.to_string()],
        _ => Vec::new(),
    }
}

/// Whether one condition operator holds for one key.
fn condition(operator: &str, wanted: &[String], given: Option<&Vec<String>>) -> bool {
    let (set, operator) = match operator.split_once(':') {
        Some((set, op)) => (Some(set), op),
        None => (None, operator),
    };
    let (operator, if_exists) = match operator.strip_suffix("IfExists") {
        Some(op) => (op, true),
        None => (operator, false),
    };
    if operator == "Null" {
        let absent = given.is_none_or(Vec::is_empty);
        return wanted.iter().any(|w| (w == "true") == absent);
    }
    let negated = operator.contains("Not");
    let one = |value: &str| {
        let hit = wanted.iter().any(|w| match operator {
            "StringEquals" | "StringNotEquals" => w == value,
            "StringLike" | "StringNotLike" => glob(w, value),
            "StringEqualsIgnoreCase" | "StringNotEqualsIgnoreCase" => w.eq_ignore_ascii_case(value),
            other => panic!("the test policy uses an operator the evaluator lacks: {other}"),
        });
        hit != negated
    };
    match given.filter(|v| !v.is_empty()) {
        None => if_exists || negated || set == Some("ForAllValues"),
        Some(values) => match set {
            Some("ForAnyValue") => values.iter().any(|v| one(v)),
            _ => values.iter().all(|v| one(v)),
        },
    }
}

impl Policy {
    /// Seed 003's policy for one cluster, region and account.
    pub fn seed(cluster: &str, region: &str, account: &str) -> Self {
        Self::parse(SEED_POLICY, cluster, region, account, "")
    }

    /// The scoped policy, its interruption queue named `queue`.
    pub fn scoped(cluster: &str, region: &str, account: &str, queue: &str) -> Self {
        Self::parse(SCOPED_POLICY, cluster, region, account, queue)
    }

    fn parse(text: &str, cluster: &str, region: &str, account: &str, queue: &str) -> Self {
        let text = text
            .replace("${CLUSTER_NAME}", cluster)
            .replace("${AWS_REGION}", region)
            .replace("${AWS_ACCOUNT_ID}", account)
            .replace("${INTERRUPTION_QUEUE}", queue);
        let policy: Value = serde_json::from_str(&text).expect("the policy is JSON");
        Self {
            statements: policy["Statement"].as_array().expect("statements").clone(),
        }
    }

    fn matches(statement: &Value, check: &Check) -> bool {
        let actions = strings(&statement["Action"]);
        let resources = strings(&statement["Resource"]);
        let action = actions
            .iter()
            .any(|a| glob(&a.to_ascii_lowercase(), &check.action.to_ascii_lowercase()));
        let resource = resources.iter().any(|r| glob(r, &check.resource));
        let conditions = statement["Condition"].as_object().is_none_or(|blocks| {
            blocks.iter().all(|(operator, keys)| {
                keys.as_object().is_some_and(|keys| {
                    keys.iter().all(|(key, wanted)| {
                        condition(
                            operator,
                            &strings(wanted),
                            check.context.get(&key.to_ascii_lowercase()),
                        )
                    })
                })
            })
        });
        action && resource && conditions
    }

    /// Whether the policy allows the check.
    pub fn allows(&self, check: &Check) -> bool {
        let effect = |s: &Value| s["Effect"].as_str().unwrap_or_default().to_string();
        let denied = self
            .statements
            .iter()
            .any(|s| effect(s) == "Deny" && Self::matches(s, check));
        let allowed = self
            .statements
            .iter()
            .any(|s| effect(s) == "Allow" && Self::matches(s, check));
        allowed && !denied
    }
}
