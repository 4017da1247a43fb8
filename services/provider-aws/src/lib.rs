//! The AWS cloud provider service: Karpenter's AWS CloudProvider over gRPC.
//!
//! ```text
//!                      ┌──────────────── provider-aws ─────────────────┐
//!   GetInstanceTypes ─▶│ Catalog (types TTL, prices timer, ICE 3 min)  │─▶ ec2:DescribeInstanceTypes/-Offerings
//!                      │                                               │   ec2:DescribeSpotPriceHistory, pricing:GetProducts
//!   ResolveNodeClass ─▶│ nodeclass: subnets, SGs, AMIs (SSM aliases),  │─▶ ec2:Describe*, ssm:GetParameter,
//!                      │            instance profile, conditions, hash │   iam:*InstanceProfile
//!   Create ──────────▶ │ provider: filter → 60 cheapest → capacity type│─▶ ec2:CreateLaunchTemplate, ec2:CreateFleet(instant)
//!   Get/List/Delete ─▶ │           → launch templates → one fleet      │─▶ ec2:DescribeInstances, ec2:TerminateInstances
//!   WatchInterruptions▶│ interruption: SQS long poll → events          │─▶ sqs:ReceiveMessage / DeleteMessage
//!                      └───────────────────────────────────────────────┘
//! ```
//!
//! The node class travels as JSON with each call; the provider keeps only
//! caches (catalog, prices, unavailable offerings), so replicas may come and
//! go. Every AWS action it calls is in the project's IAM policy (seed 003);
//! throttling and 5xx answers are retried by the SDK with backoff.

#![forbid(unsafe_code)]

pub mod aws;
pub mod candidates;
pub mod catalog;
pub mod cluster;
pub mod error;
pub mod fleet;
pub mod instancetype;
pub mod interruption;
pub mod kubelet;
pub mod limits;
pub mod nodeclass;
pub mod provider;
pub mod quantity;
pub mod templates;
pub mod userdata;
pub mod volumes;

use std::pin::Pin;
use std::sync::Arc;

use karpenter_api::aws::labels as l;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::provider::v1::cloud_provider_server::{CloudProvider, CloudProviderServer};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::OnceCell;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

pub use aws::{Clients, Settings};
pub use error::Error;
use nodeclass::NodeClass;
use provider::Provider;

/// Runs `work` on `owner` every `every` until the owner is dropped (the
/// task holds it only weakly, so it never keeps the provider alive); a
/// failed pass is logged as `what` failed and the next one tries again.
pub(crate) fn spawn_every<T, F, Fut>(
    owner: &Arc<T>,
    every: std::time::Duration,
    what: &'static str,
    work: F,
) where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Error>> + Send,
{
    let weak = Arc::downgrade(owner);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(owner) = weak.upgrade() else {
                return;
            };
            if let Err(error) = work(owner).await {
                tracing::warn!(%error, "{what} failed");
            }
        }
    });
}

/// Counters the provider adds to the service's registry.
#[derive(Clone)]
pub struct ProviderMetrics {
    pub instances_launched: Counter,
    pub insufficient_capacity: Counter,
    pub interruption_events: Counter,
    pub interruption_messages_malformed: Counter,
    pub interruption_messages_ignored: Counter,
}

/// The gRPC service.
#[derive(Clone)]
pub struct AwsProvider {
    provider: Arc<Provider>,
    metrics: Arc<ProviderMetrics>,
    queue_url: Arc<OnceCell<String>>,
}

impl AwsProvider {
    /// Builds the SDK clients and starts the price refresher.
    pub async fn new(settings: Settings, metrics: &karpenter_runtime::Metrics) -> Self {
        let clients = Clients::new(&settings).await;
        let own = ProviderMetrics {
            instances_launched: metrics
                .counter("instances_launched", "Instances launched by CreateFleet"),
            insufficient_capacity: metrics.counter(
                "insufficient_capacity",
                "Create calls that ended with insufficient capacity",
            ),
            interruption_events: metrics
                .counter("interruption_events", "Interruption events streamed"),
            interruption_messages_malformed: metrics.counter(
                "interruption_messages_malformed",
                "Interruption queue messages that could not be read (deleted)",
            ),
            interruption_messages_ignored: metrics.counter(
                "interruption_messages_ignored",
                "Interruption queue messages of events Karpenter does not act on (deleted)",
            ),
        };
        let provider = Arc::new(Provider::new(clients, settings));
        provider.catalog.spawn_price_refresher();
        provider.spawn_launch_template_janitor();
        Self {
            provider,
            metrics: Arc::new(own),
            queue_url: Arc::new(OnceCell::new()),
        }
    }

    pub fn into_server(self) -> CloudProviderServer<Self> {
        CloudProviderServer::new(self)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(256 * 1024 * 1024)
    }

    async fn queue_url(&self) -> Result<String, Error> {
        let queue = self
            .provider
            .settings
            .interruption_queue
            .clone()
            .ok_or_else(|| {
                Error::NotReady("no interruption queue is configured (INTERRUPTION_QUEUE)".into())
            })?;
        let sqs = self.provider.clients.sqs.clone();
        self.queue_url
            .get_or_try_init(|| async move {
                if queue.starts_with("http://") || queue.starts_with("https://") {
                    return Ok(queue);
                }
                let out = sqs
                    .get_queue_url()
                    .queue_name(&queue)
                    .send()
                    .await
                    .map_err(|e| Error::aws("sqs:GetQueueUrl", &e))?;
                out.queue_url()
                    .map(str::to_string)
                    .ok_or_else(|| Error::Internal(format!("no URL for queue {queue:?}")))
            })
            .await
            .cloned()
    }
}

/// Labels the AWS provider adds to Karpenter's well-known set.
pub fn well_known_labels() -> Vec<String> {
    let mut labels: Vec<String> = l::AWS_WELL_KNOWN_LABELS
        .iter()
        .map(|s| s.to_string())
        .collect();
    labels.push(l::AWS_TOPOLOGY_ZONE_ID.to_string());
    labels
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pv::InterruptionEvent, Status>> + Send>>;

async fn delete_message(sqs: &aws_sdk_sqs::Client, url: &str, receipt: &str) -> Result<(), Error> {
    sqs.delete_message()
        .queue_url(url)
        .receipt_handle(receipt)
        .send()
        .await
        .map_err(|e| Error::aws("sqs:DeleteMessage", &e))?;
    Ok(())
}

#[tonic::async_trait]
impl CloudProvider for AwsProvider {
    #[tracing::instrument(name = "Info", skip_all)]
    async fn info(
        &self,
        _request: Request<pv::InfoRequest>,
    ) -> Result<Response<pv::InfoResponse>, Status> {
        Ok(Response::new(pv::InfoResponse {
            provider_name: "aws".into(),
            node_class: Some(pv::GroupVersionKind {
                group: l::AWS_GROUP.into(),
                version: "v1".into(),
                kind: "EC2NodeClass".into(),
            }),
            node_class_resource: "ec2nodeclasses".into(),
            well_known_labels: well_known_labels(),
            restricted_label_domains: vec![l::AWS_GROUP.into()],
            drift_reasons: vec![
                provider::DRIFT_AMI.into(),
                provider::DRIFT_SUBNET.into(),
                provider::DRIFT_SECURITY_GROUP.into(),
                provider::DRIFT_NODE_CLASS.into(),
            ],
            provider_id_prefix: "aws://".into(),
            repair_policies: repair_policies(self.provider.settings.reboot_for_repair),
            node_class_hash_annotation: l::AWS_EC2_NODE_CLASS_HASH.into(),
            node_class_hash_version_annotation: l::AWS_EC2_NODE_CLASS_HASH_VERSION.into(),
        }))
    }

    #[tracing::instrument(name = "GetInstanceTypes", skip_all, fields(node_pool, types))]
    async fn get_instance_types(
        &self,
        request: Request<pv::GetInstanceTypesRequest>,
    ) -> Result<Response<pv::GetInstanceTypesResponse>, Status> {
        let request = request.into_inner();
        tracing::Span::current().record("node_pool", request.node_pool.as_str());
        let nc = match &request.node_class {
            Some(wire) if !wire.spec_json.trim().is_empty() => {
                Some(NodeClass::from_wire("node_class", Some(wire))?)
            }
            _ => None,
        };
        let types = self.provider.instance_types(nc.as_ref()).await?;
        tracing::Span::current().record("types", types.len());
        Ok(Response::new(pv::GetInstanceTypesResponse {
            instance_types: types.iter().map(|(_, it)| it.clone()).collect(),
        }))
    }

    #[tracing::instrument(name = "Create", skip_all, fields(node_claim, instance))]
    async fn create(
        &self,
        request: Request<pv::CreateRequest>,
    ) -> Result<Response<pv::CreateResponse>, Status> {
        let claim = request.into_inner().node_claim.ok_or_else(|| {
            Status::from(Error::invalid("node_claim", "a node claim is required"))
        })?;
        tracing::Span::current().record("node_claim", claim.name.as_str());
        match self.provider.create(&claim).await {
            Ok(instance) => {
                tracing::Span::current().record("instance", instance.provider_id.as_str());
                self.metrics.instances_launched.inc();
                tracing::info!(
                    instance_type = %instance.instance_type,
                    zone = %instance.zone,
                    capacity_type = %instance.capacity_type,
                    "launched"
                );
                Ok(Response::new(pv::CreateResponse {
                    instance: Some(instance),
                }))
            }
            Err(error) => {
                if matches!(error, Error::InsufficientCapacity { .. }) {
                    self.metrics.insufficient_capacity.inc();
                }
                tracing::warn!(%error, "create failed");
                Err(error.into())
            }
        }
    }

    #[tracing::instrument(name = "Delete", skip_all, fields(provider_id))]
    async fn delete(
        &self,
        request: Request<pv::DeleteRequest>,
    ) -> Result<Response<pv::DeleteResponse>, Status> {
        let request = request.into_inner();
        tracing::Span::current().record("provider_id", request.provider_id.as_str());
        self.provider.delete(&request.provider_id).await?;
        Ok(Response::new(pv::DeleteResponse {}))
    }

    #[tracing::instrument(name = "Reboot", skip_all, fields(provider_id))]
    async fn reboot(
        &self,
        request: Request<pv::RebootRequest>,
    ) -> Result<Response<pv::RebootResponse>, Status> {
        let request = request.into_inner();
        tracing::Span::current().record("provider_id", request.provider_id.as_str());
        if !self.provider.settings.reboot_for_repair {
            return Err(Status::unimplemented(
                "rebooting for repair is off (AWS_FEATURE_GATES RebootForRepair=false)",
            ));
        }
        if request.operation_id.is_empty() || request.operation_id.len() > 512 {
            return Err(Error::invalid("operation_id", "1 to 512 characters").into());
        }
        self.provider
            .reboot(&request.provider_id, &request.operation_id)
            .await?;
        Ok(Response::new(pv::RebootResponse {}))
    }

    #[tracing::instrument(name = "Get", skip_all, fields(provider_id))]
    async fn get(
        &self,
        request: Request<pv::GetRequest>,
    ) -> Result<Response<pv::GetResponse>, Status> {
        let request = request.into_inner();
        tracing::Span::current().record("provider_id", request.provider_id.as_str());
        let instance = self.provider.get(&request.provider_id).await?;
        Ok(Response::new(pv::GetResponse {
            instance: Some(instance),
        }))
    }

    #[tracing::instrument(name = "List", skip_all)]
    async fn list(
        &self,
        _request: Request<pv::ListRequest>,
    ) -> Result<Response<pv::ListResponse>, Status> {
        let instances = self.provider.list().await?;
        Ok(Response::new(pv::ListResponse { instances }))
    }

    #[tracing::instrument(name = "IsDrifted", skip_all, fields(provider_id))]
    async fn is_drifted(
        &self,
        request: Request<pv::IsDriftedRequest>,
    ) -> Result<Response<pv::IsDriftedResponse>, Status> {
        let request = request.into_inner();
        tracing::Span::current().record("provider_id", request.provider_id.as_str());
        let reason = self.provider.is_drifted(&request).await?;
        Ok(Response::new(pv::IsDriftedResponse { reason }))
    }

    #[tracing::instrument(name = "ResolveNodeClass", skip_all, fields(node_class))]
    async fn resolve_node_class(
        &self,
        request: Request<pv::ResolveNodeClassRequest>,
    ) -> Result<Response<pv::ResolveNodeClassResponse>, Status> {
        let request = request.into_inner();
        let nc = NodeClass::from_wire("node_class", request.node_class.as_ref())?;
        tracing::Span::current().record("node_class", nc.name.as_str());
        let (cluster, cluster_error) = self.provider.cluster.details().await;
        let response = nodeclass::resolve(
            &self.provider.clients,
            &self.provider.settings,
            &cluster,
            cluster_error.as_deref(),
            &nc,
        )
        .await?;
        Ok(Response::new(response))
    }

    type WatchInterruptionsStream = EventStream;

    #[tracing::instrument(name = "WatchInterruptions", skip_all)]
    async fn watch_interruptions(
        &self,
        _request: Request<pv::WatchInterruptionsRequest>,
    ) -> Result<Response<Self::WatchInterruptionsStream>, Status> {
        let url = self.queue_url().await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<pv::InterruptionEvent, Status>>(64);
        let provider = self.provider.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let sqs = provider.clients.sqs.clone();
            let wait = provider.settings.interruption_wait_seconds.clamp(0, 20);
            loop {
                let received = tokio::select! {
                    () = tx.closed() => return,
                    r = sqs
                        .receive_message()
                        .queue_url(&url)
                        .max_number_of_messages(10)
                        .wait_time_seconds(wait)
                        .send() => r,
                };
                let out = match received {
                    Ok(out) => out,
                    Err(e) => {
                        let error = Error::aws("sqs:ReceiveMessage", &e);
                        tracing::warn!(%error, "receiving interruption messages failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                };
                for message in out.messages() {
                    let Some(receipt) = message.receipt_handle() else {
                        continue;
                    };
                    let parsed = interruption::parse(message.body().unwrap_or_default());
                    let message_id = message.message_id().unwrap_or_default();
                    let parsed = match parsed {
                        Ok(Some(parsed)) => parsed,
                        Ok(None) => {
                            metrics.interruption_messages_ignored.inc();
                            tracing::debug!(
                                message_id,
                                "deleting an interruption message Karpenter does not act on"
                            );
                            if let Err(error) = delete_message(&sqs, &url, receipt).await {
                                tracing::warn!(%error, "deleting an ignored message failed");
                            }
                            continue;
                        }
                        Err(error) => {
                            metrics.interruption_messages_malformed.inc();
                            tracing::warn!(%error, message_id, "dropping a malformed interruption message");
                            if let Err(error) = delete_message(&sqs, &url, receipt).await {
                                tracing::warn!(%error, "deleting a dropped message failed");
                            }
                            continue;
                        }
                    };
                    let mut provider_ids = Vec::new();
                    for id in &parsed.instance_ids {
                        let described = match provider.describe(id).await {
                            Ok(described) => described,
                            Err(error) => {
                                // The event still names the instance (the
                                // adapter matches by instance ID); only the
                                // spot offering is not marked unavailable.
                                tracing::warn!(%error, instance = %id, "describing an interrupted instance failed; sending its event without the zone");
                                None
                            }
                        };
                        let zone = described
                            .as_ref()
                            .and_then(|i| i.placement())
                            .and_then(|p| p.availability_zone())
                            .map(str::to_string);
                        // As EC2 takes the capacity back, the offering is
                        // not launched into again for a while.
                        if parsed.kind == pv::interruption_event::Kind::SpotInterruption
                            && let (Some(zone), Some(instance_type)) = (
                                zone.as_deref(),
                                described.as_ref().and_then(|i| i.instance_type()),
                            )
                        {
                            provider
                                .catalog
                                .mark_unavailable(instance_type.as_str(), zone, "spot");
                        }
                        provider_ids.push(match zone {
                            Some(zone) => format!("aws:///{zone}/{id}"),
                            None => format!("aws:///{id}"),
                        });
                    }
                    // The message id stays the same across redeliveries; the
                    // receipt handle needed to delete it does not.
                    let id = message
                        .message_id()
                        .map_or_else(|| receipt.to_string(), str::to_string);
                    provider.remember_receipt(&id, receipt);
                    let event = pv::InterruptionEvent {
                        id,
                        kind: parsed.kind as i32,
                        provider_ids,
                        state: parsed.state,
                        time: parsed.time.map(|t| prost_types::Timestamp {
                            seconds: t.timestamp(),
                            nanos: t.timestamp_subsec_nanos() as i32,
                        }),
                        detail: parsed.detail,
                    };
                    metrics.interruption_events.inc();
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    #[tracing::instrument(name = "AcknowledgeInterruption", skip_all)]
    async fn acknowledge_interruption(
        &self,
        request: Request<pv::AcknowledgeInterruptionRequest>,
    ) -> Result<Response<pv::AcknowledgeInterruptionResponse>, Status> {
        let request = request.into_inner();
        if request.id.is_empty() {
            return Err(Error::invalid("id", "the event id to acknowledge is required").into());
        }
        let url = self.queue_url().await?;
        // Unknown ids (a restarted provider) are acknowledged when the
        // message comes again and its receipt is known.
        match self.provider.take_receipt(&request.id) {
            Some(receipt) => delete_message(&self.provider.clients.sqs, &url, &receipt).await?,
            None => tracing::info!(
                id = %request.id,
                "acknowledged an interruption whose message this process has not received; it is deleted on redelivery"
            ),
        }
        Ok(Response::new(pv::AcknowledgeInterruptionResponse {}))
    }

    #[tracing::instrument(name = "FinalizeNodeClass", skip_all, fields(node_class))]
    async fn finalize_node_class(
        &self,
        request: Request<pv::FinalizeNodeClassRequest>,
    ) -> Result<Response<pv::FinalizeNodeClassResponse>, Status> {
        let request = request.into_inner();
        let nc = NodeClass::from_wire("node_class", request.node_class.as_ref())?;
        tracing::Span::current().record("node_class", nc.name.as_str());
        self.provider.finalize_node_class(&nc).await?;
        Ok(Response::new(pv::FinalizeNodeClassResponse {}))
    }
}

/// NVIDIA XIDs a reboot clears (a GPU reset brings the device back).
const REBOOT_CLEARABLE_XIDS: &str = "13|31|43|45|46|61|62|63|64|94|119|120|140";
/// NVIDIA XIDs that mean failed hardware: the node is replaced.
const FATAL_XIDS: &str = "48|74|79|92|95";

/// Karpenter's AWS repair policies (v1.15, reason-aware): the kubelet's
/// `Ready` condition and the EKS node monitoring agent's conditions after
/// 30 minutes, each with a bounded drain (forceful when the kubelet is
/// unreachable); a GPU fault by its XID after 10 minutes, rebooted when a
/// reboot clears it (with `RebootForRepair`), else replaced.
pub fn repair_policies(reboot: bool) -> Vec<pv::RepairPolicy> {
    let minutes = |m: i64| {
        Some(prost_types::Duration {
            seconds: m * 60,
            nanos: 0,
        })
    };
    let policy = |condition: &str, status: &str, reason: String, toleration, action, grace| {
        pv::RepairPolicy {
            condition_type: condition.into(),
            condition_status: status.into(),
            toleration,
            reason_regex: reason,
            action: action as i32,
            termination_grace_period: grace,
            priority: 0,
        }
    };
    let replace = pv::RepairAction::Replace;
    let gpu = "AcceleratedHardwareReady";
    let xid = |codes: &str| format!("XID({codes})(\\D|$)");
    let mut policies = vec![
        policy(
            "Ready",
            "False",
            String::new(),
            minutes(30),
            replace,
            minutes(10),
        ),
        policy(
            "Ready",
            "Unknown",
            String::new(),
            minutes(30),
            replace,
            minutes(0),
        ),
        policy(
            gpu,
            "False",
            xid(FATAL_XIDS),
            minutes(10),
            replace,
            minutes(10),
        ),
        policy(
            gpu,
            "False",
            String::new(),
            minutes(30),
            replace,
            minutes(10),
        ),
    ];
    for condition in [
        "StorageReady",
        "NetworkingReady",
        "KernelReady",
        "ContainerRuntimeReady",
    ] {
        policies.push(policy(
            condition,
            "False",
            String::new(),
            minutes(30),
            replace,
            minutes(10),
        ));
    }
    if reboot {
        let action = pv::RepairAction::Reboot;
        policies.push(policy(
            gpu,
            "False",
            xid(REBOOT_CLEARABLE_XIDS),
            minutes(10),
            action,
            minutes(10),
        ));
    }
    policies
}

/// The runtime `Service` for `karpenter_runtime::serve`.
pub async fn service(
    settings: Settings,
    metrics: Arc<karpenter_runtime::Metrics>,
) -> karpenter_runtime::Service {
    let provider = AwsProvider::new(settings, &metrics).await;
    karpenter_runtime::Service {
        routes: tonic::service::Routes::new(provider.into_server()),
        names: vec!["karpenter.provider.v1.CloudProvider"],
        metrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::repair::Action;

    fn resolve_gpu(
        policies: &[pv::RepairPolicy],
        reason: &str,
        minutes_ago: i64,
    ) -> (Action, bool) {
        let now = 1_800_000_000_i64;
        let at = |s: i64| {
            k8s_openapi::jiff::Timestamp::from_second(s)
                .expect("time")
                .to_string()
        };
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "creationTimestamp": at(now - 86_400)},
            "status": {"conditions": [{"type": "AcceleratedHardwareReady", "status": "False",
                "reason": reason, "lastTransitionTime": at(now - minutes_ago * 60)}]}
        }))
        .expect("node");
        // The adapter's reading of the wire, which refuses a set that
        // breaks upstream's rules (it would repair nothing).
        let policies = karpenter_adapter::controllers::node::health::provider_policies(policies);
        let resolved = policies.resolve(&node, now, None).expect("matches");
        (resolved.action, resolved.eligible)
    }

    /// Ports of provider-aws's `TestRepairPolicyMatching`: a reboot-clearable
    /// XID reboots after 10 minutes (with RebootForRepair) and is replaced
    /// if still there at 30; a fatal XID is replaced after 10; XID460 is not
    /// XID46; an XID inside a longer reason still counts.
    #[test]
    fn gpu_faults_are_rebooted_or_replaced_by_their_xid() {
        let gated = repair_policies(true);
        assert_eq!(
            resolve_gpu(&gated, "NvidiaXID46Error", 11),
            (Action::Reboot, true)
        );
        assert_eq!(
            resolve_gpu(&gated, "GPU-XID140-fault", 11),
            (Action::Reboot, true)
        );
        assert_eq!(
            resolve_gpu(&gated, "NvidiaXID46Error", 31),
            (Action::Replace, true)
        );
        assert_eq!(
            resolve_gpu(&gated, "NvidiaXID79Error", 11),
            (Action::Replace, true)
        );
        assert_eq!(
            resolve_gpu(&gated, "NvidiaXID460Error", 11),
            (Action::Replace, false)
        );
        // Without the gate, a reboot-clearable fault waits for the fallback.
        let plain = repair_policies(false);
        assert!(
            plain
                .iter()
                .all(|p| p.action() == pv::RepairAction::Replace)
        );
        assert_eq!(
            resolve_gpu(&plain, "NvidiaXID46Error", 11),
            (Action::Replace, false)
        );
        assert_eq!(
            resolve_gpu(&plain, "NvidiaXID46Error", 31),
            (Action::Replace, true)
        );
    }

    #[test]
    fn every_policy_bounds_its_drain() {
        for policy in repair_policies(true) {
            assert!(policy.termination_grace_period.is_some(), "{policy:?}");
        }
    }
}
