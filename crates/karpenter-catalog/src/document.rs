//! `kind: InstanceTypeCatalog` documents to wire instance types.
//!
//! `node.kubernetes.io/instance-type`, `topology.kubernetes.io/zone` and
//! `karpenter.sh/capacity-type` are implied by the name and the offerings;
//! a label may be a string or a list of strings (a type that can serve each).

use std::collections::{BTreeMap, BTreeSet};

use karpenter_core::labels;
use karpenter_core::quantity;
use karpenter_core::requirements::Operator;
use karpenter_proto::convert::wire_operator;
use karpenter_proto::types::v1 as types;
use serde::Deserialize;
use serde_json::Value;

/// The document kind.
pub const KIND: &str = "InstanceTypeCatalog";

/// A catalog that cannot be used, with the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CatalogError {
    /// The path in the document (`instanceTypes[0].capacity.cpu`); empty
    /// for the document as a whole.
    pub field: String,
    pub message: String,
}

impl CatalogError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CatalogDoc {
    #[serde(default)]
    instance_types: Vec<TypeDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeDoc {
    #[serde(default)]
    name: String,
    capacity: Option<Quantities>,
    overhead: Option<Quantities>,
    #[serde(default)]
    labels: BTreeMap<String, OneOrMany>,
    #[serde(default)]
    offerings: Vec<OfferingDoc>,
    /// CSI driver → how many of its volumes the type can attach.
    #[serde(default)]
    volume_attachment_limits: BTreeMap<String, i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OfferingDoc {
    #[serde(default)]
    zone: String,
    #[serde(default)]
    capacity_type: String,
    price: Option<Price>,
    available: Option<bool>,
    #[serde(default)]
    requirements: Vec<RequirementDoc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequirementDoc {
    #[serde(default)]
    key: String,
    #[serde(default)]
    operator: String,
    #[serde(default)]
    values: Vec<String>,
    min_values: Option<i32>,
}

/// A resource list whose quantities are already in wire units.
struct Quantities(BTreeMap<String, i64>);

impl<'de> Deserialize<'de> for Quantities {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = Quantities;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of resource names to quantities")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Quantities, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    let text = match map.next_value::<Value>()? {
                        Value::String(s) => s,
                        Value::Number(n) => n.to_string(),
                        other => {
                            return Err(A::Error::custom(format!(
                                "{name}: a quantity must be a string or a number, got {other}"
                            )));
                        }
                    };
                    let value = quantity::parse_resource(&name, &text).map_err(|e| {
                        A::Error::custom(format!("{name}: invalid quantity {text:?}: {e}"))
                    })?;
                    out.insert(name, value);
                }
                Ok(Quantities(out))
            }
        }
        deserializer.deserialize_map(ListVisitor)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(Scalar),
    Many(Vec<Scalar>),
}

/// Label values as YAML writes them: `"5"`, `5`, `true`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Text(String),
    Number(serde_json::Number),
    Bool(bool),
}

impl Scalar {
    fn into_text(self) -> String {
        match self {
            Scalar::Text(s) => s,
            Scalar::Number(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Price {
    Number(f64),
    Text(String),
}

fn in_values(key: &str, values: Vec<String>) -> types::Requirement {
    types::Requirement {
        key: key.to_string(),
        operator: types::Operator::In as i32,
        values,
        min_values: None,
    }
}

/// The instance types of one catalog document (any JSON value: a parsed
/// YAML or JSON document).
pub fn instance_types(document: &Value) -> Result<Vec<types::InstanceType>, CatalogError> {
    let doc: CatalogDoc = serde_path_to_error::deserialize(document).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        CatalogError::new(field, e.into_inner().to_string())
    })?;
    each(doc.instance_types, "instanceTypes", instance_type)
}

/// Converts every item of a list with `convert`, which is given the item's path (`path[i]`).
fn each<T, U>(
    items: Vec<T>,
    path: &str,
    convert: impl Fn(T, &str) -> Result<U, CatalogError>,
) -> Result<Vec<U>, CatalogError> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| convert(item, &format!("{path}[{i}]")))
        .collect()
}

fn instance_type(it: TypeDoc, path: &str) -> Result<types::InstanceType, CatalogError> {
    if it.name.is_empty() {
        return Err(CatalogError::new(format!("{path}.name"), "is required"));
    }
    let capacity = it
        .capacity
        .ok_or_else(|| CatalogError::new(format!("{path}.capacity"), "is required"))?;
    let offerings_path = format!("{path}.offerings");
    if it.offerings.is_empty() {
        return Err(CatalogError::new(
            offerings_path,
            "an instance type needs at least one offering",
        ));
    }
    let offerings = each(it.offerings, &offerings_path, offering)?;

    let mut requirements = Vec::new();
    for (key, value) in it.labels {
        let values: Vec<String> = match value {
            OneOrMany::One(v) => vec![v.into_text()],
            OneOrMany::Many(list) => list.into_iter().map(Scalar::into_text).collect(),
        };
        if values.is_empty() {
            return Err(CatalogError::new(
                format!("{path}.labels.{key}"),
                "needs at least one value",
            ));
        }
        requirements.push(in_values(&key, values));
    }
    let has = |key: &str| {
        requirements
            .iter()
            .any(|r: &types::Requirement| r.key == key)
    };
    let implied = [
        (labels::INSTANCE_TYPE, vec![it.name.clone()]),
        (
            labels::TOPOLOGY_ZONE,
            distinct(offerings.iter().map(|o| &o.zone)),
        ),
        (
            labels::CAPACITY_TYPE,
            distinct(offerings.iter().map(|o| &o.capacity_type)),
        ),
    ];
    let missing: Vec<_> = implied.into_iter().filter(|(k, _)| !has(k)).collect();
    for (key, values) in missing {
        requirements.push(in_values(key, values));
    }
    for (driver, count) in &it.volume_attachment_limits {
        if *count < 0 {
            return Err(CatalogError::new(
                format!("{path}.volumeAttachmentLimits.{driver}"),
                format!("must not be negative, got {count}"),
            ));
        }
    }
    Ok(types::InstanceType {
        name: it.name,
        requirements,
        offerings,
        capacity: Some(types::ResourceList {
            quantities: capacity.0,
        }),
        overhead: it.overhead.map(|o| types::InstanceTypeOverhead {
            kube_reserved: Some(types::ResourceList { quantities: o.0 }),
            system_reserved: None,
            eviction_threshold: None,
        }),
        price_overlaid: false,
        capacity_overlaid: false,
        volume_attachment_limits: it.volume_attachment_limits,
    })
}

fn distinct<'a>(values: impl Iterator<Item = &'a String>) -> Vec<String> {
    values
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn offering(o: OfferingDoc, path: &str) -> Result<types::Offering, CatalogError> {
    if o.zone.is_empty() {
        return Err(CatalogError::new(format!("{path}.zone"), "is required"));
    }
    if !matches!(o.capacity_type.as_str(), "on-demand" | "spot" | "reserved") {
        return Err(CatalogError::new(
            format!("{path}.capacityType"),
            format!(
                "must be on-demand, spot or reserved, got {:?}",
                o.capacity_type
            ),
        ));
    }
    let price_path = format!("{path}.price");
    let price = match o.price {
        None => return Err(CatalogError::new(price_path, "is required")),
        Some(Price::Number(n)) => n,
        Some(Price::Text(s)) => s.parse::<f64>().map_err(|_| {
            CatalogError::new(price_path.clone(), format!("must be a number, got {s:?}"))
        })?,
    };
    if !price.is_finite() || price < 0.0 {
        return Err(CatalogError::new(
            price_path,
            format!("must be a non-negative number, got {price}"),
        ));
    }
    let requirements = each(o.requirements, &format!("{path}.requirements"), requirement)?;
    Ok(types::Offering {
        zone: o.zone,
        capacity_type: o.capacity_type,
        price,
        available: o.available.unwrap_or(true),
        requirements,
    })
}

fn requirement(r: RequirementDoc, path: &str) -> Result<types::Requirement, CatalogError> {
    if r.key.is_empty() {
        return Err(CatalogError::new(format!("{path}.key"), "is required"));
    }
    let operator = Operator::parse(&r.operator).ok_or_else(|| {
        CatalogError::new(
            format!("{path}.operator"),
            format!(
                "must be In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte, got {:?}",
                r.operator
            ),
        )
    })?;
    Ok(types::Requirement {
        key: r.key,
        operator: wire_operator(operator) as i32,
        values: r.values,
        min_values: r.min_values,
    })
}

/// Every `InstanceTypeCatalog` document in a file's text (YAML, one or
/// several documents, or JSON); errors are prefixed with the document's
/// position.
pub fn load(text: &str) -> Result<Vec<types::InstanceType>, CatalogError> {
    let mut out = Vec::new();
    let mut catalogs = 0;
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document)
            .map_err(|e| CatalogError::new(format!("document {}", index + 1), e.to_string()))?;
        if value.get("kind").and_then(Value::as_str) != Some(KIND) {
            continue;
        }
        catalogs += 1;
        out.extend(instance_types(&value).map_err(|e| CatalogError {
            field: format!("document {}: {}", index + 1, e.field),
            message: e.message,
        })?);
    }
    if catalogs == 0 {
        return Err(CatalogError::new("", format!("no {KIND} document")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one_type(overrides: Value) -> Value {
        let mut it = json!({
            "name": "m5.large",
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": 29},
            "overhead": {"cpu": "80m", "memory": "600Mi"},
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": ["linux", "windows"], "karpenter.k8s.aws/instance-generation": 5},
            "offerings": [
                {"zone": "us-west-2a", "capacityType": "on-demand", "price": 0.096},
                {"zone": "us-west-2b", "capacityType": "spot", "price": "0.035", "available": false}
            ]
        });
        if let (Some(it), Some(o)) = (it.as_object_mut(), overrides.as_object()) {
            for (k, v) in o {
                it.insert(k.clone(), v.clone());
            }
        }
        json!({"kind": KIND, "instanceTypes": [it]})
    }

    fn error(doc: Value) -> CatalogError {
        match instance_types(&doc) {
            Ok(_) => panic!("expected an error"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_type_gets_its_implied_labels_and_wire_units() {
        let types = instance_types(&one_type(json!({}))).expect("valid");
        let it = &types[0];
        let caps = &it.capacity.as_ref().expect("capacity").quantities;
        assert_eq!(caps["cpu"], 2000);
        assert_eq!(caps["memory"], 8 << 30);
        assert_eq!(caps["pods"], 29);
        let values = |key: &str| {
            it.requirements
                .iter()
                .find(|r| r.key == key)
                .map(|r| r.values.clone())
        };
        assert_eq!(values(labels::INSTANCE_TYPE), Some(vec!["m5.large".into()]));
        assert_eq!(
            values(labels::TOPOLOGY_ZONE),
            Some(vec!["us-west-2a".into(), "us-west-2b".into()])
        );
        assert_eq!(
            values(labels::CAPACITY_TYPE),
            Some(vec!["on-demand".into(), "spot".into()])
        );
        assert_eq!(
            values(labels::OS),
            Some(vec!["linux".into(), "windows".into()])
        );
        assert_eq!(
            values("karpenter.k8s.aws/instance-generation"),
            Some(vec!["5".into()])
        );
        assert!(!it.offerings[1].available);
        assert_eq!(it.offerings[1].price, 0.035);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!({"name": ""}), "instanceTypes[0].name"),
            (json!({"capacity": null}), "instanceTypes[0].capacity"),
            (
                json!({"capacity": {"cpu": "1x"}}),
                "instanceTypes[0].capacity",
            ),
            (json!({"offerings": []}), "instanceTypes[0].offerings"),
            (
                json!({"offerings": [{"zone": "z", "capacityType": "cheap", "price": 1}]}),
                "instanceTypes[0].offerings[0].capacityType",
            ),
            (
                json!({"offerings": [{"zone": "z", "capacityType": "spot", "price": -1}]}),
                "instanceTypes[0].offerings[0].price",
            ),
            (
                json!({"offerings": [{"zone": "z", "capacityType": "spot"}]}),
                "instanceTypes[0].offerings[0].price",
            ),
            (
                json!({"offerings": [{"zone": "z", "capacityType": "spot", "price": 1, "requirements": [{"key": "k", "operator": "Near"}]}]}),
                "instanceTypes[0].offerings[0].requirements[0].operator",
            ),
        ];
        for (overrides, field) in cases {
            let e = error(one_type(overrides.clone()));
            assert!(e.field.starts_with(field), "{overrides}: {e}");
        }
        let quantity = error(one_type(json!({"capacity": {"cpu": "1x"}})));
        assert!(
            quantity.message.contains("cpu: invalid quantity \"1x\""),
            "{quantity}"
        );
    }

    #[test]
    fn files_with_several_documents_are_read_and_other_kinds_skipped() {
        let text = "kind: ConfigMap\nmetadata: {name: x}\n---\nkind: InstanceTypeCatalog\ninstanceTypes:\n- name: a\n  capacity: {cpu: 1}\n  offerings: [{zone: z, capacityType: spot, price: 0.1}]\n";
        let types = load(text).expect("valid file");
        assert_eq!(types.len(), 1);
        let missing = load("kind: ConfigMap\n").expect_err("no catalog");
        assert!(missing.message.contains("no InstanceTypeCatalog"));
        let bad =
            load("kind: ConfigMap\n---\nkind: InstanceTypeCatalog\ninstanceTypes: [{name: a}]\n")
                .expect_err("bad catalog");
        assert_eq!(bad.field, "document 2: instanceTypes[0].capacity");
    }
}
