//! EC2NodeClass conversion: v1alpha1 AWSNodeTemplate, the inline
//! `provider` block of a v1alpha5 Provisioner, and v1beta1 EC2NodeClass,
//! all into `karpenter.k8s.aws/v1` EC2NodeClass.

use serde_json::{Map, Value};

use crate::common::{GROUP_AWS, KIND_EC2NODECLASS, V1_AWS, convert_metadata, filter_tags};
use crate::ctx::{Ctx, Obj, Result, child_path, index_path};
use crate::note::NoteKind;

/// Placeholder the upstream karpenter-convert tool writes for the node role;
/// substitute it with `envsubst` or pass [`crate::Options::node_role`].
pub const NODE_ROLE_PLACEHOLDER: &str = "$KARPENTER_NODE_ROLE";

const FAMILIES: &[&str] = &[
    "AL2",
    "AL2023",
    "Bottlerocket",
    "Ubuntu",
    "Windows2019",
    "Windows2022",
    "Custom",
];

/// Where an EC2NodeClass spec comes from; decides defaults.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `karpenter.k8s.aws/v1alpha1` AWSNodeTemplate.
    NodeTemplate,
    /// Inline `spec.provider` of a `karpenter.sh/v1alpha5` Provisioner.
    Provider,
    /// `karpenter.k8s.aws/v1beta1` EC2NodeClass.
    V1beta1,
}

impl Source {
    fn legacy(self) -> bool {
        matches!(self, Source::NodeTemplate | Source::Provider)
    }
}

/// The v1 EC2NodeClass spec, field by field, before it is laid out.
#[derive(Default)]
pub(crate) struct Spec {
    ami_family: Option<String>,
    ami_selector_terms: Option<Vec<Value>>,
    subnet_selector_terms: Option<Vec<Value>>,
    security_group_selector_terms: Option<Vec<Value>>,
    role: Option<String>,
    instance_profile: Option<String>,
    pub(crate) kubelet: Option<Map<String, Value>>,
    user_data: Option<String>,
    tags: Option<Map<String, Value>>,
    block_device_mappings: Option<Vec<Value>>,
    instance_store_policy: Option<String>,
    metadata_options: Option<Map<String, Value>>,
    detailed_monitoring: Option<bool>,
    associate_public_ip_address: Option<bool>,
    context: Option<String>,
}

/// The fields of a v1alpha1 provider block (inline in a Provisioner).
const LEGACY_PROVIDER_FIELDS: &[&str] = &[
    "amiFamily",
    "context",
    "instanceProfile",
    "subnetSelector",
    "securityGroupSelector",
    "tags",
    "launchTemplate",
    "metadataOptions",
    "blockDeviceMappings",
];

/// The fields an AWSNodeTemplate has besides those of an inline provider block.
const NODE_TEMPLATE_ONLY_FIELDS: &[&str] = &[
    "userData",
    "amiSelector",
    "detailedMonitoring",
    "associatePublicIpAddress",
];

const V1BETA1_FIELDS: &[&str] = &[
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "amiSelectorTerms",
    "amiFamily",
    "userData",
    "role",
    "instanceProfile",
    "tags",
    "blockDeviceMappings",
    "instanceStorePolicy",
    "detailedMonitoring",
    "associatePublicIPAddress",
    "metadataOptions",
    "context",
];

/// Reads a v1alpha1 provider (`AWSNodeTemplate.spec` or an inline
/// `Provisioner.spec.provider`).
pub(crate) fn read_legacy(ctx: &mut Ctx<'_>, mut p: Obj, source: Source) -> Result<Spec> {
    let mut spec = Spec {
        ami_family: p.take_string(ctx, "amiFamily")?,
        context: p.take_string(ctx, "context")?,
        instance_profile: p.take_string(ctx, "instanceProfile")?,
        ..Spec::default()
    };
    spec.subnet_selector_terms = Selector::Subnet.take_legacy(ctx, &mut p, "subnetSelector")?;
    spec.security_group_selector_terms =
        Selector::SecurityGroup.take_legacy(ctx, &mut p, "securityGroupSelector")?;
    spec.tags = p.take_with(ctx, "tags", tags)?;
    if let Some(lt) = p.take(ctx, "launchTemplate") {
        ctx.note(
            NoteKind::Dropped,
            &p.child("launchTemplate"),
            format!(
                "custom launch template {} cannot be carried over: launchTemplate is gone since v1beta1. Move its settings into the EC2NodeClass (amiSelectorTerms, userData, blockDeviceMappings, metadataOptions, securityGroupSelectorTerms)",
                crate::ctx::describe(&lt)
            ),
        );
    }
    spec.metadata_options = p.take_with(ctx, "metadataOptions", metadata_options)?;
    spec.block_device_mappings = p.take_with(ctx, "blockDeviceMappings", |ctx, path, value| {
        block_device_mappings(ctx, path, value, false)
    })?;
    // The inline provider block may carry its own type header.
    p.take_raw("apiVersion");
    p.take_raw("kind");
    if source == Source::NodeTemplate {
        spec.user_data = p.take_string(ctx, "userData")?;
        spec.ami_selector_terms = Selector::Ami.take_legacy(ctx, &mut p, "amiSelector")?;
        spec.detailed_monitoring = p.take_bool(ctx, "detailedMonitoring")?;
        spec.associate_public_ip_address = p.take_bool(ctx, "associatePublicIpAddress")?;
        p.finish(
            ctx,
            &[LEGACY_PROVIDER_FIELDS, NODE_TEMPLATE_ONLY_FIELDS].concat(),
        );
    } else {
        for field in ["userData", "amiSelector", "detailedMonitoring"] {
            p.drop_field(
                ctx,
                field,
                "only an AWSNodeTemplate could set this; the inline provider block never supported it",
            );
        }
        p.finish(ctx, LEGACY_PROVIDER_FIELDS);
    }
    Ok(spec)
}

/// A node class's `tags`, without the ones Karpenter reserves.
fn tags(ctx: &mut Ctx<'_>, path: &str, value: Value) -> Result<Map<String, Value>> {
    let tags = ctx.string_map(path, value, "tag value")?;
    Ok(filter_tags(ctx, path, tags))
}

/// Reads a v1beta1 `EC2NodeClass.spec`.
pub(crate) fn read_v1beta1(ctx: &mut Ctx<'_>, mut p: Obj) -> Result<Spec> {
    let mut spec = Spec {
        ami_family: p.take_string(ctx, "amiFamily")?,
        user_data: p.take_string(ctx, "userData")?,
        role: p.take_string(ctx, "role")?,
        instance_profile: p.take_string(ctx, "instanceProfile")?,
        instance_store_policy: p.take_string(ctx, "instanceStorePolicy")?,
        detailed_monitoring: p.take_bool(ctx, "detailedMonitoring")?,
        associate_public_ip_address: p.take_bool(ctx, "associatePublicIPAddress")?,
        context: p.take_string(ctx, "context")?,
        ..Spec::default()
    };
    spec.subnet_selector_terms = Selector::Subnet.take_terms(ctx, &mut p, "subnetSelectorTerms")?;
    spec.security_group_selector_terms =
        Selector::SecurityGroup.take_terms(ctx, &mut p, "securityGroupSelectorTerms")?;
    spec.ami_selector_terms = Selector::Ami.take_terms(ctx, &mut p, "amiSelectorTerms")?;
    spec.tags = p.take_with(ctx, "tags", tags)?;
    spec.metadata_options = p.take_with(ctx, "metadataOptions", metadata_options)?;
    spec.block_device_mappings = p.take_with(ctx, "blockDeviceMappings", |ctx, path, value| {
        block_device_mappings(ctx, path, value, true)
    })?;
    p.drop_field(
        ctx,
        "launchTemplate",
        "custom launch templates are not supported since v1beta1; move the settings into the EC2NodeClass",
    );
    p.drop_field(
        ctx,
        "kubelet",
        "kubelet on an EC2NodeClass is v1-only; a v1beta1 object cannot have it",
    );
    p.finish(ctx, V1BETA1_FIELDS);
    Ok(spec)
}

/// Lays out a v1 EC2NodeClass from its metadata and spec, applying the
/// v1 rules for AMI selection, node identity and IMDS defaults.
pub(crate) fn build(
    ctx: &mut Ctx<'_>,
    metadata: Map<String, Value>,
    mut spec: Spec,
    source: Source,
    spec_path: &str,
) -> Result<Value> {
    resolve_ami(ctx, &mut spec, source, spec_path)?;
    resolve_identity(ctx, &mut spec, source, spec_path);

    if spec.metadata_options.is_none() {
        let mut mo = Map::new();
        mo.insert("httpEndpoint".into(), "enabled".into());
        mo.insert("httpProtocolIPv6".into(), "disabled".into());
        mo.insert("httpPutResponseHopLimit".into(), Value::from(2));
        mo.insert("httpTokens".into(), "required".into());
        spec.metadata_options = Some(mo);
        ctx.note(
            NoteKind::Defaulted,
            &child_path(spec_path, "metadataOptions"),
            "set explicitly to the old default (httpPutResponseHopLimit 2) so pods keep reaching IMDS; v1's default hop limit is 1. Remove it to adopt the v1 default",
        );
    }

    let required = [
        ("subnetSelectorTerms", spec.subnet_selector_terms.is_some()),
        (
            "securityGroupSelectorTerms",
            spec.security_group_selector_terms.is_some(),
        ),
        ("amiSelectorTerms", spec.ami_selector_terms.is_some()),
        (
            "role",
            spec.role.is_some() || spec.instance_profile.is_some(),
        ),
    ];
    for (field, present) in required {
        if !present {
            let what = if field == "role" {
                "role or instanceProfile".to_string()
            } else {
                field.to_string()
            };
            ctx.note(
                NoteKind::ActionRequired,
                &child_path(spec_path, field),
                format!("v1 requires {what} and the input does not set it; add it before applying"),
            );
        }
    }

    let mut out = Map::new();
    insert_set(&mut out, "amiFamily", spec.ami_family);
    insert_set(&mut out, "amiSelectorTerms", spec.ami_selector_terms);
    insert_set(&mut out, "subnetSelectorTerms", spec.subnet_selector_terms);
    insert_set(
        &mut out,
        "securityGroupSelectorTerms",
        spec.security_group_selector_terms,
    );
    insert_set(&mut out, "role", spec.role);
    insert_set(&mut out, "instanceProfile", spec.instance_profile);
    insert_set(&mut out, "kubelet", spec.kubelet);
    insert_set(&mut out, "userData", spec.user_data);
    insert_set(&mut out, "tags", spec.tags.filter(|t| !t.is_empty()));
    insert_set(&mut out, "blockDeviceMappings", spec.block_device_mappings);
    insert_set(&mut out, "instanceStorePolicy", spec.instance_store_policy);
    insert_set(&mut out, "metadataOptions", spec.metadata_options);
    insert_set(&mut out, "detailedMonitoring", spec.detailed_monitoring);
    insert_set(
        &mut out,
        "associatePublicIPAddress",
        spec.associate_public_ip_address,
    );
    insert_set(&mut out, "context", spec.context);

    let mut doc = Map::new();
    doc.insert("apiVersion".into(), V1_AWS.into());
    doc.insert("kind".into(), KIND_EC2NODECLASS.into());
    doc.insert("metadata".into(), Value::Object(metadata));
    doc.insert("spec".into(), Value::Object(out));
    Ok(Value::Object(doc))
}

/// Writes `value` under `key` when it is set: an unset field is left out of the v1 spec.
fn insert_set(out: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        out.insert(key.to_owned(), value.into());
    }
}

/// v1 requires `amiSelectorTerms`; a bare `amiFamily` becomes the alias term
/// `<family>@latest`, as the upstream conversion webhook does.
fn resolve_ami(ctx: &mut Ctx<'_>, spec: &mut Spec, source: Source, spec_path: &str) -> Result<()> {
    let family_path = child_path(spec_path, "amiFamily");
    let family = match spec.ami_family.take() {
        Some(raw) => match FAMILIES.iter().find(|f| f.eq_ignore_ascii_case(&raw)) {
            Some(f) => {
                if *f != raw {
                    ctx.note(
                        NoteKind::Changed,
                        &family_path,
                        format!("amiFamily {raw:?} written as {f:?}"),
                    );
                }
                Some(*f)
            }
            None => {
                return Err(ctx.error(
                    &family_path,
                    format!("expected one of {}, got {raw:?}", FAMILIES.join(", ")),
                ));
            }
        },
        None if source.legacy() => {
            ctx.note(
                NoteKind::Defaulted,
                &family_path,
                "no amiFamily: AL2, the v1alpha1 default, made explicit",
            );
            Some("AL2")
        }
        None => None,
    };
    let has_terms = spec
        .ami_selector_terms
        .as_ref()
        .is_some_and(|t| !t.is_empty());
    let terms_path = child_path(spec_path, "amiSelectorTerms");
    match family {
        Some("Ubuntu") => {
            spec.ami_family = Some("AL2".into());
            ctx.note(
                NoteKind::Changed,
                &family_path,
                "Ubuntu is no longer an AMI family in v1; it uses AL2's bootstrap (the same userData format) as the upstream conversion does",
            );
            if spec.block_device_mappings.is_none() {
                let mut ebs = Map::new();
                ebs.insert("encrypted".into(), Value::Bool(true));
                ebs.insert("volumeSize".into(), "20Gi".into());
                ebs.insert("volumeType".into(), "gp3".into());
                let mut bdm = Map::new();
                bdm.insert("deviceName".into(), "/dev/sda1".into());
                bdm.insert("ebs".into(), Value::Object(ebs));
                bdm.insert("rootVolume".into(), Value::Bool(true));
                spec.block_device_mappings = Some(vec![Value::Object(bdm)]);
                ctx.note(
                    NoteKind::Defaulted,
                    &child_path(spec_path, "blockDeviceMappings"),
                    "Ubuntu's default root volume (/dev/sda1, 20Gi gp3, encrypted) made explicit: AL2's default device name differs",
                );
            }
            if !has_terms {
                let mut term = Map::new();
                term.insert("id".into(), "ami-placeholder".into());
                spec.ami_selector_terms = Some(vec![Value::Object(term)]);
                ctx.note(
                    NoteKind::ActionRequired,
                    &terms_path,
                    "Ubuntu AMIs were discovered automatically; v1 cannot. amiSelectorTerms set to the placeholder id ami-placeholder (as upstream does): select your Ubuntu AMIs (e.g. by name and owner 099720109477) before applying",
                );
            }
        }
        Some("Custom") => {
            spec.ami_family = Some("Custom".into());
            ctx.note(
                NoteKind::ActionRequired,
                &family_path,
                "amiFamily Custom kept (with the amiSelectorTerms as given): Karpenter adds nothing to userData, so it must bootstrap the node itself and, in v1, register it with the karpenter.sh/unregistered:NoExecute taint",
            );
        }
        Some(f) if !has_terms => {
            let alias = format!("{}@latest", f.to_ascii_lowercase());
            let mut term = Map::new();
            term.insert("alias".into(), Value::String(alias.clone()));
            spec.ami_selector_terms = Some(vec![Value::Object(term)]);
            ctx.note(
                NoteKind::Changed,
                &family_path,
                format!(
                    "amiFamily {f} without amiSelectorTerms becomes amiSelectorTerms [{{alias: {alias}}}] (v1 requires amiSelectorTerms). @latest follows every new EKS-optimized AMI release, which drifts nodes; pin a version (e.g. {}@v20240807) for production",
                    f.to_ascii_lowercase()
                ),
            );
        }
        Some(f) => spec.ami_family = Some(f.to_string()),
        None if has_terms => ctx.note(
            NoteKind::ActionRequired,
            &family_path,
            "amiSelectorTerms without amiFamily: v1 needs amiFamily unless a term is an alias (v1beta1 required it too). Set the family of the selected AMIs (AL2, AL2023, Bottlerocket, Windows2019, Windows2022) or Custom",
        ),
        None => {}
    }
    Ok(())
}

/// v1 requires exactly one of `role` and `instanceProfile`.
fn resolve_identity(ctx: &mut Ctx<'_>, spec: &mut Spec, source: Source, spec_path: &str) {
    if !source.legacy() {
        if spec.role.is_some() && spec.instance_profile.is_some() {
            ctx.note(
                NoteKind::ActionRequired,
                spec_path,
                "both role and instanceProfile are set; v1 (like v1beta1) accepts exactly one: remove one",
            );
        }
        return;
    }
    let role_path = child_path(spec_path, "role");
    match (&spec.instance_profile, &ctx.opts.node_role) {
        (Some(profile), Some(role)) => {
            ctx.note(
                NoteKind::Changed,
                &child_path(spec_path, "instanceProfile"),
                format!("instanceProfile {profile:?} replaced by role {role:?} (given as an option): Karpenter then manages the instance profile itself"),
            );
            spec.role = Some(role.clone());
            spec.instance_profile = None;
        }
        (Some(_), None) => ctx.note(
            NoteKind::Info,
            &child_path(spec_path, "instanceProfile"),
            format!("instanceProfile kept: it still works in v1, but role is preferred (Karpenter manages the instance profile). The upstream karpenter-convert writes role: {NODE_ROLE_PLACEHOLDER} instead"),
        ),
        (None, Some(role)) => {
            spec.role = Some(role.clone());
            ctx.note(
                NoteKind::Defaulted,
                &role_path,
                format!("no instanceProfile (it came from the aws.defaultInstanceProfile setting, which is gone): role {role:?} from the options"),
            );
        }
        (None, None) => {
            spec.role = Some(NODE_ROLE_PLACEHOLDER.to_string());
            ctx.note(
                NoteKind::ActionRequired,
                &role_path,
                format!("no instanceProfile (it came from the aws.defaultInstanceProfile setting, which is gone): role set to the placeholder {NODE_ROLE_PLACEHOLDER}, as upstream karpenter-convert does. Substitute your node IAM role name (envsubst) before applying"),
            );
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Selector {
    Subnet,
    SecurityGroup,
    Ami,
}

impl Selector {
    fn term_fields(self) -> &'static [&'static str] {
        match self {
            Selector::Subnet => &["tags", "id"],
            Selector::SecurityGroup => &["tags", "id", "name"],
            Selector::Ami => &["tags", "id", "name", "owner"],
        }
    }

    /// Takes a v1alpha1 selector map (`subnetSelector`, ...) from `p`, as v1 terms.
    fn take_legacy(
        self,
        ctx: &mut Ctx<'_>,
        p: &mut Obj,
        field: &str,
    ) -> Result<Option<Vec<Value>>> {
        p.take_with(ctx, field, |ctx, path, value| {
            selector_terms(ctx, path, value, self)
        })
    }

    /// Takes v1beta1 selector terms (`subnetSelectorTerms`, ...) from `p`.
    fn take_terms(self, ctx: &mut Ctx<'_>, p: &mut Obj, field: &str) -> Result<Option<Vec<Value>>> {
        p.take_with(ctx, field, |ctx, path, value| terms(ctx, path, value, self))
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A v1alpha1 selector map (`karpenter.sh/discovery: x`, `aws-ids: a,b`,
/// `aws::name: ...`) as v1 selector terms.
fn selector_terms(
    ctx: &mut Ctx<'_>,
    path: &str,
    value: Value,
    kind: Selector,
) -> Result<Vec<Value>> {
    let map = ctx.string_map(path, value, "selector value")?;
    let mut ids = Vec::new();
    let mut names = Vec::new();
    let mut owners = Vec::new();
    let mut tags = Map::new();
    for (key, value) in map {
        let s = value.as_str().unwrap_or_default().to_string();
        let child = child_path(path, &key);
        match key.as_str() {
            "aws-ids" | "aws::ids" => ids.extend(split_list(&s)),
            "aws::name" if kind == Selector::Ami => names.extend(split_list(&s)),
            "aws::owners" if kind == Selector::Ami => owners.extend(split_list(&s)),
            k if k.starts_with("aws::") => ctx.note(
                NoteKind::Dropped,
                &child,
                format!("selector key {k} has no v1 equivalent; not carried over"),
            ),
            _ => {
                let v = if s.is_empty() {
                    ctx.note(
                        NoteKind::Changed,
                        &child,
                        "empty value (any value) written as the v1 wildcard \"*\"",
                    );
                    "*".to_string()
                } else {
                    s
                };
                tags.insert(key, Value::String(v));
            }
        }
    }
    let mut terms = Vec::new();
    if !ids.is_empty() {
        if !tags.is_empty() || !names.is_empty() || !owners.is_empty() {
            ctx.note(
                NoteKind::Dropped,
                path,
                "v1 cannot combine ids with tags, names or owners in one term; the ids are kept and the other filters dropped",
            );
        }
        for id in ids {
            let mut term = Map::new();
            term.insert("id".into(), Value::String(id));
            terms.push(Value::Object(term));
        }
        return Ok(terms);
    }
    let names: Vec<Option<String>> = if names.is_empty() {
        vec![None]
    } else {
        names.into_iter().map(Some).collect()
    };
    let owners: Vec<Option<String>> = if owners.is_empty() {
        vec![None]
    } else {
        owners.into_iter().map(Some).collect()
    };
    for owner in &owners {
        for name in &names {
            let mut term = Map::new();
            if !tags.is_empty() {
                term.insert("tags".into(), Value::Object(tags.clone()));
            }
            if let Some(name) = name {
                term.insert("name".into(), Value::String(name.clone()));
            }
            if let Some(owner) = owner {
                term.insert("owner".into(), Value::String(owner.clone()));
            }
            if !term.is_empty() {
                terms.push(Value::Object(term));
            }
        }
    }
    if terms.is_empty() {
        ctx.note(
            NoteKind::ActionRequired,
            path,
            "empty selector: it selected nothing usable; v1 needs at least one term",
        );
    }
    Ok(terms)
}

/// v1beta1 selector terms, checked field by field.
fn terms(ctx: &mut Ctx<'_>, path: &str, value: Value, kind: Selector) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (i, item) in ctx.array(path, value)?.into_iter().enumerate() {
        let item_path = index_path(path, i);
        let mut t = ctx.obj(item_path.clone(), item)?;
        let mut term = Map::new();
        for field in kind.term_fields() {
            if *field == "tags" {
                if let Some(tags) = t.take_string_map(ctx, "tags", "tag value")? {
                    let mut cleaned = Map::new();
                    for (k, v) in tags {
                        if v.as_str() == Some("") {
                            ctx.note(
                                NoteKind::Changed,
                                &child_path(&t.child("tags"), &k),
                                "empty tag value written as the wildcard \"*\" (v1 refuses empty values)",
                            );
                            cleaned.insert(k, Value::String("*".into()));
                        } else {
                            cleaned.insert(k, v);
                        }
                    }
                    term.insert("tags".into(), Value::Object(cleaned));
                }
            } else if let Some(v) = t.take_string(ctx, field)? {
                term.insert((*field).to_string(), Value::String(v));
            }
        }
        t.finish(ctx, kind.term_fields());
        if term.contains_key("id") && term.len() > 1 {
            ctx.note(
                NoteKind::ActionRequired,
                &item_path,
                "v1 does not allow id together with other fields in one term; split it",
            );
        }
        if term.is_empty() {
            ctx.note(
                NoteKind::Dropped,
                &item_path,
                "empty selector term dropped: v1 needs a field in every term",
            );
            continue;
        }
        out.push(Value::Object(term));
    }
    Ok(out)
}

fn metadata_options(ctx: &mut Ctx<'_>, path: &str, value: Value) -> Result<Map<String, Value>> {
    let mut mo = ctx.obj(path.to_owned(), value)?;
    let mut out = Map::new();
    for field in ["httpEndpoint", "httpProtocolIPv6"] {
        if let Some(v) = mo.take_string(ctx, field)? {
            if v != "enabled" && v != "disabled" {
                ctx.note(
                    NoteKind::ActionRequired,
                    &mo.child(field),
                    format!("v1 accepts enabled or disabled, got {v:?}"),
                );
            }
            out.insert(field.into(), Value::String(v));
        }
    }
    if let Some(v) = mo.take_integer(ctx, "httpPutResponseHopLimit")? {
        if !(1..=64).contains(&v) {
            ctx.note(
                NoteKind::ActionRequired,
                &mo.child("httpPutResponseHopLimit"),
                format!("v1 accepts 1 to 64, got {v}"),
            );
        }
        out.insert("httpPutResponseHopLimit".into(), Value::from(v));
    }
    if let Some(v) = mo.take_string(ctx, "httpTokens")? {
        if v != "required" && v != "optional" {
            ctx.note(
                NoteKind::ActionRequired,
                &mo.child("httpTokens"),
                format!("v1 accepts required or optional, got {v:?}"),
            );
        }
        out.insert("httpTokens".into(), Value::String(v));
    }
    mo.finish(
        ctx,
        &[
            "httpEndpoint",
            "httpProtocolIPv6",
            "httpPutResponseHopLimit",
            "httpTokens",
        ],
    );
    Ok(out)
}

const EBS_FIELDS: &[&str] = &[
    "deleteOnTermination",
    "encrypted",
    "iops",
    "kmsKeyID",
    "snapshotID",
    "throughput",
    "volumeSize",
    "volumeType",
];

fn block_device_mappings(
    ctx: &mut Ctx<'_>,
    path: &str,
    value: Value,
    root_volume_known: bool,
) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut roots = 0;
    for (i, item) in ctx.array(path, value)?.into_iter().enumerate() {
        let mut b = ctx.obj(index_path(path, i), item)?;
        let mut bdm = Map::new();
        if let Some(name) = b.take_string(ctx, "deviceName")? {
            bdm.insert("deviceName".into(), Value::String(name));
        }
        if let Some(mut ebs) = b.take_object(ctx, "ebs")? {
            let mut e = Map::new();
            for field in EBS_FIELDS {
                let Some(v) = ebs.take(ctx, field) else {
                    continue;
                };
                let fpath = ebs.child(field);
                let v = match *field {
                    "deleteOnTermination" | "encrypted" => Value::Bool(ctx.boolean(&fpath, &v)?),
                    "iops" | "throughput" => Value::from(ctx.integer(&fpath, &v)?),
                    "volumeSize" => {
                        if !v.as_str().is_some_and(is_volume_size) {
                            ctx.note(
                                NoteKind::ActionRequired,
                                &fpath,
                                format!(
                                    "v1 expects a size in Gi, G, Ti or T (like 100Gi), got {}",
                                    crate::ctx::describe(&v)
                                ),
                            );
                        }
                        v
                    }
                    _ => Value::String(ctx.string(&fpath, &v)?),
                };
                e.insert((*field).to_string(), v);
            }
            let ebs_path = ebs.path().to_string();
            ebs.finish(ctx, EBS_FIELDS);
            if !e.contains_key("snapshotID") && !e.contains_key("volumeSize") {
                ctx.note(
                    NoteKind::ActionRequired,
                    &ebs_path,
                    "v1 requires snapshotID or volumeSize in ebs",
                );
            }
            bdm.insert("ebs".into(), Value::Object(e));
        }
        if root_volume_known && let Some(root) = b.take_bool(ctx, "rootVolume")? {
            if root {
                roots += 1;
            }
            bdm.insert("rootVolume".into(), Value::Bool(root));
        }
        b.drop_field(
            ctx,
            "virtualName",
            "instance store virtual names are gone since v1beta1; use instanceStorePolicy: RAID0 to use instance storage",
        );
        b.finish(ctx, &["deviceName", "ebs", "rootVolume"]);
        out.push(Value::Object(bdm));
    }
    if roots > 1 {
        ctx.note(
            NoteKind::ActionRequired,
            path,
            "v1 allows at most one block device mapping with rootVolume: true",
        );
    }
    Ok(out)
}

/// The v1 `volumeSize` pattern: 1-59000Gi, 1-64000G, 1-58Ti, 1-64T.
fn is_volume_size(s: &str) -> bool {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    let unit = &s[digits.len()..];
    if digits.is_empty() || digits.starts_with('0') {
        return false;
    }
    let Ok(n) = digits.parse::<u64>() else {
        return false;
    };
    match unit {
        "Gi" => n <= 59_000,
        "G" => n <= 64_000,
        "Ti" => n <= 58,
        "T" => n <= 64,
        _ => false,
    }
}

/// `karpenter.k8s.aws/v1alpha1` AWSNodeTemplate -> v1 EC2NodeClass.
pub(crate) fn convert_node_template(ctx: &mut Ctx<'_>, mut top: Obj) -> Result<Value> {
    let metadata = top.take(ctx, "metadata");
    let metadata = convert_metadata(ctx, metadata, true)?;
    let spec = match top.take_object(ctx, "spec")? {
        Some(spec) => read_legacy(ctx, spec, Source::NodeTemplate)?,
        None => Spec::default(),
    };
    drop_status(ctx, &mut top);
    top.finish(ctx, &["apiVersion", "kind", "metadata", "spec", "status"]);
    build(ctx, metadata, spec, Source::NodeTemplate, "spec")
}

/// `karpenter.k8s.aws/v1beta1` EC2NodeClass -> v1 EC2NodeClass.
pub(crate) fn convert_v1beta1(ctx: &mut Ctx<'_>, mut top: Obj) -> Result<Value> {
    let metadata = top.take(ctx, "metadata");
    let metadata = convert_metadata(ctx, metadata, true)?;
    let spec = match top.take_object(ctx, "spec")? {
        Some(spec) => read_v1beta1(ctx, spec)?,
        None => {
            ctx.note(
                NoteKind::ActionRequired,
                "spec",
                "the document has no spec; a v1 EC2NodeClass needs one",
            );
            Spec::default()
        }
    };
    drop_status(ctx, &mut top);
    top.finish(ctx, &["apiVersion", "kind", "metadata", "spec", "status"]);
    build(ctx, metadata, spec, Source::V1beta1, "spec")
}

pub(crate) fn drop_status(ctx: &mut Ctx<'_>, top: &mut Obj) {
    top.drop_field(
        ctx,
        "status",
        "status is written by the Karpenter controller and is not applied from manifests; dropped",
    );
}

/// The group/kind pair a v1 node class reference needs to point at a
/// converted EC2NodeClass.
pub(crate) fn ec2nodeclass_ref(name: &str) -> Map<String, Value> {
    let mut r = Map::new();
    r.insert("group".into(), GROUP_AWS.into());
    r.insert("kind".into(), KIND_EC2NODECLASS.into());
    r.insert("name".into(), Value::String(name.to_string()));
    r
}

#[cfg(test)]
mod tests {
    use super::is_volume_size;

    #[test]
    fn volume_sizes() {
        assert!(is_volume_size("100Gi"));
        assert!(is_volume_size("20G"));
        assert!(is_volume_size("1Ti"));
        assert!(!is_volume_size("100GB"));
        assert!(!is_volume_size("0Gi"));
        assert!(!is_volume_size("100"));
        assert!(!is_volume_size("60000Gi"));
    }
}
