//! The volumes of a pod that constrain where it can run: persistent volume
//! claims, generic ephemeral volumes and StatefulSet claim templates, with
//! the topology their volume or storage class allows.

use k8s_openapi::api::core::v1 as core;
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;

use crate::fields;
use crate::pod::{PodContext, PodSource};

/// A volume backed by a persistent volume claim, before the claim and its
/// volume or storage class are looked up.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRef {
    pub volume: String,
    /// `namespace/name` of the claim.
    pub claim_id: String,
    /// The claim's spec when the pod makes it (ephemeral volumes,
    /// StatefulSet claim templates): used while the claim does not exist.
    pub template: Option<core::PersistentVolumeClaimSpec>,
}

/// The claims a pod's volumes use; what they allow is settled by
/// [`resolve`] against the cluster's claims, volumes and storage classes.
pub fn claims(src: &PodSource<'_>) -> Vec<ClaimRef> {
    let mut claims = Vec::new();
    let mut add = |volume: &str, claim: String, template| {
        claims.push(ClaimRef {
            volume: volume.to_owned(),
            claim_id: format!("{}/{claim}", src.namespace),
            template,
        });
    };
    for v in src.spec.volumes.iter().flatten() {
        if let Some(pvc) = &v.persistent_volume_claim {
            add(&v.name, pvc.claim_name.clone(), None);
        } else if let Some(ephemeral) = &v.ephemeral {
            let template = ephemeral
                .volume_claim_template
                .as_ref()
                .map(|t| t.spec.clone());
            add(&v.name, format!("{}-{}", src.name, v.name), template);
        }
    }
    for (volume, template) in &src.claim_templates {
        add(
            volume,
            format!("{volume}-{}", src.name),
            Some(template.clone()),
        );
    }
    claims
}

/// The wire volumes of `claims`: each claim's CSI driver and topology.
pub fn resolve(claims: &[ClaimRef], ctx: &PodContext) -> Vec<sched::Volume> {
    claims
        .iter()
        .map(|claim| {
            let spec = ctx.claims.get(&claim.claim_id).or(claim.template.as_ref());
            let (driver, topology) = spec.map(|s| placement(s, ctx)).unwrap_or_default();
            sched::Volume {
                name: claim.volume.clone(),
                driver,
                claim_id: claim.claim_id.clone(),
                topology,
            }
        })
        .collect()
}

/// The CSI driver and allowed topology of a claim: from its bound volume,
/// else from its storage class (or the default one).
fn placement(
    spec: &core::PersistentVolumeClaimSpec,
    ctx: &PodContext,
) -> (String, Vec<sched::NodeSelectorTerm>) {
    let bound = spec
        .volume_name
        .as_deref()
        .and_then(|name| ctx.volumes.get(name));
    if let Some(volume) = bound {
        let driver = volume
            .csi
            .as_ref()
            .map(|c| c.driver.clone())
            .unwrap_or_default();
        let topology = volume
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref())
            .map(|r| fields::lenient_terms(&r.node_selector_terms))
            .unwrap_or_default();
        return (driver, topology);
    }
    let class = spec
        .storage_class_name
        .clone()
        .or_else(|| ctx.default_storage_class.clone());
    let Some(class) = class.and_then(|c| ctx.storage_classes.get(&c)) else {
        return (String::new(), Vec::new());
    };
    let topology = class
        .allowed_topologies
        .iter()
        .flatten()
        .map(|term| sched::NodeSelectorTerm {
            match_expressions: term
                .match_label_expressions
                .iter()
                .flatten()
                .map(|e| types::Requirement {
                    key: e.key.clone(),
                    operator: types::Operator::In as i32,
                    values: e.values.clone(),
                    min_values: None,
                })
                .collect(),
            match_fields: Vec::new(),
        })
        .collect();
    (class.provisioner.clone(), topology)
}
