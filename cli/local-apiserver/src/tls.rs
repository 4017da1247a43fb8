//! HTTPS with a self-signed certificate for 127.0.0.1 and localhost: the
//! certificate is written next to the kubeconfig (`ca.crt`), which names it
//! as the cluster's certificate authority, so kubectl verifies the server
//! as it would a real one.

use std::path::Path;
use std::sync::Arc;

use super::ServerError;

/// A self-signed certificate and its key, PEM-encoded.
pub struct SelfSigned {
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn self_signed() -> Result<SelfSigned, ServerError> {
    let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let certified =
        rcgen::generate_simple_self_signed(names).map_err(|e| ServerError::Tls(e.to_string()))?;
    Ok(SelfSigned {
        cert_pem: certified.cert.pem(),
        key_pem: certified.key_pair.serialize_pem(),
    })
}

/// A rustls acceptor for the certificate (HTTP/1.1 only).
pub fn acceptor(cert: &SelfSigned) -> Result<tokio_rustls::TlsAcceptor, ServerError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let tls = |e: &dyn std::fmt::Display| ServerError::Tls(e.to_string());
    let certs =
        vec![CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).map_err(|e| tls(&e))?];
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(|e| tls(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves `router` over TLS on `listener` until `stop` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: axum::Router,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection");
            }
        });
    }
}

/// Writes the certificate where the kubeconfig points to it.
pub fn write_ca(dir: &Path, cert: &SelfSigned) -> Result<std::path::PathBuf, ServerError> {
    let path = dir.join("ca.crt");
    std::fs::write(&path, &cert.cert_pem)?;
    Ok(path)
}
