//! The scheduler over a real socket: Solve, health, reflection, metrics and
//! errors a client can act on.

use std::time::Duration;

use karpenter_proto::scheduler::v1 as sched;
use karpenter_proto::scheduler::v1::scheduler_client::SchedulerClient;
use karpenter_proto::types::v1 as types;
use karpenter_runtime::{Listeners, ServiceArgs};
use tonic_types::StatusExt;

struct Running {
    grpc: String,
    http: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start() -> Running {
    start_with(karpenter_scheduler::Limits::default()).await
}

async fn start_with(limits: karpenter_scheduler::Limits) -> Running {
    let args = ServiceArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: "127.0.0.1:0".parse().unwrap(),
        log_level: "warn".into(),
        log_json: false,
        tls: Default::default(),
    };
    let listeners = Listeners::bind(&args).await.unwrap();
    let grpc = format!("http://{}", listeners.grpc_addr().unwrap());
    let http = listeners.http_addr().unwrap();
    let metrics = karpenter_runtime::Metrics::new("karpenter_scheduler");
    let service = karpenter_scheduler::service(metrics, limits);
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

fn request() -> sched::SolveRequest {
    let it = types::InstanceType {
        name: "m5.large".into(),
        requirements: vec![types::Requirement {
            key: "kubernetes.io/arch".into(),
            operator: types::Operator::In as i32,
            values: vec!["amd64".into()],
            min_values: None,
        }],
        offerings: vec![types::Offering {
            zone: "us-west-2a".into(),
            capacity_type: "on-demand".into(),
            price: 0.096,
            available: true,
            requirements: vec![],
        }],
        capacity: Some(types::ResourceList {
            quantities: [
                ("cpu".to_owned(), 2000),
                ("memory".to_owned(), 8 << 30),
                ("pods".to_owned(), 29),
            ]
            .into_iter()
            .collect(),
        }),
        overhead: None,
        price_overlaid: false,
        capacity_overlaid: false,
        volume_attachment_limits: Default::default(),
    };
    let pod = sched::Pod {
        namespace: "default".into(),
        name: "app-0".into(),
        containers: vec![sched::Container {
            name: "app".into(),
            requests: Some(types::ResourceList {
                quantities: [("cpu".to_owned(), 1000)].into_iter().collect(),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    sched::SolveRequest {
        cluster: Some(sched::ClusterSnapshot {
            pending_pods: vec![pod],
            node_pools: vec![sched::NodePool {
                name: "default".into(),
                ready: true,
                ..Default::default()
            }],
            instance_type_catalogs: vec![sched::InstanceTypeCatalog {
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
    assert!(!claim.min_values_relaxed);
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
async fn a_broken_catalog_is_invalid_argument_naming_the_field() {
    let running = start().await;
    let mut client = connect(&running.grpc).await;
    let mut bad = request();
    let cluster = bad.cluster.as_mut().unwrap();
    cluster.instance_type_catalogs[0].instance_types[0].requirements = vec![types::Requirement {
        key: "karpenter.k8s.aws/instance-generation".into(),
        operator: types::Operator::Gt as i32,
        values: vec!["five".into()],
        min_values: None,
    }];
    let status = client.solve(bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let details = status.get_error_details();
    let violation = &details.bad_request().unwrap().field_violations[0];
    assert_eq!(
        violation.field,
        "cluster.instance_type_catalogs[0].instance_types[0].requirements[0].values"
    );
    assert!(
        status.message().contains("one integer value"),
        "{}",
        status.message()
    );
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

/// `request()` with `count` pods of `cpu` millicores each.
fn request_with_pods(count: usize, cpu: i64) -> sched::SolveRequest {
    let mut request = request();
    let cluster = request.cluster.as_mut().unwrap();
    let template = cluster.pending_pods[0].clone();
    cluster.pending_pods = (0..count)
        .map(|i| {
            let mut pod = template.clone();
            pod.name = format!("app-{i}");
            pod.containers[0].requests = Some(types::ResourceList {
                quantities: [("cpu".to_owned(), cpu)].into_iter().collect(),
            });
            pod
        })
        .collect();
    request
}

#[tokio::test]
async fn a_call_past_its_deadline_is_interrupted_with_deadline_exceeded() {
    let running = start_with(karpenter_scheduler::Limits {
        max_call: Duration::from_millis(1),
        concurrent_calls: 1,
        ..karpenter_scheduler::Limits::default()
    })
    .await;
    let mut client = connect(&running.grpc).await;
    let status = client
        .solve(request_with_pods(3_000, 100))
        .await
        .expect_err("3,000 pods take longer than a millisecond");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    let metrics = http_get(running.http, "/metrics").await;
    assert!(
        metrics.contains("karpenter_scheduler_interrupted_calls_total 1"),
        "{metrics}"
    );
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn requests_that_overflow_a_sum_are_unschedulable_not_a_crash() {
    let running = start().await;
    let mut client = connect(&running.grpc).await;
    let mut huge = request();
    let pod = &mut huge.cluster.as_mut().unwrap().pending_pods[0];
    let half = i64::MAX / 2 + 1;
    let container = pod.containers[0].clone();
    pod.containers = vec![container.clone(), container.clone(), container];
    for c in &mut pod.containers {
        c.requests = Some(types::ResourceList {
            quantities: [("cpu".to_owned(), half)].into_iter().collect(),
        });
    }
    let response = client.solve(huge).await.expect("answered").into_inner();
    assert!(response.node_claims.is_empty(), "{response:?}");
    assert_eq!(response.unschedulable.len(), 1);
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn budget_schedules_are_checked_and_huge_windows_answer_at_once() {
    let running = start().await;
    let mut client = connect(&running.grpc).await;
    // One empty node of the pool: emptiness would delete it unless a budget
    // of zero is active.
    let disruption = |schedule: &str, seconds: i64| {
        let mut request = request();
        let cluster = request.cluster.as_mut().unwrap();
        cluster.pending_pods.clear();
        cluster.node_pools[0].disruption = Some(sched::Disruption {
            consolidate_after: Some(prost_types::Duration {
                seconds: 0,
                nanos: 0,
            }),
            budgets: vec![sched::Budget {
                nodes: "0".into(),
                schedule: schedule.into(),
                duration: Some(prost_types::Duration { seconds, nanos: 0 }),
                reasons: vec![],
            }],
            ..Default::default()
        });
        cluster.nodes = vec![initialized_m5(cluster, "idle")];
        cluster.now = Some(prost_types::Timestamp {
            seconds: 1_800_000_000,
            nanos: 0,
        });
        sched::PlanDisruptionRequest {
            cluster: request.cluster,
            options: None,
        }
    };
    // February 30th never comes: the window is searched, boundedly, for a
    // duration of about 30,000 years, and the budget never applies.
    let plan = client
        .plan_disruption(disruption("0 0 30 2 *", 1_000_000_000_000))
        .await
        .expect("a huge budget window answers")
        .into_inner();
    assert_eq!(plan.commands.len(), 1, "{plan:?}");
    assert_eq!(plan.commands[0].candidates, vec!["idle"]);
    // Every minute fires: the zero budget blocks.
    let plan = client
        .plan_disruption(disruption("* * * * *", 1_000_000_000_000))
        .await
        .expect("answers")
        .into_inner();
    assert!(plan.commands.is_empty(), "{plan:?}");
    // An unparsable schedule rejects its pool, named by field, and the
    // pool's nodes are left alone.
    let plan = client
        .plan_disruption(disruption("every tuesday", 3600))
        .await
        .expect("answers")
        .into_inner();
    assert!(plan.commands.is_empty(), "{plan:?}");
    assert_eq!(plan.rejected.len(), 1, "{plan:?}");
    assert_eq!(plan.rejected[0].kind, "NodePool");
    assert_eq!(
        plan.rejected[0].field,
        "cluster.node_pools[0].disruption.budgets[0].schedule"
    );
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

#[tokio::test]
async fn one_bad_object_is_reported_and_the_rest_is_planned() {
    let running = start().await;
    let mut client = connect(&running.grpc).await;
    let mut mixed = request_with_pods(2, 500);
    let cluster = mixed.cluster.as_mut().unwrap();
    cluster.pending_pods[1].tolerations.push(sched::Toleration {
        key: "k".into(),
        effect: 42,
        ..Default::default()
    });
    let good_pool = cluster.node_pools[0].clone();
    let mut bad_pool = good_pool.clone();
    bad_pool.name = "broken".into();
    bad_pool.weight = 500;
    cluster.node_pools.push(bad_pool);
    cluster.nodes.push(sched::StateNode {
        name: "node-with-a-bad-taint".into(),
        taints: vec![types::Taint {
            key: "k".into(),
            value: String::new(),
            effect: 7,
        }],
        ..Default::default()
    });
    let response = client
        .solve(mixed.clone())
        .await
        .expect("answered")
        .into_inner();
    let planned: Vec<&str> = response
        .node_claims
        .iter()
        .flat_map(|c| c.pods.iter().map(|p| p.name.as_str()))
        .collect();
    assert_eq!(planned, ["app-0"], "the valid pod is planned");
    assert_eq!(response.unschedulable.len(), 1);
    let invalid = &response.unschedulable[0];
    assert_eq!(invalid.pod.as_ref().unwrap().name, "app-1");
    assert_eq!(
        invalid.invalid_field,
        "cluster.pending_pods[1].tolerations[0].effect"
    );
    let mut rejected: Vec<(&str, &str, &str)> = response
        .rejected
        .iter()
        .map(|r| (r.kind.as_str(), r.name.as_str(), r.field.as_str()))
        .collect();
    rejected.sort();
    assert_eq!(
        rejected,
        [
            (
                "Node",
                "node-with-a-bad-taint",
                "cluster.nodes[0].taints[0].effect"
            ),
            ("NodePool", "broken", "cluster.node_pools[1].weight"),
        ]
    );
    // Disruption leaves the rejected node alone and says so.
    let plan = client
        .plan_disruption(sched::PlanDisruptionRequest {
            cluster: mixed.cluster,
            options: None,
        })
        .await
        .expect("answered")
        .into_inner();
    assert!(plan.commands.is_empty(), "{plan:?}");
    assert!(
        plan.rejected
            .iter()
            .any(|r| r.kind == "Node" && r.name == "node-with-a-bad-taint")
    );
    assert!(
        plan.rejected
            .iter()
            .any(|r| r.kind == "Pod" && r.name == "app-1")
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

/// A registered, initialized on-demand m5.large node of the default pool,
/// named `name` (node and claim), with nothing on it.
fn initialized_m5(cluster: &sched::ClusterSnapshot, name: &str) -> sched::StateNode {
    let m5 = &cluster.instance_type_catalogs[0].instance_types[0];
    sched::StateNode {
        name: name.into(),
        node_claim_name: name.into(),
        node_pool: "default".into(),
        capacity: m5.capacity.clone(),
        allocatable: m5.capacity.clone(),
        has_node: true,
        registered: true,
        initialized: true,
        price: 0.096,
        capacity_type: "on-demand".into(),
        zone: "us-west-2a".into(),
        instance_type: "m5.large".into(),
        ..Default::default()
    }
}

/// Issue 21: times from a request are subtracted with checked arithmetic:
/// a node created, initialized and last touched at the end of time, seen
/// from the beginning of time, is answered (planned or refused by field),
/// never a panic of a debug build (INTERNAL).
#[tokio::test]
async fn times_at_the_ends_of_the_range_do_not_overflow() {
    let running = start().await;
    let mut client = connect(&running.grpc).await;
    let mut request = request();
    let cluster = request.cluster.as_mut().unwrap();
    cluster.pending_pods.clear();
    let far = |seconds: i64| Some(prost_types::Timestamp { seconds, nanos: 0 });
    cluster.node_pools[0].disruption = Some(sched::Disruption {
        consolidate_after: Some(prost_types::Duration {
            seconds: i64::MAX,
            nanos: 0,
        }),
        ..Default::default()
    });
    cluster.node_pools[0].expire_after = Some(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 0,
    });
    cluster.nodes = vec![sched::StateNode {
        creation_timestamp: far(i64::MAX),
        disruption: Some(sched::NodeClaimDisruptionState {
            last_pod_event_time: far(i64::MAX),
            initialized_time: far(i64::MAX),
            ..Default::default()
        }),
        ..initialized_m5(cluster, "ancient")
    }];
    cluster.now = far(i64::MIN);
    let answer = client
        .plan_disruption(sched::PlanDisruptionRequest {
            cluster: request.cluster,
            options: None,
        })
        .await;
    if let Err(status) = &answer {
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    }
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}

/// Sends pre-encoded request bytes as they are, and reads the answer.
#[derive(Clone, Default)]
struct RawCodec;

struct RawEncoder;
struct SolveDecoder;

impl tonic::codec::Encoder for RawEncoder {
    type Item = prost::bytes::Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Self::Item,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        use prost::bytes::BufMut as _;
        buf.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for SolveDecoder {
    type Item = sched::SolveResponse;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, Self::Error> {
        use prost::Message as _;
        sched::SolveResponse::decode(buf)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

impl tonic::codec::Codec for RawCodec {
    type Encode = prost::bytes::Bytes;
    type Decode = sched::SolveResponse;
    type Encoder = RawEncoder;
    type Decoder = SolveDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        SolveDecoder
    }
}

/// Issue 21: 4 MB of empty pending pods (2 bytes each on the wire, about a
/// kilobyte each once decoded: 2.6 GB) is refused before it is decoded,
/// naming the field, and the scheduler goes on serving.
#[tokio::test]
async fn megabytes_of_empty_pods_are_refused_before_they_are_decoded() {
    let running = start().await;
    let channel = tonic::transport::Endpoint::from_shared(running.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(usize::MAX);
    for pods in [2_000_000usize, 400_000] {
        let mut cluster = Vec::with_capacity(pods * 2);
        for _ in 0..pods {
            cluster.extend_from_slice(&[0x0a, 0x00]);
        }
        let mut request = vec![0x0a];
        prost::encoding::encode_varint(cluster.len() as u64, &mut request);
        request.extend_from_slice(&cluster);
        grpc.ready().await.unwrap();
        let answer = grpc
            .unary(
                tonic::Request::new(prost::bytes::Bytes::from(request)),
                tonic::codegen::http::uri::PathAndQuery::from_static(
                    "/karpenter.scheduler.v1.Scheduler/Solve",
                ),
                RawCodec,
            )
            .await;
        let status = answer.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("cluster.pending_pods"),
            "{status:?}"
        );
    }
    let mut client = connect(&running.grpc).await;
    client.solve(request()).await.expect("still serving");
    // This test's process (client and server): decoding the pods would
    // have taken it past 2.6 GB.
    let peak_kib: u64 = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    eprintln!("peak resident memory: {} MiB", peak_kib / 1024);
    assert!(peak_kib < 512 * 1024, "peak {peak_kib} KiB");
    running.stop.send(()).unwrap();
    running.task.await.unwrap().unwrap();
}
