//! How the project's Kubernetes clients (provider-kwok, the adapter) reach
//! a cluster.
//!
//! ```text
//!   --kubeconfig PATH / $KUBECONFIG ──▶ that file's current context (HTTPS with its CA, tokens, certs)
//!   neither, in a pod ($KUBERNETES_SERVICE_HOST) ──▶ in-cluster: https://HOST:PORT, the service
//!                                                   account's token (re-read as it rotates) and CA
//!   neither, outside a cluster ──▶ no cluster
//! ```
//!
//! TLS is rustls (ring); the service-account directory is
//! [`SERVICE_ACCOUNT_DIR`], as kubelet mounts it. [`evict_pod`] evicts with
//! a UID precondition the API server actually reads.

#![forbid(unsafe_code)]

mod eviction;
mod rate;

pub use eviction::evict_pod;

use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

/// Where kubelet mounts a pod's service account.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("reading the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("in-cluster configuration: {0}")]
    InCluster(String),
    #[error("building the Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

/// The flag every binary that talks to Kubernetes takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KubeArgs {
    /// A kubeconfig file (default: the pod's service account when running
    /// in a cluster).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// The configuration `args` point at, or the in-cluster one inside a pod;
/// `None` when neither exists.
pub async fn config(args: &KubeArgs) -> Result<Option<kube::Config>, KubeError> {
    if let Some(path) = &args.kubeconfig {
        return from_kubeconfig(path).await.map(Some);
    }
    let (Ok(host), Ok(port)) = (
        std::env::var("KUBERNETES_SERVICE_HOST"),
        std::env::var("KUBERNETES_SERVICE_PORT"),
    ) else {
        return Ok(None);
    };
    let url = service_url(&host, &port)?;
    in_cluster(url, Path::new(SERVICE_ACCOUNT_DIR)).map(Some)
}

/// The current context of a kubeconfig file.
pub async fn from_kubeconfig(path: &Path) -> Result<kube::Config, KubeError> {
    let wrap = |source| KubeError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(wrap)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(wrap)
}

/// `https://HOST:PORT`, bracketing IPv6 addresses.
pub fn service_url(host: &str, port: &str) -> Result<http::Uri, KubeError> {
    let port: u16 = port.parse().map_err(|_| {
        KubeError::InCluster(format!("KUBERNETES_SERVICE_PORT {port:?} is not a port"))
    })?;
    let host = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => host.to_owned(),
    };
    format!("https://{host}:{port}")
        .parse()
        .map_err(|e| KubeError::InCluster(format!("API server address {host}:{port}: {e}")))
}

/// An in-cluster configuration: the API server at `url`, trusted through
/// `dir/ca.crt`, authenticated with `dir/token` (read again whenever it
/// rotates), in the namespace of `dir/namespace`.
pub fn in_cluster(url: http::Uri, dir: &Path) -> Result<kube::Config, KubeError> {
    let ca = dir.join("ca.crt");
    let roots: Vec<Vec<u8>> = CertificateDer::pem_file_iter(&ca)
        .and_then(|certs| certs.map(|c| c.map(|c| c.to_vec())).collect())
        .map_err(|e| KubeError::InCluster(format!("reading {}: {e}", ca.display())))?;
    if roots.is_empty() {
        return Err(KubeError::InCluster(format!(
            "{} holds no certificate",
            ca.display()
        )));
    }
    let token = dir.join("token");
    if !token.exists() {
        return Err(KubeError::InCluster(format!(
            "no service account token at {}",
            token.display()
        )));
    }
    let namespace = std::fs::read_to_string(dir.join("namespace"))
        .map(|n| n.trim().to_owned())
        .unwrap_or_else(|_| "default".to_owned());
    let mut config = kube::Config::new(url);
    config.default_namespace = namespace;
    config.root_cert = Some(roots);
    config.root_cert_file = Some(ca);
    config.auth_info.token_file = Some(token.display().to_string());
    Ok(config)
}

/// A client for `config`.
pub fn client(mut config: kube::Config) -> Result<kube::Client, KubeError> {
    install_crypto();
    no_hidden_retries(&mut config);
    Ok(kube::Client::try_from(config)?)
}

/// Turns off kube-client's own retries (429, 503 and 504, up to 15 times
/// with backoff growing to minutes). A 429 from the eviction API is a
/// PodDisruptionBudget's answer that the drain loop must see at once (it
/// keeps its own backoff per pod), and a lease renewal retried inside the
/// client would outlive its deadline. Callers retry as they see fit, as
/// client-go's callers do for answers without a Retry-After.
fn no_hidden_retries(config: &mut kube::Config) {
    config.default_retry = false;
}

fn install_crypto() {
    // Several crypto backends can be linked into one binary (the AWS SDK
    // brings its own); rustls then needs to be told which one to use. The
    // first choice made in the process stands.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for `config` that sends at most `qps` requests a second on
/// average and `burst` at once (client-go's `QPS` and `Burst`); a long
/// watch counts as the one request that opened it.
pub fn rate_limited_client(
    mut config: kube::Config,
    qps: u32,
    burst: u32,
) -> Result<kube::Client, KubeError> {
    install_crypto();
    no_hidden_retries(&mut config);
    let layer = rate::RateLimitLayer::new(f64::from(qps.max(1)), f64::from(burst.max(1)));
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}
