//! The client side: each new connection of a channel does its handshake
//! with the files as they are then (tonic's own TLS would keep the files
//! of the process's start), and verifies the server's certificate names the
//! host of the address it was given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::Context as _;
use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::transport::{Channel, Endpoint};

use super::{PemFiles, Pems, Reloading, crypto};

/// A TLS client: the CA servers must be signed by, and this process's
/// certificate when it has one.
pub struct ClientTls {
    config: Reloading<Arc<rustls::ClientConfig>>,
}

fn client_config(pems: &Pems) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let roots = pems
        .roots()?
        .context("--tls-ca is needed to verify the servers' certificates")?;
    let builder = rustls::ClientConfig::builder_with_provider(crypto())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots);
    let mut config = match pems.identity()? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .context("--tls-cert and --tls-key do not make a client certificate (is the key the certificate's?)")?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

impl ClientTls {
    pub(super) fn new(files: PemFiles) -> anyhow::Result<Self> {
        Ok(Self {
            config: Reloading::new(files, client_config)?,
        })
    }

    /// The endpoint for `address`, which must be `https://host:port`: the
    /// host is the name the server's certificate must carry. Configure it,
    /// then [`ClientTls::connect_lazy`].
    pub fn endpoint(address: &str) -> anyhow::Result<Endpoint> {
        let uri: Uri = address
            .parse()
            .with_context(|| format!("{address:?} is not a URL"))?;
        anyhow::ensure!(
            uri.scheme_str() == Some("https"),
            "{address} is not https:// but TLS is configured (--tls-ca): give the https:// address"
        );
        anyhow::ensure!(uri.host().is_some(), "{address} names no host");
        // The connector below does the TLS; tonic is handed the plain
        // scheme so that it does not look for a TLS configuration of its own.
        let mut parts = uri.into_parts();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        let plain = Uri::from_parts(parts).with_context(|| format!("rewriting {address}"))?;
        Ok(Endpoint::from(plain))
    }

    /// A channel that connects when first used, each connection over TLS
    /// with the files as they are then. The server's certificate must name
    /// `server_name`, or the endpoint's host without one.
    pub fn connect_lazy(
        self: &Arc<Self>,
        endpoint: &Endpoint,
        server_name: Option<&str>,
    ) -> Channel {
        endpoint.connect_with_connector_lazy(Connector {
            tls: self.clone(),
            server_name: server_name.map(str::to_owned),
        })
    }
}

#[derive(Clone)]
struct Connector {
    tls: Arc<ClientTls>,
    server_name: Option<String>,
}

type Connecting =
    Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let config = self.tls.config.current();
        let expected = self.server_name.clone();
        Box::pin(async move {
            let invalid =
                |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
            let host = uri
                .host()
                .ok_or_else(|| invalid(format!("{uri} names no host")))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let expected = expected.unwrap_or_else(|| host.clone());
            let server_name = rustls::pki_types::ServerName::try_from(expected.clone())
                .map_err(|error| invalid(format!("{expected} is not a server name: {error}")))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            let _ = tcp.set_nodelay(true);
            let stream = TlsConnector::from(config).connect(server_name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
