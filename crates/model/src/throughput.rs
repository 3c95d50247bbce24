//! Throughput: a job's own measure of work done, as `job.sample` carries it, and the rate of one run.
//!
//! A sample may say how fast the job works (`throughput`, a rate in `unit`, e.g. `5120.0` with
//! `"unit": "tokens/s"`) or how much it has done so far (`progress`, a cumulative count in `unit`,
//! e.g. `1.2e9` with `"unit": "tokens"`). This module is the one definition of what those mean, used
//! by the engine (measured throughput per configuration and GPU type, for advice policies) and by the
//! report (cost per unit of work), so both derive the same number from the same samples:
//!
//! - **The unit** is split into what is counted and a time base: `tokens/s` counts `tokens` per
//!   second; `/s`, `/sec`, `/second`, `/min`, `/minute`, `/h`, `/hr`, `/hour` are understood and rates
//!   are kept per second. A `throughput` whose unit has another time base (`tokens/step`) is not a
//!   rate over time and is not used. Without a unit the count is `units`. A `progress` counts what its
//!   unit names before any `/`.
//! - **The rate of a run** ([`RunRate`]) is the mean of its `throughput` samples, when it has any;
//!   otherwise the rate of its cumulative `progress`: the sum of the increases between consecutive
//!   readings over the sum of the time between them. A reading below the previous one is a counter
//!   reset (a restart from a checkpoint): the interval across the reset counts neither units nor
//!   time, and counting resumes from the new reading. A reading older than the previous one, or at the
//!   same instant, is ignored. Measures in another unit than the run's first are ignored (counted in
//!   [`RunRate::ignored`]).

use serde::{Deserialize, Serialize};

use crate::event::Sample;
use crate::time::Timestamp;

/// The count of a unit without a name.
pub const DEFAULT_UNIT: &str = "units";

/// Splits `unit` into what it counts and the seconds of its time base: `tokens/s` is
/// `("tokens", Some(1.0))`, `samples/min` is `("samples", Some(60.0))`, `tokens` is
/// `("tokens", None)`, `tokens/step` is `("tokens", Some(NaN))` — a time base that is not one.
pub fn split_unit(unit: &str) -> (&str, Option<f64>) {
    let unit = unit.trim();
    let (base, per) = match unit.rsplit_once('/') {
        Some((b, p)) => (b.trim(), Some(p.trim())),
        None => (unit, None),
    };
    let base = if base.is_empty() { DEFAULT_UNIT } else { base };
    let secs = per.map(|p| match p {
        "s" | "sec" | "second" => 1.0,
        "min" | "minute" => 60.0,
        "h" | "hr" | "hour" => 3600.0,
        _ => f64::NAN,
    });
    (base, secs)
}

/// What one sample says about the work done: a rate per second, a cumulative count, or both, in
/// `unit` (what is counted, without the time base).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work<'a> {
    /// What is counted: `tokens`, `samples`, `steps`, or [`DEFAULT_UNIT`].
    pub unit: &'a str,
    /// `throughput` per second, when the sample has a usable one.
    pub rate: Option<f64>,
    /// `progress`, when the sample has one.
    pub progress: Option<f64>,
}

impl Sample {
    /// The sample's measure of work (see the [module](crate::throughput) documentation), or `None`
    /// when it carries neither a usable `throughput` nor a `progress`.
    pub fn work(&self) -> Option<Work<'_>> {
        let (base, secs) = split_unit(self.unit.as_deref().unwrap_or(DEFAULT_UNIT));
        let rate = self.throughput.and_then(|t| match secs {
            None => Some(t),
            Some(s) if s.is_finite() => Some(t / s),
            Some(_) => None,
        });
        let progress = self.progress.filter(|p| p.is_finite());
        (rate.is_some() || progress.is_some()).then_some(Work { unit: base, rate, progress })
    }
}

/// The rate of work of one run, accumulated sample by sample (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRate {
    /// What is counted: the unit of the run's first measure.
    #[serde(default)]
    unit: String,
    /// Sum of the `throughput` samples, per second.
    #[serde(default)]
    sum: f64,
    /// How many.
    #[serde(default)]
    n: u32,
    /// Progress counted between consecutive readings.
    #[serde(default)]
    units: f64,
    /// Seconds between those readings.
    #[serde(default)]
    secs: f64,
    /// The latest progress reading: time (ms) and value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last: Option<(i64, f64)>,
    /// Progress readings seen.
    #[serde(default)]
    readings: u32,
    /// Measures ignored because their unit differs from the run's.
    #[serde(default)]
    ignored: u32,
}

impl RunRate {
    /// Adds one sample's measure taken at `at`. Returns whether it was used.
    pub fn add(&mut self, at: Timestamp, w: &Work<'_>) -> bool {
        if self.unit.is_empty() {
            self.unit = w.unit.to_owned();
        } else if self.unit != w.unit {
            self.ignored = self.ignored.saturating_add(1);
            return false;
        }
        let mut used = false;
        if let Some(r) = w.rate {
            self.sum += r;
            self.n = self.n.saturating_add(1);
            used = true;
        }
        if let Some(p) = w.progress {
            let t = at.millis();
            match self.last {
                Some((lt, _)) if t <= lt => {}
                Some((lt, lv)) => {
                    if p >= lv {
                        self.units += p - lv;
                        self.secs += (t - lt) as f64 / 1000.0;
                    }
                    self.last = Some((t, p));
                    self.readings = self.readings.saturating_add(1);
                    used = true;
                }
                None => {
                    self.last = Some((t, p));
                    self.readings = self.readings.saturating_add(1);
                    used = true;
                }
            }
        }
        used
    }

    /// Units per second over the run so far: the mean of its throughput samples, else the rate of
    /// its progress; `None` without either.
    pub fn rate(&self) -> Option<f64> {
        if self.n > 0 {
            Some(self.sum / f64::from(self.n))
        } else if self.secs > 0.0 {
            Some(self.units / self.secs)
        } else {
            None
        }
    }

    /// What is counted (empty before the first measure).
    pub fn unit(&self) -> &str {
        &self.unit
    }

    /// Samples that contributed: throughput samples, or progress readings when there are none.
    pub fn samples(&self) -> u32 {
        if self.n > 0 { self.n } else { self.readings }
    }

    /// Measures ignored because they were in another unit than the run's first.
    pub fn ignored(&self) -> u32 {
        self.ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(r: &mut RunRate, at: i64, s: Sample) -> bool {
        let w = s.work().unwrap();
        r.add(Timestamp(at), &w)
    }

    fn sample(throughput: Option<f64>, progress: Option<f64>, unit: Option<&str>) -> Sample {
        Sample { job_id: "j".into(), throughput, progress, unit: unit.map(str::to_owned), ..Sample::default() }
    }

    #[test]
    fn units_split_into_count_and_time_base() {
        assert_eq!(split_unit("tokens/s"), ("tokens", Some(1.0)));
        assert_eq!(split_unit(" samples / min "), ("samples", Some(60.0)));
        assert_eq!(split_unit("steps/h"), ("steps", Some(3600.0)));
        assert_eq!(split_unit("tokens"), ("tokens", None));
        assert_eq!(split_unit("/s"), (DEFAULT_UNIT, Some(1.0)));
        assert!(split_unit("tokens/step").1.is_some_and(f64::is_nan));
    }

    #[test]
    fn a_sample_says_what_work_it_measures() {
        let s = sample(Some(120.0), None, Some("samples/min"));
        let w = s.work().unwrap();
        assert_eq!((w.unit, w.rate, w.progress), ("samples", Some(2.0), None));
        let s = sample(Some(5.0), None, None);
        let w = s.work().unwrap();
        assert_eq!((w.unit, w.rate), (DEFAULT_UNIT, Some(5.0)));
        assert_eq!(sample(Some(5.0), None, Some("tokens/step")).work(), None, "not a rate over time");
        let s = sample(None, Some(1e9), Some("tokens"));
        let w = s.work().unwrap();
        assert_eq!((w.unit, w.rate, w.progress), ("tokens", None, Some(1e9)));
        assert_eq!(sample(None, None, Some("tokens/s")).work(), None);
    }

    #[test]
    fn the_rate_of_a_run_is_the_mean_of_its_throughput_samples() {
        let mut r = RunRate::default();
        for (i, t) in [1000.0, 1200.0, 1400.0].into_iter().enumerate() {
            assert!(r.add(Timestamp(i as i64 * 60_000), &sample(Some(t), None, Some("tokens/s")).work().unwrap()));
        }
        assert_eq!(r.rate(), Some(1200.0));
        assert_eq!((r.unit(), r.samples()), ("tokens", 3));
        // Another unit is ignored, not mixed in.
        assert!(!r.add(Timestamp(200_000), &sample(Some(9.0), None, Some("steps/s")).work().unwrap()));
        assert_eq!((r.rate(), r.ignored()), (Some(1200.0), 1));
    }

    #[test]
    fn cumulative_progress_becomes_a_rate_across_resets() {
        // Readings (s, tokens): (0, 0), (100, 50_000), (200, 100_000), reset at 300 to 10_000, (400, 60_000).
        // Counted: 50_000 + 50_000 over 200 s, then 50_000 over 100 s; the reset interval counts nothing.
        // Rate = 150_000 / 300 = 500 tokens/s.
        let mut r = RunRate::default();
        for (s, p) in [(0, 0.0), (100, 50_000.0), (200, 100_000.0), (300, 10_000.0), (400, 60_000.0)] {
            r.add(Timestamp(s * 1000), &sample(None, Some(p), Some("tokens")).work().unwrap());
        }
        assert_eq!(r.rate(), Some(500.0));
        assert_eq!(r.samples(), 5);
        // An older or simultaneous reading is ignored.
        assert!(!r.add(Timestamp(400_000), &sample(None, Some(1e12), Some("tokens")).work().unwrap()));
        assert!(!r.add(Timestamp(50_000), &sample(None, Some(1e12), Some("tokens")).work().unwrap()));
        assert_eq!(r.rate(), Some(500.0));
        // One reading is no rate; throughput samples take precedence over progress.
        let mut one = RunRate::default();
        add(&mut one, 0, sample(None, Some(5.0), Some("tokens")));
        assert_eq!(one.rate(), None);
        add(&mut one, 1000, sample(Some(7.0), Some(10.0), Some("tokens/s")));
        assert_eq!(one.rate(), Some(7.0));
    }

    #[test]
    fn a_run_rate_round_trips_through_json() {
        let mut r = RunRate::default();
        r.add(Timestamp(0), &sample(None, Some(5.0), Some("tokens")).work().unwrap());
        let back: RunRate = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
