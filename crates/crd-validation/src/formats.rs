//! OpenAPI `format`s as kube-openapi's `strfmt` registry checks them for
//! custom resources, and the parsers CEL uses for formatted strings.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Utc};
use regex::Regex;

/// Whether `s` is valid for `format`. Unknown formats (and number formats,
/// which are checked against their range elsewhere) accept anything.
pub(crate) fn is_valid(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => is_date_time(s),
        "date" => parse_date(s).is_some(),
        "duration" => parse_duration(s).is_some(),
        "byte" => decode_base64(s).is_some(),
        "uuid" => UUID.is_match(s),
        "uuid3" => UUID3.is_match(s),
        "uuid4" => UUID4.is_match(s),
        "uuid5" => UUID5.is_match(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.contains(':') && s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => parse_cidr(s).is_some(),
        "mac" => is_mac(s),
        "hostname" => s.len() <= 255 && HOSTNAME.is_match(s),
        "email" => EMAIL.is_match(s),
        "uri" => parse_request_uri(s).is_some(),
        "hexcolor" => HEXCOLOR.is_match(s),
        "rgbcolor" => RGBCOLOR.is_match(s),
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        _ => true,
    }
}

fn re(p: &str) -> Regex {
    // The patterns below are constants; a failure is a bug caught by tests.
    Regex::new(p).unwrap_or_else(|e| panic!("invalid built-in pattern {p}: {e}"))
}

static UUID: LazyLock<Regex> =
    LazyLock::new(|| re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
static UUID3: LazyLock<Regex> =
    LazyLock::new(|| re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
static UUID4: LazyLock<Regex> = LazyLock::new(|| {
    re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static UUID5: LazyLock<Regex> = LazyLock::new(|| {
    re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
    )
});
static EMAIL: LazyLock<Regex> = LazyLock::new(|| re(r"^[^@\s<>]+@[^@\s<>]+$"));
static HEXCOLOR: LazyLock<Regex> = LazyLock::new(|| re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGBCOLOR: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$",
    )
});
static TIME_OF_DAY: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
});

/// strfmt's `IsDateTime`: an RFC 3339 date-time (date, `T`, time with an
/// offset or `Z`).
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    if parse_date(date).is_none() {
        return false;
    }
    let Some(c) = TIME_OF_DAY.captures(time) else {
        return false;
    };
    let le = |i: usize, max: &str| c.get(i).is_some_and(|m| m.as_str() <= max);
    le(1, "23") && le(2, "59") && le(3, "59")
}

/// Parses a `date` (`2006-01-02`) as midnight UTC.
pub(crate) fn parse_date(s: &str) -> Option<DateTime<FixedOffset>> {
    if s.len() != 10 {
        return None;
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let dt = d.and_hms_opt(0, 0, 0)?;
    Some(Utc.from_utc_datetime(&dt).fixed_offset())
}

/// Parses a `date-time` the way strfmt's `ParseDateTime` does: RFC 3339,
/// with or without the colon in the offset, or without an offset (UTC).
pub(crate) fn parse_date_time(s: &str) -> Option<DateTime<FixedOffset>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t);
    }
    for layout in ["%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%dT%H:%M%z"] {
        if let Ok(t) = DateTime::parse_from_str(s, layout) {
            return Some(t);
        }
    }
    for layout in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%MZ",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, layout) {
            return Some(Utc.from_utc_datetime(&t).fixed_offset());
        }
    }
    None
}

/// Go's `time.ParseDuration` (`1h30m`, `-1.5s`, `300ms`).
pub(crate) fn parse_go_duration(s: &str) -> Option<chrono::Duration> {
    karpenter_core::duration::parse_signed_go_duration(s)
        .ok()
        .map(chrono::Duration::nanoseconds)
}

static DURATION_PART: LazyLock<Regex> = LazyLock::new(|| re(r"((\d+)\s*([A-Za-zµ]+))"));

/// strfmt's `ParseDuration`: Go durations, plus `d`/`day`, `w`/`week` and
/// spelled-out units (`3 days`, `2 hours`).
pub(crate) fn parse_duration(s: &str) -> Option<chrono::Duration> {
    if let Some(d) = parse_go_duration(s) {
        return Some(d);
    }
    const UNITS: &[(&[&str], i64)] = &[
        (&["ns", "nano"], 1),
        (&["us", "µs", "micro"], 1_000),
        (&["ms", "milli"], 1_000_000),
        (&["s", "sec"], 1_000_000_000),
        (&["m", "min"], 60_000_000_000),
        (&["h", "hr", "hour"], 3_600_000_000_000),
        (&["d", "day"], 86_400_000_000_000),
        (&["w", "wk", "week"], 604_800_000_000_000),
    ];
    let mut total: i64 = 0;
    let mut ok = false;
    for c in DURATION_PART.captures_iter(s) {
        let factor: i64 = c.get(2)?.as_str().parse().ok()?;
        let unit = c.get(3)?.as_str().trim().to_lowercase();
        for (variants, mult) in UNITS {
            let last = variants.len() - 1;
            for (i, variant) in variants.iter().enumerate() {
                if (i == last && unit.starts_with(variant)) || unit.eq_ignore_ascii_case(variant) {
                    ok = true;
                    total = total.checked_add(factor.checked_mul(*mult)?)?;
                }
            }
        }
    }
    ok.then(|| chrono::Duration::nanoseconds(total))
}

/// Standard base64 with padding, as Go's `base64.StdEncoding`.
pub(crate) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let chunks = bytes.chunks(4);
    let n = chunks.len();
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && i + 1 != n) {
            return None;
        }
        let mut acc: u32 = 0;
        for &c in &chunk[..4 - pad] {
            acc = (acc << 6) | val(c)?;
        }
        acc <<= 6 * pad as u32;
        let b = acc.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad]);
    }
    Some(out)
}

fn is_mac(s: &str) -> bool {
    // net.ParseMAC: 6, 8 or 20 octets separated by ':' or '-', or dotted
    // groups of four hex digits.
    let groups: Vec<&str> = if s.contains(':') {
        s.split(':').collect()
    } else if s.contains('-') {
        s.split('-').collect()
    } else {
        let dotted: Vec<&str> = s.split('.').collect();
        return matches!(dotted.len(), 3 | 4 | 10)
            && dotted
                .iter()
                .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_hexdigit()));
    };
    matches!(groups.len(), 6 | 8 | 20)
        && groups
            .iter()
            .all(|g| g.len() == 2 && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Parses `addr/prefix` (Go's `netip.ParsePrefix`).
pub(crate) fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = s.split_once('/')?;
    let ip: IpAddr = addr.parse().ok()?;
    if len.is_empty() || (len.len() > 1 && len.starts_with('0')) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len))
}

/// The parts of a URL, as Go's `net/url` splits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Url {
    pub scheme: String,
    pub host: String,
    pub path: String,
    pub query: String,
    pub opaque: String,
}

/// Go's `url.ParseRequestURI` (an absolute URL or an absolute path), with
/// the fragment split off as `url.Parse` does.
pub(crate) fn parse_request_uri(s: &str) -> Option<Url> {
    if s.is_empty() || s.chars().any(|c| c.is_ascii_control() || c == ' ') {
        return None;
    }
    let s = s.split_once('#').map_or(s, |(a, _)| a);
    let (rest, query) = match s.split_once('?') {
        Some((a, q)) => (a, q.to_string()),
        None => (s, String::new()),
    };
    if rest.starts_with('/') {
        return Some(Url {
            scheme: String::new(),
            host: String::new(),
            path: rest.to_string(),
            query,
            opaque: String::new(),
        });
    }
    let (scheme, after) = rest.split_once(':')?;
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    if let Some(authority_and_path) = after.strip_prefix("//") {
        let (host, path) = match authority_and_path.find('/') {
            Some(i) => (&authority_and_path[..i], &authority_and_path[i..]),
            None => (authority_and_path, ""),
        };
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        return Some(Url {
            scheme: scheme.to_string(),
            host: host.to_string(),
            path: path.to_string(),
            query,
            opaque: String::new(),
        });
    }
    if after.starts_with('/') {
        return Some(Url {
            scheme: scheme.to_string(),
            host: String::new(),
            path: after.to_string(),
            query,
            opaque: String::new(),
        });
    }
    if after.is_empty() {
        return None;
    }
    Some(Url {
        scheme: scheme.to_string(),
        host: String::new(),
        path: String::new(),
        query,
        opaque: after.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_times_follow_strfmt() {
        assert!(is_valid("date-time", "2024-01-02T03:04:05Z"));
        assert!(is_valid("date-time", "2024-01-02T03:04:05.123+02:00"));
        assert!(!is_valid("date-time", "2024-01-02"));
        assert!(!is_valid("date-time", "yesterday"));
        assert!(!is_valid("date-time", "2024-01-02T25:04:05Z"));
        assert!(parse_date_time("2024-01-02T03:04:05Z").is_some());
    }

    #[test]
    fn durations_follow_go_and_strfmt() {
        assert_eq!(
            parse_go_duration("1h30m"),
            Some(chrono::Duration::minutes(90))
        );
        assert_eq!(
            parse_go_duration("1.5s"),
            Some(chrono::Duration::milliseconds(1500))
        );
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_duration("3 days"), Some(chrono::Duration::days(3)));
        assert!(!is_valid("duration", "soon"));
    }

    #[test]
    fn base64_needs_padding() {
        assert_eq!(decode_base64("aGk="), Some(b"hi".to_vec()));
        assert_eq!(decode_base64("aGk"), None);
        assert_eq!(decode_base64(""), Some(vec![]));
    }

    #[test]
    fn builtin_patterns_compile() {
        for f in [
            "uuid", "uuid3", "uuid4", "uuid5", "hostname", "email", "hexcolor", "rgbcolor",
        ] {
            let _ = is_valid(f, "x");
        }
        assert!(is_valid("uuid", "123e4567-e89b-12d3-a456-426614174000"));
        assert!(is_valid("cidr", "10.0.0.0/8"));
        assert!(!is_valid("cidr", "10.0.0.0/33"));
        assert!(is_valid("mac", "00:1a:2b:3c:4d:5e"));
        assert!(is_valid("uri", "https://example.com/x?y=1"));
        assert!(!is_valid("uri", "example.com"));
    }
}
