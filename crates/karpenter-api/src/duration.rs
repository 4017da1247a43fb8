//! Go-style duration fields as used by Karpenter's API (`"720h"`, `"1h30m"`, `"30s"`, `"Never"`).
//!
//! Kubernetes APIs written in Go encode durations with Go's `time.ParseDuration` syntax (parsed by
//! `karpenter_core::duration`). Karpenter additionally accepts the literal `Never` for fields that
//! can be disabled (`expireAfter`, `consolidateAfter`).
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

pub use karpenter_core::duration::{DurationError, NEVER, format_go_duration, parse_go_duration};

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
