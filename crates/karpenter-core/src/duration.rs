//! Go duration strings (`"720h"`, `"1h30m"`, `"30s"`, `"1.5s"`) as Go's
//! `time.ParseDuration` reads them and `time.Duration.String()` writes them.
//!
//! A duration is a sequence of decimal numbers, each with an optional
//! fraction and a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`); a bare `0` is
//! zero. Values are exact to the nanosecond and bounded by Go's 64-bit
//! nanosecond `time.Duration` (about 2562047h): anything larger is an error,
//! never a wrap or a panic. Karpenter's `"Never"` is the API crate's business
//! (`NillableDuration`); [`NEVER`] is its spelling.

use std::time::Duration;

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

/// Parses a non-negative Go duration string (see the [module docs](self)).
///
/// `"Never"` is not accepted here.
///
/// # Errors
/// Returns a [`DurationError`] naming the offending part of the input.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let rest = match input.strip_prefix('+') {
        Some(rest) => rest,
        None if input.starts_with('-') => {
            return Err(DurationError::Negative {
                input: input.to_string(),
            });
        }
        None => input,
    };
    let total = magnitude(input, rest)?;
    let secs = u64::try_from(total / NANOS_PER_SECOND).map_err(|_| DurationError::Overflow {
        input: input.to_string(),
    })?;
    // The remainder is always below one second, so it fits in u32.
    let nanos = u32::try_from(total % NANOS_PER_SECOND).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

/// Parses a Go duration that may be negative (`-1.5s`), as Go's
/// `time.ParseDuration` does, into nanoseconds.
///
/// # Errors
/// Returns a [`DurationError`] naming the offending part of the input.
pub fn parse_signed_go_duration(input: &str) -> Result<i64, DurationError> {
    let (negative, rest) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    let total = magnitude(input, rest)?;
    // `magnitude` keeps within i64::MAX.
    let nanos = i64::try_from(total).map_err(|_| DurationError::Overflow {
        input: input.to_string(),
    })?;
    Ok(if negative { -nanos } else { nanos })
}

/// Nanoseconds of an unsigned duration `rest` (the part of `input` after
/// its sign), at most `i64::MAX`.
fn magnitude(input: &str, rest: &str) -> Result<u128, DurationError> {
    let owned = || input.to_string();
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    // Go special-cases a bare zero.
    if rest == "0" {
        return Ok(0);
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
    Ok(total)
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
    fn signed_durations_like_go() {
        assert_eq!(parse_signed_go_duration("-1.5s"), Ok(-1_500_000_000));
        assert_eq!(parse_signed_go_duration("+2m"), Ok(120_000_000_000));
        assert_eq!(parse_signed_go_duration("-0"), Ok(0));
        assert!(matches!(
            parse_signed_go_duration("-9999999999h"),
            Err(DurationError::Overflow { .. })
        ));
    }

    #[test]
    fn huge_values_are_errors_not_panics() {
        for huge in [
            "6000000000000000h",
            "99999999999999999999999999999999s",
            "2562048h",
        ] {
            assert!(
                matches!(parse_go_duration(huge), Err(DurationError::Overflow { .. })),
                "{huge}"
            );
        }
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
}
