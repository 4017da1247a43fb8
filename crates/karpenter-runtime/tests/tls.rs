//! Mutual TLS between the services, over real sockets: a server started
//! with `--tls-cert`, `--tls-key` and `--tls-ca` answers a client that
//! presents a certificate signed by that CA naming an identity on its
//! allow-list, and refuses one that presents none, one signed by another
//! CA, one of the CA naming someone else, and plain text; certificates
//! replaced on disk are used by the next connections without a restart.

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
        ..TlsArgs::default()
    }
}

/// A channel to `url` through a client configured by `client`.
async fn connect(url: &str, client: &TlsArgs) -> Result<tonic::transport::Channel, String> {
    let channel = match client.client().map_err(|e| format!("{e:#}"))? {
        Some(tls) => {
            let endpoint = karpenter_runtime::ClientTls::endpoint(url)
                .map_err(|e| format!("{e:#}"))?
                .connect_timeout(std::time::Duration::from_secs(5));
            tls.connect_lazy(&endpoint, None)
        }
        None => tonic::transport::Endpoint::from_shared(url.to_string())
            .map_err(|e| e.to_string())?
            .connect_timeout(std::time::Duration::from_secs(5))
            .connect_lazy(),
    };
    Ok(channel)
}

/// Asks the server's health service over `channel`.
async fn ask(channel: tonic::transport::Channel) -> Result<(), tonic::Status> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "karpenter.scheduler.v1.Scheduler".into(),
        })
        .await
        .map(|_| ())
}

/// Asks the server's health service through a new client configured by
/// `client`.
async fn check(url: &str, client: &TlsArgs) -> Result<(), String> {
    ask(connect(url, client).await?)
        .await
        .map_err(|status| format!("{status:?}"))
}

/// A server on loopback with `tls`, until the answer's sender is used.
async fn start(
    tls: TlsArgs,
) -> (
    u16,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let args = ServiceArgs {
        listen: "127.0.0.1:0".parse().expect("address"),
        metrics_listen: "127.0.0.1:0".parse().expect("address"),
        log_level: "warn".into(),
        log_json: false,
        tls,
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
    (port, stop, server)
}

#[tokio::test]
async fn mutual_tls_admits_only_clients_with_a_certificate_of_the_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new(dir.path(), "services");
    let other = Ca::new(dir.path(), "other");
    let (port, stop, server) = start(tls(
        Some(ca.issue("scheduler", &["localhost"])),
        Some(ca.ca_file()),
    ))
    .await;
    let https = format!("https://localhost:{port}");

    let adapter = tls(
        Some(ca.issue("adapter", &["karpenter-adapter"])),
        Some(ca.ca_file()),
    );
    check(&https, &adapter)
        .await
        .expect("a client with a certificate of the CA is served");

    let anonymous = tls(None, Some(ca.ca_file()));
    assert!(
        check(&https, &anonymous).await.is_err(),
        "a client without a certificate is refused"
    );
    let stranger = tls(
        Some(other.issue("stranger", &["karpenter-adapter"])),
        Some(ca.ca_file()),
    );
    assert!(
        check(&https, &stranger).await.is_err(),
        "a client certificate of another CA is refused"
    );
    let misled = tls(
        Some(ca.issue("adapter2", &["karpenter-adapter"])),
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

#[tokio::test]
async fn a_certificate_of_the_ca_naming_another_service_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new(dir.path(), "services");
    let (port, stop, server) = start(tls(
        Some(ca.issue("provider", &["localhost"])),
        Some(ca.ca_file()),
    ))
    .await;
    let https = format!("https://localhost:{port}");
    // The scheduler's own certificate is of the same CA: it may not call
    // the provider (nor may any pod that got hold of it).
    let scheduler = tls(
        Some(ca.issue("scheduler-client", &["karpenter-scheduler"])),
        Some(ca.ca_file()),
    );
    let refused = ask(connect(&https, &scheduler).await.expect("channel"))
        .await
        .expect_err("not on the allow-list");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("karpenter-adapter")
            && refused.message().contains("karpenter-scheduler"),
        "the refusal names what is allowed and what was presented: {refused:?}"
    );
    stop.send(()).expect("stop");
    server.await.expect("joined").expect("served");

    // `*` admits any certificate of the CA.
    let mut any = tls(
        Some(ca.issue("provider2", &["localhost"])),
        Some(ca.ca_file()),
    );
    any.tls_client_allow = vec!["*".into()];
    let (port, stop, server) = start(any).await;
    check(&format!("https://localhost:{port}"), &scheduler)
        .await
        .expect("`*` admits any certificate of the CA");
    stop.send(()).expect("stop");
    server.await.expect("joined").expect("served");
}

/// cert-manager renews in place: the files change under a running server
/// and client. Here the whole chain changes (a new CA): connections made
/// after the change use it, one made before goes on working, and nothing
/// restarts.
#[tokio::test]
async fn replaced_certificates_are_used_by_the_next_connections_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = Ca::new(dir.path(), "old");
    let new = Ca::new(dir.path(), "new");
    let live = |name: &str| dir.path().join(name);
    let install = |ca: &Ca, who: &str, dns: &str, prefix: &str| {
        let (cert, key) = ca.issue(&format!("{prefix}-{who}"), &[dns]);
        std::fs::copy(cert, live(&format!("{who}.crt"))).expect("copy");
        std::fs::copy(key, live(&format!("{who}.key"))).expect("copy");
        std::fs::copy(ca.ca_file(), live(&format!("{who}-ca.crt"))).expect("copy");
    };
    install(&old, "server", "localhost", "old");
    install(&old, "client", "karpenter-adapter", "old");
    let files = |who: &str| {
        tls(
            Some((live(&format!("{who}.crt")), live(&format!("{who}.key")))),
            Some(live(&format!("{who}-ca.crt"))),
        )
    };
    let (port, stop, server) = start(files("server")).await;
    let https = format!("https://localhost:{port}");
    let client = files("client");
    let before = connect(&https, &client).await.expect("channel");
    ask(before.clone()).await.expect("served on the old chain");
    let old_client = tls(
        Some(old.issue("old-client-kept", &["karpenter-adapter"])),
        Some(old.ca_file()),
    );
    check(&https, &old_client)
        .await
        .expect("the old chain works");

    install(&new, "server", "localhost", "new");
    install(&new, "client", "karpenter-adapter", "new");
    tokio::time::sleep(karpenter_runtime::TLS_RECHECK_EVERY * 2).await;

    let new_only = tls(
        Some(new.issue("new-client", &["karpenter-adapter"])),
        Some(new.ca_file()),
    );
    check(&https, &new_only)
        .await
        .expect("a new connection is served with the new chain");
    assert!(
        check(&https, &old_client).await.is_err(),
        "the server no longer presents or accepts the old chain"
    );
    // The reloading client (same files, rewritten) makes its next
    // connection with the new chain too.
    check(&https, &client)
        .await
        .expect("a client reading the same files follows them");
    ask(before)
        .await
        .expect("a connection made before the change goes on");
    stop.send(()).expect("stop");
    server.await.expect("joined").expect("served");
}

#[test]
fn bad_tls_flags_are_errors_naming_the_flag() {
    let args = tls(None, Some(PathBuf::from("/nonexistent/ca.pem")));
    let error = args.server().err().expect("refused");
    assert!(error.to_string().contains("--tls-cert"), "{error}");
    let missing = tls(
        Some((
            PathBuf::from("/nonexistent/c.pem"),
            PathBuf::from("/nonexistent/k.pem"),
        )),
        None,
    );
    let error = missing.server().err().expect("unreadable");
    assert!(
        format!("{error:#}").contains("/nonexistent/c.pem"),
        "{error:#}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new(dir.path(), "services");
    let no_ca = tls(Some(ca.issue("adapter", &["karpenter-adapter"])), None);
    let error = no_ca.client().err().expect("no CA");
    assert!(error.to_string().contains("--tls-ca"), "{error}");
    let mut nobody = tls(Some(ca.issue("server", &["localhost"])), Some(ca.ca_file()));
    nobody.tls_client_allow = vec![" ".into()];
    let error = nobody.server().err().expect("nobody allowed");
    assert!(error.to_string().contains("--tls-client-allow"), "{error}");
    let (cert, _) = ca.issue("mismatched", &["localhost"]);
    let (_, other_key) = ca.issue("other", &["localhost"]);
    let error = tls(Some((cert, other_key)), Some(ca.ca_file()))
        .server()
        .err()
        .expect("a key that is not the certificate's");
    assert!(format!("{error:#}").contains("--tls-key"), "{error:#}");
}
