//! A Kubernetes API server for tests and the local demo: the real REST
//! protocol over HTTP (or HTTPS with a self-signed certificate) on loopback,
//! kept in memory, faithful enough that
//! `kubectl` and `kube::Client` cannot tell it from kube-apiserver for what
//! this project does.
//!
//! ```text
//!   kubectl / kube::Client ──HTTP──▶ http (routing, discovery, OpenAPI v3,
//!                                          tables, watch streams)
//!                                      │
//!                                      ▼
//!                                    store (objects, resourceVersion, history,
//!                                           finalizers, GC, PDB status, CRDs
//!                                           validated by crd-validation)
//!                                      ▲
//!                       patch (merge, JSON, strategic, server-side apply)
//! ```
//!
//! Start one with [`LocalApiServer::start`]; it writes a kubeconfig that
//! `kubectl --kubeconfig` and `kube::Config` read unchanged. The
//! `local-apiserver` binary serves one until Ctrl-C; `karpctl up` ships it as
//! the local cluster.

#![forbid(unsafe_code)]

mod calls;
pub mod cli;
pub mod controllers;
mod coordination;
mod custom;
mod daemons;
mod defaults;
mod events;
mod field_errors;
mod group_rules;
mod http;
mod interpod;
mod json;
mod openapi;
mod options;
pub mod patch;
mod policy;
mod protobuf;
mod resources;
pub mod selectors;
pub mod store;
mod tables;
mod tls;
mod validation;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use calls::ApiCall;
pub use resources::ResourceInfo;
pub use store::{ApiError, Store};

/// How to run the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// Where to write the kubeconfig, if anywhere.
    pub kubeconfig: Option<PathBuf>,
    /// How many events the watch history keeps; older versions get 410 Gone.
    pub history: usize,
    /// Bookmark period of idle watches.
    pub bookmark_interval: Duration,
    /// Load objects from this file on start and save them there on stop.
    pub state_file: Option<PathBuf>,
    /// Run the workload controller, scheduler and kubelet stand-ins.
    pub controllers: bool,
    /// Serve HTTPS with a self-signed certificate (written as `ca.crt` next
    /// to the kubeconfig) instead of HTTP.
    pub tls: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig: None,
            history: 20_000,
            bookmark_interval: Duration::from_secs(5),
            state_file: None,
            controllers: false,
            tls: false,
        }
    }
}

/// Errors of starting or stopping the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("state file: {0}")]
    State(String),
    #[error("tls: {0}")]
    Tls(String),
}

/// A running server; stops when dropped.
pub struct LocalApiServer {
    scheme: &'static str,
    pub addr: SocketAddr,
    pub store: Arc<Store>,
    calls: Arc<calls::CallLog>,
    kubeconfig: Option<PathBuf>,
    state_file: Option<PathBuf>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The kubeconfig text for a server at `url`.
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local-apiserver\n  cluster:\n    server: {url}\ncontexts:\n- name: local-apiserver\n  context:\n    cluster: local-apiserver\n    user: test\n    namespace: default\ncurrent-context: local-apiserver\nusers:\n- name: test\n  user:\n    token: local-apiserver\npreferences: {{}}\n"
    )
}

/// The kubeconfig text for an HTTPS server whose certificate is at `ca`.
pub fn kubeconfig_yaml_tls(url: &str, ca: &Path) -> String {
    kubeconfig_yaml(url).replace(
        &format!("    server: {url}\n"),
        &format!(
            "    server: {url}\n    certificate-authority: {}\n",
            ca.display()
        ),
    )
}

impl LocalApiServer {
    /// Binds, loads the state file if any, writes the kubeconfig and serves.
    pub async fn start(config: Config) -> Result<Self, ServerError> {
        let store = Store::new(config.history);
        if let Some(path) = &config.state_file
            && path.exists()
        {
            let text = std::fs::read_to_string(path)?;
            let snapshot: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| ServerError::State(e.to_string()))?;
            store
                .restore(&snapshot)
                .map_err(|e| ServerError::State(e.to_string()))?;
        }
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let calls = Arc::new(calls::CallLog::default());
        let app = Arc::new(http::App {
            store: store.clone(),
            bookmark_interval: config.bookmark_interval,
            calls: calls.clone(),
        });
        let router = http::router(app);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let controllers = config
            .controllers
            .then(|| tokio::spawn(controllers::run(store.clone(), Duration::from_millis(500))));
        let cert = if config.tls {
            Some(tls::self_signed()?)
        } else {
            None
        };
        let acceptor = cert.as_ref().map(tls::acceptor).transpose()?;
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = stopped.await;
            };
            match acceptor {
                Some(acceptor) => tls::serve(listener, acceptor, router, stop).await,
                None => {
                    if let Err(e) = axum::serve(listener, router)
                        .with_graceful_shutdown(stop)
                        .await
                    {
                        tracing::error!(error = %e, "local-apiserver stopped");
                    }
                }
            }
            if let Some(c) = controllers {
                c.abort();
            }
        });
        if let Some(path) = &config.kubeconfig {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let text = match &cert {
                Some(cert) => {
                    let dir = path
                        .parent()
                        .filter(|d| !d.as_os_str().is_empty())
                        .unwrap_or(Path::new("."));
                    let ca = tls::write_ca(dir, cert)?;
                    let ca = std::fs::canonicalize(&ca).unwrap_or(ca);
                    kubeconfig_yaml_tls(&format!("https://{addr}"), &ca)
                }
                None => kubeconfig_yaml(&format!("http://{addr}")),
            };
            std::fs::write(path, text)?;
        }
        Ok(LocalApiServer {
            scheme: if config.tls { "https" } else { "http" },
            addr,
            store,
            calls,
            kubeconfig: config.kubeconfig,
            state_file: config.state_file,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Every distinct resource request made so far, as RBAC sees it.
    pub fn api_calls(&self) -> Vec<ApiCall> {
        self.calls.all()
    }

    /// The kubeconfig path, if one was written.
    pub fn kubeconfig(&self) -> Option<&Path> {
        self.kubeconfig.as_deref()
    }

    /// Saves the state file (if configured) and stops serving. Open watch
    /// streams end when their timeout passes or their client goes.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        self.save()?;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take() {
            // Open watches keep connections busy; give them a moment, then cut them.
            if tokio::time::timeout(Duration::from_secs(2), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
        Ok(())
    }

    /// Writes every object to the state file, if one is configured.
    pub fn save(&self) -> Result<(), ServerError> {
        if let Some(path) = &self.state_file {
            let text = serde_json::to_string(&self.store.snapshot())
                .map_err(|e| ServerError::State(e.to_string()))?;
            std::fs::write(path, text)?;
        }
        Ok(())
    }
}

impl Drop for LocalApiServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
