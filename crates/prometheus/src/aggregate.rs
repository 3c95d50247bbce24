//! From the readings of one evaluation time to `job.sample` events: pure, so every rule about bad
//! data is a unit test.
//!
//! Per GPU (one label set, see [`crate::promql::Labels`]) the utilisation is `engine_active` when the
//! GPU has that series, else `gpu_util` / 100. Per job (the attribution key, resolved by
//! [`Jobs::lookup`]) a sample is made only when every GPU of the job is in the answer with a fresh,
//! in-range value and the GPUs add up to what bursar expects. Anything else is no sample and a
//! counter: a missing or broken reading is never read as "0 % used".
//!
//! **MIG.** dcgm-exporter labels a MIG instance's series with `GPU_I_PROFILE` (`1g.10gb`) and
//! `GPU_I_ID`: such a device counts as its profile's share of a GPU ([`bursar_model::mig_share`]),
//! so a job holding `2/7` is matched by two `1g.10gb` instances (or one `2g.20gb`), and its
//! utilisation is the mean over its devices weighted by their shares (for whole GPUs, the plain
//! mean). A profile bursar cannot read counts as a whole GPU, so its job is skipped as holding more
//! GPUs than bursar knows, never sampled wrongly. The sample's `gpus` counts devices.
//!
//! The job-level metrics (`metrics.throughput`, `metrics.progress`) are grouped by the attribution
//! key alone and summed over the job's series (one per rank or node); a job's sample carries them
//! when every one of its series is fresh and in range (else the sample goes without them, and the
//! series is counted as stale or bad). They never make a sample on their own: a sample needs the
//! GPUs' utilisation.

use std::collections::{BTreeMap, BTreeSet};

use bursar_model::{Event, EventKind, Gpus, RawJson, Sample, Timestamp};
use serde_json::value::RawValue;

use crate::config::Config;
use crate::counters::Counters;
use crate::jobs::Jobs;
use crate::promql::{Labels, Reading};

/// Values at or above this are DCGM's blank and error markers, not MiB: `DCGM_INT32_BLANK`
/// (0x7ffffff0) and up, `DCGM_FP64_BLANK` (2^47), `DCGM_INT64_BLANK`, and 4294967295.
pub const FB_SENTINEL: f64 = 2_147_483_632.0;

/// How far above the top of a ratio a value may be and still be read as the top (DCGM's profiling
/// ratios come from counters and can land a hair above 1).
const TOLERANCE: f64 = 1e-3;

/// The four answers of one evaluation time (an unused metric has an empty answer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    /// `metrics.engine_active`.
    pub engine_active: Vec<Reading>,
    /// `metrics.gpu_util`.
    pub gpu_util: Vec<Reading>,
    /// `metrics.fb_used`.
    pub fb_used: Vec<Reading>,
    /// `metrics.fb_free`.
    pub fb_free: Vec<Reading>,
    /// `metrics.throughput` (job-level).
    pub throughput: Vec<Reading>,
    /// `metrics.progress` (job-level).
    pub progress: Vec<Reading>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Ok(f64),
    Bad,
    Stale,
}

/// Reads one series: fresh and within `0..=top` (returned divided by `top`), else bad or stale.
fn read(r: &Reading, at: Timestamp, cfg: &Config, top: f64, counts: &mut Counters) -> Value {
    let fresh = r.sample_time.is_some_and(|t| at.since(t) <= cfg.max_age);
    if !fresh {
        counts.series_stale += 1;
        return Value::Stale;
    }
    let v = r.value;
    if !v.is_finite() || v < 0.0 || v > top * (1.0 + TOLERANCE) {
        counts.series_bad_value += 1;
        return Value::Bad;
    }
    Value::Ok(v.min(top) / top)
}

fn read_fb(r: &Reading, at: Timestamp, cfg: &Config, counts: &mut Counters) -> Option<f64> {
    let fresh = r.sample_time.is_some_and(|t| at.since(t) <= cfg.max_age);
    if !fresh {
        counts.series_stale += 1;
        return None;
    }
    if !r.value.is_finite() || r.value < 0.0 || r.value >= FB_SENTINEL {
        counts.series_bad_value += 1;
        return None;
    }
    Some(r.value)
}

#[derive(Default)]
struct Gpu<'a> {
    engine: Option<&'a Reading>,
    util: Option<&'a Reading>,
    used: Option<&'a Reading>,
    free: Option<&'a Reading>,
}

/// A device's readings and its share of a GPU.
type Device<'a> = (&'a Gpu<'a>, Gpus);

/// The label dcgm-exporter gives a MIG instance's series: its profile (`1g.10gb`).
pub const MIG_PROFILE_LABEL: &str = "GPU_I_PROFILE";

/// The share of a GPU the device of `labels` is: its MIG profile's share, else one GPU.
fn device_share(labels: &Labels) -> Gpus {
    labels
        .iter()
        .find(|(k, v)| k == MIG_PROFILE_LABEL && !v.is_empty())
        .and_then(|(_, profile)| bursar_model::mig_share(profile))
        .unwrap_or(Gpus::whole(1))
}

/// The event id of job `job`'s sample at `at`: `<prefix>-<job>-<RFC 3339 time>`. The same job and
/// evaluation time always give the same id, so a repeat poll, a second instance or a replay is
/// dropped by bursar's dedupe.
pub fn event_id(prefix: &str, job: &str, at: Timestamp) -> String {
    format!("{prefix}-{job}-{at}")
}

fn source_field() -> Vec<(String, RawJson)> {
    RawValue::from_string("\"prometheus\"".to_owned())
        .map(|raw| vec![("source".to_owned(), RawJson(raw))])
        .unwrap_or_default()
}

/// A job-level metric per job key: the sum over its series, or `None` when one of them is stale or
/// not a finite number of at least 0.
fn job_sums(readings: &[Reading], at: Timestamp, cfg: &Config, counts: &mut Counters) -> BTreeMap<String, Option<f64>> {
    let mut out: BTreeMap<String, Option<f64>> = BTreeMap::new();
    for r in readings {
        let Some(key) = cfg.attribution.key_of(|n| r.label(n)) else { continue };
        let fresh = r.sample_time.is_some_and(|t| at.since(t) <= cfg.max_age);
        let v = if !fresh {
            counts.series_stale += 1;
            None
        } else if !r.value.is_finite() || r.value < 0.0 || r.value > bursar_model::limits::SAMPLE_QUANTITY {
            counts.series_bad_value += 1;
            None
        } else {
            Some(r.value)
        };
        let e = out.entry(key).or_insert(Some(0.0));
        *e = e.zip(v).map(|(a, b)| a + b);
    }
    out
}

/// Why a running job got no sample at one evaluation time (each is also a counter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// A GPU's value was outside the metric's range (a DCGM blank or error value, NaN).
    BadValue,
    /// A GPU's newest sample was older than `max_age`.
    Stale,
    /// Fewer GPUs in the answer than the job holds.
    MissingGpu {
        /// GPUs with a value (MIG instances at their share).
        got: Gpus,
        /// GPUs the job holds.
        holds: Gpus,
    },
    /// More GPUs in the answer than the job holds.
    ExtraGpu {
        /// GPUs with a value (MIG instances at their share).
        got: Gpus,
        /// GPUs the job holds.
        holds: Gpus,
    },
    /// Prometheus has no series for the job's key at all.
    NoSeries,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::BadValue => f.write_str("a GPU's value is a DCGM error or blank value (bad data is not idleness)"),
            Skip::Stale => f.write_str("a GPU's series is stale (older than `max_age`): is the exporter scraped?"),
            Skip::MissingGpu { got, holds } => {
                write!(f, "Prometheus has {got} of the job's {holds} GPUs: a sample needs every GPU it holds")
            }
            Skip::ExtraGpu { got, holds } => write!(
                f,
                "Prometheus has {got} GPUs for the job's key, the job holds {holds}: a mapping file names it on a GPU it does not hold"
            ),
            Skip::NoSeries => f.write_str(
                "Prometheus has no series for the job's key: is its mapping file written (the Slurm prolog) and its node's exporter scraped?",
            ),
        }
    }
}

/// The samples of evaluation time `at`, in job order (a job may have several keys: its pods); `counts` gets the series and jobs skipped,
/// `skipped` each running job that got no sample and why.
pub fn samples(
    cfg: &Config,
    at: Timestamp,
    answers: &Answers,
    jobs: &dyn Jobs,
    counts: &mut Counters,
    skipped: &mut Vec<(String, Skip)>,
) -> Vec<Event> {
    let mut gpus: BTreeMap<&Labels, Gpu<'_>> = BTreeMap::new();
    for r in &answers.engine_active {
        gpus.entry(&r.labels).or_default().engine = Some(r);
    }
    for r in &answers.gpu_util {
        gpus.entry(&r.labels).or_default().util = Some(r);
    }
    for r in &answers.fb_used {
        gpus.entry(&r.labels).or_default().used = Some(r);
    }
    for r in &answers.fb_free {
        gpus.entry(&r.labels).or_default().free = Some(r);
    }

    let mut by_key: BTreeMap<String, Vec<Device<'_>>> = BTreeMap::new();
    for (labels, gpu) in &gpus {
        let label = |n: &str| labels.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        if let Some(key) = cfg.attribution.key_of(label) {
            by_key.entry(key).or_default().push((gpu, device_share(labels)));
        }
    }

    // Only the metrics the configuration turns on (an answer for one that is off is not read).
    let on = |name: &str, readings: &[Reading], counts: &mut Counters| {
        if name.is_empty() { BTreeMap::new() } else { job_sums(readings, at, cfg, counts) }
    };
    let throughput = on(&cfg.metrics.throughput, &answers.throughput, counts);
    let progress = on(&cfg.metrics.progress, &answers.progress, counts);
    let base = if cfg.metrics.unit.is_empty() { bursar_model::throughput::DEFAULT_UNIT } else { &cfg.metrics.unit };
    // Several keys may name one job (its pods on Kubernetes): a sample covers every GPU of the job.
    let mut by_job: BTreeMap<String, (crate::jobs::Expected, Vec<Device<'_>>, Vec<String>)> = BTreeMap::new();
    for (key, key_gpus) in by_key {
        let Some(expected) = jobs.lookup(&key) else {
            counts.jobs_unknown += 1;
            continue;
        };
        let e = by_job.entry(expected.job_id.clone()).or_insert_with(|| (expected, Vec::new(), Vec::new()));
        e.1.extend(key_gpus);
        e.2.push(key);
    }
    let sum_over = |sums: &BTreeMap<String, Option<f64>>, keys: &[String]| -> Option<f64> {
        let values: Vec<Option<f64>> = keys.iter().filter_map(|k| sums.get(k).copied()).collect();
        if values.is_empty() || values.iter().any(Option::is_none) {
            return None;
        }
        Some(values.into_iter().flatten().sum())
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (_, (expected, job_gpus, keys)) in by_job {
        seen.insert(expected.job_id.clone());
        // (utilisation, share) per device with a value.
        let (mut utils, mut bad, mut stale, mut missing) = (Vec::with_capacity(job_gpus.len()), false, false, false);
        let (mut used, mut free) = (Some(0.0), Some(0.0));
        for (g, share) in &job_gpus {
            let v = match (g.engine, g.util) {
                (Some(r), _) => read(r, at, cfg, 1.0, counts),
                (None, Some(r)) => read(r, at, cfg, 100.0, counts),
                (None, None) => {
                    missing = true;
                    continue;
                }
            };
            match v {
                Value::Ok(u) => utils.push((u, *share)),
                Value::Bad => bad = true,
                Value::Stale => stale = true,
            }
            let u = g.used.and_then(|r| read_fb(r, at, cfg, counts));
            let f = g.free.and_then(|r| read_fb(r, at, cfg, counts));
            used = used.zip(u).map(|(a, b)| a + b);
            free = free.zip(f).map(|(a, b)| a + b);
        }
        let n = utils.len() as u64;
        let got: Gpus = utils.iter().map(|&(_, share)| share).sum();
        let holds = expected.gpus;
        if bad {
            counts.jobs_bad_value += 1;
            skipped.push((expected.job_id, Skip::BadValue));
        } else if stale {
            counts.jobs_stale += 1;
            skipped.push((expected.job_id, Skip::Stale));
        } else if missing || got < holds {
            counts.jobs_missing_gpu += 1;
            skipped.push((expected.job_id, Skip::MissingGpu { got, holds }));
        } else if got > holds {
            counts.jobs_extra_gpu += 1;
            skipped.push((expected.job_id, Skip::ExtraGpu { got, holds }));
        } else {
            // Weighted by share: a 3g.40gb busy and a 1g.10gb idle are 3/4 busy, not half.
            let mean = utils.iter().map(|&(u, share)| u * share.as_f64()).sum::<f64>() / got.as_f64();
            let max = utils.iter().map(|&(u, _)| u).fold(0.0, f64::max);
            let mem_util = used.zip(free).and_then(|(u, f)| (u + f > 0.0).then(|| u / (u + f)));
            let tp = sum_over(&throughput, &keys);
            let pg = sum_over(&progress, &keys);
            let unit = match (tp, pg) {
                (Some(_), _) => Some(format!("{base}/s")),
                (None, Some(_)) => Some(base.to_owned()),
                (None, None) => None,
            };
            out.push(Event {
                id: event_id(&cfg.id_prefix, &expected.job_id, at),
                time: at,
                kind: EventKind::JobSample(Sample {
                    job_id: expected.job_id,
                    gpu_util: mean,
                    mem_util,
                    gpu_util_max: (n > 1).then_some(max),
                    fb_used_mib: used,
                    gpus: Some(utils.len() as u32),
                    throughput: tp,
                    progress: pg,
                    unit,
                    ..Sample::default()
                }),
                extra: source_field(),
            });
            counts.samples += 1;
        }
    }
    jobs.for_each_running(&mut |id, _| {
        if !seen.contains(id) {
            counts.jobs_no_series += 1;
            skipped.push((id.to_owned(), Skip::NoSeries));
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{ByJobId, Expected};
    use bursar_model::Duration;

    const AT: Timestamp = Timestamp(1_764_581_460_000);

    fn r(job: &str, gpu: &str, value: f64) -> Reading {
        Reading {
            labels: vec![
                ("gpu".into(), gpu.into()),
                ("hpc_job".into(), job.into()),
                ("instance".into(), "n1:9400".into()),
            ],
            value,
            sample_time: Some(AT.plus(Duration::seconds(-5))),
        }
    }

    fn jobs() -> ByJobId<impl Fn(&str) -> Option<Gpus>> {
        ByJobId(|id: &str| match id {
            "busy" | "idle" | "bad" | "old" => Some(Gpus::whole(1)),
            "multi" | "gone" => Some(Gpus::whole(2)),
            "mig" => Gpus::fraction(4, 7),
            _ => None,
        })
    }

    fn sample(e: &Event) -> &Sample {
        match &e.kind {
            EventKind::JobSample(s) => s,
            other => panic!("not a sample: {other:?}"),
        }
    }

    fn run(a: &Answers) -> (Vec<Event>, Counters) {
        run_skipping(a).0
    }

    /// One poll's samples and counters, and the jobs it skipped with why.
    type Skipping = ((Vec<Event>, Counters), Vec<(String, Skip)>);

    fn run_skipping(a: &Answers) -> Skipping {
        let (mut c, mut skipped) = (Counters::default(), Vec::new());
        let ev = samples(&Config::default(), AT, a, &jobs(), &mut c, &mut skipped);
        ((ev, c), skipped)
    }

    #[test]
    fn a_job_on_several_pods_is_one_sample_over_all_its_gpus() {
        // dcgm-exporter on Kubernetes: each GPU labelled with the pod holding it; both pods are one job.
        let k = |pod: &str, gpu: &str, value: f64| Reading {
            labels: vec![("gpu".into(), gpu.into()), ("namespace".into(), "nlp".into()), ("pod".into(), pod.into())],
            value,
            sample_time: Some(AT.plus(Duration::seconds(-5))),
        };
        let cfg = Config { attribution: crate::Attribution::kubernetes(), ..Config::default() };
        let jobs = crate::jobs::KubeTestJobs;
        let a = Answers {
            engine_active: vec![
                k("train-0", "0", 0.1),
                k("train-0", "1", 0.3),
                k("train-1", "2", 0.2),
                k("train-1", "3", 0.2),
            ],
            ..Answers::default()
        };
        let (mut c, mut skipped) = (Counters::default(), Vec::new());
        let ev = samples(&cfg, AT, &a, &jobs, &mut c, &mut skipped);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(ev.len(), 1);
        let s = sample(&ev[0]);
        assert_eq!((s.job_id.as_str(), s.gpus), ("kube-1", Some(4)));
        assert!((s.gpu_util - 0.2).abs() < 1e-9);
        // One pod's GPUs alone are not the job's.
        let half =
            Answers { engine_active: vec![k("train-0", "0", 0.1), k("train-0", "1", 0.3)], ..Answers::default() };
        let (mut c, mut skipped) = (Counters::default(), Vec::new());
        assert!(samples(&cfg, AT, &half, &jobs, &mut c, &mut skipped).is_empty());
        assert_eq!(
            skipped,
            vec![("kube-1".to_owned(), Skip::MissingGpu { got: Gpus::whole(2), holds: Gpus::whole(4) })]
        );
    }

    #[test]
    fn busy_idle_and_multi_gpu_jobs() {
        let a = Answers {
            engine_active: vec![r("busy", "0", 0.93), r("idle", "1", 0.01), r("multi", "2", 0.2), r("multi", "3", 0.6)],
            fb_used: vec![r("idle", "1", 30_000.0), r("multi", "2", 1000.0), r("multi", "3", 3000.0)],
            fb_free: vec![r("idle", "1", 10_000.0), r("multi", "2", 1000.0), r("multi", "3", 1000.0)],
            ..Answers::default()
        };
        let (ev, c) = run(&a);
        assert_eq!(
            ev.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["prom-busy-2025-12-01T09:31:00Z", "prom-idle-2025-12-01T09:31:00Z", "prom-multi-2025-12-01T09:31:00Z"]
        );
        let busy = sample(&ev[0]);
        assert_eq!((busy.gpu_util, busy.gpu_util_max, busy.gpus, busy.fb_used_mib), (0.93, None, Some(1), None));
        let idle = sample(&ev[1]);
        assert_eq!((idle.gpu_util, idle.fb_used_mib, idle.mem_util), (0.01, Some(30_000.0), Some(0.75)));
        let multi = sample(&ev[2]);
        assert!((multi.gpu_util - 0.4).abs() < 1e-12);
        assert_eq!((multi.gpu_util_max, multi.gpus, multi.fb_used_mib), (Some(0.6), Some(2), Some(4000.0)));
        assert_eq!(multi.mem_util, Some(4000.0 / 6000.0));
        assert!(ev.iter().all(|e| e.time == AT));
        assert_eq!(ev[0].extra.first().map(|(k, v)| (k.as_str(), v.get())), Some(("source", "\"prometheus\"")));
        assert_eq!(c.samples, 3);
        assert_eq!(c.jobs_skipped(), 0);
    }

    #[test]
    fn percent_fallback_only_for_gpus_without_the_profiling_metric() {
        let a = Answers {
            engine_active: vec![r("multi", "2", 0.5)],
            gpu_util: vec![r("multi", "2", 3.0), r("multi", "3", 70.0)],
            ..Answers::default()
        };
        let (ev, _) = run(&a);
        let s = sample(&ev[0]);
        assert!(
            (s.gpu_util - 0.6).abs() < 1e-12,
            "gpu 2 from the profiling metric, gpu 3 from percent: {}",
            s.gpu_util
        );
        assert_eq!(s.gpu_util_max, Some(0.7));
    }

    #[test]
    fn dcgm_error_values_are_no_sample() {
        for v in
            [4_294_967_295.0, 2_147_483_632.0, 140_737_488_355_328.0, 9.223_372_036_854_776e18, 101.0, -1.0, f64::NAN]
        {
            let (ev, c) = run(&Answers { gpu_util: vec![r("bad", "0", v)], ..Answers::default() });
            assert!(ev.is_empty(), "{v} made a sample");
            assert_eq!((c.series_bad_value, c.jobs_bad_value), (1, 1), "{v}");
        }
        let ((ev, c), skipped) =
            run_skipping(&Answers { engine_active: vec![r("bad", "0", 1.5)], ..Answers::default() });
        assert!(ev.is_empty() && c.jobs_bad_value == 1);
        assert_eq!(skipped, [("bad".to_owned(), Skip::BadValue)]);
        let (ev, _) = run(&Answers { engine_active: vec![r("bad", "0", 1.000_2)], ..Answers::default() });
        assert_eq!(sample(&ev[0]).gpu_util, 1.0, "a hair above 1 is 1");
    }

    #[test]
    fn bad_memory_drops_the_memory_fields_only() {
        let a = Answers {
            engine_active: vec![r("idle", "1", 0.02)],
            fb_used: vec![r("idle", "1", 4_294_967_295.0)],
            fb_free: vec![r("idle", "1", 1000.0)],
            ..Answers::default()
        };
        let (ev, c) = run(&a);
        let s = sample(&ev[0]);
        assert_eq!((s.gpu_util, s.fb_used_mib, s.mem_util), (0.02, None, None));
        assert_eq!(c.series_bad_value, 1);
    }

    #[test]
    fn stale_series_are_no_sample() {
        let mut old = r("old", "0", 0.0);
        old.sample_time = Some(AT.plus(Duration::minutes(-3)));
        let (ev, c) = run(&Answers { engine_active: vec![old.clone()], ..Answers::default() });
        assert!(ev.is_empty());
        assert_eq!((c.series_stale, c.jobs_stale), (1, 1));
        old.sample_time = None;
        let (ev, c) = run(&Answers { engine_active: vec![old], ..Answers::default() });
        assert!(ev.is_empty() && c.jobs_stale == 1, "no sample time is not fresh");
    }

    #[test]
    fn gpu_counts_must_match() {
        let (ev, c) = run(&Answers { engine_active: vec![r("gone", "4", 0.0)], ..Answers::default() });
        assert!(ev.is_empty());
        assert_eq!(c.jobs_missing_gpu, 1, "one of two GPUs answered");
        let a = Answers { engine_active: vec![r("busy", "0", 0.5), r("busy", "5", 0.5)], ..Answers::default() };
        let (ev, c) = run(&a);
        assert!(ev.is_empty());
        assert_eq!(c.jobs_extra_gpu, 1, "a mapping file left on another GPU");
        let a = Answers { fb_used: vec![r("busy", "0", 10.0)], ..Answers::default() };
        let (ev, c) = run(&a);
        assert!(ev.is_empty() && c.jobs_missing_gpu == 1, "memory without utilisation is not a sample");
    }

    /// A job holding 4/7 of an A100: one `3g.40gb` and one `1g.10gb` instance, as dcgm-exporter
    /// labels them (`GPU_I_PROFILE`, `GPU_I_ID`, on the GPU that holds them).
    #[test]
    fn mig_instances_count_as_their_share() {
        let mig = |gpu_i: &str, profile: &str, value: f64| {
            let mut reading = r("mig", "0", value);
            reading.labels.push(("GPU_I_ID".into(), gpu_i.into()));
            reading.labels.push((MIG_PROFILE_LABEL.into(), profile.into()));
            reading
        };
        let a =
            Answers { engine_active: vec![mig("1", "3g.40gb", 0.8), mig("9", "1g.10gb", 0.0)], ..Answers::default() };
        let ((ev, c), skipped) = run_skipping(&a);
        assert!(skipped.is_empty(), "{skipped:?}");
        let s = sample(&ev[0]);
        assert_eq!((s.job_id.as_str(), s.gpus, s.gpu_util_max), ("mig", Some(2), Some(0.8)), "gpus counts devices");
        assert!((s.gpu_util - 0.6).abs() < 1e-12, "3/4 of its share at 0.8: {}", s.gpu_util);
        assert_eq!(c.samples, 1);
        // Three 1g.10gb are 3/7 of the job's 4/7; a fifth slice is more than it holds.
        let short = Answers {
            engine_active: vec![mig("9", "1g.10gb", 0.1), mig("10", "1g.10gb", 0.1), mig("11", "1g.10gb", 0.1)],
            ..Answers::default()
        };
        let (_, skipped) = run_skipping(&short);
        let (three, four) = (Gpus::fraction(3, 7).unwrap(), Gpus::fraction(4, 7).unwrap());
        assert_eq!(skipped, [("mig".to_owned(), Skip::MissingGpu { got: three, holds: four })]);
        let mut extra = a.clone();
        extra.engine_active.push(mig("12", "1g.10gb", 0.1));
        let (_, skipped) = run_skipping(&extra);
        assert_eq!(skipped, [("mig".to_owned(), Skip::ExtraGpu { got: Gpus::fraction(5, 7).unwrap(), holds: four })]);
        // An unreadable profile counts as a whole GPU: skipped, never sampled as the wrong share.
        let odd = Answers { engine_active: vec![mig("1", "custom", 0.5)], ..Answers::default() };
        let (_, skipped) = run_skipping(&odd);
        assert_eq!(skipped, [("mig".to_owned(), Skip::ExtraGpu { got: Gpus::whole(1), holds: four })]);
    }

    #[test]
    fn unknown_jobs_and_jobs_without_series_are_counted() {
        struct Listed;
        impl Jobs for Listed {
            fn lookup(&self, key: &str) -> Option<Expected> {
                (key == "busy").then(|| Expected { job_id: "busy".into(), gpus: Gpus::whole(1) })
            }
            fn for_each_running(&self, f: &mut dyn FnMut(&str, Gpus)) {
                f("busy", Gpus::whole(1));
                f("silent", Gpus::whole(4));
            }
        }
        let a = Answers { engine_active: vec![r("busy", "0", 0.5), r("stranger", "1", 0.5)], ..Answers::default() };
        let (mut c, mut skipped) = (Counters::default(), Vec::new());
        let ev = samples(&Config::default(), AT, &a, &Listed, &mut c, &mut skipped);
        assert_eq!(ev.len(), 1);
        assert_eq!((c.jobs_unknown, c.jobs_no_series), (1, 1));
        assert_eq!(skipped, [("silent".to_owned(), Skip::NoSeries)], "the job is named with its reason");
    }

    #[test]
    fn samples_survive_the_wire_format() {
        let a = Answers {
            engine_active: vec![r("multi", "2", 0.2), r("multi", "3", 0.6)],
            fb_used: vec![r("multi", "2", 1000.0), r("multi", "3", 3000.0)],
            fb_free: vec![r("multi", "2", 1000.0), r("multi", "3", 1000.0)],
            ..Answers::default()
        };
        let (ev, _) = run(&a);
        let line = serde_json::to_string(&ev[0]).unwrap();
        assert!(line.contains(r#""type":"job.sample""#) && line.contains(r#""source":"prometheus""#), "{line}");
        assert_eq!(bursar_model::decode_event(&line).unwrap(), ev[0], "what serve journals decodes to the same event");
    }

    #[test]
    fn job_level_throughput_is_summed_per_job_and_never_makes_a_sample_alone() {
        let mut cfg = Config::default();
        cfg.metrics.throughput = "train_tokens_per_second".into();
        cfg.metrics.progress = "train_tokens_total".into();
        cfg.metrics.unit = "tokens".into();
        // Job-level series carry the job label but no GPU label: one per rank.
        let job = |job: &str, rank: &str, v: f64| Reading {
            labels: vec![("hpc_job".into(), job.into()), ("rank".into(), rank.into())],
            value: v,
            sample_time: Some(AT.plus(Duration::seconds(-5))),
        };
        let mut stale = job("idle", "0", 10.0);
        stale.sample_time = Some(AT.plus(Duration::minutes(-10)));
        let a = Answers {
            engine_active: vec![r("multi", "2", 0.9), r("multi", "3", 0.9), r("idle", "1", 0.9)],
            throughput: vec![job("multi", "0", 2500.0), job("multi", "1", 2620.0), stale, job("busy", "0", 9.0)],
            progress: vec![job("multi", "0", 1e6), job("multi", "1", 2e6)],
            ..Answers::default()
        };
        let mut c = Counters::default();
        let ev = samples(&cfg, AT, &a, &jobs(), &mut c, &mut Vec::new());
        assert_eq!(ev.len(), 2, "busy has throughput but no utilisation: no sample");
        let multi = sample(&ev[1]);
        assert_eq!(
            (multi.throughput, multi.progress, multi.unit.as_deref()),
            (Some(5120.0), Some(3e6), Some("tokens/s"))
        );
        let w = multi.work().unwrap();
        assert_eq!((w.unit, w.rate, w.progress), ("tokens", Some(5120.0), Some(3e6)));
        let idle = sample(&ev[0]);
        assert_eq!(
            (idle.throughput, idle.unit.as_deref()),
            (None, None),
            "a stale series drops the field, not the sample"
        );
        assert_eq!(c.series_stale, 1);
        let line = serde_json::to_string(&ev[1]).unwrap();
        assert_eq!(bursar_model::decode_event(&line).unwrap(), ev[1], "the fields survive the wire format");
        // Off by default: no throughput fields at all.
        let (plain, _) = run(&a);
        assert!(plain.iter().all(|e| sample(e).throughput.is_none() && sample(e).unit.is_none()));
    }

    #[test]
    fn ids_depend_on_job_and_time_only() {
        let a = Answers { engine_active: vec![r("busy", "0", 0.5)], ..Answers::default() };
        let b = Answers { engine_active: vec![r("busy", "0", 0.9)], ..Answers::default() };
        assert_eq!(run(&a).0[0].id, run(&b).0[0].id);
        assert_eq!(event_id("prom", "j", AT.plus(Duration::seconds(60))), "prom-j-2025-12-01T09:32:00Z");
    }
}
