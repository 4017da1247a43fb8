//! Every manifest reconstructed from the seed articles converts, and the
//! important fields land where v1 expects them.

use std::path::{Path, PathBuf};

use karpenter_convert::{Conversion, NoteKind, Options, convert_yaml};
use serde_json::Value;

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/seeds")
}

fn seed_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(seeds_dir())
        .expect("testdata/seeds exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn convert_seed(name: &str) -> Conversion {
    let path = seeds_dir().join(name);
    let text = std::fs::read_to_string(&path).expect("seed file readable");
    convert_yaml(name, &text, &Options::default()).expect("seed converts")
}

fn kind_of(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

fn is_v1_duration(s: &str) -> bool {
    if s == "Never" {
        return true;
    }
    let mut digits = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits = true;
        } else if matches!(c, 's' | 'm' | 'h') && digits {
            digits = false;
        } else {
            return false;
        }
    }
    !s.is_empty() && !digits
}

/// Structural checks of the v1 rules the converter is responsible for (not
/// the fields the seed fragments simply do not have).
fn assert_v1_shape(file: &str, doc: &Value) {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = kind_of(doc);
    if api_version.starts_with("karpenter.sh/") || api_version.starts_with("karpenter.k8s.aws/") {
        assert!(
            api_version == "karpenter.sh/v1" || api_version == "karpenter.k8s.aws/v1",
            "{file}: {kind} still {api_version}"
        );
        assert!(doc.get("status").is_none(), "{file}: status kept");
    }
    match (api_version, kind) {
        ("karpenter.sh/v1", "NodePool") => {
            let spec = &doc["spec"];
            let tspec = &spec["template"]["spec"];
            assert!(
                tspec.get("kubelet").is_none(),
                "{file}: kubelet left in NodePool"
            );
            if let Some(reqs) = tspec["requirements"].as_array() {
                for r in reqs {
                    for v in r["values"].as_array().into_iter().flatten() {
                        assert!(v.is_string(), "{file}: requirement value {v} not a string");
                    }
                }
            }
            if let Some(r) = tspec.get("nodeClassRef") {
                assert_eq!(r["group"], "karpenter.k8s.aws", "{file}");
                assert_eq!(r["kind"], "EC2NodeClass", "{file}");
                assert!(r["name"].is_string(), "{file}");
            }
            for d in [
                &tspec["expireAfter"],
                &spec["disruption"]["consolidateAfter"],
            ] {
                if let Some(s) = d.as_str() {
                    assert!(is_v1_duration(s), "{file}: duration {s}");
                }
            }
            assert!(
                spec["disruption"]["consolidateAfter"].is_string(),
                "{file}: consolidateAfter is required"
            );
            let policy = spec["disruption"]["consolidationPolicy"].as_str();
            assert!(
                matches!(policy, Some("WhenEmpty" | "WhenEmptyOrUnderutilized")),
                "{file}: policy {policy:?}"
            );
            assert!(spec["disruption"].get("expireAfter").is_none(), "{file}");
            if let Some(w) = spec.get("weight") {
                let w = w.as_i64().expect("weight is an integer");
                assert!((1..=100).contains(&w), "{file}: weight {w}");
            }
        }
        ("karpenter.k8s.aws/v1", "EC2NodeClass") => {
            let spec = &doc["spec"];
            if let Some(terms) = spec["amiSelectorTerms"].as_array() {
                let aliases = terms.iter().filter(|t| t.get("alias").is_some()).count();
                assert!(aliases == 0 || terms.len() == 1, "{file}: alias not alone");
            }
            assert!(
                !(spec.get("role").is_some() && spec.get("instanceProfile").is_some()),
                "{file}: role and instanceProfile"
            );
            for key in spec["tags"].as_object().into_iter().flat_map(|m| m.keys()) {
                assert!(
                    !key.starts_with("kubernetes.io/cluster")
                        && !key.starts_with("aws:")
                        && key != "karpenter.sh/nodepool"
                        && key != "karpenter.sh/nodeclaim"
                        && key != "karpenter.k8s.aws/ec2nodeclass"
                        && key != "eks:eks-cluster-name",
                    "{file}: restricted tag {key}"
                );
            }
            if let Some(v) = spec.pointer("/metadataOptions/httpPutResponseHopLimit") {
                assert!(v.is_i64(), "{file}");
            }
        }
        _ => {}
    }
}

#[test]
fn every_seed_converts() {
    let files = seed_files();
    assert!(
        files.len() >= 39,
        "expected the seed fixtures, found {}",
        files.len()
    );
    for path in files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path).expect("readable");
        let conversion = convert_yaml(name, &text, &Options::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!conversion.documents.is_empty(), "{name}: no output");
        // Seed 003 is already v1 and passes through as written, typos
        // included; its checks are in seed_003_v1_passes_through_with_typo_notes.
        let converted = !name.starts_with("003-");
        for doc in conversion.documents.iter().filter(|_| converted) {
            assert_v1_shape(name, doc);
            // v1 needs amiFamily unless the AMI is selected by alias; when the
            // input does not say which family, the converter must say so.
            let spec = &doc["spec"];
            if kind_of(doc) == "EC2NodeClass"
                && spec.get("amiFamily").is_none()
                && spec["amiSelectorTerms"][0].get("alias").is_none()
            {
                assert!(
                    conversion
                        .notes
                        .iter()
                        .any(|n| n.kind == NoteKind::ActionRequired
                            && (n.path == "spec.amiFamily" || n.path == "spec.amiSelectorTerms")),
                    "{name}: missing amiFamily not reported"
                );
            }
        }
        for note in &conversion.notes {
            assert_eq!(note.document.file.as_deref(), Some(name), "{note}");
        }
        // The output is valid YAML that reads back to the same documents.
        let yaml = conversion.to_yaml().expect("writes");
        let back = karpenter_convert::read_documents(&yaml).expect("reads back");
        assert_eq!(back, conversion.documents, "{name}: YAML round trip");
    }
}

#[test]
fn seed_001_provisioner_becomes_nodepool_and_ec2nodeclass() {
    let c = convert_seed("001-provisioner.yaml");
    assert_eq!(c.documents.len(), 2);
    let np = &c.documents[0];
    let nc = &c.documents[1];
    assert_eq!(np["apiVersion"], "karpenter.sh/v1");
    assert_eq!(np["kind"], "NodePool");
    assert_eq!(np["metadata"]["name"], "default");
    let reqs = np["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .expect("requirements");
    let find = |key: &str| {
        reqs.iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("requirement {key}"))
    };
    assert_eq!(find("karpenter.sh/capacity-type")["operator"], "In");
    assert_eq!(
        find("karpenter.sh/capacity-type")["values"],
        serde_json::json!(["on-demand"])
    );
    assert_eq!(
        find("node.kubernetes.io/instance-type")["values"],
        serde_json::json!(["r5.large"])
    );
    // v1alpha5's implicit defaults, made explicit; no c/m/r default because
    // the instance type is pinned.
    assert_eq!(
        find("kubernetes.io/os")["values"],
        serde_json::json!(["linux"])
    );
    assert_eq!(
        find("kubernetes.io/arch")["values"],
        serde_json::json!(["amd64"])
    );
    assert!(
        reqs.iter()
            .all(|r| r["key"] != "karpenter.k8s.aws/instance-category")
    );

    assert_eq!(np["spec"]["limits"]["cpu"], 10);
    assert_eq!(np["spec"]["limits"]["memory"], "80Gi");
    assert_eq!(np["spec"]["disruption"]["consolidationPolicy"], "WhenEmpty");
    assert_eq!(np["spec"]["disruption"]["consolidateAfter"], "30s");
    assert_eq!(np["spec"]["template"]["spec"]["expireAfter"], "10m");
    assert_eq!(
        np["spec"]["template"]["spec"]["nodeClassRef"],
        serde_json::json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
    );

    assert_eq!(nc["apiVersion"], "karpenter.k8s.aws/v1");
    assert_eq!(nc["kind"], "EC2NodeClass");
    assert_eq!(nc["metadata"]["name"], "default");
    let tags = serde_json::json!([{"tags": {"karpenter.sh/discovery": "sample-1-22"}}]);
    assert_eq!(nc["spec"]["subnetSelectorTerms"], tags);
    assert_eq!(nc["spec"]["securityGroupSelectorTerms"], tags);
    assert_eq!(
        nc["spec"]["amiSelectorTerms"],
        serde_json::json!([{"alias": "al2@latest"}])
    );
    assert!(nc["spec"].get("amiFamily").is_none());
    assert_eq!(nc["spec"]["role"], karpenter_convert::NODE_ROLE_PLACEHOLDER);
    assert_eq!(nc["spec"]["metadataOptions"]["httpPutResponseHopLimit"], 2);

    let notes: Vec<String> = c.notes.iter().map(ToString::to_string).collect();
    let has = |path: &str, kind: NoteKind| c.notes.iter().any(|n| n.path == path && n.kind == kind);
    assert!(
        has("spec.ttlSecondsAfterEmpty", NoteKind::Changed),
        "{notes:#?}"
    );
    assert!(
        has("spec.ttlSecondsUntilExpired", NoteKind::Changed),
        "{notes:#?}"
    );
    assert!(
        has("spec.provider.role", NoteKind::ActionRequired),
        "{notes:#?}"
    );
    assert!(has("spec.provider", NoteKind::Changed), "{notes:#?}");
    // Nothing of the Provisioner is lost.
    assert!(
        c.notes.iter().all(|n| n.kind != NoteKind::Dropped),
        "{notes:#?}"
    );
    assert!(
        notes
            .iter()
            .all(|n| n.starts_with("001-provisioner.yaml[0] Provisioner \"default\": "))
    );
}

#[test]
fn seed_001_deployment_passes_through_unchanged() {
    let path = seeds_dir().join("001-deployment-app.yaml");
    let text = std::fs::read_to_string(path).expect("readable");
    let input = karpenter_convert::read_documents(&text).expect("parses");
    let c = convert_seed("001-deployment-app.yaml");
    assert_eq!(c.documents, input);
    assert!(c.notes.is_empty(), "{:?}", c.notes);
}

#[test]
fn seed_002_v1beta1_nodepool() {
    let c = convert_seed("002-nodepool-default.yaml");
    assert_eq!(c.documents.len(), 1);
    let np = &c.documents[0];
    assert_eq!(np["apiVersion"], "karpenter.sh/v1");
    let spec = &np["spec"];
    assert_eq!(
        spec["disruption"]["consolidationPolicy"],
        "WhenEmptyOrUnderutilized"
    );
    assert_eq!(spec["disruption"]["consolidateAfter"], "0s");
    assert!(spec["disruption"].get("expireAfter").is_none());
    assert_eq!(spec["template"]["spec"]["expireAfter"], "Never");
    assert_eq!(
        spec["template"]["spec"]["nodeClassRef"],
        serde_json::json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "lyon-cluster"})
    );
    assert_eq!(spec["weight"], 10);
    assert_eq!(
        spec["template"]["spec"]["taints"],
        serde_json::json!([{"effect": "NoSchedule", "key": "system-type", "value": "default"}])
    );
    assert_eq!(
        spec["template"]["spec"]["requirements"]
            .as_array()
            .map(Vec::len),
        Some(4)
    );
    // `metadata: {}` of the template is not carried as an empty object.
    assert!(spec["template"].get("metadata").is_none());
    let paths: Vec<&str> = c.notes.iter().map(|n| n.path.as_str()).collect();
    assert!(paths.contains(&"spec.disruption.consolidationPolicy"));
    assert!(paths.contains(&"spec.disruption.expireAfter"));
    assert!(paths.contains(&"spec.template.spec.nodeClassRef"));
}

#[test]
fn seed_003_v1_passes_through_with_typo_notes() {
    for name in [
        "003-nodepool-default.yaml",
        "003-ec2nodeclass-default.yaml",
        "003-ec2nodeclass-default.filled.yaml",
    ] {
        let text = std::fs::read_to_string(seeds_dir().join(name)).expect("readable");
        let input = karpenter_convert::read_documents(&text).expect("parses");
        let c = convert_seed(name);
        assert_eq!(
            c.documents, input,
            "{name}: v1 input must pass through unchanged"
        );
    }
    let c = convert_seed("003-nodepool-default.yaml");
    let limit = c
        .notes
        .iter()
        .find(|n| n.path == "spec.limit")
        .expect("note on the limit typo");
    assert_eq!(limit.kind, NoteKind::ActionRequired);
    assert!(limit.message.contains("Did you mean `limits`?"), "{limit}");
    assert!(
        c.notes
            .iter()
            .any(|n| n.path == "spec.weight" && n.message.contains("null"))
    );

    let c = convert_seed("003-ec2nodeclass-default.yaml");
    let placeholders: Vec<_> = c
        .notes
        .iter()
        .filter(|n| n.message.contains("unexpanded placeholder"))
        .collect();
    assert_eq!(placeholders.len(), 3, "{placeholders:?}");
    assert!(
        convert_seed("003-ec2nodeclass-default.filled.yaml")
            .notes
            .is_empty()
    );
}

#[test]
fn seed_000_ec2nodeclass_sections() {
    let c = convert_seed("000-ec2nodeclass-amifamily.yaml");
    let spec = &c.documents[0]["spec"];
    assert_eq!(
        spec["amiSelectorTerms"],
        serde_json::json!([{"alias": "al2@latest"}])
    );
    assert!(spec.get("amiFamily").is_none());

    let c = convert_seed("000-ec2nodeclass-amiselectorterms.yaml");
    assert_eq!(
        c.documents[0]["spec"]["amiSelectorTerms"],
        serde_json::json!([{"name": "ami-*****"}])
    );
    assert!(
        c.notes
            .iter()
            .any(|n| n.path == "spec.amiFamily" && n.kind == NoteKind::ActionRequired)
    );

    let c = convert_seed("000-ec2nodeclass-blockdevicemappings.yaml");
    assert_eq!(
        c.documents[0]["spec"]["blockDeviceMappings"],
        serde_json::json!([{"deviceName": "/dev/xvda", "ebs": {"encrypted": true, "volumeSize": "100Gi", "volumeType": "gp3"}}])
    );

    let c = convert_seed("000-ec2nodeclass-metadataoptions.yaml");
    assert_eq!(
        c.documents[0]["spec"]["metadataOptions"],
        serde_json::json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 2, "httpTokens": "required"})
    );
    assert!(!c.notes.iter().any(|n| n.path == "spec.metadataOptions"));

    let c = convert_seed("000-ec2nodeclass-instanceprofile.yaml");
    assert_eq!(
        c.documents[0]["spec"]["instanceProfile"],
        "foo-instance-profile"
    );
    let c = convert_seed("000-ec2nodeclass-role.yaml");
    assert_eq!(c.documents[0]["spec"]["role"], "foo-node-role");

    let c = convert_seed("000-ec2nodeclass-status.yaml");
    assert!(c.documents[0].get("status").is_none());
    assert!(
        c.notes
            .iter()
            .any(|n| n.path == "status" && n.kind == NoteKind::Dropped)
    );

    let c = convert_seed("000-ec2nodeclass-tags-default.yaml");
    let tags = c.documents[0]["spec"]["tags"].as_object().expect("tags");
    let kept: Vec<&str> = tags.keys().map(String::as_str).collect();
    assert_eq!(
        kept,
        ["karpenter.sh/managed-by", "karpenter.k8s.aws/cluster"]
    );
    let dropped: Vec<&str> = c
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Dropped)
        .map(|n| n.path.as_str())
        .collect();
    assert_eq!(dropped.len(), 8, "{dropped:?}");

    let c = convert_seed("000-ec2nodeclass-tags-user.yaml");
    assert_eq!(
        c.documents[0]["spec"]["tags"].as_object().map(|m| m.len()),
        Some(4)
    );
}

#[test]
fn seed_000_nodepool_sections() {
    let c = convert_seed("000-nodepool-consolidateafter.yaml");
    let d = &c.documents[0]["spec"]["disruption"];
    assert_eq!(d["consolidationPolicy"], "WhenEmptyOrUnderutilized");
    assert_eq!(d["consolidateAfter"], "30s");

    let c = convert_seed("000-nodepool-expireafter.yaml");
    assert_eq!(
        c.documents[0]["spec"]["template"]["spec"]["expireAfter"],
        "720h"
    );

    let c = convert_seed("000-nodepool-limits.yaml");
    assert_eq!(
        c.documents[0]["spec"]["limits"],
        serde_json::json!({"cpu": "1000m", "memory": "1024Mi"})
    );

    let c = convert_seed("000-nodepool-labels.yaml");
    assert_eq!(
        c.documents[0]["spec"]["template"]["metadata"]["labels"],
        serde_json::json!({"node.kubernetes.io/nodetype": "foo"})
    );

    let c = convert_seed("000-nodepool-requirements-1.yaml");
    let reqs = &c.documents[0]["spec"]["template"]["spec"]["requirements"];
    assert_eq!(reqs[1]["values"], serde_json::json!(["4", "8", "16", "32"]));
    assert_eq!(reqs[3]["operator"], "Gt");
    assert_eq!(reqs[3]["values"], serde_json::json!(["2"]));

    let c = convert_seed("000-nodepool-startuptaints.yaml");
    assert_eq!(
        c.documents[0]["spec"]["template"]["spec"]["startupTaints"],
        serde_json::json!([{"key": "example.com/another-taint", "effect": "NoSchedule"}])
    );

    // Alone, the kubelet block waits in the compatibility annotation.
    let c = convert_seed("000-nodepool-kubelet.yaml");
    let np = &c.documents[0];
    let annotation =
        np["metadata"]["annotations"]["compatibility.karpenter.sh/v1beta1-kubelet-conversion"]
            .as_str()
            .expect("kubelet annotation");
    let kubelet: Value = serde_json::from_str(annotation).expect("JSON");
    assert_eq!(kubelet["maxPods"], 20);
    assert_eq!(kubelet["clusterDNS"], serde_json::json!(["10.0.1.100"]));
    assert!(kubelet.get("containerRuntime").is_none());
    assert!(c.notes.iter().any(|n| {
        n.path == "spec.template.spec.kubelet.containerRuntime" && n.kind == NoteKind::Dropped
    }));
}

#[test]
fn seed_000_other_documents() {
    let c = convert_seed("000-deployment-do-not-disrupt.yaml");
    assert_eq!(
        c.documents[0]["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"],
        "true"
    );
    let c = convert_seed("000-configmap-global-settings-interruptionqueuename.yaml");
    assert!(c.notes[0].message.contains("settings.interruptionQueue"));
    let c = convert_seed("000-configmap-logging-zap-logger-config.yaml");
    assert!(c.notes[0].message.contains("logLevel"));
}

#[test]
fn kubelet_moves_to_the_ec2nodeclass_of_the_same_batch() {
    let dir = seeds_dir();
    let text = ["000-nodepool-kubelet.yaml", "000-ec2nodeclass-role.yaml"]
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).expect("readable"))
        .collect::<Vec<_>>()
        .join("---\n")
        // The kubelet section shows no nodeClassRef; point it at the class.
        .replace(
            "    spec:\n      kubelet:",
            "    spec:\n      nodeClassRef:\n        name: foo-node-class\n      kubelet:",
        );
    let c = convert_yaml("batch.yaml", &text, &Options::default()).expect("converts");
    let np = &c.documents[0];
    let nc = &c.documents[1];
    assert!(np["metadata"].get("annotations").is_none(), "{np}");
    assert_eq!(nc["spec"]["kubelet"]["maxPods"], 20);
    assert_eq!(
        nc["spec"]["kubelet"]["evictionSoftGracePeriod"]["nodefs.available"],
        "1m30s"
    );
    assert!(
        c.notes
            .iter()
            .any(|n| n.path == "spec.template.spec.kubelet" && n.kind == NoteKind::Changed)
    );
}
