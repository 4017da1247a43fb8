//! A whole local cluster for end-to-end tests, every part a real server on
//! loopback: local-apiserver (with its scheduler, kubelet and workload
//! stand-ins), the scheduler service, provider-kwok (writing Nodes through
//! the API) and adapters started in-process, each killable.

#![allow(dead_code)]

pub mod balancer;
pub mod gate;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use integration_tests::RunningService;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_adapter::controllers::Timing;
use karpenter_adapter::run::Options;
use karpenter_adapter::settings::Settings;
use karpenter_api::{NodeClaim, NodePool};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use local_apiserver::{Config, LocalApiServer};
use provider_kwok::KwokProvider;
use serde_json::{Value, json};

pub const NODE_CLASS: &str = "default";

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub server: LocalApiServer,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    pub kwok: KwokProvider,
    /// Where the adapter reaches provider-kwok: through a gate the test
    /// can close.
    pub kwok_service: RunningService,
    pub holds: std::sync::Arc<gate::Holds>,
    pub scheduler: RunningService,
}

/// The calls the adapter made go where the chart's RBAC check reads them.
impl Drop for Cluster {
    fn drop(&mut self) {
        integration_tests::record_adapter_calls(&self.server, "kwok");
    }
}

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    settings: Settings,
}

/// Timings short enough for tests (the defaults are Karpenter's).
pub fn test_timing() -> Timing {
    Timing {
        min_drain: Duration::from_millis(200),
        gc_every: Duration::from_millis(500),
        orphan_age: Duration::from_secs(2),
        resolve_every: Duration::from_secs(2),
        disruption_poll: Duration::from_secs(1),
        validation_delay: Duration::from_secs(1),
        disruption_timeout: Duration::from_secs(60),
        deletion_cost_every: Duration::from_secs(1),
        reboot_poll: Duration::from_millis(500),
        ..Timing::default()
    }
}

impl Cluster {
    pub async fn start() -> Cluster {
        Self::start_with(false).await
    }

    pub async fn start_with(tls: bool) -> Cluster {
        Self::start_with_node_delay(tls, Duration::from_millis(200)).await
    }

    /// A cluster whose kwok nodes come up `node_delay` after launch.
    pub async fn start_with_node_delay(tls: bool, node_delay: Duration) -> Cluster {
        let _ = karpenter_runtime::init_tracing(
            "adapter-tests",
            "info,kube=warn,tower=warn,hyper=warn",
            false,
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let server = LocalApiServer::start(Config {
            controllers: true,
            tls,
            kubeconfig: Some(kubeconfig.clone()),
            ..Config::default()
        })
        .await
        .expect("local-apiserver");
        let config = karpenter_kube::config(&karpenter_kube::KubeArgs {
            kubeconfig: Some(kubeconfig.clone()),
        })
        .await
        .expect("kubeconfig")
        .expect("a cluster");
        let client = karpenter_kube::client(config).expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut all = karpenter_api::crds();
        all.push(serde_yaml::from_str(provider_kwok::NODE_CLASS_CRD).expect("kwok crd"));
        for crd in &all {
            crds.create(&PostParams::default(), crd).await.expect("crd");
        }
        let kwok = KwokProvider::new(
            provider_kwok::load_catalog(None).expect("catalog"),
            Some(client.clone()),
            provider_kwok::Options {
                node_delay,
                redelivery: Duration::from_millis(200),
            },
        );
        let holds = std::sync::Arc::new(gate::Holds::default());
        let gated = gate::Gate {
            inner: kwok.clone(),
            holds: holds.clone(),
        };
        let kwok_service = RunningService::start(move || gated.service())
            .await
            .expect("provider-kwok");
        let scheduler = RunningService::start(|| {
            karpenter_scheduler::service(
                karpenter_runtime::Metrics::new("scheduler"),
                karpenter_scheduler::Limits::default(),
            )
        })
        .await
        .expect("scheduler");
        let cluster = Cluster {
            dir,
            server,
            kubeconfig,
            client,
            kwok,
            kwok_service,
            holds,
            scheduler,
        };
        cluster
            .create_dynamic(
                "karpenter.kwok.sh/v1alpha1",
                "KWOKNodeClass",
                "kwoknodeclasses",
                json!({"metadata": {"name": NODE_CLASS}, "spec": {}}),
            )
            .await;
        cluster
    }

    /// Takes provider-kwok off the network (its instances stay).
    pub async fn stop_provider(&mut self) -> SocketAddr {
        let addr = self.kwok_service.grpc;
        let placeholder = RunningService::start(|| {
            karpenter_scheduler::service(
                karpenter_runtime::Metrics::new("placeholder"),
                karpenter_scheduler::Limits::default(),
            )
        })
        .await
        .expect("placeholder");
        let stopped = std::mem::replace(&mut self.kwok_service, placeholder);
        stopped.stop().await.expect("stopped");
        addr
    }

    /// Brings provider-kwok back on the address it had.
    pub async fn restart_provider(&mut self, addr: SocketAddr) {
        let gated = gate::Gate {
            inner: self.kwok.clone(),
            holds: self.holds.clone(),
        };
        let old = std::mem::replace(
            &mut self.kwok_service,
            RunningService::start_at(addr, move || gated.service())
                .await
                .expect("provider-kwok back"),
        );
        old.stop().await.expect("placeholder stopped");
    }

    /// Adapter settings for this cluster; `extra` flags are appended.
    pub fn settings(&self, extra: &[&str]) -> Settings {
        let args = vec![
            "adapter".to_owned(),
            "--scheduler-address".to_owned(),
            self.scheduler.url(),
            "--provider-address".to_owned(),
            self.kwok_service.url(),
            "--kubeconfig".to_owned(),
            self.kubeconfig.display().to_string(),
            "--batch-idle-duration".to_owned(),
            "200ms".to_owned(),
            "--batch-max-duration".to_owned(),
            "2s".to_owned(),
            "--metrics-listen".to_owned(),
            "127.0.0.1:0".to_owned(),
        ];
        // A flag in `extra` replaces the default above.
        let mut merged = vec![args[0].clone()];
        for pair in args[1..].chunks(2) {
            if !extra.contains(&pair[0].as_str()) {
                merged.extend(pair.iter().cloned());
            }
        }
        merged.extend(extra.iter().map(|s| (*s).to_owned()));
        Args::try_parse_from(merged).expect("settings").settings
    }

    pub async fn adapter(&self) -> Adapter {
        self.adapter_with(self.settings(&[]), test_timing()).await
    }

    pub async fn adapter_with(&self, settings: Settings, timing: Timing) -> Adapter {
        Adapter::start(settings, timing).await
    }

    pub async fn create_dynamic(
        &self,
        api_version: &str,
        kind: &str,
        plural: &str,
        mut object: Value,
    ) {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource = kube::api::ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
        };
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(kind);
        let object: DynamicObject = serde_json::from_value(object).expect("object");
        Api::<DynamicObject>::all_with(self.client.clone(), &resource)
            .create(&PostParams::default(), &object)
            .await
            .expect("created");
    }

    pub async fn node_pool(&self, pool: Value) {
        let mut pool = pool;
        pool["apiVersion"] = json!("karpenter.sh/v1");
        pool["kind"] = json!("NodePool");
        let pool: NodePool = serde_json::from_value(pool).expect("node pool");
        Api::<NodePool>::all(self.client.clone())
            .create(&PostParams::default(), &pool)
            .await
            .expect("node pool created");
    }

    /// A NodePool named `name` on the default node class, with `spec`
    /// merged into Karpenter's usual shape.
    pub fn pool(name: &str, template_extra: Value, spec_extra: Value) -> Value {
        let mut template = json!({
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": NODE_CLASS},
                "requirements": [],
            }
        });
        merge(&mut template, template_extra);
        let mut spec = json!({"template": template});
        merge(&mut spec, spec_extra);
        json!({"metadata": {"name": name}, "spec": spec})
    }

    pub async fn deployment(&self, name: &str, replicas: i32, cpu: &str, pod_extra: Value) {
        // Pods stop gracefully when drained; a short grace period keeps
        // the tests quick (local-apiserver waits it out as a kubelet would).
        let mut pod_spec = json!({
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "resources": {"requests": {"cpu": cpu}}}]
        });
        merge(&mut pod_spec, pod_extra);
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}}
        }))
        .expect("deployment");
        Api::<Deployment>::default_namespaced(self.client.clone())
            .create(&PostParams::default(), &deployment)
            .await
            .expect("deployment created");
    }

    pub async fn scale(&self, name: &str, replicas: i32) {
        Api::<Deployment>::default_namespaced(self.client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .expect("scaled");
    }

    pub async fn pods(&self, app: &str) -> Vec<Pod> {
        Api::<Pod>::default_namespaced(self.client.clone())
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    pub async fn claims(&self) -> Vec<NodeClaim> {
        Api::<NodeClaim>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    pub async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Every pod of `app` is bound and running.
    pub async fn running(&self, app: &str, count: usize) -> bool {
        let pods = self.pods(app).await;
        pods.len() == count
            && pods.iter().all(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
    }
}

pub fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// An adapter running in this process until stopped or killed.
pub struct Adapter {
    pub http: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Adapter {
    pub async fn start(settings: Settings, timing: Timing) -> Adapter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let http = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let options = Options {
            timing,
            election: karpenter_adapter::leader::Timing {
                lease_duration: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(2),
                retry: Duration::from_millis(300),
            },
        };
        let task = tokio::spawn(karpenter_adapter::run::run(
            settings,
            options,
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        Adapter {
            http,
            stop: Some(stop),
            task,
        }
    }

    /// Ends the adapter at once, as a crash would: nothing is cleaned up.
    pub fn kill(self) {
        self.task.abort();
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }

    /// Whether it holds the leader lease (its leader gauge).
    pub async fn leads(&self) -> bool {
        self.metrics()
            .await
            .lines()
            .any(|l| l.starts_with("karpenter_leader ") && l.ends_with(" 1"))
    }

    /// What `/readyz` answers.
    pub async fn ready(&self) -> bool {
        http_get(self.http, "/readyz")
            .await
            .is_some_and(|(code, _)| code == 200)
    }

    pub async fn metrics(&self) -> String {
        http_get(self.http, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }
}

/// A plain HTTP/1.1 GET over loopback: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((code, body))
}

impl Cluster {
    /// The cluster's events of `reason` (none when listing fails).
    pub async fn events(&self, reason: &str) -> Vec<k8s_openapi::api::core::v1::Event> {
        kube::Api::<k8s_openapi::api::core::v1::Event>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map(|list| {
                list.items
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some(reason))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Polls `check` until it holds, or fails the test naming `what`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {within:?} waiting for {what}");
}

pub fn label<'a>(object: &'a impl kube::Resource, key: &str) -> Option<&'a str> {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// The values of label `key` on the nodes not being deleted (empty for a
/// node without it), sorted.
pub fn serving_label_values(nodes: &[k8s_openapi::api::core::v1::Node], key: &str) -> Vec<String> {
    let mut values: Vec<String> = nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| label(n, key).unwrap_or_default().to_owned())
        .collect();
    values.sort();
    values
}

pub fn condition(claim: &NodeClaim, type_: &str) -> Option<String> {
    claim
        .conditions()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| format!("{:?}", c.status))
}
