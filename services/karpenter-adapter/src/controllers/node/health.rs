//! Legacy node repair (Karpenter before v1.15, `--legacy-node-repair` with
//! the `NodeRepair` gate): a managed Node whose condition matches one of
//! the provider's replace policies for longer than the policy's toleration
//! has its NodeClaim deleted with a termination deadline of now, so the
//! drain is forceful (budgets, do-not-disrupt and PDBs do not hold it) and
//! provisioning replaces the capacity. Reboot policies, drain bounds,
//! priorities and do-not-repair are not part of it. Without the flag,
//! repair is a disruption method (the scheduler's `repair`).
//!
//! ```text
//!   Node conditions resolve to a replace policy (karpenter_api::repair)
//!     ├─ not yet eligible ──▶ requeue when it will be
//!     ├─ more than 20% of the pool's nodes unhealthy (rounded up) ──▶ NodeRepairBlocked event, wait
//!     └─ else ──▶ annotate termination timestamp = now, delete the claim
//! ```
//!
//! The 20% breaker (`karpenter_core::repair`) keeps a cluster-wide fault (a
//! bad AMI, a network outage) from replacing every node at once; a claim
//! without a pool is measured against every node of the cluster.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use karpenter_api::repair::{Action, Policies, Policy, Resolved};
use karpenter_core::labels;
use karpenter_core::repair::{breaker_message, breaker_tripped};
use karpenter_proto::provider::v1 as pv;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::controllers::runner::{Reconciler, fingerprint};
use crate::controllers::{Context, Requeue};
use crate::error::Result;
use crate::events::{Event, Kind};
use crate::metrics::Disrupted;
use crate::metrics::UnhealthyLabels;
use crate::objects::patch;
use crate::state::index::{Index, Key};
use crate::state::watch::Versions;

/// How long a blocked repair waits before it is looked at again (sooner if
/// the pool's health changes).
const BLOCKED_RETRY: Duration = Duration::from_secs(5 * 60);

/// The provider's repair policies, checked; a set the provider may not
/// give is logged and repairs nothing.
pub fn provider_policies(policies: &[pv::RepairPolicy]) -> Policies {
    let converted = policies
        .iter()
        .map(|p| Policy {
            condition_type: p.condition_type.clone(),
            condition_status: p.condition_status.clone(),
            reason_regex: p.reason_regex.clone(),
            toleration: duration(p.toleration.as_ref()).unwrap_or_default(),
            action: match p.action() {
                pv::RepairAction::Replace => Action::Replace,
                pv::RepairAction::Reboot => Action::Reboot,
            },
            termination_grace_period: duration(p.termination_grace_period.as_ref()),
            priority: p.priority,
        })
        .collect();
    Policies::new(converted).unwrap_or_else(|error| {
        tracing::error!(%error, "the provider's repair policies are invalid; no node is repaired");
        Policies::none()
    })
}

fn duration(d: Option<&prost_types::Duration>) -> Option<Duration> {
    d.and_then(|d| Duration::try_from(*d).ok())
}

/// The replace policy `node` resolves to now, if any.
fn unhealthy(node: &Node, policies: &Policies) -> Option<Resolved> {
    policies.resolve(node, Timestamp::now().as_second(), None)
}

/// Unhealthy and total node counts per pool (`None`: the whole cluster).
#[derive(Default)]
struct Health {
    pools: HashMap<String, (usize, usize)>,
    cluster: (usize, usize),
}

impl Health {
    fn of(index: &Index, policies: &Policies) -> Health {
        let mut health = Health::default();
        for node in index.nodes.iter() {
            let sick = usize::from(unhealthy(node, policies).is_some());
            health.cluster.0 += sick;
            health.cluster.1 += 1;
            if let Some(pool) = node.labels().get(labels::NODE_POOL) {
                let counts = health.pools.entry(pool.clone()).or_default();
                counts.0 += sick;
                counts.1 += 1;
            }
        }
        health
    }

    fn counts(&self, pool: Option<&str>) -> (usize, usize) {
        match pool {
            Some(pool) => self.pools.get(pool).copied().unwrap_or_default(),
            None => self.cluster,
        }
    }
}

/// The legacy node repair controller; a key is a Node's name.
pub struct NodeHealth {
    pub ctx: Context,
    /// The provider's replace policies.
    pub policies: Policies,
}

impl NodeHealth {
    pub fn new(ctx: Context) -> NodeHealth {
        let policies = provider_policies(&ctx.info.repair_policies).replacing_only();
        NodeHealth { ctx, policies }
    }

    fn policies(&self) -> &Policies {
        &self.policies
    }
}

impl Reconciler for NodeHealth {
    const NAME: &'static str = "node.health";

    fn relevant(versions: &Versions) -> u64 {
        versions.nodes + versions.node_claims
    }

    fn keys(&self, index: &Index) -> Vec<(Key, u64)> {
        let policies = self.policies();
        if policies.is_empty() {
            return Vec::new();
        }
        let health = Health::of(index, policies);
        index
            .nodes
            .iter()
            .filter_map(|node| {
                let sick = unhealthy(node, policies)?;
                let claim = index.claim_of(node)?;
                let (unhealthy, total) = health.counts(claim.node_pool());
                let print = fingerprint([
                    Some(sick.condition_type.as_str()),
                    Some(&sick.eligible_at.to_string()),
                    Some(&sick.eligible.to_string()),
                    claim.meta().resource_version.as_deref(),
                    Some(&breaker_tripped(unhealthy, total).to_string()),
                ]);
                Some(((String::new(), node.name_any()), print))
            })
            .collect()
    }

    async fn reconcile(&self, key: Key, index: Arc<Index>) -> Result<Requeue> {
        let Some(node) = index.nodes.named(&key.1) else {
            return Ok(None);
        };
        let Some(claim) = index.claim_of(node).filter(|c| self.ctx.acts_on(c)) else {
            return Ok(None);
        };
        let Some(sick) = unhealthy(node, self.policies()) else {
            return Ok(None);
        };
        let now = Timestamp::now();
        if !sick.eligible {
            let wait = sick.eligible_at.saturating_sub(now.as_second()).max(1);
            return Ok(Some(Duration::from_secs(wait.unsigned_abs())));
        }
        let pool = claim.node_pool();
        let (unhealthy, total) = Health::of(&index, self.policies()).counts(pool);
        if breaker_tripped(unhealthy, total) {
            let scope = match pool {
                Some(pool) => format!("nodepool {pool:?}"),
                None => "the cluster".to_owned(),
            };
            let message = breaker_message(&scope);
            tracing::info!(%message, unhealthy, total, "node repair blocked");
            // On the Node only, as Karpenter's.
            let event = Event::new(node.as_ref(), Kind::Warning, "NodeRepairBlocked", message);
            self.ctx
                .recorder
                .emit(event.dedupe_for(Duration::from_secs(15 * 60)));
            return Ok(Some(BLOCKED_RETRY));
        }
        let api = self.ctx.node_claims();
        // An overdue claim keeps its deadline; otherwise the repair gives
        // no grace. The write is guarded by the index's resourceVersion, so
        // a pass that runs again before the index shows the deletion gets a
        // conflict (and reads again) instead of repairing twice.
        let deadline = crate::objects::claim::termination_deadline(claim)
            .filter(|at| *at <= now)
            .unwrap_or(now)
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let latest = match patch::merge(
            &api,
            claim.as_ref(),
            json!({"metadata": {"annotations": {labels::NODE_CLAIM_TERMINATION_TIMESTAMP: deadline}}}),
        )
        .await
        {
            Ok(latest) => Some(latest),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let Some(latest) = latest.filter(|c| c.meta().deletion_timestamp.is_none()) else {
            return Ok(None);
        };
        tracing::info!(condition = %sick.condition_type, "deleting unhealthy node");
        patch::delete(&api, &latest).await?;
        self.ctx.metrics.claim_disrupted(
            claim,
            Disrupted {
                reason: "unhealthy",
                reschedulable_pods: Some(index.reschedulable_pods_on(&node.name_any())),
                ..Disrupted::default()
            },
        );
        let node_labels = node.labels();
        let label = |key: &str| node_labels.get(key).cloned().unwrap_or_default();
        self.ctx
            .metrics
            .nodeclaims_unhealthy_disrupted
            .get_or_create(&UnhealthyLabels {
                condition: snake_case(&sick.condition_type),
                nodepool: label(labels::NODE_POOL),
                capacity_type: label(labels::CAPACITY_TYPE),
                image_id: claim
                    .status
                    .as_ref()
                    .and_then(|s| s.image_id.clone())
                    .unwrap_or_default(),
            })
            .inc();
        Ok(None)
    }
}

/// `AcceleratedHardwareReady` → `accelerated_hardware_ready`, as
/// Karpenter's metric labels spell condition types.
pub fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_names_become_snake_case() {
        assert_eq!(snake_case("Ready"), "ready");
        assert_eq!(
            snake_case("AcceleratedHardwareReady"),
            "accelerated_hardware_ready"
        );
    }

    #[test]
    fn invalid_provider_policies_repair_nothing() {
        let fallback = |action: pv::RepairAction| pv::RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "False".into(),
            toleration: None,
            reason_regex: String::new(),
            action: action as i32,
            termination_grace_period: None,
            priority: 0,
        };
        assert!(!provider_policies(&[fallback(pv::RepairAction::Replace)]).is_empty());
        assert!(provider_policies(&[fallback(pv::RepairAction::Reboot)]).is_empty());
    }
}
