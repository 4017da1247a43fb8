//! Mutual TLS between the services, over real sockets: a server started
//! with `--tls-cert`, `--tls-key` and `--tls-ca` answers a client that
//! presents a certificate signed by that CA, and refuses one that presents
//! none, one signed by another CA, and plain text.

use std::path::{Path, PathBuf};

use karpenter_proto::scheduler::v1::scheduler_server::SchedulerServer;
use karpenter_runtime::{Listeners, Metrics, Service, ServiceArgs, TlsArgs};
use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

struct Idle;

#[tonic::async_trait]
impl karpenter_proto::scheduler::v1::scheduler_server::Scheduler for Idle {
    async fn solve(
        &self,
        _: tonic::Request<karpenter_proto::scheduler::v1::SolveRequest>,
    ) -> Result<tonic::Response<karpenter_proto::scheduler::v1::SolveResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("idle"))
    }

    async fn plan_disruption(
        &self,
        _: tonic::Request<karpenter_proto::scheduler::v1::PlanDisruptionRequest>,
    ) -> Result<
        tonic::Response<karpenter_proto::scheduler::v1::PlanDisruptionResponse>,
        tonic::Status,
    > {
        Err(tonic::Status::unimplemented("idle"))
    }
}

/// A CA whose certificates are written as PEM files under `dir`.
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
        let cert = params.self_signed(&key).expect("CA certificate");
        std::fs::write(dir.join(format!("{name}-ca.pem")), cert.pem()).expect("write");
        Ca {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            cert,
            key,
        }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// Issues a certificate for `dns`: (certificate file, key file).
    fn issue(&self, who: &str, dns: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("key");
        let names: Vec<String> = dns.iter().map(|s| s.to_string()).collect();
        let cert = CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, &self.cert, &self.key)
            .expect("signed");
        let cert_file = self.dir.join(format!("{who}.pem"));
        let key_file = self.dir.join(format!("{who}-key.pem"));
        std::fs::write(&cert_file, cert.pem()).expect("write");
        std::fs::write(&key_file, key.serialize_pem()).expect("write");
        (cert_file, key_file)
    }
}

fn tls(cert: Option<(PathBuf, PathBuf)>, ca: Option<PathBuf>) -> TlsArgs {
    let (tls_cert, tls_key) = match cert {
        Some((c, k)) => (Some(c), Some(k)),
        None => (None, None),
    };
    TlsArgs {
        tls_cert,
        tls_key,
        tls_ca: ca,
    }
}

/// Asks the server's health service through a client configured by `client`.
async fn check(url: &str, client: &TlsArgs) -> Result<(), String> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| e.to_string())?
        .connect_timeout(std::time::Duration::from_secs(5));
    if let Some(config) = client.client_config().map_err(|e| e.to_string())? {
        endpoint = endpoint.tls_config(config).map_err(|e| e.to_string())?;
    }
    let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "karpenter.scheduler.v1.Scheduler".into(),
        })
        .await
        .map(|_| ())
        .map_err(|status| format!("{status:?}"))
}

#[tokio::test]
async fn mutual_tls_admits_only_clients_with_a_certificate_of_the_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new(dir.path(), "services");
    let other = Ca::new(dir.path(), "other");
    let args = ServiceArgs {
        listen: "127.0.0.1:0".parse().expect("address"),
        metrics_listen: "127.0.0.1:0".parse().expect("address"),
        log_level: "warn".into(),
        log_json: false,
        tls: tls(
            Some(ca.issue("scheduler", &["localhost"])),
            Some(ca.ca_file()),
        ),
    };
    let listeners = Listeners::bind(&args).await.expect("bound");
    let port = listeners.grpc_addr().expect("address").port();
    let service = Service {
        routes: tonic::service::Routes::new(SchedulerServer::new(Idle)),
        names: vec!["karpenter.scheduler.v1.Scheduler"],
        metrics: Metrics::new("test"),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(karpenter_runtime::serve_with_shutdown(
        listeners,
        service,
        async move {
            let _ = stopped.await;
        },
    ));
    let https = format!("https://localhost:{port}");

    let adapter = tls(Some(ca.issue("adapter", &["adapter"])), Some(ca.ca_file()));
    check(&https, &adapter)
        .await
        .expect("a client with a certificate of the CA is served");

    let anonymous = tls(None, Some(ca.ca_file()));
    assert!(
        check(&https, &anonymous).await.is_err(),
        "a client without a certificate is refused"
    );
    let stranger = tls(
        Some(other.issue("stranger", &["adapter"])),
        Some(ca.ca_file()),
    );
    assert!(
        check(&https, &stranger).await.is_err(),
        "a client certificate of another CA is refused"
    );
    let misled = tls(
        Some(ca.issue("adapter2", &["adapter"])),
        Some(other.ca_file()),
    );
    assert!(
        check(&https, &misled).await.is_err(),
        "a server certificate the client's CA did not sign is refused"
    );
    assert!(
        check(&format!("http://localhost:{port}"), &TlsArgs::default())
            .await
            .is_err(),
        "plain text is refused"
    );

    stop.send(()).expect("stop");
    server.await.expect("joined").expect("served");
}

#[test]
fn bad_tls_flags_are_errors_naming_the_flag() {
    let args = tls(None, Some(PathBuf::from("/nonexistent/ca.pem")));
    let error = args.server_config().expect_err("refused");
    assert!(error.to_string().contains("--tls-cert"), "{error}");
    let missing = tls(
        Some((
            PathBuf::from("/nonexistent/c.pem"),
            PathBuf::from("/nonexistent/k.pem"),
        )),
        None,
    );
    let error = missing.server_config().expect_err("unreadable");
    assert!(
        format!("{error:#}").contains("/nonexistent/c.pem"),
        "{error:#}"
    );
    let no_ca = tls(
        Some((
            PathBuf::from("/nonexistent/c.pem"),
            PathBuf::from("/nonexistent/k.pem"),
        )),
        None,
    );
    let error = no_ca.client_config().expect_err("no CA");
    assert!(error.to_string().contains("--tls-ca"), "{error}");
}
