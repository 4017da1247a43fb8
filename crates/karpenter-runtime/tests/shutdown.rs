//! Shutdown does not wait forever for calls a client keeps open: a
//! server-streaming call (the health service's Watch here, interruptions
//! in a provider) is closed once the grace period has passed.

use std::time::{Duration, Instant};

use karpenter_proto::scheduler::v1::scheduler_server::SchedulerServer;
use karpenter_runtime::{Listeners, Metrics, SHUTDOWN_GRACE, Service, ServiceArgs};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

struct Idle;

#[tonic::async_trait]
impl karpenter_proto::scheduler::v1::scheduler_server::Scheduler for Idle {
    async fn solve(
        &self,
        _: tonic::Request<karpenter_proto::scheduler::v1::SolveRequest>,
    ) -> Result<tonic::Response<karpenter_proto::scheduler::v1::SolveResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("idle"))
    }

    async fn plan_disruption(
        &self,
        _: tonic::Request<karpenter_proto::scheduler::v1::PlanDisruptionRequest>,
    ) -> Result<
        tonic::Response<karpenter_proto::scheduler::v1::PlanDisruptionResponse>,
        tonic::Status,
    > {
        Err(tonic::Status::unimplemented("idle"))
    }
}

#[tokio::test]
async fn an_open_stream_does_not_hold_the_server_past_the_grace_period() {
    let args = ServiceArgs {
        listen: "127.0.0.1:0".parse().expect("address"),
        metrics_listen: "127.0.0.1:0".parse().expect("address"),
        log_level: "warn".into(),
        log_json: false,
        tls: Default::default(),
    };
    let listeners = Listeners::bind(&args).await.expect("bound");
    let url = format!("http://{}", listeners.grpc_addr().expect("address"));
    let service = Service {
        routes: tonic::service::Routes::new(SchedulerServer::new(Idle)),
        names: vec!["karpenter.scheduler.v1.Scheduler"],
        metrics: Metrics::new("test"),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(karpenter_runtime::serve_with_shutdown(
        listeners,
        service,
        async move {
            let _ = stopped.await;
        },
    ));
    let channel = tonic::transport::Endpoint::from_shared(url)
        .expect("url")
        .connect()
        .await
        .expect("connected");
    let mut health = HealthClient::new(channel);
    let mut stream = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("watching")
        .into_inner();
    stream.message().await.expect("first status");
    let asked = Instant::now();
    stop.send(()).expect("stop");
    tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(5), server)
        .await
        .expect("the server stops though the stream is open")
        .expect("joined")
        .expect("served");
    assert!(asked.elapsed() >= SHUTDOWN_GRACE.saturating_sub(Duration::from_millis(100)));
    drop(stream);
}
