//! Node repair (Karpenter's `node.health`, feature gate `NodeRepair`): a
//! managed Node whose condition matches one of the provider's repair
//! policies for longer than the policy's toleration has its NodeClaim
//! deleted with a termination deadline of now, so the drain is forceful
//! (budgets, do-not-disrupt and PDBs do not hold it) and provisioning
//! replaces the capacity.
//!
//! ```text
//!   Node condition (type, status) matches a policy
//!     ├─ since < toleration ──▶ requeue when it will have lasted
//!     ├─ > 20% of the pool's nodes unhealthy (rounded up) ──▶ NodeRepairBlocked event, wait
//!     └─ else ──▶ annotate termination timestamp = now, delete the claim
//! ```
//!
//! The 20% guard keeps a cluster-wide fault (a bad AMI, a network outage)
//! from replacing every node at once; a claim without a pool is measured
//! against every node of the cluster.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_core::labels;
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

/// The share of a pool's nodes that may be unhealthy while its nodes are
/// still repaired (rounded up, as a PDB's percentage is).
const ALLOWED_UNHEALTHY_PERCENT: usize = 20;

/// How long a blocked repair waits before it is looked at again (sooner if
/// the pool's health changes).
const BLOCKED_RETRY: Duration = Duration::from_secs(5 * 60);

/// A node condition a repair policy matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    pub condition: String,
    /// When it will have lasted its toleration.
    pub repair_at: Timestamp,
}

/// The policy-matching condition of `node` that comes due first, if any.
pub fn unhealthy(node: &Node, policies: &[pv::RepairPolicy]) -> Option<Unhealthy> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    policies
        .iter()
        .filter_map(|policy| {
            let condition = conditions.iter().find(|c| {
                c.type_ == policy.condition_type && c.status == policy.condition_status
            })?;
            let since = condition
                .last_transition_time
                .as_ref()
                .map_or_else(Timestamp::now, |t| t.0);
            let toleration = policy
                .toleration
                .as_ref()
                .map_or(SignedDuration::ZERO, |d| {
                    SignedDuration::new(d.seconds, d.nanos)
                });
            Some(Unhealthy {
                condition: condition.type_.clone(),
                repair_at: since.checked_add(toleration).unwrap_or(Timestamp::MAX),
            })
        })
        .min_by_key(|u| u.repair_at)
}

/// Whether a group of `total` nodes with `unhealthy` of them may be repaired.
pub fn repairable(unhealthy: usize, total: usize) -> bool {
    unhealthy <= (total * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100)
}

/// Unhealthy and total node counts per pool (`None`: the whole cluster).
#[derive(Default)]
struct Health {
    pools: HashMap<String, (usize, usize)>,
    cluster: (usize, usize),
}

impl Health {
    fn of(index: &Index, policies: &[pv::RepairPolicy]) -> Health {
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

/// The node repair controller; a key is a Node's name.
pub struct NodeHealth {
    pub ctx: Context,
}

impl NodeHealth {
    fn policies(&self) -> &[pv::RepairPolicy] {
        &self.ctx.info.repair_policies
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
                    Some(sick.condition.as_str()),
                    Some(&sick.repair_at.to_string()),
                    claim.meta().resource_version.as_deref(),
                    Some(&repairable(unhealthy, total).to_string()),
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
        if now < sick.repair_at {
            return Ok(Some(sick.repair_at.duration_since(now).unsigned_abs()));
        }
        let pool = claim.node_pool();
        let (unhealthy, total) = Health::of(&index, self.policies()).counts(pool);
        if !repairable(unhealthy, total) {
            let scope = if pool.is_some() {
                "nodepool"
            } else {
                "cluster"
            };
            let message = format!(
                "more than {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the {scope} ({unhealthy} of {total})"
            );
            tracing::info!(%message, "node repair blocked");
            for event in [
                Event::new(
                    node.as_ref(),
                    Kind::Warning,
                    "NodeRepairBlocked",
                    message.clone(),
                ),
                Event::new(
                    claim.as_ref(),
                    Kind::Warning,
                    "NodeRepairBlocked",
                    message.clone(),
                ),
            ] {
                self.ctx
                    .recorder
                    .emit(event.dedupe_for(Duration::from_secs(15 * 60)));
            }
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
        tracing::info!(condition = %sick.condition, "deleting unhealthy node");
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
                condition: snake_case(&sick.condition),
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
fn snake_case(name: &str) -> String {
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

    fn policy(condition: &str, status: &str, minutes: i64) -> pv::RepairPolicy {
        pv::RepairPolicy {
            condition_type: condition.into(),
            condition_status: status.into(),
            toleration: Some(prost_types::Duration {
                seconds: minutes * 60,
                nanos: 0,
            }),
        }
    }

    fn node(conditions: &[(&str, &str, i64)]) -> Node {
        let now = Timestamp::now();
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s, minutes_ago)| {
                let at = now - SignedDuration::from_mins(*minutes_ago);
                json!({"type": t, "status": s, "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()})
            })
            .collect();
        serde_json::from_value(
            json!({"metadata": {"name": "n"}, "status": {"conditions": conditions}}),
        )
        .expect("node")
    }

    #[test]
    fn only_a_matching_type_and_status_is_unhealthy() {
        let policies = [policy("Ready", "False", 30)];
        assert!(unhealthy(&node(&[("Ready", "True", 60)]), &policies).is_none());
        assert!(unhealthy(&node(&[("BadNode", "False", 60)]), &policies).is_none());
        let sick = unhealthy(&node(&[("Ready", "False", 60)]), &policies).expect("unhealthy");
        assert_eq!(sick.condition, "Ready");
        assert!(sick.repair_at < Timestamp::now());
    }

    #[test]
    fn the_condition_due_first_decides() {
        let policies = [
            policy("Ready", "False", 30),
            policy("AcceleratedHardwareReady", "False", 10),
        ];
        let n = node(&[
            ("Ready", "False", 5),
            ("AcceleratedHardwareReady", "False", 5),
        ]);
        let sick = unhealthy(&n, &policies).expect("unhealthy");
        assert_eq!(sick.condition, "AcceleratedHardwareReady");
        let left = sick.repair_at.duration_since(Timestamp::now());
        assert!(left > SignedDuration::from_mins(4) && left <= SignedDuration::from_mins(5));
    }

    #[test]
    fn twenty_percent_rounded_up_may_be_unhealthy() {
        // One of three is 33%, but 20% of 3 rounds up to one node.
        assert!(repairable(1, 3));
        assert!(!repairable(2, 3));
        assert!(repairable(2, 10));
        assert!(!repairable(3, 10));
        assert!(repairable(1, 1));
    }

    #[test]
    fn condition_names_become_snake_case() {
        assert_eq!(snake_case("Ready"), "ready");
        assert_eq!(
            snake_case("AcceleratedHardwareReady"),
            "accelerated_hardware_ready"
        );
    }
}
