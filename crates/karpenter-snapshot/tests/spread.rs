//! kube-scheduler's default topology spread constraints: ports of
//! Karpenter's `ParseSchedulerConfiguration` cases (`options/suite_test.go`)
//! and of `defaultconstraints_test.go` (the selector each pod gets).

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use karpenter_proto::scheduler::v1 as sched;
use karpenter_snapshot::spread::{DefaultSpread, SchedulerConfig};
use karpenter_snapshot::{Mode, Objects, Source, build};
use serde_json::{Value, json};

const ZONE_DEFAULT: &str = "podTopologySpread:
  defaultConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
    - maxSkew: 3
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: DoNotSchedule
";

fn from<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("valid object")
}

fn parse_err(text: &str) -> String {
    SchedulerConfig::parse(text).expect_err("refused")
}

#[test]
fn parses_yaml_and_json_and_empty_is_nothing() {
    assert!(SchedulerConfig::parse("").expect("empty").is_empty());
    let config = SchedulerConfig::parse(ZONE_DEFAULT).expect("valid");
    let keys: Vec<(&str, i32, i32)> = config
        .default_constraints
        .iter()
        .map(|c| (c.topology_key.as_str(), c.max_skew, c.when_unsatisfiable))
        .collect();
    use sched::topology_spread_constraint::WhenUnsatisfiable as W;
    assert_eq!(
        keys,
        [
            ("topology.kubernetes.io/zone", 1, W::ScheduleAnyway as i32),
            ("kubernetes.io/hostname", 3, W::DoNotSchedule as i32)
        ]
    );
    assert!(
        config
            .default_constraints
            .iter()
            .all(|c| c.label_selector.is_none())
    );
    let json = r#"{"podTopologySpread":{"defaultConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}]}}"#;
    assert_eq!(
        SchedulerConfig::parse(json)
            .expect("json")
            .default_constraints
            .len(),
        1
    );
}

#[test]
fn refuses_what_kube_scheduler_refuses() {
    let one = |extra: &str| {
        format!(
            "podTopologySpread:\n  defaultConstraints:\n    - maxSkew: 1\n      topologyKey: topology.kubernetes.io/zone\n      whenUnsatisfiable: ScheduleAnyway\n{extra}"
        )
    };
    assert!(
        parse_err(&format!("{}notARealField: true\n", one("")))
            .contains("unknown field `notARealField`")
    );
    assert!(parse_err("podTopologySpread: {").starts_with("decoding scheduler config"));
    assert_eq!(
        parse_err(
            "podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]}"
        ),
        "validating scheduler config, podTopologySpread.defaultConstraints[0].maxSkew must be greater than 0"
    );
    assert!(!parse_err("podTopologySpread: {defaultConstraints: [{maxSkew: 1, whenUnsatisfiable: ScheduleAnyway}]}").is_empty());
    assert_eq!(
        parse_err(&one(
            "      labelSelector:\n        matchLabels:\n          app: test\n"
        )),
        "validating scheduler config, podTopologySpread.defaultConstraints[0].labelSelector must not be set, as selectors are deduced for each pod"
    );
    assert_eq!(
        parse_err(&one("      matchLabelKeys:\n        - pod-template-hash\n")),
        "validating scheduler config, podTopologySpread.defaultConstraints[0].matchLabelKeys must not be set, as it has no effect on default constraints"
    );
    assert!(
        parse_err("podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: 'not a valid label name', whenUnsatisfiable: ScheduleAnyway}]}")
            .contains(".topologyKey \"not a valid label name\" is not a valid label name")
    );
    assert_eq!(
        parse_err(
            "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes}]}"
        ),
        "validating scheduler config, podTopologySpread.defaultConstraints[0].whenUnsatisfiable \"Sometimes\" must be one of \"DoNotSchedule\" or \"ScheduleAnyway\""
    );
    assert_eq!(
        parse_err(
            "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}, {maxSkew: 3, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}]}"
        ),
        "validating scheduler config, podTopologySpread.defaultConstraints[1] is a duplicate of [0], {zone, ScheduleAnyway}"
    );
}

fn pod(namespace: &str, labels: &[(&str, &str)], owner: (&str, &str)) -> sched::Pod {
    sched::Pod {
        namespace: namespace.into(),
        name: "p".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        owner_kind: owner.0.into(),
        owner_name: owner.1.into(),
        ..sched::Pod::default()
    }
}

fn service(namespace: &str, selector: Value) -> Service {
    let mut spec = json!({});
    if !selector.is_null() {
        spec["selector"] = selector;
    }
    from(json!({"metadata": {"name": "svc", "namespace": namespace}, "spec": spec}))
}

fn replica_set(name: &str, selector: Value) -> ReplicaSet {
    from(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"selector": selector}}),
    )
}

fn defaults() -> DefaultSpread {
    DefaultSpread::new(&SchedulerConfig::parse(ZONE_DEFAULT).expect("valid"))
}

/// The selector every default constraint of `pod` got (all the same), if any.
fn selector(spread: &DefaultSpread, pod: &sched::Pod) -> Option<sched::LabelSelector> {
    let constraints = spread.for_pod(pod);
    let first = constraints.first()?.label_selector.clone();
    assert!(constraints.iter().all(|c| c.label_selector == first));
    assert_eq!(constraints.len(), 2);
    first
}

fn expression(key: &str, operator: &str, values: &[&str]) -> sched::LabelSelectorRequirement {
    sched::LabelSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

#[test]
fn owners_contribute_their_selectors() {
    let mut spread = defaults();
    spread.replica_set(&replica_set("rs", json!({"matchLabels": {"app": "web"}})));
    spread.replica_set(&replica_set(
        "rs-expr",
        json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
    ));
    spread.stateful_set(&from::<StatefulSet>(
        json!({"metadata": {"name": "db", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                 "template": {"spec": {"containers": [{"name": "c"}]}}}}),
    ));
    // "should deduce a ReplicaSet's selector, not the pod's labels".
    let labels = [("app", "web"), ("pod-template-hash", "abc")];
    assert_eq!(
        selector(&spread, &pod("default", &labels, ("ReplicaSet", "rs"))),
        Some(sched::LabelSelector {
            match_labels: Default::default(),
            match_expressions: vec![expression("app", "In", &["web"])],
        })
    );
    // "should deduce a StatefulSet's selector and ignore the pod's volatile labels".
    let labels = [
        ("app", "db"),
        ("statefulset.kubernetes.io/pod-name", "db-0"),
    ];
    let db = selector(&spread, &pod("default", &labels, ("StatefulSet", "db"))).expect("selector");
    assert_eq!(db.match_expressions, [expression("app", "In", &["db"])]);
    // "should carry a ReplicaSet's matchExpressions through verbatim".
    let expr = selector(
        &spread,
        &pod("default", &[("tier", "a")], ("ReplicaSet", "rs-expr")),
    );
    assert_eq!(
        expr.expect("selector").match_expressions,
        [expression("tier", "In", &["a", "b"])]
    );
    // "should not deduce a selector from an unsupported owner kind" and
    // "should tolerate an owner that no longer exists".
    assert_eq!(
        selector(&spread, &pod("default", &[("app", "web")], ("Job", "rs"))),
        None
    );
    assert_eq!(
        selector(
            &spread,
            &pod("default", &[("app", "web")], ("ReplicaSet", "gone"))
        ),
        None
    );
}

#[test]
fn services_contribute_their_selectors() {
    let mut spread = defaults();
    spread.service(&service("default", json!({"app": "web"})));
    spread.service(&service("default", json!({"tier": "front"})));
    spread.service(&service("default", json!({"app": "other"})));
    spread.service(&service("default", Value::Null));
    spread.service(&service("default", json!({})));
    spread.service(&service("elsewhere", json!({"team": "x"})));
    // "should merge the selectors of every matching service" (and skip the
    // non-matching one, the nil selector, the empty one, other namespaces).
    let labels = [("app", "web"), ("tier", "front"), ("team", "x")];
    let deduced = selector(&spread, &pod("default", &labels, ("", ""))).expect("selector");
    assert_eq!(
        deduced.match_labels,
        [("app", "web"), ("tier", "front")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    );
    assert!(deduced.match_expressions.is_empty());
    // "should contribute nothing for a service with an empty selector": no
    // other source, so no constraint at all.
    assert_eq!(
        selector(&spread, &pod("default", &[("x", "y")], ("", ""))),
        None
    );
    // "should combine a service selector with the owner's".
    spread.replica_set(&replica_set("rs", json!({"matchLabels": {"app": "web"}})));
    let both = selector(&spread, &pod("default", &labels, ("ReplicaSet", "rs"))).expect("selector");
    assert_eq!(both.match_labels.len(), 2);
    assert_eq!(both.match_expressions, [expression("app", "In", &["web"])]);
}

/// Through a build: the expanded pods of a Deployment get the defaults
/// (from its selector), a pod with its own constraints keeps them, and
/// nothing changes without a configuration.
#[test]
fn a_build_gives_the_defaults_to_pods_without_their_own() {
    let deployment: Deployment = from(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}
    }));
    let own: Pod = from(json!({
        "metadata": {"name": "own", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [
            {"maxSkew": 5, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "web"}}}]}
    }));
    let config = SchedulerConfig::parse(ZONE_DEFAULT).expect("valid");
    let objects = |config: Option<&'static SchedulerConfig>| -> Vec<sched::Pod> {
        let objects = Objects {
            deployments: vec![Source {
                id: 0,
                object: &deployment,
            }],
            pods: vec![Source {
                id: 1,
                object: &own,
            }],
            scheduler_config: config,
            ..Objects::default()
        };
        build(&objects, Mode::Manifests)
            .expect("builds")
            .snapshot
            .pending_pods
    };
    let config: &'static SchedulerConfig = Box::leak(Box::new(config));
    let pods = objects(Some(config));
    let by_name = |name: &str| pods.iter().find(|p| p.name == name).expect("pod");
    assert_eq!(by_name("web-0").topology_spread_constraints.len(), 2);
    assert_eq!(
        by_name("web-1").topology_spread_constraints[0].topology_key,
        "topology.kubernetes.io/zone"
    );
    let kept = &by_name("own").topology_spread_constraints;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].max_skew, 5);
    // "should be a no-op when no defaults are configured".
    assert!(
        objects(None)
            .iter()
            .filter(|p| p.name != "own")
            .all(|p| p.topology_spread_constraints.is_empty())
    );
}
