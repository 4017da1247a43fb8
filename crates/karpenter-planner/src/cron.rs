//! Cron schedules of disruption budgets: the standard five fields (or an
//! `@`-shortcut), evaluated in UTC, as Karpenter reads them.
//!
//! ```text
//!   "0 9 * * mon-fri" ──Cron::parse──▶ Cron ──fired_within(after, now)──▶ did it fire in (after, now]?
//! ```
//!
//! A window is searched day by day, then hour by hour, then minute by
//! minute, and never more than [`SEARCH_YEARS`] past its start (as the cron
//! library Karpenter uses gives up after five years): whatever the
//! request's duration, the answer takes a few thousand steps at most.

/// How far past a window's start a firing is searched for.
pub const SEARCH_YEARS: i64 = 5;

const MINUTES_PER_DAY: i64 = 24 * 60;

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    day_restricted: bool,
    weekday_restricted: bool,
}

fn parse_field(
    field: &str,
    min: u32,
    max: u32,
    names: &[&str],
) -> Result<(Vec<bool>, bool), String> {
    let mut allowed = vec![false; max as usize + 1];
    let restricted = !field.starts_with('*');
    let value = |text: &str| -> Result<u32, String> {
        if let Ok(n) = text.parse::<u32>() {
            return Ok(n);
        }
        let lower = text.to_ascii_lowercase();
        names
            .iter()
            .position(|n| *n == lower)
            .map(|p| p as u32 + min)
            .ok_or_else(|| format!("{text:?} is not a number between {min} and {max}"))
    };
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (
                range,
                step.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step {step:?} is not a positive number"))?,
            ),
            None => (part, 1),
        };
        let (start, end) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            (v, if part.contains('/') { max } else { v })
        };
        if start < min || end > max || start > end {
            return Err(format!("{part:?} is outside {min}-{max}"));
        }
        let mut v = start;
        while v <= end {
            allowed[v as usize] = true;
            match v.checked_add(step) {
                Some(next) => v = next,
                None => break,
            }
        }
    }
    Ok((allowed, restricted))
}

impl Cron {
    /// Parses a schedule; the error says which field is wrong.
    pub fn parse(schedule: &str) -> Result<Cron, String> {
        let expanded = match schedule.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(format!(
                "{schedule:?} is not a cron schedule: five fields (minute hour day month weekday) or @daily-style"
            ));
        };
        const MONTHS: &[&str] = &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        let field = |name: &str, text: &str, min, max, names| {
            parse_field(text, min, max, names).map_err(|e| format!("{name} field: {e}"))
        };
        let (minutes, _) = field("minute", minute, 0, 59, &[])?;
        let (hours, _) = field("hour", hour, 0, 23, &[])?;
        let (days, day_restricted) = field("day-of-month", day, 1, 31, &[])?;
        let (months, _) = field("month", month, 1, 12, MONTHS)?;
        let (mut weekdays, weekday_restricted) = field("day-of-week", weekday, 0, 7, DAYS)?;
        if weekdays[7] {
            weekdays[0] = true;
        }
        Ok(Cron {
            minutes,
            hours,
            days,
            months,
            weekdays,
            day_restricted,
            weekday_restricted,
        })
    }

    /// Whether the schedule fires on the day `days_since_epoch`.
    fn fires_on_day(&self, days_since_epoch: i64) -> bool {
        let (month, day) = civil_from_days(days_since_epoch);
        // 1970-01-01 was a Thursday.
        let weekday = (days_since_epoch + 4).rem_euclid(7) as usize;
        let day_ok = self.days[day as usize];
        let weekday_ok = self.weekdays[weekday];
        // Cron's rule: when both day fields are restricted, either may match.
        let date_ok = if self.day_restricted && self.weekday_restricted {
            day_ok || weekday_ok
        } else {
            day_ok && weekday_ok
        };
        self.months[month as usize] && date_ok
    }

    /// The first minute (Unix minutes) at or after `from` when the
    /// schedule fires, if one comes before `until`.
    fn next_firing(&self, from: i64, until: i64) -> Option<i64> {
        let mut minute = from;
        while minute < until {
            let day = minute.div_euclid(MINUTES_PER_DAY);
            if !self.fires_on_day(day) {
                minute = (day + 1) * MINUTES_PER_DAY;
                continue;
            }
            let hour = minute.rem_euclid(MINUTES_PER_DAY) / 60;
            if !self.hours[hour as usize] {
                minute = (minute.div_euclid(60) + 1) * 60;
                continue;
            }
            if self.minutes[minute.rem_euclid(60) as usize] {
                return Some(minute);
            }
            minute += 1;
        }
        None
    }

    /// Whether the schedule fired in `(after, now]` (Unix seconds), looking
    /// at most [`SEARCH_YEARS`] past `after`.
    pub fn fired_within(&self, after: i64, now: i64) -> bool {
        let first = after.div_euclid(60).saturating_add(1);
        let last = now.div_euclid(60);
        let horizon = first.saturating_add(SEARCH_YEARS * 366 * MINUTES_PER_DAY);
        self.next_firing(first, last.saturating_add(1).min(horizon))
            .is_some()
    }
}

/// (month 1-12, day 1-31) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(schedule: &str) -> Cron {
        Cron::parse(schedule).unwrap_or_else(|e| panic!("{schedule}: {e}"))
    }

    #[test]
    fn windows_are_utc_and_inclusive_of_the_duration() {
        // 2000-06-15 12:30:30 UTC (a Thursday).
        let now = 961_072_230;
        let active =
            |schedule: &str, duration: i64| cron(schedule).fired_within(now - duration, now);
        assert!(active("* * * * *", 3600));
        assert!(active("0 12 * * *", 3600));
        assert!(!active("0 13 * * *", 3600));
        assert!(!active("0 12 * * *", 60 * 20));
        assert!(active("0 12 * * thu", 3600));
        assert!(!active("0 12 * * fri", 3600));
        assert!(active("@daily", 13 * 3600));
        assert!(active("30 12 15 6 *", 60), "fires at the current minute");
    }

    #[test]
    fn bad_schedules_say_which_field() {
        for (schedule, field) in [
            ("not a schedule", "five fields"),
            ("61 * * * *", "minute field"),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day-of-month field"),
            ("* * * 13 *", "month field"),
            ("* * * * funday", "day-of-week field"),
            ("*/0 * * * *", "minute field"),
        ] {
            let error = Cron::parse(schedule).expect_err(schedule);
            assert!(error.contains(field), "{schedule}: {error}");
        }
    }

    #[test]
    fn huge_steps_and_durations_stay_bounded() {
        // A step that would overflow the field counter, and a window of
        // about 290 billion years: both answer at once.
        assert!(cron("*/4294967295 * * * *").fired_within(0, 3600));
        let never = cron("0 0 30 2 *");
        assert!(!never.fired_within(i64::MIN, i64::MAX));
        let leap_day = cron("0 0 29 2 *");
        assert!(
            leap_day.fired_within(946_684_800, 951_868_800),
            "2000-02-29 is in"
        );
        assert!(
            !leap_day.fired_within(951_868_800, 1_072_915_200),
            "none 2000-03 to 2004-01"
        );
    }
}
