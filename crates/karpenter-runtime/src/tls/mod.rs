//! Mutual TLS between the services: the scheduler and the provider serve
//! with a certificate, the adapter connects with its own, each side trusts
//! only the CA it is given, and a server answers only the client names on
//! its allow-list.
//!
//! ```text
//!   adapter ──(client cert naming karpenter-adapter;   ──► scheduler
//!             verifies the server's name against --tls-ca) ► provider
//!                  (server cert; with --tls-ca a client certificate of
//!                   that CA is required, and its DNS names must include
//!                   one of --tls-client-allow, else PERMISSION_DENIED)
//! ```
//!
//! The same flags on every binary: `--tls-cert` and `--tls-key` (PEM),
//! `--tls-ca` (a PEM bundle) and, on servers, `--tls-client-allow`. The
//! files are read again when they change (cert-manager renews a mounted
//! Secret in place, the kubelet swaps its files): each new connection uses
//! what the files hold then, checked at most once per [`RECHECK_EVERY`];
//! open connections keep the chain they were made with. Files that change
//! into something unusable (a renewal written half-way) leave the previous
//! configuration in use, with a warning.

mod client;
mod server;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use client::ClientTls;
pub use server::{AdmitLayer, PeerIdentity, ServerTls};

/// The client name servers admit when not told otherwise: the adapter's
/// certificate in a default install (the chart's release `karpenter`,
/// and `karpctl up --tls`).
pub const ADAPTER_IDENTITY: &str = "karpenter-adapter";

/// How often, at most, a new connection looks at the files again.
pub const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// The TLS flags every service binary takes.
#[derive(Debug, Clone, clap::Args)]
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
    /// Client identities a mutual-TLS server answers: names one of which
    /// the client certificate must carry as a DNS subject alternative name
    /// (comma-separated). `*` admits any certificate the CA signed.
    #[arg(
        long = "tls-client-allow",
        env = "TLS_CLIENT_ALLOW",
        value_delimiter = ',',
        default_value = ADAPTER_IDENTITY
    )]
    pub tls_client_allow: Vec<String>,
}

impl Default for TlsArgs {
    fn default() -> Self {
        Self {
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_client_allow: vec![ADAPTER_IDENTITY.to_owned()],
        }
    }
}

impl TlsArgs {
    /// Whether TLS is configured at all.
    pub fn enabled(&self) -> bool {
        self.tls_cert.is_some() || self.tls_ca.is_some()
    }

    fn files(&self) -> anyhow::Result<PemFiles> {
        let identity = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => anyhow::bail!("--tls-cert and --tls-key go together"),
        };
        Ok(PemFiles {
            identity,
            ca: self.tls_ca.clone(),
        })
    }

    /// The gRPC server's TLS, if configured: a server needs its own
    /// certificate; a CA makes client certificates, and the allow-list,
    /// required.
    pub fn server(&self) -> anyhow::Result<Option<Arc<ServerTls>>> {
        if !self.enabled() {
            return Ok(None);
        }
        ServerTls::new(self.files()?, &self.tls_client_allow).map(|tls| Some(Arc::new(tls)))
    }

    /// A client's TLS, if configured: servers verified against the CA,
    /// this process's certificate presented when it has one.
    pub fn client(&self) -> anyhow::Result<Option<Arc<ClientTls>>> {
        if !self.enabled() {
            return Ok(None);
        }
        ClientTls::new(self.files()?).map(|tls| Some(Arc::new(tls)))
    }
}

/// Where the PEM files are.
#[derive(Debug, Clone)]
struct PemFiles {
    identity: Option<(PathBuf, PathBuf)>,
    ca: Option<PathBuf>,
}

/// What the files held when read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pems {
    identity: Option<(Vec<u8>, Vec<u8>)>,
    ca: Option<Vec<u8>>,
}

fn read(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {flag} {}", path.display()))
}

impl PemFiles {
    fn read(&self) -> anyhow::Result<Pems> {
        let identity = match &self.identity {
            Some((cert, key)) => Some((read(cert, "--tls-cert")?, read(key, "--tls-key")?)),
            None => None,
        };
        let ca = self
            .ca
            .as_deref()
            .map(|path| read(path, "--tls-ca"))
            .transpose()?;
        Ok(Pems { identity, ca })
    }
}

impl Pems {
    /// This process's certificate chain and key, if it has them.
    fn identity(
        &self,
    ) -> anyhow::Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>> {
        let Some((cert, key)) = &self.identity else {
            return Ok(None);
        };
        let chain = certificates(cert, "--tls-cert")?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| {
            anyhow::anyhow!("--tls-key holds no usable PEM private key: {error}")
        })?;
        Ok(Some((chain, key)))
    }

    /// The CA bundle as trust roots, if given.
    fn roots(&self) -> anyhow::Result<Option<rustls::RootCertStore>> {
        let Some(ca) = &self.ca else {
            return Ok(None);
        };
        let mut roots = rustls::RootCertStore::empty();
        for certificate in certificates(ca, "--tls-ca")? {
            roots
                .add(certificate)
                .context("--tls-ca holds a certificate that is not a usable CA")?;
        }
        Ok(Some(roots))
    }
}

fn certificates(pem: &[u8], flag: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| anyhow::anyhow!("{flag} is not PEM certificates: {error}"))?;
    anyhow::ensure!(!chain.is_empty(), "{flag} holds no certificate");
    Ok(chain)
}

fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A configuration made from the PEM files, made again when they change.
struct Reloading<T> {
    files: PemFiles,
    build: fn(&Pems) -> anyhow::Result<T>,
    state: Mutex<Loaded<T>>,
}

struct Loaded<T> {
    pems: Pems,
    value: T,
    checked: Instant,
}

impl<T: Clone> Reloading<T> {
    /// Reads and builds at once: a process does not start on files it
    /// cannot use.
    fn new(files: PemFiles, build: fn(&Pems) -> anyhow::Result<T>) -> anyhow::Result<Self> {
        let pems = files.read()?;
        let value = build(&pems)?;
        Ok(Self {
            files,
            build,
            state: Mutex::new(Loaded {
                pems,
                value,
                checked: Instant::now(),
            }),
        })
    }

    /// The configuration a new connection uses.
    fn current(&self) -> T {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.checked.elapsed() >= RECHECK_EVERY {
            state.checked = Instant::now();
            self.reload(&mut state);
        }
        state.value.clone()
    }

    fn reload(&self, state: &mut Loaded<T>) {
        let changed = match self.files.read() {
            Ok(pems) if pems != state.pems => pems,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "cannot read the TLS files; new connections keep the previous ones"
                );
                return;
            }
        };
        match (self.build)(&changed) {
            Ok(value) => {
                tracing::info!("the TLS files changed; new connections use them");
                state.pems = changed;
                state.value = value;
            }
            Err(error) => tracing::warn!(
                error = format!("{error:#}"),
                "the TLS files changed into something unusable (written half-way?); new connections keep the previous ones"
            ),
        }
    }
}
