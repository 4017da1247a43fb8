//! provider-kwok behind a gate the test controls: `Create` can be held
//! before it reaches the cloud or after the instance exists (its answer
//! never sent), so an adapter can be killed at exactly that step. It also
//! injects a cloud's transient faults (calls refused as unavailable, slow
//! calls) and records when each interruption was acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use karpenter_proto::provider::v1 as pv;
use karpenter_proto::provider::v1::cloud_provider_server::{CloudProvider, CloudProviderServer};
use provider_kwok::KwokProvider;
use tonic::{Request, Response, Status};

/// Where `Create` calls stop while the gate is closed.
#[derive(Default)]
pub struct Holds {
    pub before_create: AtomicBool,
    pub after_create: AtomicBool,
    /// Holds `AcknowledgeInterruption` (the adapter has acted, the cloud
    /// has not heard so).
    pub before_ack: AtomicBool,
    /// `Create` calls that reached the cloud.
    pub creates: AtomicUsize,
    /// When each `Create` arrived, by claim name.
    pub arrivals: std::sync::Mutex<Vec<(String, std::time::Instant)>>,
    /// The next this many Create, Delete, Get and List calls fail as
    /// UNAVAILABLE (a cloud API failing for a while).
    pub failing_calls: AtomicUsize,
    /// Every cloud call takes this many milliseconds longer.
    pub slow_ms: AtomicU64,
    /// Each acknowledged interruption: its id and when.
    pub acks: std::sync::Mutex<Vec<(String, std::time::SystemTime)>>,
}

impl Holds {
    /// The injected fault for a cloud call, if any.
    async fn cloud_fault(&self) -> Result<(), Status> {
        let slow = self.slow_ms.load(Ordering::SeqCst);
        if slow > 0 {
            tokio::time::sleep(Duration::from_millis(slow)).await;
        }
        let failed = self
            .failing_calls
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failed {
            return Err(Status::unavailable("the cloud API is failing (injected)"));
        }
        Ok(())
    }
}

#[derive(Clone)]
pub struct Gate {
    pub inner: KwokProvider,
    pub holds: Arc<Holds>,
}

impl Gate {
    pub fn service(self) -> karpenter_runtime::Service {
        karpenter_runtime::Service {
            routes: tonic::service::Routes::new(CloudProviderServer::new(self)),
            names: vec!["karpenter.provider.v1.CloudProvider"],
            metrics: karpenter_runtime::Metrics::new("gate"),
        }
    }

    async fn wait_while(flag: &AtomicBool) {
        while flag.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tonic::async_trait]
impl CloudProvider for Gate {
    async fn info(
        &self,
        r: Request<pv::InfoRequest>,
    ) -> Result<Response<pv::InfoResponse>, Status> {
        self.inner.info(r).await
    }

    async fn get_instance_types(
        &self,
        r: Request<pv::GetInstanceTypesRequest>,
    ) -> Result<Response<pv::GetInstanceTypesResponse>, Status> {
        self.inner.get_instance_types(r).await
    }

    async fn create(
        &self,
        r: Request<pv::CreateRequest>,
    ) -> Result<Response<pv::CreateResponse>, Status> {
        let claim = r
            .get_ref()
            .node_claim
            .as_ref()
            .map(|c| c.name.clone())
            .unwrap_or_default();
        self.holds
            .arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((claim, std::time::Instant::now()));
        Self::wait_while(&self.holds.before_create).await;
        self.holds.cloud_fault().await?;
        let answer = self.inner.create(r).await;
        self.holds.creates.fetch_add(1, Ordering::SeqCst);
        Self::wait_while(&self.holds.after_create).await;
        answer
    }

    async fn delete(
        &self,
        r: Request<pv::DeleteRequest>,
    ) -> Result<Response<pv::DeleteResponse>, Status> {
        self.holds.cloud_fault().await?;
        self.inner.delete(r).await
    }

    async fn reboot(
        &self,
        r: Request<pv::RebootRequest>,
    ) -> Result<Response<pv::RebootResponse>, Status> {
        self.holds.cloud_fault().await?;
        self.inner.reboot(r).await
    }

    async fn get(&self, r: Request<pv::GetRequest>) -> Result<Response<pv::GetResponse>, Status> {
        self.holds.cloud_fault().await?;
        self.inner.get(r).await
    }

    async fn list(
        &self,
        r: Request<pv::ListRequest>,
    ) -> Result<Response<pv::ListResponse>, Status> {
        self.holds.cloud_fault().await?;
        self.inner.list(r).await
    }

    async fn is_drifted(
        &self,
        r: Request<pv::IsDriftedRequest>,
    ) -> Result<Response<pv::IsDriftedResponse>, Status> {
        self.inner.is_drifted(r).await
    }

    async fn resolve_node_class(
        &self,
        r: Request<pv::ResolveNodeClassRequest>,
    ) -> Result<Response<pv::ResolveNodeClassResponse>, Status> {
        self.inner.resolve_node_class(r).await
    }

    type WatchInterruptionsStream = <KwokProvider as CloudProvider>::WatchInterruptionsStream;

    async fn watch_interruptions(
        &self,
        r: Request<pv::WatchInterruptionsRequest>,
    ) -> Result<Response<Self::WatchInterruptionsStream>, Status> {
        self.inner.watch_interruptions(r).await
    }

    async fn acknowledge_interruption(
        &self,
        r: Request<pv::AcknowledgeInterruptionRequest>,
    ) -> Result<Response<pv::AcknowledgeInterruptionResponse>, Status> {
        Self::wait_while(&self.holds.before_ack).await;
        let id = r.get_ref().id.clone();
        let at = std::time::SystemTime::now();
        let answer = self.inner.acknowledge_interruption(r).await;
        if answer.is_ok() {
            self.holds
                .acks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((id, at));
        }
        answer
    }

    async fn finalize_node_class(
        &self,
        r: Request<pv::FinalizeNodeClassRequest>,
    ) -> Result<Response<pv::FinalizeNodeClassResponse>, Status> {
        self.inner.finalize_node_class(r).await
    }
}
