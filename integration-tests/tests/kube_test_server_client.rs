//! `kube::Client` (kube 5) and its runtime watchers against the Kubernetes
//! API test server: the semantics controllers depend on.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use local_apiserver::{Config, LocalApiServer};
use serde_json::json;
use tokio_stream::StreamExt;

async fn start(config: Config) -> (LocalApiServer, kube::Client) {
    let server = LocalApiServer::start(config).await.expect("server starts");
    let cfg = kube::Config::new(server.url().parse().expect("url"));
    let client = karpenter_kube::client(cfg).expect("client");
    (server, client)
}

fn cm(name: &str, data: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "a"}}, "data": {"k": data}}),
    )
    .expect("configmap")
}

#[tokio::test]
async fn crud_resource_versions_conflicts_and_generate_name() {
    let (_s, client) = start(Config::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let a = api
        .create(&PostParams::default(), &cm("a", "1"))
        .await
        .expect("create");
    let rv1: u64 = a
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default()
        .parse()
        .expect("numeric rv");
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    let dup = api
        .create(&PostParams::default(), &cm("a", "1"))
        .await
        .unwrap_err();
    assert!(
        matches!(dup, kube::Error::Api(ref e) if e.code == 409 && e.reason == "AlreadyExists"),
        "{dup:?}"
    );

    let mut b = a.clone();
    b.data = Some(BTreeMap::from([("k".to_string(), "2".to_string())]));
    let b = api
        .replace("a", &PostParams::default(), &b)
        .await
        .expect("update");
    let rv2: u64 = b
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default()
        .parse()
        .expect("numeric rv");
    assert!(rv2 > rv1);
    // The stale copy loses.
    let stale = api
        .replace("a", &PostParams::default(), &a)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, kube::Error::Api(ref e) if e.code == 409 && e.reason == "Conflict"),
        "{stale:?}"
    );

    let mut g = cm("", "x");
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = api
        .create(&PostParams::default(), &g)
        .await
        .expect("generateName");
    let name = g.metadata.name.unwrap_or_default();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    api.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = api.get("a").await.unwrap_err();
    assert!(
        matches!(gone, kube::Error::Api(ref e) if e.code == 404),
        "{gone:?}"
    );
}

#[tokio::test]
async fn list_selectors_and_pagination() {
    let (_s, client) = start(Config::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for i in 0..25 {
        let mut c = cm(&format!("c{i:02}"), "v");
        if i % 5 == 0 {
            c.metadata.labels = Some(BTreeMap::from([("app".to_string(), "b".to_string())]));
        }
        api.create(&PostParams::default(), &c)
            .await
            .expect("create");
    }
    let b = api
        .list(&ListParams::default().labels("app=b"))
        .await
        .expect("list");
    assert_eq!(b.items.len(), 5);
    let not_b = api
        .list(&ListParams::default().labels("app!=b"))
        .await
        .expect("list");
    assert_eq!(not_b.items.len(), 20);
    let one = api
        .list(&ListParams::default().fields("metadata.name=c07"))
        .await
        .expect("list");
    assert_eq!(one.items.len(), 1);

    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(10);
    loop {
        let page = api.list(&lp).await.expect("page");
        seen.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 25);
    assert_eq!(seen.first().map(String::as_str), Some("c00"));
    assert_eq!(seen.last().map(String::as_str), Some("c24"));

    // Pods by node.
    let pods: Api<Pod> = Api::default_namespaced(client);
    for (name, node) in [("p1", "n1"), ("p2", "n2"), ("p3", "n1")] {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})).expect("pod");
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    let on_n1 = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("list");
    assert_eq!(on_n1.items.len(), 2);
    let pending = pods
        .list(&ListParams::default().fields("status.phase=Pending"))
        .await
        .expect("list");
    assert_eq!(pending.items.len(), 3);
}

#[tokio::test]
async fn watch_resumes_sends_bookmarks_and_410_past_the_history() {
    let (_s, client) = start(Config {
        history: 20,
        bookmark_interval: Duration::from_millis(200),
        ..Config::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let first = api
        .create(&PostParams::default(), &cm("w0", "0"))
        .await
        .expect("create");
    let rv0 = first.metadata.resource_version.clone().unwrap_or_default();
    api.create(&PostParams::default(), &cm("w1", "1"))
        .await
        .expect("create");
    api.delete("w0", &DeleteParams::default())
        .await
        .expect("delete");

    let wp = WatchParams {
        bookmarks: true,
        ..WatchParams::default()
    }
    .timeout(5);
    let stream = api.watch(&wp, &rv0).await.expect("watch");
    let mut stream = std::pin::pin!(stream);
    let mut kinds = Vec::new();
    while let Some(ev) = stream.next().await {
        match ev.expect("event") {
            WatchEvent::Added(c) => {
                kinds.push(format!("ADDED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Deleted(c) => {
                kinds.push(format!("DELETED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Modified(c) => {
                kinds.push(format!("MODIFIED {}", c.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Bookmark(b) => {
                kinds.push("BOOKMARK".into());
                assert!(b.metadata.resource_version.parse::<u64>().is_ok());
                break;
            }
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(kinds, ["ADDED w1", "DELETED w0", "BOOKMARK"]);

    for i in 0..30 {
        api.create(&PostParams::default(), &cm(&format!("x{i}"), "v"))
            .await
            .expect("create");
    }
    let stream = api
        .watch(&WatchParams::default(), &rv0)
        .await
        .expect("watch");
    let mut stream = std::pin::pin!(stream);
    match stream.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test]
async fn status_subresource_generation_and_server_side_apply() {
    let (_s, client) = start(Config::default()).await;
    let deploys: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::default_namespaced(client.clone());
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"team": "a"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        "status": {"replicas": 99},
    });
    let pp = PatchParams::apply("adapter");
    let created = deploys
        .patch("d", &pp, &Patch::Apply(&d))
        .await
        .expect("apply creates");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.status.is_none(),
        "status is ignored on the main resource"
    );
    let mf = created.metadata.managed_fields.clone().unwrap_or_default();
    assert!(
        mf.iter()
            .any(|m| m.manager.as_deref() == Some("adapter")
                && m.operation.as_deref() == Some("Apply")),
        "{mf:?}"
    );

    // Status writes do not bump generation; spec writes do.
    let s = deploys
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2}})),
        )
        .await
        .expect("status");
    assert_eq!(s.metadata.generation, Some(1));
    assert_eq!(s.status.and_then(|s| s.replicas), Some(2));
    let l = deploys
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect("labels");
    assert_eq!(l.metadata.generation, Some(1));

    // Another manager changing an applied field conflicts, unless forced.
    let other = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 5}});
    let err = deploys
        .patch("d", &PatchParams::apply("other"), &Patch::Apply(&other))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref e) if e.code == 409 && e.message.contains("conflict with \"adapter\"") && e.message.contains(".spec.replicas")),
        "{err:?}"
    );
    let forced = deploys
        .patch(
            "d",
            &PatchParams::apply("other").force(),
            &Patch::Apply(&other),
        )
        .await
        .expect("forced");
    assert_eq!(forced.spec.replicas, Some(5));
    assert_eq!(forced.metadata.generation, Some(2));

    // The applier drops a label it no longer applies.
    let mut d2 = d.clone();
    d2["metadata"]["labels"] = json!({});
    d2["spec"].as_object_mut().map(|s| s.remove("replicas"));
    let after = deploys
        .patch("d", &pp, &Patch::Apply(&d2))
        .await
        .expect("reapply");
    let labels = after.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key("team"), "{labels:?}");
    assert_eq!(
        labels.get("x").map(String::as_str),
        Some("y"),
        "labels set by others stay"
    );
    assert_eq!(after.spec.replicas, Some(5));
}

#[tokio::test]
async fn finalizers_and_owner_reference_garbage_collection() {
    let (_s, client) = start(Config::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let owner = api
        .create(&PostParams::default(), &cm("owner", "o"))
        .await
        .expect("owner");
    let uid = owner.metadata.uid.clone().unwrap_or_default();
    for name in ["dep1", "dep2"] {
        let mut c = cm(name, "d");
        c.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: uid.clone(),
                ..Default::default()
            },
        ]);
        if name == "dep2" {
            c.metadata.finalizers = Some(vec!["test.io/hold".into()]);
        }
        api.create(&PostParams::default(), &c)
            .await
            .expect("dependent");
    }
    api.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    assert!(
        api.get_opt("dep1").await.expect("get").is_none(),
        "dependent collected"
    );
    let held = api.get("dep2").await.expect("held by finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());
    api.patch(
        "dep2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert!(api.get_opt("dep2").await.expect("get").is_none());
}

#[tokio::test]
async fn runtime_watcher_follows_creates_updates_and_deletes() {
    let (_s, client) = start(Config {
        bookmark_interval: Duration::from_millis(300),
        ..Config::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let (reader, writer) = kube::runtime::reflector::store::<ConfigMap>();
    let stream = kube::runtime::reflector(writer, watcher(api.clone(), watcher::Config::default()));
    let events = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = events.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut inits = 0;
        while let Some(ev) = stream.next().await {
            match ev.expect("no watcher errors") {
                watcher::Event::Init => inits += 1,
                watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                _ => {}
            }
            assert!(inits <= 1, "the watcher relisted");
        }
    });
    reader.wait_until_ready().await.expect("ready");
    for i in 0..50 {
        api.create(&PostParams::default(), &cm(&format!("r{i}"), "v"))
            .await
            .expect("create");
    }
    for i in 0..50 {
        api.patch(
            &format!("r{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .expect("patch");
    }
    for i in 0..25 {
        api.delete(&format!("r{i}"), &DeleteParams::default())
            .await
            .expect("delete");
    }
    for _ in 0..100 {
        if events.load(std::sync::atomic::Ordering::Relaxed) >= 125 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(events.load(std::sync::atomic::Ordering::Relaxed), 125);
    assert_eq!(reader.state().len(), 25);
    assert!(
        reader
            .state()
            .iter()
            .all(|c| c.data.as_ref().and_then(|d| d.get("k")).map(String::as_str) == Some("w"))
    );
    task.abort();
}

#[tokio::test]
async fn state_file_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state.json");
    let config = || Config {
        state_file: Some(state.clone()),
        ..Config::default()
    };
    let (server, client) = start(config()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("kept", "v"))
        .await
        .expect("create");
    server.stop().await.expect("stop saves");

    let (_server, client) = start(config()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let kept = api.get("kept").await.expect("loaded from the state file");
    assert_eq!(
        kept.data.unwrap_or_default().get("k").map(String::as_str),
        Some("v")
    );
}

#[tokio::test]
async fn streaming_list_and_paged_list_watchers_see_existing_objects() {
    let (_s, client) = start(Config::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for i in 0..7 {
        api.create(&PostParams::default(), &cm(&format!("s{i}"), "v"))
            .await
            .expect("create");
    }
    for config in [
        watcher::Config::default().streaming_lists(),
        watcher::Config::default().page_size(3),
    ] {
        let stream = watcher(api.clone(), config);
        let mut stream = std::pin::pin!(stream);
        let mut names = Vec::new();
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await
                .expect("initial list completes")
                .expect("stream open")
                .expect("no error");
            match ev {
                watcher::Event::InitApply(c) => names.push(c.metadata.name.unwrap_or_default()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(names.len(), 7, "{names:?}");
    }
}

#[tokio::test]
async fn a_crd_that_serves_no_version_leaves_discovery_working() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (_s, client) = start(Config::default()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": false, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}}
            }]
        }
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("a CRD serving nothing is accepted");
    let groups = client
        .list_api_groups()
        .await
        .expect("/apis answers after the CRD");
    assert!(
        groups.groups.iter().all(|g| g.name != "example.com"),
        "a group with no served version is not listed"
    );
    let discovery = kube::discovery::Discovery::new(client)
        .run()
        .await
        .expect("discovery of every group works");
    assert!(discovery.groups().all(|g| g.name() != "example.com"));
}

#[tokio::test]
async fn seed_001_as_written_reads_back_typed_scales_and_evicts() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::{DynamicObject, EvictParams};
    let (_s, client) = start(Config::default()).await;
    // The seed's YAML, integers and all, as a dynamic object.
    let text = std::fs::read_to_string(
        integration_tests::repo_root().join("testdata/seeds/001-deployment-app.yaml"),
    )
    .expect("seed 001");
    let object: DynamicObject = serde_yaml::from_str(&text).expect("yaml");
    let resource = kube::api::ApiResource::erase::<Deployment>(&());
    Api::<DynamicObject>::namespaced_with(client.clone(), "default", &resource)
        .create(&PostParams::default(), &object)
        .await
        .expect("created as written");
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let typed = deployments
        .get("app")
        .await
        .expect("reads back as a typed Deployment");
    let requests = typed
        .spec
        .template
        .spec
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.resources)
        .and_then(|r| r.requests)
        .unwrap_or_default();
    assert_eq!(requests.get("cpu"), Some(&Quantity("1".into())));
    assert_eq!(requests.get("memory"), Some(&Quantity("2Gi".into())));
    deployments
        .patch_scale(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("scaled through the subresource");
    let scale = deployments.get_scale("app").await.expect("scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(5));

    let pods: Api<Pod> = Api::default_namespaced(client);
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "evictee"}, "spec": {"containers": [{"name": "c", "image": "pause:3.7"}]}}),
    )
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    pods.evict("evictee", &EvictParams::default())
        .await
        .expect("evicted");
    assert!(
        pods.get_opt("evictee").await.expect("get").is_none(),
        "an unbound pod goes at once"
    );
}

/// What a chart installs besides workloads: RBAC and network policies are
/// stored and read back, Services get a cluster IP that updates keep, and
/// every request is logged as RBAC sees it, by client.
#[tokio::test]
async fn rbac_network_policies_cluster_ips_and_the_call_log() {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    let (server, client) = start(Config::default()).await;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "karpenter-adapter"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let read = roles.get("karpenter-adapter").await.unwrap();
    assert_eq!(read.rules.unwrap()[0].verbs, ["get", "list", "watch"]);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "adapter"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "adapter"},
        "subjects": [{"kind": "ServiceAccount", "name": "adapter", "namespace": "default"}]
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), "default");
    let policy: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "scheduler"},
        "spec": {"podSelector": {"matchLabels": {"app": "scheduler"}},
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "adapter"}}}]}]}
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    assert_eq!(
        policies
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "scheduler"},
        "spec": {"selector": {"app": "scheduler"}, "ports": [{"name": "grpc", "port": 50051}]}
    }))
    .unwrap();
    let created = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let ip = created
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("a cluster IP");
    assert!(ip.starts_with("10."), "{ip}");
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().cluster_ip = None;
    changed.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    let updated = services
        .replace("scheduler", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(
        updated.spec.unwrap().cluster_ip.as_deref(),
        Some(ip.as_str()),
        "updates keep it"
    );

    let calls = server.api_calls();
    let seen = |verb: &str, resource: &str| {
        calls
            .iter()
            .any(|c| c.verb == verb && c.resource == resource)
    };
    assert!(
        seen("create", "clusterroles") && seen("get", "clusterroles"),
        "{calls:?}"
    );
    assert!(
        seen("list", "networkpolicies") && seen("update", "services"),
        "{calls:?}"
    );
    assert!(
        calls.iter().any(|c| c.resource == "rolebindings"
            && c.namespace == "default"
            && c.group == "rbac.authorization.k8s.io"),
        "{calls:?}"
    );
}

/// The error a call got: its code, reason, message and the fields its
/// causes name.
fn refusal(error: kube::Error) -> (u16, String, String, Vec<String>) {
    match error {
        kube::Error::Api(status) => {
            let fields = status
                .details
                .as_ref()
                .map(|d| d.causes.iter().map(|c| c.field.clone()).collect())
                .unwrap_or_default();
            (
                status.code,
                status.reason.clone(),
                status.message.clone(),
                fields,
            )
        }
        other => panic!("not an API error: {other:?}"),
    }
}

/// kube-apiserver refuses a PUT of a custom resource that names no
/// resourceVersion (custom resources do not allow unconditional update).
#[tokio::test]
async fn a_custom_resource_is_never_updated_unconditionally() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let (_s, client) = start(Config::default()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_api::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    let pools: Api<karpenter_api::NodePool> = Api::all(client.clone());
    let pool: karpenter_api::NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []}}}
    }))
    .expect("pool");
    let created = pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("created");
    let mut unconditional = created.clone();
    unconditional.metadata.resource_version = None;
    let (code, reason, message, fields) = refusal(
        pools
            .replace("default", &PostParams::default(), &unconditional)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "nodepools.karpenter.sh \"default\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
    );
    assert_eq!(fields, ["metadata.resourceVersion"]);
    pools
        .replace("default", &PostParams::default(), &created)
        .await
        .expect("a PUT naming its version is accepted");
}

/// Label keys and values, node taints unique by key and effect, and a
/// node's providerID set once: refused with kube-apiserver's messages.
#[tokio::test]
async fn labels_taints_and_provider_ids_are_validated_as_kube_apiserver_does() {
    use k8s_openapi::api::core::v1::Node;

    let (_s, client) = start(Config::default()).await;
    let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let bad: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "bad", "labels": {"bad key!": "ok"}}}))
            .expect("configmap");
    let (code, _, message, fields) =
        refusal(maps.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(
        message.starts_with("ConfigMap \"bad\" is invalid: metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters"),
        "{message}"
    );
    assert_eq!(fields, ["metadata.labels"]);
    let bad: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "bad", "labels": {"app": "has spaces"}}}),
    )
    .expect("configmap");
    let (code, _, message, _) =
        refusal(maps.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(
        message.contains("a valid label must be an empty string"),
        "{message}"
    );
    let labelled = maps
        .create(&PostParams::default(), &cm("good", "1"))
        .await
        .expect("valid labels");
    let (code, _, _, _) = refusal(
        maps.patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"-x": "y"}}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 422, "a patch is validated too");
    assert!(labelled.metadata.labels.is_some());

    let nodes: Api<Node> = Api::all(client.clone());
    let duplicated: Node = serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"},
                            {"key": "a", "value": "v", "effect": "NoSchedule"}]}
    }))
    .expect("node");
    let (code, _, message, fields) = refusal(
        nodes
            .create(&PostParams::default(), &duplicated)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(
        message.ends_with("taints must be unique by key and effect pair"),
        "{message}"
    );
    assert_eq!(fields, ["metadata.taints[1]"], "kube-apiserver's path");
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": {}})).expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    let set = |id: &str| Patch::Merge(json!({"spec": {"providerID": id}}));
    nodes
        .patch("n", &PatchParams::default(), &set("kwok://n"))
        .await
        .expect("from \"\" to valid");
    let (code, _, message, fields) = refusal(
        nodes
            .patch("n", &PatchParams::default(), &set("kwok://other"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "Node \"n\" is invalid: spec.providerID: Forbidden: node updates may not change providerID except from \"\" to valid"
    );
    assert_eq!(fields, ["spec.providerID"]);
}

/// A pod's spec is fixed once created, as kube-apiserver's
/// `ValidatePodUpdate` has it: images, added tolerations and
/// activeDeadlineSeconds may change; anything else (the node it runs on,
/// its resources, its containers) is 422 Forbidden on `spec`, and the
/// node a pod runs on is set only by its binding.
#[tokio::test]
async fn a_pods_spec_changes_only_where_kube_apiserver_lets_it() {
    use k8s_openapi::api::core::v1::Pod;

    let (_s, client) = start(Config::default()).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "pause:3.9",
                                 "resources": {"requests": {"cpu": "1"}}}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("created");
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"containers": [{"name": "c", "image": "pause:3.10"}]}})),
    )
    .await
    .expect("an image may change");
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"tolerations": [{"key": "k", "operator": "Exists"}],
                                      "activeDeadlineSeconds": 60},
                             "metadata": {"labels": {"relabelled": "yes"}}}),
        ),
    )
    .await
    .expect("tolerations added, a deadline set, labels changed");
    for (what, patch) in [
        ("the node", json!({"spec": {"nodeName": "elsewhere"}})),
        (
            "resources",
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}),
        ),
        (
            "the restart policy",
            json!({"spec": {"restartPolicy": "Never"}}),
        ),
    ] {
        let (code, reason, message, fields) = refusal(
            pods.patch("p", &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .unwrap_err(),
        );
        assert_eq!(
            (code, reason.as_str()),
            (422, "Invalid"),
            "{what}: {message}"
        );
        assert!(
            message.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"),
            "{what}: {message}"
        );
        assert_eq!(fields, ["spec"], "{what}");
    }
    // A toleration removed gets only the tolerations' own error, as
    // ValidatePodUpdate checks them apart from the rest of the spec.
    let (code, _, message, fields) = refusal(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"tolerations": []}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"),
        "{message}"
    );
    assert_eq!(fields, ["spec.tolerations"]);
    let stored = pods.get("p").await.expect("pod");
    let spec = stored.spec.expect("spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some("pause:3.10"));
    assert_eq!(spec.node_name, None, "nothing refused was half-applied");
    // The added toleration, with the two DefaultTolerationSeconds adds.
    let tolerations = spec.tolerations.unwrap_or_default();
    assert!(
        tolerations.iter().any(|t| t.key.as_deref() == Some("k")),
        "{tolerations:?}"
    );
    // Status writes do not touch the spec rules.
    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("status");
}

/// A paged list is one consistent snapshot, as etcd serves it: later pages
/// show the objects as they were when the first page was listed, whatever
/// was created, changed or deleted since. A continue token older than the
/// server's history is 410 Expired with a token that goes on, at the
/// latest version, from where it stopped.
#[tokio::test]
async fn a_paged_list_is_one_snapshot_and_an_expired_token_is_410() {
    let (_s, client) = start(Config {
        history: 20,
        ..Config::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for i in 0..6 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "v1"))
            .await
            .expect("create");
    }
    let first = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    let snapshot = first.metadata.resource_version.clone();
    let token = first.metadata.continue_.clone().expect("more");
    // Changes after the first page, all in the pages still to come.
    api.patch(
        "c3",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .expect("changed");
    api.delete("c4", &Default::default())
        .await
        .expect("deleted");
    api.create(&PostParams::default(), &cm("c2a", "new"))
        .await
        .expect("created");
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut params = ListParams::default().limit(2).continue_token(&token);
    loop {
        let page = api.list(&params).await.expect("next page");
        assert_eq!(
            page.metadata.resource_version, snapshot,
            "every page carries the first page's version"
        );
        seen.extend(page.items.iter().map(|c| {
            (
                c.metadata.name.clone().unwrap_or_default(),
                c.data
                    .as_ref()
                    .and_then(|d| d.get("k"))
                    .cloned()
                    .unwrap_or_default(),
            )
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params = ListParams::default().limit(2).continue_token(&next),
            None => break,
        }
    }
    let expected: Vec<(String, String)> = ["c2", "c3", "c4", "c5"]
        .iter()
        .map(|n| ((*n).to_owned(), "v1".to_owned()))
        .collect();
    assert_eq!(seen, expected, "the pages as of the first one");

    // Past the history (20 events): the token expired.
    let again = api
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    let old_token = again.metadata.continue_.clone().expect("more");
    for i in 0..25 {
        api.patch(
            "c0",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": format!("w{i}")}})),
        )
        .await
        .expect("write");
    }
    let expired = api
        .list(&ListParams::default().limit(2).continue_token(&old_token))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = expired else {
        panic!("not an API error: {expired:?}");
    };
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(
        status.message.starts_with("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response"),
        "{}",
        status.message
    );
    // The Status carries the inconsistent continuation in its metadata.
    let inconsistent = raw_status_continue(&client, &old_token).await;
    let rest = api
        .list(
            &ListParams::default()
                .limit(10)
                .continue_token(&inconsistent),
        )
        .await
        .expect("the remainder at the latest version");
    let names: Vec<String> = rest
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["c2", "c2a", "c3", "c5"],
        "from where the old token stopped"
    );
}

/// `metadata.continue` of the Status a list with `token` is refused with.
async fn raw_status_continue(client: &kube::Client, token: &str) -> String {
    let request = http::Request::get(format!(
        "/api/v1/namespaces/default/configmaps?limit=2&continue={token}"
    ))
    .body(Vec::new())
    .expect("request");
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("response");
    assert_eq!(response.status(), 410);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    let status: serde_json::Value = serde_json::from_slice(&body).expect("status");
    status["metadata"]["continue"]
        .as_str()
        .expect("a continue token in the Status")
        .to_owned()
}

/// A PodDisruptionBudget counts as the disruption controller does: with
/// `maxUnavailable` (or a percentage) the pods expected are the scale of
/// their controllers, not the pods that happen to exist, so a ReplicaSet
/// of three with one pod missing allows no eviction; with an integer
/// `minAvailable` they are the pods there are. An eviction is recorded in
/// `status.disruptedPods`.
#[tokio::test]
async fn a_budget_expects_its_controllers_scale_and_records_evictions() {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::EvictParams;

    let (_s, client) = start(Config::default()).await;
    let sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::default_namespaced(client.clone());
    let set = sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "c", "image": "i"}]}}}
            }))
            .expect("replicaset"),
        )
        .await
        .expect("created");
    let uid = set.metadata.uid.clone().expect("uid");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    // Two of the three pods exist, both ready.
    for name in ["web-a", "web-b"] {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": "web"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                  "name": "web", "uid": uid, "controller": true}]},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}
            }))
            .expect("pod"),
        )
        .await
        .expect("pod");
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .expect("ready");
    }
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    budgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "web"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
            }))
            .expect("pdb"),
        )
        .await
        .expect("pdb");
    let status = budgets
        .get("web")
        .await
        .expect("pdb")
        .status
        .expect("status");
    assert_eq!(
        (
            status.expected_pods,
            status.desired_healthy,
            status.current_healthy,
            status.disruptions_allowed
        ),
        (Some(3), Some(2), Some(2), Some(0)),
        "three expected by the ReplicaSet's scale, two healthy: nothing may go"
    );
    // The 429 reaches the caller at once (the client does not retry it
    // for minutes behind the caller's back).
    let refused = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        pods.evict("web-a", &EvictParams::default()),
    )
    .await
    .expect("the refusal comes back, not retried inside the client")
    .unwrap_err();
    let kube::Error::Api(refused) = refused else {
        panic!("not an API error: {refused:?}");
    };
    assert_eq!(refused.code, 429, "{refused:?}");

    // With an integer minAvailable the pods there are are expected.
    budgets
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxUnavailable": null, "minAvailable": 1}})),
        )
        .await
        .expect("changed");
    let status = budgets
        .get("web")
        .await
        .expect("pdb")
        .status
        .expect("status");
    assert_eq!(
        (
            status.expected_pods,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (Some(2), Some(1), Some(1))
    );
    pods.evict("web-a", &EvictParams::default())
        .await
        .expect("one may go");
    let status = budgets
        .get("web")
        .await
        .expect("pdb")
        .status
        .expect("status");
    assert!(
        status
            .disrupted_pods
            .as_ref()
            .is_some_and(|d| d.contains_key("web-a")),
        "the eviction is recorded: {status:?}"
    );
    assert_eq!(status.disruptions_allowed, Some(0), "{status:?}");
}
