//! The server side: TLS handshakes done here (not by tonic) so that each
//! one uses the files as they are now, and the client certificate's names
//! are judged against the allow-list once per connection.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

use super::{PemFiles, Pems, Reloading, crypto};
use crate::middleware::{Inner, Middleware, ResponseFuture, layer};

/// Handshakes in progress at once; further connections wait to be
/// accepted, so a flood of clients that never finish costs bounded memory.
const HANDSHAKES_AT_ONCE: usize = 256;
/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Names read from one certificate for the allow-list and the logs.
const NAMES_PER_CERTIFICATE: usize = 32;

/// A TLS server: its certificate, the CA client certificates must come
/// from, and the client names it admits.
pub struct ServerTls {
    config: Reloading<Arc<rustls::ServerConfig>>,
    mutual: bool,
    /// `None`: any certificate of the CA.
    allow: Option<Arc<[String]>>,
}

fn server_config(pems: &Pems) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let (chain, key) = pems
        .identity()?
        .context("--tls-ca on a server needs --tls-cert and --tls-key (its own certificate)")?;
    let builder = rustls::ServerConfig::builder_with_provider(crypto())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match pems.roots()? {
        Some(roots) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto())
                .build()
                .context("--tls-ca cannot verify client certificates")?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).context(
        "--tls-cert and --tls-key do not make a server certificate (is the key the certificate's?)",
    )?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

impl ServerTls {
    pub(super) fn new(files: PemFiles, allow: &[String]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            files.identity.is_some(),
            "--tls-ca on a server needs --tls-cert and --tls-key (its own certificate)"
        );
        let mutual = files.ca.is_some();
        let names: Vec<String> = allow
            .iter()
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        anyhow::ensure!(
            !mutual || !names.is_empty(),
            "--tls-client-allow is empty: no client could call; name the adapter's certificate, or `*` for any certificate of --tls-ca"
        );
        let allow = (!names.iter().any(|name| name == "*")).then(|| names.into());
        Ok(Self {
            config: Reloading::new(files, server_config)?,
            mutual,
            allow,
        })
    }

    /// The connections accepted on `listener`, each once its handshake is
    /// done. Accepting stops when the answer is dropped.
    pub fn incoming(
        self: Arc<Self>,
        listener: TcpListener,
    ) -> ReceiverStream<std::io::Result<PeerStream>> {
        let (ready, incoming) = mpsc::channel(HANDSHAKES_AT_ONCE);
        tokio::spawn(self.accept(listener, ready));
        ReceiverStream::new(incoming)
    }

    async fn accept(
        self: Arc<Self>,
        listener: TcpListener,
        ready: mpsc::Sender<std::io::Result<PeerStream>>,
    ) {
        let handshakes = Arc::new(Semaphore::new(HANDSHAKES_AT_ONCE));
        loop {
            let accepted = tokio::select! {
                () = ready.closed() => return,
                accepted = async {
                    let permit = handshakes.clone().acquire_owned().await;
                    (permit, listener.accept().await)
                } => accepted,
            };
            let (Ok(permit), accepted) = accepted else {
                return;
            };
            let (tcp, remote) = match accepted {
                Ok(connection) => connection,
                Err(error) => {
                    // Out of file descriptors and the like: pause, not spin.
                    tracing::warn!(%error, "accepting a gRPC connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = TlsAcceptor::from(self.config.current());
            let tls = self.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let _ = tcp.set_nodelay(true);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let peer = tls.identify(&stream, remote);
                        let _ = ready.send(Ok(PeerStream { stream, peer })).await;
                    }
                    Ok(Err(error)) => tracing::debug!(%remote, %error, "TLS handshake refused"),
                    Err(_) => tracing::debug!(%remote, "TLS handshake not finished in time"),
                }
            });
        }
    }

    /// Who the client is, and whether this server answers it.
    fn identify(&self, stream: &TlsStream<TcpStream>, remote: SocketAddr) -> PeerIdentity {
        let names = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(certificate_names)
            .unwrap_or_default();
        let refusal = match &self.allow {
            Some(allow) if self.mutual => {
                let admitted = names.iter().any(|name| allow.contains(name));
                (!admitted).then(|| {
                    tracing::warn!(%remote, ?names, allowed = ?allow, "a client certificate of the CA that is not on --tls-client-allow; its calls are refused");
                    Arc::<str>::from(format!(
                        "this server answers only clients whose certificate names one of {allow:?} (--tls-client-allow); yours names {names:?}"
                    ))
                })
            }
            _ => None,
        };
        PeerIdentity {
            remote,
            names: names.into(),
            refusal,
        }
    }
}

/// The DNS names a certificate carries, lower-cased.
fn certificate_names(certificate: &rustls::pki_types::CertificateDer<'_>) -> Vec<String> {
    webpki::EndEntityCert::try_from(certificate)
        .map(|parsed| {
            parsed
                .valid_dns_names()
                .take(NAMES_PER_CERTIFICATE)
                .map(str::to_ascii_lowercase)
                .collect()
        })
        .unwrap_or_default()
}

/// Who is on the other end of a connection; every request on it carries
/// this in its extensions.
#[derive(Clone, Debug)]
pub struct PeerIdentity {
    pub remote: SocketAddr,
    /// The DNS names of the client's certificate (none without one).
    pub names: Arc<[String]>,
    /// Why its calls are refused, when they are.
    refusal: Option<Arc<str>>,
}

/// An accepted TLS connection and who made it.
pub struct PeerStream {
    stream: TlsStream<TcpStream>,
    peer: PeerIdentity,
}

impl tonic::transport::server::Connected for PeerStream {
    type ConnectInfo = PeerIdentity;

    fn connect_info(&self) -> PeerIdentity {
        self.peer.clone()
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Answers PERMISSION_DENIED to every call on a connection whose client
/// certificate is not on the allow-list (health and reflection included):
/// the refusal names both sides, so a wrong allow-list is found from the
/// client's error alone.
#[derive(Clone, Copy, Default)]
pub struct AdmitLayer;

layer!(AdmitLayer);

impl<S, B, ResBody> Middleware<S, B> for AdmitLayer
where
    S: Inner<B, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    fn call(&self, inner: &mut S, request: http::Request<B>) -> ResponseFuture<S, B> {
        let refusal = request
            .extensions()
            .get::<PeerIdentity>()
            .and_then(|peer| peer.refusal.clone());
        match refusal {
            // Built inside the future: a ready value would have to be Send.
            Some(refusal) => Box::pin(async move {
                Ok(tonic::Status::permission_denied(refusal.to_string()).into_http())
            }),
            None => Box::pin(inner.call(request)),
        }
    }
}
