//! `x-kubernetes-validations`: compiling rules once per CRD, and evaluating
//! them with `self` (and `oldSelf`) bound, as the apiserver does.

mod check;
mod library;
mod value;

use std::sync::{Arc, LazyLock};

use cel::common::types::CelOptional;
use cel::common::value::Val;
use cel::{Context, Env, ExecutionError, Program, Value};
use serde_json::Value as Json;

pub(crate) use check::Ty;

use crate::error::{BadValue, CompileError, Source, Violation, ViolationKind};
use crate::schema::{Schema, SchemaType};

/// The CEL environment every rule compiles and runs in: cel's standard
/// library, its strings extension, and the Kubernetes libraries.
static ENV: LazyLock<Result<Arc<Env>, String>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .map_err(|e| e.to_string())?;
    library::register(&mut env).map_err(|e| e.to_string())?;
    Ok(Arc::new(env))
});

fn env() -> Result<&'static Arc<Env>, String> {
    ENV.as_ref().map_err(Clone::clone)
}

/// `reason` of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

/// A rule as written in the CRD.
#[derive(Debug, Clone)]
pub(crate) struct RuleSpec {
    pub rule: String,
    pub message: Option<String>,
    pub message_expression: Option<String>,
    pub field_path: Option<String>,
    pub reason: Option<String>,
    pub optional_old_self: bool,
    /// Path of the rule in the CRD, for compile errors.
    pub path: String,
}

impl RuleSpec {
    pub(crate) fn parse(v: &Json, path: &str) -> Result<RuleSpec, CompileError> {
        let obj = v.as_object().ok_or_else(|| CompileError::Malformed {
            path: path.to_string(),
            message: "must be an object".to_string(),
        })?;
        let text = |k: &str| obj.get(k).and_then(Json::as_str).map(str::to_string);
        let rule = text("rule").ok_or_else(|| CompileError::Malformed {
            path: format!("{path}.rule"),
            message: "Required value".to_string(),
        })?;
        Ok(RuleSpec {
            rule,
            message: text("message").filter(|m| !m.is_empty()),
            message_expression: text("messageExpression").filter(|m| !m.is_empty()),
            field_path: text("fieldPath").filter(|m| !m.is_empty()),
            reason: text("reason").filter(|m| !m.is_empty()),
            optional_old_self: obj
                .get("optionalOldSelf")
                .and_then(Json::as_bool)
                .unwrap_or(false),
            path: path.to_string(),
        })
    }
}

/// A rule ready to run.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub rule: String,
    program: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    /// `fieldPath`, normalized (`spec.foo`, `labels[key]`).
    field_path: Option<String>,
    reason: Reason,
    optional_old_self: bool,
    /// Transition rule: evaluated only when there is an old value.
    pub uses_old_self: bool,
}

impl CompiledRule {
    /// `ruleErrorString`: the message, or the rule itself.
    fn error_string(&self) -> &str {
        self.message
            .as_deref()
            .map(str::trim)
            .unwrap_or_else(|| self.rule.trim())
    }

    /// `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        match &self.message {
            Some(m) => m.trim().to_string(),
            None => format!("failed rule: {}", self.rule.trim()),
        }
    }
}

/// cel-go's error report: `ERROR: <input>:1:6: message` and the source
/// line with a caret under the offending column.
fn compile_failure(source: &str, offset: Option<usize>, message: &str) -> String {
    let offset = offset.unwrap_or(0).min(source.len());
    let before = &source[..offset];
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count();
    let line = source[line_start..].lines().next().unwrap_or("");
    format!(
        "ERROR: <input>:{line_no}:{}: {message}\n | {line}\n | {}^",
        col + 1,
        ".".repeat(col)
    )
}

/// Compiles one expression (a rule or a message expression) and checks it
/// against the schema.
fn compile_expression(
    src: &str,
    self_ty: Ty<'_>,
    optional_old_self: bool,
) -> Result<(Program, bool), String> {
    let env = env()?;
    let program = env
        .compile(src)
        .map_err(|e| e.to_string().trim_end().to_string())?;
    match check::check(program.expression(), self_ty, optional_old_self) {
        Ok(checked) => Ok((program, checked.uses_old_self)),
        Err(e) => {
            let offset = program
                .source_info()
                .offset_for(e.id)
                .map(|(start, _)| start as usize);
            Err(compile_failure(src, offset, &e.message))
        }
    }
}

/// Where a rule sits in the schema, for the checks that depend on it.
pub(crate) struct RuleSite<'a> {
    /// The node `self` is bound to.
    pub schema: &'a Schema,
    /// Whether that node is a resource root (the object or an embedded resource).
    pub resource_root: bool,
    /// The path of the nearest uncorrelatable ancestor, if any: transition
    /// rules cannot be used below it.
    pub uncorrelatable: Option<&'a str>,
}

/// Compiles a rule, rejecting it the way the apiserver rejects a CRD.
pub(crate) fn compile_rule(
    spec: &RuleSpec,
    site: &RuleSite<'_>,
) -> Result<CompiledRule, CompileError> {
    let self_ty = if site.resource_root {
        Ty::Resource(site.schema)
    } else {
        Ty::Node(site.schema)
    };
    let rule_err = |field: &str, expression: &str, message: String| CompileError::Rule {
        path: format!("{}.{field}", spec.path),
        expression: expression.to_string(),
        message,
    };
    let (program, uses_old_self) = compile_expression(&spec.rule, self_ty, spec.optional_old_self)
        .map_err(|m| rule_err("rule", &spec.rule, format!("compilation failed: {m}")))?;

    if spec.optional_old_self && !uses_old_self {
        return Err(rule_err(
            "optionalOldSelf",
            "true",
            "may not be set if oldSelf is not used in rule".to_string(),
        ));
    }
    if uses_old_self && let Some(at) = site.uncorrelatable {
        return Err(CompileError::Rule {
            path: format!("{}.rule", spec.path),
            expression: spec.rule.clone(),
            message: format!(
                "oldSelf cannot be used on the uncorrelatable portion of the schema within {at}"
            ),
        });
    }

    let message_expression = match &spec.message_expression {
        Some(src) => Some(
            compile_expression(src, self_ty, false)
                .map_err(|m| {
                    rule_err(
                        "messageExpression",
                        src,
                        format!("messageExpression compilation failed: {m}"),
                    )
                })?
                .0,
        ),
        None => None,
    };

    let field_path = match &spec.field_path {
        Some(fp) => Some(valid_field_path(fp, site.schema).map_err(|e| {
            rule_err(
                "fieldPath",
                fp,
                format!("fieldPath must be a valid path: {e}"),
            )
        })?),
        None => None,
    };

    let reason = match spec.reason.as_deref() {
        None | Some("FieldValueInvalid") => Reason::Invalid,
        Some("FieldValueForbidden") => Reason::Forbidden,
        Some("FieldValueRequired") => Reason::Required,
        Some("FieldValueDuplicate") => Reason::Duplicate,
        Some(other) => {
            return Err(CompileError::Rule {
                path: format!("{}.reason", spec.path),
                expression: other.to_string(),
                message: "Unsupported value: supported values: \"FieldValueInvalid\", \"FieldValueForbidden\", \"FieldValueRequired\", \"FieldValueDuplicate\"".to_string(),
            });
        }
    };

    Ok(CompiledRule {
        rule: spec.rule.clone(),
        program,
        message: spec.message.clone(),
        message_expression,
        field_path,
        reason,
        optional_old_self: spec.optional_old_self,
        uses_old_self,
    })
}

/// `ValidFieldPath`: a JSON path of field and map accessors valid for the
/// schema (`.foo.bar`, `.labels['k']`), normalized to a field path.
fn valid_field_path(path: &str, schema: &Schema) -> Result<String, String> {
    let mut out = String::new();
    let mut node = schema;
    let mut rest = path;
    let append = |out: &mut String, node: &mut &Schema, name: &str| -> Result<(), String> {
        if !node.properties.is_empty() {
            let next = node
                .prop(name)
                .ok_or_else(|| "does not refer to a valid field".to_string())?;
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            *node = next;
        } else if let Some(ap) = node.additional_schema() {
            out.push('[');
            out.push_str(name);
            out.push(']');
            *node = ap;
        } else {
            return Err("does not refer to a valid field".to_string());
        }
        Ok(())
    };
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() {
                return Err("unexpected end of JSON path".to_string());
            }
            append(&mut out, &mut node, name)?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r
                .find("']")
                .ok_or_else(|| "expected ] but got end of JSON path".to_string())?;
            let name = r[..end].replace("\\'", "'").replace("\\\\", "\\");
            append(&mut out, &mut node, &name)?;
            rest = &r[end + 2..];
        } else {
            return Err(format!(
                "expected [ or . but got: {}",
                rest.chars().next().unwrap_or(' ')
            ));
        }
    }
    Ok(out)
}

/// The node a set of rules runs on.
pub(crate) struct RuleNode<'a> {
    pub schema: &'a Schema,
    pub rules: &'a [CompiledRule],
    pub resource_root: bool,
}

/// What evaluating a node's rules produced.
#[derive(Default)]
pub(crate) struct RuleResults {
    pub violations: Vec<Violation>,
    /// Failures of rules that do not use `oldSelf` on a node whose value did
    /// not change: the apiserver ratchets them into warnings.
    pub ratcheted: Vec<Violation>,
}

fn child_path(base: &str, child: &str) -> String {
    if base.is_empty() {
        child.to_string()
    } else {
        format!("{base}.{child}")
    }
}

/// cel-go's wording of an evaluation error.
fn eval_error_string(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload(o) => format!("no such overload: {o}"),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {}", value_string(i)),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(..) => "integer overflow".to_string(),
        ExecutionError::FunctionError { function, message }
            if message.starts_with("string parse error") =>
        {
            let target = match function.as_str() {
                "duration" => "google.protobuf.Duration",
                "timestamp" => "google.protobuf.Timestamp",
                other => other,
            };
            format!("type conversion error from 'string' to '{target}'")
        }
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::UndeclaredReference(r) => format!("no such attribute: {r}"),
        other => other.to_string(),
    }
}

fn value_string(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

/// Evaluates the rules of one node with `self` bound to `value` and
/// `oldSelf` to `old` (the correlated old value, on updates).
/// `unchanged` says whether `value` equals its correlated old value (for
/// ratcheting).
pub(crate) fn eval_node(
    node: &RuleNode<'_>,
    value: &Json,
    old: Option<&Json>,
    path: &str,
    unchanged: bool,
    out: &mut RuleResults,
) {
    if value.is_null() || node.rules.is_empty() {
        return;
    }
    let type_name = node.schema.type_name();
    let env = match env() {
        Ok(e) => e,
        Err(e) => {
            out.violations.push(Violation::new(
                path,
                ViolationKind::Invalid,
                BadValue::string(type_name),
                format!("rule compiler initialization error: {e}"),
                Source::RulesSkipped,
            ));
            return;
        }
    };
    let self_val = value::to_val(value, Some(node.schema), node.resource_root);
    let old_val = old.map(|o| value::to_val(o, Some(node.schema), node.resource_root));
    let ctx = rule_context(
        env,
        self_val.as_ref(),
        old_val.as_ref().map(|o| o.clone_as_boxed()),
    );
    // Rules with `optionalOldSelf` see `oldSelf` as an optional, set or not.
    let optional_ctx = node.rules.iter().any(|r| r.optional_old_self).then(|| {
        let opt = match &old_val {
            Some(o) => CelOptional::of(o.clone_as_boxed()),
            None => CelOptional::none(),
        };
        rule_context(env, self_val.as_ref(), Some(Box::new(opt)))
    });

    for rule in node.rules {
        if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
            // Transition rules only run when there is an old value.
            continue;
        }
        let run_ctx = match (&optional_ctx, rule.optional_old_self) {
            (Some(c), true) => c,
            _ => &ctx,
        };
        let v = match rule.program.execute(run_ctx) {
            Ok(Value::Bool(true)) => continue,
            Ok(_) => rule_failure(node, rule, value, path, &ctx),
            Err(e) => {
                // Evaluation errors are never ratcheted.
                out.violations.push(eval_failure(rule, path, type_name, &e));
                continue;
            }
        };
        if !rule.uses_old_self && unchanged {
            out.ratcheted.push(v);
        } else {
            out.violations.push(v);
        }
    }
}

/// A context over `env` with `self` bound, and `oldSelf` when given.
fn rule_context<'p, 'v>(
    env: &Arc<Env>,
    self_val: &(dyn Val + 'v),
    old_self: Option<Box<dyn Val + 'v>>,
) -> Context<'p, 'v> {
    let mut ctx = Context::with_env(Arc::clone(env));
    ctx.add_variable_as_val("self", self_val.clone_as_boxed());
    if let Some(o) = old_self {
        ctx.add_variable_as_val("oldSelf", o);
    }
    ctx
}

/// The violation for a rule whose evaluation failed: the value is the
/// schema type's name, the detail cel-go's error and the rule.
fn eval_failure(rule: &CompiledRule, path: &str, type_name: &str, e: &ExecutionError) -> Violation {
    let msg = eval_error_string(e);
    let detail = if msg.starts_with("no such overload") {
        format!(
            "'{msg}': call arguments did not match a supported operator, function or macro signature for rule: {}",
            rule.error_string()
        )
    } else {
        format!("{msg} evaluating rule: {}", rule.error_string())
    };
    Violation::new(
        path,
        ViolationKind::Invalid,
        BadValue::string(type_name),
        detail,
        Source::Rule(rule.rule.clone()),
    )
}

/// The violation for a rule that evaluated to false, at its `fieldPath`,
/// with its `reason` and message.
fn rule_failure(
    node: &RuleNode<'_>,
    rule: &CompiledRule,
    value: &Json,
    path: &str,
    ctx: &Context<'_, '_>,
) -> Violation {
    // The apiserver reports the value, except for objects and arrays, whose
    // value it leaves out (`field.OmitValueType`); evaluation errors keep
    // the type.
    let failed_value = || match node.schema.ty {
        Some(SchemaType::Object | SchemaType::Array) => BadValue::Omitted,
        _ => BadValue::Json(value.clone()),
    };
    let fail_path = match &rule.field_path {
        Some(fp) => child_path(path, fp),
        None => path.to_string(),
    };
    let detail = failure_message(rule, ctx);
    let source = Source::Rule(rule.rule.clone());
    let (kind, bad, detail) = match rule.reason {
        Reason::Invalid => (ViolationKind::Invalid, failed_value(), detail),
        Reason::Forbidden => (ViolationKind::Forbidden, BadValue::Omitted, detail),
        Reason::Required => (ViolationKind::Required, BadValue::Omitted, detail),
        Reason::Duplicate => (ViolationKind::Duplicate, failed_value(), String::new()),
    };
    Violation::new(fail_path, kind, bad, detail, source)
}

/// The `messageExpression`'s result when it is a usable single line (at
/// most 5 KiB), else the `message` or the default one.
fn failure_message(rule: &CompiledRule, ctx: &Context<'_, '_>) -> String {
    rule.message_expression
        .as_ref()
        .and_then(|p| match p.execute(ctx) {
            Ok(Value::String(s)) => {
                let t = s.trim();
                (!t.is_empty() && !t.contains('\n') && t.len() <= 5 * 1024).then(|| t.to_string())
            }
            _ => None,
        })
        .unwrap_or_else(|| rule.message_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_builds() {
        assert!(env().is_ok(), "{:?}", env().err());
    }

    #[test]
    fn compile_failures_point_at_the_column() {
        assert_eq!(
            compile_failure("self.foo == 1", Some(4), "undefined field 'foo'"),
            "ERROR: <input>:1:5: undefined field 'foo'\n | self.foo == 1\n | ....^"
        );
    }
}
