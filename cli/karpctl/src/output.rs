//! The output of `plan`: the stable JSON shape of PLAN_CLI.md, the same
//! structure as YAML, and a table for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use serde_json::{Map, Value, json};

/// A wire operator as manifests spell it.
fn operator_name(op: i32) -> &'static str {
    karpenter_proto::convert::operator("", op).map_or("", |o| o.as_str())
}

/// A wire taint effect as manifests spell it.
fn effect_name(effect: i32) -> &'static str {
    match types::TaintEffect::try_from(effect) {
        Ok(types::TaintEffect::NoSchedule) => "NoSchedule",
        Ok(types::TaintEffect::PreferNoSchedule) => "PreferNoSchedule",
        Ok(types::TaintEffect::NoExecute) => "NoExecute",
        _ => "",
    }
}

/// Output formats of `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Yaml,
    Table,
}

fn pod_ref(p: &sched::PodRef) -> String {
    format!("{}/{}", p.namespace, p.name)
}

fn sorted_pods(pods: &[sched::PodRef]) -> Vec<String> {
    let mut out: Vec<String> = pods.iter().map(pod_ref).collect();
    out.sort();
    out
}

/// Rounds a price sum to a millionth, so float noise does not show.
pub fn round_price(p: f64) -> f64 {
    // `+ 0.0` turns the -0.0 of an empty sum into 0.0.
    (p * 1e6).round() / 1e6 + 0.0
}

fn requirement(r: &types::Requirement) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), json!(r.key));
    m.insert("operator".into(), json!(operator_name(r.operator)));
    m.insert("values".into(), json!(r.values));
    if let Some(min) = r.min_values {
        m.insert("minValues".into(), json!(min));
    }
    Value::Object(m)
}

fn taint(t: &types::Taint) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), json!(t.key));
    if !t.value.is_empty() {
        m.insert("value".into(), json!(t.value));
    }
    m.insert("effect".into(), json!(effect_name(t.effect)));
    Value::Object(m)
}

fn node_claim(c: &sched::NodeClaimPlan) -> Value {
    let cheapest = c.cheapest.clone().unwrap_or_default();
    let labels: BTreeMap<&String, &String> = c.labels.iter().collect();
    let mut requirements: Vec<&types::Requirement> = c.requirements.iter().collect();
    requirements
        .sort_by(|a, b| (&a.key, a.operator, &a.values).cmp(&(&b.key, b.operator, &b.values)));
    let mut taints: Vec<&types::Taint> = c.taints.iter().collect();
    taints.sort_by(|a, b| (&a.key, &a.value, a.effect).cmp(&(&b.key, &b.value, b.effect)));
    json!({
        "nodePool": c.node_pool,
        "instanceTypes": c.instance_types,
        "cheapest": {
            "instanceType": cheapest.instance_type,
            "zone": cheapest.zone,
            "capacityType": cheapest.capacity_type,
            "price": cheapest.price,
        },
        "labels": labels,
        "requirements": requirements.into_iter().map(requirement).collect::<Vec<_>>(),
        "taints": taints.into_iter().map(taint).collect::<Vec<_>>(),
        "pods": sorted_pods(&c.pods),
    })
}

/// The `plan -o json` document, in a deterministic order.
pub fn plan_value(response: &sched::SolveResponse) -> Value {
    let mut claims: Vec<(Vec<String>, Value)> = response
        .node_claims
        .iter()
        .map(|c| (sorted_pods(&c.pods), node_claim(c)))
        .collect();
    // Claims hold different pods, so the whole rendering (slow) only
    // breaks ties between claims without any.
    claims.sort_by(|a, b| {
        (a.0.first(), a.1["nodePool"].as_str())
            .cmp(&(b.0.first(), b.1["nodePool"].as_str()))
            .then_with(|| a.1.to_string().cmp(&b.1.to_string()))
    });
    let cost: f64 = claims
        .iter()
        .map(|(_, c)| c["cheapest"]["price"].as_f64().unwrap_or(0.0))
        .sum();
    let mut existing: Vec<(String, Vec<String>)> = response
        .existing_nodes
        .iter()
        .filter(|n| !n.pods.is_empty())
        .map(|n| (n.node.clone(), sorted_pods(&n.pods)))
        .collect();
    existing.sort();
    let mut unschedulable: Vec<(String, String)> = response
        .unschedulable
        .iter()
        .map(|u| {
            (
                u.pod.as_ref().map(pod_ref).unwrap_or_default(),
                u.reason.clone(),
            )
        })
        .collect();
    unschedulable.sort();
    json!({
        "nodeClaims": claims.into_iter().map(|(_, c)| c).collect::<Vec<_>>(),
        "existingNodes": existing
            .into_iter()
            .map(|(name, pods)| json!({"name": name, "pods": pods}))
            .collect::<Vec<_>>(),
        "unschedulable": unschedulable
            .into_iter()
            .map(|(pod, reason)| json!({"pod": pod, "reason": reason}))
            .collect::<Vec<_>>(),
        "costPerHour": round_price(cost),
    })
}

/// Renders the plan in `format`, ending with a newline.
pub fn render(value: &Value, format: Format) -> Result<String, String> {
    render_as(value, format, table)
}

/// Renders a command's document in `format`, with `table` for people.
pub fn render_as(
    value: &Value,
    format: Format,
    table: fn(&Value) -> String,
) -> Result<String, String> {
    match format {
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        Format::Yaml => serde_yaml::to_string(value).map_err(|e| e.to_string()),
        Format::Table => Ok(table(value)),
    }
}

/// Karpenter's name of a disruption reason.
pub fn reason_name(reason: i32) -> &'static str {
    match sched::DisruptionReason::try_from(reason) {
        Ok(sched::DisruptionReason::Empty) => "Empty",
        Ok(sched::DisruptionReason::Underutilized) => "Underutilized",
        Ok(sched::DisruptionReason::Drifted) => "Drifted",
        Ok(sched::DisruptionReason::Expired) => "Expired",
        Ok(sched::DisruptionReason::Unhealthy) => "Unhealthy",
        Ok(sched::DisruptionReason::Unspecified) | Err(_) => "Unspecified",
    }
}

/// Karpenter's name of a disruption method.
pub fn method_name(method: i32) -> &'static str {
    match sched::DisruptionMethod::try_from(method) {
        Ok(sched::DisruptionMethod::Emptiness) => "Emptiness",
        Ok(sched::DisruptionMethod::Drift) => "Drift",
        Ok(sched::DisruptionMethod::StaticDrift) => "StaticDrift",
        Ok(sched::DisruptionMethod::Expiration) => "Expiration",
        Ok(sched::DisruptionMethod::MultiNodeConsolidation) => "MultiNodeConsolidation",
        Ok(sched::DisruptionMethod::SingleNodeConsolidation) => "SingleNodeConsolidation",
        Ok(sched::DisruptionMethod::Repair) => "Repair",
        Ok(sched::DisruptionMethod::Unspecified) | Err(_) => "Unspecified",
    }
}

/// The `disrupt -o json` document: commands and blocked candidates in the
/// planner's order, replacements in the shape of `plan`'s node claims, and
/// the cluster's cost.
pub fn disrupt_value(response: &sched::PlanDisruptionResponse) -> Value {
    let commands: Vec<Value> = response
        .commands
        .iter()
        .map(|c| {
            json!({
                "reason": reason_name(c.reason),
                "method": method_name(c.method),
                "candidates": c.candidates,
                "replacements": c.replacements.iter().map(node_claim).collect::<Vec<_>>(),
                "savingsPerHour": round_price(c.savings_per_hour),
            })
        })
        .collect();
    let blocked: Vec<Value> = response
        .blocked
        .iter()
        .map(|b| json!({"node": b.node, "reason": b.reason}))
        .collect();
    let cost = response.cost.clone().unwrap_or_default();
    json!({
        "commands": commands,
        "blocked": blocked,
        "cost": {
            "beforePerHour": round_price(cost.before),
            "afterPerHour": round_price(cost.after),
            "lowerBoundPerHour": round_price(cost.lower_bound),
        },
        "candidatesEvaluated": response.candidates_evaluated,
    })
}

/// A table for people: one row per command, the blocked candidates, and the
/// cost before, after and at best.
pub fn disrupt_table(value: &Value) -> String {
    let commands = items(value, "commands");
    let header = [
        "REASON",
        "METHOD",
        "CANDIDATES",
        "REPLACEMENTS",
        "SAVINGS/H",
    ];
    let mut out = rows_or(commands, "No disruption.\n", &header, |c| {
        let replacements: Vec<String> = items(c, "replacements")
            .iter()
            .map(|r| s(&r["cheapest"]["instanceType"]))
            .collect();
        let candidates: Vec<String> = items(c, "candidates").iter().map(s).collect();
        vec![
            s(&c["reason"]),
            s(&c["method"]),
            candidates.join(", "),
            if replacements.is_empty() {
                "-".to_string()
            } else {
                replacements.join(", ")
            },
            format!("{:.4}", c["savingsPerHour"].as_f64().unwrap_or(0.0)),
        ]
    });
    section(
        &mut out,
        items(value, "blocked"),
        &["BLOCKED NODE", "REASON"],
        |b| vec![s(&b["node"]), s(&b["reason"])],
    );
    let cost = &value["cost"];
    let _ = writeln!(
        out,
        "\nCommands: {}   Cost per hour: before {:.4}   after {:.4}   lower bound {:.4}   ({} candidates evaluated)",
        commands.len(),
        cost["beforePerHour"].as_f64().unwrap_or(0.0),
        cost["afterPerHour"].as_f64().unwrap_or(0.0),
        cost["lowerBoundPerHour"].as_f64().unwrap_or(0.0),
        value["candidatesEvaluated"].as_i64().unwrap_or(0),
    );
    out
}

/// The array under `key` of `v`; empty when there is none.
fn items<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A row per entry of `entries` under `header`, or `none` when there are
/// no entries.
fn rows_or(
    entries: &[Value],
    none: &str,
    header: &[&str],
    row: impl Fn(&Value) -> Vec<String>,
) -> String {
    if entries.is_empty() {
        none.to_string()
    } else {
        columns(header, entries.iter().map(row))
    }
}

/// A blank line, then a row per entry of `entries` under `header`; nothing
/// when there are no entries.
fn section(
    out: &mut String,
    entries: &[Value],
    header: &[&str],
    row: impl Fn(&Value) -> Vec<String>,
) {
    if !entries.is_empty() {
        out.push('\n');
        out.push_str(&columns(header, entries.iter().map(row)));
    }
}

/// `rows` under `header`, each column as wide as its widest cell.
fn columns(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = std::iter::once(header.iter().map(|h| h.to_string()).collect())
        .chain(rows)
        .collect();
    let mut widths = Vec::new();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if widths.len() <= i {
                widths.push(0);
            }
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}   ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A table for people: new node claims, placements on existing nodes,
/// unschedulable pods, and the cost.
pub fn table(plan: &Value) -> String {
    let claims = items(plan, "nodeClaims");
    let header = [
        "NODEPOOL",
        "INSTANCE TYPE",
        "ZONE",
        "CAPACITY",
        "PRICE/H",
        "PODS",
        "OPTIONS",
    ];
    let mut out = rows_or(claims, "No new nodes.\n", &header, |c| {
        let cheapest = &c["cheapest"];
        vec![
            s(&c["nodePool"]),
            s(&cheapest["instanceType"]),
            s(&cheapest["zone"]),
            s(&cheapest["capacityType"]),
            format!("{:.4}", cheapest["price"].as_f64().unwrap_or(0.0)),
            items(c, "pods").len().to_string(),
            items(c, "instanceTypes").len().to_string(),
        ]
    });
    section(
        &mut out,
        items(plan, "existingNodes"),
        &["EXISTING NODE", "PODS"],
        |n| {
            let pods: Vec<String> = items(n, "pods").iter().map(s).collect();
            vec![s(&n["name"]), pods.join(", ")]
        },
    );
    section(
        &mut out,
        items(plan, "unschedulable"),
        &["UNSCHEDULABLE POD", "REASON"],
        |u| vec![s(&u["pod"]), s(&u["reason"])],
    );
    let _ = writeln!(
        out,
        "\nNew nodes: {}   Cost per hour: {:.4}",
        claims.len(),
        plan["costPerHour"].as_f64().unwrap_or(0.0)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> sched::SolveResponse {
        let pod = |name: &str| sched::PodRef {
            namespace: "default".into(),
            name: name.into(),
            uid: String::new(),
        };
        sched::SolveResponse {
            node_claims: vec![sched::NodeClaimPlan {
                node_pool: "default".into(),
                instance_types: vec!["r5.large".into(), "r5.xlarge".into()],
                cheapest: Some(sched::OfferingChoice {
                    instance_type: "r5.large".into(),
                    zone: "ap-northeast-1a".into(),
                    capacity_type: "on-demand".into(),
                    price: 0.152,
                }),
                requirements: vec![types::Requirement {
                    key: "karpenter.sh/capacity-type".into(),
                    operator: types::Operator::In as i32,
                    values: vec!["on-demand".into()],
                    min_values: Some(1),
                }],
                pods: vec![pod("app-1"), pod("app-0")],
                ..Default::default()
            }],
            existing_nodes: vec![sched::NodePlacement {
                node: "n1".into(),
                pods: vec![pod("app-2")],
            }],
            unschedulable: vec![sched::UnschedulablePod {
                pod: Some(pod("big-0")),
                reason: "too big".into(),
                ..Default::default()
            }],
            cost_per_hour: 0.152,
            ..Default::default()
        }
    }

    #[test]
    fn json_shape() {
        let v = plan_value(&response());
        assert_eq!(
            v["nodeClaims"][0]["pods"],
            json!(["default/app-0", "default/app-1"])
        );
        assert_eq!(v["nodeClaims"][0]["requirements"][0]["minValues"], json!(1));
        assert_eq!(
            v["existingNodes"][0],
            json!({"name": "n1", "pods": ["default/app-2"]})
        );
        assert_eq!(v["costPerHour"], json!(0.152));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "nodeClaims",
                "existingNodes",
                "unschedulable",
                "costPerHour"
            ]
        );
    }

    #[test]
    fn table_has_type_and_price() {
        let t = table(&plan_value(&response()));
        assert!(t.contains("r5.large"), "{t}");
        assert!(t.contains("0.1520"), "{t}");
        assert!(t.contains("too big"), "{t}");
        assert!(t.contains("NODEPOOL"), "{t}");
    }
}
