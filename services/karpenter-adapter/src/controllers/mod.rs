//! The controllers, one module per Karpenter controller. Each reads index
//! snapshots and acts through the API and the provider. Per-object
//! controllers (lifecycle, termination, node pools, node classes) run under
//! [`runner`]; singletons (provisioning, garbage collection) run their own
//! loop. Everything they decide is derived from the objects
//! (level-triggered), so a restart picks up where the last process stopped.

pub mod capacitybuffer;
pub mod disruption;
pub mod interruption;
pub mod node;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodeoverlay;
pub mod nodepool;
pub mod nodepool_static;
pub mod observability;
pub mod pod_deletion_cost;
pub mod provisioning;
pub mod runner;

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::NodeClaim;
use karpenter_proto::provider::v1 as pv;
use kube::Resource as _;
use kube::api::{Api, ApiResource, DynamicObject};

use crate::clients::Clients;
use crate::events::Recorder;
use crate::metrics::AdapterMetrics;
use crate::settings::Settings;
use crate::state::created_claims::CreatedClaims;
use crate::state::index::Index;
use crate::state::nominations::Nominations;

/// What every controller shares.
#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    pub clients: Clients,
    /// The provider's `Info`: its node-class kind, labels, hash keys.
    pub info: Arc<pv::InfoResponse>,
    /// The cluster's label-domain rules: Kubernetes' and Karpenter's, with
    /// the domains and well-known labels the provider announced (built once
    /// from `info`).
    pub label_rules: Arc<karpenter_core::labels::LabelRules>,
    pub node_class: ApiResource,
    pub settings: Arc<Settings>,
    pub recorder: Recorder,
    pub metrics: Arc<AdapterMetrics>,
    pub timing: Timing,
    /// Nodes provisioning planned pending pods onto.
    pub nominations: Nominations,
    /// The trace each claim was created in, for its launch.
    pub created_claims: CreatedClaims,
    /// Tells the index what this adapter created, ahead of the watch.
    pub writes: crate::state::watch::Writes,
    /// Pods whose eviction was refused, and when to ask again.
    pub evictions: node::termination::evictions::Evictions,
    /// Writes pod-deletion-cost from the disruption plans (gate
    /// PodDeletionCostManagement).
    pub deletion_costs: pod_deletion_cost::DeletionCostWriter,
    /// The provider's repair policies when repair is a disruption method
    /// (the `NodeRepair` gate on, `--legacy-node-repair` off): the
    /// snapshot resolves each node's conditions against them.
    pub repair_policies: Option<Arc<karpenter_api::repair::Policies>>,
    /// When provisioning first decided about and placed each pending pod.
    pub scheduling_times: crate::state::scheduling_times::SchedulingTimes,
}

/// Durations the controllers run by; tests shorten them.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// A NodeClaim whose node has not registered by then is deleted.
    pub registration_ttl: Duration,
    /// A NodeClaim not launched by then is deleted.
    pub launch_ttl: Duration,
    /// Instances without a NodeClaim are collected once this old.
    pub orphan_age: Duration,
    /// How often garbage collection lists the provider's instances.
    pub gc_every: Duration,
    /// How often node classes are resolved again.
    pub resolve_every: Duration,
    /// How long a drain lasts at least (pods' deletions reach the API).
    pub min_drain: Duration,
    /// How often disruption is planned while nothing acts.
    pub disruption_poll: Duration,
    /// How long a graceful command waits before it is checked again.
    pub validation_delay: Duration,
    /// How long a command may wait for its replacements.
    pub disruption_timeout: Duration,
    /// How often pod-deletion-cost may be written (Karpenter: a minute).
    pub deletion_cost_every: Duration,
    /// How often a rebooting node is looked at (Karpenter: 15 s).
    pub reboot_poll: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            registration_ttl: Duration::from_secs(15 * 60),
            launch_ttl: Duration::from_secs(5 * 60),
            orphan_age: Duration::from_secs(30),
            gc_every: Duration::from_secs(60),
            resolve_every: Duration::from_secs(60),
            min_drain: Duration::from_secs(5),
            disruption_poll: Duration::from_secs(10),
            validation_delay: Duration::from_secs(15),
            disruption_timeout: Duration::from_secs(10 * 60),
            deletion_cost_every: Duration::from_secs(60),
            reboot_poll: Duration::from_secs(15),
        }
    }
}

/// What a pass decided about the next one.
pub type Requeue = Option<Duration>;

/// The soonest of two requeues.
pub fn sooner(a: Requeue, b: Requeue) -> Requeue {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Context {
    /// Whether the claim's node class is the provider's kind (Karpenter's
    /// "managed"): claims of other kinds belong to another Karpenter.
    pub fn manages(&self, claim: &NodeClaim) -> bool {
        self.serves(&claim.spec.node_class_ref)
    }

    /// Whether the claim controllers (disruption, expiration, pod events,
    /// repair) act on `claim`: it is this provider's and not being deleted
    /// (from then on only the lifecycle's finalizer does).
    pub fn acts_on(&self, claim: &NodeClaim) -> bool {
        self.manages(claim) && claim.meta().deletion_timestamp.is_none()
    }

    /// The runner's keys of a claim controller: each claim it acts on
    /// ([`Self::acts_on`]) by name, with the fingerprint `print` gives it
    /// (`None`: not reconciled).
    pub fn claim_keys(
        &self,
        index: &Index,
        print: impl Fn(&NodeClaim) -> Option<u64>,
    ) -> Vec<(crate::state::index::Key, u64)> {
        index
            .node_claims
            .iter()
            .filter(|claim| self.acts_on(claim))
            .filter_map(|claim| {
                let name = claim.meta().name.clone().unwrap_or_default();
                Some(((String::new(), name), print(claim)?))
            })
            .collect()
    }

    /// The claim named `name`, if the claim controllers act on it
    /// ([`Self::acts_on`]).
    pub fn claim_to_act_on(&self, index: &Index, name: &str) -> Option<Arc<NodeClaim>> {
        index
            .node_claims
            .named(name)
            .filter(|claim| self.acts_on(claim))
            .cloned()
    }

    /// Whether a NodePool's nodes are this provider's (its node class is of
    /// the kind the provider serves).
    pub fn manages_pool(&self, pool: &karpenter_api::NodePool) -> bool {
        self.serves(&pool.spec.template.spec.node_class_ref)
    }

    /// Whether the provider serves the node class kind `class` refers to.
    fn serves(&self, class: &karpenter_api::NodeClassReference) -> bool {
        self.info
            .node_class
            .as_ref()
            .is_some_and(|gvk| gvk.kind == class.kind && gvk.group == class.group)
    }

    /// The node-class kind the provider serves.
    pub fn node_class_kind(&self) -> &str {
        self.info
            .node_class
            .as_ref()
            .map_or("", |gvk| gvk.kind.as_str())
    }

    pub fn node_claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    pub fn nodes(&self) -> Api<k8s_openapi::api::core::v1::Node> {
        Api::all(self.client.clone())
    }

    pub fn node_pools(&self) -> Api<karpenter_api::NodePool> {
        Api::all(self.client.clone())
    }

    pub fn node_classes(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &self.node_class)
    }

    pub fn pods(&self, namespace: &str) -> Api<k8s_openapi::api::core::v1::Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Pods of every namespace (reads only: the drain's confirmation).
    pub fn all_pods(&self) -> Api<k8s_openapi::api::core::v1::Pod> {
        Api::all(self.client.clone())
    }
}
