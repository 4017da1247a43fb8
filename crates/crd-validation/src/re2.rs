//! Go RE2 regular expressions on the `regex` crate.
//!
//! Both are RE2-family engines (no backreferences, no lookaround), but the
//! `regex` crate makes `\d`, `\w`, `\s` and `\b` Unicode-aware and reads `[`
//! inside a class as a nested class. [`translate`] rewrites a Go pattern so
//! that it matches exactly what Go's `regexp` matches, and [`compile`] caches
//! the compiled expressions that CEL rules build at run time.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use regex::Regex;

/// Rewrites a Go (RE2) pattern into the `regex` crate's syntax.
pub fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    // Position inside the class: a `]` right after `[` or `[^` is literal.
    let mut class_start = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push('\\');
                    break;
                };
                class_start = false;
                if in_class {
                    match n {
                        'd' => out.push_str("[:digit:]"),
                        'D' => out.push_str("[:^digit:]"),
                        'w' => out.push_str("[:word:]"),
                        'W' => out.push_str("[:^word:]"),
                        's' => out.push_str("\\t\\n\\f\\r "),
                        _ => {
                            out.push('\\');
                            out.push(n);
                        }
                    }
                } else {
                    match n {
                        'd' | 'D' | 'w' | 'W' | 'b' | 'B' => {
                            out.push_str("(?-u:\\");
                            out.push(n);
                            out.push(')');
                        }
                        's' => out.push_str("[\\t\\n\\f\\r ]"),
                        'S' => out.push_str("[^\\t\\n\\f\\r ]"),
                        _ => {
                            out.push('\\');
                            out.push(n);
                        }
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                class_start = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
            }
            '[' if in_class => {
                let rest: String = chars.clone().take(1).collect();
                if rest == ":" {
                    // POSIX class inside a class: copy through to ":]".
                    out.push('[');
                    for d in chars.by_ref() {
                        out.push(d);
                        if d == ']' {
                            break;
                        }
                    }
                } else {
                    out.push_str("\\[");
                }
                class_start = false;
            }
            ']' if in_class => {
                if class_start {
                    out.push_str("\\]");
                    class_start = false;
                } else {
                    in_class = false;
                    out.push(']');
                }
            }
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
                class_start = false;
            }
            '-' if in_class && chars.peek() == Some(&'-') => {
                out.push_str("\\-");
                class_start = false;
            }
            _ => {
                out.push(c);
                class_start = false;
            }
        }
    }
    out
}

/// Compiles a Go pattern, translated.
pub fn compile_uncached(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&translate(pattern))
}

static CACHE: LazyLock<Mutex<HashMap<String, Arc<Regex>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

const CACHE_LIMIT: usize = 512;

/// Compiles a Go pattern, reusing an earlier compilation of the same pattern.
pub fn compile(pattern: &str) -> Result<Arc<Regex>, regex::Error> {
    {
        let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(re) = cache.get(pattern) {
            return Ok(Arc::clone(re));
        }
    }
    let re = Arc::new(compile_uncached(pattern)?);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(pattern.to_string(), Arc::clone(&re));
    Ok(re)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        compile_uncached(p)
            .unwrap_or_else(|e| panic!("{p}: {e}"))
            .is_match(s)
    }

    #[test]
    fn perl_classes_are_ascii_like_go() {
        assert!(m(r"^\d+$", "123"));
        assert!(!m(r"^\d+$", "١٢٣"), "Arabic-Indic digits are not \\d in Go");
        assert!(m(r"^[\d.]+$", "1.5"));
        assert!(!m(r"^\w$", "é"));
        assert!(m(r"^a\sb$", "a b"));
    }

    #[test]
    fn brackets_inside_classes_are_literal() {
        assert!(m(r"^[[]$", "["));
        assert!(m(r"^[]a]+$", "]a"));
        assert!(m(r"^[[:alpha:]]+$", "abc"));
        assert!(m(r"^[a&&b]$", "&"));
    }

    #[test]
    fn karpenter_patterns_compile() {
        for p in [
            r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$",
            r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$",
            r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$",
            r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$",
            r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$",
        ] {
            compile_uncached(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        }
        assert!(m(
            r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$",
            "karpenter.sh/capacity-type"
        ));
    }
}
