//! The Kubernetes CEL libraries CRD rules may use, on top of cel's standard
//! library and strings extension:
//!
//! | library | functions |
//! | --- | --- |
//! | regex | `s.find(re)`, `s.findAll(re)`, `s.findAll(re, n)` |
//! | lists | `l.isSorted()`, `l.sum()`, `l.min()`, `l.max()`, `l.indexOf(x)`, `l.lastIndexOf(x)` |
//! | sets | `sets.contains(a, b)`, `sets.equivalent(a, b)`, `sets.intersects(a, b)` |
//! | quantity | `quantity(s)`, `isQuantity(s)`, `q.sign()`, `q.isGreaterThan(q)`, `q.isLessThan(q)`, `q.compareTo(q)`, `q.add(q\|int)`, `q.sub(q\|int)`, `q.asInteger()`, `q.isInteger()`, `q.asApproximateFloat()` |
//! | url | `url(s)`, `isURL(s)`, `u.getScheme()`, `u.getHost()`, `u.getHostname()`, `u.getPort()`, `u.getEscapedPath()`, `u.getQuery()` |
//! | ip / cidr | `ip(s)`, `isIP(s)`, `ip.isCanonical(s)`, `i.family()`, `i.isUnspecified()`, `i.isLoopback()`, `i.isLinkLocalMulticast()`, `i.isLinkLocalUnicast()`, `i.isGlobalUnicast()`, `cidr(s)`, `isCIDR(s)`, `c.containsIP(i\|s)`, `c.containsCIDR(c\|s)`, `c.ip()`, `c.masked()`, `c.prefixLength()`, `string(i\|c)` |
//! | format | `format.named(s)`, `format.dns1123Label()` and the other named formats, `f.validate(s)` |

use std::any::Any;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelOptional, CelString, DYN_TYPE, INT_TYPE, LIST_TYPE,
    STRING_TYPE, Type,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError, Value};

use crate::{formats, meta, re2};
use karpenter_core::quantity::Quantity;

type CelResult<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

fn err(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn str_arg<'a>(args: &'a [CowVal<'_, '_>], i: usize, f: &str) -> Result<&'a str, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelString>())
        .map(|s| s.inner())
        .ok_or_else(|| err(f, "expected a string argument"))
}

fn int_arg(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<i64, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelInt>())
        .map(|v| *v.inner())
        .ok_or_else(|| err(f, "expected an int argument"))
}

fn value_arg(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<Value, ExecutionError> {
    let a = args.get(i).ok_or_else(|| err(f, "missing argument"))?;
    Value::try_from(a.as_ref())
}

fn list_arg(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match value_arg(args, i, f)? {
        Value::List(l) => Ok(l),
        _ => Err(err(f, "expected a list argument")),
    }
}

fn typed<'a, T: StaticVal>(
    args: &'a [CowVal<'_, '_>],
    i: usize,
    f: &str,
) -> Result<&'a T, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<T>())
        .ok_or_else(|| err(f, "unexpected argument type"))
}

fn from_value<'b, 'v>(v: Value) -> CelResult<'b, 'v> {
    let b: Box<dyn Val> = Box::<dyn Val>::try_from(v)?;
    Ok(CowVal::from(b as Box<dyn Val + 'v>))
}

fn bool_val<'b, 'v>(b: bool) -> CelResult<'b, 'v> {
    Ok(CowVal::owned(CelBool::from(b)))
}

fn int_val<'b, 'v>(i: i64) -> CelResult<'b, 'v> {
    Ok(CowVal::owned(CelInt::from(i)))
}

fn string_val<'b, 'v>(s: String) -> CelResult<'b, 'v> {
    Ok(CowVal::owned(CelString::from(s)))
}

macro_rules! opaque_val {
    ($name:ident, $inner:ty, $type_static:ident, $type_name:literal) => {
        pub(crate) static $type_static: Type = Type::new_unspecified_type($type_name);

        #[derive(Clone, Debug)]
        pub(crate) struct $name(pub $inner);

        impl Val for $name {
            fn get_type(&self) -> &Type {
                &$type_static
            }
            fn cel_type() -> &'static Type {
                &$type_static
            }
            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$name>().is_some_and(|o| o.0 == self.0)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
        }

        impl StaticVal for $name {}
    };
}

opaque_val!(QuantityVal, Quantity, QUANTITY_TYPE, "kubernetes.Quantity");
opaque_val!(UrlVal, formats::Url, URL_TYPE, "kubernetes.URL");
opaque_val!(IpVal, IpAddr, IP_TYPE, "net.IP");
opaque_val!(CidrVal, (IpAddr, u8), CIDR_TYPE, "net.CIDR");
opaque_val!(
    FormatVal,
    &'static str,
    FORMAT_TYPE,
    "kubernetes.NamedFormat"
);

/// Registers the Kubernetes libraries on `env`.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    register_regex(env)?;
    register_lists(env)?;
    register_sets(env)?;
    register_quantity(env)?;
    register_url(env)?;
    register_ip(env)?;
    register_cidr(env)?;
    register_format(env)?;
    Ok(())
}

/// The regex library: `find` and `findAll` on strings.
fn register_regex(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "find",
        "string_find_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_all,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all_n,
    )?;
    Ok(())
}

/// The lists library: ordering, sums, extremes and searches.
fn register_lists(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], list_min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], list_max)?;
    env.add_member_overload(
        "indexOf",
        "list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}

/// The sets library: containment, equivalence and intersection of lists.
fn register_sets(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "sets.contains",
        "sets_contains",
        vec![LIST_TYPE, LIST_TYPE],
        sets_contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "sets_equivalent",
        vec![LIST_TYPE, LIST_TYPE],
        sets_equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "sets_intersects",
        vec![LIST_TYPE, LIST_TYPE],
        sets_intersects,
    )?;
    Ok(())
}

/// The quantity library: parsing, comparing and arithmetic on resource quantities.
fn register_quantity(env: &mut Env) -> Result<(), DeclarationError> {
    let q = || QUANTITY_TYPE.to_owned();
    env.add_type(q())?;
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        quantity,
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_member_overload("sign", "quantity_sign", q(), vec![], q_sign)?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        q(),
        vec![q()],
        q_greater,
    )?;
    env.add_member_overload(
        "isLessThan",
        "quantity_is_less_than",
        q(),
        vec![q()],
        q_less,
    )?;
    env.add_member_overload(
        "compareTo",
        "quantity_compare_to",
        q(),
        vec![q()],
        q_compare,
    )?;
    env.add_member_overload("add", "quantity_add", q(), vec![q()], q_add)?;
    env.add_member_overload("add", "quantity_add_int", q(), vec![INT_TYPE], q_add_int)?;
    env.add_member_overload("sub", "quantity_sub", q(), vec![q()], q_sub)?;
    env.add_member_overload("sub", "quantity_sub_int", q(), vec![INT_TYPE], q_sub_int)?;
    env.add_member_overload(
        "asInteger",
        "quantity_as_integer",
        q(),
        vec![],
        q_as_integer,
    )?;
    env.add_member_overload(
        "isInteger",
        "quantity_is_integer",
        q(),
        vec![],
        q_is_integer,
    )?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_as_float",
        q(),
        vec![],
        q_as_float,
    )?;
    Ok(())
}

/// The URL library: parsing and the parts of a URL.
fn register_url(env: &mut Env) -> Result<(), DeclarationError> {
    let u = || URL_TYPE.to_owned();
    env.add_type(u())?;
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], url)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    env.add_member_overload("getScheme", "url_get_scheme", u(), vec![], url_scheme)?;
    env.add_member_overload("getHost", "url_get_host", u(), vec![], url_host)?;
    env.add_member_overload("getHostname", "url_get_hostname", u(), vec![], url_hostname)?;
    env.add_member_overload("getPort", "url_get_port", u(), vec![], url_port)?;
    env.add_member_overload(
        "getEscapedPath",
        "url_get_escaped_path",
        u(),
        vec![],
        url_path,
    )?;
    env.add_member_overload("getQuery", "url_get_query", u(), vec![], url_query)?;
    Ok(())
}

/// The IP library: parsing and classifying addresses.
fn register_ip(env: &mut Env) -> Result<(), DeclarationError> {
    let ip_t = || IP_TYPE.to_owned();
    env.add_type(ip_t())?;
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], ip)?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], is_ip)?;
    env.add_overload(
        "ip.isCanonical",
        "ip_is_canonical",
        vec![STRING_TYPE],
        ip_is_canonical,
    )?;
    env.add_overload("string", "ip_to_string", vec![ip_t()], ip_to_string)?;
    env.add_member_overload("family", "ip_family", ip_t(), vec![], ip_family)?;
    env.add_member_overload(
        "isUnspecified",
        "ip_is_unspecified",
        ip_t(),
        vec![],
        ip_is_unspecified,
    )?;
    env.add_member_overload(
        "isLoopback",
        "ip_is_loopback",
        ip_t(),
        vec![],
        ip_is_loopback,
    )?;
    env.add_member_overload(
        "isLinkLocalMulticast",
        "ip_is_link_local_multicast",
        ip_t(),
        vec![],
        ip_is_ll_multicast,
    )?;
    env.add_member_overload(
        "isLinkLocalUnicast",
        "ip_is_link_local_unicast",
        ip_t(),
        vec![],
        ip_is_ll_unicast,
    )?;
    env.add_member_overload(
        "isGlobalUnicast",
        "ip_is_global_unicast",
        ip_t(),
        vec![],
        ip_is_global_unicast,
    )?;
    Ok(())
}

/// The CIDR library: parsing, containment and the parts of a prefix. Some
/// overloads take or return the IP type `register_ip` declares.
fn register_cidr(env: &mut Env) -> Result<(), DeclarationError> {
    let ip_t = || IP_TYPE.to_owned();
    let cidr_t = || CIDR_TYPE.to_owned();
    env.add_type(cidr_t())?;
    env.add_overload("cidr", "string_to_cidr", vec![STRING_TYPE], cidr)?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], is_cidr)?;
    env.add_overload("string", "cidr_to_string", vec![cidr_t()], cidr_to_string)?;
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_ip",
        cidr_t(),
        vec![ip_t()],
        cidr_contains_ip,
    )?;
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_string",
        cidr_t(),
        vec![STRING_TYPE],
        cidr_contains_ip,
    )?;
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr",
        cidr_t(),
        vec![cidr_t()],
        cidr_contains_cidr,
    )?;
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr_string",
        cidr_t(),
        vec![STRING_TYPE],
        cidr_contains_cidr,
    )?;
    env.add_member_overload("ip", "cidr_ip", cidr_t(), vec![], cidr_ip)?;
    env.add_member_overload("masked", "cidr_masked", cidr_t(), vec![], cidr_masked)?;
    env.add_member_overload(
        "prefixLength",
        "cidr_prefix_length",
        cidr_t(),
        vec![],
        cidr_prefix_length,
    )?;
    Ok(())
}

/// The format library: named formats (`format.dns1123Label()`, ...) and
/// `validate`.
fn register_format(env: &mut Env) -> Result<(), DeclarationError> {
    let f = || FORMAT_TYPE.to_owned();
    env.add_type(f())?;
    env.add_overload(
        "format.named",
        "format_named",
        vec![STRING_TYPE],
        format_named,
    )?;
    for (name, id, func) in NAMED_FORMAT_CONSTRUCTORS {
        env.add_overload(name, id, vec![], *func)?;
    }
    env.add_member_overload(
        "validate",
        "format_validate",
        f(),
        vec![STRING_TYPE],
        format_validate,
    )?;
    Ok(())
}

/// The global functions this library adds, for the compile-time check.
pub(crate) const GLOBAL_FUNCTIONS: &[&str] = &[
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "quantity",
    "isQuantity",
    "url",
    "isURL",
    "ip",
    "isIP",
    "ip.isCanonical",
    "cidr",
    "isCIDR",
    "format.named",
    "format.dns1123Label",
    "format.dns1123Subdomain",
    "format.dns1035Label",
    "format.qualifiedName",
    "format.dns1123LabelPrefix",
    "format.dns1123SubdomainPrefix",
    "format.dns1035LabelPrefix",
    "format.labelValue",
    "format.uri",
    "format.uuid",
    "format.byte",
    "format.date",
    "format.datetime",
];

/// The member functions this library adds, for the compile-time check.
pub(crate) const MEMBER_FUNCTIONS: &[&str] = &[
    "find",
    "findAll",
    "isSorted",
    "sum",
    "min",
    "max",
    "indexOf",
    "lastIndexOf",
    "sign",
    "isGreaterThan",
    "isLessThan",
    "compareTo",
    "add",
    "sub",
    "asInteger",
    "isInteger",
    "asApproximateFloat",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "containsIP",
    "containsCIDR",
    "ip",
    "masked",
    "prefixLength",
    "validate",
];

// ---------- regex ----------

fn regex(f: &str, pattern: &str) -> Result<Arc<regex::Regex>, ExecutionError> {
    re2::compile(pattern).map_err(|e| err(f, format!("error parsing regexp: {e}")))
}

fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let s = str_arg(&args, 0, "find")?;
    let re = regex("find", str_arg(&args, 1, "find")?)?;
    string_val(
        re.find(s)
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    )
}

fn find_all_impl<'b, 'v>(args: &[CowVal<'b, 'v>], limit: i64) -> CelResult<'b, 'v> {
    let s = str_arg(args, 0, "findAll")?;
    let re = regex("findAll", str_arg(args, 1, "findAll")?)?;
    let take = if limit < 0 {
        usize::MAX
    } else {
        limit as usize
    };
    let found: Vec<Value> = re
        .find_iter(s)
        .take(take)
        .map(|m| Value::from(m.as_str()))
        .collect();
    from_value(Value::List(Arc::new(found)))
}

fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    find_all_impl(&args, -1)
}

fn find_all_n<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let n = int_arg(&args, 2, "findAll")?;
    find_all_impl(&args, n)
}

// ---------- lists ----------

fn compare(f: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    a.partial_cmp(b)
        .ok_or_else(|| err(f, format!("no such overload: {a:?} < {b:?}")))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let list = list_arg(&args, 0, "isSorted")?;
    for w in list.windows(2) {
        if compare("isSorted", &w[0], &w[1])? == Ordering::Greater {
            return bool_val(false);
        }
    }
    bool_val(true)
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let list = list_arg(&args, 0, "sum")?;
    let mut acc: Option<Value> = None;
    for v in list.iter() {
        acc = Some(match acc {
            None => v.clone(),
            Some(a) => (a + v.clone())?,
        });
    }
    from_value(acc.unwrap_or(Value::Int(0)))
}

fn extreme<'b, 'v>(args: &[CowVal<'b, 'v>], f: &str, want: Ordering) -> CelResult<'b, 'v> {
    let list = list_arg(args, 0, f)?;
    let mut best: Option<&Value> = None;
    for v in list.iter() {
        best = Some(match best {
            None => v,
            Some(b) => {
                if compare(f, v, b)? == want {
                    v
                } else {
                    b
                }
            }
        });
    }
    match best {
        Some(b) => from_value(b.clone()),
        None => Err(err(f, format!("{f} called on empty list"))),
    }
}

fn list_min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    extreme(&args, "min", Ordering::Less)
}

fn list_max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    extreme(&args, "max", Ordering::Greater)
}

fn position<'b, 'v>(args: &[CowVal<'b, 'v>], f: &str, last: bool) -> CelResult<'b, 'v> {
    let list = list_arg(args, 0, f)?;
    let needle = value_arg(args, 1, f)?;
    let found = if last {
        list.iter().rposition(|v| *v == needle)
    } else {
        list.iter().position(|v| *v == needle)
    };
    int_val(found.map_or(-1, |i| i as i64))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    position(&args, "indexOf", false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    position(&args, "lastIndexOf", true)
}

// ---------- sets ----------

fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let a = list_arg(&args, 0, "sets.contains")?;
    let b = list_arg(&args, 1, "sets.contains")?;
    bool_val(b.iter().all(|x| a.contains(x)))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let a = list_arg(&args, 0, "sets.equivalent")?;
    let b = list_arg(&args, 1, "sets.equivalent")?;
    bool_val(b.iter().all(|x| a.contains(x)) && a.iter().all(|x| b.contains(x)))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let a = list_arg(&args, 0, "sets.intersects")?;
    let b = list_arg(&args, 1, "sets.intersects")?;
    bool_val(b.iter().any(|x| a.contains(x)))
}

// ---------- quantity ----------

fn quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let s = str_arg(&args, 0, "quantity")?;
    let q = Quantity::parse(s).map_err(|e| err("quantity", e))?;
    Ok(CowVal::owned(QuantityVal(q)))
}

fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(Quantity::parse(str_arg(&args, 0, "isQuantity")?).is_ok())
}

fn q_arg(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<Quantity, ExecutionError> {
    if let Some(q) = args.get(i).and_then(|a| a.downcast_ref::<QuantityVal>()) {
        return Ok(q.0);
    }
    Ok(Quantity::from_int(int_arg(args, i, f)?))
}

fn q_sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    int_val(q_arg(&args, 0, "sign")?.sign())
}

fn q_greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let (a, b) = (
        q_arg(&args, 0, "isGreaterThan")?,
        q_arg(&args, 1, "isGreaterThan")?,
    );
    bool_val(a.compare(&b) == Ordering::Greater)
}

fn q_less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let (a, b) = (
        q_arg(&args, 0, "isLessThan")?,
        q_arg(&args, 1, "isLessThan")?,
    );
    bool_val(a.compare(&b) == Ordering::Less)
}

fn q_compare<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let (a, b) = (q_arg(&args, 0, "compareTo")?, q_arg(&args, 1, "compareTo")?);
    int_val(match a.compare(&b) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

/// `add` or `sub` (named `f`) of two quantities; an int argument counts
/// as a quantity.
fn q_arith<'b, 'v>(
    args: &[CowVal<'b, 'v>],
    f: &str,
    op: fn(&Quantity, &Quantity) -> Option<Quantity>,
) -> CelResult<'b, 'v> {
    let (a, b) = (q_arg(args, 0, f)?, q_arg(args, 1, f)?);
    let r = op(&a, &b).ok_or_else(|| err(f, "quantity overflow"))?;
    Ok(CowVal::owned(QuantityVal(r)))
}

fn q_add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    q_arith(&args, "add", Quantity::add)
}

fn q_add_int<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    q_add(args)
}

fn q_sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    q_arith(&args, "sub", Quantity::sub)
}

fn q_sub_int<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    q_sub(args)
}

fn q_as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let q = q_arg(&args, 0, "asInteger")?;
    int_val(
        q.as_i64()
            .ok_or_else(|| err("asInteger", "cannot convert value to integer"))?,
    )
}

fn q_is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(q_arg(&args, 0, "isInteger")?.as_i64().is_some())
}

fn q_as_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    Ok(CowVal::owned(CelDouble::from(
        q_arg(&args, 0, "asApproximateFloat")?.as_f64(),
    )))
}

// ---------- url ----------

fn url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let s = str_arg(&args, 0, "url")?;
    let u = formats::parse_request_uri(s).ok_or_else(|| {
        err(
            "url",
            format!(
                "URL parse error during conversion from string: parse {}: invalid URI for request",
                crate::error::go_quote(s)
            ),
        )
    })?;
    Ok(CowVal::owned(UrlVal(u)))
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(formats::parse_request_uri(str_arg(&args, 0, "isURL")?).is_some())
}

fn url_arg<'a>(args: &'a [CowVal<'_, '_>], f: &str) -> Result<&'a formats::Url, ExecutionError> {
    typed::<UrlVal>(args, 0, f).map(|u| &u.0)
}

fn split_host_port(host: &str) -> (&str, &str) {
    if let Some(rest) = host.strip_prefix('[')
        && let Some((h, after)) = rest.split_once(']')
    {
        return (h, after.strip_prefix(':').unwrap_or(""));
    }
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p),
        _ => (host, ""),
    }
}

fn url_scheme<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    string_val(url_arg(&args, "getScheme")?.scheme.clone())
}

fn url_host<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    string_val(url_arg(&args, "getHost")?.host.clone())
}

fn url_hostname<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let u = url_arg(&args, "getHostname")?;
    string_val(split_host_port(&u.host).0.to_string())
}

fn url_port<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let u = url_arg(&args, "getPort")?;
    string_val(split_host_port(&u.host).1.to_string())
}

fn url_path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    string_val(url_arg(&args, "getEscapedPath")?.path.clone())
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn url_query<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let u = url_arg(&args, "getQuery")?;
    let mut params: Vec<(String, Vec<Value>)> = Vec::new();
    for pair in u.query.split(['&', ';']).filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        match params.iter_mut().find(|(name, _)| *name == k) {
            Some((_, vals)) => vals.push(Value::from(v)),
            None => params.push((k, vec![Value::from(v)])),
        }
    }
    let map: HashMap<String, Value> = params
        .into_iter()
        .map(|(k, v)| (k, Value::List(Arc::new(v))))
        .collect();
    from_value(Value::from(map))
}

// ---------- ip / cidr ----------

fn parse_ip(f: &str, s: &str) -> Result<IpAddr, ExecutionError> {
    if s.contains('%') {
        return Err(err(f, "IP address with zone value is not allowed"));
    }
    let ip: IpAddr = s
        .parse()
        .map_err(|_| err(f, format!("IP Address {} parse error during conversion from string: ParseAddr({}): unable to parse IP", crate::error::go_quote(s), crate::error::go_quote(s))))?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(err(f, "IPv4-mapped IPv6 address is not allowed"));
    }
    Ok(ip)
}

fn ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    Ok(CowVal::owned(IpVal(parse_ip(
        "ip",
        str_arg(&args, 0, "ip")?,
    )?)))
}

fn is_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(parse_ip("isIP", str_arg(&args, 0, "isIP")?).is_ok())
}

fn ip_is_canonical<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let s = str_arg(&args, 0, "ip.isCanonical")?;
    let ip = parse_ip("ip.isCanonical", s)?;
    bool_val(ip.to_string() == s)
}

fn ip_arg(args: &[CowVal<'_, '_>], f: &str) -> Result<IpAddr, ExecutionError> {
    typed::<IpVal>(args, 0, f).map(|i| i.0)
}

fn ip_to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    string_val(ip_arg(&args, "string")?.to_string())
}

fn ip_family<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    int_val(if ip_arg(&args, "family")?.is_ipv4() {
        4
    } else {
        6
    })
}

fn ip_is_unspecified<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(ip_arg(&args, "isUnspecified")?.is_unspecified())
}

fn ip_is_loopback<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(ip_arg(&args, "isLoopback")?.is_loopback())
}

fn is_ll_multicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 224 && o[1] == 0 && o[2] == 0
        }
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
}

fn is_ll_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn ip_is_ll_multicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(is_ll_multicast(ip_arg(&args, "isLinkLocalMulticast")?))
}

fn ip_is_ll_unicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(is_ll_unicast(ip_arg(&args, "isLinkLocalUnicast")?))
}

fn ip_is_global_unicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let ip = ip_arg(&args, "isGlobalUnicast")?;
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    bool_val(
        !ip.is_unspecified()
            && !ip.is_loopback()
            && !ip.is_multicast()
            && !is_ll_unicast(ip)
            && !broadcast,
    )
}

fn parse_cidr(f: &str, s: &str) -> Result<(IpAddr, u8), ExecutionError> {
    let (addr, _) = s.split_once('/').unwrap_or((s, ""));
    parse_ip(f, addr)?;
    formats::parse_cidr(s).ok_or_else(|| {
        err(
            f,
            format!("network address parse error during conversion from string: netip.ParsePrefix({}): bad bits after slash", crate::error::go_quote(s)),
        )
    })
}

fn cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    Ok(CowVal::owned(CidrVal(parse_cidr(
        "cidr",
        str_arg(&args, 0, "cidr")?,
    )?)))
}

fn is_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    bool_val(parse_cidr("isCIDR", str_arg(&args, 0, "isCIDR")?).is_ok())
}

fn cidr_arg(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<(IpAddr, u8), ExecutionError> {
    if let Some(c) = args.get(i).and_then(|a| a.downcast_ref::<CidrVal>()) {
        return Ok(c.0);
    }
    parse_cidr(f, str_arg(args, i, f)?)
}

fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            IpAddr::V6((bits & m).into())
        }
    }
}

fn contains(net: (IpAddr, u8), ip: IpAddr) -> bool {
    net.0.is_ipv4() == ip.is_ipv4() && mask(net.0, net.1) == mask(ip, net.1)
}

fn cidr_to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let (ip, len) = cidr_arg(&args, 0, "string")?;
    string_val(format!("{ip}/{len}"))
}

fn cidr_contains_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let net = cidr_arg(&args, 0, "containsIP")?;
    let ip = match args.get(1).and_then(|a| a.downcast_ref::<IpVal>()) {
        Some(i) => i.0,
        None => parse_ip("containsIP", str_arg(&args, 1, "containsIP")?)?,
    };
    bool_val(contains(net, ip))
}

fn cidr_contains_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let net = cidr_arg(&args, 0, "containsCIDR")?;
    let other = cidr_arg(&args, 1, "containsCIDR")?;
    bool_val(other.1 >= net.1 && contains(net, other.0))
}

fn cidr_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    Ok(CowVal::owned(IpVal(cidr_arg(&args, 0, "ip")?.0)))
}

fn cidr_masked<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let (ip, len) = cidr_arg(&args, 0, "masked")?;
    Ok(CowVal::owned(CidrVal((mask(ip, len), len))))
}

fn cidr_prefix_length<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    int_val(i64::from(cidr_arg(&args, 0, "prefixLength")?.1))
}

// ---------- format ----------

const NAMED_FORMATS: &[&str] = &[
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

macro_rules! named_format_fn {
    ($($fn_name:ident => $name:literal),* $(,)?) => {
        $(
            fn $fn_name<'b, 'v>(_args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
                Ok(CowVal::owned(FormatVal($name)))
            }
        )*
        const NAMED_FORMAT_CONSTRUCTORS: &[(&str, &str, cel::common::functions::Function)] = &[
            $((concat!("format.", $name), concat!("format_", $name), $fn_name)),*
        ];
    };
}

named_format_fn!(
    fmt_dns1123_label => "dns1123Label",
    fmt_dns1123_subdomain => "dns1123Subdomain",
    fmt_dns1035_label => "dns1035Label",
    fmt_qualified_name => "qualifiedName",
    fmt_dns1123_label_prefix => "dns1123LabelPrefix",
    fmt_dns1123_subdomain_prefix => "dns1123SubdomainPrefix",
    fmt_dns1035_label_prefix => "dns1035LabelPrefix",
    fmt_label_value => "labelValue",
    fmt_uri => "uri",
    fmt_uuid => "uuid",
    fmt_byte => "byte",
    fmt_date => "date",
    fmt_datetime => "datetime",
);

fn format_named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let name = str_arg(&args, 0, "format.named")?;
    let found = NAMED_FORMATS.iter().find(|n| **n == name);
    let opt = match found {
        Some(n) => CelOptional::of(Box::new(FormatVal(n))),
        None => CelOptional::none(),
    };
    Ok(CowVal::owned(opt))
}

fn strip_trailing_dash(s: &str) -> String {
    let trimmed = s.trim_end_matches('-');
    if trimmed.len() != s.len() && !trimmed.is_empty() {
        format!("{trimmed}a")
    } else {
        s.to_string()
    }
}

fn format_errors(name: &str, s: &str) -> Vec<String> {
    match name {
        "dns1123Label" => meta::dns1123_label(s),
        "dns1123Subdomain" => meta::dns1123_subdomain(s),
        "dns1035Label" => meta::dns1035_label(s),
        "qualifiedName" => meta::qualified_name(s),
        "dns1123LabelPrefix" => meta::dns1123_label(&strip_trailing_dash(s)),
        "dns1123SubdomainPrefix" => meta::dns1123_subdomain(&strip_trailing_dash(s)),
        "dns1035LabelPrefix" => meta::dns1035_label(&strip_trailing_dash(s)),
        "labelValue" => meta::label_value(s),
        "uri" => check(formats::is_valid("uri", s), "invalid URI"),
        "uuid" => check(
            formats::is_valid("uuid", s),
            "does not match the UUID format",
        ),
        "byte" => check(formats::is_valid("byte", s), "invalid base64"),
        "date" => check(formats::is_valid("date", s), "invalid date"),
        "datetime" => check(formats::is_valid("date-time", s), "invalid datetime"),
        _ => Vec::new(),
    }
}

fn check(ok: bool, msg: &str) -> Vec<String> {
    if ok {
        Vec::new()
    } else {
        vec![msg.to_string()]
    }
}

fn format_validate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> CelResult<'b, 'v> {
    let f = typed::<FormatVal>(&args, 0, "validate")?.0;
    let s = str_arg(&args, 1, "validate")?;
    let errors = format_errors(f, s);
    let opt = if errors.is_empty() {
        CelOptional::none()
    } else {
        let list: Vec<Box<dyn Val + 'v>> = errors
            .into_iter()
            .map(|e| Box::new(CelString::from(e)) as Box<dyn Val + 'v>)
            .collect();
        CelOptional::of(Box::new(CelList::from(list)))
    };
    Ok(CowVal::owned(opt))
}
