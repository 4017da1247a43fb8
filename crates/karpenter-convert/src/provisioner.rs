//! `karpenter.sh/v1alpha5` Provisioner -> `karpenter.sh/v1` NodePool, plus an
//! EC2NodeClass generated from an inline `spec.provider` block.

use serde_json::{Map, Value};

use crate::common::{
    NodePoolParts, RequirementSource, convert_kubelet, convert_limits, convert_node_class_ref,
    convert_requirements, convert_weight, read_top_level, requirement_keys,
};
use crate::ctx::{Ctx, Obj, Result, format_seconds};
use crate::nodeclass::{self, Source, ec2nodeclass_ref};
use crate::note::NoteKind;
use crate::{Deferred, Partial};

const PROVISIONER_FIELDS: &[&str] = &[
    "annotations",
    "labels",
    "taints",
    "startupTaints",
    "requirements",
    "kubeletConfiguration",
    "provider",
    "providerRef",
    "ttlSecondsAfterEmpty",
    "ttlSecondsUntilExpired",
    "limits",
    "weight",
    "consolidation",
];

pub(crate) fn convert(ctx: &mut Ctx<'_>, top: Obj) -> Result<Partial> {
    let (metadata, spec) = read_top_level(
        ctx,
        top,
        "the Provisioner has no spec; the NodePool needs requirements and a nodeClassRef",
    )?;
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut spec = read_spec(ctx, spec)?;

    let mut partial = Partial::default();
    let node_class_ref = node_class(ctx, &mut spec, name.as_deref(), &mut partial)?;
    let disruption = disruption(ctx, spec.consolidation, spec.ttl_empty);
    let expire_after = expire_after(ctx, spec.ttl_expired);

    let mut template_meta = Map::new();
    if let Some(labels) = spec.labels.filter(|l| !l.is_empty()) {
        template_meta.insert("labels".into(), Value::Object(labels));
    }
    if let Some(annotations) = spec.annotations.filter(|a| !a.is_empty()) {
        template_meta.insert("annotations".into(), Value::Object(annotations));
    }
    let mut template_spec = Map::new();
    template_spec.insert("requirements".into(), Value::Array(spec.requirements));
    if let Some(r) = node_class_ref {
        template_spec.insert("nodeClassRef".into(), Value::Object(r));
    }
    if let Some(t) = spec.taints {
        template_spec.insert("taints".into(), t);
    }
    if let Some(t) = spec.startup_taints {
        template_spec.insert("startupTaints".into(), t);
    }
    template_spec.insert("expireAfter".into(), Value::String(expire_after));

    let parts = NodePoolParts {
        metadata,
        template_meta,
        template_spec,
        disruption,
        limits: spec.limits,
        weight: spec.weight,
    };
    partial.main = Some(parts.into_document());
    Ok(partial)
}

/// A Provisioner's spec, each field read and converted but not yet placed
/// in the NodePool (or the EC2NodeClass an inline provider becomes).
struct ProvisionerSpec {
    labels: Option<Map<String, Value>>,
    annotations: Option<Map<String, Value>>,
    taints: Option<Value>,
    startup_taints: Option<Value>,
    requirements: Vec<Value>,
    kubelet: Option<Map<String, Value>>,
    kubelet_path: String,
    provider: Option<Obj>,
    provider_ref: Option<Obj>,
    ttl_empty: Option<u64>,
    ttl_expired: Option<u64>,
    limits: Option<Map<String, Value>>,
    weight: Option<Value>,
    consolidation: Option<bool>,
}

/// Reads every field of the spec, in the order notes about them are
/// written, and reports the fields v1alpha5 did not have.
fn read_spec(ctx: &mut Ctx<'_>, mut spec: Obj) -> Result<ProvisionerSpec> {
    let labels = spec.take_string_map(ctx, "labels", "label value")?;
    let annotations = spec.take_string_map(ctx, "annotations", "annotation value")?;
    let taints = spec.take_list(ctx, "taints")?;
    let startup_taints = spec.take_list(ctx, "startupTaints")?;
    let mut requirements = match spec.take(ctx, "requirements") {
        Some(v) => convert_requirements(
            ctx,
            &spec.child("requirements"),
            v,
            RequirementSource::Provisioner,
        )?,
        None => Vec::new(),
    };
    if !ctx.opts.ignore_defaults {
        add_default_requirements(ctx, &mut requirements);
    }
    let kubelet_path = spec.child("kubeletConfiguration");
    let kubelet = match spec.take_object(ctx, "kubeletConfiguration")? {
        Some(kc) => Some(convert_kubelet(ctx, kc)?),
        None => None,
    };
    let provider = spec.take_object(ctx, "provider")?;
    let provider_ref = spec.take_object(ctx, "providerRef")?;
    let ttl_empty = take_seconds(ctx, &mut spec, "ttlSecondsAfterEmpty")?;
    let ttl_expired = take_seconds(ctx, &mut spec, "ttlSecondsUntilExpired")?;
    let limits = match spec.take_object(ctx, "limits")? {
        Some(mut l) => {
            let resources = match l.take(ctx, "resources") {
                Some(r) => Some(convert_limits(ctx, &l.child("resources"), r)?),
                None => None,
            };
            l.finish(ctx, &["resources"]);
            resources
        }
        None => None,
    };
    let weight = convert_weight(ctx, &mut spec)?;
    let consolidation = match spec.take_object(ctx, "consolidation")? {
        Some(mut c) => {
            let enabled = c.take_bool(ctx, "enabled")?;
            c.finish(ctx, &["enabled"]);
            enabled
        }
        None => None,
    };
    spec.finish(ctx, PROVISIONER_FIELDS);
    Ok(ProvisionerSpec {
        labels,
        annotations,
        taints,
        startup_taints,
        requirements,
        kubelet,
        kubelet_path,
        provider,
        provider_ref,
        ttl_empty,
        ttl_expired,
        limits,
        weight,
        consolidation,
    })
}

/// A `ttlSeconds…` field: a non-negative number of seconds.
fn take_seconds(ctx: &mut Ctx<'_>, spec: &mut Obj, key: &str) -> Result<Option<u64>> {
    match spec.take(ctx, key) {
        Some(v) => Ok(Some(ctx.non_negative(&spec.child(key), &v)?)),
        None => Ok(None),
    }
}

/// The NodePool's `nodeClassRef`. An inline provider becomes an
/// EC2NodeClass of the same name (pushed to `partial.extra`); with a
/// `providerRef`, or neither, the kubelet settings are deferred to the node
/// class once it is known.
fn node_class(
    ctx: &mut Ctx<'_>,
    spec: &mut ProvisionerSpec,
    name: Option<&str>,
    partial: &mut Partial,
) -> Result<Option<Map<String, Value>>> {
    let (provider, provider_ref) = (spec.provider.take(), spec.provider_ref.take());
    let spec = &*spec;
    let defer_kubelet = |partial: &mut Partial, node_class: Option<String>| {
        if let Some(kubelet) = &spec.kubelet {
            partial.deferred.push(Deferred::Kubelet {
                node_class,
                kubelet: kubelet.clone(),
                path: spec.kubelet_path.clone(),
            });
        }
    };
    match (provider, provider_ref) {
        (Some(_), Some(_)) => Err(ctx.error(
            "spec.provider",
            "provider and providerRef are mutually exclusive (v1alpha5 refused both)",
        )),
        (Some(provider), None) => {
            let node_class = node_class_from_provider(ctx, spec, provider, name)?;
            partial.extra.push(node_class);
            Ok(name.map(ec2nodeclass_ref))
        }
        (None, Some(r)) => {
            let r = convert_node_class_ref(ctx, r)?;
            let node_class = r.get("name").and_then(Value::as_str).map(str::to_string);
            defer_kubelet(partial, node_class);
            Ok(Some(r))
        }
        (None, None) => {
            ctx.note(
                NoteKind::ActionRequired,
                "spec.providerRef",
                "neither provider nor providerRef: v1 requires spec.template.spec.nodeClassRef pointing at an EC2NodeClass",
            );
            defer_kubelet(partial, None);
            Ok(None)
        }
    }
}

/// The EC2NodeClass an inline `spec.provider` becomes, named after the
/// Provisioner and carrying its kubelet settings.
fn node_class_from_provider(
    ctx: &mut Ctx<'_>,
    spec: &ProvisionerSpec,
    provider: Obj,
    name: Option<&str>,
) -> Result<Value> {
    let mut nc_spec = nodeclass::read_legacy(ctx, provider, Source::Provider)?;
    if let Some(kubelet) = &spec.kubelet {
        ctx.note(
            NoteKind::Changed,
            &spec.kubelet_path,
            "kubeletConfiguration moved to the generated EC2NodeClass spec.kubelet (v1 configures kubelet on the node class)",
        );
        nc_spec.kubelet = Some(kubelet.clone());
    }
    let mut nc_meta = Map::new();
    if let Some(name) = name {
        nc_meta.insert("name".into(), Value::String(name.to_string()));
    }
    let node_class = nodeclass::build(ctx, nc_meta, nc_spec, Source::Provider, "spec.provider")?;
    ctx.note(
        NoteKind::Changed,
        "spec.provider",
        format!(
            "the inline provider block became EC2NodeClass {:?}, emitted after the NodePool; nodeClassRef points at it",
            name.unwrap_or("")
        ),
    );
    Ok(node_class)
}

/// `spec.disruption` from `consolidation.enabled` and
/// `ttlSecondsAfterEmpty`.
fn disruption(
    ctx: &mut Ctx<'_>,
    consolidation: Option<bool>,
    ttl_empty: Option<u64>,
) -> Map<String, Value> {
    let (policy, consolidate_after) = match (consolidation, ttl_empty) {
        (Some(true), empty) => {
            if empty.is_some() {
                ctx.note(
                    NoteKind::Dropped,
                    "spec.ttlSecondsAfterEmpty",
                    "ignored: consolidation is enabled, and v1alpha5 refused both together",
                );
            }
            ctx.note(
                NoteKind::Changed,
                "spec.consolidation.enabled",
                "consolidation.enabled: true became disruption.consolidationPolicy: WhenEmptyOrUnderutilized with consolidateAfter: 0s",
            );
            ("WhenEmptyOrUnderutilized", "0s".to_string())
        }
        (_, Some(seconds)) => {
            let after = format_seconds(seconds);
            ctx.note(
                NoteKind::Changed,
                "spec.ttlSecondsAfterEmpty",
                format!("ttlSecondsAfterEmpty: {seconds} became disruption.consolidationPolicy: WhenEmpty with consolidateAfter: {after}"),
            );
            ("WhenEmpty", after)
        }
        (_, None) => {
            ctx.note(
                NoteKind::Defaulted,
                "spec",
                "neither consolidation nor ttlSecondsAfterEmpty: this Provisioner never removed empty or underutilized nodes. consolidateAfter: Never keeps it that way (v1 would otherwise consolidate right away)",
            );
            ("WhenEmpty", "Never".to_string())
        }
    };
    let mut disruption = Map::new();
    disruption.insert("consolidationPolicy".into(), policy.into());
    disruption.insert("consolidateAfter".into(), Value::String(consolidate_after));
    disruption
}

/// The template's `expireAfter` from `ttlSecondsUntilExpired`.
fn expire_after(ctx: &mut Ctx<'_>, ttl_expired: Option<u64>) -> String {
    match ttl_expired {
        Some(seconds) => {
            let after = format_seconds(seconds);
            ctx.note(
                NoteKind::Changed,
                "spec.ttlSecondsUntilExpired",
                format!("ttlSecondsUntilExpired: {seconds} became spec.template.spec.expireAfter: {after}. In v1 expiry is forceful: an expired node drains at once, without waiting for replacement capacity"),
            );
            after
        }
        None => {
            ctx.note(
                NoteKind::Defaulted,
                "spec.ttlSecondsUntilExpired",
                "not set, so nodes never expired: expireAfter: Never keeps that (v1 would default to 720h)",
            );
            "Never".to_string()
        }
    }
}

/// The requirements the AWS v1alpha5 webhook added to every Provisioner
/// that did not constrain them (linux, amd64, on-demand, and c/m/r
/// generation > 2 instances). v1 has no such defaults, so a converted
/// NodePool without them would launch different instances.
fn add_default_requirements(ctx: &mut Ctx<'_>, requirements: &mut Vec<Value>) {
    let keys = requirement_keys(requirements);
    let has = |k: &str| keys.iter().any(|key| key == k);
    let mut add = |requirements: &mut Vec<Value>, key: &str, op: &str, values: &[&str]| {
        let mut r = Map::new();
        r.insert("key".into(), key.into());
        r.insert("operator".into(), op.into());
        r.insert(
            "values".into(),
            Value::Array(values.iter().map(|v| Value::from(*v)).collect()),
        );
        requirements.push(Value::Object(r));
        ctx.note(
            NoteKind::Defaulted,
            "spec.requirements",
            format!(
                "added {key} {op} [{}]: Karpenter v1alpha5 defaulted it implicitly, v1 does not (turn off with ignore_defaults)",
                values.join(", ")
            ),
        );
    };
    if !has("kubernetes.io/os") {
        add(requirements, "kubernetes.io/os", "In", &["linux"]);
    }
    if !has("kubernetes.io/arch") {
        add(requirements, "kubernetes.io/arch", "In", &["amd64"]);
    }
    if !has("karpenter.sh/capacity-type") {
        add(
            requirements,
            "karpenter.sh/capacity-type",
            "In",
            &["on-demand"],
        );
    }
    if !has("node.kubernetes.io/instance-type")
        && !has("karpenter.k8s.aws/instance-family")
        && !has("karpenter.k8s.aws/instance-category")
        && !has("karpenter.k8s.aws/instance-generation")
    {
        add(
            requirements,
            "karpenter.k8s.aws/instance-category",
            "In",
            &["c", "m", "r"],
        );
        add(
            requirements,
            "karpenter.k8s.aws/instance-generation",
            "Gt",
            &["2"],
        );
    }
}
