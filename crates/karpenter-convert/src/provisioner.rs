//! `karpenter.sh/v1alpha5` Provisioner -> `karpenter.sh/v1` NodePool, plus an
//! EC2NodeClass generated from an inline `spec.provider` block.

use serde_json::{Map, Value};

use crate::common::{
    KIND_NODEPOOL, RequirementSource, V1_CORE, convert_kubelet, convert_limits, convert_metadata,
    convert_node_class_ref, convert_requirements, convert_weight, requirement_keys,
};
use crate::ctx::{Ctx, Obj, Result, format_seconds};
use crate::nodeclass::{self, Source, drop_status, ec2nodeclass_ref};
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

pub(crate) fn convert(ctx: &mut Ctx<'_>, mut top: Obj) -> Result<Partial> {
    let metadata = top.take(ctx, "metadata");
    let metadata = convert_metadata(ctx, metadata, true)?;
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut spec = match top.take_object(ctx, "spec")? {
        Some(spec) => spec,
        None => {
            ctx.note(
                NoteKind::ActionRequired,
                "spec",
                "the Provisioner has no spec; the NodePool needs requirements and a nodeClassRef",
            );
            Obj::new("spec", Map::new())
        }
    };
    drop_status(ctx, &mut top);
    top.finish(ctx, &["apiVersion", "kind", "metadata", "spec", "status"]);

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
    let ttl_empty = match spec.take(ctx, "ttlSecondsAfterEmpty") {
        Some(v) => Some(ctx.non_negative(&spec.child("ttlSecondsAfterEmpty"), &v)?),
        None => None,
    };
    let ttl_expired = match spec.take(ctx, "ttlSecondsUntilExpired") {
        Some(v) => Some(ctx.non_negative(&spec.child("ttlSecondsUntilExpired"), &v)?),
        None => None,
    };
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

    let mut partial = Partial::default();

    // Node class: an inline provider becomes an EC2NodeClass of the same name.
    let node_class_ref = match (provider, provider_ref) {
        (Some(_), Some(_)) => {
            return Err(ctx.error(
                "spec.provider",
                "provider and providerRef are mutually exclusive (v1alpha5 refused both)",
            ));
        }
        (Some(provider), None) => {
            let mut nc_spec = nodeclass::read_legacy(ctx, provider, Source::Provider)?;
            if let Some(kubelet) = &kubelet {
                ctx.note(
                    NoteKind::Changed,
                    &kubelet_path,
                    "kubeletConfiguration moved to the generated EC2NodeClass spec.kubelet (v1 configures kubelet on the node class)",
                );
                nc_spec.kubelet = Some(kubelet.clone());
            }
            let mut nc_meta = Map::new();
            if let Some(name) = &name {
                nc_meta.insert("name".into(), Value::String(name.clone()));
            }
            let node_class =
                nodeclass::build(ctx, nc_meta, nc_spec, Source::Provider, "spec.provider")?;
            ctx.note(
                NoteKind::Changed,
                "spec.provider",
                format!(
                    "the inline provider block became EC2NodeClass {:?}, emitted after the NodePool; nodeClassRef points at it",
                    name.as_deref().unwrap_or("")
                ),
            );
            partial.extra.push(node_class);
            name.as_deref().map(ec2nodeclass_ref)
        }
        (None, Some(r)) => {
            let r = convert_node_class_ref(ctx, r)?;
            if let Some(kubelet) = &kubelet {
                partial.deferred.push(Deferred::Kubelet {
                    node_class: r.get("name").and_then(Value::as_str).map(str::to_string),
                    kubelet: kubelet.clone(),
                    path: kubelet_path.clone(),
                });
            }
            Some(r)
        }
        (None, None) => {
            ctx.note(
                NoteKind::ActionRequired,
                "spec.providerRef",
                "neither provider nor providerRef: v1 requires spec.template.spec.nodeClassRef pointing at an EC2NodeClass",
            );
            if let Some(kubelet) = &kubelet {
                partial.deferred.push(Deferred::Kubelet {
                    node_class: None,
                    kubelet: kubelet.clone(),
                    path: kubelet_path.clone(),
                });
            }
            None
        }
    };

    // Disruption.
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
    let expire_after = match ttl_expired {
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
    };

    let mut template_meta = Map::new();
    if let Some(labels) = labels.filter(|l| !l.is_empty()) {
        template_meta.insert("labels".into(), Value::Object(labels));
    }
    if let Some(annotations) = annotations.filter(|a| !a.is_empty()) {
        template_meta.insert("annotations".into(), Value::Object(annotations));
    }
    let mut template_spec = Map::new();
    template_spec.insert("requirements".into(), Value::Array(requirements));
    if let Some(r) = node_class_ref {
        template_spec.insert("nodeClassRef".into(), Value::Object(r));
    }
    if let Some(t) = taints {
        template_spec.insert("taints".into(), t);
    }
    if let Some(t) = startup_taints {
        template_spec.insert("startupTaints".into(), t);
    }
    template_spec.insert("expireAfter".into(), Value::String(expire_after));

    let mut template = Map::new();
    if !template_meta.is_empty() {
        template.insert("metadata".into(), Value::Object(template_meta));
    }
    template.insert("spec".into(), Value::Object(template_spec));

    let mut disruption = Map::new();
    disruption.insert("consolidationPolicy".into(), policy.into());
    disruption.insert("consolidateAfter".into(), Value::String(consolidate_after));

    let mut np_spec = Map::new();
    np_spec.insert("template".into(), Value::Object(template));
    np_spec.insert("disruption".into(), Value::Object(disruption));
    if let Some(limits) = limits {
        np_spec.insert("limits".into(), Value::Object(limits));
    }
    if let Some(weight) = weight {
        np_spec.insert("weight".into(), weight);
    }

    let mut doc = Map::new();
    doc.insert("apiVersion".into(), V1_CORE.into());
    doc.insert("kind".into(), KIND_NODEPOOL.into());
    doc.insert("metadata".into(), Value::Object(metadata));
    doc.insert("spec".into(), Value::Object(np_spec));
    partial.main = Some(Value::Object(doc));
    Ok(partial)
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
