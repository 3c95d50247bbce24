//! [`Span`]: the stretch of event time a report covers — a month (`2026-11`), a year (`2026`), a day
//! (`2026-11-02`), an explicit range (`2026-11-01..2026-11-15`, end exclusive) or all of history (`all`).
//! Day numbers count days since 1970-01-01 (UTC), like [`bursar_model::Timestamp::day`].

use bursar_model::time::{civil_from_days, days_from_civil};
use serde::Serialize;

use crate::error::{ReportError, Result};

/// Milliseconds in an hour.
pub const HOUR_MS: i64 = 3_600_000;
/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// Days `[from, to)` a report covers; `None` bounds mean "from the first / to the last fact".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Span {
    /// What the user asked for, e.g. `2026-11` or `all`.
    pub label: String,
    /// First day, inclusive.
    pub from_day: Option<i64>,
    /// Last day, exclusive.
    pub to_day: Option<i64>,
}

impl Span {
    /// All of history.
    pub fn all() -> Span {
        Span { label: "all".into(), from_day: None, to_day: None }
    }

    /// The calendar month containing `day`.
    pub fn month_of(day: i64) -> Span {
        let (y, m, _) = civil_from_days(day);
        let first = days_from_civil(y, m, 1);
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        Span { label: format!("{y:04}-{m:02}"), from_day: Some(first), to_day: Some(days_from_civil(ny, nm, 1)) }
    }

    /// Parses `all`, `YYYY`, `YYYY-MM`, `YYYY-MM-DD` or `DATE..DATE` (end exclusive).
    pub fn parse(s: &str) -> Result<Span> {
        let bad = || {
            ReportError::Invalid(format!(
                "`--period {s}` is not a period\n  help: write a month (`2026-11`), a year (`2026`), a day (`2026-11-02`), a range (`2026-11-01..2026-11-15`) or `all`"
            ))
        };
        let s = s.trim();
        if s == "all" {
            return Ok(Span::all());
        }
        if let Some((a, b)) = s.split_once("..") {
            let from = parse_start(a).ok_or_else(bad)?;
            let to = parse_start(b).ok_or_else(bad)?;
            if to <= from {
                return Err(ReportError::Invalid(format!("`--period {s}`: the end must be after the start")));
            }
            return Ok(Span { label: s.to_owned(), from_day: Some(from), to_day: Some(to) });
        }
        let parts: Vec<&str> = s.split('-').collect();
        let num = |p: &str, len: usize| if p.len() == len { p.parse::<i64>().ok() } else { None };
        let (from, to) = match parts.as_slice() {
            [y] => {
                let y = num(y, 4).ok_or_else(bad)?;
                (days_from_civil(y, 1, 1), days_from_civil(y + 1, 1, 1))
            }
            [y, m] => {
                let y = num(y, 4).ok_or_else(bad)?;
                let m = num(m, 2).filter(|m| (1..=12).contains(m)).ok_or_else(bad)?;
                let span = Span::month_of(days_from_civil(y, m as u32, 1));
                return Ok(span);
            }
            [_, _, _] => {
                let d = parse_start(s).ok_or_else(bad)?;
                (d, d + 1)
            }
            _ => return Err(bad()),
        };
        Ok(Span { label: s.to_owned(), from_day: Some(from), to_day: Some(to) })
    }

    /// Whether `day` is inside the span.
    pub fn contains(&self, day: i64) -> bool {
        self.from_day.is_none_or(|f| day >= f) && self.to_day.is_none_or(|t| day < t)
    }

    /// The span's bounds as SQL parameters (the whole i64 range when open).
    pub fn sql_bounds(&self) -> (i64, i64) {
        (self.from_day.unwrap_or(i64::MIN), self.to_day.unwrap_or(i64::MAX))
    }
}

/// `YYYY-MM-DD` → day number.
fn parse_start(s: &str) -> Option<i64> {
    let mut it = s.trim().split('-');
    let y: i64 = it.next().filter(|p| p.len() == 4)?.parse().ok()?;
    let m: u32 = it.next().filter(|p| p.len() == 2)?.parse().ok()?;
    let d: u32 = it.next().filter(|p| p.len() == 2)?.parse().ok()?;
    if it.next().is_some() || !(1..=12).contains(&m) || d == 0 || d > 31 {
        return None;
    }
    let day = days_from_civil(y, m, d);
    // Reject 2026-02-31 and the like: it would round-trip to another date.
    (civil_from_days(day) == (y, m, d)).then_some(day)
}

/// `2026-11-02` for a day number.
pub fn day_label(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Hours of a GPU-millisecond count.
pub fn hours(gpu_ms: i64) -> f64 {
    gpu_ms as f64 / HOUR_MS as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let m = Span::parse("2026-11").unwrap();
        assert_eq!(m.to_day.unwrap() - m.from_day.unwrap(), 30);
        assert_eq!(day_label(m.from_day.unwrap()), "2026-11-01");
        let dec = Span::parse("2026-12").unwrap();
        assert_eq!(day_label(dec.to_day.unwrap()), "2027-01-01");
        let y = Span::parse("2024").unwrap();
        assert_eq!(y.to_day.unwrap() - y.from_day.unwrap(), 366);
        let d = Span::parse("2026-11-02").unwrap();
        assert_eq!(d.to_day.unwrap() - d.from_day.unwrap(), 1);
        let r = Span::parse("2026-11-01..2026-11-15").unwrap();
        assert_eq!(r.to_day.unwrap() - r.from_day.unwrap(), 14);
        assert_eq!(Span::parse("all").unwrap(), Span::all());
        for bad in ["2026-13", "26-11", "2026-02-30", "nov", "2026-11-15..2026-11-01", ""] {
            let e = Span::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--period"), "{bad}: {e}");
        }
    }
}
