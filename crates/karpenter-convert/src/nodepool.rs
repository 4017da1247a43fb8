//! `karpenter.sh/v1beta1` NodePool and NodeClaim -> `karpenter.sh/v1`, as the
//! upstream conversion webhooks do (kubernetes-sigs/karpenter
//! `nodepool_conversion.go`, `nodeclaim_conversion.go`).

use serde_json::{Map, Value};

use crate::common::{
    ANNOTATION_KUBELET_COMPAT, KIND_NODECLAIM, KIND_NODEPOOL, LABEL_NODEPOOL, RequirementSource,
    V1_CORE, convert_kubelet, convert_limits, convert_metadata, convert_node_class_ref,
    convert_requirements, convert_weight,
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

pub(crate) fn convert_nodepool(ctx: &mut Ctx<'_>, mut top: Obj) -> Result<Partial> {
    let metadata = top.take(ctx, "metadata");
    let metadata = convert_metadata(ctx, metadata, true)?;
    let mut spec = match top.take_object(ctx, "spec")? {
        Some(spec) => spec,
        None => {
            ctx.note(
                NoteKind::ActionRequired,
                "spec",
                "the NodePool has no spec; v1 needs spec.template",
            );
            Obj::new("spec", Map::new())
        }
    };
    drop_status(ctx, &mut top);
    top.finish(ctx, &["apiVersion", "kind", "metadata", "spec", "status"]);

    let mut partial = Partial::default();

    // template
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

    // disruption
    let mut disruption = Map::new();
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
    let policy_path = "spec.disruption.consolidationPolicy";
    let after_path = "spec.disruption.consolidateAfter";
    let v1_policy = match policy.as_deref() {
        Some("WhenUnderutilized") => {
            ctx.note(
                NoteKind::Changed,
                policy_path,
                "WhenUnderutilized is called WhenEmptyOrUnderutilized in v1",
            );
            "WhenEmptyOrUnderutilized"
        }
        None => {
            ctx.note(
                NoteKind::Defaulted,
                policy_path,
                "not set: v1beta1 defaulted to WhenUnderutilized, written as its v1 name WhenEmptyOrUnderutilized",
            );
            "WhenEmptyOrUnderutilized"
        }
        Some("WhenEmpty") => "WhenEmpty",
        Some(other) => {
            return Err(ctx.error(
                policy_path,
                format!("expected WhenEmpty or WhenUnderutilized, got {other:?}"),
            ));
        }
    };
    let v1_after = match (v1_policy, after) {
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
                "v1 requires consolidateAfter; 0s keeps the v1beta1 behavior of WhenUnderutilized",
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
    };
    disruption.insert("consolidationPolicy".into(), v1_policy.into());
    disruption.insert("consolidateAfter".into(), Value::String(v1_after));
    if let Some(budgets) = budgets {
        disruption.insert("budgets".into(), Value::Array(budgets));
    }
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

    let mut template = Map::new();
    if !template_meta.is_empty() {
        template.insert("metadata".into(), Value::Object(template_meta));
    }
    template.insert("spec".into(), Value::Object(template_spec));
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
        let item_path = index_path(path, i);
        let map = ctx.object(&item_path, item)?;
        let mut b = Obj::new(item_path, map);
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

    let mut doc = Map::new();
    doc.insert("apiVersion".into(), V1_CORE.into());
    doc.insert("kind".into(), KIND_NODECLAIM.into());
    doc.insert("metadata".into(), Value::Object(metadata));
    doc.insert("spec".into(), Value::Object(spec));
    partial.main = Some(Value::Object(doc));
    Ok(partial)
}
