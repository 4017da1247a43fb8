//! Harness for the cross-service tests in `tests/`: start a service on
//! loopback ports the OS picks, hand its address to a real client (another
//! language's gRPC stack, a CLI), and stop it at the end.
//!
//! ```text
//!   test ──start──▶ service on 127.0.0.1:<free>  ◀──gRPC── python3 client
//!        ──stop───▶ graceful shutdown
//! ```
//!
//! The Kubernetes API those tests run against is the `local-apiserver`
//! crate.

#![forbid(unsafe_code)]

pub mod api_faults;
pub mod otlp;

use std::net::SocketAddr;
use std::path::PathBuf;

use karpenter_runtime::{Listeners, Service, ServiceArgs};

/// A service serving on loopback until dropped or stopped.
pub struct RunningService {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl RunningService {
    /// Binds free loopback ports and serves `service` on them.
    pub async fn start(service: impl FnOnce() -> Service) -> anyhow::Result<Self> {
        Self::start_at("127.0.0.1:0".parse()?, service).await
    }

    /// Serves `service` with its gRPC on `grpc` (a service coming back on
    /// the address it had), metrics on a free port.
    pub async fn start_at(
        grpc: SocketAddr,
        service: impl FnOnce() -> Service,
    ) -> anyhow::Result<Self> {
        Self::start_with(grpc, karpenter_runtime::TlsArgs::default(), service).await
    }

    /// Serves `service` on `grpc` with the TLS flags `tls` (a service as
    /// the chart runs it: mutual TLS, an allow-list).
    pub async fn start_with(
        grpc: SocketAddr,
        tls: karpenter_runtime::TlsArgs,
        service: impl FnOnce() -> Service,
    ) -> anyhow::Result<Self> {
        let args = ServiceArgs {
            listen: grpc,
            metrics_listen: "127.0.0.1:0".parse()?,
            log_level: "warn".into(),
            log_json: false,
            tls,
        };
        let listeners = Listeners::bind(&args).await?;
        let grpc = listeners.grpc_addr()?;
        let http = listeners.http_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(karpenter_runtime::serve_with_shutdown(
            listeners,
            service(),
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            grpc,
            http,
            stop: Some(stop),
            task: Some(task),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// Stops the service and reports how it ended.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }
}

impl Drop for RunningService {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The repository root (where `proto/` lives).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `python3`, or what `PYTHON` names.
pub fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// The `User-Agent` the adapter's Kubernetes client sends.
pub const ADAPTER_USER_AGENT: &str = "karpenter-adapter";

/// Where end-to-end tests leave the API calls the adapter made, for the
/// chart's check that its RBAC grants exactly those
/// (`ADAPTER_API_CALLS_DIR`, else `target/adapter-api-calls`).
pub fn adapter_calls_dir() -> PathBuf {
    std::env::var_os("ADAPTER_API_CALLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target").join("adapter-api-calls"))
}

/// Writes the calls the adapter made to `server` (one JSON object a line)
/// into [`adapter_calls_dir`], in a file of its own. `provider` names the
/// provider the adapter ran with (`kwok`, `aws`), whose node class kind it
/// used.
pub fn record_adapter_calls(server: &local_apiserver::LocalApiServer, provider: &str) {
    let calls: Vec<String> = server
        .api_calls()
        .into_iter()
        .filter(|c| c.user_agent.starts_with(ADAPTER_USER_AGENT))
        .filter_map(|c| {
            let mut value = serde_json::to_value(&c).ok()?;
            value["provider"] = provider.into();
            Some(value.to_string())
        })
        .collect();
    if calls.is_empty() {
        return;
    }
    let dir = adapter_calls_dir();
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let file = dir.join(format!("{}-{unique}.jsonl", std::process::id()));
    if let Err(error) =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, calls.join("\n") + "\n"))
    {
        eprintln!(
            "could not record the adapter's API calls in {}: {error}",
            file.display()
        );
    }
}
