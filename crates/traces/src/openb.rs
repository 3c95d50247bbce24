//! Alibaba's OpenB GPU pod list (`openb_pod_list_default.csv`, `cluster-trace-gpu-v2023`).
//!
//! Columns (found by name in the header): `name`, `cpu_milli`, `memory_mib`, `num_gpu`, `gpu_milli`,
//! `gpu_spec`, `qos`, `pod_phase`, `creation_time`, `deletion_time`, `scheduled_time`. Times are seconds
//! relative to the start of the trace; they are placed after [`EPOCH`] (the trace publishes no absolute
//! date). Mapping:
//!
//! | v1 field | from |
//! |---|---|
//! | `job.id` | `name` |
//! | `job.project` | `qos` (`LS`, `BE`, `Burstable`, `Guaranteed`): the trace has no tenant column |
//! | `job.user` | left empty (the trace has no user) |
//! | `job.gpus` | `num_gpu`; pods with 0 GPUs are skipped |
//! | `job.gpu_type` | `gpu_spec` when not empty |
//! | `job.requested_hours` | `(deletion_time − scheduled_time) / 3600`; 0 for pods never scheduled |
//! | `job.gpu_milli` (extra field) | `gpu_milli`: the fraction of each GPU in thousandths |
//! | `job.started` | `scheduled_time` when not empty |
//! | `job.finished` | `deletion_time`; `Succeeded` → succeeded, `Failed` → failed, `Running`/`Pending` → cancelled (deleted while running or waiting) |

use std::collections::HashSet;
use std::io::BufRead;

use bursar_model::{FinishStatus, JobSpec, RawJson, Timestamp};

use crate::{ImportError, JobTrace, Report};

/// Where the trace's relative seconds are placed: 2023-01-01T00:00:00Z (the paper's year).
pub const EPOCH: Timestamp = Timestamp(1_672_531_200_000);

const COLUMNS: [&str; 9] = [
    "name",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// Reads an OpenB pod list.
pub fn read(reader: impl BufRead, report: &mut Report) -> Result<Vec<JobTrace>, ImportError> {
    let mut lines = reader.lines();
    let header = match lines.next() {
        Some(h) => h.map_err(|e| ImportError::io("cannot read the pod list", e))?,
        None => return Err(ImportError::Format("the pod list is empty".into())),
    };
    let names: Vec<&str> = header.trim_start_matches('\u{feff}').trim_end().split(',').collect();
    let mut idx = [0usize; COLUMNS.len()];
    for (slot, col) in idx.iter_mut().zip(COLUMNS) {
        *slot = names.iter().position(|n| *n == col).ok_or_else(|| {
            ImportError::Format(format!("not an OpenB pod list: no `{col}` column in the header `{header}`"))
        })?;
    }
    report.note(format!("OpenB times are relative seconds, placed after {EPOCH}"));
    report.note("project = qos class; user left empty (OpenB has neither tenant nor user)");
    let mut seen = HashSet::new();
    let mut jobs = Vec::new();
    for line in lines {
        let line = line.map_err(|e| ImportError::io("cannot read the pod list", e))?;
        if line.trim().is_empty() {
            continue;
        }
        report.records += 1;
        let fields: Vec<&str> = line.trim_end().split(',').collect();
        if fields.len() != names.len() {
            report.skip(format!("wrong number of fields (expected {})", names.len()));
            continue;
        }
        if line.contains('"') {
            report.skip("quoted CSV field (not used by OpenB, not supported)");
            continue;
        }
        let get = |i: usize| idx.get(i).and_then(|&c| fields.get(c)).map(|s| s.trim()).unwrap_or("");
        match map(&get) {
            Ok(job) => {
                if !seen.insert(job.spec.id.clone()) {
                    report.skip("duplicate `name`");
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

fn secs(s: &str, col: &str) -> Result<Option<Timestamp>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    let v: i64 = s.parse().map_err(|_| format!("`{col}` is not whole seconds"))?;
    if !(0..=10_000_000_000).contains(&v) {
        return Err(format!("`{col}` out of range"));
    }
    Ok(Some(Timestamp(EPOCH.millis() + v * 1000)))
}

fn map<'a>(get: &dyn Fn(usize) -> &'a str) -> Result<JobTrace, String> {
    let name = get(0);
    if name.is_empty() {
        return Err("empty `name`".into());
    }
    let gpus: u32 = get(1).parse().map_err(|_| "`num_gpu` is not a count")?;
    if gpus == 0 {
        return Err("no GPU requested (`num_gpu` = 0)".into());
    }
    let gpu_milli: u32 = get(2).parse().map_err(|_| "`gpu_milli` is not a count")?;
    let qos = get(4);
    if qos.is_empty() {
        return Err("empty `qos`".into());
    }
    let created = secs(get(6), "creation_time")?.ok_or("no `creation_time`")?;
    let deleted = secs(get(7), "deletion_time")?;
    let scheduled = secs(get(8), "scheduled_time")?;
    let status = match get(5) {
        "Succeeded" => FinishStatus::Succeeded,
        "Failed" => FinishStatus::Failed,
        "Running" | "Pending" => FinishStatus::Cancelled,
        _ => return Err("unknown `pod_phase`".into()),
    };
    if let Some(s) = scheduled
        && s < created
    {
        return Err("`scheduled_time` before `creation_time`".into());
    }
    if let Some(d) = deleted
        && d < scheduled.unwrap_or(created)
    {
        return Err("`deletion_time` before the pod was created or scheduled".into());
    }
    let requested_hours = match (scheduled, deleted) {
        (Some(s), Some(d)) => d.since(s).as_hours(),
        _ => 0.0,
    };
    let spec = JobSpec {
        id: name.to_owned(),
        project: qos.to_owned(),
        gpus: gpus.into(),
        gpu_type: Some(get(3)).filter(|s| !s.is_empty()).map(str::to_owned),
        nodes: 1,
        requested_hours,
        extra: raw_u32("gpu_milli", gpu_milli),
        ..JobSpec::default()
    };
    Ok(JobTrace { spec, submitted: created, started: scheduled, finished: deleted.map(|d| (d, status)), machine: None })
}

fn raw_u32(key: &str, v: u32) -> Vec<(String, RawJson)> {
    match serde_json::value::RawValue::from_string(v.to_string()) {
        Ok(raw) => vec![(key.to_owned(), RawJson(raw))],
        Err(_) => Vec::new(),
    }
}

/// Parses bytes as a pod list (for the fuzz target).
pub fn parse_bytes(bytes: &[u8]) -> Result<Vec<JobTrace>, ImportError> {
    read(bytes, &mut Report::new("openb"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    #[test]
    fn maps_pods_and_skips_cpu_only_ones() {
        let text = format!(
            "{HEAD}openb-pod-0000,12000,16384,1,1000,,LS,Running,0,7200,0\n\
             openb-pod-0001,6000,12288,2,460,V100M16,BE,Failed,100,3700,100\n\
             openb-pod-0002,6000,12288,0,0,,BE,Running,100,3700,100\n\
             openb-pod-0003,6000,12288,1,1000,,BE,Pending,200,300,\n"
        );
        let mut r = Report::new("openb");
        let jobs = read(text.as_bytes(), &mut r).unwrap();
        assert_eq!((r.records, r.mapped), (4, 3));
        assert_eq!(r.skipped.get("no GPU requested (`num_gpu` = 0)"), Some(&1));
        assert_eq!(jobs[0].spec.project, "LS");
        assert_eq!(jobs[0].submitted.to_string(), "2023-01-01T00:00:00Z");
        assert!((jobs[0].spec.requested_hours - 2.0).abs() < 1e-9);
        assert_eq!(jobs[0].finished.map(|f| f.1), Some(FinishStatus::Cancelled));
        assert_eq!(jobs[1].spec.gpu_type.as_deref(), Some("V100M16"));
        assert_eq!(jobs[1].finished.map(|f| f.1), Some(FinishStatus::Failed));
        assert_eq!(jobs[1].spec.extra[0].1.get(), "460");
        assert_eq!(jobs[2].started, None);
        assert_eq!(jobs[2].spec.requested_hours, 0.0);
    }

    #[test]
    fn a_header_without_the_columns_is_an_error_and_bad_rows_are_counted() {
        let err = read("a,b\n1,2\n".as_bytes(), &mut Report::new("openb")).unwrap_err();
        assert!(err.to_string().contains("no `name` column"), "{err}");
        let text = format!(
            "{HEAD}x,1,1,1\nopenb-pod-9,1,1,one,1000,,LS,Running,0,1,0\nopenb-pod-8,1,1,1,1000,,LS,Running,50,10,50\n"
        );
        let mut r = Report::new("openb");
        assert!(read(text.as_bytes(), &mut r).unwrap().is_empty());
        assert_eq!(r.skipped_total(), 3);
        assert_eq!(r.skipped.get("`num_gpu` is not a count"), Some(&1));
    }
}
