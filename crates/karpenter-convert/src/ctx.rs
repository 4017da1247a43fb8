//! Per-document conversion context: note collection, typed field access, and
//! the "every field is either consumed or reported" bookkeeping.

use serde_json::{Map, Value};

use crate::Options;
use crate::error::ConvertError;
use crate::note::{DocumentId, Note, NoteKind};

pub(crate) type Result<T> = std::result::Result<T, ConvertError>;

/// State shared by the converters of one input document.
pub(crate) struct Ctx<'o> {
    pub(crate) doc: DocumentId,
    pub(crate) notes: Vec<Note>,
    pub(crate) opts: &'o Options,
}

impl<'o> Ctx<'o> {
    pub(crate) fn new(doc: DocumentId, opts: &'o Options) -> Self {
        Self {
            doc,
            notes: Vec::new(),
            opts,
        }
    }

    pub(crate) fn note(&mut self, kind: NoteKind, path: &str, message: impl Into<String>) {
        self.notes.push(Note {
            document: self.doc.clone(),
            path: path.to_string(),
            kind,
            message: message.into(),
        });
    }

    pub(crate) fn error(&self, path: &str, message: impl Into<String>) -> ConvertError {
        ConvertError::field(&self.doc, path, message)
    }

    pub(crate) fn type_error(&self, path: &str, expected: &str, got: &Value) -> ConvertError {
        self.error(path, format!("expected {expected}, got {}", describe(got)))
    }

    pub(crate) fn object(&self, path: &str, value: Value) -> Result<Map<String, Value>> {
        match value {
            Value::Object(map) => Ok(map),
            other => Err(self.type_error(path, "a mapping", &other)),
        }
    }

    /// A mapping at `path`, to be read field by field.
    pub(crate) fn obj(&self, path: String, value: Value) -> Result<Obj> {
        let map = self.object(&path, value)?;
        Ok(Obj::new(path, map))
    }

    pub(crate) fn array(&self, path: &str, value: Value) -> Result<Vec<Value>> {
        match value {
            Value::Array(items) => Ok(items),
            other => Err(self.type_error(path, "a list", &other)),
        }
    }

    pub(crate) fn string(&self, path: &str, value: &Value) -> Result<String> {
        match value {
            Value::String(s) => Ok(s.clone()),
            other => Err(self.type_error(path, "a string", other)),
        }
    }

    pub(crate) fn boolean(&self, path: &str, value: &Value) -> Result<bool> {
        match value {
            Value::Bool(b) => Ok(*b),
            other => Err(self.type_error(path, "true or false", other)),
        }
    }

    /// An integer (a YAML number without fraction). Strings are refused, even
    /// numeric ones: the API server refuses them too.
    pub(crate) fn integer(&self, path: &str, value: &Value) -> Result<i64> {
        match value {
            Value::Number(n) => match n.as_i64() {
                Some(i) => Ok(i),
                None => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
                    _ => Err(self.type_error(path, "an integer", value)),
                },
            },
            other => Err(self.type_error(path, "an integer", other)),
        }
    }

    pub(crate) fn non_negative(&self, path: &str, value: &Value) -> Result<u64> {
        let i = self.integer(path, value)?;
        u64::try_from(i).map_err(|_| self.type_error(path, "a non-negative integer", value))
    }

    /// A scalar as a string. Numbers and booleans are turned into strings
    /// (with a note): labels, annotations, tags and requirement values are
    /// string-only in Kubernetes, and YAML silently types `true` or `4`.
    pub(crate) fn scalar_string(
        &mut self,
        path: &str,
        value: &Value,
        what: &str,
    ) -> Result<String> {
        let (s, kind) = match value {
            Value::String(s) => return Ok(s.clone()),
            Value::Number(n) => (n.to_string(), "number"),
            Value::Bool(b) => (b.to_string(), "boolean"),
            other => return Err(self.type_error(path, "a string", other)),
        };
        self.note(
            NoteKind::Changed,
            path,
            format!("{what} {s} is a YAML {kind}; written as the string \"{s}\" (Kubernetes only accepts strings here)"),
        );
        Ok(s)
    }

    /// A `map[string]string` (labels, annotations, tags, selectors).
    pub(crate) fn string_map(
        &mut self,
        path: &str,
        value: Value,
        what: &str,
    ) -> Result<Map<String, Value>> {
        let map = self.object(path, value)?;
        let mut out = Map::new();
        for (key, value) in map {
            let child = child_path(path, &key);
            if value.is_null() {
                self.note(
                    NoteKind::Dropped,
                    &child,
                    format!("{what} has no value (null); Kubernetes needs a string, so the entry is left out"),
                );
                continue;
            }
            let s = self.scalar_string(&child, &value, what)?;
            out.insert(key, Value::String(s));
        }
        Ok(out)
    }

    /// A list whose items are kept as they are, but which must be a list.
    pub(crate) fn list(&self, path: &str, value: Value) -> Result<Value> {
        Ok(Value::Array(self.array(path, value)?))
    }

    /// A duration string as v1 accepts it (`30s`, `10m`, `1h30m`, `Never`
    /// when `never_ok`).
    pub(crate) fn duration(&self, path: &str, value: &Value, never_ok: bool) -> Result<String> {
        let expected = if never_ok {
            "a duration like 30s, 10m, 720h or Never"
        } else {
            "a duration like 30s, 10m or 720h"
        };
        match value {
            Value::String(s) if is_duration(s) || (never_ok && s == "Never") => Ok(s.clone()),
            other => Err(self.type_error(path, expected, other)),
        }
    }
}

/// A mapping being consumed field by field. Whatever is left at
/// [`Obj::finish`] is reported as dropped.
pub(crate) struct Obj {
    path: String,
    map: Map<String, Value>,
}

impl Obj {
    pub(crate) fn new(path: impl Into<String>, map: Map<String, Value>) -> Self {
        Self {
            path: path.into(),
            map,
        }
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    pub(crate) fn child(&self, key: &str) -> String {
        child_path(&self.path, key)
    }

    /// Removes and returns a field. A field that is present but empty
    /// (`weight:` with nothing after it) is reported and treated as absent.
    pub(crate) fn take(&mut self, ctx: &mut Ctx<'_>, key: &str) -> Option<Value> {
        match self.map.remove(key) {
            None => None,
            Some(Value::Null) => {
                ctx.note(
                    NoteKind::Dropped,
                    &self.child(key),
                    format!("`{key}` is present but empty (null); treated as not set"),
                );
                None
            }
            Some(value) => Some(value),
        }
    }

    /// The fields not consumed yet, as they are.
    pub(crate) fn into_map(self) -> Map<String, Value> {
        self.map
    }

    /// Removes a field without any note (null included).
    pub(crate) fn take_raw(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    /// Removes a field and converts its value with `convert`, which is given the field's path;
    /// the one shape of the `take_*` readers.
    pub(crate) fn take_with<T>(
        &mut self,
        ctx: &mut Ctx<'_>,
        key: &str,
        convert: impl FnOnce(&mut Ctx<'_>, &str, Value) -> Result<T>,
    ) -> Result<Option<T>> {
        match self.take(ctx, key) {
            None => Ok(None),
            Some(value) => convert(ctx, &self.child(key), value).map(Some),
        }
    }

    pub(crate) fn take_object(&mut self, ctx: &mut Ctx<'_>, key: &str) -> Result<Option<Obj>> {
        self.take_with(ctx, key, |ctx, path, value| ctx.obj(path.to_owned(), value))
    }

    pub(crate) fn take_string(&mut self, ctx: &mut Ctx<'_>, key: &str) -> Result<Option<String>> {
        self.take_with(ctx, key, |ctx, path, value| ctx.string(path, &value))
    }

    pub(crate) fn take_bool(&mut self, ctx: &mut Ctx<'_>, key: &str) -> Result<Option<bool>> {
        self.take_with(ctx, key, |ctx, path, value| ctx.boolean(path, &value))
    }

    pub(crate) fn take_integer(&mut self, ctx: &mut Ctx<'_>, key: &str) -> Result<Option<i64>> {
        self.take_with(ctx, key, |ctx, path, value| ctx.integer(path, &value))
    }

    pub(crate) fn take_string_map(
        &mut self,
        ctx: &mut Ctx<'_>,
        key: &str,
        what: &str,
    ) -> Result<Option<Map<String, Value>>> {
        self.take_with(ctx, key, |ctx, path, value| {
            ctx.string_map(path, value, what)
        })
    }

    pub(crate) fn take_list(&mut self, ctx: &mut Ctx<'_>, key: &str) -> Result<Option<Value>> {
        self.take_with(ctx, key, |ctx, path, value| ctx.list(path, value))
    }

    /// Drops a field the output has no place for, with a reason.
    pub(crate) fn drop_field(&mut self, ctx: &mut Ctx<'_>, key: &str, why: &str) {
        if self.map.remove(key).is_some() {
            ctx.note(NoteKind::Dropped, &self.child(key), why);
        }
    }

    /// Reports every field nobody consumed. `known` are the field names this
    /// mapping may have; they are used to suggest what a typo meant.
    pub(crate) fn finish(self, ctx: &mut Ctx<'_>, known: &[&str]) {
        for (key, _) in self.map {
            let mut message = format!("unknown field `{key}`; not carried over");
            if let Some(suggestion) = suggest(&key, known) {
                message.push_str(&format!(" (did you mean `{suggestion}`?)"));
            }
            ctx.note(NoteKind::Dropped, &child_path(&self.path, &key), message);
        }
    }
}

pub(crate) fn child_path(parent: &str, key: &str) -> String {
    let simple = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (parent.is_empty(), simple) {
        (true, true) => key.to_string(),
        (true, false) => format!("[{key:?}]"),
        (false, true) => format!("{parent}.{key}"),
        (false, false) => format!("{parent}[{key:?}]"),
    }
}

pub(crate) fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// A short, quoted rendering of a value for messages.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".to_string(),
        Value::Array(_) => format!("a list {}", compact(value)),
        Value::Object(_) => format!("a mapping {}", compact(value)),
        other => compact(other),
    }
}

fn compact(value: &Value) -> String {
    let s = value.to_string();
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// `^([0-9]+(s|m|h))+$`, the v1 duration pattern without `Never`.
pub(crate) fn is_duration(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || i >= bytes.len() || !matches!(bytes[i], b's' | b'm' | b'h') {
            return false;
        }
        i += 1;
    }
    true
}

/// Seconds as the shortest v1 duration: 30 -> `30s`, 600 -> `10m`,
/// 2592000 -> `720h`, 5400 -> `1h30m`.
pub(crate) fn format_seconds(total: u64) -> String {
    if total == 0 {
        return "0s".to_string();
    }
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// The known name closest to a typo, if it is close enough to be a guess
/// worth showing (`limit` -> `limits`).
pub(crate) fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let lower = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| {
            (
                *k,
                karpenter_core::hash::edit_distance(&lower, &k.to_ascii_lowercase()),
            )
        })
        .filter(|(k, d)| *d <= 2.max(k.len() / 5) && *d < k.len())
        .min_by_key(|(_, d)| *d)
        .map(|(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert!(is_duration("30s"));
        assert!(is_duration("1h30m"));
        assert!(!is_duration("30"));
        assert!(!is_duration("1d"));
        assert!(!is_duration("Never"));
        assert!(!is_duration(""));
        assert_eq!(format_seconds(0), "0s");
        assert_eq!(format_seconds(30), "30s");
        assert_eq!(format_seconds(600), "10m");
        assert_eq!(format_seconds(2_592_000), "720h");
        assert_eq!(format_seconds(5_430), "1h30m30s");
    }

    #[test]
    fn suggestions() {
        assert_eq!(suggest("limit", &["limits", "weight"]), Some("limits"));
        assert_eq!(suggest("wieght", &["limits", "weight"]), Some("weight"));
        assert_eq!(suggest("xyz", &["limits", "weight"]), None);
    }

    #[test]
    fn paths() {
        assert_eq!(child_path("", "spec"), "spec");
        assert_eq!(child_path("spec", "limits"), "spec.limits");
        assert_eq!(
            child_path("metadata.labels", "karpenter.sh/nodepool"),
            "metadata.labels[\"karpenter.sh/nodepool\"]"
        );
    }
}
