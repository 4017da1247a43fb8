//! The scheduler over a real socket: Solve, health, reflection, metrics and
//! errors a client can act on.

use std::time::Duration;

use karpenter_proto::scheduler::v1 as pb;
use karpenter_proto::scheduler::v1::scheduler_client::SchedulerClient;
use karpenter_runtime::{Listeners, ServiceArgs};
use tonic_types::StatusExt;

struct Running {
    grpc: String,
    http: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start() -> Running {
    let args = ServiceArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        log_level: "warn".into(),
        log_json: false,
    };
    let listeners = Listeners::bind(&args).await.unwrap();
    let grpc = format!("http://{}", listeners.grpc_addr().unwrap());
    let http = listeners.http_addr().unwrap();
    let metrics = karpenter_runtime::Metrics::new("karpenter_scheduler");
    let service =
        karpenter_scheduler::service(metrics, karpenter_scheduler::DEFAULT_MAX_REQUEST_BYTES);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(karpenter_runtime::serve_with_shutdown(
        listeners,
        service,
        async move {
            let _ = stopped.await;
        },
    ));
    Running {
        grpc,
        http,
        stop,
        task,
    }
}

fn request() -> pb::SolveRequest {
    let it = pb::InstanceType {
        name: "m5.large".into(),
        requirements: vec![pb::Requirement {
            key: "kubernetes.io/arch".into(),
            operator: pb::Operator::In as i32,
            values: vec!["amd64".into()],
            min_values: None,
        }],
        offerings: vec![pb::Offering {
            zone: "us-west-2a".into(),
            capacity_type: "on-demand".into(),
            price: 0.096,
            available: true,
            requirements: vec![],
        }],
        capacity: Some(pb::ResourceList {
            quantities: [
                ("cpu".to_owned(), 2000),
                ("memory".to_owned(), 8 << 30),
                ("pods".to_owned(), 29),
            ]
            .into_iter()
            .collect(),
        }),
        overhead: None,
    };
    let pod = pb::Pod {
        namespace: "default".into(),
        name: "app-0".into(),
        containers: vec![pb::Container {
            name: "app".into(),
            requests: Some(pb::ResourceList {
                quantities: [("cpu".to_owned(), 1000)].into_iter().collect(),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    pb::SolveRequest {
        cluster: Some(pb::ClusterSnapshot {
            pending_pods: vec![pod],
            node_pools: vec![pb::NodePool {
                name: "default".into(),
                ready: true,
                ..Default::default()
            }],
            instance_type_catalogs: vec![pb::InstanceTypeCatalog {
                name: "default".into(),
                instance_types: vec![it],
            }],
            ..Default::default()
        }),
        options: None,
    }
}

#[tokio::test]
async fn solve_health_reflection_and_metrics_over_a_socket() {
    let running = start().await;
    let mut client = connect(&running.grpc).await;
    let response = client.solve(request()).await.unwrap().into_inner();
    assert_eq!(response.node_claims.len(), 1);
    let claim = &response.node_claims[0];
    assert_eq!(claim.instance_types, vec!["m5.large"]);
    assert_eq!(claim.pods[0].name, "app-0");
    assert!((response.cost_per_hour - 0.096).abs() < 1e-9);

    let channel = tonic::transport::Channel::from_shared(running.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "karpenter.scheduler.v1.Scheduler".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let mut reflection =
        tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(channel);
    let list = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let mut stream = reflection
        .server_reflection_info(tokio_stream::iter(vec![list]))
        .await
        .unwrap()
        .into_inner();
    let answer = stream.message().await.unwrap().unwrap();
    let Some(
        tonic_reflection::pb::v1::server_reflection_response::MessageResponse::ListServicesResponse(
            services,
        ),
    ) = answer.message_response
    else {
        panic!("unexpected reflection answer");
    };
    let names: Vec<String> = services.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"karpenter.scheduler.v1.Scheduler".to_owned()),
        "{names:?}"
    );

    let metrics = http_get(running.http, "/metrics").await;
    assert!(
        metrics.contains("karpenter_scheduler_pods_placed_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("/karpenter.scheduler.v1.Scheduler/Solve"),
        "{metrics}"
    );
    assert!(http_get(running.http, "/readyz").await.contains("ready"));

    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_bad_field_is_invalid_argument_naming_it() {
    let running = start().await;
    let mut client = connect(&running.grpc).await;
    let mut bad = request();
    let cluster = bad.cluster.as_mut().unwrap();
    cluster.node_pools[0].requirements.push(pb::Requirement {
        key: "karpenter.k8s.aws/instance-generation".into(),
        operator: pb::Operator::Gt as i32,
        values: vec!["five".into()],
        min_values: None,
    });
    let status = client.solve(bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let details = status.get_error_details();
    let violation = &details.bad_request().unwrap().field_violations[0];
    assert_eq!(
        violation.field,
        "cluster.node_pools[0].requirements[0].values"
    );
    assert!(
        status.message().contains("one integer value"),
        "{}",
        status.message()
    );
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

async fn connect(url: &str) -> SchedulerClient<tonic::transport::Channel> {
    for _ in 0..50 {
        if let Ok(client) = SchedulerClient::connect(url.to_owned()).await {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("scheduler did not start at {url}");
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
