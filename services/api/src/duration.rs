//! Go-style duration strings as used by Karpenter's API (`"720h"`, `"1h30m"`, `"30s"`, `"Never"`).
//!
//! Kubernetes APIs written in Go encode durations with Go's `time.ParseDuration` syntax: a sequence
//! of decimal numbers, each with an optional fraction and a mandatory unit suffix (`ns`, `us`/`µs`,
//! `ms`, `s`, `m`, `h`). Karpenter additionally accepts the literal `Never` for fields that can be
//! disabled (`expireAfter`, `consolidateAfter`).
//!
//! [`GoDuration`] keeps the text exactly as the user wrote it, so a manifest survives a
//! parse/serialize round trip unchanged, while comparisons and [`GoDuration::as_std`] work on the
//! parsed value (`"90m"` equals `"1h30m"`). [`NillableDuration`] adds the `Never` case.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The literal that disables a [`NillableDuration`].
pub const NEVER: &str = "Never";

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;
/// Go's `time.Duration` is an `int64` of nanoseconds; values beyond it are rejected like Go does.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Why a duration string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The input was empty.
    #[error(
        "invalid duration \"\": a duration needs at least one number and unit, e.g. \"30s\" or \"1h30m\""
    )]
    Empty,
    /// The input starts with a minus sign.
    #[error("invalid duration {input:?}: negative durations are not allowed")]
    Negative {
        /// The rejected input.
        input: String,
    },
    /// A number was expected (e.g. a unit without a number, or a lone `.`).
    #[error("invalid duration {input:?}: expected a number at byte {position}")]
    ExpectedNumber {
        /// The rejected input.
        input: String,
        /// Byte offset of the problem.
        position: usize,
    },
    /// A number was not followed by a unit.
    #[error(
        "invalid duration {input:?}: missing unit after number at byte {position}; valid units are \"ns\", \"us\", \"ms\", \"s\", \"m\", \"h\""
    )]
    MissingUnit {
        /// The rejected input.
        input: String,
        /// Byte offset of the problem.
        position: usize,
    },
    /// A unit that Go does not know.
    #[error(
        "invalid duration {input:?}: unknown unit {unit:?}; valid units are \"ns\", \"us\", \"ms\", \"s\", \"m\", \"h\""
    )]
    UnknownUnit {
        /// The rejected input.
        input: String,
        /// The unit as written.
        unit: String,
    },
    /// The value does not fit in Go's 64-bit nanosecond duration.
    #[error("invalid duration {input:?}: value exceeds the maximum duration of about 2562047h")]
    Overflow {
        /// The rejected input.
        input: String,
    },
}

/// Parses a Go duration string (see the [module docs](self)) into a [`std::time::Duration`].
///
/// `"Never"` is not accepted here; use [`NillableDuration`] for fields that allow it.
///
/// # Errors
/// Returns a [`DurationError`] naming the offending part of the input.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let owned = || input.to_string();
    let mut rest = input;
    if let Some(stripped) = rest.strip_prefix('+') {
        rest = stripped;
    } else if rest.starts_with('-') {
        return Err(DurationError::Negative { input: owned() });
    }
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    // Go special-cases a bare zero.
    if rest == "0" {
        return Ok(Duration::ZERO);
    }

    let bytes = rest.as_bytes();
    let offset = input.len() - rest.len();
    let mut pos = 0usize;
    let mut total: u128 = 0;
    while pos < bytes.len() {
        // Integer part.
        let int_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let int_digits = &rest[int_start..pos];
        // Optional fraction.
        let mut frac_digits = "";
        if pos < bytes.len() && bytes[pos] == b'.' {
            pos += 1;
            let frac_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            frac_digits = &rest[frac_start..pos];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(DurationError::ExpectedNumber {
                input: owned(),
                position: offset + int_start,
            });
        }
        // Unit: everything up to the next digit or dot.
        let unit_start = pos;
        while pos < bytes.len() && !bytes[pos].is_ascii_digit() && bytes[pos] != b'.' {
            pos += 1;
        }
        let unit = &rest[unit_start..pos];
        if unit.is_empty() {
            return Err(DurationError::MissingUnit {
                input: owned(),
                position: offset + unit_start,
            });
        }
        let scale = match unit {
            "ns" => 1,
            "us" | "\u{00b5}s" | "\u{03bc}s" => NANOS_PER_MICRO,
            "ms" => NANOS_PER_MILLI,
            "s" => NANOS_PER_SECOND,
            "m" => NANOS_PER_MINUTE,
            "h" => NANOS_PER_HOUR,
            other => {
                return Err(DurationError::UnknownUnit {
                    input: owned(),
                    unit: other.to_string(),
                });
            }
        };
        let overflow = || DurationError::Overflow { input: owned() };
        let mut whole: u128 = 0;
        for d in int_digits.bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u128::from(d - b'0')))
                .filter(|w| *w <= MAX_NANOS)
                .ok_or_else(overflow)?;
        }
        let mut value = whole.checked_mul(scale).ok_or_else(overflow)?;
        // Fractions are truncated to whole nanoseconds, as Go does.
        let mut frac_scale = scale;
        for d in frac_digits.bytes() {
            frac_scale /= 10;
            if frac_scale == 0 {
                break;
            }
            value += u128::from(d - b'0') * frac_scale;
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= MAX_NANOS)
            .ok_or_else(overflow)?;
    }
    let secs = u64::try_from(total / NANOS_PER_SECOND)
        .map_err(|_| DurationError::Overflow { input: owned() })?;
    // The remainder is always below one second, so it fits in u32.
    let nanos = u32::try_from(total % NANOS_PER_SECOND).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

/// Formats a duration the way Go's `time.Duration.String()` does (`"720h0m0s"`, `"1.5s"`, `"300ms"`).
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < NANOS_PER_SECOND {
        return if nanos < NANOS_PER_MICRO {
            format!("{nanos}ns")
        } else if nanos < NANOS_PER_MILLI {
            format!("{}\u{00b5}s", decimal(nanos, NANOS_PER_MICRO))
        } else {
            format!("{}ms", decimal(nanos, NANOS_PER_MILLI))
        };
    }
    let hours = nanos / NANOS_PER_HOUR;
    let minutes = (nanos % NANOS_PER_HOUR) / NANOS_PER_MINUTE;
    let seconds = decimal(nanos % NANOS_PER_MINUTE, NANOS_PER_SECOND);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// `value / unit` as a decimal string without trailing zeros.
fn decimal(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A non-negative Go duration that remembers how it was written.
///
/// Equality, ordering and hashing use the parsed value; [`Display`](fmt::Display) and
/// serialization reproduce the original text.
#[derive(Clone, Debug)]
pub struct GoDuration {
    value: Duration,
    text: String,
}

impl GoDuration {
    /// Builds a duration from a [`std::time::Duration`], written in Go's canonical form.
    pub fn from_std(value: Duration) -> Self {
        Self {
            value,
            text: format_go_duration(value),
        }
    }

    /// A whole number of hours, written `"<n>h"` (e.g. `"720h"`).
    pub fn from_hours(hours: u64) -> Self {
        Self {
            value: Duration::from_secs(hours.saturating_mul(3600)),
            text: format!("{hours}h"),
        }
    }

    /// The parsed value.
    pub fn as_std(&self) -> Duration {
        self.value
    }

    /// The text as written in the manifest (or Go's canonical form if built from a value).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self {
            value: parse_go_duration(s)?,
            text: s.to_string(),
        })
    }
}

impl From<Duration> for GoDuration {
    fn from(value: Duration) -> Self {
        Self::from_std(value)
    }
}

impl From<GoDuration> for Duration {
    fn from(value: GoDuration) -> Self {
        value.value
    }
}

impl PartialEq for GoDuration {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Eq for GoDuration {}

impl PartialOrd for GoDuration {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GoDuration {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value.cmp(&other.value)
    }
}

impl Hash for GoDuration {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.value.hash(state);
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for GoDuration {
    fn schema_name() -> Cow<'static, str> {
        "GoDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }

    fn inline_schema() -> bool {
        true
    }
}

/// A duration that may be switched off with the literal `"Never"`.
///
/// Used by `expireAfter` and `consolidateAfter`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NillableDuration {
    /// The literal `"Never"`: the behaviour is disabled.
    Never,
    /// A finite duration.
    After(GoDuration),
}

impl NillableDuration {
    /// Parses `"Never"` or a Go duration.
    ///
    /// # Errors
    /// Returns a [`DurationError`] when the text is neither.
    pub fn parse(s: &str) -> Result<Self, DurationError> {
        s.parse()
    }

    /// The finite duration, or `None` for `Never`.
    pub fn as_std(&self) -> Option<Duration> {
        match self {
            Self::Never => None,
            Self::After(d) => Some(d.as_std()),
        }
    }

    /// Whether this is `Never`.
    pub fn is_never(&self) -> bool {
        matches!(self, Self::Never)
    }

    /// A finite duration in Go's canonical form.
    pub fn after(value: Duration) -> Self {
        Self::After(GoDuration::from_std(value))
    }
}

impl From<Option<Duration>> for NillableDuration {
    fn from(value: Option<Duration>) -> Self {
        value.map_or(Self::Never, Self::after)
    }
}

impl FromStr for NillableDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == NEVER {
            Ok(Self::Never)
        } else {
            s.parse().map(Self::After)
        }
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Never => f.write_str(NEVER),
            Self::After(d) => d.fmt(f),
        }
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Never => serializer.serialize_str(NEVER),
            Self::After(d) => d.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string" })
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn parses_common_karpenter_values() {
        assert_eq!(parse_go_duration("720h"), Ok(secs(720 * 3600)));
        assert_eq!(parse_go_duration("1h30m"), Ok(secs(5400)));
        assert_eq!(parse_go_duration("30s"), Ok(secs(30)));
        assert_eq!(parse_go_duration("10m"), Ok(secs(600)));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("720h0m0s"), Ok(secs(720 * 3600)));
    }

    #[test]
    fn parses_fractions_and_small_units() {
        assert_eq!(parse_go_duration("1.5h"), Ok(secs(5400)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(
            parse_go_duration("2\u{00b5}s"),
            Ok(Duration::from_micros(2))
        );
        assert_eq!(parse_go_duration("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse_go_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("+5s"), Ok(secs(5)));
    }

    #[test]
    fn rejects_bad_input_with_clear_errors() {
        assert_eq!(parse_go_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_go_duration("10"),
            Err(DurationError::MissingUnit { position: 2, .. })
        ));
        assert!(
            matches!(parse_go_duration("5d"), Err(DurationError::UnknownUnit { ref unit, .. }) if unit == "d")
        );
        assert!(matches!(
            parse_go_duration("-5s"),
            Err(DurationError::Negative { .. })
        ));
        assert!(matches!(
            parse_go_duration("h"),
            Err(DurationError::ExpectedNumber { position: 0, .. })
        ));
        assert!(matches!(
            parse_go_duration("Never"),
            Err(DurationError::ExpectedNumber { .. })
        ));
        assert!(matches!(
            parse_go_duration("9999999999h"),
            Err(DurationError::Overflow { .. })
        ));
        let message = parse_go_duration("5d")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.contains("unknown unit \"d\""), "{message}");
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(secs(720 * 3600)), "720h0m0s");
        assert_eq!(format_go_duration(secs(90)), "1m30s");
        assert_eq!(format_go_duration(secs(30)), "30s");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::from_millis(300)), "300ms");
        assert_eq!(format_go_duration(Duration::from_micros(2)), "2\u{00b5}s");
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn keeps_text_but_compares_values() {
        let a: GoDuration = "90m".parse().unwrap_or_else(|e| panic!("{e}"));
        let b: GoDuration = "1h30m".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "90m");
        assert_eq!(serde_json::to_string(&a).ok().as_deref(), Some("\"90m\""));
    }

    #[test]
    fn nillable_handles_never() {
        assert_eq!(
            NillableDuration::parse("Never"),
            Ok(NillableDuration::Never)
        );
        assert_eq!(
            NillableDuration::parse("Never").map(|d| d.as_std()),
            Ok(None)
        );
        assert_eq!(
            NillableDuration::parse("720h").map(|d| d.as_std()),
            Ok(Some(secs(720 * 3600)))
        );
        assert!(NillableDuration::parse("never").is_err());
        let parsed: Result<NillableDuration, _> = serde_json::from_str("\"Never\"");
        assert!(parsed.as_ref().is_ok_and(NillableDuration::is_never));
        assert_eq!(
            serde_json::to_string(&NillableDuration::Never)
                .ok()
                .as_deref(),
            Some("\"Never\"")
        );
        assert_eq!(NillableDuration::from(Some(secs(60))).to_string(), "1m0s");
    }
}
