//! A compile-time check of a rule against the schema, standing in for
//! cel-go's type checker where it matters to CRD authors: unknown
//! identifiers and functions, and fields the schema does not declare
//! (`undefined field 'foo'`), which the apiserver rejects when the CRD is
//! created.

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue, SelectExpr,
};

use super::library;
use crate::schema::{Schema, SchemaType};

/// What the checker knows about the type of an expression.
#[derive(Clone, Copy)]
pub(crate) enum Ty<'s> {
    /// Unknown (`dyn`): anything goes.
    Dyn,
    /// A value of this schema node.
    Node(&'s Schema),
    /// A resource root (the object or an embedded resource): `apiVersion`,
    /// `kind`, `metadata` and the declared properties.
    Resource(&'s Schema),
    /// The `metadata` of a resource root: only `name` and `generateName`.
    Meta,
    /// A string.
    Str,
}

/// An error found by the checker, at the node with id `id`.
pub(crate) struct CheckError {
    pub id: u64,
    pub message: String,
}

/// The outcome of a successful check.
pub(crate) struct Checked {
    pub uses_old_self: bool,
}

/// Global functions of cel's standard library and strings extension.
const STD_GLOBALS: &[&str] = &[
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "dyn",
    "type",
    "matches",
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "strings.quote",
];

/// Member functions of cel's standard library and strings extension.
const STD_MEMBERS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "value",
    "hasValue",
    "or",
    "orValue",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "format",
    "reverse",
];

/// Identifiers that name types (`type(x) == string`).
const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
    "optional_type",
    "google.protobuf.Duration",
    "google.protobuf.Timestamp",
];

fn is_global(name: &str) -> bool {
    STD_GLOBALS.contains(&name) || library::GLOBAL_FUNCTIONS.contains(&name)
}

fn is_member(name: &str) -> bool {
    STD_MEMBERS.contains(&name) || library::MEMBER_FUNCTIONS.contains(&name)
}

fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('@') || name == "!_" || name == "-_"
}

struct Checker<'s> {
    self_ty: Ty<'s>,
    old_self_ty: Ty<'s>,
    uses_old_self: bool,
    scope: Vec<(String, Ty<'s>)>,
}

/// Checks `expr` with `self` of type `self_ty`. `oldSelf` has the same type,
/// or is an optional when `optional_old_self` is set.
pub(crate) fn check<'s>(
    expr: &IdedExpr,
    self_ty: Ty<'s>,
    optional_old_self: bool,
) -> Result<Checked, CheckError> {
    let mut c = Checker {
        self_ty,
        old_self_ty: if optional_old_self { Ty::Dyn } else { self_ty },
        uses_old_self: false,
        scope: Vec::new(),
    };
    c.walk(expr)?;
    Ok(Checked {
        uses_old_self: c.uses_old_self,
    })
}

fn is_object(s: &Schema) -> bool {
    s.ty == Some(SchemaType::Object) || (!s.properties.is_empty() && s.ty.is_none())
}

fn select<'s>(ty: Ty<'s>, field: &str, id: u64) -> Result<Ty<'s>, CheckError> {
    let undefined = || CheckError {
        id,
        message: format!("undefined field '{field}'"),
    };
    match ty {
        Ty::Dyn | Ty::Str => Ok(Ty::Dyn),
        Ty::Meta => match field {
            "name" | "generateName" => Ok(Ty::Str),
            _ => Err(undefined()),
        },
        Ty::Resource(s) => match field {
            "apiVersion" | "kind" => Ok(Ty::Str),
            "metadata" => Ok(Ty::Meta),
            _ => object_field(s, field).ok_or_else(undefined),
        },
        Ty::Node(s) => {
            if s.embedded {
                return select(Ty::Resource(s), field, id);
            }
            if !is_object(s) {
                return Ok(Ty::Dyn);
            }
            object_field(s, field).ok_or_else(undefined)
        }
    }
}

/// The type of `field` of an object node, `None` if the schema has no
/// such field.
fn object_field<'s>(s: &'s Schema, field: &str) -> Option<Ty<'s>> {
    if let Some(p) = s.prop(field) {
        return Some(Ty::Node(p));
    }
    if s.properties.is_empty() {
        if let Some(ap) = s.additional_schema() {
            return Some(Ty::Node(ap));
        }
        if s.keeps_unknown() {
            return Some(Ty::Dyn);
        }
    }
    None
}

fn index<'s>(ty: Ty<'s>) -> Ty<'s> {
    match ty {
        Ty::Node(s) => {
            if let Some(items) = s.items.as_deref() {
                Ty::Node(items)
            } else if s.properties.is_empty() {
                s.additional_schema().map_or(Ty::Dyn, Ty::Node)
            } else {
                Ty::Dyn
            }
        }
        _ => Ty::Dyn,
    }
}

/// The types of a comprehension's variables over `range`.
fn iteration<'s>(range: Ty<'s>, two_vars: bool) -> (Ty<'s>, Ty<'s>) {
    match range {
        Ty::Node(s) if s.items.is_some() => {
            let item = index(range);
            if two_vars {
                (Ty::Dyn, item)
            } else {
                (item, Ty::Dyn)
            }
        }
        Ty::Node(s) if s.properties.is_empty() && s.additional_schema().is_some() => {
            (Ty::Str, index(range))
        }
        _ => (Ty::Dyn, Ty::Dyn),
    }
}

impl<'s> Checker<'s> {
    fn lookup(&self, name: &str) -> Option<Ty<'s>> {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
    }

    fn is_variable(&self, name: &str) -> bool {
        name == "self" || name == "oldSelf" || self.lookup(name).is_some()
    }

    fn walk(&mut self, e: &IdedExpr) -> Result<Ty<'s>, CheckError> {
        match &e.expr {
            Expr::Unspecified | Expr::Literal(_) => Ok(Ty::Dyn),
            Expr::Ident(name) => self.ident(name, e.id),
            Expr::Select(sel) => self.select_expr(e, sel),
            Expr::Call(call) if is_operator(&call.func_name) => self.operator(call, e.id),
            Expr::Call(call) => self.call(call, e.id),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::List(list) => {
                self.walk_all(&list.elements)?;
                Ok(Ty::Dyn)
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        self.walk(&me.key)?;
                        self.walk(&me.value)?;
                    }
                }
                Ok(Ty::Dyn)
            }
            Expr::Struct(st) => Err(undeclared(e.id, &st.type_name)),
        }
    }

    fn walk_all(&mut self, exprs: &[IdedExpr]) -> Result<(), CheckError> {
        for e in exprs {
            self.walk(e)?;
        }
        Ok(())
    }

    /// `a.b`: a field of the operand's type, unless `a.b` names a type
    /// (e.g. google.protobuf.Duration).
    fn select_expr(&mut self, e: &IdedExpr, sel: &SelectExpr) -> Result<Ty<'s>, CheckError> {
        if let Some(segments) = e.expr_qualified()
            && !self.is_variable(segments[0])
        {
            let qualified = segments.join(".");
            if TYPE_NAMES.contains(&qualified.as_str()) {
                return Ok(Ty::Dyn);
            }
        }
        let operand = self.walk(&sel.operand)?;
        select(operand, &sel.field, e.id)
    }

    /// An operator. Indexing keeps the element's type, and `a.?b` checks
    /// that `b` is a field of `a`; anything else is `dyn`.
    fn operator(&mut self, call: &CallExpr, id: u64) -> Result<Ty<'s>, CheckError> {
        if let Some(t) = &call.target {
            self.walk(t)?;
        }
        let mut tys = Vec::with_capacity(call.args.len());
        for a in &call.args {
            tys.push(self.walk(a)?);
        }
        Ok(match call.func_name.as_str() {
            "_[_]" => tys.first().copied().map_or(Ty::Dyn, index),
            "_?._" => {
                if let (
                    Some(t),
                    Some(IdedExpr {
                        expr: Expr::Literal(LiteralValue::String(f)),
                        ..
                    }),
                ) = (tys.first(), call.args.get(1))
                {
                    select(*t, f.inner(), id)?;
                }
                Ty::Dyn
            }
            _ => Ty::Dyn,
        })
    }

    /// A function call: a namespaced global (`sets.contains(...)`, whose
    /// "target" is a qualified name, not a value), a member function, or a
    /// global function.
    fn call(&mut self, call: &CallExpr, id: u64) -> Result<Ty<'s>, CheckError> {
        match &call.target {
            Some(target) => {
                if let Some(segments) = target.expr_qualified()
                    && !self.is_variable(segments[0])
                {
                    let qualified = format!("{}.{}", segments.join("."), call.func_name);
                    if !is_global(&qualified) {
                        return Err(undeclared(id, &qualified));
                    }
                } else {
                    self.walk(target)?;
                    if !is_member(&call.func_name) {
                        return Err(undeclared(id, &call.func_name));
                    }
                }
            }
            None if !is_global(&call.func_name) => return Err(undeclared(id, &call.func_name)),
            None => {}
        }
        self.walk_all(&call.args)?;
        Ok(Ty::Dyn)
    }

    /// A macro's comprehension: the iteration variables are typed from the
    /// range, and the accumulator stays in scope for the result.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Result<Ty<'s>, CheckError> {
        let range = self.walk(&c.iter_range)?;
        self.walk(&c.accu_init)?;
        let (t1, t2) = iteration(range, c.iter_var2.is_some());
        let depth = self.scope.len();
        self.scope.push((c.accu_var.clone(), Ty::Dyn));
        self.scope.push((c.iter_var.clone(), t1));
        if let Some(v2) = &c.iter_var2 {
            self.scope.push((v2.clone(), t2));
        }
        self.walk(&c.loop_cond)?;
        self.walk(&c.loop_step)?;
        self.scope.truncate(depth + 1);
        self.walk(&c.result)?;
        self.scope.truncate(depth);
        Ok(Ty::Dyn)
    }

    fn ident(&mut self, name: &str, id: u64) -> Result<Ty<'s>, CheckError> {
        if let Some(t) = self.lookup(name) {
            return Ok(t);
        }
        match name {
            "self" => Ok(self.self_ty),
            "oldSelf" => {
                self.uses_old_self = true;
                Ok(self.old_self_ty)
            }
            _ if TYPE_NAMES.contains(&name) => Ok(Ty::Dyn),
            _ => Err(undeclared(id, name)),
        }
    }
}

/// cel-go's error for a name it does not know.
fn undeclared(id: u64, name: &str) -> CheckError {
    CheckError {
        id,
        message: format!("undeclared reference to '{name}' (in container '')"),
    }
}

trait QualifiedName {
    fn expr_qualified(&self) -> Option<Vec<&str>>;
}

impl QualifiedName for IdedExpr {
    /// `a.b.c` as `["a", "b", "c"]`, if the expression is only identifiers
    /// and field selections (not presence tests).
    fn expr_qualified(&self) -> Option<Vec<&str>> {
        let mut segments = Vec::new();
        let mut expr = &self.expr;
        loop {
            match expr {
                Expr::Ident(name) => {
                    segments.push(name.as_str());
                    segments.reverse();
                    return Some(segments);
                }
                Expr::Select(sel) if !sel.test => {
                    segments.push(sel.field.as_str());
                    expr = &sel.operand.expr;
                }
                _ => return None,
            }
        }
    }
}
