//! A client reaches local-apiserver over HTTPS, through a kubeconfig that
//! trusts its CA and as a pod would, through a service-account directory.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use local_apiserver::{Config, LocalApiServer};

async fn tls_server(dir: &std::path::Path) -> LocalApiServer {
    LocalApiServer::start(Config {
        tls: true,
        kubeconfig: Some(dir.join("kubeconfig")),
        ..Config::default()
    })
    .await
    .expect("server starts")
}

async fn round_trip(client: kube::Client, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("cm");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("created over HTTPS");
    assert!(api.get(name).await.is_ok());
}

#[tokio::test]
async fn a_kubeconfig_with_the_servers_ca_works_over_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = tls_server(dir.path()).await;
    assert!(server.url().starts_with("https://"));
    let config = karpenter_kube::config(&karpenter_kube::KubeArgs {
        kubeconfig: Some(dir.path().join("kubeconfig")),
    })
    .await
    .expect("kubeconfig read")
    .expect("a cluster");
    round_trip(
        karpenter_kube::client(config).expect("client"),
        "via-kubeconfig",
    )
    .await;
}

#[tokio::test]
async fn a_service_account_directory_works_in_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = tls_server(dir.path()).await;
    let account = dir.path().join("serviceaccount");
    std::fs::create_dir(&account).expect("mkdir");
    std::fs::copy(dir.path().join("ca.crt"), account.join("ca.crt")).expect("ca");
    std::fs::write(account.join("token"), "local-apiserver").expect("token");
    std::fs::write(account.join("namespace"), "default\n").expect("namespace");
    let url =
        karpenter_kube::service_url("127.0.0.1", &server.addr.port().to_string()).expect("url");
    let config = karpenter_kube::in_cluster(url, &account).expect("in-cluster config");
    assert_eq!(config.default_namespace, "default");
    round_trip(
        karpenter_kube::client(config).expect("client"),
        "via-service-account",
    )
    .await;
}

#[tokio::test]
async fn a_missing_token_or_ca_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = karpenter_kube::service_url("10.0.0.1", "443").expect("url");
    let error = karpenter_kube::in_cluster(url, dir.path())
        .expect_err("no CA")
        .to_string();
    assert!(error.contains("ca.crt"), "{error}");
    assert!(karpenter_kube::service_url("10.0.0.1", "https").is_err());
}
