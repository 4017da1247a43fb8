//! Conversion rules beyond the seeds: every mapping, every note, every error.

use karpenter_convert::{
    ConvertError, NoteKind, Options, convert, convert_all, convert_all_with, convert_with,
    convert_yaml, read_documents,
};
use serde_json::{Value, json};

fn yaml(text: &str) -> Value {
    let mut docs = read_documents(text).expect("test YAML parses");
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

fn has_note(c: &karpenter_convert::Conversion, path: &str, kind: NoteKind) -> bool {
    c.notes.iter().any(|n| n.path == path && n.kind == kind)
}

#[test]
fn errors_name_the_document_and_field() {
    let doc = yaml(
        "apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: default
spec:
  ttlSecondsAfterEmpty: 30s
",
    );
    let err = convert(&doc).expect_err("30s is not an integer");
    assert_eq!(
        err.to_string(),
        r#"Provisioner "default": spec.ttlSecondsAfterEmpty: expected an integer, got "30s""#
    );
    let field = err.as_field().expect("a field error");
    assert_eq!(field.path, "spec.ttlSecondsAfterEmpty");

    // In a file, the file and position are named too.
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\napiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata:\n  name: np\nspec:\n  weight: 150\n";
    let err = convert_yaml("pools.yaml", text, &Options::default()).expect_err("weight");
    assert_eq!(
        err.to_string(),
        r#"pools.yaml[1] NodePool "np": spec.weight: expected an integer between 1 and 100, got 150"#
    );

    let err = convert(&json!("just a string")).expect_err("not an object");
    assert!(err.to_string().contains("expected a mapping"), "{err}");

    let err = convert(&yaml(
        "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata:\n  name: np\nspec:\n  disruption:\n    expireAfter: 30d\n",
    ))
    .expect_err("30d");
    assert!(err.to_string().ends_with(r#"spec.disruption.expireAfter: expected a duration like 30s, 10m, 720h or Never, got "30d""#), "{err}");

    let err = convert(&yaml(
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata:\n  name: p\nspec:\n  provider: {}\n  providerRef:\n    name: x\n",
    ))
    .expect_err("both");
    assert!(matches!(err, ConvertError::Field(_)));

    let err = convert(&yaml(
        "apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata:\n  name: c\nspec:\n  amiFamily: Gentoo\n",
    ))
    .expect_err("family");
    assert!(
        err.to_string()
            .contains("spec.amiFamily: expected one of AL2"),
        "{err}"
    );
}

#[test]
fn provisioner_full_mapping() {
    let doc = yaml(
        r#"apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: gpu
  labels:
    team: ml
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    karpenter.sh/provisioner-hash: "123"
  resourceVersion: "42"
  uid: abc
spec:
  consolidation:
    enabled: true
  labels:
    billing-team: my-team
  annotations:
    example.com/owner: my-team
    karpenter.sh/do-not-consolidate: "true"
  taints:
    - key: nvidia.com/gpu
      effect: NoSchedule
  startupTaints:
    - key: example.com/another-taint
      effect: NoSchedule
  requirements:
    - key: karpenter.k8s.aws/instance-family
      operator: In
      values: [p3, g4dn]
    - key: karpenter.sh/provisioner-name
      operator: Exists
  kubeletConfiguration:
    maxPods: 110
    containerRuntime: containerd
  providerRef:
    name: gpu-template
  limits:
    resources:
      nvidia.com/gpu: 8
  weight: 50
  ttlSecondsUntilExpired: 2592000
status:
  resources:
    cpu: "4"
"#,
    );
    let c = convert(&doc).expect("converts");
    assert_eq!(c.documents.len(), 1);
    let np = &c.documents[0];
    assert_eq!(np["metadata"]["name"], "gpu");
    assert_eq!(np["metadata"]["labels"], json!({"team": "ml"}));
    // kubelet: no EC2NodeClass to move it to -> compatibility annotation
    // (and nothing else survives of the old annotations).
    assert_eq!(
        np["metadata"]["annotations"],
        json!({"compatibility.karpenter.sh/v1beta1-kubelet-conversion": r#"{"maxPods":110}"#})
    );
    let spec = &np["spec"];
    assert_eq!(
        spec["template"]["metadata"]["labels"],
        json!({"billing-team": "my-team"})
    );
    assert_eq!(
        spec["template"]["metadata"]["annotations"],
        json!({"example.com/owner": "my-team", "karpenter.sh/do-not-disrupt": "true"})
    );
    let t = &spec["template"]["spec"];
    assert_eq!(t["taints"][0]["key"], "nvidia.com/gpu");
    assert_eq!(t["startupTaints"][0]["key"], "example.com/another-taint");
    assert_eq!(
        t["nodeClassRef"],
        json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu-template"})
    );
    assert_eq!(t["expireAfter"], "720h");
    let keys: Vec<&str> = t["requirements"]
        .as_array()
        .expect("requirements")
        .iter()
        .filter_map(|r| r["key"].as_str())
        .collect();
    // provisioner-name requirement dropped; instance family pins the type, so
    // only os/arch/capacity-type defaults are added.
    assert_eq!(
        keys,
        [
            "karpenter.k8s.aws/instance-family",
            "kubernetes.io/os",
            "kubernetes.io/arch",
            "karpenter.sh/capacity-type"
        ]
    );
    assert_eq!(
        spec["disruption"],
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"})
    );
    assert_eq!(spec["limits"], json!({"nvidia.com/gpu": 8}));
    assert_eq!(spec["weight"], 50);
    let all = convert_all(&[doc]).expect("converts");
    assert_eq!(all.documents, c.documents);
    for (path, kind) in [
        ("status", NoteKind::Dropped),
        ("metadata", NoteKind::Dropped),
        ("spec.requirements[1]", NoteKind::Dropped),
        (
            "spec.kubeletConfiguration.containerRuntime",
            NoteKind::Dropped,
        ),
        ("spec.kubeletConfiguration", NoteKind::ActionRequired),
        ("spec.consolidation.enabled", NoteKind::Changed),
        ("spec.providerRef", NoteKind::Defaulted),
    ] {
        assert!(
            has_note(&c, path, kind),
            "missing {kind} note on {path}: {:#?}",
            c.notes
        );
    }
    assert!(
        c.notes
            .iter()
            .any(|n| n.path.contains("last-applied-configuration"))
    );
    assert!(
        c.notes
            .iter()
            .any(|n| n.path.contains("do-not-consolidate"))
    );
}

#[test]
fn provisioner_without_disruption_settings_keeps_nodes() {
    let doc = yaml(
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata:\n  name: p\nspec:\n  providerRef:\n    name: t\n",
    );
    let c = convert(&doc).expect("converts");
    let spec = &c.documents[0]["spec"];
    assert_eq!(spec["disruption"]["consolidateAfter"], "Never");
    assert_eq!(spec["template"]["spec"]["expireAfter"], "Never");
    let keys: Vec<&str> = spec["template"]["spec"]["requirements"]
        .as_array()
        .expect("requirements")
        .iter()
        .filter_map(|r| r["key"].as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "kubernetes.io/os",
            "kubernetes.io/arch",
            "karpenter.sh/capacity-type",
            "karpenter.k8s.aws/instance-category",
            "karpenter.k8s.aws/instance-generation"
        ]
    );
    let opts = Options {
        ignore_defaults: true,
        ..Options::default()
    };
    let c = convert_with(&doc, &opts).expect("converts");
    assert_eq!(
        c.documents[0]["spec"]["template"]["spec"]["requirements"],
        json!([])
    );
}

#[test]
fn provisioner_inline_provider_with_everything() {
    let doc = yaml(
        r#"apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: default
spec:
  kubeletConfiguration:
    clusterDNS: ["10.0.1.100"]
    systemReserved:
      cpu: 1
  provider:
    apiVersion: extensions.karpenter.sh/v1alpha1
    kind: AWS
    amiFamily: Bottlerocket
    instanceProfile: KarpenterInstanceProfile
    subnetSelector:
      aws-ids: "subnet-1, subnet-2"
      Name: "*private*"
    securityGroupSelector:
      karpenter.sh/discovery: demo
      team: ""
    launchTemplate: my-template
    context: ctx
    tags:
      team: ml
      karpenter.sh/provisioner-name: x
    metadataOptions:
      httpTokens: optional
    blockDeviceMappings:
      - deviceName: /dev/xvda
        virtualName: ephemeral0
        ebs:
          volumeSize: 100G
          volumeType: gp3
          iops: 3000
"#,
    );
    let c = convert(&doc).expect("converts");
    assert_eq!(c.documents.len(), 2);
    let nc = &c.documents[1]["spec"];
    assert_eq!(
        nc["amiSelectorTerms"],
        json!([{"alias": "bottlerocket@latest"}])
    );
    assert_eq!(
        nc["subnetSelectorTerms"],
        json!([{"id": "subnet-1"}, {"id": "subnet-2"}])
    );
    assert_eq!(
        nc["securityGroupSelectorTerms"],
        json!([{"tags": {"karpenter.sh/discovery": "demo", "team": "*"}}])
    );
    assert_eq!(nc["instanceProfile"], "KarpenterInstanceProfile");
    assert!(nc.get("role").is_none());
    assert_eq!(nc["kubelet"]["clusterDNS"], json!(["10.0.1.100"]));
    assert_eq!(nc["kubelet"]["systemReserved"], json!({"cpu": "1"}));
    assert_eq!(nc["tags"], json!({"team": "ml"}));
    assert_eq!(nc["context"], "ctx");
    assert_eq!(nc["metadataOptions"], json!({"httpTokens": "optional"}));
    assert_eq!(
        nc["blockDeviceMappings"],
        json!([{"deviceName": "/dev/xvda", "ebs": {"iops": 3000, "volumeSize": "100G", "volumeType": "gp3"}}])
    );
    for (path, kind) in [
        ("spec.provider.launchTemplate", NoteKind::Dropped),
        ("spec.provider.subnetSelector", NoteKind::Dropped),
        ("spec.provider.instanceProfile", NoteKind::Info),
        (
            "spec.provider.blockDeviceMappings[0].virtualName",
            NoteKind::Dropped,
        ),
        ("spec.kubeletConfiguration", NoteKind::Changed),
    ] {
        assert!(
            has_note(&c, path, kind),
            "missing {kind} note on {path}: {:#?}",
            c.notes
        );
    }
    assert!(
        c.notes
            .iter()
            .any(|n| n.path.contains("karpenter.sh/provisioner-name"))
    );

    // With a role given, the instance profile gives way to it.
    let opts = Options {
        node_role: Some("KarpenterNodeRole-demo".into()),
        ..Options::default()
    };
    let c = convert_with(&doc, &opts).expect("converts");
    let nc = &c.documents[1]["spec"];
    assert_eq!(nc["role"], "KarpenterNodeRole-demo");
    assert!(nc.get("instanceProfile").is_none());
}

#[test]
fn aws_node_template_mapping_and_provider_ref_batch() {
    let text = r#"apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata:
  name: default
spec:
  kubeletConfiguration:
    maxPods: 58
  providerRef:
    name: default
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata:
  name: default
spec:
  subnetSelector:
    karpenter.sh/discovery: demo
  securityGroupSelector:
    aws::ids: sg-1
  amiSelector:
    aws::name: "my-ami-*"
    aws::owners: "self,123456789012"
    team: ml
  userData: |
    echo hello
  detailedMonitoring: true
  associatePublicIpAddress: false
status:
  subnets:
    - id: subnet-1
"#;
    let c = convert_yaml("all.yaml", text, &Options::default()).expect("converts");
    assert_eq!(c.documents.len(), 2);
    let np = &c.documents[0];
    let nc = &c.documents[1];
    assert!(np["metadata"].get("annotations").is_none());
    assert_eq!(nc["kind"], "EC2NodeClass");
    let spec = &nc["spec"];
    assert_eq!(spec["kubelet"], json!({"maxPods": 58}));
    assert_eq!(spec["amiFamily"], "AL2");
    assert_eq!(
        spec["amiSelectorTerms"],
        json!([
            {"tags": {"team": "ml"}, "name": "my-ami-*", "owner": "self"},
            {"tags": {"team": "ml"}, "name": "my-ami-*", "owner": "123456789012"}
        ])
    );
    assert_eq!(spec["securityGroupSelectorTerms"], json!([{"id": "sg-1"}]));
    assert_eq!(spec["role"], "$KARPENTER_NODE_ROLE");
    assert_eq!(spec["userData"], "echo hello\n");
    assert_eq!(spec["detailedMonitoring"], true);
    assert_eq!(spec["associatePublicIPAddress"], false);
    assert!(nc.get("status").is_none());
    assert!(c.notes.iter().any(|n| n.path == "spec.kubeletConfiguration"
        && n.kind == NoteKind::Changed
        && n.message.contains("EC2NodeClass \"default\"")));
    assert!(
        c.notes
            .iter()
            .all(|n| n.document.file.as_deref() == Some("all.yaml"))
    );
}

#[test]
fn conflicting_kubelets_stay_in_annotations() {
    let text = r#"apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: a}
spec:
  template:
    spec:
      nodeClassRef: {name: shared}
      kubelet: {maxPods: 10}
---
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: b}
spec:
  template:
    spec:
      nodeClassRef: {name: shared}
      kubelet: {maxPods: 20}
---
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: shared}
spec:
  amiFamily: AL2023
  role: r
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
"#;
    let c = convert_yaml("x.yaml", text, &Options::default()).expect("converts");
    assert!(c.documents[2]["spec"].get("kubelet").is_none());
    for np in &c.documents[..2] {
        assert!(
            np["metadata"]["annotations"]["compatibility.karpenter.sh/v1beta1-kubelet-conversion"]
                .is_string()
        );
    }
    let conflicts = c
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::ActionRequired && n.message.contains("disagree"))
        .count();
    assert_eq!(conflicts, 2);
}

#[test]
fn v1beta1_ec2nodeclass_families() {
    let base = "apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata:\n  name: c\nspec:\n  role: r\n";
    let c = convert(&yaml(&format!("{base}  amiFamily: Ubuntu\n"))).expect("converts");
    let spec = &c.documents[0]["spec"];
    assert_eq!(spec["amiFamily"], "AL2");
    assert_eq!(spec["amiSelectorTerms"], json!([{"id": "ami-placeholder"}]));
    assert_eq!(spec["blockDeviceMappings"][0]["deviceName"], "/dev/sda1");
    assert!(has_note(
        &c,
        "spec.amiSelectorTerms",
        NoteKind::ActionRequired
    ));

    let c = convert(&yaml(&format!(
        "{base}  amiFamily: Custom\n  amiSelectorTerms:\n    - id: ami-123\n"
    )))
    .expect("converts");
    let spec = &c.documents[0]["spec"];
    assert_eq!(spec["amiFamily"], "Custom");
    assert_eq!(spec["amiSelectorTerms"], json!([{"id": "ami-123"}]));
    assert!(has_note(&c, "spec.amiFamily", NoteKind::ActionRequired));

    let c = convert(&yaml(&format!(
        "{base}  amiFamily: AL2023\n  amiSelectorTerms:\n    - tags:\n        name: x\n"
    )))
    .expect("converts");
    assert_eq!(c.documents[0]["spec"]["amiFamily"], "AL2023");

    let c = convert(&yaml(&format!("{base}  amiFamily: windows2022\n"))).expect("converts");
    assert_eq!(
        c.documents[0]["spec"]["amiSelectorTerms"],
        json!([{"alias": "windows2022@latest"}])
    );
    assert!(has_note(&c, "spec.amiFamily", NoteKind::Changed));
}

#[test]
fn nodeclaim_takes_expire_after_from_its_nodepool() {
    let text = r#"apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: pool}
spec:
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 1m
    expireAfter: 48h
  template:
    spec:
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: c}
      requirements:
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: [m5]
          minValues: 1
---
apiVersion: karpenter.sh/v1beta1
kind: NodeClaim
metadata:
  name: pool-abcde
  labels:
    karpenter.sh/nodepool: pool
spec:
  nodeClassRef: {name: c}
  kubelet: {maxPods: 30}
  resources:
    requests:
      cpu: "1"
status:
  providerID: aws:///us-west-2a/i-123
"#;
    let c = convert_yaml("claims.yaml", text, &Options::default()).expect("converts");
    let np = &c.documents[0]["spec"];
    assert_eq!(
        np["disruption"],
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1m"})
    );
    assert_eq!(np["template"]["spec"]["requirements"][0]["minValues"], 1);
    let claim = &c.documents[1];
    assert_eq!(claim["apiVersion"], "karpenter.sh/v1");
    assert_eq!(claim["spec"]["expireAfter"], "48h");
    assert_eq!(
        claim["spec"]["resources"],
        json!({"requests": {"cpu": "1"}})
    );
    assert_eq!(
        claim["spec"]["nodeClassRef"],
        json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"})
    );
    assert_eq!(
        claim["metadata"]["annotations"]["compatibility.karpenter.sh/v1beta1-kubelet-conversion"],
        r#"{"maxPods":30}"#
    );
    assert!(claim.get("status").is_none());
}

#[test]
fn workloads_get_label_renames_and_pass_through() {
    // The affinity block seed 001 adds to the Karpenter Deployment.
    let doc = yaml(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: karpenter
spec:
  template:
    metadata:
      annotations:
        karpenter.sh/do-not-evict: "true"
    spec:
      nodeSelector:
        karpenter.sh/provisioner-name: default
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - key: karpenter.sh/provisioner-name
                operator: DoesNotExist
            - matchExpressions:
              - key: eks.amazonaws.com/nodegroup
                operator: In
                values:
                - ${NODEGROUP}
      topologySpreadConstraints:
        - topologyKey: karpenter.sh/provisioner-name
          maxSkew: 1
      tolerations:
        - key: karpenter.sh/disruption
          operator: Exists
"#,
    );
    let c = convert(&doc).expect("converts");
    let t = &c.documents[0]["spec"]["template"];
    assert_eq!(
        t["metadata"]["annotations"],
        json!({"karpenter.sh/do-not-disrupt": "true"})
    );
    assert_eq!(
        t["spec"]["nodeSelector"],
        json!({"karpenter.sh/nodepool": "default"})
    );
    assert_eq!(
        t["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["key"],
        "karpenter.sh/nodepool"
    );
    assert_eq!(
        t["spec"]["topologySpreadConstraints"][0]["topologyKey"],
        "karpenter.sh/nodepool"
    );
    assert!(c.notes.iter().any(|n| n.message.contains("${NODEGROUP}")));
    assert!(
        c.notes
            .iter()
            .any(|n| n.message.contains("karpenter.sh/disrupted"))
    );
    assert_eq!(
        c.notes
            .iter()
            .filter(|n| n.kind == NoteKind::Changed)
            .count(),
        4,
        "{:#?}",
        c.notes
    );
}

#[test]
fn lists_flatten_and_v1_passes_through() {
    let list: Value = serde_yaml::from_str(
        r#"apiVersion: v1
kind: List
items:
  - apiVersion: karpenter.sh/v1beta1
    kind: NodePool
    metadata: {name: a}
    spec:
      template:
        spec:
          nodeClassRef: {name: c}
          requirements: []
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: b}
    spec:
      template:
        spec:
          kubelet: {maxPods: 3}
"#,
    )
    .expect("YAML");
    let c = convert(&list).expect("converts");
    assert_eq!(c.documents.len(), 2);
    assert_eq!(c.documents[0]["apiVersion"], "karpenter.sh/v1");
    assert_eq!(c.documents[1], list["items"][1]);
    assert!(has_note(
        &c,
        "spec.template.spec.kubelet",
        NoteKind::ActionRequired
    ));
    let all = convert_all_with(std::slice::from_ref(&list), &Options::default()).expect("converts");
    assert_eq!(all.documents, c.documents);
    assert_eq!(all.notes.last().and_then(|n| n.document.index), Some(1));
}

#[test]
fn name_collisions_are_reported() {
    let text = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata:\n  name: default\nspec:\n  provider:\n    subnetSelector: {a: b}\n    securityGroupSelector: {a: b}\n---\napiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n  amiFamily: AL2\n  role: r\n";
    let c = convert_yaml("x.yaml", text, &Options::default()).expect("converts");
    assert_eq!(c.documents.len(), 3);
    assert!(c.notes.iter().any(|n| n.path == "metadata.name"
        && n.kind == NoteKind::ActionRequired
        && n.document.index == Some(1)));
}

#[test]
fn pasted_non_breaking_space_indentation() {
    let text = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata:\n\u{a0} name: default\nspec:\n\u{a0} ttlSecondsAfterEmpty: 30\n\u{a0} providerRef:\n\u{a0}\u{a0}\u{a0} name: default\n";
    let c = convert_yaml("pasted.yaml", text, &Options::default()).expect("converts");
    assert_eq!(
        c.documents[0]["spec"]["disruption"]["consolidateAfter"],
        "30s"
    );
    let first = &c.notes[0];
    assert_eq!(first.document.file.as_deref(), Some("pasted.yaml"));
    assert!(first.message.contains("non-breaking spaces"), "{first}");
}

#[test]
fn cli_converts_files() {
    let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/seeds");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-convert"))
        .arg("-f")
        .arg(format!("{seeds}/001-provisioner.yaml"))
        .arg("--node-role")
        .arg("KarpenterNodeRole-sample-1-22")
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let docs = read_documents(&stdout).expect("YAML out");
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[1]["spec"]["role"], "KarpenterNodeRole-sample-1-22");
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(stderr.contains("spec.ttlSecondsAfterEmpty"), "{stderr}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter-convert"))
        .arg("-f")
        .arg(format!("{seeds}/does-not-exist.yaml"))
        .output()
        .expect("runs");
    assert!(!out.status.success());
}

/// A v1 document passes through with notes on the fields its CRD does not
/// have, and none on the fields it does: the fields are the CRD's own
/// (found by `karpctl convert` calling Karpenter v1.14's cpuOptions and
/// networkInterfaces "not a field", from a list kept apart from the CRD).
#[test]
fn v1_documents_are_checked_against_their_crds_fields() {
    let c = convert_yaml(
        "current.yaml",
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: current}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{id: subnet-1}]
  securityGroupSelectorTerms: [{id: sg-1}]
  cpuOptions: {nestedVirtualization: enabled}
  networkInterfaces: [{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}]
  connectionTracking: {tcpEstablishedTimeout: 3600}
  enclaveOptions: {enabled: true}
  kubelet: {shutdownGracePeriod: 30s}
  metadataOptions: {httpTokens: required, httpPutResponseHopLimt: 2}
  roles: oops
"#,
        &Options::default(),
    )
    .expect("converts");
    let unknown: Vec<&str> = c
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::ActionRequired)
        .map(|n| n.path.as_str())
        .collect();
    assert_eq!(
        unknown,
        ["spec.metadataOptions.httpPutResponseHopLimt", "spec.roles"],
        "{:?}",
        c.notes
    );
}
