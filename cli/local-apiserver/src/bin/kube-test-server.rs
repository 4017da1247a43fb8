//! `kube-test-server`: the name `local-apiserver` had before it shipped in
//! `karpctl up`, kept so scripts that start it by that name go on working.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    local_apiserver::cli::run().await
}
