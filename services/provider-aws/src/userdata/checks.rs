//! What the provider checks itself before writing a value into a node's
//! bootstrap script: a label, taint or kubelet setting lands inside a
//! quoted shell or PowerShell argument, a TOML string or YAML, and one
//! with a quote in it would be code run as root on the node. The API
//! server's schema and CEL rules refuse such values in a NodePool or an
//! EC2NodeClass, but a provider cannot know that they ran (an object
//! written before the CRD was tightened, a caller that is not the
//! adapter), so the same rules are applied again here.

use std::collections::BTreeMap;

use karpenter_api::ec2nodeclass::KubeletConfiguration;
use karpenter_core::kubelet::{EVICTION_SIGNALS, RESERVED_RESOURCES};
use karpenter_core::names;
use karpenter_core::quantity::Quantity;

use super::{Bootstrap, UserDataError};

fn refuse(field: &str, value: &str, why: &str) -> UserDataError {
    UserDataError::Field {
        field: field.to_owned(),
        value: value.to_owned(),
        detail: why.to_owned(),
    }
}

fn first_error(errors: Vec<String>) -> Option<String> {
    errors.into_iter().next()
}

/// Labels and taints: Kubernetes' label key and value rules, and a taint
/// effect the kubelet knows.
fn labels_and_taints(b: &Bootstrap<'_>) -> Result<(), UserDataError> {
    for (key, value) in &b.labels {
        if let Some(why) = first_error(names::qualified_name(key)) {
            return Err(refuse("node_claim.labels", key, &why));
        }
        if let Some(why) = first_error(names::label_value(value)) {
            return Err(refuse(&format!("node_claim.labels[{key}]"), value, &why));
        }
    }
    for taint in &b.taints {
        if let Some(why) = first_error(names::qualified_name(&taint.key)) {
            return Err(refuse("node_claim.taints.key", &taint.key, &why));
        }
        if let Some(why) = first_error(names::label_value(&taint.value)) {
            return Err(refuse("node_claim.taints.value", &taint.value, &why));
        }
        if !matches!(
            taint.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            return Err(refuse(
                "node_claim.taints.effect",
                &taint.effect,
                "must be one of NoSchedule, PreferNoSchedule, NoExecute",
            ));
        }
    }
    Ok(())
}

/// A resource quantity that is not negative.
fn quantity(field: &str, value: &str) -> Result<(), UserDataError> {
    match Quantity::parse(value) {
        Ok(q) if q.sign() >= 0 => Ok(()),
        Ok(_) => Err(refuse(field, value, "must not be a negative quantity")),
        Err(error) => Err(refuse(field, value, &error.to_string())),
    }
}

/// An eviction threshold: a percentage (0 to 100) or a quantity.
fn threshold(field: &str, value: &str) -> Result<(), UserDataError> {
    if let Some(percent) = value.strip_suffix('%') {
        let valid = !percent.is_empty()
            && percent.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && percent
                .parse::<f64>()
                .is_ok_and(|p| (0.0..=100.0).contains(&p));
        return if valid {
            Ok(())
        } else {
            Err(refuse(field, value, "must be a percentage from 0% to 100%"))
        };
    }
    quantity(field, value)
}

fn keys_in<V>(
    field: &str,
    map: &BTreeMap<String, V>,
    allowed: &[&str],
) -> Result<(), UserDataError> {
    match map.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(refuse(
            field,
            key,
            &format!("valid keys are {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

/// The node class's kubelet settings, as the EC2NodeClass schema has them.
fn kubelet(k: &KubeletConfiguration) -> Result<(), UserDataError> {
    for address in &k.cluster_dns {
        if address.parse::<std::net::IpAddr>().is_err() {
            return Err(refuse(
                "node_claim.node_class.spec.kubelet.clusterDNS",
                address,
                "must be an IP address",
            ));
        }
    }
    // Each map: its field, the keys it may have, and how a value is checked.
    type Check = fn(&str, &str) -> Result<(), UserDataError>;
    let maps = [
        (
            "systemReserved",
            &k.system_reserved,
            &RESERVED_RESOURCES[..],
            quantity as Check,
        ),
        (
            "kubeReserved",
            &k.kube_reserved,
            &RESERVED_RESOURCES[..],
            quantity as Check,
        ),
        (
            "evictionHard",
            &k.eviction_hard,
            &EVICTION_SIGNALS[..],
            threshold as Check,
        ),
        (
            "evictionSoft",
            &k.eviction_soft,
            &EVICTION_SIGNALS[..],
            threshold as Check,
        ),
    ];
    for (name, map, allowed, check) in maps {
        let field = format!("node_claim.node_class.spec.kubelet.{name}");
        keys_in(&field, map, allowed)?;
        for (key, value) in map {
            check(&format!("{field}[{key}]"), value)?;
        }
    }
    keys_in(
        "node_claim.node_class.spec.kubelet.evictionSoftGracePeriod",
        &k.eviction_soft_grace_period,
        &EVICTION_SIGNALS,
    )
}

/// Everything of `b` that is written into the user data, checked.
pub(super) fn check(b: &Bootstrap<'_>) -> Result<(), UserDataError> {
    labels_and_taints(b)?;
    if let Some(k) = b.kubelet {
        kubelet(k)?;
    }
    Ok(())
}
