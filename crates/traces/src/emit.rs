//! Writing imported jobs as v1 events, merged into one stream sorted by event time.
//!
//! Each job yields, in its own order: `job.submitted` at submission, `job.started` at start, one
//! `job.sample` every sampling interval while it runs (only with a utilisation series), and
//! `job.finished` at its end. The jobs' sequences are merged with a heap keyed by
//! `(time, job's position in the input, position in the job's sequence)`, so the output is sorted by
//! time, ties keep input order (a stable sort), and memory is one heap entry per job however many samples
//! are written. Event ids are `<job id>/submitted`, `<job id>/started`, `<job id>/u<k>`,
//! `<job id>/finished`: unique as long as job ids are, and the same on every run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

use bursar_model::{Event, EventKind, Sample, Timestamp};

use crate::throughput::{self, ThroughputModel};
use crate::util::{Assignment, UtilSeries};
use crate::{ImportError, JobTrace, Report};

/// How [`emit`] writes.
#[derive(Debug, Clone, Copy)]
pub struct EmitOptions<'a> {
    /// Utilisation series to attach as `job.sample` events, if any.
    pub util: Option<&'a UtilSeries>,
    /// Seed of the job-to-series rule.
    pub seed: u64,
    /// Seconds between two samples of a running job.
    pub sample_every_secs: i64,
    /// Attach modelled throughput to each sample ([`ThroughputModel`]).
    pub throughput: Option<ThroughputModel>,
}

impl Default for EmitOptions<'_> {
    fn default() -> Self {
        EmitOptions { util: None, seed: 0, sample_every_secs: 600, throughput: None }
    }
}

const STEP_SUBMIT: u32 = 0;
const STEP_START: u32 = 1;
const STEP_FIRST_SAMPLE: u32 = 2;
const STEP_FINISH: u32 = u32::MAX;

struct Cursor {
    util: Option<Assignment>,
    samples: u32,
    /// The job's modelled rate at full utilisation.
    peak: Option<f64>,
}

fn sample_count(job: &JobTrace, every_ms: i64) -> u32 {
    match (job.started, job.finished) {
        (Some(s), Some((e, _))) if every_ms > 0 => {
            let run = e.millis() - s.millis();
            // Samples at start + k·every for k = 1.. while strictly before the end.
            u32::try_from(((run - 1).max(0)) / every_ms).unwrap_or(u32::MAX - 3)
        }
        _ => 0,
    }
}

fn step_time(job: &JobTrace, step: u32, every_ms: i64) -> Option<Timestamp> {
    match step {
        STEP_SUBMIT => Some(job.submitted),
        STEP_START => job.started,
        STEP_FINISH => job.finished.map(|f| f.0),
        k => job.started.map(|s| Timestamp(s.millis() + i64::from(k - STEP_FIRST_SAMPLE + 1) * every_ms)),
    }
}

fn next_step(job: &JobTrace, cur: &Cursor, step: u32) -> Option<u32> {
    let mut s = step;
    loop {
        s = match s {
            STEP_FINISH => return None,
            STEP_SUBMIT => STEP_START,
            STEP_START => STEP_FIRST_SAMPLE,
            k if k >= STEP_FIRST_SAMPLE && k - STEP_FIRST_SAMPLE + 1 < cur.samples => k + 1,
            _ => STEP_FINISH,
        };
        let present = match s {
            STEP_START => job.started.is_some(),
            STEP_FINISH => job.finished.is_some(),
            _ => cur.samples > 0,
        };
        if present {
            return Some(s);
        }
    }
}

/// Writes `jobs` as v1 events sorted by time; counts events in `report`.
pub fn emit(
    jobs: &[JobTrace],
    opts: &EmitOptions<'_>,
    out: &mut dyn Write,
    report: &mut Report,
) -> Result<(), ImportError> {
    let every_ms = opts.sample_every_secs.max(1) * 1000;
    let mut cursors = Vec::with_capacity(jobs.len());
    let mut heap = BinaryHeap::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        let util = opts.util.and_then(|u| u.assign(opts.seed, &job.spec.id));
        let samples = if util.is_some() { sample_count(job, every_ms) } else { 0 };
        if samples > 0 {
            report.util_jobs += 1;
        }
        let peak = opts.throughput.map(|m| m.peak(&job.spec));
        cursors.push(Cursor { util, samples, peak });
        heap.push(Reverse((job.submitted.millis(), i, STEP_SUBMIT)));
    }
    let mut line = String::new();
    while let Some(Reverse((_, i, step))) = heap.pop() {
        let (Some(job), Some(cur)) = (jobs.get(i), cursors.get(i)) else { continue };
        let id = &job.spec.id;
        let Some(time) = step_time(job, step, every_ms) else { continue };
        let (eid, kind) = match step {
            STEP_SUBMIT => (format!("{id}/submitted"), EventKind::JobSubmitted(Box::new(job.spec.clone()))),
            STEP_START => {
                (format!("{id}/started"), EventKind::JobStarted { job_id: id.clone(), info: Default::default() })
            }
            STEP_FINISH => {
                let status = job.finished.map(|f| f.1).unwrap_or(bursar_model::FinishStatus::Cancelled);
                (format!("{id}/finished"), EventKind::JobFinished { job_id: id.clone(), status })
            }
            k => {
                let n = k - STEP_FIRST_SAMPLE + 1;
                let elapsed = i64::from(n) * every_ms / 1000;
                let gpu_util = match (opts.util, cur.util) {
                    (Some(u), Some(a)) => u.value_at(a, elapsed),
                    _ => 0.0,
                };
                report.samples += 1;
                let (throughput, unit) = match (opts.throughput, cur.peak) {
                    (Some(m), Some(peak)) => {
                        (Some(m.sample(&job.spec, peak, n, gpu_util)), Some(throughput::UNIT.to_owned()))
                    }
                    _ => (None, None),
                };
                (
                    format!("{id}/u{n}"),
                    EventKind::JobSample(Sample {
                        job_id: id.clone(),
                        gpu_util,
                        throughput,
                        unit,
                        ..Sample::default()
                    }),
                )
            }
        };
        let event = Event { id: eid, time, kind, extra: Vec::new() };
        line.clear();
        line.push_str(&event.to_json());
        line.push('\n');
        out.write_all(line.as_bytes()).map_err(|e| ImportError::io("cannot write events", e))?;
        report.events += 1;
        if let Some(next) = next_step(job, cur, step)
            && let Some(t) = step_time(job, next, every_ms)
        {
            heap.push(Reverse((t.millis(), i, next)));
        }
    }
    out.flush().map_err(|e| ImportError::io("cannot write events", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::{FinishStatus, JobSpec, decode_event};

    fn job(id: &str, sub: i64, start: Option<i64>, end: Option<i64>) -> JobTrace {
        JobTrace {
            spec: JobSpec { id: id.into(), project: "p".into(), gpus: 1.into(), nodes: 1, ..JobSpec::default() },
            submitted: Timestamp(sub * 1000),
            started: start.map(|s| Timestamp(s * 1000)),
            finished: end.map(|e| (Timestamp(e * 1000), FinishStatus::Succeeded)),
            machine: None,
        }
    }

    fn run(jobs: &[JobTrace], opts: &EmitOptions<'_>) -> Vec<Event> {
        let mut buf = Vec::new();
        let mut r = Report::new("t");
        emit(jobs, opts, &mut buf, &mut r).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let events: Vec<Event> = text.lines().map(|l| decode_event(l).unwrap()).collect();
        assert_eq!(events.len() as u64, r.events);
        events
    }

    #[test]
    fn interleaves_jobs_in_time_order_with_stable_ties() {
        let jobs = [job("a", 0, Some(100), Some(300)), job("b", 50, Some(100), Some(200)), job("c", 60, None, None)];
        let ev = run(&jobs, &EmitOptions::default());
        let ids: Vec<&str> = ev.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            ["a/submitted", "b/submitted", "c/submitted", "a/started", "b/started", "b/finished", "a/finished"]
        );
        assert!(ev.windows(2).all(|w| w[0].time <= w[1].time));
    }

    #[test]
    fn samples_fall_strictly_inside_the_run_and_read_the_series() {
        let mut csv = String::from("value,timestamp_anon,container_ip\n");
        for i in 0..120 {
            csv.push_str(&format!("{},{},c\n", if i < 60 { 100 } else { 0 }, i * 60));
        }
        let u = UtilSeries::from_csv(csv.as_bytes(), "t").unwrap();
        let jobs = [job("a", 0, Some(0), Some(3600))];
        let opts = EmitOptions { util: Some(&u), seed: 3, sample_every_secs: 600, throughput: None };
        let ev = run(&jobs, &opts);
        let samples: Vec<&Event> = ev.iter().filter(|e| matches!(e.kind, EventKind::JobSample(_))).collect();
        assert_eq!(samples.len(), 5, "samples at 10, 20, 30, 40, 50 min");
        assert!(samples.iter().all(|e| e.time.millis() > 0 && e.time.millis() < 3_600_000));
        let a = u.assign(3, "a").unwrap();
        for (k, e) in samples.iter().enumerate() {
            let EventKind::JobSample(Sample { gpu_util, .. }) = e.kind else { unreachable!() };
            assert_eq!(gpu_util, u.value_at(a, (k as i64 + 1) * 600));
        }
        assert_eq!(ev.last().map(|e| e.id.as_str()), Some("a/finished"));

        // With the throughput model, each sample also carries the modelled rate at its utilisation.
        let m = ThroughputModel { seed: 3 };
        let with = EmitOptions { throughput: Some(m), ..opts };
        let ev = run(&jobs, &with);
        let peak = m.peak(&jobs[0].spec);
        let samples: Vec<&Sample> = ev
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::JobSample(s) => Some(s),
                _ => None,
            })
            .collect();
        assert_eq!(samples.len(), 5);
        for (k, s) in samples.iter().enumerate() {
            assert_eq!(s.throughput, Some(m.sample(&jobs[0].spec, peak, k as u32 + 1, s.gpu_util)));
            assert_eq!(s.unit.as_deref(), Some("modelled-tokens/s"));
        }
        assert!(samples.iter().any(|s| s.throughput.unwrap_or(0.0) > 0.0));
    }
}
