//! A handler that panics answers INTERNAL for its call; the server, the
//! connection and every other method keep working.

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::scheduler::v1::scheduler_client::SchedulerClient;
use karpenter_proto::scheduler::v1::scheduler_server::{Scheduler, SchedulerServer};
use karpenter_runtime::{Listeners, Metrics, Service, ServiceArgs};
use tonic::{Request, Response, Status};

struct Buggy;

#[tonic::async_trait]
impl Scheduler for Buggy {
    async fn solve(
        &self,
        request: Request<sched::SolveRequest>,
    ) -> Result<Response<sched::SolveResponse>, Status> {
        let pods = request
            .into_inner()
            .cluster
            .unwrap_or_default()
            .pending_pods;
        // A bug a hostile request could reach.
        let first = &pods[0];
        Ok(Response::new(sched::SolveResponse {
            cost_per_hour: first.priority.into(),
            ..Default::default()
        }))
    }

    async fn plan_disruption(
        &self,
        _: Request<sched::PlanDisruptionRequest>,
    ) -> Result<Response<sched::PlanDisruptionResponse>, Status> {
        Ok(Response::new(sched::PlanDisruptionResponse::default()))
    }
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_and_the_server_keeps_serving() {
    let args = ServiceArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        log_level: "warn".into(),
        log_json: false,
        tls: Default::default(),
    };
    let listeners = Listeners::bind(&args).await.unwrap();
    let url = format!("http://{}", listeners.grpc_addr().unwrap());
    let http = listeners.http_addr().unwrap();
    let metrics = Metrics::new("test");
    let service = Service {
        routes: tonic::service::Routes::new(SchedulerServer::new(Buggy)),
        names: vec!["karpenter.scheduler.v1.Scheduler"],
        metrics,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(karpenter_runtime::serve_with_shutdown(
        listeners,
        service,
        async move {
            let _ = stopped.await;
        },
    ));
    let mut client = SchedulerClient::connect(url).await.unwrap();
    for _ in 0..2 {
        let status = client
            .solve(sched::SolveRequest::default())
            .await
            .expect_err("the handler panics");
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    }
    client
        .plan_disruption(sched::PlanDisruptionRequest::default())
        .await
        .expect("the same connection still serves other methods");
    let text = http_get(http, "/metrics").await;
    assert!(
        text.contains(
            "test_grpc_handler_panics_total{method=\"/karpenter.scheduler.v1.Scheduler/Solve\"} 2"
        ),
        "{text}"
    );
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).await.unwrap();
    body
}
