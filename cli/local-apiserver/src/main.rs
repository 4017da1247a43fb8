//! `local-apiserver`: a Kubernetes API server in memory for tests and the
//! local demo. Writes a kubeconfig that `kubectl` uses unchanged.
//!
//! ```sh
//! local-apiserver --port 6443 --kubeconfig /tmp/kubeconfig
//! kubectl --kubeconfig /tmp/kubeconfig apply -f deploy/crds/
//! ```

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    local_apiserver::cli::run().await
}
