//! 10,000 objects through the Kubernetes API test server while a `kube`
//! runtime reflector watches: every object is created, updated and deleted
//! through `kube::Client`; the reflector must see every event without a
//! relist or an error. Prints writes/s, watch events/s and peak memory.
//!
//! ```sh
//! cargo bench -p integration-tests --bench kube_watch [-- OBJECTS]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use local_apiserver::{Config, LocalApiServer};
use serde_json::json;
use tokio_stream::StreamExt;

const CONCURRENCY: usize = 16;

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn phase<F, Fut>(
    name: &str,
    n: usize,
    seen: &AtomicUsize,
    want_seen: usize,
    f: F,
) -> anyhow::Result<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        if set.len() >= CONCURRENCY
            && let Some(r) = set.join_next().await
        {
            r??;
        }
        set.spawn(f(i));
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let writes = start.elapsed();
    while seen.load(Ordering::Relaxed) < want_seen {
        if start.elapsed() > Duration::from_secs(120) {
            anyhow::bail!(
                "{name}: the watcher saw {} of {want_seen} events",
                seen.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let all = start.elapsed();
    println!(
        "{name:<8} {n} objects: writes {:>7.0} objects/s, watched in {:>6.0} ms ({:>7.0} events/s)",
        n as f64 / writes.as_secs_f64(),
        all.as_secs_f64() * 1000.0,
        n as f64 / all.as_secs_f64()
    );
    Ok(all)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let server = LocalApiServer::start(Config {
        bookmark_interval: Duration::from_secs(1),
        ..Config::default()
    })
    .await?;
    let client = karpenter_kube::client(kube::Config::new(server.url().parse()?))?;
    let api: Api<ConfigMap> = Api::default_namespaced(client);

    let (reader, writer) = kube::runtime::reflector::store::<ConfigMap>();
    let seen = Arc::new(AtomicUsize::new(0));
    let inits = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let (s, i, e) = (seen.clone(), inits.clone(), errors.clone());
    let stream = kube::runtime::reflector(writer, watcher(api.clone(), watcher::Config::default()));
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Init) => {
                    i.fetch_add(1, Ordering::Relaxed);
                }
                Ok(watcher::Event::Apply(_)) | Ok(watcher::Event::Delete(_)) => {
                    s.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(err) => {
                    eprintln!("watcher error: {err}");
                    e.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    reader.wait_until_ready().await?;

    let total = Instant::now();
    let a = api.clone();
    phase("create", n, &seen, n, move |i| {
        let a = a.clone();
        async move {
            let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:05}"), "labels": {"bench": "watch"}}, "data": {"v": "0"}}))?;
            a.create(&PostParams::default(), &cm).await?;
            Ok(())
        }
    })
    .await?;
    let a = api.clone();
    phase("update", n, &seen, 2 * n, move |i| {
        let a = a.clone();
        async move {
            a.patch(
                &format!("cm-{i:05}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": "1"}})),
            )
            .await?;
            Ok(())
        }
    })
    .await?;
    let a = api.clone();
    phase("delete", n, &seen, 3 * n, move |i| {
        let a = a.clone();
        async move {
            a.delete(&format!("cm-{i:05}"), &DeleteParams::default())
                .await?;
            Ok(())
        }
    })
    .await?;
    let elapsed = total.elapsed();
    let relists = inits.load(Ordering::Relaxed).saturating_sub(1);
    let errs = errors.load(Ordering::Relaxed);
    println!(
        "total    {} writes in {:.2} s: {:.0} objects/s end to end; reflector holds {} objects; relists {relists}, watcher errors {errs}; peak RSS {:.1} MiB (server, client and reflector in one process)",
        3 * n,
        elapsed.as_secs_f64(),
        (3 * n) as f64 / elapsed.as_secs_f64(),
        reader.state().len(),
        peak_rss_mib()
    );
    server.stop().await?;
    if relists > 0 || errs > 0 || !reader.state().is_empty() {
        anyhow::bail!("the watcher relisted or failed");
    }
    Ok(())
}
