//! NodeOverlay end to end (Karpenter's `nodeoverlay` suite, gate
//! `NodeOverlay`, on provider-kwok): capacity an overlay adds decides which
//! instance type a pod gets, and every overlay reports whether it applies.
//! (An overlaid price orders the options the scheduler weighs; which option
//! of a claim is launched stays the provider's choice: overlays change no
//! bill, as upstream's.)

mod common;

use std::time::Duration;

use common::{Cluster, eventually};
use karpenter_api::{ConditionsExt as _, NodeOverlay};
use kube::api::{Api, PostParams};
use serde_json::json;

const SMALL: &str = "c-2x-amd64-linux";
const LARGE: &str = "c-4x-amd64-linux";

async fn create_overlay(cluster: &Cluster, name: &str, spec: serde_json::Value) {
    let overlay: NodeOverlay = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("overlay");
    Api::<NodeOverlay>::all(cluster.client.clone())
        .create(&PostParams::default(), &overlay)
        .await
        .expect("overlay created");
}

/// `(ValidationSucceeded status, its reason, Ready status)` of an overlay.
async fn overlay_status(cluster: &Cluster, name: &str) -> Option<(String, String, String)> {
    let overlay = Api::<NodeOverlay>::all(cluster.client.clone())
        .get(name)
        .await
        .ok()?;
    let conditions = overlay.status?.conditions;
    let validation = conditions.condition("ValidationSucceeded")?;
    let ready = conditions.condition("Ready")?;
    Some((
        format!("{:?}", validation.status),
        validation.reason.clone(),
        format!("{:?}", ready.status),
    ))
}

fn by_type(types: &[&str]) -> serde_json::Value {
    json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlaid_capacity_picks_the_instance_type_and_each_overlay_reports_its_status() {
    let cluster = Cluster::start().await;
    let settings = cluster.settings(&["--feature-gates", "NodeOverlay=true"]);
    let _adapter = cluster.adapter_with(settings, common::test_timing()).await;
    // The larger type has a device its provider does not report.
    let fuse = json!({"weight": 10, "requirements": by_type(&[LARGE]),
                      "capacity": {"smarter-devices/fuse": "1"}});
    create_overlay(&cluster, "fuse", fuse).await;
    // Two of one weight on the same offerings: the later name applies,
    // the other conflicts and applies nowhere.
    let rival = |adjustment: &str| json!({"weight": 5, "requirements": by_type(&[SMALL]), "priceAdjustment": adjustment});
    create_overlay(&cluster, "rival-a", rival("-100%")).await;
    create_overlay(&cluster, "rival-b", rival("+10%")).await;
    cluster
        .node_pool(Cluster::pool(
            "default",
            json!({"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [SMALL, LARGE]}]}}),
            json!({"disruption": {"consolidateAfter": "Never"}}),
        ))
        .await;
    let device = json!({"containers": [{"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
        "resources": {"requests": {"cpu": "500m", "smarter-devices/fuse": "1"},
                      "limits": {"smarter-devices/fuse": "1"}}}]});
    cluster.deployment("fuse", 1, "500m", device).await;

    eventually("a claim for the pod", Duration::from_secs(60), || async {
        !cluster.claims().await.is_empty()
    })
    .await;
    let claims = cluster.claims().await;
    let types: Vec<String> = claims[0]
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == "node.kubernetes.io/instance-type")
        .flat_map(|r| r.values.clone())
        .collect();
    assert_eq!(types, [LARGE], "only the overlaid type has the device");
    let annotations = claims[0].metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("karpenter.sh/capacity-overlay-applied")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(annotations.get("karpenter.sh/price-overlay-applied"), None);
    // provider-kwok gives the node the device, as a device plugin would
    // publish it, so the pod is bound there.
    eventually("the pod running", Duration::from_secs(60), || {
        cluster.running("fuse", 1)
    })
    .await;

    let applied = Some((
        "True".to_owned(),
        "ValidationSucceeded".to_owned(),
        "True".to_owned(),
    ));
    let conflict = Some((
        "False".to_owned(),
        "Conflict".to_owned(),
        "False".to_owned(),
    ));
    // The statuses settle once the pool is Ready and every overlay is seen.
    eventually("each overlay's status", Duration::from_secs(30), || async {
        overlay_status(&cluster, "fuse").await == applied
            && overlay_status(&cluster, "rival-b").await == applied
            && overlay_status(&cluster, "rival-a").await == conflict
    })
    .await;
}
