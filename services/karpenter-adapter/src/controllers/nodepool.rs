//! NodePool status (Karpenter's `nodepool.readiness`, `.validation`,
//! `.counter` and `.hash`): per pool of the provider's node-class kind,
//!
//! - `karpenter.sh/nodepool-hash` and its version on the pool (static drift
//!   compares them with the claims'),
//! - `status.resources` and `status.nodes` from the pool's claims and
//!   Nodes,
//! - `ValidationSucceeded` (what the API server cannot check),
//!   `NodeClassReady` (the node class exists, is not being deleted and is
//!   Ready) and the root `Ready` over them: only Ready pools provision.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_api::NodePool;
use karpenter_api::nodepool::{CONDITION_NODE_CLASS_READY, CONDITION_VALIDATION_SUCCEEDED};
use karpenter_core::labels;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::metrics::ResourceLabels;
use crate::objects::conditions::Conditions;
use crate::objects::patch;
use crate::scheduling::pool_usage;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// The dependents of a pool's `Ready` condition.
pub const POOL_CONDITIONS: &[&str] = &[CONDITION_VALIDATION_SUCCEEDED, CONDITION_NODE_CLASS_READY];

/// Resources `status.resources` always lists, zero when unused.
const ALWAYS_COUNTED: &[&str] = &["cpu", "memory", "pods", "ephemeral-storage", "nodes"];

/// The pool controller.
pub struct NodePools {
    pub ctx: Context,
}

fn status_resources(usage: &BTreeMap<String, i64>) -> BTreeMap<String, Quantity> {
    let mut resources: BTreeMap<String, Quantity> = ALWAYS_COUNTED
        .iter()
        .map(|name| ((*name).to_owned(), Quantity("0".to_owned())))
        .collect();
    for (name, value) in usage {
        resources.insert(
            name.clone(),
            Quantity(karpenter_core::quantity::format(name, *value)),
        );
    }
    resources
}

impl NodePools {
    fn record_metrics(&self, pool: &NodePool, usage: &BTreeMap<String, i64>) {
        if self.ctx.settings.disable_cluster_state_observability {
            return;
        }
        let name = pool.name_any();
        use crate::metrics::{resource_type as metric_name, resource_value as value};
        for (resource, v) in usage {
            self.ctx
                .metrics
                .nodepool_usage
                .get_or_create(&ResourceLabels {
                    resource_type: metric_name(resource),
                    nodepool: name.clone(),
                })
                .set(value(resource, *v));
        }
        for (resource, Quantity(text)) in &pool.spec.limits {
            if let Ok(v) = karpenter_core::quantity::parse_resource(resource, text) {
                self.ctx
                    .metrics
                    .nodepool_limit
                    .get_or_create(&ResourceLabels {
                        resource_type: metric_name(resource),
                        nodepool: name.clone(),
                    })
                    .set(value(resource, v));
            }
        }
    }
}

impl Reconciler for NodePools {
    const NAME: &'static str = "nodepool.status";

    fn relevant(versions: &Versions) -> u64 {
        versions.node_pools + versions.node_classes + versions.node_claims + versions.nodes
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        index
            .node_pools
            .iter()
            .filter(|p| self.ctx.manages_pool(p))
            .map(|pool| {
                let name = pool.name_any();
                let class = index
                    .node_classes
                    .named(&pool.spec.template.spec.node_class_ref.name);
                let usage = format!("{:?}", pool_usage(index, &name));
                let print = fingerprint([
                    pool.meta().resource_version.as_deref(),
                    class.and_then(|c| c.meta().resource_version.as_deref()),
                    Some(usage.as_str()),
                ]);
                ((String::new(), name), print)
            })
            .collect()
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let pool = index.node_pools.named(&key.1);
        let Some(stored) = pool
            .filter(|p| self.ctx.manages_pool(p) && p.meta().deletion_timestamp.is_none())
            .cloned()
        else {
            return Ok(None);
        };
        let api = self.ctx.node_pools();
        let mut current = (*stored).clone();
        let hash = stored.spec.template_hash();
        let annotations = stored.annotations();
        if annotations.get(labels::NODE_POOL_HASH) != Some(&hash)
            || annotations
                .get(labels::NODE_POOL_HASH_VERSION)
                .map(String::as_str)
                != Some(karpenter_api::hash::NODE_POOL_HASH_VERSION)
        {
            current = patch::merge(
                &api,
                &current,
                json!({"metadata": {"annotations": {
                    labels::NODE_POOL_HASH: hash,
                    labels::NODE_POOL_HASH_VERSION: karpenter_api::hash::NODE_POOL_HASH_VERSION,
                }}}),
            )
            .await?;
        }

        let usage = pool_usage(&index, &key.1);
        self.record_metrics(&stored, &usage);
        let class = index
            .node_classes
            .named(&stored.spec.template.spec.node_class_ref.name)
            .map(|c| c.as_ref());
        let mut next = current.clone();
        let status = next.status.get_or_insert_with(Default::default);
        status.resources = status_resources(&usage);
        status.nodes = Some(usage.get("nodes").copied().unwrap_or(0));
        if let Some(class) = class {
            status.node_class_observed_generation = class.meta().generation;
        }
        let generation = next.metadata.generation.unwrap_or(0);
        let created = next.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let status = next.status.get_or_insert_with(Default::default);
        let mut conditions =
            Conditions::new(&mut status.conditions, generation, created, POOL_CONDITIONS);
        let readiness = stored.readiness(class, &self.ctx.label_rules);
        match readiness.validation {
            Ok(()) => conditions.set_true(CONDITION_VALIDATION_SUCCEEDED),
            Err(message) => conditions.set_false(
                CONDITION_VALIDATION_SUCCEEDED,
                "NodePoolValidationFailed",
                &message,
            ),
        }
        let class = readiness.node_class;
        if class.ready {
            conditions.set_true(CONDITION_NODE_CLASS_READY);
        } else {
            conditions.set_false(CONDITION_NODE_CLASS_READY, &class.reason, &class.message);
        }
        if next.status != current.status {
            patch::status(&api, &current, &next).await?;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_resources_always_list_the_basics() {
        let usage: BTreeMap<String, i64> = [("cpu".to_owned(), 4000), ("nodes".to_owned(), 2)]
            .into_iter()
            .collect();
        let resources = status_resources(&usage);
        assert_eq!(resources.get("cpu"), Some(&Quantity("4".into())));
        assert_eq!(resources.get("memory"), Some(&Quantity("0".into())));
        assert_eq!(resources.get("nodes"), Some(&Quantity("2".into())));
    }
}
