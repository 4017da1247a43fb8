//! Converts older Karpenter manifests into the Karpenter v1 API.
//!
//! This is the offline counterpart of the upstream `karpenter-convert` tool
//! (aws/karpenter-provider-aws `tools/karpenter-convert`, v1alpha5 ->
//! v1beta1) chained with the v1beta1 -> v1 conversion the upstream
//! conversion webhooks perform (kubernetes-sigs/karpenter
//! `pkg/apis/v1/nodepool_conversion.go`, `nodeclaim_conversion.go`;
//! aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass_conversion.go`).
//!
//! # Model
//!
//! Documents are untyped [`serde_json::Value`] trees, so that any input can
//! be read, including the invalid ones users really write, and every
//! problem can be reported precisely instead of failing deserialization.
//!
//! | input                                        | output                                   |
//! |----------------------------------------------|------------------------------------------|
//! | `karpenter.sh/v1alpha5` Provisioner          | `karpenter.sh/v1` NodePool, plus an EC2NodeClass when it has an inline `provider` |
//! | `karpenter.k8s.aws/v1alpha1` AWSNodeTemplate | `karpenter.k8s.aws/v1` EC2NodeClass      |
//! | `karpenter.sh/v1beta1` NodePool / NodeClaim  | `karpenter.sh/v1` NodePool / NodeClaim   |
//! | `karpenter.k8s.aws/v1beta1` EC2NodeClass     | `karpenter.k8s.aws/v1` EC2NodeClass      |
//! | `karpenter.sh/v1`, `karpenter.k8s.aws/v1`    | unchanged (checked: unknown fields, empty values) |
//! | anything else                                | unchanged, except: `karpenter.sh/provisioner-name` in label maps, node selectors and selector expressions becomes `karpenter.sh/nodepool`; pod annotations `karpenter.sh/do-not-evict` / `do-not-consolidate` become `karpenter.sh/do-not-disrupt`; boolean or numeric label/annotation values are quoted. Old settings ConfigMaps get notes |
//!
//! Each converter consumes its input field by field: every field is carried
//! over, transformed, or reported. Whatever cannot be carried over exactly
//! becomes a [`Note`] naming the document (file, position, kind, name), the
//! field path in the input, and why. Input that cannot be interpreted at all
//! (a string where an integer belongs, contradictory fields) is a
//! [`ConvertError`] naming the same.
//!
//! A single document converts on its own ([`convert`]). Some v1 moves span
//! documents: kubelet settings moved from the NodePool to the EC2NodeClass
//! it references, and a NodeClaim takes `expireAfter` from its NodePool.
//! [`convert_all`] converts a batch and resolves those across documents;
//! alone, the kubelet block is kept in the NodePool annotation
//! `compatibility.karpenter.sh/v1beta1-kubelet-conversion`, as upstream
//! does, with a note.

mod common;
mod ctx;
mod error;
mod nodeclass;
mod nodepool;
mod note;
mod passthrough;
mod provisioner;
mod yaml;

use serde_json::{Map, Value};

pub use error::{ConvertError, FieldError};
pub use nodeclass::NODE_ROLE_PLACEHOLDER;
pub use note::{DocumentId, Note, NoteKind};
pub use yaml::{Input, ParsedYaml, parse_yaml, read_documents, to_yaml};

use common::{
    ANNOTATION_KUBELET_COMPAT, GROUP_AWS, GROUP_CORE, KIND_EC2NODECLASS, KIND_NODEPOOL, V1_AWS,
    V1_CORE,
};
use ctx::{Ctx, Obj};

/// Conversion choices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Do not add the requirements the v1alpha5 AWS webhook defaulted
    /// implicitly (`kubernetes.io/os: linux`, `kubernetes.io/arch: amd64`,
    /// on-demand capacity, c/m/r generation > 2 instances). Same as the
    /// upstream tool's `--ignore-defaults`.
    pub ignore_defaults: bool,
    /// IAM role name for EC2NodeClasses made from AWSNodeTemplates or
    /// inline providers. Without it, those get [`NODE_ROLE_PLACEHOLDER`]
    /// when they name no instance profile, and keep their instance profile
    /// otherwise.
    pub node_role: Option<String>,
}

/// The result of a conversion.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversion {
    /// Output documents, in input order; a Provisioner with an inline
    /// provider yields its NodePool followed by the generated EC2NodeClass.
    pub documents: Vec<Value>,
    /// Everything that was not carried over unchanged.
    pub notes: Vec<Note>,
}

impl Conversion {
    /// The documents as a multi-document YAML stream.
    pub fn to_yaml(&self) -> Result<String, ConvertError> {
        to_yaml(&self.documents)
    }

    /// Notes about one input document, by kind and name.
    pub fn notes_for<'a>(&'a self, kind: &'a str, name: &'a str) -> impl Iterator<Item = &'a Note> {
        self.notes.iter().filter(move |n| {
            n.document.kind.as_deref() == Some(kind) && n.document.name.as_deref() == Some(name)
        })
    }
}

/// Converts one document with default [`Options`].
pub fn convert(doc: &Value) -> Result<Conversion, ConvertError> {
    convert_with(doc, &Options::default())
}

/// Converts one document (a `kind: List` converts its items).
pub fn convert_with(doc: &Value, opts: &Options) -> Result<Conversion, ConvertError> {
    let inputs: Vec<Input> = flatten_list(doc.clone())
        .into_iter()
        .map(|value| {
            let mut input = Input::new(None, 0, value);
            input.id.index = None;
            input
        })
        .collect();
    convert_inputs(&inputs, opts)
}

/// Converts a batch of documents with default [`Options`], resolving the
/// moves that span documents (see the crate documentation).
pub fn convert_all(docs: &[Value]) -> Result<Conversion, ConvertError> {
    convert_all_with(docs, &Options::default())
}

/// Converts a batch of documents, resolving the moves that span documents.
pub fn convert_all_with(docs: &[Value], opts: &Options) -> Result<Conversion, ConvertError> {
    let inputs: Vec<Input> = docs
        .iter()
        .cloned()
        .flat_map(flatten_list)
        .enumerate()
        .map(|(i, value)| Input::new(None, i, value))
        .collect();
    convert_inputs(&inputs, opts)
}

/// Parses a YAML text (see [`parse_yaml`]) and converts all its documents
/// as one batch. Notes and errors name `source_name`.
pub fn convert_yaml(
    source_name: &str,
    text: &str,
    opts: &Options,
) -> Result<Conversion, ConvertError> {
    let parsed = parse_yaml(source_name, text)?;
    let mut conversion = convert_inputs(&parsed.inputs, opts)?;
    let mut notes = parsed.notes;
    notes.append(&mut conversion.notes);
    conversion.notes = notes;
    Ok(conversion)
}

/// Converts a batch of identified documents (e.g. from several files), as
/// one batch.
pub fn convert_inputs(inputs: &[Input], opts: &Options) -> Result<Conversion, ConvertError> {
    let mut batch = Batch::default();
    for input in inputs {
        let converted = convert_input(input, opts)?;
        batch.push(input, converted);
    }
    batch.resolve();
    Ok(Conversion {
        documents: batch.docs.into_iter().map(|d| d.value).collect(),
        notes: batch.notes,
    })
}

fn flatten_list(value: Value) -> Vec<Value> {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value.get("items").is_some_and(Value::is_array);
    match value {
        Value::Object(map) if is_list => match map.into_iter().find(|(k, _)| k == "items") {
            Some((_, Value::Array(items))) => items.into_iter().flat_map(flatten_list).collect(),
            _ => Vec::new(),
        },
        other => vec![other],
    }
}

/// What converting one input produced, before batch resolution.
#[derive(Default)]
pub(crate) struct Partial {
    /// The converted document (NodePool, NodeClaim, EC2NodeClass).
    pub(crate) main: Option<Value>,
    /// Further documents made from the input (an EC2NodeClass generated
    /// from an inline provider).
    pub(crate) extra: Vec<Value>,
    /// Moves to finish once the whole batch is known; they concern `main`.
    pub(crate) deferred: Vec<Deferred>,
}

/// Moves that may involve another document of the batch.
pub(crate) enum Deferred {
    /// Kubelet settings of a NodePool, which belong to the EC2NodeClass it
    /// references in v1.
    Kubelet {
        node_class: Option<String>,
        kubelet: Map<String, Value>,
        path: String,
    },
    /// A NodeClaim's `expireAfter`, which comes from its NodePool.
    ExpireAfter { nodepool: Option<String> },
}

struct Converted {
    documents: Vec<Value>,
    /// Whether `documents[i]` was produced (not passed through).
    produced: Vec<bool>,
    notes: Vec<Note>,
    deferred: Vec<Deferred>,
}

fn convert_input(input: &Input, opts: &Options) -> Result<Converted, ConvertError> {
    let mut ctx = Ctx::new(input.id.clone(), opts);
    let Value::Object(map) = &input.value else {
        return Err(ctx.type_error(
            "",
            "a mapping (a Kubernetes object with apiVersion and kind)",
            &input.value,
        ));
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str);
    let kind = map.get("kind").and_then(Value::as_str);
    passthrough::placeholder_notes(&mut ctx, "", &input.value);

    let pass = |ctx: Ctx<'_>, value: Value| Converted {
        documents: vec![value],
        produced: vec![false],
        notes: ctx.notes,
        deferred: Vec::new(),
    };

    let (Some(api_version), Some(kind)) = (api_version, kind) else {
        ctx.note(
            NoteKind::Info,
            "",
            "not a Kubernetes object (no apiVersion or kind); passed through unchanged",
        );
        return Ok(pass(ctx, input.value.clone()));
    };
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let karpenter = group == GROUP_CORE || group == GROUP_AWS;

    if api_version == V1_CORE || api_version == V1_AWS {
        passthrough::lint_v1(&mut ctx, kind, &input.value);
        return Ok(pass(ctx, input.value.clone()));
    }

    let mut value = input.value.clone();
    common::rewrite_references(&mut ctx, "", &mut value)?;
    let Value::Object(map) = value else {
        return Err(ctx.error("", "expected a mapping"));
    };
    let converter: Option<Converter> = match (api_version, kind) {
        ("karpenter.sh/v1alpha5", "Provisioner") => Some(provisioner::convert),
        ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => Some(|ctx, top| {
            Ok(Partial {
                main: Some(nodeclass::convert_node_template(ctx, top)?),
                ..Partial::default()
            })
        }),
        ("karpenter.sh/v1beta1", "NodePool") => Some(nodepool::convert_nodepool),
        ("karpenter.sh/v1beta1", "NodeClaim") => Some(nodepool::convert_nodeclaim),
        ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => Some(|ctx, top| {
            Ok(Partial {
                main: Some(nodeclass::convert_v1beta1(ctx, top)?),
                ..Partial::default()
            })
        }),
        _ => None,
    };
    if let Some(converter) = converter {
        let mut map = map;
        map.remove("apiVersion");
        map.remove("kind");
        let partial = converter(&mut ctx, Obj::new("", map))?;
        let mut documents = Vec::new();
        documents.extend(partial.main);
        documents.extend(partial.extra);
        return Ok(Converted {
            produced: vec![true; documents.len()],
            documents,
            notes: ctx.notes,
            deferred: partial.deferred,
        });
    }
    let value = Value::Object(map);
    match kind {
        "Machine" if karpenter => {
            ctx.note(
                NoteKind::ActionRequired,
                "",
                "the Machine API was retired with v1beta1 (NodeClaims replace Machines and are created by Karpenter); passed through unchanged, it cannot be applied to a v1 cluster",
            );
            Ok(pass(ctx, value))
        }
        _ if karpenter => {
            ctx.note(
                NoteKind::ActionRequired,
                "",
                format!("{api_version} {kind} is not a Karpenter API this converter knows; passed through unchanged"),
            );
            Ok(pass(ctx, value))
        }
        _ => {
            if api_version == "v1" && kind == "ConfigMap" {
                passthrough::configmap_notes(&mut ctx, &value);
            }
            Ok(pass(ctx, value))
        }
    }
}

type Converter = fn(&mut Ctx<'_>, Obj) -> Result<Partial, ConvertError>;

/// A NodePool's kubelet block on its way to an EC2NodeClass.
struct KubeletMove {
    /// Output index of the NodePool.
    index: usize,
    source: DocumentId,
    node_class: Option<String>,
    kubelet: Map<String, Value>,
    path: String,
}

struct OutDoc {
    value: Value,
    source: DocumentId,
    produced: bool,
}

#[derive(Default)]
struct Batch {
    docs: Vec<OutDoc>,
    notes: Vec<Note>,
    /// (output index of the document concerned, its source, the move)
    deferred: Vec<(usize, DocumentId, Deferred)>,
}

impl Batch {
    fn push(&mut self, input: &Input, converted: Converted) {
        let first = self.docs.len();
        for (value, produced) in converted.documents.into_iter().zip(converted.produced) {
            self.docs.push(OutDoc {
                value,
                source: input.id.clone(),
                produced,
            });
        }
        self.notes.extend(converted.notes);
        for d in converted.deferred {
            self.deferred.push((first, input.id.clone(), d));
        }
    }

    fn note(&mut self, document: &DocumentId, kind: NoteKind, path: &str, message: String) {
        self.notes.push(Note {
            document: document.clone(),
            path: path.to_string(),
            kind,
            message,
        });
    }

    fn find(&self, api_version: &str, kind: &str, name: &str) -> Option<usize> {
        self.docs.iter().position(|d| {
            d.value.get("apiVersion").and_then(Value::as_str) == Some(api_version)
                && d.value.get("kind").and_then(Value::as_str) == Some(kind)
                && d.value.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    }

    fn resolve(&mut self) {
        let deferred = std::mem::take(&mut self.deferred);
        let mut kubelets: Vec<KubeletMove> = Vec::new();
        for (index, source, d) in deferred {
            match d {
                Deferred::Kubelet {
                    node_class,
                    kubelet,
                    path,
                } => kubelets.push(KubeletMove {
                    index,
                    source,
                    node_class,
                    kubelet,
                    path,
                }),
                Deferred::ExpireAfter { nodepool } => self.resolve_expire(index, &source, nodepool),
            }
        }
        // Group kubelet moves by target EC2NodeClass.
        let mut targets: Vec<Option<String>> = Vec::new();
        for k in &kubelets {
            if !targets.contains(&k.node_class) {
                targets.push(k.node_class.clone());
            }
        }
        for target in targets {
            let group: Vec<&KubeletMove> =
                kubelets.iter().filter(|k| k.node_class == target).collect();
            self.resolve_kubelets(target.as_deref(), &group);
        }
        self.check_collisions();
    }

    fn resolve_expire(&mut self, index: usize, source: &DocumentId, nodepool: Option<String>) {
        let found = nodepool
            .as_deref()
            .and_then(|np| self.find(V1_CORE, KIND_NODEPOOL, np));
        match (found, nodepool) {
            (Some(np), Some(name)) => {
                let expire = self.docs[np]
                    .value
                    .pointer("/spec/template/spec/expireAfter")
                    .cloned()
                    .unwrap_or_else(|| Value::String("720h".into()));
                if let Some(Value::Object(spec)) = self.docs[index].value.get_mut("spec") {
                    spec.insert("expireAfter".into(), expire.clone());
                }
                self.note(
                    source,
                    NoteKind::Changed,
                    "spec.expireAfter",
                    format!("expireAfter {expire} taken from NodePool {name:?} (converted in the same batch), as the upstream conversion does"),
                );
            }
            (_, nodepool) => {
                let which = nodepool
                    .map(|n| format!("NodePool {n:?}"))
                    .unwrap_or_else(|| "its NodePool (no karpenter.sh/nodepool label)".into());
                self.note(
                    source,
                    NoteKind::Info,
                    "spec.expireAfter",
                    format!("v1 NodeClaims carry expireAfter, taken from {which}, which is not in this batch; the v1 default 720h applies unless you set it"),
                );
            }
        }
    }

    fn resolve_kubelets(&mut self, class: Option<&str>, group: &[&KubeletMove]) {
        let Some(first) = group.first().map(|k| &k.kubelet) else {
            return;
        };
        let target = class.and_then(|c| self.find(V1_AWS, KIND_EC2NODECLASS, c));
        let all_equal = group.iter().all(|k| &k.kubelet == first);
        let existing = target.and_then(|t| self.docs[t].value.pointer("/spec/kubelet").cloned());
        let compatible = existing
            .as_ref()
            .is_none_or(|e| e.as_object() == Some(first));
        match (class, target) {
            (Some(class), Some(t)) if self.docs[t].produced && all_equal && compatible => {
                if let Some(Value::Object(spec)) = self.docs[t].value.get_mut("spec") {
                    spec.insert("kubelet".into(), Value::Object(first.clone()));
                }
                for k in group {
                    self.note(
                        &k.source,
                        NoteKind::Changed,
                        &k.path,
                        format!("moved to EC2NodeClass {class:?} spec.kubelet (v1 configures kubelet on the node class)"),
                    );
                }
            }
            _ => {
                let why = match (class, target) {
                    (None, _) => "the NodePool references no EC2NodeClass".to_string(),
                    (Some(c), None) => format!("EC2NodeClass {c:?} is not in this batch"),
                    (Some(c), Some(t)) if !self.docs[t].produced => {
                        format!("EC2NodeClass {c:?} is already v1 and is not modified")
                    }
                    (Some(c), Some(_)) => format!(
                        "the NodePools referencing EC2NodeClass {c:?} (or the class itself) disagree on kubelet settings; v1 has one kubelet per EC2NodeClass, so give each configuration its own EC2NodeClass"
                    ),
                };
                for k in group {
                    let json = Value::Object(k.kubelet.clone()).to_string();
                    if let Some(Value::Object(meta)) = self.docs[k.index].value.get_mut("metadata")
                    {
                        let annotations = meta
                            .entry("annotations")
                            .or_insert_with(|| Value::Object(Map::new()));
                        if let Value::Object(annotations) = annotations {
                            annotations
                                .insert(ANNOTATION_KUBELET_COMPAT.to_string(), Value::String(json));
                        }
                    }
                    self.note(
                        &k.source,
                        NoteKind::ActionRequired,
                        &k.path,
                        format!("v1 NodePools have no kubelet block and {why}. Kept as JSON in the annotation {ANNOTATION_KUBELET_COMPAT}, which Karpenter v1.0 honors (v1.1 no longer does): move these settings to the EC2NodeClass spec.kubelet and remove the annotation"),
                    );
                }
            }
        }
    }

    fn check_collisions(&mut self) {
        let mut seen: Vec<(String, String, String, String)> = Vec::new();
        let mut collisions = Vec::new();
        for doc in &self.docs {
            let v = &doc.value;
            let key = (
                v.get("apiVersion")
                    .and_then(Value::as_str)
                    .and_then(|a| a.split_once('/'))
                    .map_or("", |(g, _)| g)
                    .to_string(),
                v.get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                v.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                match v.pointer("/metadata/name").and_then(Value::as_str) {
                    Some(n) => n.to_string(),
                    None => continue,
                },
            );
            if seen.contains(&key) {
                collisions.push((doc.source.clone(), key.1.clone(), key.3.clone()));
            } else {
                seen.push(key);
            }
        }
        for (source, kind, name) in collisions {
            self.note(
                &source,
                NoteKind::ActionRequired,
                "metadata.name",
                format!("another output document is also {kind} {name:?}; applying both makes one replace the other"),
            );
        }
    }
}
