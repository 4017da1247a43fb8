//! The node class's kubelet settings as provider-aws applies them
//! (Karpenter v1.15): which AMI family takes which fields, and, behind
//! `AWS_FEATURE_GATES=NodeClassCEL`, CEL expressions for `maxPods`,
//! `kubeReserved` and `systemReserved`, evaluated per instance type.
//!
//! ```text
//!   spec.kubelet ─ parse (karpenter-api) ─▶ InvalidKubeletConfiguration
//!                ─ expressions, gate off ─▶ KubeletExpressionsDisabled
//!                ─ compile ──────────────▶ KubeletExpressionInvalid
//!                ─ family support ───────▶ UnsupportedKubeletConfiguration
//!   per instance type: Facts ─ resolve ─▶ KubeletConfiguration without
//!       expressions (maxPods a count, reserved values quantities), used
//!       alike for the type's capacity and for its launch template's user data
//! ```
//!
//! An expression sees `vcpus`, `memory_mib`, `default_enis`, `ips_per_eni`,
//! `instance_type` and `max_pods` (in `maxPods`: the family's default pod
//! count; in the reserved values: the resolved `maxPods`), CEL's arithmetic
//! and conditionals, `int()`, `double()`, and two-argument `max`/`min`. It
//! must return a number; a double is truncated. A reserved value is given
//! its unit by resource: cpu in millicores rounded up to 10m, memory in Mi
//! rounded up to 16Mi, ephemeral-storage in Gi, pid as a count.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use cel::extractors::Arguments;
use cel::{Context as CelContext, ExecutionError, Program, Value};
use karpenter_api::ec2nodeclass::{AMIFamily, KubeletConfiguration};
use karpenter_api::kubelet::{MAPPED_FIELDS, is_expression};

/// provider-aws's feature gate for kubelet expressions.
pub const NODE_CLASS_CEL: &str = "NodeClassCEL";
/// provider-aws's feature gate for rebooting an instance as a node repair.
pub const REBOOT_FOR_REPAIR: &str = "RebootForRepair";
/// provider-aws's feature gates (`AWS_FEATURE_GATES`) and their defaults.
pub const FEATURE_GATE_DEFAULTS: &[(&str, bool)] =
    &[(NODE_CLASS_CEL, false), (REBOOT_FOR_REPAIR, false)];

/// Why a node class's kubelet settings cannot be used: the reason of its
/// `ValidationSucceeded=False` and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

fn refuse(reason: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        reason,
        message: message.into(),
    }
}

/// Checks the node class's kubelet settings in Karpenter's order.
pub fn validate(
    kubelet: Option<&karpenter_api::ec2nodeclass::Kubelet>,
    family: AMIFamily,
    cel_enabled: bool,
) -> Result<(), Refusal> {
    let Some(raw) = kubelet else {
        return Ok(());
    };
    let config = raw
        .parse()
        .map_err(|e| refuse("InvalidKubeletConfiguration", e.to_string()))?;
    let expressions = config.expressions();
    if !expressions.is_empty() && !cel_enabled {
        return Err(refuse(
            "KubeletExpressionsDisabled",
            "spec.kubelet contains a CEL expression, but the NodeClassCEL feature gate is disabled",
        ));
    }
    for (field, expression) in &expressions {
        compile(expression)
            .map_err(|e| refuse("KubeletExpressionInvalid", format!("{field}: {e}")))?;
    }
    family_support(&config, family)
        .map_err(|message| refuse("UnsupportedKubeletConfiguration", message))
}

/// Only AL2023's nodeadm takes any kubelet field; AL2, Bottlerocket and
/// Windows apply the mapped ones (Bottlerocket without `podsPerCore`), and
/// one cluster DNS address. Custom AMIs take whatever the user data does.
fn family_support(config: &KubeletConfiguration, family: AMIFamily) -> Result<(), String> {
    if matches!(family, AMIFamily::AL2023 | AMIFamily::Custom) {
        return Ok(());
    }
    let family_name = format!("{family:?}");
    if let Some(field) = config.unmapped_fields().first() {
        return Err(format!(
            "spec.kubelet.{field}: the {family_name} AMI family applies only {} (AL2023 takes any kubelet field)",
            MAPPED_FIELDS.join(", ")
        ));
    }
    if family == AMIFamily::Bottlerocket && config.pods_per_core.is_some() {
        return Err("spec.kubelet.podsPerCore: Bottlerocket does not apply podsPerCore".into());
    }
    if config.cluster_dns.len() > 1 {
        return Err(format!(
            "spec.kubelet.clusterDNS: the {family_name} AMI family takes one cluster DNS address"
        ));
    }
    Ok(())
}

/// What an expression knows of an instance type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    pub instance_type: String,
    pub vcpus: i64,
    /// The type's memory as EC2 lists it (before any overhead).
    pub memory_mib: i64,
    pub default_enis: i64,
    pub ips_per_eni: i64,
}

/// Compiled programs, by source; cleared when it grows past a bound (the
/// sources are the node classes' settings, a handful in practice).
static PROGRAMS: LazyLock<Mutex<HashMap<String, Arc<Program>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
const MAX_PROGRAMS: usize = 256;
/// The longest expression taken: an expression runs for every instance
/// type of every catalog build, so its cost is bounded by its length.
const MAX_EXPRESSION_BYTES: usize = 1024;
/// CEL's comprehension macros: their cost grows with the lists they walk,
/// and nothing an expression needs is a list.
const COMPREHENSIONS: [&str; 5] = [".map(", ".filter(", ".all(", ".exists(", ".exists_one("];
/// The largest result taken (far beyond any instance's resources; keeps
/// every unit conversion after it in range).
const MAX_RESULT: i64 = 1 << 40;

fn program(source: &str) -> Result<Arc<Program>, String> {
    let mut programs = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(program) = programs.get(source) {
        return Ok(Arc::clone(program));
    }
    if source.trim().is_empty() {
        return Err("an expression must not be empty".into());
    }
    if source.len() > MAX_EXPRESSION_BYTES {
        return Err(format!(
            "an expression may be at most {MAX_EXPRESSION_BYTES} bytes long"
        ));
    }
    let compact: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    if let Some(found) = COMPREHENSIONS.iter().find(|m| compact.contains(*m)) {
        return Err(format!(
            "{} is not supported: an expression computes a number from the instance type's attributes",
            found.trim_start_matches('.').trim_end_matches('(')
        ));
    }
    let program = Arc::new(Program::compile(source).map_err(|e| e.to_string())?);
    if programs.len() >= MAX_PROGRAMS {
        programs.clear();
    }
    programs.insert(source.to_owned(), Arc::clone(&program));
    Ok(program)
}

/// Parses an expression and checks, on a sample instance type, that it
/// names only the variables it has and returns a number.
pub fn compile(source: &str) -> Result<(), String> {
    let sample = Facts {
        instance_type: "m5.large".into(),
        vcpus: 2,
        memory_mib: 8192,
        default_enis: 3,
        ips_per_eni: 10,
    };
    evaluate(source, &sample, 29).map(|_| ())
}

/// Two-argument `max`/`min` over numbers.
fn extreme(args: &Arguments, name: &str, pick_greater: bool) -> Result<Value, ExecutionError> {
    let Arguments(values) = args;
    if values.len() != 2 {
        return Err(ExecutionError::invalid_argument_count(2, values.len()));
    }
    let (a, b) = (&values[0], &values[1]);
    let as_f64 = |v: &Value| match v {
        Value::Int(i) => Some(*i as f64),
        Value::UInt(u) => Some(*u as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    };
    let (Some(x), Some(y)) = (as_f64(a), as_f64(b)) else {
        return Err(ExecutionError::function_error(name, "takes two numbers"));
    };
    let first = if pick_greater { x >= y } else { x <= y };
    Ok(if first { a.clone() } else { b.clone() })
}

/// Evaluates `source` for an instance type with `max_pods` bound: a whole
/// number (a double is truncated).
pub fn evaluate(source: &str, facts: &Facts, max_pods: i64) -> Result<i64, String> {
    let program = program(source)?;
    let mut ctx = CelContext::default();
    let declared = ctx
        .add_function("max", |args: Arguments| extreme(&args, "max", true))
        .and_then(|()| ctx.add_function("min", |args: Arguments| extreme(&args, "min", false)));
    declared.map_err(|e| e.to_string())?;
    for (name, value) in [
        ("vcpus", facts.vcpus),
        ("memory_mib", facts.memory_mib),
        ("default_enis", facts.default_enis),
        ("ips_per_eni", facts.ips_per_eni),
        ("max_pods", max_pods),
    ] {
        ctx.add_variable_from_value(name, Value::Int(value));
    }
    ctx.add_variable_from_value(
        "instance_type",
        Value::String(Arc::new(facts.instance_type.clone())),
    );
    let result = match program.execute(&ctx).map_err(|e| e.to_string())? {
        Value::Int(i) => i,
        Value::UInt(u) => i64::try_from(u).unwrap_or(i64::MAX),
        Value::Float(f) if f.is_finite() => f.trunc() as i64,
        Value::Float(_) => return Err("the result is not a finite number".into()),
        _ => return Err("expression must return int or double".into()),
    };
    if result.unsigned_abs() > MAX_RESULT.unsigned_abs() {
        return Err(format!(
            "the result {result} is out of range (at most {MAX_RESULT})"
        ));
    }
    Ok(result)
}

/// A reserved value from an expression's (non-negative, bounded: see
/// [`evaluate`]) result, with its resource's unit.
pub fn reserved_quantity(resource: &str, value: i64) -> String {
    let round_up = |v: i64, step: i64| {
        let up = if v % step == 0 { 0 } else { step };
        v.div_euclid(step).saturating_mul(step).saturating_add(up)
    };
    match resource {
        "cpu" => format!("{}m", round_up(value, 10)),
        "memory" => format!("{}Mi", round_up(value, 16)),
        "ephemeral-storage" => format!("{value}Gi"),
        _ => value.to_string(),
    }
}

/// The settings for one instance type with every expression evaluated:
/// `maxPods` from its expression with `max_pods` = `default_pods` (out of
/// 0..=i32::MAX is an error), each reserved expression with `max_pods` =
/// the pods `pods_for` gives for the resolved `maxPods` (a negative result
/// or a failure leaves that entry out). With the gate off, expressions are
/// left out: `maxPods` falls back to the family's default.
pub fn resolve(
    config: &KubeletConfiguration,
    facts: &Facts,
    cel_enabled: bool,
    default_pods: i64,
    pods_for: impl Fn(&KubeletConfiguration) -> i64,
) -> Result<KubeletConfiguration, String> {
    let mut resolved = config.clone();
    resolved.max_pods_expression = None;
    if let Some(expression) = config
        .max_pods_expression
        .as_deref()
        .filter(|_| cel_enabled)
    {
        let pods = evaluate(expression, facts, default_pods)
            .map_err(|e| format!("resolving maxPods for {}: {e}", facts.instance_type))?;
        let pods = i32::try_from(pods)
            .ok()
            .filter(|p| *p >= 0)
            .ok_or_else(|| {
                format!(
                    "resolving maxPods for {}: {pods} is not between 0 and {}",
                    facts.instance_type,
                    i32::MAX
                )
            })?;
        resolved.max_pods = Some(pods);
    }
    let pods = pods_for(&resolved);
    for map in [&mut resolved.kube_reserved, &mut resolved.system_reserved] {
        let entries: BTreeMap<String, String> = std::mem::take(map);
        for (resource, value) in entries {
            if !is_expression(&value) {
                map.insert(resource, value);
                continue;
            }
            if !cel_enabled {
                continue;
            }
            match evaluate(&value, facts, pods) {
                Ok(n) if n >= 0 => {
                    map.insert(resource.clone(), reserved_quantity(&resource, n));
                }
                Ok(n) => {
                    tracing::warn!(instance_type = %facts.instance_type, %resource, result = n,
                    "a reserved expression evaluated negative; left out")
                }
                Err(error) => {
                    tracing::warn!(instance_type = %facts.instance_type, %resource, %error,
                    "a reserved expression failed; left out")
                }
            }
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::ec2nodeclass::Kubelet;
    use serde_json::json;

    fn kubelet(value: serde_json::Value) -> Kubelet {
        serde_json::from_value(value).expect("kubelet")
    }

    fn m5_large() -> Facts {
        Facts {
            instance_type: "m5.large".into(),
            vcpus: 2,
            memory_mib: 8192,
            default_enis: 3,
            ips_per_eni: 10,
        }
    }

    // Upstream pkg/cel environment_test.go.
    #[test]
    fn results_get_their_resources_units() {
        assert_eq!(
            reserved_quantity("cpu", 61),
            "70m",
            "rounded up to the next 10m"
        );
        assert_eq!(reserved_quantity("cpu", 70), "70m");
        assert_eq!(
            reserved_quantity("memory", 600),
            "608Mi",
            "rounded up to the next 16Mi"
        );
        assert_eq!(reserved_quantity("ephemeral-storage", 2), "2Gi");
        assert_eq!(reserved_quantity("pid", 1000), "1000");
    }

    #[test]
    fn expressions_must_return_numbers_and_name_known_variables() {
        assert!(compile("vcpus > 2").is_err(), "a boolean");
        assert!(compile("").is_err(), "empty");
        assert!(compile("gpus * 2").is_err(), "an unknown variable");
        assert!(compile("max(vcpus, 2, 3)").is_err(), "max takes two");
        assert!(compile("min(max_pods, 110)").is_ok());
        assert!(
            compile("[1, 2].map(x, [1, 2].map(y, x * y)).size()").is_err(),
            "no comprehensions"
        );
        let long = vec!["1"; 400].join(" + ");
        assert!(compile(&long).is_err(), "too long");
        assert!(
            evaluate("double(memory_mib) * 1e30", &m5_large(), 0).is_err(),
            "out of range"
        );
        assert_eq!(
            evaluate("double(memory_mib) / 1024.0 * 1.5", &m5_large(), 0),
            Ok(12)
        );
        assert_eq!(
            evaluate(
                "instance_type.startsWith('m5') ? default_enis * (ips_per_eni - 1) + 2 : 110",
                &m5_large(),
                0
            ),
            Ok(29)
        );
    }

    #[test]
    fn the_gate_and_the_family_decide_what_is_taken() {
        let expression = kubelet(json!({"maxPods": "min(max_pods, 50)"}));
        let refused = validate(Some(&expression), AMIFamily::AL2023, false).expect_err("gate off");
        assert_eq!(refused.reason, "KubeletExpressionsDisabled");
        assert_eq!(
            refused.message,
            "spec.kubelet contains a CEL expression, but the NodeClassCEL feature gate is disabled"
        );
        assert_eq!(validate(Some(&expression), AMIFamily::AL2023, true), Ok(()));
        let broken = kubelet(json!({"kubeReserved": {"cpu": "vcpus *"}}));
        assert_eq!(
            validate(Some(&broken), AMIFamily::AL2023, true).map_err(|r| r.reason),
            Err("KubeletExpressionInvalid")
        );
        let passthrough = kubelet(json!({"shutdownGracePeriod": "30s"}));
        assert_eq!(
            validate(Some(&passthrough), AMIFamily::AL2023, false),
            Ok(())
        );
        for family in [
            AMIFamily::AL2,
            AMIFamily::Bottlerocket,
            AMIFamily::Windows2022,
        ] {
            let refused = validate(Some(&passthrough), family, false).expect_err("not applied");
            assert_eq!(
                refused.reason, "UnsupportedKubeletConfiguration",
                "{family:?}"
            );
            assert!(
                refused
                    .message
                    .starts_with("spec.kubelet.shutdownGracePeriod:")
            );
        }
        let per_core = kubelet(json!({"podsPerCore": 4}));
        assert!(validate(Some(&per_core), AMIFamily::Bottlerocket, false).is_err());
        assert!(validate(Some(&per_core), AMIFamily::AL2, false).is_ok());
        let two_dns = kubelet(json!({"clusterDNS": ["10.0.0.10", "10.0.0.11"]}));
        assert!(validate(Some(&two_dns), AMIFamily::AL2, false).is_err());
        assert!(validate(Some(&two_dns), AMIFamily::AL2023, false).is_ok());
        let invalid = kubelet(json!({"maxPods": -1}));
        assert_eq!(
            validate(Some(&invalid), AMIFamily::AL2023, true).map_err(|r| r.reason),
            Err("InvalidKubeletConfiguration")
        );
    }

    // Upstream instancetype suite: "should resolve maxPods from an
    // expression when it evaluates in range", "should fail resolution when
    // the maxPods expression can't be resolved", "should evaluate a max_pods
    // reference in kubeReserved against the resolved maxPods expression",
    // "should use the default maxPods (not the expression result) when the
    // gate is disabled".
    #[test]
    fn expressions_resolve_per_instance_type() {
        let config = kubelet(json!({
            "maxPods": "min(max_pods, 20)",
            "kubeReserved": {"memory": "max_pods * 11 + 255", "cpu": "100m"},
            "systemReserved": {"cpu": "vcpus * 5 + 1", "memory": "0 - vcpus"}
        }))
        .parse()
        .expect("valid");
        let pods_for = |k: &KubeletConfiguration| k.max_pods.map_or(29, i64::from);
        let resolved = resolve(&config, &m5_large(), true, 29, pods_for).expect("resolved");
        assert_eq!(resolved.max_pods, Some(20));
        assert_eq!(
            resolved.kube_reserved["memory"], "480Mi",
            "20 * 11 + 255 = 475, up to 480"
        );
        assert_eq!(resolved.kube_reserved["cpu"], "100m", "a quantity stays");
        assert_eq!(resolved.system_reserved["cpu"], "20m", "11 up to 20");
        assert!(
            !resolved.system_reserved.contains_key("memory"),
            "negative: left out"
        );
        assert!(!resolved.has_expressions());

        let off = resolve(&config, &m5_large(), false, 29, pods_for).expect("resolved");
        assert_eq!(off.max_pods, None, "the family's default");
        assert_eq!(off.kube_reserved.len(), 1, "only the static cpu");

        let too_many = kubelet(json!({"maxPods": "max_pods * 100000000000"}))
            .parse()
            .expect("valid");
        assert!(resolve(&too_many, &m5_large(), true, 29, pods_for).is_err());
    }
}
