//! Calendar days of a trace set: the 24-hour windows the Write Off-Loading paper
//! replays one at a time ("least idle" and "most idle" day).

use std::fmt;
use std::str::FromStr;

use crate::set::TraceSummary;
use crate::{TimeBase, TraceTimestamp};

/// Nanoseconds in a day (24 hours; the traces ignore leap seconds, as UTC time does).
pub const DAY_NS: u64 = 86_400 * 1_000_000_000;

/// A day of a trace set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaySpec {
    /// The Nth 24-hour window, counted from the UTC midnight at or before the set's
    /// first timestamp (absolute sets) or from time 0 (relative sets).
    Index(u32),
    /// A UTC calendar date; absolute sets only.
    Date { year: i32, month: u8, day: u8 },
}

/// Why a day could not be parsed or located.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DayError {
    #[error("{0:?} is neither a day index (0, 1, ...) nor a date YYYY-MM-DD")]
    Syntax(String),
    #[error("{0} is not a valid calendar date")]
    InvalidDate(String),
    #[error("the trace set holds no requests")]
    EmptySet,
    #[error("a date needs a trace set with absolute time; this set is relative: use a day index")]
    DateNeedsAbsoluteTime,
    #[error("day {day} starts before the trace set's first day ({first_day})")]
    BeforeStart { day: String, first_day: String },
    #[error("day {day} starts after the trace set ends (its last day is {last_day})")]
    AfterEnd { day: String, last_day: String },
}

impl FromStr for DaySpec {
    type Err = DayError;

    /// Parses `N` (a day index) or `YYYY-MM-DD` (a date).
    fn from_str(text: &str) -> Result<DaySpec, DayError> {
        let text = text.trim();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text.parse().map(DaySpec::Index).map_err(|_| DayError::Syntax(text.to_owned()));
        }
        let parts: Vec<&str> = text.split('-').collect();
        let [year, month, day] = parts[..] else { return Err(DayError::Syntax(text.to_owned())) };
        if year.len() != 4 || month.len() != 2 || day.len() != 2 {
            return Err(DayError::Syntax(text.to_owned()));
        }
        let syntax = |_| DayError::Syntax(text.to_owned());
        let (year, month, day) = (
            year.parse().map_err(syntax)?,
            month.parse().map_err(syntax)?,
            day.parse().map_err(syntax)?,
        );
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return Err(DayError::InvalidDate(text.to_owned()));
        }
        Ok(DaySpec::Date { year, month, day })
    }
}

impl fmt::Display for DaySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DaySpec::Index(index) => write!(f, "{index}"),
            DaySpec::Date { year, month, day } => write!(f, "{year:04}-{month:02}-{day:02}"),
        }
    }
}

/// The window `[start, end)` of `day` in the set summarized by `summary`.
pub fn day_window(
    summary: &TraceSummary,
    day: DaySpec,
) -> Result<(TraceTimestamp, TraceTimestamp), DayError> {
    let (first, last) = summary.span().ok_or(DayError::EmptySet)?;
    let origin_ns = day_origin_ns(summary.time_base, first);
    let start_ns = match day {
        DaySpec::Index(index) => origin_ns.saturating_add(u64::from(index).saturating_mul(DAY_NS)),
        DaySpec::Date { year, month, day: day_of_month } => {
            if summary.time_base != TimeBase::UnixEpoch {
                return Err(DayError::DateNeedsAbsoluteTime);
            }
            let days = days_from_civil(year, month, day_of_month);
            let start = u64::try_from(days).ok().and_then(|days| days.checked_mul(DAY_NS));
            let start = start.filter(|&start| start >= origin_ns);
            start.ok_or_else(|| DayError::BeforeStart {
                day: day.to_string(),
                first_day: label(summary.time_base, origin_ns),
            })?
        }
    };
    if start_ns.saturating_add(DAY_NS) <= first.0 {
        let first_day_ns = origin_ns + (first.0 - origin_ns) / DAY_NS * DAY_NS;
        return Err(DayError::BeforeStart {
            day: day.to_string(),
            first_day: label(summary.time_base, first_day_ns),
        });
    }
    if start_ns > last.0 {
        let last_day_ns = origin_ns + (last.0 - origin_ns) / DAY_NS * DAY_NS;
        return Err(DayError::AfterEnd {
            day: day.to_string(),
            last_day: label(summary.time_base, last_day_ns),
        });
    }
    assert!(start_ns >= origin_ns);
    assert_eq!((start_ns - origin_ns) % DAY_NS, 0, "day windows are aligned to the origin");
    Ok((TraceTimestamp(start_ns), TraceTimestamp(start_ns.saturating_add(DAY_NS))))
}

/// Where day 0 starts: the UTC midnight at or before `first` for absolute time, 0 else.
pub fn day_origin_ns(time_base: TimeBase, first: TraceTimestamp) -> u64 {
    match time_base {
        TimeBase::UnixEpoch => first.0 / DAY_NS * DAY_NS,
        TimeBase::Relative => 0,
    }
}

/// A day's label: its UTC date for absolute time, `day N` for relative time.
pub fn label(time_base: TimeBase, start_ns: u64) -> String {
    match time_base {
        TimeBase::UnixEpoch => utc_date(start_ns),
        TimeBase::Relative => format!("day {}", start_ns / DAY_NS),
    }
}

/// The UTC date `YYYY-MM-DD` of a Unix-epoch timestamp.
pub fn utc_date(unix_ns: u64) -> String {
    let (year, month, day) = civil_from_days((unix_ns / DAY_NS) as i64);
    format!("{year:04}-{month:02}-{day:02}")
}

fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i32, month: u8) -> u8 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm,
/// "chrono-Compatible Low-Level Date Algorithms").
fn days_from_civil(year: i32, month: u8, day: u8) -> i64 {
    let year = i64::from(year) - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u8, u8) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u8;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u8;
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(time_base: TimeBase, first_ns: u64, last_ns: u64) -> TraceSummary {
        TraceSummary {
            files: Vec::new(),
            record_count: 2,
            first_timestamp: Some(TraceTimestamp(first_ns)),
            last_timestamp: Some(TraceTimestamp(last_ns)),
            time_base,
            volume_count: 1,
            skipped_count: 0,
        }
    }

    /// 2007-02-22 17:00 UTC, the MSR trace start (FILETIME 128166372000000000).
    const MSR_START_NS: u64 = 1_172_163_600_000_000_000;
    /// 2007-02-22 00:00 UTC.
    const MSR_DAY0_NS: u64 = 1_172_102_400_000_000_000;

    #[test]
    fn msr_days_start_at_utc_midnight() {
        // Goal: day 0 of the MSR week is 2007-02-22 00:00 UTC, and dates and indexes
        // agree. Method: a summary spanning the trace week.
        let week = summary(TimeBase::UnixEpoch, MSR_START_NS, MSR_START_NS + 7 * DAY_NS - 1);
        assert_eq!(
            day_window(&week, DaySpec::Index(0)),
            Ok((TraceTimestamp(MSR_DAY0_NS), TraceTimestamp(MSR_DAY0_NS + DAY_NS)))
        );
        let date: DaySpec = "2007-02-24".parse().unwrap();
        assert_eq!(day_window(&week, date), day_window(&week, DaySpec::Index(2)));
        assert_eq!(utc_date(MSR_START_NS), "2007-02-22");
        assert!(matches!(day_window(&week, DaySpec::Index(8)), Err(DayError::AfterEnd { .. })));
        let before: DaySpec = "2007-02-21".parse().unwrap();
        assert!(matches!(day_window(&week, before), Err(DayError::BeforeStart { .. })));
    }

    #[test]
    fn relative_days_count_from_zero_and_refuse_dates() {
        // Goal: relative sets have days from time 0 and no calendar.
        let relative = summary(TimeBase::Relative, 5 * DAY_NS + 7, 5 * DAY_NS + 9);
        assert_eq!(
            day_window(&relative, DaySpec::Index(5)),
            Ok((TraceTimestamp(5 * DAY_NS), TraceTimestamp(6 * DAY_NS)))
        );
        let date = DaySpec::Date { year: 2007, month: 2, day: 22 };
        assert_eq!(day_window(&relative, date), Err(DayError::DateNeedsAbsoluteTime));
        let error = day_window(&relative, DaySpec::Index(4)).unwrap_err();
        assert_eq!(error.to_string(), "day 4 starts before the trace set's first day (day 5)");
    }

    #[test]
    fn day_specs_parse_strictly() {
        // Goal: indexes and valid dates parse; malformed or impossible dates do not.
        assert_eq!("3".parse(), Ok(DaySpec::Index(3)));
        assert_eq!("2008-02-29".parse(), Ok(DaySpec::Date { year: 2008, month: 2, day: 29 }));
        assert!(matches!("2007-02-29".parse::<DaySpec>(), Err(DayError::InvalidDate(_))));
        for junk in ["", "-1", "2007-2-22", "monday", "2007-02-22-01"] {
            assert!(junk.parse::<DaySpec>().is_err(), "{junk}");
        }
        for days in [-800_000_i64, -1, 0, 13_566, 2_932_896] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year as i32, month, day), days);
        }
    }
}
