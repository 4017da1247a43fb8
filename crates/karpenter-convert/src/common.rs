//! Pieces shared by several converters: object metadata, scheduling
//! requirements, kubelet configuration, node class references, weights,
//! limits, EC2 tags, and well-known label and annotation renames.

use serde_json::{Map, Value};

use crate::ctx::{Ctx, Obj, Result, child_path, index_path};
use crate::nodeclass::drop_status;
use crate::note::NoteKind;

use karpenter_api::aws::labels;
use karpenter_core::kubelet::{EVICTION_SIGNALS, MAPPED_FIELDS, RESERVED_RESOURCES};
use karpenter_core::object_meta;

pub(crate) const GROUP_CORE: &str = labels::KARPENTER_GROUP;
pub(crate) const GROUP_AWS: &str = labels::AWS_GROUP;
pub(crate) const V1_CORE: &str = "karpenter.sh/v1";
pub(crate) const V1_AWS: &str = "karpenter.k8s.aws/v1";
pub(crate) const KIND_NODEPOOL: &str = "NodePool";
pub(crate) const KIND_NODECLAIM: &str = "NodeClaim";
pub(crate) const KIND_EC2NODECLASS: &str = "EC2NodeClass";

pub(crate) const LABEL_PROVISIONER_NAME: &str = "karpenter.sh/provisioner-name";
pub(crate) const LABEL_NODEPOOL: &str = labels::NODE_POOL;
pub(crate) const ANNOTATION_DO_NOT_DISRUPT: &str = labels::DO_NOT_DISRUPT;
/// NodePool annotation Karpenter v1.0 reads a v1beta1 kubelet block from
/// (JSON) until it has been moved to the EC2NodeClass.
pub(crate) const ANNOTATION_KUBELET_COMPAT: &str =
    "compatibility.karpenter.sh/v1beta1-kubelet-conversion";

const CONTROLLER_ANNOTATIONS: &[&str] = &[
    "karpenter.sh/provisioner-hash",
    labels::NODE_POOL_HASH,
    labels::NODE_POOL_HASH_VERSION,
    "karpenter.k8s.aws/nodetemplate-hash",
    labels::AWS_EC2_NODE_CLASS_HASH,
    labels::AWS_EC2_NODE_CLASS_HASH_VERSION,
];

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Metadata of a converted object: identity, labels, annotations,
/// finalizers and owners are kept; what the API server fills in is dropped.
pub(crate) fn convert_metadata(
    ctx: &mut Ctx<'_>,
    metadata: Option<Value>,
    cluster_scoped: bool,
) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    let Some(metadata) = metadata else {
        ctx.note(
            NoteKind::ActionRequired,
            "metadata",
            "the document has no metadata; v1 objects need metadata.name",
        );
        return Ok(out);
    };
    let mut meta = ctx.obj("metadata".to_owned(), metadata)?;
    match meta.take_string(ctx, "name")? {
        Some(name) => {
            out.insert("name".into(), Value::String(name));
        }
        None => match meta.take_string(ctx, "generateName")? {
            Some(prefix) => {
                out.insert("generateName".into(), Value::String(prefix));
            }
            None => ctx.note(
                NoteKind::ActionRequired,
                "metadata.name",
                "the document has no name; v1 objects need metadata.name",
            ),
        },
    }
    if let Some(ns) = meta.take_string(ctx, "namespace")? {
        if cluster_scoped {
            ctx.note(
                NoteKind::Dropped,
                "metadata.namespace",
                format!("namespace {ns:?} dropped: Karpenter objects are cluster-scoped"),
            );
        } else {
            out.insert("namespace".into(), Value::String(ns));
        }
    }
    if let Some(labels) = meta.take_string_map(ctx, "labels", "label value")?
        && !labels.is_empty()
    {
        out.insert("labels".into(), Value::Object(labels));
    }
    if let Some(mut annotations) = meta.take_string_map(ctx, "annotations", "annotation value")? {
        if annotations.remove(LAST_APPLIED).is_some() {
            ctx.note(
                NoteKind::Dropped,
                &child_path("metadata.annotations", LAST_APPLIED),
                "kubectl's record of the previously applied (pre-v1) object is dropped; kubectl writes a new one on apply",
            );
        }
        for key in CONTROLLER_ANNOTATIONS {
            if annotations.remove(*key).is_some() {
                ctx.note(
                    NoteKind::Dropped,
                    &child_path("metadata.annotations", key),
                    "hash annotation maintained by the Karpenter controller; it recomputes it",
                );
            }
        }
        if !annotations.is_empty() {
            out.insert("annotations".into(), Value::Object(annotations));
        }
    }
    if let Some(finalizers) = meta.take_list(ctx, "finalizers")? {
        out.insert("finalizers".into(), finalizers);
    }
    if let Some(owners) = meta.take_list(ctx, "ownerReferences")? {
        out.insert("ownerReferences".into(), owners);
    }
    let mut server = Vec::new();
    for field in object_meta::SERVER_FIELDS {
        if meta.take_raw(field).is_some() {
            server.push(field);
        }
    }
    if !server.is_empty() {
        ctx.note(
            NoteKind::Dropped,
            "metadata",
            format!(
                "fields set by the API server dropped ({}): the object is re-created, not updated",
                server.join(", ")
            ),
        );
    }
    meta.finish(ctx, &object_meta::CLIENT_FIELDS);
    Ok(out)
}

/// Which API a requirement list comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequirementSource {
    /// v1alpha5 Provisioner: plain NodeSelectorRequirements.
    Provisioner,
    /// v1beta1 NodePool/NodeClaim: may carry `minValues`.
    V1beta1,
}

const OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];

/// Scheduling requirements: values become strings, the retired
/// `karpenter.sh/provisioner-name` requirement is dropped.
pub(crate) fn convert_requirements(
    ctx: &mut Ctx<'_>,
    path: &str,
    value: Value,
    source: RequirementSource,
) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (i, item) in ctx.array(path, value)?.into_iter().enumerate() {
        let item_path = index_path(path, i);
        let mut req = ctx.obj(item_path.clone(), item)?;
        let key = match req.take(ctx, "key") {
            Some(key) => ctx.string(&req.child("key"), &key)?,
            None => return Err(ctx.error(&item_path, "requirement has no `key`")),
        };
        let operator = match req.take(ctx, "operator") {
            Some(op) => ctx.string(&req.child("operator"), &op)?,
            None => return Err(ctx.error(&item_path, "requirement has no `operator`")),
        };
        if !OPERATORS.contains(&operator.as_str()) {
            return Err(ctx.error(
                &req.child("operator"),
                format!("expected one of {}, got {operator:?}", OPERATORS.join(", ")),
            ));
        }
        let mut values = Vec::new();
        if let Some(list) = req.take(ctx, "values") {
            let values_path = req.child("values");
            for (j, v) in ctx.array(&values_path, list)?.into_iter().enumerate() {
                let s = ctx.scalar_string(&index_path(&values_path, j), &v, "requirement value")?;
                values.push(Value::String(s));
            }
        }
        let min_values = if source == RequirementSource::V1beta1 {
            req.take_integer(ctx, "minValues")?
        } else {
            None
        };
        req.finish(ctx, &["key", "operator", "values", "minValues"]);

        if key == LABEL_PROVISIONER_NAME || key == LABEL_NODEPOOL {
            ctx.note(
                NoteKind::Dropped,
                &item_path,
                format!(
                    "requirement on {key} dropped: Karpenter sets the NodePool label itself and v1 refuses requirements on it"
                ),
            );
            continue;
        }
        match operator.as_str() {
            "In" if values.is_empty() => ctx.note(
                NoteKind::ActionRequired,
                &item_path,
                "operator In with no values: v1 rejects it; add values or use Exists",
            ),
            "Gt" | "Lt"
                if values.len() != 1
                    || values[0].as_str().is_none_or(|v| v.parse::<u64>().is_err()) =>
            {
                ctx.note(
                    NoteKind::ActionRequired,
                    &item_path,
                    format!(
                        "operator {operator} needs exactly one non-negative integer value in v1"
                    ),
                )
            }
            _ => {}
        }
        let mut r = Map::new();
        r.insert("key".into(), Value::String(key));
        r.insert("operator".into(), Value::String(operator));
        if !values.is_empty() {
            r.insert("values".into(), Value::Array(values));
        }
        if let Some(min) = min_values {
            r.insert("minValues".into(), Value::from(min));
        }
        out.push(Value::Object(r));
    }
    Ok(out)
}

/// Keys of a requirement list, with the deprecated label aliases folded
/// onto their stable names (as v1alpha5 defaulting compared them).
pub(crate) fn requirement_keys(requirements: &[Value]) -> Vec<String> {
    requirements
        .iter()
        .filter_map(|r| r.get("key").and_then(Value::as_str))
        .map(|k| labels::normalize_label(k).to_string())
        .collect()
}

/// A kubelet string map whose keys v1 limits to `allowed`; every other key is kept but noted,
/// with `why`, for the user to act on.
fn keys_within(
    ctx: &mut Ctx<'_>,
    path: &str,
    value: Value,
    what: &str,
    allowed: &[&str],
    why: &str,
) -> Result<Value> {
    let map = ctx.string_map(path, value, what)?;
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            ctx.note(NoteKind::ActionRequired, &child_path(path, key), why);
        }
    }
    Ok(Value::Object(map))
}

/// A v1alpha5 `kubeletConfiguration` or v1beta1 `kubelet` block, as the v1
/// `EC2NodeClass.spec.kubelet` block.
pub(crate) fn convert_kubelet(ctx: &mut Ctx<'_>, mut kc: Obj) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for field in &MAPPED_FIELDS {
        let path = kc.child(field);
        let Some(value) = kc.take(ctx, field) else {
            continue;
        };
        let converted = match *field {
            "clusterDNS" => {
                let mut ips = Vec::new();
                for (i, ip) in ctx.array(&path, value)?.into_iter().enumerate() {
                    ips.push(Value::String(ctx.scalar_string(
                        &index_path(&path, i),
                        &ip,
                        "cluster DNS address",
                    )?));
                }
                Value::Array(ips)
            }
            "cpuCFSQuota" => Value::Bool(ctx.boolean(&path, &value)?),
            "maxPods"
            | "podsPerCore"
            | "evictionMaxPodGracePeriod"
            | "imageGCHighThresholdPercent"
            | "imageGCLowThresholdPercent" => Value::from(ctx.integer(&path, &value)?),
            "systemReserved" | "kubeReserved" => keys_within(
                ctx,
                &path,
                value,
                "resource quantity",
                &RESERVED_RESOURCES,
                &format!("v1 only accepts {} here", RESERVED_RESOURCES.join(", ")),
            )?,
            _ => keys_within(
                ctx,
                &path,
                value,
                "eviction setting",
                &EVICTION_SIGNALS,
                &format!(
                    "v1 only accepts the signals {}",
                    EVICTION_SIGNALS.join(", ")
                ),
            )?,
        };
        out.insert((*field).to_string(), converted);
    }
    kc.drop_field(
        ctx,
        "containerRuntime",
        "containerRuntime is gone since v1beta1: containerd is the only supported runtime",
    );
    let kc_path = kc.path().to_string();
    kc.finish(ctx, &MAPPED_FIELDS);

    let soft: Vec<&String> = out
        .get("evictionSoft")
        .and_then(Value::as_object)
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    let grace: Vec<&String> = out
        .get("evictionSoftGracePeriod")
        .and_then(Value::as_object)
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    if soft.iter().any(|k| !grace.contains(k)) || grace.iter().any(|k| !soft.contains(k)) {
        ctx.note(
            NoteKind::ActionRequired,
            &kc_path,
            "v1 requires evictionSoft and evictionSoftGracePeriod to name the same signals",
        );
    }
    if let (Some(high), Some(low)) = (
        out.get("imageGCHighThresholdPercent")
            .and_then(Value::as_i64),
        out.get("imageGCLowThresholdPercent")
            .and_then(Value::as_i64),
    ) && high <= low
    {
        ctx.note(
            NoteKind::ActionRequired,
            &kc_path,
            "v1 requires imageGCHighThresholdPercent to be greater than imageGCLowThresholdPercent",
        );
    }
    Ok(out)
}

/// A `providerRef` (v1alpha5) or v1beta1 `nodeClassRef` as a v1
/// `nodeClassRef` with the now-required group and kind.
pub(crate) fn convert_node_class_ref(ctx: &mut Ctx<'_>, mut r: Obj) -> Result<Map<String, Value>> {
    let path = r.path().to_string();
    let name = r.take_string(ctx, "name")?;
    let api_version = r.take_string(ctx, "apiVersion")?;
    let kind = r.take_string(ctx, "kind")?;
    r.finish(ctx, &["name", "kind", "apiVersion"]);

    let group = match &api_version {
        Some(av) => av.split('/').next().unwrap_or_default().to_string(),
        None => GROUP_AWS.to_string(),
    };
    let kind = match kind.as_deref() {
        None => {
            ctx.note(
                NoteKind::Defaulted,
                &path,
                format!("v1 requires group and kind: set to {GROUP_AWS} / {KIND_EC2NODECLASS}"),
            );
            KIND_EC2NODECLASS.to_string()
        }
        Some("AWSNodeTemplate") => {
            ctx.note(
                NoteKind::Changed,
                &path,
                format!("AWSNodeTemplate is now {KIND_EC2NODECLASS} (group {GROUP_AWS}); convert the AWSNodeTemplate too"),
            );
            KIND_EC2NODECLASS.to_string()
        }
        Some(KIND_EC2NODECLASS) => {
            if api_version.is_none() {
                ctx.note(
                    NoteKind::Defaulted,
                    &path,
                    format!("v1 requires group: set to {GROUP_AWS}"),
                );
            }
            KIND_EC2NODECLASS.to_string()
        }
        Some(other) => {
            ctx.note(
                NoteKind::Info,
                &path,
                format!(
                    "node class kind {other} (group {group}) is not an AWS EC2NodeClass; kept as is"
                ),
            );
            other.to_string()
        }
    };
    let mut out = Map::new();
    out.insert("group".into(), Value::String(group));
    out.insert("kind".into(), Value::String(kind));
    match name {
        Some(name) => {
            out.insert("name".into(), Value::String(name));
        }
        None => ctx.note(
            NoteKind::ActionRequired,
            &child_path(&path, "name"),
            "the node class reference has no name; v1 requires one",
        ),
    }
    Ok(out)
}

/// `weight`: v1 accepts 1..=100; an empty value or 0 means "no weight".
pub(crate) fn convert_weight(ctx: &mut Ctx<'_>, spec: &mut Obj) -> Result<Option<Value>> {
    let path = spec.child("weight");
    match spec.take_raw("weight") {
        None => Ok(None),
        Some(Value::Null) => {
            ctx.note(
                NoteKind::Dropped,
                &path,
                "`weight:` has no value (null); left out, which is what it meant: no weight, ordered like weight 0",
            );
            Ok(None)
        }
        Some(value) => {
            let weight = ctx.integer(&path, &value)?;
            match weight {
                0 => {
                    ctx.note(
                        NoteKind::Dropped,
                        &path,
                        "weight 0 left out: v1 accepts 1 to 100, and no weight is ordered like 0",
                    );
                    Ok(None)
                }
                1..=100 => Ok(Some(Value::from(weight))),
                _ => Err(ctx.error(
                    &path,
                    format!("expected an integer between 1 and 100, got {weight}"),
                )),
            }
        }
    }
}

/// A resource list (`cpu: 10`, `memory: 80Gi`). Numbers stay numbers: the
/// CRD accepts integers or strings for quantities.
pub(crate) fn convert_limits(
    ctx: &mut Ctx<'_>,
    path: &str,
    value: Value,
) -> Result<Map<String, Value>> {
    let map = ctx.object(path, value)?;
    let mut out = Map::new();
    for (key, value) in map {
        let child = child_path(path, &key);
        match value {
            Value::Null => ctx.note(
                NoteKind::Dropped,
                &child,
                "limit has no value (null); left out",
            ),
            Value::String(_) | Value::Number(_) => {
                out.insert(key, value);
            }
            other => return Err(ctx.type_error(&child, "a quantity like 10 or 80Gi", &other)),
        }
    }
    Ok(out)
}

/// The top level of a NodePool-like object: `metadata` converted, `spec`
/// taken out (an empty one, with `missing_spec` noted, when there is none),
/// `status` dropped and any other field reported.
pub(crate) fn read_top_level(
    ctx: &mut Ctx<'_>,
    mut top: Obj,
    missing_spec: &str,
) -> Result<(Map<String, Value>, Obj)> {
    let metadata = top.take(ctx, "metadata");
    let metadata = convert_metadata(ctx, metadata, true)?;
    let spec = match top.take_object(ctx, "spec")? {
        Some(spec) => spec,
        None => {
            ctx.note(NoteKind::ActionRequired, "spec", missing_spec);
            Obj::new("spec", Map::new())
        }
    };
    drop_status(ctx, &mut top);
    top.finish(ctx, &["apiVersion", "kind", "metadata", "spec", "status"]);
    Ok((metadata, spec))
}

/// A `karpenter.sh/v1` document of `kind`.
pub(crate) fn v1_document(
    kind: &str,
    metadata: Map<String, Value>,
    spec: Map<String, Value>,
) -> Value {
    let mut doc = Map::new();
    doc.insert("apiVersion".into(), V1_CORE.into());
    doc.insert("kind".into(), kind.into());
    doc.insert("metadata".into(), Value::Object(metadata));
    doc.insert("spec".into(), Value::Object(spec));
    Value::Object(doc)
}

/// The converted pieces of a v1 NodePool, whichever version they came from.
pub(crate) struct NodePoolParts {
    pub metadata: Map<String, Value>,
    pub template_meta: Map<String, Value>,
    pub template_spec: Map<String, Value>,
    pub disruption: Map<String, Value>,
    pub limits: Option<Map<String, Value>>,
    pub weight: Option<Value>,
}

impl NodePoolParts {
    /// The NodePool document. The template's `metadata` is left out when
    /// empty; `limits` and `weight` only appear when set.
    pub(crate) fn into_document(self) -> Value {
        let mut template = Map::new();
        if !self.template_meta.is_empty() {
            template.insert("metadata".into(), Value::Object(self.template_meta));
        }
        template.insert("spec".into(), Value::Object(self.template_spec));
        let mut spec = Map::new();
        spec.insert("template".into(), Value::Object(template));
        spec.insert("disruption".into(), Value::Object(self.disruption));
        if let Some(limits) = self.limits {
            spec.insert("limits".into(), Value::Object(limits));
        }
        if let Some(weight) = self.weight {
            spec.insert("weight".into(), weight);
        }
        v1_document(KIND_NODEPOOL, self.metadata, spec)
    }
}

/// EC2 tags for `EC2NodeClass.spec.tags`, without the keys v1 refuses or
/// that EC2 reserves.
pub(crate) fn filter_tags(
    ctx: &mut Ctx<'_>,
    path: &str,
    tags: Map<String, Value>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in tags {
        let child = child_path(path, &key);
        let reason = if key.is_empty() {
            Some("v1 refuses empty tag keys".to_string())
        } else if key.starts_with("aws:") {
            Some("the aws: prefix is reserved by AWS; EC2 sets these tags itself and refuses them from users".to_string())
        } else if key == "eks:eks-cluster-name"
            || key.starts_with("kubernetes.io/cluster")
            || key == LABEL_NODEPOOL
            || key == "karpenter.sh/nodeclaim"
            || key == "karpenter.k8s.aws/ec2nodeclass"
        {
            Some(
                "Karpenter sets this tag on every instance; v1 refuses it in spec.tags".to_string(),
            )
        } else if key == LABEL_PROVISIONER_NAME {
            Some("tag of the retired Provisioner API; Karpenter now tags instances with karpenter.sh/nodepool itself".to_string())
        } else {
            None
        };
        if let Some(reason) = reason {
            ctx.note(NoteKind::Dropped, &child, reason);
            continue;
        }
        if key == "karpenter.sh/managed-by" {
            ctx.note(
                NoteKind::Info,
                &child,
                "Karpenter v1 no longer sets karpenter.sh/managed-by (it tags eks:eks-cluster-name instead); kept as a user tag",
            );
        }
        out.insert(key, value);
    }
    out
}

/// Renames retired well-known label keys and pod annotations anywhere in a
/// document: `karpenter.sh/provisioner-name` -> `karpenter.sh/nodepool` in
/// label maps, node selectors and selector expressions;
/// `karpenter.sh/do-not-evict` and `karpenter.sh/do-not-consolidate` ->
/// `karpenter.sh/do-not-disrupt`. Non-string label and annotation values are
/// quoted.
pub(crate) fn rewrite_references(ctx: &mut Ctx<'_>, path: &str, value: &mut Value) -> Result<()> {
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                rewrite_references(ctx, &index_path(path, i), item)?;
            }
        }
        Value::Object(map) => {
            let has_operator = map.contains_key("operator");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child = child_path(path, &key);
                match key.as_str() {
                    "labels" | "matchLabels" | "nodeSelector" => {
                        if let Some(Value::Object(labels)) = map.get_mut(&key) {
                            rewrite_label_map(ctx, &child, labels)?;
                        }
                    }
                    "annotations" => {
                        if let Some(Value::Object(annotations)) = map.get_mut(&key) {
                            rewrite_annotation_map(ctx, &child, annotations)?;
                        }
                    }
                    "key" | "topologyKey" => {
                        let is_selector = key == "topologyKey" || has_operator;
                        if let Some(Value::String(s)) = map.get_mut(&key) {
                            if is_selector && s == LABEL_PROVISIONER_NAME {
                                *s = LABEL_NODEPOOL.to_string();
                                ctx.note(
                                    NoteKind::Changed,
                                    &child,
                                    format!("{LABEL_PROVISIONER_NAME} is now {LABEL_NODEPOOL}"),
                                );
                            } else if key == "key"
                                && s == "karpenter.sh/disruption"
                                && path.contains("tolerations")
                            {
                                ctx.note(
                                    NoteKind::ActionRequired,
                                    path,
                                    "the disruption taint is now karpenter.sh/disrupted:NoSchedule; tolerating it is not recommended",
                                );
                            }
                        }
                    }
                    _ => {
                        if let Some(child_value) = map.get_mut(&key) {
                            rewrite_references(ctx, &child, child_value)?;
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn rewrite_label_map(ctx: &mut Ctx<'_>, path: &str, labels: &mut Map<String, Value>) -> Result<()> {
    if let Some(value) = labels.remove(LABEL_PROVISIONER_NAME) {
        ctx.note(
            NoteKind::Changed,
            &child_path(path, LABEL_PROVISIONER_NAME),
            format!("{LABEL_PROVISIONER_NAME} is now {LABEL_NODEPOOL}"),
        );
        labels.insert(LABEL_NODEPOOL.to_string(), value);
    }
    quote_values(ctx, path, labels, "label value")
}

fn rewrite_annotation_map(
    ctx: &mut Ctx<'_>,
    path: &str,
    annotations: &mut Map<String, Value>,
) -> Result<()> {
    for old in [
        "karpenter.sh/do-not-evict",
        "karpenter.sh/do-not-consolidate",
    ] {
        if let Some(value) = annotations.remove(old) {
            ctx.note(
                NoteKind::Changed,
                &child_path(path, old),
                format!("{old} was removed; {ANNOTATION_DO_NOT_DISRUPT} replaces it"),
            );
            annotations
                .entry(ANNOTATION_DO_NOT_DISRUPT.to_string())
                .or_insert(value);
        }
    }
    quote_values(ctx, path, annotations, "annotation value")
}

fn quote_values(
    ctx: &mut Ctx<'_>,
    path: &str,
    map: &mut Map<String, Value>,
    what: &str,
) -> Result<()> {
    for (key, value) in map.iter_mut() {
        if matches!(value, Value::Number(_) | Value::Bool(_)) {
            let s = ctx.scalar_string(&child_path(path, key), value, what)?;
            *value = Value::String(s);
        }
    }
    Ok(())
}
