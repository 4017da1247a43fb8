//! Kubernetes' name rules (apimachinery's `validation` package): label keys
//! and values, DNS labels and subdomains, URL path segments, and which of
//! them an object's name (or `generateName`) follows, each answering what
//! is wrong with a string in the words kube-apiserver uses (an empty list:
//! nothing).
//!
//! One home for the local API server (which refuses objects as
//! kube-apiserver does), the CRD validator (CEL's `format` library and the
//! metadata of embedded resources) and the AWS provider (which checks what
//! it writes into a node's bootstrap script itself).

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// apimachinery's `RegexError`: the rule, examples, and the pattern.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Non-empty, every byte `inner`, the first `first` and the last
/// alphanumeric (of the case `inner` allows).
fn shaped(s: &str, first: fn(u8) -> bool, inner: fn(u8) -> bool) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&head), Some(&tail)) => {
            first(head)
                && inner(tail)
                && tail != b'-'
                && tail != b'_'
                && tail != b'.'
                && bytes.iter().all(|&b| inner(b))
        }
        _ => false,
    }
}

fn lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_dns1123_label(s: &str) -> bool {
    shaped(s, lower_alnum, |b| lower_alnum(b) || b == b'-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    shaped(
        s,
        |b| b.is_ascii_alphanumeric(),
        |b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'),
    )
}

/// `IsDNS1123Label`.
pub fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_dns1123_label(v) {
        errs.push(regex_error(
            DNS1123_LABEL_ERR,
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !v.split('.').all(is_dns1123_label) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1035Label`.
pub fn dns1035_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !shaped(
        v,
        |b| b.is_ascii_lowercase(),
        |b| lower_alnum(b) || b == b'-',
    ) {
        errs.push(regex_error(
            DNS1035_LABEL_ERR,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `IsQualifiedName` (label and annotation keys).
pub fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !v.is_empty() && !is_qualified_name_part(v) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `path.IsValidPathSegmentName` (and, for a `prefix`,
/// `IsValidPathSegmentPrefix`): a name that can be a URL path segment, as
/// RBAC objects' names must be (`system:controller:x` is one).
pub fn path_segment_name(v: &str, prefix: bool) -> Vec<String> {
    if !prefix && (v == "." || v == "..") {
        return vec![format!("may not be '{v}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|bad| v.contains(bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// apimachinery's `maskTrailingDash`: a `generateName` gets a random
/// suffix, so it may end in a dash. Upstream drops the last two bytes and
/// appends `a` (`name[:len(name)-2] + "a"`); kept as is, since it decides
/// which prefixes pass.
fn mask_trailing_dash(name: &str) -> String {
    match name.get(..name.len().saturating_sub(2)) {
        Some(head) if name.len() > 1 && name.ends_with('-') => format!("{head}a"),
        // Not cut inside a character: a name that is not ASCII fails anyway.
        _ => name.to_string(),
    }
}

/// How the names of a kind of object are checked: apimachinery's
/// `ValidateNameFunc`s (`NameIsDNSSubdomain`, `NameIsDNSLabel`,
/// `NameIsDNS1035Label`, `ValidatePathSegmentName`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// Most kinds: pods, nodes, config maps, leases, custom resources.
    Dns1123Subdomain,
    /// Namespaces.
    Dns1123Label,
    /// Services.
    Dns1035Label,
    /// RBAC roles and bindings.
    PathSegment,
}

impl NameRule {
    /// What is wrong with `name`; `prefix` when it is a `generateName`
    /// that a random suffix will complete.
    pub fn check(self, name: &str, prefix: bool) -> Vec<String> {
        let masked = if prefix {
            mask_trailing_dash(name)
        } else {
            name.to_string()
        };
        match self {
            NameRule::Dns1123Subdomain => dns1123_subdomain(&masked),
            NameRule::Dns1123Label => dns1123_label(&masked),
            NameRule::Dns1035Label => dns1035_label(&masked),
            NameRule::PathSegment => path_segment_name(name, prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values_follow_apimachinery() {
        for good in ["app", "a.b/c", "example.com/My_Name-1", "k8s.io/x.y"] {
            assert!(qualified_name(good).is_empty(), "{good}");
        }
        for bad in [
            "", "-a", "a-", "a/b/c", "/a", "A.com/x", "a/", "a'b", "a b", "x/$(id)",
        ] {
            assert!(!qualified_name(bad).is_empty(), "{bad:?}");
        }
        assert_eq!(
            qualified_name("a/b/c"),
            vec![
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ]
        );
        assert_eq!(qualified_name("/").len(), 3, "{:?}", qualified_name("/"));
        for good in ["", "v", "V1.2_3-x"] {
            assert!(label_value(good).is_empty(), "{good:?}");
        }
        for bad in ["-v", "v-", "a'b", "a;b", "a b", &"x".repeat(64)] {
            assert!(!label_value(bad).is_empty(), "{bad:?}");
        }
        assert_eq!(label_value(&"-".repeat(64)).len(), 2);
    }

    #[test]
    fn name_rules_mask_a_generate_name_s_trailing_dash() {
        assert!(NameRule::Dns1123Subdomain.check("foo-", true).is_empty());
        assert!(!NameRule::Dns1123Subdomain.check("foo-", false).is_empty());
        assert!(!NameRule::Dns1123Subdomain.check("Bad_", true).is_empty());
        assert!(NameRule::Dns1123Label.check("a.b", false).len() == 1);
        assert!(NameRule::Dns1035Label.check("1abc", false).len() == 1);
        assert!(
            NameRule::PathSegment
                .check("system:controller:x", false)
                .is_empty()
        );
        assert_eq!(
            NameRule::PathSegment.check("a/b%", false),
            vec!["may not contain '/'", "may not contain '%'"]
        );
        assert_eq!(path_segment_name("..", false), vec!["may not be '..'"]);
        // Not ASCII: checked, never sliced inside a character.
        assert!(!NameRule::Dns1123Subdomain.check("é-", true).is_empty());
    }

    #[test]
    fn dns_names_follow_apimachinery() {
        assert!(dns1123_label("my-name").is_empty());
        assert!(!dns1123_label("My-name").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        assert!(!dns1123_subdomain("a..b").is_empty());
        assert!(!dns1123_subdomain("").is_empty());
        assert!(dns1035_label("abc-123").is_empty());
        assert!(!dns1035_label("1abc").is_empty());
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }
}
