//! What a user of the CRDs relies on: defaults, validation rules on the right fields, printer
//! columns, names, subresources, and a schema the API server accepts (structural).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::schema::{check_structural, collect_patterns, collect_rules};
use karpenter_api::{CustomResourceExt, EC2NodeClass, NodeClaim, NodePool, crds};
use serde_json::{Value, json};

fn crd(name: &str) -> CustomResourceDefinition {
    crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD named {name}"))
}

fn schema(name: &str) -> Value {
    let crd = crd(name);
    let version = crd
        .spec
        .versions
        .first()
        .unwrap_or_else(|| panic!("{name} has no version"));
    let props = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.clone())
        .unwrap_or_else(|| panic!("{name} has no schema"));
    serde_json::to_value(props).unwrap_or_else(|e| panic!("{e}"))
}

/// Walks a schema: `a.b` steps into properties, `[]` into items, `*` into additionalProperties.
fn at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut node = schema;
    for step in path.split('.').filter(|s| !s.is_empty()) {
        let (name, items) = match step.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (step, false),
        };
        if !name.is_empty() {
            node = if name == "*" {
                &node["additionalProperties"]
            } else {
                &node["properties"][name]
            };
        }
        if items {
            node = &node["items"];
        }
        assert!(!node.is_null(), "no schema at {path} (stopped at {step})");
    }
    node
}

fn messages(node: &Value) -> Vec<String> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .filter_map(|r| r["message"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

const NODEPOOLS: &str = "nodepools.karpenter.sh";
const NODECLAIMS: &str = "nodeclaims.karpenter.sh";
const EC2NODECLASSES: &str = "ec2nodeclasses.karpenter.k8s.aws";

#[test]
fn every_schema_is_structural() {
    for name in [NODEPOOLS, NODECLAIMS, EC2NODECLASSES] {
        if let Err(problems) = check_structural(&schema(name)) {
            panic!(
                "{name} is not a structural schema:\n{}",
                problems.join("\n")
            );
        }
    }
}

#[test]
fn names_scope_categories_and_short_names_match_karpenter() {
    for (name, kind, plural, short) in [
        (NODEPOOLS, "NodePool", "nodepools", None),
        (NODECLAIMS, "NodeClaim", "nodeclaims", None),
        (
            EC2NODECLASSES,
            "EC2NodeClass",
            "ec2nodeclasses",
            Some(vec!["ec2nc".to_string(), "ec2ncs".to_string()]),
        ),
    ] {
        let crd = crd(name);
        assert_eq!(crd.spec.scope, "Cluster", "{name}");
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(
            crd.spec.names.list_kind.as_deref(),
            Some(format!("{kind}List").as_str())
        );
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["karpenter".to_string()]),
            "{name}"
        );
        assert_eq!(crd.spec.names.short_names, short, "{name}");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1");
        assert!(version.served && version.storage);
        let subresources = version
            .subresources
            .as_ref()
            .unwrap_or_else(|| panic!("{name} has no subresources"));
        assert!(
            subresources.status.is_some(),
            "{name} needs the status subresource"
        );
    }
    assert_eq!(NodePool::crd_name(), NODEPOOLS);
    assert_eq!(NodeClaim::crd_name(), NODECLAIMS);
    assert_eq!(EC2NodeClass::crd_name(), EC2NODECLASSES);
}

#[test]
fn nodepool_scale_subresource_uses_replicas_and_node_count() {
    let crd = crd(NODEPOOLS);
    let scale = crd.spec.versions[0]
        .subresources
        .as_ref()
        .and_then(|s| s.scale.clone());
    let scale = scale.unwrap_or_else(|| panic!("NodePool needs the scale subresource"));
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.nodes");
}

fn columns(name: &str) -> Vec<(String, String, String, i32)> {
    crd(name).spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name, c.type_, c.json_path, c.priority.unwrap_or(0)))
        .collect()
}

fn cols(list: &[(&str, &str, &str, i32)]) -> Vec<(String, String, String, i32)> {
    list.iter()
        .map(|(n, t, p, prio)| (n.to_string(), t.to_string(), p.to_string(), *prio))
        .collect()
}

#[test]
fn printer_columns_match_kubectl_get_output() {
    let ready = ".status.conditions[?(@.type==\"Ready\")].status";
    assert_eq!(
        columns(NODEPOOLS),
        cols(&[
            (
                "NodeClass",
                "string",
                ".spec.template.spec.nodeClassRef.name",
                0
            ),
            ("Nodes", "string", ".status.nodes", 0),
            ("Ready", "string", ready, 0),
            ("Age", "date", ".metadata.creationTimestamp", 0),
            ("Weight", "integer", ".spec.weight", 1),
            ("CPU", "string", ".status.resources.cpu", 1),
            ("Memory", "string", ".status.resources.memory", 1),
        ])
    );
    assert_eq!(
        columns(NODECLAIMS),
        cols(&[
            (
                "Type",
                "string",
                ".metadata.labels.node\\.kubernetes\\.io/instance-type",
                0
            ),
            (
                "Capacity",
                "string",
                ".metadata.labels.karpenter\\.sh/capacity-type",
                0
            ),
            (
                "Zone",
                "string",
                ".metadata.labels.topology\\.kubernetes\\.io/zone",
                0
            ),
            ("Node", "string", ".status.nodeName", 0),
            ("Ready", "string", ready, 0),
            ("Age", "date", ".metadata.creationTimestamp", 0),
            ("ImageID", "string", ".status.imageID", 1),
            ("ID", "string", ".status.providerID", 1),
            (
                "NodePool",
                "string",
                ".metadata.labels.karpenter\\.sh/nodepool",
                1
            ),
            ("NodeClass", "string", ".spec.nodeClassRef.name", 1),
            (
                "Drifted",
                "string",
                ".status.conditions[?(@.type==\"Drifted\")].status",
                1
            ),
            // Ours: why the claim is being disrupted.
            (
                "Disruption",
                "string",
                ".status.conditions[?(@.type==\"DisruptionReason\")].reason",
                1
            ),
        ])
    );
    assert_eq!(
        columns(EC2NODECLASSES),
        cols(&[
            ("Ready", "string", ready, 0),
            ("Age", "date", ".metadata.creationTimestamp", 0),
            ("Role", "string", ".spec.role", 1),
        ])
    );
}

#[test]
fn nodepool_defaults() {
    let s = schema(NODEPOOLS);
    assert_eq!(
        at(&s, "spec.disruption")["default"],
        json!({ "consolidateAfter": "0s" })
    );
    assert_eq!(
        at(&s, "spec.disruption.consolidationPolicy")["default"],
        json!("WhenEmptyOrUnderutilized")
    );
    assert_eq!(
        at(&s, "spec.disruption.consolidationPolicy")["enum"],
        json!(["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"])
    );
    assert_eq!(
        at(&s, "spec.disruption.budgets")["default"],
        json!([{ "nodes": "10%" }])
    );
    assert_eq!(
        at(&s, "spec.disruption.budgets[]")["required"],
        json!(["nodes"])
    );
    assert_eq!(
        at(&s, "spec.disruption.budgets[].nodes")["default"],
        json!("10%")
    );
    // Karpenter v1.15: defaulted to 0s, no longer required.
    assert_eq!(at(&s, "spec.disruption")["required"], Value::Null);
    assert_eq!(
        at(&s, "spec.disruption.consolidateAfter")["default"],
        json!("0s")
    );
    // Karpenter v1.15: node repair is a disruption with a budget reason.
    assert_eq!(
        at(&s, "spec.disruption.budgets[].reasons[]")["enum"],
        json!(["Underutilized", "Empty", "Drifted", "Unhealthy"])
    );
    assert_eq!(
        at(&s, "spec.template.spec.expireAfter")["default"],
        json!("720h")
    );
    assert_eq!(at(&s, "status.nodes")["default"], json!(0));
    assert_eq!(at(&s, "spec.weight")["minimum"], json!(1.0));
    assert_eq!(at(&s, "spec.weight")["maximum"], json!(100.0));
    assert_eq!(
        at(&s, "spec.template.spec")["required"],
        json!(["nodeClassRef", "requirements"])
    );
    assert_eq!(at(&s, "spec.template")["required"], json!(["spec"]));
    assert_eq!(at(&s, "spec")["required"], json!(["template"]));
    assert_eq!(s["required"], json!(["spec"]));
    assert_eq!(
        at(&s, "spec.template.metadata.labels")["maxProperties"],
        json!(100)
    );
    assert_eq!(
        at(&s, "spec.template.spec.requirements")["maxItems"],
        json!(100)
    );
    assert_eq!(at(&s, "spec.disruption.budgets")["maxItems"], json!(50));
    let min_values = at(&s, "spec.template.spec.requirements[].minValues");
    assert_eq!(
        (
            min_values["minimum"].as_f64(),
            min_values["maximum"].as_f64()
        ),
        (Some(1.0), Some(50.0))
    );
    assert_eq!(
        at(&s, "spec.limits.*")["x-kubernetes-int-or-string"],
        json!(true)
    );
    assert_eq!(
        at(&s, "status.resources.*")["x-kubernetes-int-or-string"],
        json!(true)
    );
}

#[test]
fn nodeclaim_defaults_and_required_fields() {
    let s = schema(NODECLAIMS);
    assert_eq!(at(&s, "spec.expireAfter")["default"], json!("720h"));
    assert_eq!(
        at(&s, "spec")["required"],
        json!(["nodeClassRef", "requirements"])
    );
    assert_eq!(
        at(&s, "spec.nodeClassRef")["required"],
        json!(["group", "kind", "name"])
    );
    for quantity in [
        "spec.resources.requests.*",
        "status.capacity.*",
        "status.allocatable.*",
    ] {
        let node = at(&s, quantity);
        assert_eq!(
            node["x-kubernetes-int-or-string"],
            json!(true),
            "{quantity}"
        );
        assert_eq!(
            node["anyOf"],
            json!([{ "type": "integer" }, { "type": "string" }]),
            "{quantity}"
        );
    }
    assert_eq!(
        at(&s, "status.lastPodEventTime")["format"],
        json!("date-time")
    );
    for field in ["nodeName", "providerID", "imageID", "conditions"] {
        at(&s, &format!("status.{field}"));
    }
    assert_eq!(
        at(&s, "status.conditions[]")["required"],
        json!(["lastTransitionTime", "status", "type"])
    );
}

#[test]
fn ec2nodeclass_defaults() {
    let s = schema(EC2NODECLASSES);
    assert_eq!(
        at(&s, "spec.metadataOptions")["default"],
        json!({
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        })
    );
    assert_eq!(
        at(&s, "spec.metadataOptions.httpEndpoint")["default"],
        json!("enabled")
    );
    assert_eq!(
        at(&s, "spec.metadataOptions.httpProtocolIPv6")["default"],
        json!("disabled")
    );
    assert_eq!(
        at(&s, "spec.metadataOptions.httpPutResponseHopLimit")["default"],
        json!(1)
    );
    assert_eq!(
        at(&s, "spec.metadataOptions.httpTokens")["default"],
        json!("required")
    );
    assert_eq!(
        at(&s, "spec.metadataOptions.httpTokens")["enum"],
        json!(["required", "optional"])
    );
    assert_eq!(
        at(&s, "spec")["required"],
        json!([
            "amiSelectorTerms",
            "securityGroupSelectorTerms",
            "subnetSelectorTerms"
        ])
    );
    assert_eq!(
        s.get("required"),
        None,
        "EC2NodeClass does not require spec at the top level"
    );
    assert_eq!(
        at(&s, "spec.amiFamily")["enum"],
        json!([
            "AL2",
            "AL2023",
            "Bottlerocket",
            "Custom",
            "Windows2019",
            "Windows2022",
            "Windows2025"
        ])
    );
    assert_eq!(
        (
            at(&s, "spec.amiSelectorTerms")["minItems"].as_i64(),
            at(&s, "spec.amiSelectorTerms")["maxItems"].as_i64()
        ),
        (Some(1), Some(30))
    );
    assert_eq!(
        at(&s, "spec.amiSelectorTerms[].alias")["maxLength"],
        json!(30)
    );
    assert_eq!(
        at(&s, "spec.subnetSelectorTerms[].tags")["maxProperties"],
        json!(20)
    );
    assert_eq!(at(&s, "spec.instanceStorePolicy")["enum"], json!(["RAID0"]));
    assert_eq!(
        at(&s, "status.capacityReservations[].reservationType")["default"],
        json!("default")
    );
    assert_eq!(
        at(&s, "status.capacityReservations[].state")["default"],
        json!("active")
    );
    assert_eq!(
        at(&s, "status.amis[]")["required"],
        json!(["id", "requirements"])
    );
    assert_eq!(
        at(&s, "status.subnets[]")["required"],
        json!(["id", "zone"])
    );
    for field in [
        "kubelet",
        "capacityReservationSelectorTerms",
        "associatePublicIPAddress",
        "userData",
        "role",
        "instanceProfile",
        "tags",
        "blockDeviceMappings[].ebs.volumeSize",
        "detailedMonitoring",
        "context",
        "amiSelectorTerms[].ssmParameter",
        "amiSelectorTerms[].owner",
    ] {
        at(&s, &format!("spec.{field}"));
    }
}

/// Upstream messages that must appear at a given place in a schema.
fn assert_rules(crd_name: &str, expected: &[(&str, &[&str])]) {
    let s = schema(crd_name);
    for (path, wanted) in expected {
        let found = messages(at(&s, path));
        for message in *wanted {
            assert!(
                found.iter().any(|m| m == message),
                "{crd_name} {path}: missing rule {message:?}; has {found:?}"
            );
        }
    }
}

#[test]
fn nodepool_cel_rules_sit_on_the_right_fields() {
    assert_rules(
        NODEPOOLS,
        &[
            (
                "spec",
                &[
                    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
                    "only 'limits.nodes' is supported on static NodePools",
                    "'weight' is not supported on static NodePools",
                ],
            ),
            (
                "spec.disruption.budgets",
                &["'schedule' must be set with 'duration'"],
            ),
            (
                "spec.template.metadata.labels",
                &[
                    "label domain \"karpenter.sh\" is restricted",
                    "label \"karpenter.sh/nodepool\" is restricted",
                    "label \"kubernetes.io/hostname\" is restricted",
                    "label domain \"karpenter.k8s.aws\" is restricted",
                ],
            ),
            (
                "spec.template.spec.requirements",
                &[
                    "requirements with operator 'In' must have a value defined",
                    "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
                    "requirements with 'minValues' must have at least that many values specified in the 'values' field",
                ],
            ),
            (
                "spec.template.spec.requirements[].key",
                &[
                    "label domain \"karpenter.sh\" is restricted",
                    "label \"karpenter.sh/nodepool\" is restricted",
                    "label \"kubernetes.io/hostname\" is restricted",
                    "label domain \"karpenter.k8s.aws\" is restricted",
                ],
            ),
            (
                "spec.template.spec.nodeClassRef",
                &[
                    "nodeClassRef.group is immutable",
                    "nodeClassRef.kind is immutable",
                ],
            ),
            (
                "spec.template.spec.nodeClassRef.group",
                &["group may not be empty"],
            ),
        ],
    );
}

#[test]
fn nodeclaim_cel_rules_sit_on_the_right_fields() {
    assert_rules(
        NODECLAIMS,
        &[
            ("spec", &["spec is immutable"]),
            (
                "spec.requirements",
                &["requirements with operator 'In' must have a value defined"],
            ),
            (
                "spec.requirements[].key",
                &["label domain \"karpenter.sh\" is restricted"],
            ),
            ("spec.nodeClassRef.kind", &["kind may not be empty"]),
            ("spec.nodeClassRef.name", &["name may not be empty"]),
        ],
    );
    // A NodeClaim carries its NodePool's label as a requirement, so that key is allowed there.
    let s = schema(NODECLAIMS);
    let key_rules = messages(at(&s, "spec.requirements[].key"));
    assert!(
        !key_rules
            .iter()
            .any(|m| m == "label \"karpenter.sh/nodepool\" is restricted")
    );
}

#[test]
fn ec2nodeclass_cel_rules_sit_on_the_right_fields() {
    assert_rules(
        EC2NODECLASSES,
        &[
            (
                "spec",
                &[
                    "must specify exactly one of ['role', 'instanceProfile']",
                    "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
                    "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
                    "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
                    "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias",
                    "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias",
                    "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias",
                    "must specify amiFamily if amiSelectorTerms does not contain an alias",
                ],
            ),
            (
                "spec.subnetSelectorTerms",
                &[
                    "subnetSelectorTerms cannot be empty",
                    "expected at least one, got none, ['tags', 'id', 'cidr']",
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
                ],
            ),
            (
                "spec.securityGroupSelectorTerms",
                &[
                    "securityGroupSelectorTerms cannot be empty",
                    "expected at least one, got none, ['tags', 'id', 'name']",
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                    "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
                ],
            ),
            (
                "spec.capacityReservationSelectorTerms",
                &[
                    "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",
                    "'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",
                ],
            ),
            (
                "spec.amiSelectorTerms",
                &[
                    "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
                    "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
                    "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
                    "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
                ],
            ),
            (
                "spec.amiSelectorTerms[].alias",
                &[
                    "'alias' is improperly formatted, must match the format 'family@version'",
                    "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
                    "windows families may only specify version 'latest'",
                ],
            ),
            (
                "spec.amiSelectorTerms[].tags",
                &["empty tag keys or values aren't supported"],
            ),
            (
                "spec.subnetSelectorTerms[].tags",
                &["empty tag keys or values aren't supported"],
            ),
            (
                "spec.securityGroupSelectorTerms[].tags",
                &["empty tag keys or values aren't supported"],
            ),
            (
                "spec.capacityReservationSelectorTerms[].tags",
                &["empty tag keys or values aren't supported"],
            ),
            ("spec.role", &["role cannot be empty"]),
            ("spec.instanceProfile", &["instanceProfile cannot be empty"]),
            (
                "spec.tags",
                &[
                    "empty tag keys aren't supported",
                    "tag contains a restricted tag matching eks:eks-cluster-name",
                    "tag contains a restricted tag matching kubernetes.io/cluster/",
                    "tag contains a restricted tag matching karpenter.sh/nodepool",
                    "tag contains a restricted tag matching karpenter.sh/nodeclaim",
                    "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
                ],
            ),
            (
                "spec.blockDeviceMappings",
                &["must have only one blockDeviceMappings with rootVolume"],
            ),
            (
                "spec.placementGroupSelector",
                &[
                    "expected at least one, got none, ['name', 'id']",
                    "'name' and 'id' are mutually exclusive",
                ],
            ),
            (
                "spec.networkInterfaces",
                &[
                    "networkInterfaces must include a primary interface with interfaceType='interface'",
                    "networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",
                ],
            ),
            (
                "spec.connectionTracking",
                &[
                    "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",
                ],
            ),
            (
                "spec.blockDeviceMappings[].ebs",
                &[
                    "snapshotID or volumeSize must be defined",
                    "snapshotID must be set when volumeInitializationRate is set",
                ],
            ),
        ],
    );
}

#[test]
fn rule_counts_are_complete() {
    // 20 NodePool and 10 NodeClaim rules, as in Karpenter's CRDs since v1.9
    // dropped the kubernetes.io and k8s.io domain rules; 44 EC2NodeClass
    // (v1.14 added the Windows2025 alias rule and those of
    // placementGroupSelector, networkInterfaces and connectionTracking;
    // v1.15 made spec.kubelet an open object, checked by the provider, and
    // dropped its ten rules).
    let count = |name| collect_rules(&schema(name)).len();
    assert_eq!(count(NODEPOOLS), 20);
    assert_eq!(count(NODECLAIMS), 10);
    assert_eq!(count(EC2NODECLASSES), 44);
}

#[test]
fn every_cel_rule_parses() {
    for name in [NODEPOOLS, NODECLAIMS, EC2NODECLASSES] {
        for (path, rule, message) in collect_rules(&schema(name)) {
            assert!(
                !message.is_empty(),
                "{name} {path}: rule {rule:?} has no message"
            );
            if let Err(e) = cel::Program::compile(&rule) {
                panic!("{name} {path}: rule {rule:?} does not parse: {e:?}");
            }
        }
    }
}

#[test]
fn every_pattern_compiles() {
    for name in [NODEPOOLS, NODECLAIMS, EC2NODECLASSES] {
        for (path, pattern) in collect_patterns(&schema(name)) {
            if let Err(e) = regex::Regex::new(&pattern) {
                panic!("{name} {path}: pattern {pattern:?} does not compile: {e}");
            }
        }
    }
}

#[test]
fn patterns_accept_and_reject_what_karpenter_does() {
    let s = schema(NODEPOOLS);
    let pattern = |path: &str| {
        let p = at(&s, path)["pattern"]
            .as_str()
            .unwrap_or_else(|| panic!("no pattern at {path}"))
            .to_string();
        regex::Regex::new(&p).unwrap_or_else(|e| panic!("{e}"))
    };
    let expire = pattern("spec.template.spec.expireAfter");
    for ok in ["720h", "1h30m", "30s", "Never"] {
        assert!(expire.is_match(ok), "{ok}");
    }
    for bad in ["never", "1d", "1.5h", ""] {
        assert!(!expire.is_match(bad), "{bad}");
    }
    let nodes = pattern("spec.disruption.budgets[].nodes");
    assert!(nodes.is_match("10%") && nodes.is_match("100%") && nodes.is_match("5"));
    assert!(!nodes.is_match("101%") && !nodes.is_match("-1"));
    let duration = pattern("spec.disruption.budgets[].duration");
    assert!(duration.is_match("1h30m") && duration.is_match("10m0s"));
    assert!(!duration.is_match("30s"));
    let quantity = regex::Regex::new(
        at(&s, "spec.limits.*")["pattern"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(quantity.is_match("80Gi") && quantity.is_match("20") && quantity.is_match("500m"));
    assert!(!quantity.is_match("eighty"));
}

#[test]
fn crds_use_no_nullable_fields() {
    // Karpenter's CRDs never set `nullable`: an explicit null is pruned like an absent field.
    for name in [NODEPOOLS, NODECLAIMS, EC2NODECLASSES] {
        let text = serde_json::to_string(&schema(name)).unwrap_or_default();
        assert!(!text.contains("\"nullable\""), "{name} has nullable fields");
    }
}
