//! The index as the scheduler sees it, for provisioning (Solve) and
//! disruption (PlanDisruption) alike: the pools that provision, their
//! instance types from the provider, and a live-mode `ClusterSnapshot` with
//! node-pool usage counted from the index itself (in-flight claims
//! included), so limits hold between batches before any status catches up.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::nodepool::NodeClassReadiness;
use karpenter_api::{ConditionsExt as _, NodeOverlay, NodePool};
use karpenter_core::labels::{self, LabelRules};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::types::v1 as types;
use karpenter_snapshot::{Mode, NodeClasses, Objects, Source};
use kube::{Resource, ResourceExt};

use crate::controllers::Context;
use crate::objects::claim::wire_node_class;
use crate::state::index::Index;
use karpenter_proto::provider::v1 as pv;

fn sources<'a, K>(store: impl Iterator<Item = &'a std::sync::Arc<K>>) -> Vec<Source<'a, K>>
where
    K: 'a,
{
    store
        .enumerate()
        .map(|(id, object)| Source {
            id,
            object: object.as_ref(),
        })
        .collect()
}

/// The provider's node-class kind and which of its objects are ready.
fn class_readiness(index: &Index, group: &str, kind: &str) -> NodeClasses {
    NodeClasses {
        group: group.to_owned(),
        kind: kind.to_owned(),
        ready: index
            .node_classes
            .iter()
            .map(|c| (c.name_any(), NodeClassReadiness::of(Some(c)).ready))
            .collect(),
    }
}

fn parse(list: &BTreeMap<String, Quantity>) -> BTreeMap<String, i64> {
    list.iter()
        .filter_map(|(name, Quantity(text))| {
            karpenter_core::quantity::parse_resource(name, text)
                .ok()
                .map(|v| (name.clone(), v))
        })
        .collect()
}

/// What a node pool's nodes and claims hold (Karpenter's usage): each one's
/// capacity (its Node's, with gaps filled from the claim while it is not
/// initialized; the claim's before a Node exists) plus `nodes: 1`. Claims
/// being deleted count nothing.
pub fn pool_usage(index: &Index, pool: &str) -> BTreeMap<String, i64> {
    let mut usage: BTreeMap<String, i64> = BTreeMap::new();
    let mut add = |capacity: BTreeMap<String, i64>| {
        for (name, value) in capacity {
            let total = usage.entry(name).or_insert(0);
            *total = total.saturating_add(value);
        }
        let nodes = usage.entry("nodes".to_owned()).or_insert(0);
        *nodes += 1;
    };
    for claim in index.node_claims.iter() {
        if claim.labels().get(labels::NODE_POOL).map(String::as_str) != Some(pool)
            || claim.meta().deletion_timestamp.is_some()
        {
            continue;
        }
        let status = claim.status.clone().unwrap_or_default();
        let mut capacity = parse(&status.capacity);
        let provider_id = status.provider_id.as_deref().unwrap_or_default();
        if let Some(node) = index.nodes_for_provider_id(provider_id).first() {
            if node.meta().deletion_timestamp.is_some() {
                continue;
            }
            let from_node = node
                .status
                .as_ref()
                .and_then(|s| s.capacity.as_ref())
                .map(parse)
                .unwrap_or_default();
            let initialized = status.conditions.is_true("Initialized");
            for (name, value) in from_node {
                if initialized || value != 0 || !capacity.contains_key(&name) {
                    capacity.insert(name, value);
                }
            }
        }
        add(capacity);
    }
    usage
}

/// The live cluster as the scheduler is asked about it this round: the
/// provider's pools that provision, and the snapshot with their instance
/// types (a pool whose lookup failed has none this round).
pub struct Prepared {
    pub pools: Vec<Arc<NodePool>>,
    pub built: karpenter_snapshot::Built,
    /// What became of each NodeOverlay in this snapshot.
    pub overlays: karpenter_snapshot::overlay::Verdicts,
}

/// What Solve and PlanDisruption are both asked about: `pools` (from
/// [`provisioning_pools`]) with their catalogs, over the index as it is now.
pub async fn prepare(ctx: &Context, index: &Index, pools: Vec<Arc<NodePool>>) -> Prepared {
    let catalogs = catalogs(ctx, index, &pools).await;
    let classes = node_classes(ctx, index);
    let now = now();
    let settings = Snapshotting {
        rules: &ctx.label_rules,
        scheduler_config: &ctx.settings.scheduler_config,
        repair_policies: ctx.repair_policies.as_deref(),
        now,
    };
    let (built, overlays) = snapshot(index, &pools, classes, catalogs, &settings);
    Prepared {
        pools,
        built,
        overlays,
    }
}

/// The pools that may get new claims: the provider's, and provisioning
/// (Ready, not being deleted, not static; see `NodePool::provisions`).
pub fn provisioning_pools(ctx: &Context, index: &Index) -> Vec<Arc<NodePool>> {
    index
        .node_pools
        .iter()
        .filter(|pool| ctx.manages_pool(pool) && pool.provisions())
        .cloned()
        .collect()
}

/// The pools PlanDisruption is asked about: those that provision, and the
/// provider's Ready static pools (never provisioned for pods; static drift
/// replaces their drifted nodes from their template).
pub fn disruption_pools(ctx: &Context, index: &Index) -> Vec<Arc<NodePool>> {
    index
        .node_pools
        .iter()
        .filter(|pool| {
            ctx.manages_pool(pool)
                && (pool.provisions()
                    || (pool.spec.is_static()
                        && pool.is_ready()
                        && pool.metadata.deletion_timestamp.is_none()))
        })
        .cloned()
        .collect()
}

/// The instance types of each pool, from the provider; a pool whose lookup
/// fails is left out of this batch.
pub async fn catalogs(
    ctx: &Context,
    index: &Index,
    pools: &[Arc<NodePool>],
) -> Vec<sched::InstanceTypeCatalog> {
    let mut out = Vec::new();
    for pool in pools {
        let name = pool.name_any();
        let Some(class) = index
            .node_classes
            .named(&pool.spec.template.spec.node_class_ref.name)
        else {
            continue;
        };
        let request = pv::GetInstanceTypesRequest {
            node_pool: name.clone(),
            node_class: Some(wire_node_class(class)),
        };
        match ctx.clients.instance_types(request).await {
            Ok(instance_types) if !instance_types.is_empty() => {
                out.push(sched::InstanceTypeCatalog {
                    name,
                    instance_types,
                })
            }
            Ok(_) => {
                tracing::warn!(nodepool = %name, "the provider has no instance types for this pool")
            }
            Err(status) => {
                tracing::warn!(nodepool = %name, error = %status.message(), "getting instance types failed")
            }
        }
    }
    ctx.metrics.record_catalogs(&out);
    out
}

pub fn options(ctx: &Context) -> sched::SchedulingOptions {
    let settings = &ctx.settings;
    sched::SchedulingOptions {
        min_values_policy: settings.min_values_policy as i32,
        preference_policy: settings.preference_policy as i32,
        feature_gates: settings.feature_gates.to_map(),
        well_known_labels: ctx.info.well_known_labels.clone(),
        plan_dra_pods: !settings.ignore_dra_requests,
    }
}

/// The provider's node-class kind and which of its objects are ready.
pub fn node_classes(ctx: &Context, index: &Index) -> karpenter_snapshot::NodeClasses {
    let group = ctx
        .info
        .node_class
        .as_ref()
        .map_or("", |g| g.group.as_str());
    class_readiness(index, group, ctx.node_class_kind())
}

/// What a live snapshot is built under besides the index.
pub struct Snapshotting<'a> {
    /// The cluster's label rules, NodeOverlays are judged under.
    pub rules: &'a LabelRules,
    /// Default topology spread constraints (`--scheduler-config`).
    pub scheduler_config: &'a karpenter_snapshot::spread::SchedulerConfig,
    /// Node repair's policies, when repair is planned (see
    /// `Context::repair_policies`).
    pub repair_policies: Option<&'a karpenter_api::repair::Policies>,
    pub now: prost_types::Timestamp,
}

/// The live snapshot: `pools` with `catalogs` (one per pool, by pool name)
/// overlaid by the index's NodeOverlays, and their usage from the index.
pub fn snapshot(
    index: &Index,
    pools: &[std::sync::Arc<NodePool>],
    classes: NodeClasses,
    catalogs: Vec<sched::InstanceTypeCatalog>,
    settings: &Snapshotting<'_>,
) -> (
    karpenter_snapshot::Built,
    karpenter_snapshot::overlay::Verdicts,
) {
    let pool_catalogs = catalogs
        .iter()
        .map(|c| (c.name.clone(), c.name.clone()))
        .collect();
    let objects = Objects {
        prepared_pods: index
            .pods
            .iter()
            .enumerate()
            .map(|(id, pod)| Source {
                id,
                object: pod.prepared(),
            })
            .collect(),
        nodes: sources(index.nodes.iter()),
        node_claims: sources(index.node_claims.iter()),
        node_pools: sources(pools.iter()),
        daemon_sets: sources(index.daemon_sets.iter()),
        pod_disruption_budgets: sources(index.pod_disruption_budgets.iter()),
        namespaces: sources(index.namespaces.iter()),
        priority_classes: sources(index.priority_classes.iter()),
        persistent_volume_claims: sources(index.persistent_volume_claims.iter()),
        persistent_volumes: sources(index.persistent_volumes.iter()),
        storage_classes: sources(index.storage_classes.iter()),
        csi_nodes: sources(index.csi_nodes.iter()),
        // Only watched with the CapacityBuffer gate on; in live mode the
        // workloads are only what buffers refer to (never expanded).
        capacity_buffers: sources(index.capacity_buffers.iter()),
        pod_templates: sources(index.pod_templates.iter()),
        deployments: sources(index.deployments.iter()),
        stateful_sets: sources(index.stateful_sets.iter()),
        replica_sets: sources(index.replica_sets.iter()),
        scheduler_config: Some(settings.scheduler_config),
        services: sources(index.services.iter()),
        node_classes: classes,
        catalogs,
        pool_catalogs,
        now: Some(settings.now),
        repair_policies: settings.repair_policies,
        ..Objects::default()
    };
    // Live mode never fails: bad objects are in `skipped`.
    // Pods stay placed (shared with the index) until the request is encoded.
    let mut built = karpenter_snapshot::build_placed(&objects, Mode::Live).unwrap_or_default();
    for pool in &mut built.snapshot.node_pools {
        pool.usage = Some(types::ResourceList {
            quantities: pool_usage(index, &pool.name),
        });
        // A pool without its own catalog has no instance types this round.
        if !built
            .snapshot
            .instance_type_catalogs
            .iter()
            .any(|c| c.name == pool.name)
        {
            pool.ready = false;
        }
    }
    let overlays = overlay(index, &mut built.snapshot, settings.rules);
    karpenter_snapshot::fill_from_catalogs(&mut built.snapshot);
    (built, overlays)
}

/// Applies the index's NodeOverlays (only watched with the `NodeOverlay`
/// gate on) to the pools' catalogs; what became of each overlay.
fn overlay(
    index: &Index,
    snapshot: &mut sched::ClusterSnapshot,
    rules: &LabelRules,
) -> karpenter_snapshot::overlay::Verdicts {
    if index.node_overlays.is_empty() {
        return Vec::new();
    }
    let overlays: Vec<&NodeOverlay> = index.node_overlays.iter().map(|o| o.as_ref()).collect();
    karpenter_snapshot::overlay::apply(snapshot, &overlays, rules)
}

/// Now, as the snapshot's clock.
pub fn now() -> prost_types::Timestamp {
    let now = k8s_openapi::jiff::Timestamp::now();
    prost_types::Timestamp {
        seconds: now.as_second(),
        nanos: now.subsec_nanosecond(),
    }
}
