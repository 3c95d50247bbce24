//! Utilisation series from the Alibaba GenAI 2026 duty-cycle trace, and the seeded rule that maps them
//! onto jobs.
//!
//! Input: `pod_gpu_duty_cycle_anon.csv` — columns `value` (GPU duty cycle in percent),
//! `timestamp_anon` (seconds, anonymised: only differences mean anything) and `container_ip` (a hash) —
//! either as the published gzipped tar or as a plain CSV. Rows are grouped by container into series
//! sorted by time; series with fewer than [`MIN_POINTS`] points are not used.
//!
//! The rule (documented in `docs/importers.md`): job `J` imported with seed `S` takes the series at index
//! `stable_hash(S, [J, "series"]) mod n` (series sorted by container id) and starts reading it at phase
//! `stable_hash(S, [J, "phase"]) mod span` seconds, where `span` is the series length plus one sampling
//! step. A sample at `t` seconds after the job started reads the last point at or before
//! `(phase + t) mod span`: the series repeats for jobs that outlive it. `gpu_util = value / 100`, clamped
//! to `[0, 1]`; `mem_util` is left out (the trace does not have it).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::ImportError;
use crate::rng::stable_hash;

/// Series shorter than this many points are not used (too short to say anything about idling).
pub const MIN_POINTS: usize = 60;

#[derive(Debug, Clone, PartialEq)]
struct Series {
    container: String,
    /// Seconds covered, including one trailing step.
    span: i64,
    /// (seconds since the series' first point, utilisation 0..1).
    points: Vec<(i64, f32)>,
}

/// Which series a job reads and from where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assignment {
    /// Index of the series.
    pub series: usize,
    /// Seconds into the series at the job's start.
    pub phase: i64,
}

/// Every usable duty-cycle series, sorted by container id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UtilSeries {
    series: Vec<Series>,
    /// Rows read.
    pub rows: u64,
    /// Rows skipped as malformed.
    pub bad_rows: u64,
    /// Containers dropped for having fewer than [`MIN_POINTS`] points.
    pub short_series: u64,
}

impl UtilSeries {
    /// Reads a `.tar.gz`/`.tgz` (the first `.csv` member) or a plain `.csv` file.
    pub fn from_path(path: &Path) -> Result<UtilSeries, ImportError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| ImportError::io(format!("cannot open `{name}`"), e))?;
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
            let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
            let entries = archive.entries().map_err(|e| ImportError::io(format!("cannot read `{name}`"), e))?;
            for entry in entries {
                let entry = entry.map_err(|e| ImportError::io(format!("cannot read `{name}`"), e))?;
                let is_csv = entry.path().map(|p| p.to_string_lossy().ends_with(".csv")).unwrap_or(false);
                if is_csv {
                    return UtilSeries::from_csv(BufReader::new(entry), &name);
                }
            }
            Err(ImportError::Format(format!("`{name}` holds no .csv member")))
        } else {
            UtilSeries::from_csv(BufReader::new(file), &name)
        }
    }

    /// Reads the duty-cycle CSV (header required; columns found by name).
    pub fn from_csv(reader: impl BufRead, name: &str) -> Result<UtilSeries, ImportError> {
        let mut lines = reader.lines();
        let header = match lines.next() {
            Some(h) => h.map_err(|e| ImportError::io(format!("cannot read `{name}`"), e))?,
            None => return Err(ImportError::Format(format!("`{name}` is empty"))),
        };
        let cols: Vec<&str> = header.trim_start_matches('\u{feff}').trim().split(',').collect();
        let find = |c: &str| {
            cols.iter().position(|h| *h == c).ok_or_else(|| {
                ImportError::Format(format!(
                    "`{name}` has no `{c}` column (expected `value,timestamp_anon,container_ip`)"
                ))
            })
        };
        let (iv, it, ic) = (find("value")?, find("timestamp_anon")?, find("container_ip")?);
        let mut by_container: BTreeMap<String, Vec<(f64, f32)>> = BTreeMap::new();
        let mut out = UtilSeries::default();
        for line in lines {
            let line = line.map_err(|e| ImportError::io(format!("cannot read `{name}`"), e))?;
            if line.trim().is_empty() {
                continue;
            }
            out.rows += 1;
            let fields: Vec<&str> = line.trim_end().split(',').collect();
            let parsed = (|| {
                let v: f64 = fields.get(iv)?.parse().ok()?;
                let t: f64 = fields.get(it)?.parse().ok()?;
                let c = fields.get(ic)?;
                (v.is_finite() && t.is_finite() && !c.is_empty()).then(|| (c.to_string(), t, v))
            })();
            match parsed {
                Some((c, t, v)) => by_container.entry(c).or_default().push((t, (v / 100.0).clamp(0.0, 1.0) as f32)),
                None => out.bad_rows += 1,
            }
        }
        for (container, mut pts) in by_container {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            pts.dedup_by(|b, a| a.0 == b.0);
            if pts.len() < MIN_POINTS {
                out.short_series += 1;
                continue;
            }
            let t0 = pts[0].0;
            let step = pts[1].0 - t0;
            let points: Vec<(i64, f32)> = pts.iter().map(|&(t, v)| ((t - t0).round() as i64, v)).collect();
            let last = points.last().map(|p| p.0).unwrap_or(0);
            out.series.push(Series { container, span: last + step.round().max(1.0) as i64, points });
        }
        Ok(out)
    }

    /// Number of usable series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// True when no series is usable.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// The container id of series `i`.
    pub fn container(&self, i: usize) -> Option<&str> {
        self.series.get(i).map(|s| s.container.as_str())
    }

    /// The series and phase job `job_id` reads under seed `seed` (`None` when there is no series).
    pub fn assign(&self, seed: u64, job_id: &str) -> Option<Assignment> {
        let n = self.series.len() as u64;
        if n == 0 {
            return None;
        }
        let series = (stable_hash(seed, &[job_id, "series"]) % n) as usize;
        let span = self.series[series].span.max(1) as u64;
        let phase = (stable_hash(seed, &[job_id, "phase"]) % span) as i64;
        Some(Assignment { series, phase })
    }

    /// Utilisation (0..1) `elapsed_secs` after the start of a job with assignment `a`.
    pub fn value_at(&self, a: Assignment, elapsed_secs: i64) -> f64 {
        let Some(s) = self.series.get(a.series) else { return 0.0 };
        let offset = (a.phase + elapsed_secs).rem_euclid(s.span.max(1));
        let i = s.points.partition_point(|p| p.0 <= offset);
        s.points.get(i.saturating_sub(1)).map(|p| f64::from(p.1)).unwrap_or(0.0)
    }
}

/// Parses bytes as a duty-cycle CSV (for the fuzz target).
pub fn parse_csv_bytes(bytes: &[u8]) -> Result<UtilSeries, ImportError> {
    UtilSeries::from_csv(bytes, "<bytes>")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(containers: &[(&str, usize, f64)]) -> String {
        let mut s = String::from("value,timestamp_anon,container_ip\n");
        for &(c, n, v) in containers {
            for i in 0..n {
                let val = if i % 10 < 5 { v } else { 0.0 };
                s.push_str(&format!("{val},{}.0,{c}\n", 1000 + i * 60));
            }
        }
        s
    }

    #[test]
    fn groups_by_container_drops_short_series_and_scales_percent() {
        let text = csv(&[("b", 100, 80.0), ("a", 100, 50.0), ("short", 5, 10.0)]);
        let u = UtilSeries::from_csv(text.as_bytes(), "t").unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u.short_series, 1);
        assert_eq!(u.container(0), Some("a"));
        assert_eq!(u.rows, 205);
        let a = Assignment { series: 1, phase: 0 };
        assert!((u.value_at(a, 0) - 0.8).abs() < 1e-6);
        assert_eq!(u.value_at(a, 5 * 60), 0.0);
        // span = 100 points × 60 s: the series repeats.
        assert!((u.value_at(a, 100 * 60) - 0.8).abs() < 1e-6);
    }

    #[test]
    fn assignment_is_seeded_and_stable() {
        let text = csv(&[("a", 100, 50.0), ("b", 100, 80.0), ("c", 100, 30.0)]);
        let u = UtilSeries::from_csv(text.as_bytes(), "t").unwrap();
        assert_eq!(u.assign(1, "j1"), u.assign(1, "j1"));
        let differs = (0..20).any(|i| u.assign(1, &format!("j{i}")) != u.assign(2, &format!("j{i}")));
        assert!(differs);
        let a = u.assign(9, "x").unwrap();
        assert!(a.series < 3 && a.phase < 6000);
    }

    #[test]
    fn missing_column_and_bad_rows_are_reported() {
        let err = UtilSeries::from_csv("value,ts\n1,2\n".as_bytes(), "t").unwrap_err();
        assert!(err.to_string().contains("timestamp_anon"), "{err}");
        let u = UtilSeries::from_csv("value,timestamp_anon,container_ip\nx,1,a\n1,2\n".as_bytes(), "t").unwrap();
        assert_eq!(u.bad_rows, 2);
        assert!(u.is_empty());
    }
}
