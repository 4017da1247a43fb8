//! Karpenter's own CRDs (copies under `tests/fixtures/upstream/`): every
//! rule compiles, valid manifests pass and get their defaults, and invalid
//! ones fail with the apiserver's exact messages.

use crd_validation::{CrdValidator, Outcome, ValidateOptions};
use serde_json::{Value, json};

fn nodepools() -> CrdValidator {
    CrdValidator::from_yaml(include_str!(
        "fixtures/upstream/karpenter.sh_nodepools.yaml"
    ))
    .expect("the NodePool CRD loads")
}

fn nodeclaims() -> CrdValidator {
    CrdValidator::from_yaml(include_str!(
        "fixtures/upstream/karpenter.sh_nodeclaims.yaml"
    ))
    .expect("the NodeClaim CRD loads")
}

fn ec2nodeclasses() -> CrdValidator {
    CrdValidator::from_yaml(include_str!(
        "fixtures/upstream/karpenter.k8s.aws_ec2nodeclasses.yaml"
    ))
    .expect("the EC2NodeClass CRD loads")
}

fn messages(o: &Outcome) -> Vec<String> {
    o.violations.iter().map(ToString::to_string).collect()
}

/// Validates with every rule evaluated, so that each case shows all of its
/// problems.
fn lint(v: &CrdValidator, obj: &mut Value, old: Option<&Value>) -> Vec<String> {
    let opts = ValidateOptions {
        rules_despite_errors: true,
        ..ValidateOptions::default()
    };
    let version = obj["apiVersion"]
        .as_str()
        .and_then(|a| a.split_once('/'))
        .map(|(_, v)| v.to_string())
        .unwrap_or_default();
    messages(
        &v.validate_with(&version, obj, old, &opts)
            .expect("version is served"),
    )
}

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "platform"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"], "minValues": 1}
                    ],
                    "taints": [{"key": "example.com/special", "effect": "NoSchedule"}]
                }
            },
            "limits": {"cpu": 1000, "memory": "1000Gi"},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
            "weight": 10
        }
    })
}

fn ec2nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-cluster",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "cluster"}}],
            "blockDeviceMappings": [{
                "deviceName": "/dev/xvda",
                "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true},
                "rootVolume": true
            }],
            "tags": {"team": "platform"}
        }
    })
}

#[test]
fn every_rule_of_the_upstream_crds_compiles() {
    let count = |v: &CrdValidator| v.versions().iter().map(|v| v.rule_count()).sum::<usize>();
    assert_eq!(count(&nodepools()), 21);
    assert_eq!(count(&nodeclaims()), 11);
    assert_eq!(count(&ec2nodeclasses()), 71);
}

#[test]
fn the_crds_describe_themselves() {
    let np = nodepools();
    assert_eq!(np.group(), "karpenter.sh");
    assert_eq!(np.kind(), "NodePool");
    assert_eq!(np.names().plural, "nodepools");
    assert_eq!(np.scope(), crd_validation::Scope::Cluster);
    assert!(np.handles("karpenter.sh/v1", "NodePool"));
    assert!(!np.handles("karpenter.sh/v1beta1", "NodePool"));
    let nc = ec2nodeclasses();
    let versions: Vec<&str> = nc.versions().iter().map(|v| v.name.as_str()).collect();
    assert_eq!(versions, ["v1", "v1beta1"]);
    assert_eq!(nc.storage_version().map(|v| v.name.as_str()), Some("v1"));
    assert!(nc.version("v1").is_some_and(|v| v.status_subresource));
    assert_eq!(nc.names().short_names, ["ec2nc", "ec2ncs"]);
}

#[test]
fn a_valid_nodepool_passes_and_gets_its_defaults() {
    let v = nodepools();
    let mut np = nodepool();
    let out = v.validate("v1", &mut np, None).expect("served");
    assert_eq!(messages(&out), Vec::<String>::new());
    assert!(out.unknown_fields.is_empty());
    assert_eq!(
        np["spec"]["disruption"]["budgets"],
        json!([{"nodes": "10%"}])
    );
    assert_eq!(np["spec"]["template"]["spec"]["expireAfter"], "720h");

    // With no disruption block at all, the block's default applies, and
    // then the defaults inside it.
    let mut np = nodepool();
    np["spec"].as_object_mut().map(|s| s.remove("disruption"));
    let out = v.validate("v1", &mut np, None).expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));
    assert_eq!(
        np["spec"]["disruption"],
        json!({"consolidateAfter": "0s", "budgets": [{"nodes": "10%"}], "consolidationPolicy": "WhenEmptyOrUnderutilized"})
    );
}

#[test]
fn schema_violations_read_like_the_apiservers() {
    let v = nodepools();
    let mut np = nodepool();
    np["spec"]["weight"] = json!(0);
    np["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Foo");
    np["spec"]["template"]["spec"]["expireAfter"] = json!("1d");
    np["spec"]["limits"]["cpu"] = json!("lots");
    np["spec"]["template"]["spec"]["taints"][0]["effect"] = json!("NoWay");
    np["spec"]["template"]["spec"]["requirements"][2]["minValues"] = json!(51);
    let out = v.validate("v1", &mut np, None).expect("served");
    assert_eq!(
        messages(&out),
        [
            "spec.template.spec.requirements[0].operator: Unsupported value: \"Foo\": supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\"",
            "spec.template.spec.requirements[2].minValues: Invalid value: 51: spec.template.spec.requirements[2].minValues in body should be less than or equal to 50",
            "spec.template.spec.taints[0].effect: Unsupported value: \"NoWay\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
            "spec.template.spec.expireAfter: Invalid value: \"1d\": spec.template.spec.expireAfter in body should match '^(([0-9]+(s|m|h))+)|(Never)$'",
            "spec.limits.cpu: Invalid value: \"lots\": spec.limits.cpu in body should match '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'",
            "spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1",
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
}

#[test]
fn missing_required_fields_are_reported() {
    let v = nodepools();
    let mut np = nodepool();
    np["spec"]["template"]["spec"]
        .as_object_mut()
        .map(|s| s.remove("nodeClassRef"));
    np["spec"]["disruption"]
        .as_object_mut()
        .map(|d| d.remove("consolidateAfter"));
    np["spec"]["template"]["spec"]["taints"][0]
        .as_object_mut()
        .map(|t| t.remove("key"));
    let out = v.validate("v1", &mut np, None).expect("served");
    assert_eq!(
        messages(&out),
        [
            "spec.template.spec.nodeClassRef: Required value",
            "spec.template.spec.taints[0].key: Required value",
            "spec.disruption.consolidateAfter: Required value",
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
}

#[test]
fn rules_report_their_messages_at_their_nodes() {
    let v = nodepools();
    let mut np = nodepool();
    let spec = &mut np["spec"];
    spec["disruption"]["budgets"] = json!([{"nodes": "10%", "schedule": "@daily"}]);
    spec["template"]["metadata"]["labels"] =
        json!({"karpenter.sh/team": "a", "kubernetes.io/hostname": "b"});
    spec["template"]["spec"]["requirements"] = json!([
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]},
        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["abc"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": []},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"], "minValues": 2}
    ]);
    assert_eq!(
        lint(&v, &mut np, None),
        [
            "spec.template.metadata.labels: Invalid value: label domain \"kubernetes.io\" is restricted",
            "spec.template.metadata.labels: Invalid value: label domain \"karpenter.sh\" is restricted",
            "spec.template.metadata.labels: Invalid value: label \"kubernetes.io/hostname\" is restricted",
            "spec.template.spec.requirements: Invalid value: requirements with operator 'In' must have a value defined",
            "spec.template.spec.requirements: Invalid value: \"array\": type conversion error from 'string' to 'int' evaluating rule: requirements operator 'Gt' or 'Lt' must have a single positive integer value",
            "spec.template.spec.requirements: Invalid value: requirements with 'minValues' must have at least that many values specified in the 'values' field",
            "spec.template.spec.requirements[0].key: Invalid value: \"kubernetes.io/hostname\": label domain \"kubernetes.io\" is restricted",
            "spec.template.spec.requirements[0].key: Invalid value: \"kubernetes.io/hostname\": label \"kubernetes.io/hostname\" is restricted",
            "spec.disruption.budgets: Invalid value: 'schedule' must be set with 'duration'",
        ]
    );
}

#[test]
fn well_known_labels_are_allowed() {
    let v = nodepools();
    let mut np = nodepool();
    np["spec"]["template"]["metadata"]["labels"] = json!({
        "karpenter.sh/capacity-type": "spot",
        "topology.kubernetes.io/zone": "us-west-2a",
        "node.kubernetes.io/exclude-from-external-load-balancers": "true",
        "karpenter.k8s.aws/instance-family": "m5",
        "example.com/team": "a"
    });
    let out = v.validate("v1", &mut np, None).expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));
}

#[test]
fn unknown_fields_are_pruned_and_listed_apart() {
    let v = nodepools();
    let mut np = nodepool();
    np["spec"]["limit"] = json!({"cpu": 10});
    np["spec"]["template"]["spec"]["requirements"][0]["value"] = json!("x");
    np["metadata"]["labelz"] = json!({});
    let out = v.validate("v1", &mut np, None).expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));
    assert_eq!(
        out.unknown_fields,
        [
            "metadata.labelz",
            "spec.template.spec.requirements[0].value",
            "spec.limit"
        ]
    );
    assert_eq!(out.strict_errors()[2], "unknown field \"spec.limit\"");
    assert!(
        np["spec"].get("limit").is_none(),
        "pruned like the apiserver does"
    );
}

#[test]
fn object_meta_is_checked() {
    let v = nodepools();
    let mut np = nodepool();
    np["metadata"] =
        json!({"name": "Default_Pool", "namespace": "default", "labels": {"bad key!": "v"}});
    let out = v.validate("v1", &mut np, None).expect("served");
    assert_eq!(
        messages(&out),
        [
            "metadata.name: Invalid value: \"Default_Pool\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "metadata.namespace: Forbidden: not allowed on this type",
            "metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ]
    );

    let mut np = nodepool();
    np["metadata"] = json!({"generateName": "pool-"});
    assert!(v.validate("v1", &mut np, None).expect("served").is_valid());
    np["metadata"] = json!({});
    assert_eq!(
        messages(&v.validate("v1", &mut np, None).expect("served")),
        [
            "metadata.name: Required value: name or generateName is required",
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
}

#[test]
fn the_wrong_kind_or_version_stops_validation() {
    let v = nodepools();
    let mut np = nodepool();
    np["apiVersion"] = json!("karpenter.sh/v1beta1");
    assert_eq!(
        messages(&v.validate("v1", &mut np, None).expect("served")),
        ["apiVersion: Invalid value: \"karpenter.sh/v1beta1\": must be karpenter.sh/v1"]
    );
    assert!(
        v.validate_object(&mut np, None).is_err(),
        "v1beta1 is not defined"
    );
}

#[test]
fn transition_rules_run_only_on_update() {
    let v = nodepools();
    let old = {
        let mut o = nodepool();
        v.validate("v1", &mut o, None).expect("served");
        o
    };
    let mut np = nodepool();
    np["spec"]["template"]["spec"]["nodeClassRef"]["group"] = json!("karpenter.azure.com");
    np["spec"]["template"]["spec"]["nodeClassRef"]["kind"] = json!("AKSNodeClass");
    let created = v.validate("v1", &mut np.clone(), None).expect("served");
    assert!(
        created.is_valid(),
        "no oldSelf on create: {:?}",
        messages(&created)
    );
    let updated = v.validate("v1", &mut np, Some(&old)).expect("served");
    assert_eq!(
        messages(&updated),
        [
            "spec.template.spec.nodeClassRef: Invalid value: nodeClassRef.group is immutable",
            "spec.template.spec.nodeClassRef: Invalid value: nodeClassRef.kind is immutable",
        ]
    );
    let mut same = nodepool();
    same["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("other");
    assert!(
        v.validate("v1", &mut same, Some(&old))
            .expect("served")
            .is_valid()
    );
}

#[test]
fn unchanged_invalid_fields_are_ratcheted_on_update() {
    let v = nodepools();
    // Stored before the restriction existed: the label is now rejected...
    let mut old = nodepool();
    old["spec"]["template"]["metadata"]["labels"] = json!({"karpenter.sh/legacy": "x"});
    assert!(
        !v.validate("v1", &mut old.clone(), None)
            .expect("served")
            .is_valid()
    );
    // ...but an update that leaves it alone goes through, with a warning.
    let mut np = old.clone();
    np["spec"]["weight"] = json!(20);
    let out = v.validate("v1", &mut np, Some(&old)).expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));
    assert_eq!(
        out.warnings,
        [
            "spec.template.metadata.labels: Invalid value: label domain \"karpenter.sh\" is restricted"
        ]
    );
    let strict = ValidateOptions {
        ratcheting: false,
        ..ValidateOptions::default()
    };
    assert!(
        !v.validate_with("v1", &mut np, Some(&old), &strict)
            .expect("served")
            .is_valid()
    );
}

#[test]
fn a_valid_ec2nodeclass_passes_and_gets_its_defaults() {
    let v = ec2nodeclasses();
    let mut nc = ec2nodeclass();
    let out = v.validate("v1", &mut nc, None).expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));
    assert_eq!(
        nc["spec"]["metadataOptions"],
        json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"})
    );
}

#[test]
fn ec2nodeclass_rules() {
    let v = ec2nodeclasses();
    let mut nc = ec2nodeclass();
    let spec = &mut nc["spec"];
    spec.as_object_mut().map(|s| s.remove("role"));
    spec["amiSelectorTerms"] = json!([{"alias": "ubuntu@latest"}, {"id": "ami-123"}]);
    spec["tags"] = json!({"kubernetes.io/cluster/prod": "owned", "karpenter.sh/nodepool": "x"});
    spec["blockDeviceMappings"] = json!([
        {"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}},
        {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"encrypted": true}}
    ]);
    spec["subnetSelectorTerms"] = json!([{}]);
    assert_eq!(
        lint(&v, &mut nc, None),
        [
            "spec: Invalid value: must specify exactly one of ['role', 'instanceProfile']",
            "spec.tags: Invalid value: tag contains a restricted tag matching kubernetes.io/cluster/",
            "spec.tags: Invalid value: tag contains a restricted tag matching karpenter.sh/nodepool",
            "spec.amiSelectorTerms: Invalid value: 'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            "spec.amiSelectorTerms[0].alias: Invalid value: \"ubuntu@latest\": family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022'",
            "spec.subnetSelectorTerms: Invalid value: expected at least one, got none, ['tags', 'id']",
            "spec.blockDeviceMappings: Invalid value: must have only one blockDeviceMappings with rootVolume",
            "spec.blockDeviceMappings[1].ebs: Invalid value: snapshotID or volumeSize must be defined",
        ]
    );
}

#[test]
fn ec2nodeclass_schema_constraints() {
    let v = ec2nodeclasses();
    let mut nc = ec2nodeclass();
    nc["spec"]["blockDeviceMappings"][0]["ebs"]["volumeSize"] = json!("100GB");
    nc["spec"]["amiSelectorTerms"] = json!([]);
    nc["spec"]["metadataOptions"] = json!({"httpPutResponseHopLimit": 65});
    let out = v.validate("v1", &mut nc, None).expect("served");
    assert_eq!(
        messages(&out),
        [
            "spec.amiSelectorTerms: Invalid value: 0: spec.amiSelectorTerms in body should have at least 1 items",
            "spec.blockDeviceMappings[0].ebs.volumeSize: Invalid value: \"100GB\": spec.blockDeviceMappings[0].ebs.volumeSize in body should match '^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$'",
            "spec.metadataOptions.httpPutResponseHopLimit: Invalid value: 65: spec.metadataOptions.httpPutResponseHopLimit in body should be less than or equal to 64",
            // minItems does not block rules, and no term has an alias.
            "spec: Invalid value: must specify amiFamily if amiSelectorTerms does not contain an alias",
        ]
    );
    assert_eq!(
        nc["spec"]["metadataOptions"]["httpTokens"], "required",
        "defaults fill in the rest of a partial block"
    );
}

#[test]
fn ec2nodeclass_transition_rules() {
    let v = ec2nodeclasses();
    let old = ec2nodeclass();
    let mut nc = ec2nodeclass();
    nc["spec"]["role"] = json!("AnotherRole");
    assert_eq!(
        messages(&v.validate("v1", &mut nc, Some(&old)).expect("served")),
        ["spec.role: Invalid value: \"AnotherRole\": immutable field changed"]
    );

    let mut old = ec2nodeclass();
    old["spec"].as_object_mut().map(|s| s.remove("role"));
    old["spec"]["instanceProfile"] = json!("KarpenterProfile");
    let mut nc = ec2nodeclass();
    assert_eq!(
        messages(&v.validate("v1", &mut nc, Some(&old)).expect("served")),
        [
            "spec: Invalid value: changing from 'instanceProfile' to 'role' is not supported. You must delete and recreate this node class if you want to change this."
        ]
    );
}

#[test]
fn ec2nodeclass_v1beta1_has_its_own_schema() {
    let v = ec2nodeclasses();
    let mut nc = ec2nodeclass();
    nc["apiVersion"] = json!("karpenter.k8s.aws/v1beta1");
    nc["spec"]["amiSelectorTerms"] = json!([{"id": "ami-0123456789"}]);
    let out = v.validate_object(&mut nc, None).expect("v1beta1 is served");
    assert_eq!(
        messages(&out),
        [
            "spec.amiFamily: Required value",
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
    // The block's default wins over the field's own (2) when the block is absent.
    assert_eq!(nc["spec"]["metadataOptions"]["httpPutResponseHopLimit"], 1);
}

#[test]
fn nodeclaim_spec_is_immutable() {
    let v = nodeclaims();
    let nodeclaim = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde"},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]
        }
    });
    let mut old = nodeclaim.clone();
    assert!(v.validate("v1", &mut old, None).expect("served").is_valid());

    let mut status_update = old.clone();
    status_update["status"] = json!({
        "providerID": "aws:///us-west-2a/i-0123",
        "conditions": [{"type": "Launched", "status": "True", "lastTransitionTime": "2024-07-01T10:00:00Z"}]
    });
    let out = v
        .validate("v1", &mut status_update, Some(&old))
        .expect("served");
    assert!(out.is_valid(), "{:?}", messages(&out));

    let mut changed = old.clone();
    changed["spec"]["requirements"][0]["values"] = json!(["m5.xlarge"]);
    assert_eq!(
        messages(&v.validate("v1", &mut changed, Some(&old)).expect("served")),
        ["spec: Invalid value: spec is immutable"]
    );

    let mut bad_time = old.clone();
    bad_time["status"] = json!({"conditions": [{"type": "Launched", "status": "True", "lastTransitionTime": "yesterday"}]});
    assert_eq!(
        messages(&v.validate("v1", &mut bad_time, None).expect("served")),
        [
            "status.conditions[0].lastTransitionTime: Invalid value: \"yesterday\": status.conditions[0].lastTransitionTime in body must be of type date-time: \"yesterday\"",
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
}

/// The apiserver accepts Karpenter's CRDs (upstream's and this project's,
/// and the kwok provider's node class): nothing in their group, names,
/// versions or schemas is refused.
#[test]
fn karpenter_crds_pass_definition_validation() {
    for text in [
        include_str!("fixtures/upstream/karpenter.sh_nodepools.yaml"),
        include_str!("fixtures/upstream/karpenter.sh_nodeclaims.yaml"),
        include_str!("fixtures/upstream/karpenter.k8s.aws_ec2nodeclasses.yaml"),
        include_str!("../../../services/provider-kwok/crds/karpenter.kwok.sh_kwoknodeclasses.yaml"),
        // The project's own, generated from its API types.
        include_str!("../../../deploy/crds/karpenter.sh_nodepools.yaml"),
        include_str!("../../../deploy/crds/karpenter.sh_nodeclaims.yaml"),
        include_str!("../../../deploy/crds/karpenter.k8s.aws_ec2nodeclasses.yaml"),
    ] {
        let mut crd: Value = serde_yaml::from_str(text).expect("yaml");
        crd_validation::default_names(&mut crd);
        let refused: Vec<String> = crd_validation::validate_definition(&crd)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            refused.is_empty(),
            "{}: {refused:?}",
            crd["metadata"]["name"]
        );
    }
}

/// The EC2NodeClass fields of Karpenter v1.14/v1.15, against this project's
/// generated CRD (the upstream fixtures predate them): valid settings pass,
/// and each rule answers with upstream's message at upstream's path.
#[test]
fn ec2nodeclass_v1_14_fields() {
    let v = CrdValidator::from_yaml(include_str!(
        "../../../deploy/crds/karpenter.k8s.aws_ec2nodeclasses.yaml"
    ))
    .expect("the project's EC2NodeClass CRD loads");
    let mut nc = ec2nodeclass();
    nc["spec"]["amiSelectorTerms"] = json!([{"alias": "windows2025@latest"}]);
    nc["spec"]["placementGroupSelector"] = json!({"name": "analytics"});
    nc["spec"]["networkInterfaces"] = json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"}
    ]);
    nc["spec"]["connectionTracking"] = json!({"tcpEstablishedTimeout": 3600});
    nc["spec"]["cpuOptions"] = json!({"nestedVirtualization": "enabled"});
    assert_eq!(lint(&v, &mut nc, None), Vec::<String>::new());

    nc["spec"]["amiFamily"] = json!("Windows2022");
    nc["spec"]["amiSelectorTerms"] = json!([{"alias": "windows2025@v20250101"}]);
    nc["spec"]["placementGroupSelector"] = json!({"name": "analytics", "id": "pg-0123"});
    nc["spec"]["networkInterfaces"] = json!([
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}
    ]);
    nc["spec"]["connectionTracking"] = json!({});
    assert_eq!(
        lint(&v, &mut nc, None),
        [
            "spec: Invalid value: if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias",
            "spec.amiSelectorTerms[0].alias: Invalid value: \"windows2025@v20250101\": windows families may only specify version 'latest'",
            "spec.placementGroupSelector: Invalid value: 'name' and 'id' are mutually exclusive",
            "spec.networkInterfaces: Invalid value: networkInterfaces must include a primary interface with interfaceType='interface'",
            "spec.networkInterfaces: Invalid value: networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
            "spec.connectionTracking: Invalid value: at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
        ]
    );

    let mut nc = ec2nodeclass();
    nc["spec"]["placementGroupSelector"] = json!({"id": "placement-1"});
    nc["spec"]["connectionTracking"] = json!({"udpTimeout": 90});
    nc["spec"]["cpuOptions"] = json!({"nestedVirtualization": "on"});
    nc["spec"]["networkInterfaces"] = json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "efa"}
    ]);
    let out = v.validate("v1", &mut nc, None).expect("served");
    assert_eq!(
        messages(&out),
        [
            "spec.placementGroupSelector.id: Invalid value: \"placement-1\": spec.placementGroupSelector.id in body should match '^pg-[0-9a-z]+$'",
            "spec.connectionTracking.udpTimeout: Invalid value: 90: spec.connectionTracking.udpTimeout in body should be less than or equal to 60",
            "spec.cpuOptions.nestedVirtualization: Unsupported value: \"on\": supported values: \"enabled\", \"disabled\"",
            "spec.networkInterfaces[0].interfaceType: Unsupported value: \"efa\": supported values: \"interface\", \"efa-only\"",
            // As kube-apiserver: the rules wait for a well-typed object.
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
}

fn nodeoverlay(spec: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "overlay"},
        "spec": spec
    })
}

/// Karpenter's NodeOverlay validation cases (`nodeoverlay_validation_test.go`)
/// against the project's generated CRD: what passes, and what fails with
/// which message.
#[test]
fn nodeoverlay_v1alpha1() {
    let v = CrdValidator::from_yaml(include_str!(
        "../../../deploy/crds/karpenter.sh_nodeoverlays.yaml"
    ))
    .expect("the project's NodeOverlay CRD loads");
    let check = |spec: Value| lint(&v, &mut nodeoverlay(spec), None);
    let requirement = |key: &str, operator: &str, values: Value| json!({"requirements": [{"key": key, "operator": operator, "values": values}]});

    for key in [
        "Test",
        "test.com/Test",
        "key-only",
        "karpenter.sh/nodepool",
        "karpenter.sh/capacity-type",
        "kubernetes.io/arch",
        "k8s.io/x",
        "sub.kubernetes.io/x",
        "node.kubernetes.io/instance-type",
    ] {
        assert_eq!(
            check(requirement(key, "Exists", json!([]))),
            Vec::<String>::new(),
            "{key}"
        );
    }
    for key in [
        "test.com.com}",
        "Test.com/test",
        "test/test/test",
        "test/",
        "/test",
    ] {
        assert!(
            !check(requirement(key, "Exists", json!([]))).is_empty(),
            "{key}"
        );
    }
    assert_eq!(
        check(requirement("karpenter.sh/test", "Exists", json!([]))),
        [
            "spec.requirements[0].key: Invalid value: \"karpenter.sh/test\": label domain \"karpenter.sh\" is restricted"
        ]
    );
    assert_eq!(
        check(requirement("kubernetes.io/hostname", "Exists", json!([]))),
        [
            "spec.requirements[0].key: Invalid value: \"kubernetes.io/hostname\": label \"kubernetes.io/hostname\" is restricted"
        ]
    );
    for op in [
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
        "Gt",
        "Lt",
        "Gte",
        "Lte",
    ] {
        let values = match op {
            "Exists" | "DoesNotExist" => json!([]),
            "In" | "NotIn" => json!(["a"]),
            _ => json!(["1"]),
        };
        assert_eq!(
            check(requirement("test", op, values)),
            Vec::<String>::new(),
            "{op}"
        );
    }
    assert!(!check(requirement("test", "unknown", json!(["a"]))).is_empty());
    assert_eq!(
        check(requirement("test", "NotIn", json!([]))),
        [
            "spec.requirements: Invalid value: requirements with operator 'NotIn' must have a value defined"
        ]
    );
    assert_eq!(
        check(requirement("test", "In", json!([]))),
        [
            "spec.requirements: Invalid value: requirements with operator 'In' must have a value defined"
        ]
    );
    for values in [json!([]), json!(["1", "2"]), json!(["a"]), json!(["-1"])] {
        assert!(
            !check(requirement("test", "Gt", values.clone())).is_empty(),
            "{values}"
        );
    }

    let priced = |field: &str, value: &str| {
        let mut spec = json!({"requirements": []});
        spec[field] = json!(value);
        check(spec)
    };
    for ok in [
        "+1%",
        "-1%",
        "-100%",
        "+100.102%",
        "+298%",
        "+43",
        "-43",
        "+34.43",
        "-34.43",
        "-129",
    ] {
        assert_eq!(priced("priceAdjustment", ok), Vec::<String>::new(), "{ok}");
    }
    for bad in ["1%", "1", "1.3", "-100.0%", "-101.1%"] {
        assert_eq!(priced("priceAdjustment", bad).len(), 1, "{bad}");
    }
    for ok in ["43", "34.43"] {
        assert_eq!(priced("price", ok), Vec::<String>::new(), "{ok}");
    }
    for bad in [
        "+42",
        ".5",
        "42.",
        "42%",
        "3,14",
        "1e10",
        "0x42",
        "forty-two",
        "42a",
        "42 ",
        " 42",
        "42.0.0",
        "-",
        ".",
        "-.42",
    ] {
        assert_eq!(priced("price", bad).len(), 1, "{bad}");
    }
    assert_eq!(
        check(json!({"requirements": [], "price": "1", "priceAdjustment": "+1"})),
        ["spec: Invalid value: cannot set both 'price' and 'priceAdjustment'"]
    );
    assert_eq!(
        check(json!({"requirements": [], "capacity": {"smarter-devices/fuse": "1"}})),
        Vec::<String>::new()
    );
    for resource in ["cpu", "memory", "pods", "ephemeral-storage"] {
        assert_eq!(
            check(json!({"requirements": [], "capacity": {resource: "1"}})),
            ["spec.capacity: Invalid value: invalid resource restricted"],
            "{resource}"
        );
    }
    assert_eq!(
        check(json!({"requirements": [], "weight": 10000})),
        Vec::<String>::new()
    );
    assert_eq!(check(json!({"requirements": [], "weight": 0})).len(), 1);
    assert_eq!(check(json!({})).len(), 1, "requirements are required");
}

/// The CapacityBuffer CRD's rules as upstream's
/// (`autoscaling.x-k8s.io_capacitybuffers.yaml`): a template reference needs
/// a size, the two references exclude each other, sizes are not negative,
/// and the strategy is defaulted.
#[test]
fn capacitybuffer_v1beta1() {
    let v = CrdValidator::from_yaml(include_str!(
        "../../../deploy/crds/autoscaling.x-k8s.io_capacitybuffers.yaml"
    ))
    .expect("the project's CapacityBuffer CRD loads");
    let buffer = |spec: Value| {
        json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1",
            "kind": "CapacityBuffer",
            "metadata": {"name": "b", "namespace": "default"},
            "spec": spec
        })
    };
    let check = |spec: Value| lint(&v, &mut buffer(spec), None);
    for ok in [
        json!({"podTemplateRef": {"name": "t"}, "replicas": 2}),
        json!({"podTemplateRef": {"name": "t"}, "limits": {"cpu": "4"}}),
        json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 20}),
        json!({"scalableRef": {"apiGroup": "apps", "kind": "StatefulSet", "name": "db"}}),
    ] {
        assert_eq!(check(ok.clone()), Vec::<String>::new(), "{ok}");
    }
    assert_eq!(
        check(json!({"podTemplateRef": {"name": "t"}})),
        ["spec: Invalid value: If podTemplateRef is set, replicas or limits must also be set"]
    );
    assert_eq!(
        check(
            json!({"podTemplateRef": {"name": "t"}, "replicas": 1, "scalableRef": {"kind": "Deployment", "name": "web"}})
        ),
        ["spec: Invalid value: You must define either PodTemplateRef or ScalableRef, but not both"]
    );
    assert_eq!(
        check(json!({"podTemplateRef": {"name": "t"}, "replicas": -1})),
        [
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        ]
    );
    assert!(!check(json!({"scalableRef": {"kind": "Deployment", "name": ""}})).is_empty());
    let mut object = buffer(json!({"podTemplateRef": {"name": "t"}, "replicas": 1}));
    let outcome = v.validate("v1beta1", &mut object, None).expect("served");
    assert!(outcome.violations.is_empty(), "{:?}", messages(&outcome));
    assert_eq!(
        object["spec"]["provisioningStrategy"],
        "buffer.x-k8s.io/active-capacity"
    );
}
