//! The Microsoft Philly job log (`sampled_jobs.json`): a JSON array of finished jobs.
//!
//! Each record has `jobid`, `vc` (virtual cluster: a team), `user`, `status` (`Pass`, `Failed`,
//! `Killed`), `submitted_time`, `start_time`, `end_time` (`YYYY-MM-DD HH:MM:SS`, no zone: read as UTC),
//! `runtime_min` and `detail` (one entry per machine, each with its `gpus` list). Mapping:
//!
//! | v1 field | from |
//! |---|---|
//! | `job.id` | `jobid` |
//! | `job.project` | `vc` |
//! | `job.user` | `user` |
//! | `job.gpus` | total length of `detail[].gpus` |
//! | `job.nodes` | number of `detail` entries (at least 1) |
//! | `job.requested_hours` | `runtime_min / 60` (the trace has no requested limit; see the docs) |
//! | `job.finished.status` | `Pass` → succeeded, `Failed` → failed, `Killed` → cancelled |
//!
//! Everything else (queue, GPU type, stage, readiness, model size) is left out unless the caller asks for
//! a documented fill (see [`Fill`]). A record that lacks a field the mapping needs is skipped and counted.

use std::collections::HashSet;
use std::io::Read;

use bursar_model::{FinishStatus, JobSpec, Ready};
use serde_json::Value;

use crate::{ImportError, JobTrace, Report, parse_naive_utc};

/// Optional documented fills for fields the trace lacks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fill {
    /// Declare image, data and script ready on every job (the trace predates readiness declarations).
    pub assume_ready: bool,
}

/// Reads a Philly `sampled_jobs.json` (or any array of Philly job records).
pub fn read(reader: impl Read, fill: Fill, report: &mut Report) -> Result<Vec<JobTrace>, ImportError> {
    let records: Vec<Value> = serde_json::from_reader(reader)
        .map_err(|e| ImportError::Format(format!("not a Philly job log (a JSON array of jobs): {e}")))?;
    if fill.assume_ready {
        report.note("--assume-ready: every job declares image, data and script ready (the trace has no readiness)");
    }
    report.note("requested_hours = runtime_min / 60: Philly records no requested limit");
    let mut seen = HashSet::new();
    let mut jobs = Vec::with_capacity(records.len());
    for rec in &records {
        report.records += 1;
        match map(rec, fill) {
            Ok(job) => {
                if !seen.insert(job.spec.id.clone()) {
                    report.skip("duplicate `jobid`");
                    continue;
                }
                report.mapped += 1;
                jobs.push(job);
            }
            Err(reason) => report.skip(reason),
        }
    }
    Ok(jobs)
}

fn text<'a>(rec: &'a Value, key: &str) -> Option<&'a str> {
    rec.get(key).and_then(Value::as_str).filter(|s| !s.is_empty() && *s != "None")
}

fn map(rec: &Value, fill: Fill) -> Result<JobTrace, String> {
    if !rec.is_object() {
        return Err("record is not a JSON object".into());
    }
    let id = text(rec, "jobid").ok_or("no `jobid`")?;
    let vc = text(rec, "vc").ok_or("no `vc`")?;
    let user = text(rec, "user").unwrap_or_default();
    let submitted = text(rec, "submitted_time").and_then(parse_naive_utc).ok_or("no valid `submitted_time`")?;
    let started = text(rec, "start_time").map(|s| parse_naive_utc(s).ok_or("invalid `start_time`")).transpose()?;
    let ended = text(rec, "end_time").map(|s| parse_naive_utc(s).ok_or("invalid `end_time`")).transpose()?;
    let status = match text(rec, "status") {
        Some("Pass") => FinishStatus::Succeeded,
        Some("Failed") => FinishStatus::Failed,
        Some("Killed") => FinishStatus::Cancelled,
        Some(_) => return Err("unknown `status` (expected Pass, Failed or Killed)".into()),
        None => return Err("no `status`".into()),
    };
    let detail = rec.get("detail").and_then(Value::as_array).ok_or("no `detail` list")?;
    let mut gpus = 0u32;
    for machine in detail {
        let list = machine.get("gpus").and_then(Value::as_array).ok_or("`detail[]` entry without `gpus`")?;
        gpus = gpus.saturating_add(u32::try_from(list.len()).unwrap_or(u32::MAX));
    }
    if gpus == 0 {
        return Err("no GPUs in `detail`".into());
    }
    if let Some(s) = started
        && s < submitted
    {
        return Err("`start_time` before `submitted_time`".into());
    }
    if let (Some(s), Some(e)) = (started, ended)
        && e < s
    {
        return Err("`end_time` before `start_time`".into());
    }
    let runtime_h = match rec.get("runtime_min").and_then(Value::as_f64) {
        Some(m) if m.is_finite() && m >= 0.0 => m / 60.0,
        Some(_) => return Err("negative or invalid `runtime_min`".into()),
        None => match (started, ended) {
            (Some(s), Some(e)) => e.since(s).as_hours(),
            _ => return Err("no `runtime_min` and no start/end to derive it".into()),
        },
    };
    let ready = if fill.assume_ready { Ready::all() } else { Ready::default() };
    let spec = JobSpec {
        id: id.to_owned(),
        project: vc.to_owned(),
        user: user.to_owned(),
        gpus: gpus.into(),
        nodes: u32::try_from(detail.len()).unwrap_or(u32::MAX).max(1),
        requested_hours: runtime_h,
        ready,
        ..JobSpec::default()
    };
    let machine = detail.first().and_then(|m| m.get("ip")).and_then(Value::as_str).map(str::to_owned);
    Ok(JobTrace { spec, submitted, started, finished: ended.map(|e| (e, status)), machine })
}

/// Parses bytes as a Philly log and discards the result (for the fuzz target).
pub fn parse_bytes(bytes: &[u8]) -> Result<Vec<JobTrace>, ImportError> {
    read(bytes, Fill::default(), &mut Report::new("philly"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"[
      {"status":"Pass","vc":"ee9e8c","jobid":"application_1","submitted_time":"2017-10-07 01:11:39","user":"ce2f4c",
       "runtime_min":90.0,"start_time":"2017-10-07 01:13:30","end_time":"2017-10-07 02:43:30",
       "detail":[{"ip":"m412","gpus":["gpu0","gpu1"]},{"ip":"m413","gpus":["gpu0","gpu1","gpu2"]}]},
      {"status":"Killed","vc":"103959","jobid":"application_2","submitted_time":"2017-10-06 23:27:26","user":"bf8cc2",
       "runtime_min":1.0,"start_time":"2017-10-06 23:30:00","end_time":"2017-10-06 23:31:00","detail":[{"ip":"m1","gpus":["gpu2"]}]}
    ]"#;

    #[test]
    fn maps_vc_user_gpus_nodes_runtime_and_status() {
        let mut r = Report::new("philly");
        let jobs = read(TWO.as_bytes(), Fill::default(), &mut r).unwrap();
        assert_eq!((r.records, r.mapped, r.skipped_total()), (2, 2, 0));
        let j = &jobs[0];
        assert_eq!((j.spec.project.as_str(), j.spec.user.as_str()), ("ee9e8c", "ce2f4c"));
        assert_eq!((j.spec.gpus, j.spec.nodes), (5.into(), 2));
        assert!((j.spec.requested_hours - 1.5).abs() < 1e-9);
        assert_eq!(j.submitted.to_string(), "2017-10-07T01:11:39Z");
        assert_eq!(j.finished.map(|f| f.1), Some(FinishStatus::Succeeded));
        assert_eq!(jobs[1].finished.map(|f| f.1), Some(FinishStatus::Cancelled));
        assert_eq!(j.spec.ready, Ready::default(), "readiness is left out unless asked for");
        assert_eq!(j.machine.as_deref(), Some("m412"), "the first machine, for the throughput model");
    }

    #[test]
    fn assume_ready_is_explicit_and_noted() {
        let mut r = Report::new("philly");
        let jobs = read(TWO.as_bytes(), Fill { assume_ready: true }, &mut r).unwrap();
        assert_eq!(jobs[0].spec.ready.data, Some(true));
        assert!(r.notes.iter().any(|n| n.contains("assume-ready")));
    }

    #[test]
    fn bad_records_are_skipped_with_reasons() {
        let input = r#"[
          {"status":"Pass","vc":"a","jobid":"j1","submitted_time":"2017-10-07 01:00:00","runtime_min":5,
           "start_time":"2017-10-07 00:00:00","end_time":"2017-10-07 02:00:00","detail":[{"gpus":["g"]}]},
          {"status":"Weird","vc":"a","jobid":"j2","submitted_time":"2017-10-07 01:00:00","runtime_min":5,"detail":[{"gpus":["g"]}]},
          {"status":"Pass","vc":"a","jobid":"j3","submitted_time":"2017-10-07 01:00:00","runtime_min":5,"detail":[]},
          {"status":"Pass","jobid":"j4","submitted_time":"2017-10-07 01:00:00","runtime_min":5,"detail":[{"gpus":["g"]}]},
          {"status":"Pass","vc":"a","jobid":"j5","submitted_time":"2017-10-07 01:00:00","runtime_min":5,"detail":[{"gpus":["g"]}]},
          {"status":"Pass","vc":"a","jobid":"j5","submitted_time":"2017-10-07 01:00:00","runtime_min":5,"detail":[{"gpus":["g"]}]},
          7
        ]"#;
        let mut r = Report::new("philly");
        let jobs = read(input.as_bytes(), Fill::default(), &mut r).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(r.skipped.get("`start_time` before `submitted_time`"), Some(&1));
        assert_eq!(r.skipped.get("unknown `status` (expected Pass, Failed or Killed)"), Some(&1));
        assert_eq!(r.skipped.get("no GPUs in `detail`"), Some(&1));
        assert_eq!(r.skipped.get("no `vc`"), Some(&1));
        assert_eq!(r.skipped.get("duplicate `jobid`"), Some(&1));
        assert_eq!(r.skipped.get("record is not a JSON object"), Some(&1));
    }

    #[test]
    fn a_file_that_is_not_an_array_is_an_error() {
        let err = read("{\"a\":1}".as_bytes(), Fill::default(), &mut Report::new("philly")).unwrap_err();
        assert!(err.to_string().contains("not a Philly job log"), "{err}");
    }
}
