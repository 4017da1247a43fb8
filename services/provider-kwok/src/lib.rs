//! provider-kwok: a simulated cloud behind `karpenter.provider.v1.CloudProvider`.
//!
//! ```text
//!   adapter ──Create(node claim)──▶ KwokProvider ── picks the cheapest offering
//!                                     │             that fits the requirements
//!                                     │             (skipping injected ICE faults)
//!                                     └─ after --node-delay ──▶ Node in the cluster
//!                                        (labels, capacity, allocatable, taints
//!                                         with karpenter.sh/unregistered:NoExecute,
//!                                         providerID kwok://NAME, Ready=True)
//!   tests ──admin HTTP──▶ fail offerings (insufficient capacity),
//!                         send interruption events, list instances
//! ```
//!
//! Instance types come from an `InstanceTypeCatalog` file (PLAN_CLI.md) or
//! the built-in kwok-shaped catalog (`karpenter_catalog::kwok`). Nodes are
//! written with server-side apply (field manager `provider-kwok`) through a
//! `kube::Client`; without one the provider only keeps its instances.
//!
//! Admin endpoints (on `--admin-listen`, see [`admin_router`]):
//!
//! | method and path | body | effect |
//! | --- | --- | --- |
//! | `GET /instances` | | the launched instances, as JSON |
//! | `POST /faults/insufficient-capacity` | `{"instanceType"?, "zone"?, "capacityType"?}` | offerings matching the pattern (absent = any) fail Create with RESOURCE_EXHAUSTED |
//! | `DELETE /faults/insufficient-capacity` | | clears the faults and the ICE cache |
//! | `POST /interruptions` | `{"kind": "spot-interruption" \| "rebalance-recommendation" \| "scheduled-change" \| "state-change", "providerIds": [...], "state"?, "detail"?}` | queues an interruption event; answers `{"id"}` |

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use karpenter_core::duration::parse_go_duration;
use karpenter_core::labels;
use karpenter_core::quantity;
use karpenter_core::requirements::Requirement;
use karpenter_core::resources::Resources;
use karpenter_proto::convert::{self, InvalidField};
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::provider::v1::cloud_provider_server::{CloudProvider, CloudProviderServer};
use karpenter_proto::types::v1 as types;
use prost::Message;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tonic::{Code, Request, Response, Status};

/// The KWOKNodeClass CRD (`karpenter.kwok.sh/v1alpha1`).
pub const NODE_CLASS_CRD: &str = include_str!("../crds/karpenter.kwok.sh_kwoknodeclasses.yaml");
pub const NODE_CLASS_GROUP: &str = "karpenter.kwok.sh";
pub const NODE_CLASS_VERSION: &str = "v1alpha1";
pub const NODE_CLASS_KIND: &str = "KWOKNodeClass";
pub const PROVIDER_ID_PREFIX: &str = "kwok://";
/// Where the adapter keeps a node class's hash (on the class and its claims).
pub const NODE_CLASS_HASH_ANNOTATION: &str = "karpenter.kwok.sh/kwoknodeclass-hash";
pub const NODE_CLASS_HASH_VERSION_ANNOTATION: &str = "karpenter.kwok.sh/kwoknodeclass-hash-version";
const NODE_CLASS_HASH_VERSION: &str = "v1";
/// How long an offering that ran out of capacity is reported unavailable.
pub const ICE_TTL: Duration = Duration::from_secs(180);
const DEFAULT_IMAGE: &str = "kwok-image-v1";

/// Errors of loading the catalog.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Parse(String, karpenter_catalog::CatalogError),
}

/// Instance types from an `InstanceTypeCatalog` file, or the built-in
/// kwok-shaped catalog.
pub fn load_catalog(
    path: Option<&std::path::Path>,
) -> Result<Vec<types::InstanceType>, CatalogError> {
    let Some(path) = path else {
        return Ok(karpenter_catalog::kwok::instance_types());
    };
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| CatalogError::Read(name.clone(), e))?;
    karpenter_catalog::load(&text).map_err(|e| CatalogError::Parse(name, e))
}

/// How the provider behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Time from Create to the Node object (a KWOKNodeClass may override it).
    pub node_delay: Duration,
    /// How often unacknowledged interruption events are sent again.
    pub redelivery: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            node_delay: Duration::from_secs(2),
            redelivery: Duration::from_secs(10),
        }
    }
}

/// Offerings that fail with insufficient capacity (absent fields match any).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferingPattern {
    #[serde(default)]
    pub instance_type: Option<String>,
    #[serde(default)]
    pub zone: Option<String>,
    #[serde(default)]
    pub capacity_type: Option<String>,
}

impl OfferingPattern {
    fn matches(&self, it: &str, zone: &str, ct: &str) -> bool {
        self.instance_type.as_deref().is_none_or(|x| x == it)
            && self.zone.as_deref().is_none_or(|x| x == zone)
            && self.capacity_type.as_deref().is_none_or(|x| x == ct)
    }
}

/// An interruption to send (admin API).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionRequest {
    pub kind: String,
    #[serde(default)]
    pub provider_ids: Vec<String>,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub detail: String,
}

#[derive(Default)]
struct State {
    instances: BTreeMap<String, pv::Instance>,
    /// Instance name → its reboots and the operation ID of the last one
    /// (a retried operation does not reboot again).
    reboots: BTreeMap<String, (u32, String)>,
    faults: Vec<OfferingPattern>,
    ice: BTreeMap<(String, String, String), Instant>,
    unacked: BTreeMap<String, pv::InterruptionEvent>,
    next_event: u64,
}

struct Inner {
    catalog: Vec<types::InstanceType>,
    kube: Option<kube::Client>,
    options: Options,
    state: Mutex<State>,
    events: broadcast::Sender<pv::InterruptionEvent>,
}

/// The provider; cheap to clone (shared state).
#[derive(Clone)]
pub struct KwokProvider {
    inner: Arc<Inner>,
}

/// Extended resources the claim requests that an instance type does not
/// report (`reported`): what a NodeOverlay's capacity adds (a device a
/// plugin publishes on the node). The simulated cloud has them, as
/// Karpenter's kwok provider gives a node what its claim requests.
fn simulated_devices(
    claim: &pv::NodeClaim,
    reported: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    claim
        .resources
        .iter()
        .flat_map(|r| r.quantities.iter())
        .filter(|(name, _)| {
            !karpenter_core::resources::CORE.contains(&name.as_str())
                && !reported.contains_key(*name)
        })
        .map(|(name, quantity)| (name.clone(), *quantity))
        .collect()
}

/// `resources` with the claim's [`simulated_devices`].
fn with_devices<M>(claim: &pv::NodeClaim, resources: M) -> M
where
    M: IntoIterator<Item = (String, i64)> + FromIterator<(String, i64)>,
{
    let mut all: BTreeMap<String, i64> = resources.into_iter().collect();
    let devices = simulated_devices(claim, &all);
    all.extend(devices);
    all.into_iter().collect()
}

/// The (type, offering) pairs that satisfy a claim, best first: the claim's
/// instance-type order if it gives one, else by price. A type matches when
/// its requirements intersect the claim's (a key only the claim names is
/// a label the node gets from the claim) and its allocatable fits the
/// claim's requests (with the [`simulated_devices`] it lacks); an offering
/// when it is available in a zone and capacity type the claim allows.
pub fn candidates<'a>(
    catalog: &'a [types::InstanceType],
    claim: &pv::NodeClaim,
) -> Result<Vec<(&'a types::InstanceType, &'a types::Offering)>, InvalidField> {
    let wanted = convert::requirements("node_claim.requirements", &claim.requirements)?;
    let requests = convert::checked_resources("node_claim.resources", claim.resources.as_ref())?;
    let type_ok = |it: &types::InstanceType| {
        let Ok(mut offered) = convert::requirements("", &it.requirements) else {
            return false;
        };
        if !offered.has(labels::INSTANCE_TYPE) {
            offered.add(Requirement::single(labels::INSTANCE_TYPE, &it.name));
        }
        let mut allocatable = convert::allocatable(it);
        allocatable.extend(simulated_devices(claim, &allocatable));
        wanted.intersects(&offered).is_ok() && requests.fits(&Resources::from_map(&allocatable))
    };
    let offering_ok = |o: &types::Offering| {
        o.available
            && [
                (labels::TOPOLOGY_ZONE, &o.zone),
                (labels::CAPACITY_TYPE, &o.capacity_type),
            ]
            .into_iter()
            .all(|(key, value)| wanted.get(key).is_none_or(|r| r.has(value)))
    };
    let mut out: Vec<(usize, &types::InstanceType, &types::Offering)> = Vec::new();
    for it in catalog.iter().filter(|it| type_ok(it)) {
        let rank = if claim.instance_types.is_empty() {
            0
        } else {
            match claim.instance_types.iter().position(|n| *n == it.name) {
                Some(p) => p,
                None => continue,
            }
        };
        for o in it.offerings.iter().filter(|o| offering_ok(o)) {
            out.push((rank, it, o));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0).then(a.2.price.total_cmp(&b.2.price)));
    Ok(out.into_iter().map(|(_, it, o)| (it, o)).collect())
}

fn resource_json(list: &types::ResourceList) -> Value {
    Value::Object(
        list.quantities
            .iter()
            .map(|(k, v)| (k.clone(), json!(quantity::format(k, *v))))
            .collect(),
    )
}

fn effect(e: i32) -> &'static str {
    match types::TaintEffect::try_from(e).unwrap_or(types::TaintEffect::NoSchedule) {
        types::TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        types::TaintEffect::NoExecute => "NoExecute",
        _ => "NoSchedule",
    }
}

/// The Node object of a launched instance.
pub fn node_object(
    instance: &pv::Instance,
    claim: &pv::NodeClaim,
    extra_labels: &BTreeMap<String, String>,
) -> Value {
    let mut labels: serde_json::Map<String, Value> = instance
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    for (k, v) in claim.labels.iter().chain(extra_labels.iter()) {
        labels.insert(k.clone(), json!(v));
    }
    labels.insert(karpenter_core::labels::HOSTNAME.into(), json!(claim.name));
    // As a kubelet Karpenter launched registers: tainted unregistered
    // (NoExecute) until Karpenter's registration syncs the node and lifts it.
    let taints: Vec<Value> = std::iter::once(
        json!({"key": karpenter_core::labels::UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}),
    )
    .chain(
        claim
            .taints
            .iter()
            .chain(claim.startup_taints.iter())
            .map(|t| {
                let mut v = json!({"key": t.key, "effect": effect(t.effect)});
                if !t.value.is_empty() {
                    v["value"] = json!(t.value);
                }
                v
            }),
    )
    .collect();
    let mut spec = json!({"providerID": instance.provider_id});
    if !taints.is_empty() {
        spec["taints"] = json!(taints);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": claim.name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "karpenter.kwok.sh/instance": instance.provider_id},
        },
        "spec": spec,
    })
}

fn node_status(instance: &pv::Instance, boots: u32) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let ip = {
        let h = instance
            .node_claim_name
            .bytes()
            .fold(7u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        format!(
            "10.{}.{}.{}",
            (h >> 16) % 250 + 1,
            (h >> 8) % 250 + 1,
            h % 250 + 1
        )
    };
    let cond = |t: &str, s: &str, reason: &str, msg: &str| json!({"type": t, "status": s, "reason": reason, "message": msg, "lastHeartbeatTime": now, "lastTransitionTime": now});
    json!({
        "capacity": resource_json(instance.capacity.as_ref().unwrap_or(&types::ResourceList::default())),
        "allocatable": resource_json(instance.allocatable.as_ref().unwrap_or(&types::ResourceList::default())),
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": instance.node_claim_name}],
        "nodeInfo": {
            "architecture": instance.labels.get(karpenter_core::labels::ARCH).cloned().unwrap_or_else(|| "amd64".into()),
            "operatingSystem": "linux", "kubeletVersion": "v1.32.0-kwok", "kubeProxyVersion": "v1.32.0-kwok",
            "containerRuntimeVersion": "kwok://v0.6", "osImage": "kwok", "kernelVersion": "kwok",
            "machineID": "", "systemUUID": "", "bootID": format!("{}-boot-{boots}", instance.node_claim_name),
        },
        "phase": "Running",
    })
}

fn spec_field(class: Option<&pv::NodeClass>, field: &str) -> Option<Value> {
    let spec: Value = serde_json::from_str(class?.spec_json.as_str()).ok()?;
    spec.get(field).cloned()
}

fn now_ts() -> prost_types::Timestamp {
    let now = chrono::Utc::now();
    prost_types::Timestamp {
        seconds: now.timestamp(),
        nanos: now.timestamp_subsec_nanos() as i32,
    }
}

impl KwokProvider {
    pub fn new(
        catalog: Vec<types::InstanceType>,
        kube: Option<kube::Client>,
        options: Options,
    ) -> Self {
        KwokProvider {
            inner: Arc::new(Inner {
                catalog,
                kube,
                options,
                state: Mutex::new(State::default()),
                events: broadcast::channel(1024).0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes matching offerings fail Create with insufficient capacity.
    pub fn fail_offerings(&self, pattern: OfferingPattern) {
        self.state().faults.push(pattern);
    }

    /// Clears injected faults and the insufficient-capacity cache.
    pub fn clear_faults(&self) {
        let mut st = self.state();
        st.faults.clear();
        st.ice.clear();
    }

    /// Queues an interruption event; returns its id.
    pub fn interrupt(&self, req: &InterruptionRequest) -> Result<String, String> {
        use pv::interruption_event::Kind;
        let kind = match req.kind.as_str() {
            "spot-interruption" | "SpotInterruption" => Kind::SpotInterruption,
            "rebalance-recommendation" | "RebalanceRecommendation" => Kind::RebalanceRecommendation,
            "scheduled-change" | "ScheduledChange" => Kind::ScheduledChange,
            "state-change" | "StateChange" => Kind::StateChange,
            "capacity-reservation-interruption" | "CapacityReservationInterruption" => {
                Kind::CapacityReservationInterruption
            }
            other => return Err(format!("unknown interruption kind {other:?}")),
        };
        let mut st = self.state();
        st.next_event += 1;
        let id = format!("kwok-event-{}", st.next_event);
        let ev = pv::InterruptionEvent {
            id: id.clone(),
            kind: kind as i32,
            provider_ids: req.provider_ids.clone(),
            state: req.state.clone(),
            time: Some(now_ts()),
            detail: req.detail.clone(),
        };
        if kind == Kind::SpotInterruption {
            // As EC2 does: the capacity that took the instance back is not
            // offered again for a while.
            let hit: Vec<(String, String, String)> = st
                .instances
                .values()
                .filter(|i| req.provider_ids.contains(&i.provider_id) && i.capacity_type == "spot")
                .map(|i| {
                    (
                        i.instance_type.clone(),
                        i.zone.clone(),
                        i.capacity_type.clone(),
                    )
                })
                .collect();
            for key in hit {
                st.ice.insert(key, Instant::now());
            }
        }
        st.unacked.insert(id.clone(), ev.clone());
        let _ = self.inner.events.send(ev);
        Ok(id)
    }

    /// The ids of interruption events not yet acknowledged.
    pub fn unacknowledged(&self) -> Vec<String> {
        self.state().unacked.keys().cloned().collect()
    }

    /// The launched instances.
    pub fn instances(&self) -> Vec<pv::Instance> {
        self.state().instances.values().cloned().collect()
    }

    fn iced(&self, st: &mut State, it: &str, zone: &str, ct: &str) -> bool {
        let key = (it.to_string(), zone.to_string(), ct.to_string());
        if let Some(t) = st.ice.get(&key) {
            if t.elapsed() < ICE_TTL {
                return true;
            }
            st.ice.remove(&key);
        }
        false
    }

    /// The gRPC service for `karpenter_runtime`.
    pub fn service(self, metrics: Arc<karpenter_runtime::Metrics>) -> karpenter_runtime::Service {
        karpenter_runtime::Service {
            routes: tonic::service::Routes::new(CloudProviderServer::new(self)),
            names: vec!["karpenter.provider.v1.CloudProvider"],
            metrics,
        }
    }

    async fn write_node(&self, instance: pv::Instance, claim: pv::NodeClaim, delay: Duration) {
        tokio::time::sleep(delay).await;
        if !self.state().instances.contains_key(&claim.name) {
            return; // deleted before it came up
        }
        let extra: BTreeMap<String, String> = spec_field(claim.node_class.as_ref(), "labels")
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        if let Some(client) = &self.inner.kube {
            let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
            let node = node_object(&instance, &claim, &extra);
            let pp = kube::api::PatchParams::apply("provider-kwok").force();
            if let Err(e) = nodes
                .patch(&claim.name, &pp, &kube::api::Patch::Apply(&node))
                .await
            {
                tracing::warn!(node = %claim.name, error = %e, "creating node");
                return;
            }
            let status = json!({"status": node_status(&instance, 0)});
            if let Err(e) = nodes
                .patch_status(
                    &claim.name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&status),
                )
                .await
            {
                tracing::warn!(node = %claim.name, error = %e, "setting node status");
                return;
            }
            tracing::info!(node = %claim.name, instance_type = %instance.instance_type, "node ready");
        }
        if let Some(i) = self.state().instances.get_mut(&claim.name) {
            i.state = "running".into();
        }
    }
}

fn insufficient_capacity(failed: &[(String, String, String)]) -> Status {
    let details = pv::InsufficientCapacity {
        offerings: failed
            .iter()
            .map(|(it, zone, ct)| pv::FailedOffering {
                instance_type: it.clone(),
                zone: zone.clone(),
                capacity_type: ct.clone(),
            })
            .collect(),
    };
    let message = format!(
        "insufficient capacity for all {} matching offerings",
        failed.len()
    );
    let status = tonic_types::pb::Status {
        code: Code::ResourceExhausted as i32,
        message: message.clone(),
        details: vec![prost_types::Any {
            type_url: "type.googleapis.com/karpenter.provider.v1.InsufficientCapacity".into(),
            value: details.encode_to_vec(),
        }],
    };
    Status::with_details(
        Code::ResourceExhausted,
        message,
        status.encode_to_vec().into(),
    )
}

/// The instance a provider ID names (the ID itself without the prefix).
fn instance_name(provider_id: &str) -> &str {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .unwrap_or(provider_id)
}

/// NOT_FOUND for a provider ID naming no instance (the adapter reads it as
/// the instance being gone).
fn no_instance(provider_id: &str) -> Status {
    Status::not_found(format!("instance {provider_id} not found"))
}

type EventStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pv::InterruptionEvent, Status>> + Send>>;

#[tonic::async_trait]
impl CloudProvider for KwokProvider {
    async fn info(
        &self,
        _: Request<pv::InfoRequest>,
    ) -> Result<Response<pv::InfoResponse>, Status> {
        Ok(Response::new(pv::InfoResponse {
            provider_name: "kwok".into(),
            node_class: Some(pv::GroupVersionKind {
                group: NODE_CLASS_GROUP.into(),
                version: NODE_CLASS_VERSION.into(),
                kind: NODE_CLASS_KIND.into(),
            }),
            node_class_resource: "kwoknodeclasses".into(),
            well_known_labels: [
                "instance-size",
                "instance-family",
                "instance-cpu",
                "instance-memory",
            ]
            .iter()
            .map(|l| format!("{}/{l}", karpenter_catalog::kwok::LABEL_GROUP))
            .collect(),
            restricted_label_domains: vec![karpenter_catalog::kwok::LABEL_GROUP.into()],
            drift_reasons: vec!["ImageDrift".into(), "NodeClassDrift".into()],
            provider_id_prefix: PROVIDER_ID_PREFIX.into(),
            repair_policies: repair_policies(),
            node_class_hash_annotation: NODE_CLASS_HASH_ANNOTATION.into(),
            node_class_hash_version_annotation: NODE_CLASS_HASH_VERSION_ANNOTATION.into(),
        }))
    }

    async fn get_instance_types(
        &self,
        _: Request<pv::GetInstanceTypesRequest>,
    ) -> Result<Response<pv::GetInstanceTypesResponse>, Status> {
        let mut st = self.state();
        let mut types = self.inner.catalog.clone();
        for it in &mut types {
            for o in &mut it.offerings {
                if self.iced(&mut st, &it.name, &o.zone, &o.capacity_type) {
                    o.available = false;
                }
            }
        }
        Ok(Response::new(pv::GetInstanceTypesResponse {
            instance_types: types,
        }))
    }

    async fn create(
        &self,
        req: Request<pv::CreateRequest>,
    ) -> Result<Response<pv::CreateResponse>, Status> {
        let claim = req
            .into_inner()
            .node_claim
            .ok_or_else(|| Status::invalid_argument("node_claim is required"))?;
        if claim.name.is_empty() {
            return Err(Status::invalid_argument("node_claim.name is required"));
        }
        let span = tracing::info_span!("create", node_claim = %claim.name);
        let _g = span.enter();
        let image = spec_field(claim.node_class.as_ref(), "imageID")
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| DEFAULT_IMAGE.into());
        let delay = match spec_field(claim.node_class.as_ref(), "nodeRegistrationDelay") {
            None => self.inner.options.node_delay,
            Some(Value::String(text)) => parse_go_duration(&text).map_err(|e| {
                Status::invalid_argument(format!("node_class.spec.nodeRegistrationDelay: {e}"))
            })?,
            Some(other) => {
                return Err(Status::invalid_argument(format!(
                    "node_class.spec.nodeRegistrationDelay: must be a duration such as \"2s\", got {other}"
                )));
            }
        };
        let instance = {
            let mut st = self.state();
            if let Some(existing) = st.instances.get(&claim.name) {
                return Ok(Response::new(pv::CreateResponse {
                    instance: Some(existing.clone()),
                }));
            }
            let candidates = candidates(&self.inner.catalog, &claim)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            if candidates.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "no instance type of the catalog satisfies the requirements and requests of node claim {}",
                    claim.name
                )));
            }
            let mut failed = Vec::new();
            let mut chosen = None;
            for (it, o) in candidates {
                let key = (it.name.clone(), o.zone.clone(), o.capacity_type.clone());
                if self.iced(&mut st, &it.name, &o.zone, &o.capacity_type)
                    || st
                        .faults
                        .iter()
                        .any(|f| f.matches(&it.name, &o.zone, &o.capacity_type))
                {
                    st.ice.insert(key.clone(), Instant::now());
                    failed.push(key);
                    continue;
                }
                chosen = Some((it, o));
                break;
            }
            let Some((it, o)) = chosen else {
                tracing::info!(offerings = failed.len(), "insufficient capacity");
                return Err(insufficient_capacity(&failed));
            };
            let mut labels: BTreeMap<String, String> = it
                .requirements
                .iter()
                .filter(|r| r.operator == types::Operator::In as i32 && r.values.len() == 1)
                .map(|r| (r.key.clone(), r.values[0].clone()))
                .collect();
            labels.insert(labels::INSTANCE_TYPE.into(), it.name.clone());
            labels.insert(labels::TOPOLOGY_ZONE.into(), o.zone.clone());
            labels.insert(labels::CAPACITY_TYPE.into(), o.capacity_type.clone());
            if !claim.node_pool.is_empty() {
                labels.insert(labels::NODE_POOL.into(), claim.node_pool.clone());
            }
            let instance = pv::Instance {
                node_claim_name: claim.name.clone(),
                provider_id: format!("{PROVIDER_ID_PREFIX}{}", claim.name),
                instance_type: it.name.clone(),
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.clone(),
                image_id: image,
                capacity: Some(types::ResourceList {
                    quantities: with_devices(
                        &claim,
                        it.capacity.clone().unwrap_or_default().quantities,
                    ),
                }),
                allocatable: Some(types::ResourceList {
                    quantities: with_devices(&claim, convert::allocatable(it)),
                }),
                labels,
                tags: BTreeMap::from([
                    (labels::TAG_NODE_CLAIM.to_string(), claim.name.clone()),
                    (labels::TAG_NODE_POOL.to_string(), claim.node_pool.clone()),
                ])
                .into_iter()
                .collect(),
                launch_time: Some(now_ts()),
                state: "pending".into(),
                price: o.price,
                node_pool: claim.node_pool.clone(),
            };
            st.instances.insert(claim.name.clone(), instance.clone());
            tracing::info!(instance_type = %it.name, zone = %o.zone, capacity_type = %o.capacity_type, "launched");
            instance
        };
        let this = self.clone();
        tokio::spawn(
            this.clone()
                .write_node_owned(instance.clone(), claim, delay),
        );
        Ok(Response::new(pv::CreateResponse {
            instance: Some(instance),
        }))
    }

    async fn delete(
        &self,
        req: Request<pv::DeleteRequest>,
    ) -> Result<Response<pv::DeleteResponse>, Status> {
        let pid = req.into_inner().provider_id;
        let name = instance_name(&pid).to_string();
        let removed = {
            let mut st = self.state();
            st.reboots.remove(&name);
            st.instances.remove(&name)
        };
        if removed.is_none() {
            return Err(no_instance(&pid));
        }
        if let Some(client) = &self.inner.kube {
            let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
            match nodes
                .delete(&name, &kube::api::DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => tracing::warn!(node = %name, error = %e, "deleting node"),
            }
        }
        Ok(Response::new(pv::DeleteResponse {}))
    }

    /// A simulated reboot: the node comes back at once with a new boot ID
    /// and `Ready=True` (its other conditions as at launch).
    async fn reboot(
        &self,
        req: Request<pv::RebootRequest>,
    ) -> Result<Response<pv::RebootResponse>, Status> {
        let req = req.into_inner();
        let name = instance_name(&req.provider_id).to_string();
        let (instance, boots) = {
            let mut st = self.state();
            let Some(instance) = st.instances.get(&name).cloned() else {
                return Err(no_instance(&req.provider_id));
            };
            let (boots, last) = st.reboots.entry(name.clone()).or_default();
            if *last == req.operation_id {
                return Ok(Response::new(pv::RebootResponse {}));
            }
            *boots = boots.saturating_add(1);
            last.clone_from(&req.operation_id);
            (instance, *boots)
        };
        if let Some(client) = &self.inner.kube {
            let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
            let status = json!({"status": node_status(&instance, boots)});
            nodes
                .patch_status(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&status),
                )
                .await
                .map_err(|e| Status::unavailable(format!("rebooting node {name}: {e}")))?;
        }
        tracing::info!(node = %name, boots, "instance rebooted");
        Ok(Response::new(pv::RebootResponse {}))
    }

    async fn get(&self, req: Request<pv::GetRequest>) -> Result<Response<pv::GetResponse>, Status> {
        let pid = req.into_inner().provider_id;
        let instance = self
            .state()
            .instances
            .get(instance_name(&pid))
            .cloned()
            .ok_or_else(|| no_instance(&pid))?;
        Ok(Response::new(pv::GetResponse {
            instance: Some(instance),
        }))
    }

    async fn list(
        &self,
        _: Request<pv::ListRequest>,
    ) -> Result<Response<pv::ListResponse>, Status> {
        Ok(Response::new(pv::ListResponse {
            instances: self.instances(),
        }))
    }

    async fn is_drifted(
        &self,
        req: Request<pv::IsDriftedRequest>,
    ) -> Result<Response<pv::IsDriftedResponse>, Status> {
        let req = req.into_inner();
        let want = req
            .node_claim
            .as_ref()
            .and_then(|c| spec_field(c.node_class.as_ref(), "imageID"))
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| DEFAULT_IMAGE.into());
        let spec_now = req
            .node_claim
            .as_ref()
            .and_then(|c| c.node_class.as_ref())
            .map(|class| spec_hash(&class.spec_json));
        let reason = if !req.image_id.is_empty() && req.image_id != want {
            "ImageDrift"
        } else if !req.node_class_hash.is_empty()
            && req.node_class_hash_version == NODE_CLASS_HASH_VERSION
            && spec_now.is_some_and(|now| now != req.node_class_hash)
        {
            "NodeClassDrift"
        } else {
            ""
        };
        Ok(Response::new(pv::IsDriftedResponse {
            reason: reason.into(),
        }))
    }

    async fn resolve_node_class(
        &self,
        req: Request<pv::ResolveNodeClassRequest>,
    ) -> Result<Response<pv::ResolveNodeClassResponse>, Status> {
        let class = req.into_inner().node_class.unwrap_or_default();
        let spec: Value = serde_json::from_str(&class.spec_json).unwrap_or_else(|_| json!({}));
        let image = spec["imageID"].as_str().unwrap_or(DEFAULT_IMAGE);
        let hash = spec_hash(&class.spec_json);
        Ok(Response::new(pv::ResolveNodeClassResponse {
            status_json: json!({"imageID": image}).to_string(),
            conditions: vec![pv::Condition {
                r#type: "Ready".into(),
                status: "True".into(),
                reason: "Ready".into(),
                message: String::new(),
            }],
            hash,
            hash_version: NODE_CLASS_HASH_VERSION.into(),
        }))
    }

    type WatchInterruptionsStream = EventStream;

    async fn watch_interruptions(
        &self,
        _: Request<pv::WatchInterruptionsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let mut events = self.inner.events.subscribe();
        let this = self.clone();
        let redelivery = self.inner.options.redelivery;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(redelivery);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let pending: Vec<pv::InterruptionEvent> = this.state().unacked.values().cloned().collect();
                        for ev in pending {
                            if tx.send(Ok(ev)).await.is_err() {
                                return;
                            }
                        }
                    }
                    ev = events.recv() => match ev {
                        Ok(ev) => if tx.send(Ok(ev)).await.is_err() { return; },
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn acknowledge_interruption(
        &self,
        req: Request<pv::AcknowledgeInterruptionRequest>,
    ) -> Result<Response<pv::AcknowledgeInterruptionResponse>, Status> {
        self.state().unacked.remove(&req.into_inner().id);
        Ok(Response::new(pv::AcknowledgeInterruptionResponse {}))
    }

    async fn finalize_node_class(
        &self,
        _: Request<pv::FinalizeNodeClassRequest>,
    ) -> Result<Response<pv::FinalizeNodeClassResponse>, Status> {
        // The simulated cloud keeps nothing per node class.
        Ok(Response::new(pv::FinalizeNodeClassResponse {}))
    }
}

/// A hash of a node class spec that does not depend on key order.
pub fn spec_hash(spec_json: &str) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let spec: Value = serde_json::from_str(spec_json).unwrap_or_else(|_| json!({}));
    let text = sorted(&spec).to_string();
    karpenter_core::hash::fnv1a_64(text.as_bytes()).to_string()
}

impl KwokProvider {
    async fn write_node_owned(self, instance: pv::Instance, claim: pv::NodeClaim, delay: Duration) {
        self.write_node(instance, claim, delay).await;
    }
}

/// provider-kwok's repair policies: `Ready` False or Unknown for 10 minutes
/// replaces the node; `Ready=False` with the reason `RebootRequired` (what
/// a test sets to exercise the action) for 5 minutes reboots it (and is
/// replaced if still there at 10).
pub fn repair_policies() -> Vec<pv::RepairPolicy> {
    let minutes = |m: i64| {
        Some(prost_types::Duration {
            seconds: m * 60,
            nanos: 0,
        })
    };
    let policy = |status: &str, reason: &str, action: pv::RepairAction| pv::RepairPolicy {
        condition_type: "Ready".into(),
        condition_status: status.into(),
        toleration: minutes(if action == pv::RepairAction::Reboot {
            5
        } else {
            10
        }),
        reason_regex: reason.into(),
        action: action as i32,
        termination_grace_period: None,
        priority: 0,
    };
    vec![
        policy("False", "", pv::RepairAction::Replace),
        policy("Unknown", "", pv::RepairAction::Replace),
        policy("False", "^RebootRequired$", pv::RepairAction::Reboot),
    ]
}

/// The admin HTTP API (fault injection, interruptions, instances).
pub fn admin_router(provider: KwokProvider) -> axum::Router {
    use axum::Json;
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::routing::{get, post};
    axum::Router::new()
        .route(
            "/instances",
            get(|State(p): State<KwokProvider>| async move {
                let list: Vec<Value> = p
                    .instances()
                    .iter()
                    .map(|i| json!({"nodeClaim": i.node_claim_name, "providerID": i.provider_id, "instanceType": i.instance_type, "zone": i.zone, "capacityType": i.capacity_type, "state": i.state, "price": i.price}))
                    .collect();
                Json(json!({"instances": list}))
            }),
        )
        .route(
            "/faults/insufficient-capacity",
            post(|State(p): State<KwokProvider>, Json(pattern): Json<OfferingPattern>| async move {
                p.fail_offerings(pattern);
                StatusCode::NO_CONTENT
            })
            .delete(|State(p): State<KwokProvider>| async move {
                p.clear_faults();
                StatusCode::NO_CONTENT
            }),
        )
        .route(
            "/interruptions",
            post(|State(p): State<KwokProvider>, Json(req): Json<InterruptionRequest>| async move {
                match p.interrupt(&req) {
                    Ok(id) => (StatusCode::OK, Json(json!({"id": id}))),
                    Err(e) => (StatusCode::BAD_REQUEST, Json(json!({"error": e}))),
                }
            }),
        )
        .with_state(provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: types::Operator, values: &[&str]) -> types::Requirement {
        types::Requirement {
            key: key.into(),
            operator: op as i32,
            values: values.iter().map(|s| s.to_string()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn cheapest_offering_that_fits_comes_first() {
        let catalog = load_catalog(None).expect("builtin");
        let claim = pv::NodeClaim {
            name: "c".into(),
            requirements: vec![
                req(labels::TOPOLOGY_ZONE, types::Operator::In, &["us-west-2b"]),
                req("kubernetes.io/arch", types::Operator::In, &["arm64"]),
            ],
            resources: Some(types::ResourceList {
                quantities: [("cpu".to_string(), 3000), ("memory".to_string(), 1 << 30)]
                    .into_iter()
                    .collect(),
            }),
            ..Default::default()
        };
        let c = candidates(&catalog, &claim).expect("valid claim");
        let (it, o) = c.first().expect("a candidate");
        assert_eq!(it.name, "c-4x-arm64-linux");
        assert_eq!(
            (o.zone.as_str(), o.capacity_type.as_str()),
            ("us-west-2b", "spot")
        );
        let on_demand = pv::NodeClaim {
            requirements: vec![req(
                labels::CAPACITY_TYPE,
                types::Operator::In,
                &["on-demand"],
            )],
            ..claim
        };
        assert!(
            candidates(&catalog, &on_demand)
                .expect("valid claim")
                .iter()
                .all(|(_, o)| o.capacity_type == "on-demand")
        );
    }

    #[test]
    fn a_device_no_type_reports_is_simulated_on_the_type_the_claim_names() {
        // What a NodeOverlay's capacity adds: Karpenter's kwok launches it.
        let catalog = load_catalog(None).expect("builtin");
        let claim = pv::NodeClaim {
            name: "c".into(),
            requirements: vec![req(
                labels::INSTANCE_TYPE,
                types::Operator::In,
                &["c-4x-amd64-linux"],
            )],
            resources: Some(types::ResourceList {
                quantities: [
                    ("cpu".to_string(), 500),
                    ("smarter-devices/fuse".to_string(), 1),
                ]
                .into_iter()
                .collect(),
            }),
            ..Default::default()
        };
        let c = candidates(&catalog, &claim).expect("valid claim");
        assert_eq!(
            c.first().map(|(it, _)| it.name.as_str()),
            Some("c-4x-amd64-linux")
        );
        let allocatable = with_devices(&claim, convert::allocatable(c[0].0));
        assert_eq!(allocatable.get("smarter-devices/fuse"), Some(&1));
        let too_much_cpu = pv::NodeClaim {
            resources: Some(types::ResourceList {
                quantities: [("cpu".to_string(), 64_000)].into_iter().collect(),
            }),
            ..claim
        };
        assert!(
            candidates(&catalog, &too_much_cpu)
                .expect("valid")
                .is_empty()
        );
    }

    #[test]
    fn a_claim_with_an_unknown_operator_is_refused_not_matched_to_everything() {
        let catalog = load_catalog(None).expect("builtin");
        let claim = pv::NodeClaim {
            name: "c".into(),
            requirements: vec![types::Requirement {
                operator: 99,
                ..req("kubernetes.io/arch", types::Operator::In, &["arm64"])
            }],
            ..Default::default()
        };
        assert_eq!(
            candidates(&catalog, &claim).map_err(|e| e.field),
            Err("node_claim.requirements[0].operator".to_owned())
        );
    }
}
