//! Event time: a UTC instant in milliseconds, RFC 3339 parsing and formatting, durations written as
//! `90s`, `30m`, `2h`, `7d`, and the calendar periods (day, ISO week, month) that quotas are kept in.
//!
//! Everything here is pure arithmetic on integers so that replaying a file gives the same result on any
//! machine and in any time zone: bursar's engine never reads the wall clock (only the live entry points do, through
//! [`Timestamp::wall_clock`]).

use std::fmt;

/// A UTC instant, in milliseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

/// A span of event time in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Duration(pub i64);

const MS_PER_SEC: i64 = 1_000;
const MS_PER_MIN: i64 = 60 * MS_PER_SEC;
const MS_PER_HOUR: i64 = 60 * MS_PER_MIN;
const MS_PER_DAY: i64 = 24 * MS_PER_HOUR;

/// Why a timestamp or duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// The text is not an RFC 3339 date-time such as `2026-11-02T09:00:00Z`.
    #[error("`{0}` is not an RFC 3339 time (expected e.g. `2026-11-02T09:00:00Z`)")]
    BadTimestamp(String),
    /// The text is not a duration such as `30m`.
    #[error("`{0}` is not a duration (expected a number and a unit: `90s`, `30m`, `2h`, `7d`)")]
    BadDuration(String),
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date (year, month 1-12, day 1-31) of a day number since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn digits(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let s = b.get(at..at + n)?;
    let mut v = 0i64;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Some(v)
}

impl Timestamp {
    /// Parses RFC 3339 (`2026-11-02T09:00:00Z`, `…T09:00:00.250+08:00`; `t`, `z` and a space separator
    /// are accepted). Fractions below a millisecond are truncated.
    pub fn parse(s: &str) -> Result<Timestamp, TimeError> {
        Self::parse_bytes(s.as_bytes()).ok_or_else(|| TimeError::BadTimestamp(s.to_owned()))
    }

    fn parse_bytes(b: &[u8]) -> Option<Timestamp> {
        let year = digits(b, 0, 4)?;
        if *b.get(4)? != b'-' || *b.get(7)? != b'-' {
            return None;
        }
        let month = u32::try_from(digits(b, 5, 2)?).ok()?;
        let day = u32::try_from(digits(b, 8, 2)?).ok()?;
        if !matches!(*b.get(10)?, b'T' | b't' | b' ') || *b.get(13)? != b':' || *b.get(16)? != b':' {
            return None;
        }
        let hour = digits(b, 11, 2)?;
        let min = digits(b, 14, 2)?;
        let sec = digits(b, 17, 2)?;
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        if hour > 23 || min > 59 || sec > 60 {
            return None;
        }
        let mut i = 19;
        let mut millis = 0i64;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            let mut scale = 100;
            while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
                millis += i64::from(c - b'0') * scale;
                scale /= 10;
                i += 1;
            }
            if i == start {
                return None;
            }
        }
        let offset_min = match *b.get(i)? {
            b'Z' | b'z' => {
                i += 1;
                0
            }
            sign @ (b'+' | b'-') => {
                let oh = digits(b, i + 1, 2)?;
                if *b.get(i + 3)? != b':' {
                    return None;
                }
                let om = digits(b, i + 4, 2)?;
                if oh > 23 || om > 59 {
                    return None;
                }
                i += 6;
                let m = oh * 60 + om;
                if sign == b'-' { -m } else { m }
            }
            _ => return None,
        };
        if i != b.len() {
            return None;
        }
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3600 + min * 60 + sec.min(59) - offset_min * 60;
        Some(Timestamp(secs * MS_PER_SEC + millis))
    }

    /// Milliseconds since the epoch.
    pub fn millis(self) -> i64 {
        self.0
    }

    /// The wall clock now, for the live entry points only (`serve`'s ticker, the agents, the audit
    /// writer's `recorded_at`). The engine never calls it: event time drives every window.
    pub fn wall_clock() -> Timestamp {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(ms)
    }

    /// Days since 1970-01-01 (UTC), rounding towards the past.
    #[inline]
    pub fn day(self) -> i64 {
        self.0.div_euclid(MS_PER_DAY)
    }

    /// This instant moved by `d`, saturating at the ends of the range.
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d.0))
    }

    /// Time elapsed from `earlier` to `self` (negative if `earlier` is later).
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }

    /// Milliseconds since midnight (UTC shifted by `offset`).
    pub fn time_of_day(self, offset: Duration) -> i64 {
        (self.0 + offset.0).rem_euclid(MS_PER_DAY)
    }
}

impl fmt::Display for Timestamp {
    /// Formats as RFC 3339 in UTC: `2026-11-02T09:00:00Z`, with `.250` only when there are milliseconds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_str())
    }
}

/// A timestamp's RFC 3339 text in a buffer on the stack ([`Timestamp::text`]): what `Display` writes,
/// for the places that write many of them (every decision's `time`) and need no `String`.
#[derive(Clone, Copy)]
pub struct TimeText {
    buf: [u8; 40],
    len: u8,
}

impl TimeText {
    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and separators are ever written.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Debug for TimeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Write for TimeText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let at = usize::from(self.len);
        let end = at + s.len();
        if end > self.buf.len() {
            return Err(fmt::Error);
        }
        self.buf[at..end].copy_from_slice(s.as_bytes());
        self.len = end as u8;
        Ok(())
    }
}

impl serde::Serialize for TimeText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Timestamp {
    /// The RFC 3339 text (UTC, `Z`, milliseconds only when there are some) without allocating. Years
    /// 0000–9999 take a direct path (a few dozen instructions instead of `core::fmt`'s padded integers,
    /// about 2,000); the rest of the range goes through `write!` and gives the same text as before.
    pub fn text(self) -> TimeText {
        let days = self.0.div_euclid(MS_PER_DAY);
        let ms = self.0.rem_euclid(MS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let (h, rest) = (ms / MS_PER_HOUR, ms % MS_PER_HOUR);
        let (mi, rest) = (rest / MS_PER_MIN, rest % MS_PER_MIN);
        let (s, milli) = (rest / MS_PER_SEC, rest % MS_PER_SEC);
        let mut t = TimeText { buf: [0; 40], len: 0 };
        if (0..=9999).contains(&y) {
            fn two(b: &mut [u8], v: i64) {
                b[0] = b'0' + (v / 10) as u8;
                b[1] = b'0' + (v % 10) as u8;
            }
            let b = &mut t.buf;
            two(&mut b[0..2], y / 100);
            two(&mut b[2..4], y % 100);
            b[4] = b'-';
            two(&mut b[5..7], i64::from(m));
            b[7] = b'-';
            two(&mut b[8..10], i64::from(d));
            b[10] = b'T';
            two(&mut b[11..13], h);
            b[13] = b':';
            two(&mut b[14..16], mi);
            b[16] = b':';
            two(&mut b[17..19], s);
            let mut len = 19;
            if milli != 0 {
                b[19] = b'.';
                b[20] = b'0' + (milli / 100) as u8;
                two(&mut b[21..23], milli % 100);
                len = 23;
            }
            b[len] = b'Z';
            t.len = (len + 1) as u8;
        } else {
            use fmt::Write as _;
            // At most 33 bytes for any i64 of milliseconds: the buffer holds it.
            let _ = write!(t, "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
            if milli != 0 {
                let _ = write!(t, ".{milli:03}");
            }
            let _ = t.write_str("Z");
        }
        t
    }
}

impl Duration {
    /// A duration of whole hours.
    pub const fn hours(h: i64) -> Duration {
        Duration(h * MS_PER_HOUR)
    }

    /// A duration of whole minutes.
    pub const fn minutes(m: i64) -> Duration {
        Duration(m * MS_PER_MIN)
    }

    /// A duration of whole seconds.
    pub const fn seconds(s: i64) -> Duration {
        Duration(s * MS_PER_SEC)
    }

    /// Parses `500ms`, `90s`, `30m`, `2h`, `7d`, `1w`, or a sum of them such as `1h30m`.
    pub fn parse(s: &str) -> Result<Duration, TimeError> {
        let bad = || TimeError::BadDuration(s.to_owned());
        let b = s.trim().as_bytes();
        if b.is_empty() {
            return Err(bad());
        }
        let mut total: i64 = 0;
        let mut i = 0;
        while i < b.len() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let num: f64 = std::str::from_utf8(&b[start..i]).ok().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
            let ustart = i;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            let unit = match &b[ustart..i] {
                b"ms" => 1,
                b"s" => MS_PER_SEC,
                b"m" => MS_PER_MIN,
                b"h" => MS_PER_HOUR,
                b"d" => MS_PER_DAY,
                b"w" => 7 * MS_PER_DAY,
                _ => return Err(bad()),
            };
            let part = num * unit as f64;
            if !part.is_finite() || part > 1e15 {
                return Err(bad());
            }
            total = total.saturating_add(part.round() as i64);
        }
        Ok(Duration(total))
    }

    /// The duration in (fractional) hours.
    pub fn as_hours(self) -> f64 {
        self.0 as f64 / MS_PER_HOUR as f64
    }

    /// Milliseconds.
    pub fn millis(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Duration {
    /// Formats as the largest exact unit: `2h`, `90m`, `45s`, `250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        for (unit, name) in [(MS_PER_DAY, "d"), (MS_PER_HOUR, "h"), (MS_PER_MIN, "m"), (MS_PER_SEC, "s")] {
            if ms != 0 && ms % unit == 0 {
                return write!(f, "{}{name}", ms / unit);
            }
        }
        write!(f, "{ms}ms")
    }
}

/// A calendar period that quotas are counted in, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// A calendar day.
    Day,
    /// An ISO week, Monday to Sunday.
    Week,
    /// A calendar month.
    Month,
}

impl Period {
    /// The first and one-past-last day numbers of the period that contains `day`.
    pub fn bounds(self, day: i64) -> (i64, i64) {
        match self {
            Period::Day => (day, day + 1),
            Period::Week => {
                // 1970-01-01 was a Thursday; Monday-based weekday 0..7.
                let wd = (day + 3).rem_euclid(7);
                (day - wd, day - wd + 7)
            }
            Period::Month => {
                // Every quota over a month asks this on every admission, nearly always for the same
                // month: the last month found is remembered per thread.
                thread_local! {
                    static LAST_MONTH: std::cell::Cell<(i64, i64)> = const { std::cell::Cell::new((0, 0)) };
                }
                LAST_MONTH.with(|last| {
                    let (first, end) = last.get();
                    if first <= day && day < end {
                        return (first, end);
                    }
                    let (y, m, _) = civil_from_days(day);
                    let first = days_from_civil(y, m, 1);
                    let month = (first, first + i64::from(days_in_month(y, m)));
                    last.set(month);
                    month
                })
            }
        }
    }

    /// The name people use for the period containing `day`: `2026-11-02`, `2026-W45`, `2026-11`.
    pub fn label(self, day: i64) -> String {
        let mut s = String::with_capacity(10);
        self.write_label(day, &mut s);
        s
    }

    /// Appends [`Period::label`] to `out` without formatting machinery (it is on the admission path).
    pub fn write_label(self, day: i64, out: &mut String) {
        let mut b = [b'0'; 10];
        let put = |b: &mut [u8; 10], at: usize, width: usize, v: i64| {
            let mut v = v.unsigned_abs();
            for i in (at..at + width).rev() {
                b[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        let len = match self {
            Period::Day => {
                let (y, m, d) = civil_from_days(day);
                put(&mut b, 0, 4, y);
                b[4] = b'-';
                put(&mut b, 5, 2, i64::from(m));
                b[7] = b'-';
                put(&mut b, 8, 2, i64::from(d));
                10
            }
            Period::Week => {
                let (start, _) = self.bounds(day);
                // The ISO year is the year of the week's Thursday.
                let (y, _, _) = civil_from_days(start + 3);
                let jan4 = days_from_civil(y, 1, 4);
                let (week1, _) = Period::Week.bounds(jan4);
                put(&mut b, 0, 4, y);
                b[4] = b'-';
                b[5] = b'W';
                put(&mut b, 6, 2, (start - week1) / 7 + 1);
                8
            }
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                put(&mut b, 0, 4, y);
                b[4] = b'-';
                put(&mut b, 5, 2, i64::from(m));
                7
            }
        };
        out.push_str(std::str::from_utf8(&b[..len]).unwrap_or("????"));
    }

    /// The keyword used in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }
}

/// `n` and a noun that agrees with it: `1 GPU`, `4 GPUs`, `0 GPUs` (`one` for one, `many` for
/// any other count).
pub fn counted(n: u64, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {many}") }
}

/// Appends the decimal form of `v` to `out`, without formatting machinery.
pub fn push_int(out: &mut String, v: i64) {
    if (0..10).contains(&v) {
        // One digit (a GPU count, a node count, a decision's number): one char.
        out.push(char::from(b'0' + v as u8));
        return;
    }
    if v < 0 {
        out.push('-');
    }
    let mut n = v.unsigned_abs();
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits: pushed as chars, which needs no UTF-8 validation of the buffer (`str::from_utf8`
    // cost more than the digits themselves).
    out.reserve(buf.len() - i);
    out.extend(buf[i..].iter().map(|&b| char::from(b)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_formats_rfc3339() {
        let t = Timestamp::parse("2026-11-02T09:00:00Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-02T09:00:00Z");
        let t2 = Timestamp::parse("2026-11-02T17:00:00.250+08:00").unwrap();
        assert_eq!(t2.to_string(), "2026-11-02T09:00:00.250Z");
        assert!(Timestamp::parse("2026-02-30T00:00:00Z").is_err());
        assert!(Timestamp::parse("2026-11-02T09:00:00").is_err());
        assert!(Timestamp::parse("2026-11-02T09:00:00Zjunk").is_err());
        assert!(Timestamp::parse("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(Duration::parse("2h").unwrap(), Duration::hours(2));
        assert_eq!(Duration::parse("1h30m").unwrap(), Duration::minutes(90));
        assert_eq!(Duration::parse("0.5h").unwrap(), Duration::minutes(30));
        assert!(Duration::parse("2 hours").is_err());
        assert!(Duration::parse("h").is_err());
        assert_eq!(Duration::minutes(90).to_string(), "90m");
    }

    #[test]
    fn periods() {
        let day = Timestamp::parse("2026-11-02T09:00:00Z").unwrap().day();
        assert_eq!(Period::Month.label(day), "2026-11");
        assert_eq!(Period::Week.label(day), "2026-W45");
        assert_eq!(Period::Day.label(day), "2026-11-02");
        let (a, b) = Period::Month.bounds(day);
        assert_eq!(b - a, 30);
        // 2027-01-01 is a Friday in ISO week 2026-W53.
        let ny = days_from_civil(2027, 1, 1);
        assert_eq!(Period::Week.label(ny), "2026-W53");
        let mut s = String::new();
        push_int(&mut s, -1205);
        push_int(&mut s, 0);
        assert_eq!(s, "-12050");
    }

    proptest! {
        #[test]
        fn month_bounds_are_the_same_remembered_or_computed(days in proptest::collection::vec(-800_000i64..800_000, 1..64)) {
            for day in days {
                for d in [day, day + 1, day - 1, day + 31] {
                    let (y, m, _) = civil_from_days(d);
                    let first = days_from_civil(y, m, 1);
                    let expected = (first, first + i64::from(days_in_month(y, m)));
                    prop_assert_eq!(Period::Month.bounds(d), expected, "day {}", d);
                }
            }
        }

        #[test]
        fn push_int_writes_what_display_does(v in any::<i64>()) {
            let mut s = String::from("x");
            push_int(&mut s, v);
            prop_assert_eq!(s, format!("x{v}"));
        }

        #[test]
        fn civil_round_trip(z in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(z);
            prop_assert_eq!(days_from_civil(y, m, d), z);
        }

        #[test]
        fn format_parse_round_trip(ms in 0i64..4_102_444_800_000) {
            let t = Timestamp(ms);
            prop_assert_eq!(Timestamp::parse(&t.to_string()).unwrap(), t);
        }

        #[test]
        fn text_matches_padded_formatting(ms in any::<i64>()) {
            let days = ms.div_euclid(MS_PER_DAY);
            let rem = ms.rem_euclid(MS_PER_DAY);
            let (y, m, d) = civil_from_days(days);
            let (h, mi, s, milli) =
                (rem / MS_PER_HOUR, rem % MS_PER_HOUR / MS_PER_MIN, rem % MS_PER_MIN / MS_PER_SEC, rem % MS_PER_SEC);
            let mut want = format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
            if milli != 0 {
                want.push_str(&format!(".{milli:03}"));
            }
            want.push('Z');
            let text = Timestamp(ms).text();
            prop_assert_eq!(text.as_str(), want.as_str());
            prop_assert_eq!(Timestamp(ms).to_string(), want);
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = Timestamp::parse(&s);
            let _ = Duration::parse(&s);
        }
    }
}
