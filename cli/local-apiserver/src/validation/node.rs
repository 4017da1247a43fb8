//! Nodes: `ValidateNode` (create, and again on every spec update) and
//! `ValidateNodeUpdate` (every update, the status subresource's too).

use std::net::{Ipv4Addr, Ipv6Addr};

use crd_validation::go_quote;
use karpenter_core::names::{label_value, qualified_name};
use karpenter_core::quantity::Quantity;
use serde_json::{Value, json};

use super::FieldError;
use crate::json::{list, strings, text};

const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

const POD_CIDR_CHANGE: &str = "node updates may not change podCIDR except from \"\" to valid";

/// `ValidateNode`: taints, capacity and allocatable, podCIDRs.
pub fn create(node: &Value) -> Vec<FieldError> {
    let mut errors = taints(list(&node["spec"]["taints"]));
    errors.extend(resources(node));
    errors.extend(pod_cidrs_format(&pod_cidrs(node)));
    errors
}

/// `ValidateNodeUpdate`: what may change and how.
pub fn update(node: &Value, old: &Value) -> Vec<FieldError> {
    let mut errors = resources(node);
    errors.extend(unique_addresses(list(&node["status"]["addresses"])));
    errors.extend(pod_cidrs_kept(&pod_cidrs(node), &pod_cidrs(old)));
    let before = text(&old["spec"], "providerID");
    if !before.is_empty() && before != text(&node["spec"], "providerID") {
        errors.push(FieldError::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
    errors.extend(taints(list(&node["spec"]["taints"])));
    if text(&node["spec"], "externalID") != text(&old["spec"], "externalID") {
        errors.push(FieldError::forbidden(
            "spec.externalID",
            "may not be updated",
        ));
    }
    errors
}

/// Each taint's key, value and effect; unique by key and effect. The path
/// is `metadata.taints`, as kube-apiserver names it.
fn taints(taints: &[Value]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, taint) in taints.iter().enumerate() {
        let at = format!("metadata.taints[{i}]");
        let (key, value, effect) = (
            text(taint, "key"),
            text(taint, "value"),
            text(taint, "effect"),
        );
        for detail in qualified_name(key) {
            errors.push(FieldError::invalid(format!("{at}.key"), key, &detail));
        }
        let problems = label_value(value);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                format!("{at}.value"),
                value,
                &problems.join(";"),
            ));
        }
        if effect.is_empty() {
            errors.push(FieldError::required(format!("{at}.effect"), ""));
        } else if !EFFECTS.contains(&effect) {
            errors.push(FieldError::not_supported(
                format!("{at}.effect"),
                effect,
                &EFFECTS,
            ));
        }
        if seen.contains(&(key, effect)) {
            errors.push(FieldError {
                field: at,
                reason: "FieldValueDuplicate",
                body: format!(
                    "Duplicate value: core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:(*v1.Time)(nil)}}: taints must be unique by key and effect pair",
                    go_quote(key),
                    go_quote(value),
                    go_quote(effect)
                ),
            });
        } else {
            seen.push((key, effect));
        }
    }
    errors
}

/// `ValidateNodeResources`: no negative capacity or allocatable.
fn resources(node: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for field in ["capacity", "allocatable"] {
        let Some(quantities) = node["status"][field].as_object() else {
            continue;
        };
        for (name, quantity) in quantities {
            let text = quantity.as_str().unwrap_or_default();
            if Quantity::parse(text).is_ok_and(|q| q.sign() < 0) {
                errors.push(FieldError::invalid(
                    format!("status.{field}.{name}"),
                    text,
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    errors
}

/// `spec.podCIDRs` as kube-apiserver holds it: the legacy `podCIDR` alone
/// when the list is empty.
fn pod_cidrs(node: &Value) -> Vec<&str> {
    let listed: Vec<&str> = strings(&node["spec"]["podCIDRs"]).collect();
    match text(&node["spec"], "podCIDR") {
        single if listed.is_empty() && !single.is_empty() => vec![single],
        _ => listed,
    }
}

/// Whether `cidr` is an IPv6 CIDR (`None`: not a CIDR at all).
fn cidr_family(cidr: &str) -> Option<bool> {
    let (ip, bits) = cidr.split_once('/')?;
    if bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits: u32 = bits.parse().ok()?;
    if ip.parse::<Ipv4Addr>().is_ok() {
        (bits <= 32).then_some(false)
    } else {
        ip.parse::<Ipv6Addr>()
            .ok()
            .filter(|_| bits <= 128)
            .map(|_| true)
    }
}

/// Every podCIDR a CIDR; two at most, one of each family.
fn pod_cidrs_format(cidrs: &[&str]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let families: Vec<Option<bool>> = cidrs.iter().map(|c| cidr_family(c)).collect();
    for (i, (cidr, family)) in cidrs.iter().zip(&families).enumerate() {
        if family.is_none() {
            errors.push(FieldError::invalid(
                format!("spec.podCIDRs[{i}]"),
                *cidr,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
    }
    let dual_stack = families.contains(&Some(false)) && families.contains(&Some(true));
    if cidrs.len() > 1 && (!dual_stack || cidrs.len() > 2) {
        errors.push(FieldError::invalid(
            "spec.podCIDRs",
            json!(cidrs),
            "may specify no more than one CIDR for each IP family",
        ));
    }
    errors
}

/// podCIDRs, once set, stay as they are.
fn pod_cidrs_kept(new: &[&str], old: &[&str]) -> Vec<FieldError> {
    if old.is_empty() {
        return Vec::new();
    }
    if new.len() != old.len() {
        return vec![FieldError::forbidden("spec.podCIDRs", POD_CIDR_CHANGE)];
    }
    new.iter()
        .zip(old)
        .filter(|(n, o)| n != o)
        .map(|_| FieldError::forbidden("spec.podCIDRs", POD_CIDR_CHANGE))
        .collect()
}

/// `status.addresses` holds each (type, address) once.
fn unique_addresses(addresses: &[Value]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, address) in addresses.iter().enumerate() {
        let pair = (text(address, "type"), text(address, "address"));
        if seen.contains(&pair) {
            errors.push(FieldError::duplicate(
                format!("status.addresses[{i}]"),
                json!({"type": pair.0, "address": pair.1}),
            ));
        } else {
            seen.push(pair);
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(errors: Vec<FieldError>) -> Vec<String> {
        errors.iter().map(FieldError::text).collect()
    }

    #[test]
    fn taints_are_valid_and_unique_by_key_and_effect() {
        let node = json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"},
            {"key": "a", "effect": "NoExecute"},
            {"key": "a", "value": "v", "effect": "NoSchedule"}]}});
        assert_eq!(
            texts(create(&node)),
            vec![
                "metadata.taints[2]: Duplicate value: core.Taint{Key:\"a\", Value:\"v\", Effect:\"NoSchedule\", TimeAdded:(*v1.Time)(nil)}: taints must be unique by key and effect pair"
            ]
        );
        let node = json!({"spec": {"taints": [
            {"key": "a=b", "value": "b c"},
            {"key": "k", "effect": "NoScheduleNoAdmit"}]}});
        let errors = texts(create(&node));
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors[0].starts_with("metadata.taints[0].key: Invalid value: \"a=b\": name part"));
        assert!(
            errors[1]
                .starts_with("metadata.taints[0].value: Invalid value: \"b c\": a valid label")
        );
        assert_eq!(errors[2], "metadata.taints[0].effect: Required value");
        assert_eq!(
            errors[3],
            "metadata.taints[1].effect: Unsupported value: \"NoScheduleNoAdmit\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
        );
    }

    #[test]
    fn pod_cidrs_are_cidrs_one_per_family_and_set_once() {
        assert!(create(&json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"]}})).is_empty());
        assert_eq!(
            texts(create(&json!({"spec": {"podCIDR": "10.0.0.0"}}))),
            vec![
                "spec.podCIDRs[0]: Invalid value: \"10.0.0.0\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
            ]
        );
        assert_eq!(
            texts(create(
                &json!({"spec": {"podCIDRs": ["10.0.0.0/24", "10.1.0.0/24"]}})
            )),
            vec![
                "spec.podCIDRs: Invalid value: [\"10.0.0.0/24\",\"10.1.0.0/24\"]: may specify no more than one CIDR for each IP family"
            ]
        );
        assert_eq!(cidr_family("::/129"), None);
        assert_eq!(cidr_family("10.0.0.0/+8"), None);
        let old = json!({"spec": {"podCIDR": "10.0.0.0/24"}});
        assert!(update(&json!({"spec": {"podCIDRs": ["10.0.0.0/24"]}}), &old).is_empty());
        assert_eq!(
            texts(update(
                &json!({"spec": {"podCIDRs": ["10.0.1.0/24"]}}),
                &old
            )),
            vec![format!("spec.podCIDRs: Forbidden: {POD_CIDR_CHANGE}")]
        );
        assert!(
            update(&old, &json!({"spec": {}})).is_empty(),
            "from \"\" to valid"
        );
    }

    #[test]
    fn provider_id_and_external_id_are_kept_and_addresses_unique() {
        let before = json!({"spec": {"providerID": "", "externalID": "x"}});
        let after = json!({"spec": {"providerID": "kwok://n", "externalID": "x"}});
        assert!(update(&after, &before).is_empty(), "from \"\" to valid");
        let changed = json!({"spec": {"providerID": "kwok://other", "externalID": "y"}});
        assert_eq!(
            texts(update(&changed, &after)),
            vec![
                "spec.providerID: Forbidden: node updates may not change providerID except from \"\" to valid",
                "spec.externalID: Forbidden: may not be updated",
            ]
        );
        let node = json!({"status": {"capacity": {"cpu": "-1"}, "addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "10.0.0.1"},
            {"type": "InternalIP", "address": "10.0.0.1"}]}});
        assert_eq!(
            texts(update(&node, &json!({}))),
            vec![
                "status.capacity.cpu: Invalid value: \"-1\": must be greater than or equal to 0",
                "status.addresses[2]: Duplicate value: {\"type\":\"InternalIP\",\"address\":\"10.0.0.1\"}",
            ]
        );
    }
}
