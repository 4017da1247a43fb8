//! Pod specs (from Pods and workload templates) to wire pods.

use std::collections::BTreeMap;

use karpenter_proto::scheduler::v1 as pb;
use serde_json::Value;

use crate::fields::{Reader, join};
use crate::input::InputError;

/// Cluster objects pods refer to: priority classes and storage.
#[derive(Debug, Default)]
pub struct PodContext {
    /// PriorityClass name -> value.
    pub priority_classes: BTreeMap<String, i32>,
    /// The value of the PriorityClass with `globalDefault: true`.
    pub default_priority: Option<(String, i32)>,
    /// namespace/name -> PersistentVolumeClaim spec.
    pub claims: BTreeMap<String, Value>,
    /// PersistentVolume name -> object.
    pub volumes: BTreeMap<String, Value>,
    /// StorageClass name -> object.
    pub storage_classes: BTreeMap<String, Value>,
    /// The StorageClass annotated as the default.
    pub default_storage_class: Option<String>,
}

/// What a pod is made from, beyond its spec.
pub struct PodSource<'a> {
    pub namespace: String,
    pub name: String,
    /// Labels and annotations (`metadata` of the pod or template).
    pub metadata: Option<&'a Value>,
    pub metadata_path: &'a str,
    pub spec: &'a Value,
    pub spec_path: &'a str,
    pub owner_kind: String,
    pub owner_name: String,
    /// StatefulSet volumeClaimTemplates: volume name -> claim template spec.
    pub claim_templates: BTreeMap<String, Value>,
}

pub fn pod(r: &Reader<'_>, src: &PodSource<'_>, ctx: &PodContext) -> Result<pb::Pod, InputError> {
    let spec = src.spec;
    let sp = src.spec_path;
    let meta = src.metadata.cloned().unwrap_or(Value::Null);
    let mp = src.metadata_path;
    let labels = r.hash_map(r.get(&meta, "labels"), &join(mp, "labels"))?;
    let annotations = r.string_map(r.get(&meta, "annotations"), &join(mp, "annotations"))?;

    let containers_path = join(sp, "containers");
    let containers = containers(r, r.get(spec, "containers"), &containers_path)?;
    if containers.is_empty() {
        return Err(r.err(containers_path, "a pod needs at least one container"));
    }
    let init_containers = self::containers(
        r,
        r.get(spec, "initContainers"),
        &join(sp, "initContainers"),
    )?;

    // Affinity.
    let affinity = r.get(spec, "affinity").cloned().unwrap_or(Value::Null);
    let ap = join(sp, "affinity");
    let node_affinity = r
        .get(&affinity, "nodeAffinity")
        .cloned()
        .unwrap_or(Value::Null);
    let nap = join(&ap, "nodeAffinity");
    let required_node_affinity = match r.get(
        &node_affinity,
        "requiredDuringSchedulingIgnoredDuringExecution",
    ) {
        Some(req) => {
            let p = join(&nap, "requiredDuringSchedulingIgnoredDuringExecution");
            r.node_selector_terms(
                r.get(req, "nodeSelectorTerms"),
                &join(&p, "nodeSelectorTerms"),
            )?
        }
        None => Vec::new(),
    };
    let mut preferred_node_affinity = Vec::new();
    let pp = join(&nap, "preferredDuringSchedulingIgnoredDuringExecution");
    for (i, term) in r
        .array(
            r.get(
                &node_affinity,
                "preferredDuringSchedulingIgnoredDuringExecution",
            ),
            &pp,
        )?
        .iter()
        .enumerate()
    {
        let p = format!("{pp}[{i}]");
        let preference = match r.get(term, "preference") {
            Some(pref) => r.node_selector_term(pref, &join(&p, "preference"))?,
            None => pb::NodeSelectorTerm::default(),
        };
        preferred_node_affinity.push(pb::PreferredSchedulingTerm {
            weight: r
                .int32(r.get(term, "weight"), &join(&p, "weight"))?
                .unwrap_or(0),
            preference: Some(preference),
        });
    }
    let (required_pod_affinity, preferred_pod_affinity) = pod_affinity(
        r,
        r.get(&affinity, "podAffinity"),
        &join(&ap, "podAffinity"),
    )?;
    let (required_pod_anti_affinity, preferred_pod_anti_affinity) = pod_affinity(
        r,
        r.get(&affinity, "podAntiAffinity"),
        &join(&ap, "podAntiAffinity"),
    )?;

    // Topology spread.
    let mut topology_spread_constraints = Vec::new();
    let tp = join(sp, "topologySpreadConstraints");
    for (i, c) in r
        .array(r.get(spec, "topologySpreadConstraints"), &tp)?
        .iter()
        .enumerate()
    {
        let p = format!("{tp}[{i}]");
        let when = r.string_or_empty(
            r.get(c, "whenUnsatisfiable"),
            &join(&p, "whenUnsatisfiable"),
        )?;
        use pb::topology_spread_constraint::{InclusionPolicy, WhenUnsatisfiable};
        let when_unsatisfiable = match when.as_str() {
            "" | "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => {
                return Err(r.err(
                    join(&p, "whenUnsatisfiable"),
                    format!("must be DoNotSchedule or ScheduleAnyway, got {other:?}"),
                ));
            }
        };
        let policy = |key: &str| -> Result<InclusionPolicy, InputError> {
            match r.string_or_empty(r.get(c, key), &join(&p, key))?.as_str() {
                "" => Ok(InclusionPolicy::Unspecified),
                "Honor" => Ok(InclusionPolicy::Honor),
                "Ignore" => Ok(InclusionPolicy::Ignore),
                other => Err(r.err(
                    join(&p, key),
                    format!("must be Honor or Ignore, got {other:?}"),
                )),
            }
        };
        let topology_key = r.string_or_empty(r.get(c, "topologyKey"), &join(&p, "topologyKey"))?;
        if topology_key.is_empty() {
            return Err(r.err(join(&p, "topologyKey"), "is required"));
        }
        topology_spread_constraints.push(pb::TopologySpreadConstraint {
            max_skew: r
                .int32(r.get(c, "maxSkew"), &join(&p, "maxSkew"))?
                .unwrap_or(1),
            topology_key,
            when_unsatisfiable: when_unsatisfiable as i32,
            label_selector: r
                .label_selector(r.get(c, "labelSelector"), &join(&p, "labelSelector"))?,
            min_domains: r.int32(r.get(c, "minDomains"), &join(&p, "minDomains"))?,
            node_affinity_policy: policy("nodeAffinityPolicy")? as i32,
            node_taints_policy: policy("nodeTaintsPolicy")? as i32,
            match_label_keys: r.strings(r.get(c, "matchLabelKeys"), &join(&p, "matchLabelKeys"))?,
        });
    }

    // Tolerations.
    let mut tolerations = Vec::new();
    let tolp = join(sp, "tolerations");
    for (i, t) in r
        .array(r.get(spec, "tolerations"), &tolp)?
        .iter()
        .enumerate()
    {
        let p = format!("{tolp}[{i}]");
        use pb::toleration::TolerationOperator;
        let operator = match r
            .string_or_empty(r.get(t, "operator"), &join(&p, "operator"))?
            .as_str()
        {
            "" => TolerationOperator::Unspecified,
            "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            other => {
                return Err(r.err(
                    join(&p, "operator"),
                    format!("must be Equal or Exists, got {other:?}"),
                ));
            }
        };
        let effect_text = r.string_or_empty(r.get(t, "effect"), &join(&p, "effect"))?;
        let effect = if effect_text.is_empty() {
            pb::TaintEffect::Unspecified
        } else {
            crate::fields::taint_effect(&effect_text).ok_or_else(|| {
                r.err(
                    join(&p, "effect"),
                    format!(
                        "must be NoSchedule, PreferNoSchedule or NoExecute, got {effect_text:?}"
                    ),
                )
            })?
        };
        tolerations.push(pb::Toleration {
            key: r.string_or_empty(r.get(t, "key"), &join(&p, "key"))?,
            operator: operator as i32,
            value: r.string_or_empty(r.get(t, "value"), &join(&p, "value"))?,
            effect: effect as i32,
            toleration_seconds: r.int(
                r.get(t, "tolerationSeconds"),
                &join(&p, "tolerationSeconds"),
            )?,
        });
    }

    // Priority.
    let priority_class_name = r.string_or_empty(
        r.get(spec, "priorityClassName"),
        &join(sp, "priorityClassName"),
    )?;
    let priority = match r.int32(r.get(spec, "priority"), &join(sp, "priority"))? {
        Some(p) => p,
        None if !priority_class_name.is_empty() => match ctx
            .priority_classes
            .get(&priority_class_name)
        {
            Some(v) => *v,
            None if matches!(priority_class_name.as_str(), "system-cluster-critical") => {
                2_000_000_000
            }
            None if matches!(priority_class_name.as_str(), "system-node-critical") => 2_000_001_000,
            None => {
                return Err(r.err(
                    join(sp, "priorityClassName"),
                    format!("no PriorityClass {priority_class_name:?} in the input"),
                ));
            }
        },
        None => ctx.default_priority.as_ref().map(|(_, v)| *v).unwrap_or(0),
    };

    let deletion_cost = match annotations.get(karpenter_core::labels::POD_DELETION_COST) {
        Some(text) => text.parse::<i32>().map_err(|_| {
            r.err(
                format!(
                    "{}.controller.kubernetes.io/pod-deletion-cost",
                    join(mp, "annotations")
                ),
                format!("must be a 32-bit integer, got {text:?}"),
            )
        })?,
        None => 0,
    };

    let volumes = volumes(r, src, ctx)?;
    let node_name = r.string_or_empty(r.get(spec, "nodeName"), &join(sp, "nodeName"))?;
    let uid = meta
        .get("uid")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}/{}", src.namespace, src.name));

    Ok(pb::Pod {
        namespace: src.namespace.clone(),
        name: src.name.clone(),
        uid,
        labels,
        node_name,
        containers,
        init_containers,
        overhead: r.resources(r.get(spec, "overhead"), &join(sp, "overhead"))?,
        node_selector: r.hash_map(r.get(spec, "nodeSelector"), &join(sp, "nodeSelector"))?,
        required_node_affinity,
        preferred_node_affinity,
        required_pod_affinity,
        preferred_pod_affinity,
        required_pod_anti_affinity,
        preferred_pod_anti_affinity,
        topology_spread_constraints,
        tolerations,
        volumes,
        priority,
        priority_class_name,
        do_not_disrupt: annotations
            .get(karpenter_core::labels::DO_NOT_DISRUPT)
            .map(String::as_str)
            == Some("true"),
        deletion_cost,
        owner_kind: src.owner_kind.clone(),
        owner_name: src.owner_name.clone(),
        creation_timestamp: r.timestamp(
            r.get(&meta, "creationTimestamp"),
            &join(mp, "creationTimestamp"),
        )?,
        phase: String::new(),
        terminating: r
            .get(&meta, "deletionTimestamp")
            .is_some_and(|t| !t.is_null()),
        nominated_node_name: String::new(),
        termination_grace_period_seconds: r.int(
            r.get(spec, "terminationGracePeriodSeconds"),
            &join(sp, "terminationGracePeriodSeconds"),
        )?,
    })
}

fn containers(
    r: &Reader<'_>,
    v: Option<&Value>,
    path: &str,
) -> Result<Vec<pb::Container>, InputError> {
    let mut out = Vec::new();
    for (i, c) in r.array(v, path)?.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let resources = r.get(c, "resources").cloned().unwrap_or(Value::Null);
        let rp = join(&p, "resources");
        let mut ports = Vec::new();
        let pp = join(&p, "ports");
        for (j, port) in r.array(r.get(c, "ports"), &pp)?.iter().enumerate() {
            let p = format!("{pp}[{j}]");
            ports.push(pb::ContainerPort {
                container_port: r
                    .int32(r.get(port, "containerPort"), &join(&p, "containerPort"))?
                    .unwrap_or(0),
                host_port: r
                    .int32(r.get(port, "hostPort"), &join(&p, "hostPort"))?
                    .unwrap_or(0),
                protocol: r
                    .string(r.get(port, "protocol"), &join(&p, "protocol"))?
                    .unwrap_or_else(|| "TCP".into()),
                host_ip: r.string_or_empty(r.get(port, "hostIP"), &join(&p, "hostIP"))?,
            });
        }
        out.push(pb::Container {
            name: r.string_or_empty(r.get(c, "name"), &join(&p, "name"))?,
            requests: r.resources(r.get(&resources, "requests"), &join(&rp, "requests"))?,
            limits: r.resources(r.get(&resources, "limits"), &join(&rp, "limits"))?,
            ports,
            restart_policy_always: r
                .string_or_empty(r.get(c, "restartPolicy"), &join(&p, "restartPolicy"))?
                == "Always",
        });
    }
    Ok(out)
}

type AffinityTerms = (Vec<pb::PodAffinityTerm>, Vec<pb::WeightedPodAffinityTerm>);

fn pod_affinity(
    r: &Reader<'_>,
    v: Option<&Value>,
    path: &str,
) -> Result<AffinityTerms, InputError> {
    let Some(v) = v else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut required = Vec::new();
    let rp = join(path, "requiredDuringSchedulingIgnoredDuringExecution");
    for (i, t) in r
        .array(
            r.get(v, "requiredDuringSchedulingIgnoredDuringExecution"),
            &rp,
        )?
        .iter()
        .enumerate()
    {
        required.push(affinity_term(r, t, &format!("{rp}[{i}]"))?);
    }
    let mut preferred = Vec::new();
    let pp = join(path, "preferredDuringSchedulingIgnoredDuringExecution");
    for (i, t) in r
        .array(
            r.get(v, "preferredDuringSchedulingIgnoredDuringExecution"),
            &pp,
        )?
        .iter()
        .enumerate()
    {
        let p = format!("{pp}[{i}]");
        let term = r.get(t, "podAffinityTerm").cloned().unwrap_or(Value::Null);
        preferred.push(pb::WeightedPodAffinityTerm {
            weight: r
                .int32(r.get(t, "weight"), &join(&p, "weight"))?
                .unwrap_or(0),
            term: Some(affinity_term(r, &term, &join(&p, "podAffinityTerm"))?),
        });
    }
    Ok((required, preferred))
}

fn affinity_term(r: &Reader<'_>, t: &Value, p: &str) -> Result<pb::PodAffinityTerm, InputError> {
    let topology_key = r.string_or_empty(r.get(t, "topologyKey"), &join(p, "topologyKey"))?;
    if topology_key.is_empty() {
        return Err(r.err(join(p, "topologyKey"), "is required"));
    }
    Ok(pb::PodAffinityTerm {
        label_selector: r.label_selector(r.get(t, "labelSelector"), &join(p, "labelSelector"))?,
        namespaces: r.strings(r.get(t, "namespaces"), &join(p, "namespaces"))?,
        namespace_selector: r
            .label_selector(r.get(t, "namespaceSelector"), &join(p, "namespaceSelector"))?,
        topology_key,
        match_label_keys: r.strings(r.get(t, "matchLabelKeys"), &join(p, "matchLabelKeys"))?,
        mismatch_label_keys: r
            .strings(r.get(t, "mismatchLabelKeys"), &join(p, "mismatchLabelKeys"))?,
    })
}

/// The pod's volumes that constrain placement: persistent volume claims,
/// generic ephemeral volumes and StatefulSet claim templates.
fn volumes(
    r: &Reader<'_>,
    src: &PodSource<'_>,
    ctx: &PodContext,
) -> Result<Vec<pb::Volume>, InputError> {
    let mut out = Vec::new();
    let vp = join(src.spec_path, "volumes");
    let mut claims: Vec<(String, String, Option<Value>)> = Vec::new(); // (volume, claim, template spec)
    for (i, v) in r.array(r.get(src.spec, "volumes"), &vp)?.iter().enumerate() {
        let p = format!("{vp}[{i}]");
        let name = r.string_or_empty(r.get(v, "name"), &join(&p, "name"))?;
        if let Some(pvc) = r.get(v, "persistentVolumeClaim") {
            let claim = r.string_or_empty(
                r.get(pvc, "claimName"),
                &format!("{p}.persistentVolumeClaim.claimName"),
            )?;
            claims.push((name, claim, None));
        } else if let Some(eph) = r.get(v, "ephemeral") {
            let template = eph.pointer("/volumeClaimTemplate/spec").cloned();
            claims.push((name.clone(), format!("{}-{name}", src.name), template));
        }
    }
    for (volume, template) in &src.claim_templates {
        claims.push((
            volume.clone(),
            format!("{volume}-{}", src.name),
            Some(template.clone()),
        ));
    }
    for (volume, claim, template) in claims {
        let claim_id = format!("{}/{claim}", src.namespace);
        let claim_spec = ctx.claims.get(&claim_id).cloned().or(template);
        let mut driver = String::new();
        let mut topology = Vec::new();
        if let Some(spec) = claim_spec {
            let pv_name = spec.get("volumeName").and_then(Value::as_str).unwrap_or("");
            if let Some(pv) = ctx.volumes.get(pv_name) {
                driver = pv
                    .pointer("/spec/csi/driver")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if let Some(terms) = pv.pointer("/spec/nodeAffinity/required/nodeSelectorTerms") {
                    topology = node_terms_lenient(terms);
                }
            } else {
                let class = spec
                    .get("storageClassName")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| ctx.default_storage_class.clone());
                if let Some(sc) = class.and_then(|c| ctx.storage_classes.get(&c)) {
                    driver = sc
                        .get("provisioner")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    topology = allowed_topologies(sc);
                }
            }
        }
        out.push(pb::Volume {
            name: volume,
            driver,
            claim_id,
            topology,
        });
    }
    Ok(out)
}

/// Node selector terms of objects checked elsewhere (PersistentVolumes):
/// malformed entries are left out rather than failing the pod.
fn node_terms_lenient(terms: &Value) -> Vec<pb::NodeSelectorTerm> {
    let Some(terms) = terms.as_array() else {
        return Vec::new();
    };
    terms
        .iter()
        .map(|term| pb::NodeSelectorTerm {
            match_expressions: lenient_requirements(term.get("matchExpressions")),
            match_fields: lenient_requirements(term.get("matchFields")),
        })
        .collect()
}

fn lenient_requirements(v: Option<&Value>) -> Vec<pb::Requirement> {
    v.and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|r| {
                    Some(pb::Requirement {
                        key: r.get("key")?.as_str()?.to_string(),
                        operator: crate::fields::operator(r.get("operator")?.as_str()?)? as i32,
                        values: r
                            .get("values")
                            .and_then(Value::as_array)
                            .map(|vs| {
                                vs.iter()
                                    .filter_map(|v| v.as_str().map(str::to_string))
                                    .collect()
                            })
                            .unwrap_or_default(),
                        min_values: None,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn allowed_topologies(sc: &Value) -> Vec<pb::NodeSelectorTerm> {
    let Some(terms) = sc.get("allowedTopologies").and_then(Value::as_array) else {
        return Vec::new();
    };
    terms
        .iter()
        .map(|term| pb::NodeSelectorTerm {
            match_expressions: term
                .get("matchLabelExpressions")
                .and_then(Value::as_array)
                .map(|exprs| {
                    exprs
                        .iter()
                        .filter_map(|e| {
                            Some(pb::Requirement {
                                key: e.get("key")?.as_str()?.to_string(),
                                operator: pb::Operator::In as i32,
                                values: e
                                    .get("values")
                                    .and_then(Value::as_array)
                                    .map(|vs| {
                                        vs.iter()
                                            .filter_map(|v| v.as_str().map(str::to_string))
                                            .collect()
                                    })
                                    .unwrap_or_default(),
                                min_values: None,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            match_fields: Vec::new(),
        })
        .collect()
}
