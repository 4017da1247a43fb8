//! `karpenter.sh/v1beta1` NodePool and NodeClaim -> `karpenter.sh/v1`, as the
//! upstream conversion webhooks do (kubernetes-sigs/karpenter
//! `nodepool_conversion.go`, `nodeclaim_conversion.go`).

use serde_json::{Map, Value};

use crate::common::{
    ANNOTATION_KUBELET_COMPAT, KIND_NODECLAIM, LABEL_NODEPOOL, NodePoolParts, RequirementSource,
    convert_kubelet, convert_limits, convert_metadata, convert_node_class_ref,
    convert_requirements, convert_weight, read_top_level, v1_document,
};
use crate::ctx::{Ctx, Obj, Result, index_path};
use crate::nodeclass::drop_status;
use crate::note::NoteKind;
use crate::{Deferred, Partial};

const NODEPOOL_SPEC_FIELDS: &[&str] = &["template", "disruption", "limits", "weight"];
const TEMPLATE_SPEC_FIELDS: &[&str] = &[
    "requirements",
    "nodeClassRef",
    "taints",
    "startupTaints",
    "kubelet",
];
const DISRUPTION_FIELDS: &[&str] = &[
    "consolidationPolicy",
    "consolidateAfter",
    "expireAfter",
    "budgets",
];

pub(crate) fn convert_nodepool(ctx: &mut Ctx<'_>, top: Obj) -> Result<Partial> {
    let (metadata, mut spec) =
        read_top_level(ctx, top, "the NodePool has no spec; v1 needs spec.template")?;
    let mut partial = Partial::default();
    let (template_meta, mut template_spec) = convert_template(ctx, &mut spec, &mut partial)?;
    let (disruption, expire_after) = convert_disruption(ctx, &mut spec)?;
    if let Some(expire) = &expire_after {
        ctx.note(
            NoteKind::Changed,
            "spec.disruption.expireAfter",
            format!("expireAfter {expire} moved to spec.template.spec.expireAfter. In v1 expiry is forceful: an expired node drains at once, without waiting for replacement capacity"),
        );
        template_spec.insert("expireAfter".into(), Value::String(expire.clone()));
    }
    let limits = match spec.take(ctx, "limits") {
        Some(v) => Some(convert_limits(ctx, &spec.child("limits"), v)?),
        None => None,
    };
    let weight = convert_weight(ctx, &mut spec)?;
    spec.finish(ctx, NODEPOOL_SPEC_FIELDS);

    let parts = NodePoolParts {
        metadata,
        template_meta,
        template_spec,
        disruption,
        limits,
        weight,
    };
    partial.main = Some(parts.into_document());
    Ok(partial)
}

/// `spec.template`: its metadata (labels and annotations) and its spec.
/// The kubelet block is deferred to the node class the template references.
fn convert_template(
    ctx: &mut Ctx<'_>,
    spec: &mut Obj,
    partial: &mut Partial,
) -> Result<(Map<String, Value>, Map<String, Value>)> {
    let mut template_meta = Map::new();
    let mut template_spec = Map::new();
    if let Some(mut template) = spec.take_object(ctx, "template")? {
        if let Some(mut meta) = template.take_object(ctx, "metadata")? {
            if let Some(labels) = meta.take_string_map(ctx, "labels", "label value")? {
                template_meta.insert("labels".into(), Value::Object(labels));
            }
            if let Some(ann) = meta.take_string_map(ctx, "annotations", "annotation value")? {
                template_meta.insert("annotations".into(), Value::Object(ann));
            }
            meta.finish(ctx, &["labels", "annotations"]);
        }
        if let Some(mut ts) = template.take_object(ctx, "spec")? {
            if let Some((kubelet, path)) = read_claim_spec(ctx, &mut ts, &mut template_spec)? {
                partial.deferred.push(Deferred::Kubelet {
                    node_class: template_spec
                        .get("nodeClassRef")
                        .and_then(|r| r.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    kubelet,
                    path,
                });
            }
            ts.drop_field(
                ctx,
                "resources",
                "a NodePool template has no resource requests in v1 (they were never used)",
            );
            ts.finish(ctx, TEMPLATE_SPEC_FIELDS);
        }
        template.finish(ctx, &["metadata", "spec"]);
    }
    ensure_required(ctx, "spec.template.spec", &mut template_spec);
    Ok((template_meta, template_spec))
}

/// `spec.disruption` in v1, and the `expireAfter` v1 moved from it to the
/// template.
fn convert_disruption(
    ctx: &mut Ctx<'_>,
    spec: &mut Obj,
) -> Result<(Map<String, Value>, Option<String>)> {
    let mut expire_after = None;
    let (policy, after, budgets) = match spec.take_object(ctx, "disruption")? {
        Some(mut d) => {
            let policy = d.take_string(ctx, "consolidationPolicy")?;
            let after = match d.take(ctx, "consolidateAfter") {
                Some(v) => Some(ctx.duration(&d.child("consolidateAfter"), &v, true)?),
                None => None,
            };
            if let Some(v) = d.take(ctx, "expireAfter") {
                expire_after = Some(ctx.duration(&d.child("expireAfter"), &v, true)?);
            }
            let budgets = match d.take(ctx, "budgets") {
                Some(v) => Some(convert_budgets(ctx, &d.child("budgets"), v)?),
                None => None,
            };
            d.finish(ctx, DISRUPTION_FIELDS);
            (policy, after, budgets)
        }
        None => (None, None, None),
    };
    let v1_policy = consolidation_policy(ctx, policy.as_deref())?;
    let v1_after = consolidate_after(ctx, v1_policy, after);
    let mut disruption = Map::new();
    disruption.insert("consolidationPolicy".into(), v1_policy.into());
    disruption.insert("consolidateAfter".into(), Value::String(v1_after));
    if let Some(budgets) = budgets {
        disruption.insert("budgets".into(), Value::Array(budgets));
    }
    Ok((disruption, expire_after))
}

/// `consolidationPolicy` under its v1 name; v1beta1's default,
/// WhenUnderutilized, is written out.
fn consolidation_policy(ctx: &mut Ctx<'_>, policy: Option<&str>) -> Result<&'static str> {
    let policy_path = "spec.disruption.consolidationPolicy";
    match policy {
        Some("WhenUnderutilized") => {
            ctx.note(
                NoteKind::Changed,
                policy_path,
                "WhenUnderutilized is called WhenEmptyOrUnderutilized in v1",
            );
            Ok("WhenEmptyOrUnderutilized")
        }
        None => {
            ctx.note(
                NoteKind::Defaulted,
                policy_path,
                "not set: v1beta1 defaulted to WhenUnderutilized, written as its v1 name WhenEmptyOrUnderutilized",
            );
            Ok("WhenEmptyOrUnderutilized")
        }
        Some("WhenEmpty") => Ok("WhenEmpty"),
        Some(other) => Err(ctx.error(
            policy_path,
            format!("expected WhenEmpty or WhenUnderutilized, got {other:?}"),
        )),
    }
}

/// `consolidateAfter`, written out even where Karpenter v1.15 defaults it
/// to `0s`: v1.0 to v1.14 require it. Its value keeps what the v1beta1
/// policy did.
fn consolidate_after(ctx: &mut Ctx<'_>, v1_policy: &str, after: Option<String>) -> String {
    let after_path = "spec.disruption.consolidateAfter";
    match (v1_policy, after) {
        ("WhenEmptyOrUnderutilized", Some(after)) => {
            ctx.note(
                NoteKind::Changed,
                after_path,
                format!("consolidateAfter {after} kept; v1beta1 refused it with WhenUnderutilized (it consolidated immediately), v1 waits {after} before consolidating underutilized nodes too"),
            );
            after
        }
        ("WhenEmptyOrUnderutilized", None) => {
            ctx.note(
                NoteKind::Defaulted,
                after_path,
                "v1 before v1.15 requires consolidateAfter; 0s keeps the v1beta1 behavior of WhenUnderutilized",
            );
            "0s".to_string()
        }
        (_, Some(after)) => after,
        (_, None) => {
            ctx.note(
                NoteKind::Defaulted,
                after_path,
                "v1beta1 required consolidateAfter with WhenEmpty and it is missing; set to 0s, the v1 default",
            );
            "0s".to_string()
        }
    }
}

/// v1 requires `requirements` (an empty list will do) and `nodeClassRef`.
fn ensure_required(ctx: &mut Ctx<'_>, path: &str, spec: &mut Map<String, Value>) {
    if !spec.contains_key("requirements") {
        ctx.note(
            NoteKind::ActionRequired,
            &format!("{path}.requirements"),
            "v1 requires requirements and the input has none; written as an empty list",
        );
        spec.insert("requirements".into(), Value::Array(Vec::new()));
    }
    if !spec.contains_key("nodeClassRef") {
        ctx.note(
            NoteKind::ActionRequired,
            &format!("{path}.nodeClassRef"),
            "v1 requires nodeClassRef (group, kind and name of an EC2NodeClass) and the input has none; add it before applying",
        );
    }
}

/// The parts a NodePool template spec and a NodeClaim spec share. Returns
/// the kubelet block (and its path), which has no place in a v1 NodePool or
/// NodeClaim.
fn read_claim_spec(
    ctx: &mut Ctx<'_>,
    s: &mut Obj,
    out: &mut Map<String, Value>,
) -> Result<Option<(Map<String, Value>, String)>> {
    if let Some(v) = s.take(ctx, "requirements") {
        let reqs =
            convert_requirements(ctx, &s.child("requirements"), v, RequirementSource::V1beta1)?;
        out.insert("requirements".into(), Value::Array(reqs));
    }
    if let Some(r) = s.take_object(ctx, "nodeClassRef")? {
        let r = convert_node_class_ref(ctx, r)?;
        out.insert("nodeClassRef".into(), Value::Object(r));
    }
    if let Some(t) = s.take_list(ctx, "taints")? {
        out.insert("taints".into(), t);
    }
    if let Some(t) = s.take_list(ctx, "startupTaints")? {
        out.insert("startupTaints".into(), t);
    }
    let kubelet_path = s.child("kubelet");
    match s.take_object(ctx, "kubelet")? {
        Some(kc) => Ok(Some((convert_kubelet(ctx, kc)?, kubelet_path))),
        None => Ok(None),
    }
}

fn convert_budgets(ctx: &mut Ctx<'_>, path: &str, value: Value) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (i, item) in ctx.array(path, value)?.into_iter().enumerate() {
        let mut b = ctx.obj(index_path(path, i), item)?;
        let mut budget = Map::new();
        if let Some(nodes) = b.take(ctx, "nodes") {
            let s = ctx.scalar_string(&b.child("nodes"), &nodes, "budget")?;
            budget.insert("nodes".into(), Value::String(s));
        }
        if let Some(schedule) = b.take_string(ctx, "schedule")? {
            budget.insert("schedule".into(), Value::String(schedule));
        }
        if let Some(duration) = b.take(ctx, "duration") {
            let d = ctx.duration(&b.child("duration"), &duration, false)?;
            budget.insert("duration".into(), Value::String(d));
        }
        if budget.contains_key("schedule") != budget.contains_key("duration") {
            ctx.note(
                NoteKind::ActionRequired,
                b.path(),
                "v1 requires schedule and duration together",
            );
        }
        b.finish(ctx, &["nodes", "schedule", "duration"]);
        out.push(Value::Object(budget));
    }
    Ok(out)
}

const NODECLAIM_SPEC_FIELDS: &[&str] = &[
    "requirements",
    "nodeClassRef",
    "taints",
    "startupTaints",
    "kubelet",
    "resources",
];

pub(crate) fn convert_nodeclaim(ctx: &mut Ctx<'_>, mut top: Obj) -> Result<Partial> {
    let metadata = top.take(ctx, "metadata");
    let metadata = convert_metadata(ctx, metadata, true)?;
    let nodepool = metadata
        .get("labels")
        .and_then(|l| l.get(LABEL_NODEPOOL))
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut metadata = metadata;
    let mut partial = Partial::default();
    let mut spec = Map::new();
    if let Some(mut s) = top.take_object(ctx, "spec")? {
        if let Some((kubelet, path)) = read_claim_spec(ctx, &mut s, &mut spec)? {
            let json = Value::Object(kubelet).to_string();
            let annotations = metadata
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(annotations) = annotations {
                annotations.insert(ANNOTATION_KUBELET_COMPAT.into(), Value::String(json));
            }
            ctx.note(
                    NoteKind::Changed,
                    &path,
                    format!("v1 NodeClaims have no kubelet block; kept as JSON in the annotation {ANNOTATION_KUBELET_COMPAT}, as the upstream conversion does"),
                );
        }
        if let Some(r) = s.take_object(ctx, "resources")? {
            spec.insert("resources".into(), Value::Object(r.into_map()));
        }
        s.finish(ctx, NODECLAIM_SPEC_FIELDS);
    }
    ensure_required(ctx, "spec", &mut spec);
    drop_status(ctx, &mut top);
    top.finish(ctx, &["apiVersion", "kind", "metadata", "spec", "status"]);
    ctx.note(
        NoteKind::Info,
        "",
        "NodeClaims are created and deleted by Karpenter; applying one from a manifest launches an instance outside any NodePool's control",
    );
    partial.deferred.push(Deferred::ExpireAfter { nodepool });

    partial.main = Some(v1_document(KIND_NODECLAIM, metadata, spec));
    Ok(partial)
}
