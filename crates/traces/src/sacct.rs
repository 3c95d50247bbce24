//! Slurm accounting history: `sacct --parsable2` output, so a site can replay its own jobs.
//!
//! Produce the input with exactly this field list (columns are found by name in the header, so the
//! order may differ, but the header must be there — do not pass `--noheader`):
//!
//! ```text
//! sacct --allusers --parsable2 --noconvert --starttime 2026-10-01 --endtime now \
//!   --format=JobID,User,Account,Partition,Submit,Start,End,Timelimit,State,NNodes,AllocTRES,ReqTRES
//! ```
//!
//! Mapping: `job.id` ← `JobID`; `job.project` ← `Account`; `job.user` ← `User`; `job.queue` ←
//! `Partition`; `job.nodes` ← `NNodes`; `job.gpus` ← `gres/gpu=N` in `AllocTRES` (or `ReqTRES` when
//! nothing was allocated), or the sum of the typed `gres/gpu:TYPE=N` counts, a MIG profile's units at
//! their share (`gres/gpu:1g.10gb=2` is `"2/7"`); `job.gpu_type` ← the first
//! `TYPE`; `job.requested_hours` ← `Timelimit` (`UNLIMITED`/`Partition_Limit`: the elapsed time
//! `End − Start`, noted in the report). Times are read as UTC (sacct prints local time without a zone: run
//! it with `TZ=UTC`). `State` → `job.finished`: `COMPLETED` → succeeded; `FAILED`, `TIMEOUT`,
//! `OUT_OF_MEMORY`, `NODE_FAIL`, `BOOT_FAIL`, `DEADLINE` → failed; `CANCELLED…`, `PREEMPTED` → cancelled;
//! `PENDING`, `RUNNING`, `SUSPENDED`, `REQUEUED`, `RESIZING` → no `job.finished`. Job steps (`123.batch`,
//! `123.0`, `123.extern`) and jobs without GPUs are skipped and counted.

use std::collections::HashSet;
use std::io::BufRead;

use bursar_model::gpus::slurm_tres_gpus;
use bursar_model::{FinishStatus, Gpus, JobSpec, mig_share};

use crate::{ImportError, JobTrace, Report, parse_naive_utc};

/// The `--format` list the importer is written for.
pub const FORMAT: &str = "JobID,User,Account,Partition,Submit,Start,End,Timelimit,State,NNodes,AllocTRES,ReqTRES";

const REQUIRED: [&str; 12] = [
    "JobID",
    "User",
    "Account",
    "Partition",
    "Submit",
    "Start",
    "End",
    "Timelimit",
    "State",
    "NNodes",
    "AllocTRES",
    "ReqTRES",
];

/// Reads `sacct --parsable2 --format=…` output (see the module docs for the field list).
pub fn read(reader: impl BufRead, report: &mut Report) -> Result<Vec<JobTrace>, ImportError> {
    let mut lines = reader.lines();
    let header = match lines.next() {
        Some(h) => h.map_err(|e| ImportError::io("cannot read the sacct output", e))?,
        None => return Err(ImportError::Format("the sacct output is empty".into())),
    };
    let names: Vec<&str> = header.trim_start_matches('\u{feff}').trim_end().split('|').collect();
    let mut idx = [0usize; REQUIRED.len()];
    for (slot, col) in idx.iter_mut().zip(REQUIRED) {
        *slot = names.iter().position(|n| *n == col).ok_or_else(|| {
            ImportError::Format(format!(
                "not `sacct --parsable2` output with the expected fields: no `{col}` column\n\
                 help: run sacct with --parsable2 --format={FORMAT}"
            ))
        })?;
    }
    report.note("sacct times read as UTC (run sacct with TZ=UTC)");
    let mut seen = HashSet::new();
    let mut jobs = Vec::new();
    for line in lines {
        let line = line.map_err(|e| ImportError::io("cannot read the sacct output", e))?;
        if line.trim().is_empty() {
            continue;
        }
        report.records += 1;
        let fields: Vec<&str> = line.trim_end_matches(['\r', '\n']).split('|').collect();
        if fields.len() != names.len() {
            report.skip(format!("wrong number of `|`-separated fields (expected {})", names.len()));
            continue;
        }
        let get = |i: usize| idx.get(i).and_then(|&c| fields.get(c)).map(|s| s.trim()).unwrap_or("");
        match map(&get, report) {
            Ok(job) => {
                if !seen.insert(job.spec.id.clone()) {
                    report.skip("duplicate `JobID`");
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

/// GPUs and GPU type from a TRES string such as `cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1`: the
/// GPUs as bursar counts them, a typed MIG profile (`gres/gpu:1g.10gb=2`) at its share
/// ([`bursar_model::gpus::slurm_tres_gpus`]), and the first typed entry's type.
pub fn tres_gpus(tres: &str) -> (Gpus, Option<String>) {
    let gpus = slurm_tres_gpus(tres, |ty| mig_share(ty).unwrap_or(Gpus::whole(1)), false).unwrap_or(Gpus::ZERO);
    let kind = tres
        .split(',')
        .filter_map(|item| item.split_once('=')?.0.strip_prefix("gres/gpu:"))
        .find(|t| !t.is_empty())
        .map(str::to_owned);
    (gpus, kind)
}

/// Hours of a Slurm time limit (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`); `None` for
/// `UNLIMITED`, `Partition_Limit` and anything unreadable.
pub fn timelimit_hours(s: &str) -> Option<f64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<u64> = rest.split(':').map(|p| p.parse::<u64>().ok()).collect::<Option<_>>()?;
    let secs = match (s.contains('-'), parts.as_slice()) {
        (false, [m]) => m * 60,
        (false, [m, sec]) => m * 60 + sec,
        (_, [h, m, sec]) => h * 3600 + m * 60 + sec,
        (true, [h]) => h * 3600,
        (true, [h, m]) => h * 3600 + m * 60,
        _ => return None,
    };
    Some((days * 86_400 + secs) as f64 / 3600.0)
}

fn map<'a>(get: &dyn Fn(usize) -> &'a str, report: &mut Report) -> Result<JobTrace, String> {
    let id = get(0);
    if id.is_empty() {
        return Err("empty `JobID`".into());
    }
    if id.contains('.') {
        return Err("job step (only job allocations are imported)".into());
    }
    let account = get(2);
    if account.is_empty() {
        return Err("empty `Account` (the project)".into());
    }
    let submitted = parse_naive_utc(get(4)).ok_or("no valid `Submit` time")?;
    let started = parse_naive_utc(get(5));
    let ended = parse_naive_utc(get(6));
    let state = get(8).split_whitespace().next().unwrap_or("");
    let status = match state {
        "COMPLETED" => Some(FinishStatus::Succeeded),
        "FAILED" | "TIMEOUT" | "OUT_OF_MEMORY" | "NODE_FAIL" | "BOOT_FAIL" | "DEADLINE" => Some(FinishStatus::Failed),
        "CANCELLED" | "PREEMPTED" => Some(FinishStatus::Cancelled),
        "PENDING" | "RUNNING" | "SUSPENDED" | "REQUEUED" | "RESIZING" => None,
        _ => return Err("unknown `State`".into()),
    };
    let (mut gpus, mut gpu_type) = tres_gpus(get(10));
    if gpus.is_zero() {
        (gpus, gpu_type) = tres_gpus(get(11));
    }
    if gpus.is_zero() {
        return Err("no GPUs in `AllocTRES` or `ReqTRES`".into());
    }
    let nodes = match get(9) {
        "" => 1,
        n => n.parse::<u32>().map_err(|_| "`NNodes` is not a count")?.max(1),
    };
    if let Some(s) = started
        && s < submitted
    {
        return Err("`Start` before `Submit`".into());
    }
    if let (Some(s), Some(e)) = (started, ended)
        && e < s
    {
        return Err("`End` before `Start`".into());
    }
    let requested_hours = match timelimit_hours(get(7)) {
        Some(h) => h,
        None => {
            report.note("a job without a readable `Timelimit` got requested_hours = End − Start (0 if it never ran)");
            match (started, ended) {
                (Some(s), Some(e)) => e.since(s).as_hours(),
                _ => 0.0,
            }
        }
    };
    let finished = match (status, ended) {
        (Some(st), Some(e)) => Some((e, st)),
        (Some(_), None) => return Err("finished `State` without an `End` time".into()),
        (None, _) => None,
    };
    let spec = JobSpec {
        id: id.to_owned(),
        project: account.to_owned(),
        user: get(1).to_owned(),
        queue: Some(get(3)).filter(|q| !q.is_empty()).map(str::to_owned),
        gpus,
        gpu_type,
        nodes,
        requested_hours,
        ..JobSpec::default()
    };
    Ok(JobTrace { spec, submitted, started, finished, machine: None })
}

/// Parses bytes as sacct output (for the fuzz target).
pub fn parse_bytes(bytes: &[u8]) -> Result<Vec<JobTrace>, ImportError> {
    read(bytes, &mut Report::new("sacct"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "JobID|User|Account|Partition|Submit|Start|End|Timelimit|State|NNodes|AllocTRES|ReqTRES\n";

    #[test]
    fn tres_and_timelimit_forms() {
        let whole = Gpus::whole;
        assert_eq!(tres_gpus("billing=8,cpu=8,gres/gpu=4,mem=64G,node=1"), (whole(4), None));
        assert_eq!(tres_gpus("cpu=8,gres/gpu:a100=2,gres/gpu:h100=2"), (whole(4), Some("a100".into())));
        assert_eq!(tres_gpus("cpu=8,gres/gpu:a100=2,gres/gpu=2"), (whole(2), Some("a100".into())));
        assert_eq!(
            tres_gpus("cpu=8,gres/gpu:a100=2,gres/gpu=4"),
            (whole(4), Some("a100".into())),
            "2 typed, 2 untyped"
        );
        assert_eq!(tres_gpus("cpu=8,mem=1G"), (Gpus::ZERO, None));
        // MIG slices, typed as the lab's gres.conf types them: their share; a slice is one in gres/gpu=N.
        let seventh = |n| Gpus::fraction(n, 7).unwrap();
        assert_eq!(tres_gpus("cpu=2,gres/gpu:1g.10gb=2,gres/gpu=2"), (seventh(2), Some("1g.10gb".into())));
        assert_eq!(tres_gpus("gres/gpu:a100_3g.40gb=1,gres/gpu=3"), (seventh(17), Some("a100_3g.40gb".into())));
        assert_eq!(tres_gpus("gres/gpu:1g.10gb=7"), (whole(1), Some("1g.10gb".into())), "seven slices are one GPU");
        assert_eq!(timelimit_hours("90"), Some(1.5));
        assert_eq!(timelimit_hours("30:00"), Some(0.5));
        assert_eq!(timelimit_hours("02:30:00"), Some(2.5));
        assert_eq!(timelimit_hours("1-00:00:00"), Some(24.0));
        assert_eq!(timelimit_hours("2-12"), Some(60.0));
        assert_eq!(timelimit_hours("UNLIMITED"), None);
        assert_eq!(timelimit_hours("Partition_Limit"), None);
    }

    #[test]
    fn maps_allocations_and_skips_steps_and_cpu_jobs() {
        let text = format!(
            "{HEAD}100|alice|nlp|gpu|2026-11-02T09:00:00|2026-11-02T09:05:00|2026-11-02T11:05:00|04:00:00|COMPLETED|1|cpu=8,gres/gpu:h200=8,mem=512G,node=1|cpu=8,gres/gpu=8\n\
             100.batch|||gpu|2026-11-02T09:05:00|2026-11-02T09:05:00|2026-11-02T11:05:00||COMPLETED|1|cpu=8,gres/gpu=8|\n\
             101|bob|cv|cpu|2026-11-02T09:00:00|2026-11-02T09:01:00|2026-11-02T09:02:00|10|FAILED|1|cpu=2,mem=1G|cpu=2\n\
             102|carol|cv|gpu|2026-11-02T10:00:00|Unknown|2026-11-02T10:30:00|UNLIMITED|CANCELLED by 1000|1||gres/gpu=2\n\
             103|dan|cv|gpu|2026-11-02T10:00:00|Unknown|Unknown|1-00:00:00|PENDING|2||gres/gpu=16\n"
        );
        let mut r = Report::new("sacct");
        let jobs = read(text.as_bytes(), &mut r).unwrap();
        assert_eq!((r.records, r.mapped), (5, 3));
        assert_eq!(r.skipped.get("job step (only job allocations are imported)"), Some(&1));
        assert_eq!(r.skipped.get("no GPUs in `AllocTRES` or `ReqTRES`"), Some(&1));
        let j = &jobs[0];
        assert_eq!((j.spec.project.as_str(), j.spec.queue.as_deref(), j.spec.gpus), ("nlp", Some("gpu"), 8.into()));
        assert_eq!(j.spec.gpu_type.as_deref(), Some("h200"));
        assert_eq!(j.spec.requested_hours, 4.0);
        assert_eq!(j.finished.map(|f| f.1), Some(FinishStatus::Succeeded));
        assert_eq!((jobs[1].started, jobs[1].finished.map(|f| f.1)), (None, Some(FinishStatus::Cancelled)));
        assert_eq!(jobs[1].spec.requested_hours, 0.0);
        assert_eq!((jobs[2].spec.gpus, jobs[2].spec.nodes, jobs[2].finished), (16.into(), 2, None));
    }

    #[test]
    fn missing_columns_name_the_format() {
        let err = read("JobID|User\n1|a\n".as_bytes(), &mut Report::new("sacct")).unwrap_err();
        assert!(err.to_string().contains(FORMAT), "{err}");
    }
}
