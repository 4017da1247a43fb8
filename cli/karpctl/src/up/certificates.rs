//! `karpctl up --tls`: the certificates the chart makes, made locally. A
//! CA, and per service a directory holding what its Secret holds
//! (`tls.crt`, `tls.key`, `ca.crt`), its certificate naming the service as
//! the chart's does (`karpenter-<service>`, `.kube-system.svc`,
//! `.svc.cluster.local`). The adapter reaches the services on 127.0.0.1 and
//! is told which name each certificate must carry.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// The namespace the chart's names are made for.
pub const NAMESPACE: &str = "kube-system";
/// The services that get a certificate, as the chart names them.
pub const SERVICES: [&str; 3] = ["adapter", "scheduler", "provider"];

/// Where one service's certificate files are.
#[derive(Debug, Clone)]
pub struct Files {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl Files {
    /// The flags that hand these files to a service binary.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
            "--tls-ca".into(),
            self.ca.display().to_string(),
        ]
    }
}

/// A service's name, as the chart's release `karpenter` names it.
pub fn service_name(service: &str) -> String {
    format!("karpenter-{service}")
}

/// The name the adapter checks a server's certificate for.
pub fn server_name(service: &str) -> String {
    format!("{}.{NAMESPACE}.svc", service_name(service))
}

/// Makes a CA under `dir` and a certificate per service it signs; the
/// files of each service, in the order of [`SERVICES`].
pub fn issue(dir: &Path) -> anyhow::Result<Vec<Files>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca_key = KeyPair::generate().context("generating the CA's key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "karpenter services CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params
        .self_signed(&ca_key)
        .context("signing the CA certificate")?;
    write(&dir.join("ca.crt"), &ca.pem())?;
    write(&dir.join("ca.key"), &ca_key.serialize_pem())?;
    SERVICES
        .iter()
        .map(|service| {
            let name = service_name(service);
            let names = vec![
                name.clone(),
                format!("{name}.{NAMESPACE}.svc"),
                format!("{name}.{NAMESPACE}.svc.cluster.local"),
            ];
            let key = KeyPair::generate().context("generating a key")?;
            let mut params = CertificateParams::new(names)?;
            params.distinguished_name.push(DnType::CommonName, &name);
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = params
                .signed_by(&key, &ca, &ca_key)
                .with_context(|| format!("signing {name}'s certificate"))?;
            let service_dir = dir.join(service);
            std::fs::create_dir_all(&service_dir)
                .with_context(|| format!("creating {}", service_dir.display()))?;
            let files = Files {
                cert: service_dir.join("tls.crt"),
                key: service_dir.join("tls.key"),
                ca: service_dir.join("ca.crt"),
            };
            write(&files.cert, &cert.pem())?;
            write(&files.key, &key.serialize_pem())?;
            write(&files.ca, &ca.pem())?;
            Ok(files)
        })
        .collect()
}

/// Writes `text` beside `path`, then renames it into place: a service
/// reading the files while they are replaced sees the old or the new one,
/// never half of one.
fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let partial = path.with_extension("partial");
    // Keys are secrets: only this user reads any of the files.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}
