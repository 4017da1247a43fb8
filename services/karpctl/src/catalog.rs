//! `kind: InstanceTypeCatalog` documents (see PLAN_CLI.md) to wire
//! instance types.
//!
//! `node.kubernetes.io/instance-type`, `topology.kubernetes.io/zone` and
//! `karpenter.sh/capacity-type` are implied by the name and the offerings;
//! a label may be a string or a list of strings (a type that can serve each).

use std::collections::BTreeSet;

use karpenter_core::labels;
use karpenter_proto::scheduler::v1 as pb;
use serde_json::Value;

use crate::fields::{Reader, join};
use crate::input::{Document, InputError};

pub const KIND: &str = "InstanceTypeCatalog";

/// The instance types of one catalog document.
pub fn instance_types(doc: &Document) -> Result<Vec<pb::InstanceType>, InputError> {
    let r = Reader::new(doc);
    let mut out = Vec::new();
    let items = r.array(r.get(&doc.value, "instanceTypes"), "instanceTypes")?;
    for (i, it) in items.iter().enumerate() {
        out.push(instance_type(&r, it, &format!("instanceTypes[{i}]"))?);
    }
    Ok(out)
}

fn in_values(key: &str, values: Vec<String>) -> pb::Requirement {
    pb::Requirement {
        key: key.to_string(),
        operator: pb::Operator::In as i32,
        values,
        min_values: None,
    }
}

fn instance_type(r: &Reader<'_>, it: &Value, path: &str) -> Result<pb::InstanceType, InputError> {
    let name = r.string_or_empty(r.get(it, "name"), &join(path, "name"))?;
    if name.is_empty() {
        return Err(r.err(join(path, "name"), "is required"));
    }
    let capacity = r
        .resources(r.get(it, "capacity"), &join(path, "capacity"))?
        .ok_or_else(|| r.err(join(path, "capacity"), "is required"))?;
    let overhead = r.resources(r.get(it, "overhead"), &join(path, "overhead"))?;

    let mut offerings = Vec::new();
    let op = join(path, "offerings");
    for (j, o) in r.array(r.get(it, "offerings"), &op)?.iter().enumerate() {
        let p = format!("{op}[{j}]");
        let zone = r.string_or_empty(r.get(o, "zone"), &join(&p, "zone"))?;
        if zone.is_empty() {
            return Err(r.err(join(&p, "zone"), "is required"));
        }
        let capacity_type =
            r.string_or_empty(r.get(o, "capacityType"), &join(&p, "capacityType"))?;
        if !matches!(capacity_type.as_str(), "on-demand" | "spot" | "reserved") {
            return Err(r.err(
                join(&p, "capacityType"),
                format!("must be on-demand, spot or reserved, got {capacity_type:?}"),
            ));
        }
        let price = match r.get(o, "price") {
            Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
            Some(Value::String(s)) => s
                .parse::<f64>()
                .map_err(|_| r.err(join(&p, "price"), format!("must be a number, got {s:?}")))?,
            None => return Err(r.err(join(&p, "price"), "is required")),
            Some(other) => {
                return Err(r.err(join(&p, "price"), format!("must be a number, got {other}")));
            }
        };
        if !price.is_finite() || price < 0.0 {
            return Err(r.err(
                join(&p, "price"),
                format!("must be a non-negative number, got {price}"),
            ));
        }
        offerings.push(pb::Offering {
            zone,
            capacity_type,
            price,
            available: r
                .bool(r.get(o, "available"), &join(&p, "available"))?
                .unwrap_or(true),
            requirements: r.requirements(r.get(o, "requirements"), &join(&p, "requirements"))?,
        });
    }
    if offerings.is_empty() {
        return Err(r.err(op, "an instance type needs at least one offering"));
    }

    let mut requirements = Vec::new();
    let lp = join(path, "labels");
    let mut has = BTreeSet::new();
    if let Some(labels) = r.object(r.get(it, "labels"), &lp)? {
        for (key, value) in labels {
            let values = match value {
                Value::Array(_) => r.strings(Some(value), &join(&lp, key))?,
                other => vec![r.string_or_empty(Some(other), &join(&lp, key))?],
            };
            if values.is_empty() {
                return Err(r.err(join(&lp, key), "needs at least one value"));
            }
            has.insert(key.clone());
            requirements.push(in_values(key, values));
        }
    }
    if !has.contains(labels::INSTANCE_TYPE) {
        requirements.push(in_values(labels::INSTANCE_TYPE, vec![name.clone()]));
    }
    if !has.contains(labels::TOPOLOGY_ZONE) {
        let zones: BTreeSet<String> = offerings.iter().map(|o| o.zone.clone()).collect();
        requirements.push(in_values(
            labels::TOPOLOGY_ZONE,
            zones.into_iter().collect(),
        ));
    }
    if !has.contains(labels::CAPACITY_TYPE) {
        let types: BTreeSet<String> = offerings.iter().map(|o| o.capacity_type.clone()).collect();
        requirements.push(in_values(
            labels::CAPACITY_TYPE,
            types.into_iter().collect(),
        ));
    }
    Ok(pb::InstanceType {
        name,
        requirements,
        offerings,
        capacity: Some(capacity),
        overhead: overhead.map(|o| pb::InstanceTypeOverhead {
            kube_reserved: Some(o),
            system_reserved: None,
            eviction_threshold: None,
        }),
    })
}
