//! Optional mutual TLS between the services: the scheduler and the provider
//! serve with a certificate, the adapter connects with its own, and each
//! side trusts only the CA it is given.
//!
//! ```text
//!   adapter ──(client cert, verifies server against --tls-ca)──► scheduler
//!           ──────────────────────────────────────────────────► provider
//!                          (server cert; with --tls-ca it requires a
//!                           client cert signed by that CA: mutual TLS)
//! ```
//!
//! The same three flags on every binary: `--tls-cert` and `--tls-key`
//! (PEM), and `--tls-ca` (a PEM bundle). Files are read once at start; a
//! certificate renewed by cert-manager takes effect on the pod's restart.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// The TLS flags every service binary takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// PEM certificate this process presents (a server's, or the adapter's
    /// client certificate); with `--tls-key`.
    #[arg(long = "tls-cert", env = "TLS_CERT_FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long = "tls-key", env = "TLS_KEY_FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle the peer's certificate must be signed by: a server
    /// then requires client certificates (mutual TLS); a client verifies
    /// servers against it instead of the system roots.
    #[arg(long = "tls-ca", env = "TLS_CA_FILE")]
    pub tls_ca: Option<PathBuf>,
}

/// Selects ring as rustls's process-wide provider, once. A workspace
/// build links both ring and aws-lc-rs (the AWS SDK brings the latter), and
/// rustls then refuses to guess, failing the first handshake.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one first: either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))
}

impl TlsArgs {
    /// Whether TLS is configured at all.
    pub fn enabled(&self) -> bool {
        self.tls_cert.is_some() || self.tls_ca.is_some()
    }

    fn identity(&self) -> anyhow::Result<Option<Identity>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(Identity::from_pem(
                read(cert, "--tls-cert")?,
                read(key, "--tls-key")?,
            ))),
            (None, None) => Ok(None),
            _ => anyhow::bail!("--tls-cert and --tls-key go together"),
        }
    }

    fn ca(&self) -> anyhow::Result<Option<Certificate>> {
        self.tls_ca
            .as_deref()
            .map(|path| read(path, "--tls-ca").map(Certificate::from_pem))
            .transpose()
    }

    /// The gRPC server's TLS, if configured: a server needs its own
    /// certificate; a CA makes client certificates required.
    pub fn server_config(&self) -> anyhow::Result<Option<ServerTlsConfig>> {
        if !self.enabled() {
            return Ok(None);
        }
        ensure_crypto_provider();
        let identity = self
            .identity()?
            .context("--tls-ca on a server needs --tls-cert and --tls-key (its own certificate)")?;
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = self.ca()? {
            config = config.client_ca_root(ca);
        }
        Ok(Some(config))
    }

    /// A client's TLS, if configured: servers verified against the CA,
    /// this process's certificate presented when it has one.
    pub fn client_config(&self) -> anyhow::Result<Option<ClientTlsConfig>> {
        if !self.enabled() {
            return Ok(None);
        }
        ensure_crypto_provider();
        let ca = self
            .ca()?
            .context("--tls-ca is needed to verify the servers' certificates")?;
        let mut config = ClientTlsConfig::new().ca_certificate(ca);
        if let Some(identity) = self.identity()? {
            config = config.identity(identity);
        }
        Ok(Some(config))
    }
}
