//! The services' trust boundary probed as an attacker inside the cluster
//! would: the scheduler and provider-kwok served as the chart serves them
//! (mutual TLS, each with its own certificate, answering only the
//! adapter's identity), and clients that try to get in over real sockets.
//!
//! ```text
//!   plain text ─────────────────────────────┐
//!   TLS, no certificate ────────────────────┤
//!   a certificate of another CA ────────────┼──▶ refused (no handshake)
//!   the scheduler's own certificate ────────┴──▶ PERMISSION_DENIED, naming both sides
//!   the adapter's certificate ─────────────────▶ served
//! ```
//!
//! Before mutual TLS took an allow-list, any certificate of the services'
//! CA was served: the scheduler's key (or any pod given a certificate of
//! the CA) could launch instances through the provider.

use std::path::{Path, PathBuf};
use std::time::Duration;

use integration_tests::RunningService;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::provider::v1::cloud_provider_client::CloudProviderClient;
use karpenter_runtime::{ClientTls, TlsArgs};
use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair};
use tonic::transport::{Channel, Endpoint};

/// A CA and the certificates it signs, as PEM files under `dir`.
struct Ca {
    dir: PathBuf,
    name: String,
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(dir: &Path, name: &str) -> Ca {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA");
        std::fs::write(dir.join(format!("{name}-ca.crt")), cert.pem()).expect("write");
        Ca {
            dir: dir.to_path_buf(),
            name: name.to_owned(),
            cert,
            key,
        }
    }

    /// TLS flags with a certificate naming `names`, trusting this CA.
    fn flags(&self, who: &str, names: &[&str]) -> TlsArgs {
        let key = KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let cert = CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, &self.cert, &self.key)
            .expect("signed");
        let cert_file = self.dir.join(format!("{}-{who}.crt", self.name));
        let key_file = self.dir.join(format!("{}-{who}.key", self.name));
        std::fs::write(&cert_file, cert.pem()).expect("write");
        std::fs::write(&key_file, key.serialize_pem()).expect("write");
        TlsArgs {
            tls_cert: Some(cert_file),
            tls_key: Some(key_file),
            tls_ca: Some(self.dir.join(format!("{}-ca.crt", self.name))),
            ..TlsArgs::default()
        }
    }
}

/// A channel to `address` as `client` makes it, checking the server's
/// certificate names `server`.
fn channel(address: std::net::SocketAddr, server: &str, client: Option<&TlsArgs>) -> Channel {
    match client {
        Some(flags) => {
            let tls = flags.client().expect("client TLS").expect("TLS");
            let endpoint = ClientTls::endpoint(&format!("https://{address}"))
                .expect("endpoint")
                .connect_timeout(Duration::from_secs(5));
            tls.connect_lazy(&endpoint, Some(server))
        }
        None => Endpoint::from_shared(format!("http://{address}"))
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(5))
            .connect_lazy(),
    }
}

/// What the provider answers a caller asking for its instance types (what
/// an attacker would ask first, before `Create`).
async fn provider_answers(channel: Channel) -> Result<usize, tonic::Status> {
    let mut request = tonic::Request::new(pv::GetInstanceTypesRequest::default());
    request.set_timeout(Duration::from_secs(5));
    CloudProviderClient::new(channel)
        .get_instance_types(request)
        .await
        .map(|r| r.into_inner().instance_types.len())
}

/// What the scheduler's health service answers.
async fn scheduler_answers(channel: Channel) -> Result<(), tonic::Status> {
    let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest::default());
    request.set_timeout(Duration::from_secs(5));
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_adapters_certificate_gets_past_the_services_boundary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new(dir.path(), "services");
    let other = Ca::new(dir.path(), "other");
    let any = "127.0.0.1:0".parse().expect("address");
    let provider = RunningService::start_with(
        any,
        ca.flags("provider", &["karpenter-provider.kube-system.svc"]),
        || {
            provider_kwok::KwokProvider::new(
                provider_kwok::load_catalog(None).expect("catalog"),
                None,
                provider_kwok::Options::default(),
            )
            .service(karpenter_runtime::Metrics::new("provider"))
        },
    )
    .await
    .expect("provider");
    let scheduler = RunningService::start_with(
        any,
        ca.flags("scheduler", &["karpenter-scheduler.kube-system.svc"]),
        || {
            karpenter_scheduler::service(
                karpenter_runtime::Metrics::new("scheduler"),
                karpenter_scheduler::Limits::default(),
            )
        },
    )
    .await
    .expect("scheduler");
    let provider_name = "karpenter-provider.kube-system.svc";
    let scheduler_name = "karpenter-scheduler.kube-system.svc";

    let adapter = ca.flags("adapter", &["karpenter-adapter"]);
    let types = provider_answers(channel(provider.grpc, provider_name, Some(&adapter)))
        .await
        .expect("the adapter is served");
    assert!(types > 0, "the provider answers the adapter");
    scheduler_answers(channel(scheduler.grpc, scheduler_name, Some(&adapter)))
        .await
        .expect("the adapter is served by the scheduler");

    // Plain text: the server speaks TLS only.
    assert!(
        provider_answers(channel(provider.grpc, provider_name, None))
            .await
            .is_err(),
        "plain text is refused"
    );
    // TLS without a client certificate: the handshake fails.
    let anonymous = TlsArgs {
        tls_ca: adapter.tls_ca.clone(),
        ..TlsArgs::default()
    };
    let refused = provider_answers(channel(provider.grpc, provider_name, Some(&anonymous)))
        .await
        .expect_err("no certificate");
    assert_ne!(refused.code(), tonic::Code::Ok);
    // A certificate naming the adapter, from another CA.
    let mut forged = other.flags("forged", &["karpenter-adapter"]);
    forged.tls_ca = adapter.tls_ca.clone();
    assert!(
        provider_answers(channel(provider.grpc, provider_name, Some(&forged)))
            .await
            .is_err(),
        "a certificate of another CA is refused"
    );
    // The scheduler's own certificate (same CA, another identity): every
    // call is PERMISSION_DENIED, naming what is allowed.
    let scheduler_key = ca.flags("scheduler-client", &["karpenter-scheduler"]);
    let denied = provider_answers(channel(provider.grpc, provider_name, Some(&scheduler_key)))
        .await
        .expect_err("another service's certificate");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(
        denied.message().contains("karpenter-adapter")
            && denied.message().contains("karpenter-scheduler"),
        "{denied:?}"
    );
    let denied = scheduler_answers(channel(
        scheduler.grpc,
        scheduler_name,
        Some(&scheduler_key),
    ))
    .await
    .expect_err("the health service too");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    // The adapter checks the server's name: the scheduler's address with
    // the provider's expected name is refused.
    assert!(
        scheduler_answers(channel(scheduler.grpc, provider_name, Some(&adapter)))
            .await
            .is_err(),
        "a server whose certificate names another service is refused"
    );
}
