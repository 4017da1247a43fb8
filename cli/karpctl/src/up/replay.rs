//! Seed scenarios played against a `karpctl up` cluster, with a timeline of
//! what Karpenter did and how long each step took.
//!
//! `seed-001` is the article of seed 001: three existing nodes (with the
//! agents that already run on them), the Provisioner it shows converted to
//! a NodePool (on-demand, one 2-vCPU/16-GiB instance type as r5.large is,
//! limits 10 CPU / 80Gi), and a deployment of 1 CPU / 2Gi pods scaled from
//! 1 to 5 replicas: two more fit on the existing nodes, three wait for new
//! ones.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::{NodeClaim, NodePool};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The scenarios `--replay` knows.
pub const SCENARIOS: &[&str] = &["seed-001"];

const APP: &str = "app";
const SELECTOR: &str = "app.kubernetes.io/name=app";
const SCALE_OUT_WITHIN: Duration = Duration::from_secs(180);

/// The three nodes of the article, with what already runs on them (CPU in
/// millicores): two more 1-CPU pods fit, on the second and third.
const EXISTING: [(&str, &[(&str, i64)]); 3] = [
    (
        "ip-10-99-13-40.ap-northeast-1.compute.internal",
        &[
            ("datadog-agent-5vx8r", 200),
            ("datadog-agent-cluster-agent-85cf48cf-77kkh", 800),
        ],
    ),
    (
        "ip-10-99-17-198.ap-northeast-1.compute.internal",
        &[
            ("datadog-agent-5xrdf", 200),
            ("datadog-agent-kube-state-metrics-fb456b9bf-jbdnw", 500),
        ],
    ),
    (
        "ip-10-99-22-103.ap-northeast-1.compute.internal",
        &[("datadog-agent-f9zfj", 200)],
    ),
];

pub async fn run(scenario: &str, client: &kube::Client) -> anyhow::Result<()> {
    match scenario {
        "seed-001" => seed_001(client).await,
        other => bail!("unknown scenario {other:?}"),
    }
}

async fn seed_001(client: &kube::Client) -> anyhow::Result<()> {
    for (name, pods) in EXISTING {
        existing_node(client, name).await?;
        for (pod, cpu) in pods {
            system_pod(client, pod, name, *cpu).await?;
        }
    }
    let pool: NodePool = serde_json::from_value(node_pool())?;
    Api::<NodePool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .context("creating the NodePool")?;
    let deployment: Deployment = serde_json::from_value(deployment())?;
    let deployments = Api::<Deployment>::default_namespaced(client.clone());
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .context("creating the deployment")?;
    println!(
        "seed-001: 3 existing nodes, NodePool \"default\", deployment {APP} with 1 replica (1 CPU, 2Gi)"
    );
    wait_running(client, 1, Duration::from_secs(60)).await?;
    let existing = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .len();
    println!(
        "seed-001: 1 pod running on the existing nodes; {existing} nodes; scaling {APP} to 5 replicas"
    );

    let before: Vec<String> = app_pods(client)
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    let start = Instant::now();
    scale(&deployments, 5)
        .await
        .context("scaling the deployment")?;
    let timeline = observe(client, start, &before).await?;
    print!("{}", timeline.render());
    scale_down(client, &deployments).await
}

/// How long the scale-down may take: the pool's consolidateAfter (30 s),
/// a disruption poll (10 s) and the validation delay (15 s), with room.
const SCALE_DOWN_WITHIN: Duration = Duration::from_secs(240);
/// The pool's `consolidateAfter` (see [`node_pool`]).
const CONSOLIDATE_AFTER: Duration = Duration::from_secs(30);

/// Scales back to one replica and records the emptied nodes going away.
async fn scale_down(client: &kube::Client, deployments: &Api<Deployment>) -> anyhow::Result<()> {
    println!("\nseed-001: scaling {APP} back to 1 replica");
    let start = Instant::now();
    scale(deployments, 1)
        .await
        .context("scaling the deployment down")?;
    let mut down = ScaleDown::default();
    let every = Duration::from_millis(100);
    let done = poll(start, SCALE_DOWN_WITHIN, every, async |at| {
        let pod_list = app_pods(client).await?;
        let claim_list = node_claims(client).await?;
        down.observe(&pod_list, &claim_list, at);
        let done = pod_list.len() == 1
            && pod_list.iter().all(running)
            && down.settled(&pod_list, &claim_list);
        if done {
            down.timeline
                .first("done".into(), at, "every emptied node gone".into());
        }
        Ok(done)
    })
    .await?;
    print!("{}", down.render());
    if !done {
        bail!("the emptied nodes were not consolidated within {SCALE_DOWN_WITHIN:?}");
    }
    Ok(())
}

/// What the scale-down did, as offsets from it.
#[derive(Default)]
struct ScaleDown {
    timeline: Timeline,
    /// Per claim: when its node was first seen without app pods, when the
    /// claim was deleted, when it was gone.
    claims: BTreeMap<String, [Option<Duration>; 3]>,
}

impl ScaleDown {
    fn observe(&mut self, pods: &[Pod], claims: &[NodeClaim], at: Duration) {
        for claim in claims {
            let name = claim.name_any();
            let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
            // Terminating pods still count: the node is empty once they
            // are gone (their leaving is the pod event consolidateAfter
            // counts from).
            let hosts_app = pods
                .iter()
                .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == node.as_ref());
            let entry = self.claims.entry(name.clone()).or_default();
            if !hosts_app && entry[0].is_none() {
                entry[0] = Some(at);
                self.timeline.first(
                    format!("claim/{name}/empty"),
                    at,
                    format!("node {} has no app pod left", node.unwrap_or_default()),
                );
            }
            let entry = self.claims.entry(name.clone()).or_default();
            if claim.metadata.deletion_timestamp.is_some() && entry[1].is_none() {
                entry[1] = Some(at);
                self.timeline.first(
                    format!("claim/{name}/deleted"),
                    at,
                    format!("nodeclaim {name} deleted (consolidated)"),
                );
            }
        }
        for (name, steps) in &mut self.claims {
            if steps[2].is_none() && !claims.iter().any(|c| &c.name_any() == name) {
                // Deleted and gone between two looks: deleted by now.
                if steps[1].is_none() {
                    steps[1] = Some(at);
                    self.timeline.first(
                        format!("claim/{name}/deleted"),
                        at,
                        format!("nodeclaim {name} deleted (consolidated)"),
                    );
                }
                steps[2] = Some(at);
                self.timeline.first(
                    format!("claim/{name}/gone"),
                    at,
                    format!("nodeclaim {name} gone (instance terminated)"),
                );
            }
        }
    }

    /// Every claim left hosts an app pod.
    fn settled(&self, pods: &[Pod], claims: &[NodeClaim]) -> bool {
        claims.iter().all(|claim| {
            let node = claim.status.as_ref().and_then(|s| s.node_name.as_ref());
            claim.metadata.deletion_timestamp.is_none()
                && pods
                    .iter()
                    .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == node)
        })
    }

    fn render(&self) -> String {
        let mut events = self.timeline.events.clone();
        events.sort_by_key(|(at, _)| *at);
        let mut out =
            String::from("\nseed-001 scale-down timeline (t=0: app scaled from 5 to 1 replica)\n");
        for (at, what) in &events {
            out.push_str(&format!("  +{:>7.3}s  {what}\n", at.as_secs_f64()));
        }
        let step = |from: usize, to: usize| -> Vec<Duration> {
            self.claims
                .values()
                .filter_map(|c| Some(c[to]?.saturating_sub(c[from]?)))
                .collect()
        };
        out.push_str("\nstep latencies (median over consolidated node claims):\n");
        if let Some(m) = median(step(0, 1)) {
            out.push_str(&format!(
                "  {:<44}{:>9.3}s  (consolidateAfter {}s of it)\n",
                "node empty -> nodeclaim deleted",
                m.as_secs_f64(),
                CONSOLIDATE_AFTER.as_secs()
            ));
        }
        if let Some(m) = median(step(1, 2)) {
            out.push_str(&format!(
                "  {:<44}{:>9.3}s\n",
                "nodeclaim deleted -> gone",
                m.as_secs_f64()
            ));
        }
        if let Some(last) = self.claims.values().filter_map(|c| c[2]).max() {
            out.push_str(&format!(
                "  {:<44}{:>9.3}s\n",
                "scale-down -> every emptied node gone",
                last.as_secs_f64()
            ));
        }
        out
    }
}

fn existing_node_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "m5.large",
            "topology.kubernetes.io/zone": "ap-northeast-1a",
            "eks.amazonaws.com/nodegroup": "ios-eks-nodegroup-20220414"}},
        "spec": {"providerID": format!("aws:///ap-northeast-1a/i-{:016x}", name.len() * 7919)},
    })
}

async fn existing_node(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let nodes = Api::<Node>::all(client.clone());
    let node: Node = serde_json::from_value(existing_node_object(name))?;
    nodes
        .create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("creating node {name}"))?;
    let status = json!({"status": {
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
        "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("node {name} status"))?;
    Ok(())
}

async fn system_pod(client: &kube::Client, name: &str, node: &str, cpu: i64) -> anyhow::Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app.kubernetes.io/part-of": "datadog"}},
        "spec": {"nodeName": node, "containers": [{"name": "agent", "image": "datadog/agent:7",
                 "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": "256Mi"}}}]}
    }))?;
    Api::<Pod>::default_namespaced(client.clone())
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    Ok(())
}

/// Seed 001's Provisioner as a v1 NodePool on the local node class.
fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m-2x-amd64-linux"]}
                ],
                "expireAfter": "10m"
            }},
            "limits": {"cpu": "10", "memory": "80Gi"},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
        }
    })
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "labels": {"app.kubernetes.io/name": APP}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            "template": {
                "metadata": {"name": APP, "labels": {"app.kubernetes.io/name": APP}},
                "spec": {"containers": [{
                    "name": APP, "image": "alpine:latest", "command": ["sh", "-c", "sleep infinity"],
                    "resources": {"requests": {"cpu": "1", "memory": "2048Mi"}}
                }]}
            }
        }
    })
}

fn running(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"))
}

async fn wait_running(client: &kube::Client, count: usize, within: Duration) -> anyhow::Result<()> {
    let every = Duration::from_millis(100);
    let done = poll(Instant::now(), within, every, async |_| {
        let list = app_pods(client).await?;
        Ok(list.len() == count && list.iter().all(running))
    })
    .await?;
    if !done {
        bail!("{count} pod(s) of {APP} were not running within {within:?}");
    }
    Ok(())
}

/// The scenario's app pods.
async fn app_pods(client: &kube::Client) -> kube::Result<Vec<Pod>> {
    let pods = Api::<Pod>::default_namespaced(client.clone());
    Ok(pods
        .list(&ListParams::default().labels(SELECTOR))
        .await?
        .items)
}

/// Every node claim.
async fn node_claims(client: &kube::Client) -> kube::Result<Vec<NodeClaim>> {
    let claims = Api::<NodeClaim>::all(client.clone());
    Ok(claims.list(&ListParams::default()).await?.items)
}

/// Scales the scenario's deployment to `replicas`.
async fn scale(deployments: &Api<Deployment>, replicas: i32) -> kube::Result<Deployment> {
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    deployments
        .patch(APP, &PatchParams::default(), &patch)
        .await
}

/// Looks at the cluster every `every` until `look` (given the time since
/// `start`) says it is done: `true`, or `false` once `within` has passed
/// without it.
async fn poll(
    start: Instant,
    within: Duration,
    every: Duration,
    mut look: impl AsyncFnMut(Duration) -> anyhow::Result<bool>,
) -> anyhow::Result<bool> {
    loop {
        let at = start.elapsed();
        if look(at).await? {
            return Ok(true);
        }
        if at > within {
            return Ok(false);
        }
        tokio::time::sleep(every).await;
    }
}

/// When each thing was first seen, as offsets from the scale-out.
#[derive(Default)]
struct Timeline {
    events: Vec<(Duration, String)>,
    seen: BTreeMap<String, Duration>,
    /// Per claim: created, launched, registered, initialized.
    claims: BTreeMap<String, [Option<Duration>; 4]>,
    /// Per pod that was pending: pending, bound.
    pods: BTreeMap<String, [Option<Duration>; 2]>,
}

impl Timeline {
    /// Records `what` once, at `at`.
    fn first(&mut self, key: String, at: Duration, what: String) -> bool {
        if self.seen.contains_key(&key) {
            return false;
        }
        self.seen.insert(key, at);
        self.events.push((at, what));
        true
    }

    fn claim(&mut self, claim: &NodeClaim, at: Duration) {
        let name = claim.name_any();
        let steps = [
            ("created", true),
            ("launched", claim.is_launched()),
            ("registered", claim.is_registered()),
            ("initialized", claim.is_initialized()),
        ];
        for (i, (step, reached)) in steps.into_iter().enumerate() {
            if !reached {
                continue;
            }
            let detail = match step {
                "launched" => format!(
                    " ({}, {}, {})",
                    label(claim, "node.kubernetes.io/instance-type"),
                    label(claim, "karpenter.sh/capacity-type"),
                    label(claim, "topology.kubernetes.io/zone")
                ),
                "registered" => format!(
                    " as node {}",
                    claim
                        .status
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default()
                ),
                _ => String::new(),
            };
            if self.first(
                format!("claim/{name}/{step}"),
                at,
                format!("nodeclaim {name} {step}{detail}"),
            ) {
                self.claims.entry(name.clone()).or_default()[i] = Some(at);
            }
        }
    }

    fn pod(&mut self, pod: &Pod, at: Duration) {
        let name = pod.name_any();
        if unschedulable(pod)
            && pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none()
            && self.first(
                format!("pod/{name}/pending"),
                at,
                format!("pod {name} pending (Unschedulable)"),
            )
        {
            self.pods.entry(name.clone()).or_default()[0] = Some(at);
        }
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref())
            && self.first(
                format!("pod/{name}/bound"),
                at,
                format!("pod {name} bound to {node}"),
            )
        {
            self.pods.entry(name.clone()).or_default()[1] = Some(at);
        }
    }

    fn render(&self) -> String {
        let mut events = self.events.clone();
        events.sort_by_key(|(at, _)| *at);
        let mut out =
            String::from("\nseed-001 timeline (t=0: deployment app scaled from 1 to 5 replicas)\n");
        for (at, what) in &events {
            out.push_str(&format!("  +{:>7.3}s  {what}\n", at.as_secs_f64()));
        }
        let first_pending = self.pods.values().filter_map(|p| p[0]).min();
        let created: Vec<Duration> = self.claims.values().filter_map(|c| c[0]).collect();
        let step = |from: usize, to: usize| -> Vec<Duration> {
            self.claims
                .values()
                .filter_map(|c| Some(c[to]?.saturating_sub(c[from]?)))
                .collect()
        };
        let pending_to_bound: Vec<Duration> = self
            .pods
            .values()
            .filter_map(|p| Some(p[1]?.saturating_sub(p[0]?)))
            .collect();
        out.push_str("\nstep latencies (median over node claims / pods):\n");
        let mut row = |what: &str, value: Duration, note: &str| {
            out.push_str(&format!(
                "  {what:<44}{:>9.3}s{note}\n",
                value.as_secs_f64()
            ));
        };
        if let (Some(pending), Some(first_claim)) = (first_pending, created.iter().min()) {
            row(
                "first pod pending -> first nodeclaim created",
                first_claim.saturating_sub(pending),
                "  (includes the batch window)",
            );
        }
        for (from, to, what) in [
            (0, 1, "nodeclaim created -> launched"),
            (1, 2, "launched -> node registered"),
            (2, 3, "registered -> initialized"),
        ] {
            if let Some(m) = median(step(from, to)) {
                row(what, m, "");
            }
        }
        if let Some(m) = median(pending_to_bound) {
            row(
                "pod pending -> bound",
                m,
                "  (includes the simulated node delay)",
            );
        }
        if let Some(last) = self.pods.values().filter_map(|p| p[1]).max() {
            row("scale-out -> every pod bound", last, "");
        }
        out
    }
}

fn median(mut values: Vec<Duration>) -> Option<Duration> {
    values.sort();
    values.get(values.len() / 2).copied()
}

fn label(object: &impl kube::Resource, key: &str) -> String {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .cloned()
        .unwrap_or_default()
}

/// Polls the cluster until all five pods run, recording what it sees.
async fn observe(
    client: &kube::Client,
    start: Instant,
    before: &[String],
) -> anyhow::Result<Timeline> {
    let mut timeline = Timeline::default();
    let every = Duration::from_millis(50);
    let done = poll(start, SCALE_OUT_WITHIN, every, async |at| {
        let pod_list = app_pods(client).await?;
        for pod in pod_list.iter().filter(|p| !before.contains(&p.name_any())) {
            timeline.pod(pod, at);
        }
        for claim in node_claims(client).await? {
            timeline.claim(&claim, at);
        }
        let done = pod_list.len() == 5 && pod_list.iter().all(running);
        if done {
            timeline.first("done".into(), at, "all 5 pods running".into());
        }
        Ok(done)
    })
    .await?;
    if !done {
        print!("{}", timeline.render());
        bail!("the scale-out did not finish within {SCALE_OUT_WITHIN:?}");
    }
    Ok(timeline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_pods_fit_on_the_existing_nodes_and_three_wait() {
        let free: Vec<i64> = EXISTING
            .iter()
            .map(|(_, pods)| 1930 - pods.iter().map(|(_, cpu)| cpu).sum::<i64>())
            .collect();
        // The first replica takes the roomiest node.
        let fits: i64 = free.iter().map(|m| m / 1000).sum();
        assert_eq!(fits, 2, "{free:?}");
        assert!(serde_json::from_value::<NodePool>(node_pool()).is_ok());
        assert!(serde_json::from_value::<Deployment>(deployment()).is_ok());
    }

    /// Asserts that `text` shows each of `expected`, whatever its column
    /// padding.
    fn assert_shows(text: &str, expected: &[&str]) {
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for expected in expected {
            assert!(words.contains(expected), "{expected}:\n{text}");
        }
    }

    #[test]
    fn the_timeline_reports_each_step() {
        let mut timeline = Timeline::default();
        let s = Duration::from_secs;
        timeline.pods.insert("a".into(), [Some(s(0)), Some(s(5))]);
        timeline
            .claims
            .insert("c".into(), [Some(s(1)), Some(s(2)), Some(s(4)), Some(s(4))]);
        let text = timeline.render();
        assert_shows(
            &text,
            &[
                "first pod pending -> first nodeclaim created 1.000s",
                "launched -> node registered 2.000s",
                "scale-out -> every pod bound 5.000s",
            ],
        );
    }

    fn claim_on(name: &str, node: &str, deleting: bool) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                     "requirements": []},
            "status": {"nodeName": node}
        }))
        .expect("claim");
        if deleting {
            claim.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        claim
    }

    fn pod_on(node: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "nodeName": node}}),
        )
        .expect("pod")
    }

    #[test]
    fn the_scale_down_reports_emptied_nodes_going_away() {
        let s = Duration::from_secs;
        let mut down = ScaleDown::default();
        let kept = claim_on("kept", "n1", false);
        down.observe(
            &[pod_on("n1"), pod_on("n2")],
            &[kept.clone(), claim_on("c", "n2", false)],
            s(0),
        );
        down.observe(
            &[pod_on("n1")],
            &[kept.clone(), claim_on("c", "n2", false)],
            s(30),
        );
        assert!(!down.settled(&[pod_on("n1")], &[kept.clone(), claim_on("c", "n2", false)]));
        down.observe(
            &[pod_on("n1")],
            &[kept.clone(), claim_on("c", "n2", true)],
            s(50),
        );
        down.observe(&[pod_on("n1")], std::slice::from_ref(&kept), s(51));
        assert!(down.settled(&[pod_on("n1")], std::slice::from_ref(&kept)));
        let text = down.render();
        assert_shows(
            &text,
            &[
                "node n2 has no app pod left",
                "nodeclaim c deleted (consolidated)",
                "node empty -> nodeclaim deleted 20.000s",
                "nodeclaim deleted -> gone 1.000s",
                "scale-down -> every emptied node gone 51.000s",
            ],
        );
        assert!(
            !text.contains("node n1"),
            "the node keeping the pod stays:\n{text}"
        );
    }
}
