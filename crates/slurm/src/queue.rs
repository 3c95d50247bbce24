//! The cheap view of the queue the watcher polls: `squeue -h --states=all -O <fields>` with a `|`
//! after each field and `SLURM_TIME_FORMAT=%s` (times as Unix seconds), one [`Row`] per line.
//!
//! Only fields Slurm or its administrators write are asked for (ids, states, counts, times, node
//! and partition names), never a job's name or comment: a user could put a `|` or a newline in those
//! and forge a row. `Reason` comes last because a few reasons hold spaces (`job requeued in held
//! state`). A line that does not read as a row is an error for the whole poll, not a row silently
//! dropped (a dropped row would lose a start or an end).
//!
//! A row is keyed by what it *is* to bursar ([`Key`]): a job, one task of an array (by `(ArrayJobID,
//! ArrayTaskID)`, never by its JobID: the last task takes the array's own JobID), or the pending
//! remainder of an array (one record for all tasks not started yet, its ArrayTaskID a range such as
//! `3-9%3`).

use std::fmt;

use bursar_model::Gpus;

use crate::{Error, Result};

/// The `--Format` argument: each field followed by `|` (`field:|` = no width, `|` as suffix).
pub const FORMAT: &str = "JobID:|,ArrayJobID:|,ArrayTaskID:|,HetJobID:|,HetJobOffset:|,State:|,RestartCnt:|,\
StartTime:|,EndTime:|,NumNodes:|,tres-alloc:|,BatchHost:|,Partition:|,exit_code:|,UserName:|,Reason:|";

/// How many fields [`FORMAT`] asks for.
const FIELDS: usize = 16;

/// What a row is to bursar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// A job that is neither an array nor a task (heterogeneous components are jobs: each has its
    /// own JobID and its own admission).
    Job(u64),
    /// Task `.1` of array `.0`: Slurm's `123_4`.
    Task(u64, u32),
    /// Array `.0` itself: its pending remainder, and the parent of its tasks.
    Array(u64),
}

impl Key {
    /// Reads a key back from its [`Display`](fmt::Display) form (`17`, `5_3`, `5_*`).
    pub fn parse(s: &str) -> Option<Key> {
        if let Some(array) = s.strip_suffix("_*") {
            return array.parse().ok().map(Key::Array);
        }
        match s.split_once('_') {
            Some((a, t)) => Some(Key::Task(a.parse().ok()?, t.parse().ok()?)),
            None => s.parse().ok().map(Key::Job),
        }
    }

    /// What `scancel` takes to cancel exactly this (`17`, `5_3`, `5` for a whole array).
    pub fn scancel_target(&self) -> String {
        match self {
            Key::Job(id) | Key::Array(id) => id.to_string(),
            Key::Task(a, t) => format!("{a}_{t}"),
        }
    }

    /// The piece of an event id that names this (`17`, `5_3`, `5` for an array's own events).
    pub fn event_part(&self) -> String {
        self.scancel_target()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Job(id) => write!(f, "{id}"),
            Key::Task(a, t) => write!(f, "{a}_{t}"),
            Key::Array(a) => write!(f, "{a}_*"),
        }
    }
}

/// One line of the poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Slurm's JobID of this record (a task's own number).
    pub job_id: u64,
    /// The array it belongs to, if any.
    pub array_job_id: Option<u64>,
    /// Its task index, if it is one task of an array.
    pub array_task: Option<u32>,
    /// The pending tasks it stands for, if it is an array's remainder (`3-9%3`).
    pub array_pending: Option<String>,
    /// The heterogeneous job it is a component of (the leader's JobID), if any.
    pub het_job_id: Option<u64>,
    /// Its component index in that heterogeneous job.
    pub het_offset: Option<u32>,
    /// `PENDING`, `RUNNING`, `COMPLETING`, `SPECIAL_EXIT`, `COMPLETED`, …
    pub state: String,
    /// How many times Slurm requeued it: a new run begins after each.
    pub restarts: u32,
    /// StartTime, Unix seconds (for a pending job an *expected* time: never used as a real one).
    pub start: Option<i64>,
    /// EndTime, Unix seconds (likewise expected until the job ended).
    pub end: Option<i64>,
    /// Nodes allocated (or asked for, while pending).
    pub nodes: u32,
    /// `tres-alloc`: what the job holds (`gres/gpu=N` only where slurmdbd tracks GPUs).
    pub tres_alloc: String,
    /// The node running its batch script; `None` until it runs (`n/a`).
    pub batch_host: Option<String>,
    /// Its partition.
    pub partition: String,
    /// Raw wait status of its end (exit code × 256, or a signal).
    pub exit_code: i64,
    /// The owner.
    pub user: String,
    /// Why it is in its state (`JobHeldUser`, `BeginTime`, `job requeued in held state`, …).
    pub reason: String,
    /// Not read from the row: set by the watcher when Slurm's nodes have MIG GRES types. Then an
    /// untyped `gres/gpu=N` in `tres-alloc` that typed entries do not account for may be slices (each
    /// one unit), so [`Row::tres_gpus`] does not take it and the job's record is read instead.
    pub mig_pool: bool,
}

/// Where a row is in its life, as far as bursar cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting: pending for resources or a begin time, held, requeued, SPECIAL_EXIT. Not an end.
    Pending,
    /// Holding its allocation: running, suspended, completing, configuring.
    Running,
    /// One of Slurm's final states.
    Ended(EndStatus),
}

/// How a job ended, in the words of `job.finished`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndStatus {
    /// Exit code 0.
    Succeeded,
    /// Non-zero exit, time limit, node failure, out of memory, …
    Failed,
    /// Cancelled or preempted without requeue.
    Cancelled,
}

impl EndStatus {
    /// The `status` of `job.finished`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndStatus::Succeeded => "succeeded",
            EndStatus::Failed => "failed",
            EndStatus::Cancelled => "cancelled",
        }
    }
}

/// The phase of a Slurm state word (`squeue`'s long form; compact flags such as `CANCELLED+` or
/// `CANCELLED by 0` read by their first word).
pub fn phase_of(state: &str, exit_code: i64) -> Phase {
    let word = state.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or("");
    match word {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" | "SPECIAL_EXIT" => Phase::Pending,
        "RUNNING" | "SUSPENDED" | "COMPLETING" | "CONFIGURING" | "STAGE_OUT" | "SIGNALING" | "RESIZING" | "STOPPED" => {
            Phase::Running
        }
        "COMPLETED" if exit_code == 0 => Phase::Ended(EndStatus::Succeeded),
        "CANCELLED" | "PREEMPTED" | "REVOKED" => Phase::Ended(EndStatus::Cancelled),
        // COMPLETED with a non-zero code, FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL,
        // DEADLINE, and any state a later Slurm adds: ended, and not a success.
        _ => Phase::Ended(EndStatus::Failed),
    }
}

impl Row {
    /// What this row is to bursar.
    pub fn key(&self) -> Key {
        match (self.array_job_id, self.array_task) {
            (Some(a), Some(t)) => Key::Task(a, t),
            (Some(a), None) if self.array_pending.is_some() => Key::Array(a),
            _ => Key::Job(self.job_id),
        }
    }

    /// Where it is in its life.
    pub fn phase(&self) -> Phase {
        phase_of(&self.state, self.exit_code)
    }

    /// Whether this record ran (holds or held an allocation in its current run): Slurm names its
    /// batch host from allocation on, and shows `n/a` again once it is requeued or never ran.
    pub fn ran(&self) -> bool {
        self.batch_host.is_some()
    }

    /// GPUs in `tres-alloc`, where slurmdbd tracks them (`gres/gpu=8`, `gres/gpu:h100=8`; typed and
    /// untyped entries count once: the untyped one when present; MIG slices as their share). `None`
    /// also when [`Row::mig_pool`] is set and the untyped count is more than the typed entries say.
    pub fn tres_gpus(&self) -> Option<Gpus> {
        tres_gpus_in(&self.tres_alloc, self.mig_pool)
    }
}

/// GPUs in a TRES string (`cpu=64,mem=…,gres/gpu=8,gres/gpu:h100=8`); `None` when it names none.
///
/// The untyped `gres/gpu=N` counts every GPU unit the job holds, a MIG slice as one: where typed
/// entries name MIG profiles (`gres/gpu=3,gres/gpu:1g.10gb=2`, types tracked with
/// `AccountingStorageTRES=gres/gpu:1g.10gb`) those units count as their share and the rest of the
/// untyped count as whole GPUs (2/7 + 1 here). Without an untyped entry the typed ones are summed.
pub fn tres_gpus(tres: &str) -> Option<Gpus> {
    tres_gpus_in(tres, false)
}

/// [`tres_gpus`], and in a pool with MIG slices (`mig_pool`) `None` when the untyped count holds
/// units no typed entry names ([`bursar_model::gpus::slurm_tres_gpus`], with the site's shares).
pub fn tres_gpus_in(tres: &str, mig_pool: bool) -> Option<Gpus> {
    bursar_model::gpus::slurm_tres_gpus(tres, crate::gres_share, mig_pool)
}

fn bad(line_no: usize, line: &str, why: impl fmt::Display) -> Error {
    Error::Queue(format!("line {line_no}: {why}: `{}`", line.chars().take(200).collect::<String>()))
}

fn opt_id(s: &str) -> Option<&str> {
    match s {
        "" | "N/A" | "n/a" | "(null)" => None,
        s => Some(s),
    }
}

/// Reads the output of `squeue -h --states=all -O FORMAT` run with `SLURM_TIME_FORMAT=%s`.
pub fn parse_rows(text: &str) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        rows.push(parse_row(i + 1, line)?);
    }
    Ok(rows)
}

fn parse_row(line_no: usize, line: &str) -> Result<Row> {
    // Reason, the last field, may hold spaces (never a `|` Slurm writes; if one is there it stays in
    // the reason): split off the first FIELDS - 1 fields and keep the rest.
    let body = line.strip_suffix('|').ok_or_else(|| bad(line_no, line, "no `|` after the last field"))?;
    let f: Vec<&str> = body.splitn(FIELDS, '|').collect();
    if f.len() != FIELDS {
        return Err(bad(line_no, line, format!("{} fields, expected {FIELDS}", f.len())));
    }
    let num = |i: usize, what: &str| -> Result<u64> {
        f[i].trim().parse::<u64>().map_err(|_| bad(line_no, line, format!("{what} `{}` is not a number", f[i])))
    };
    let opt_num = |i: usize, what: &str| -> Result<Option<u64>> {
        match opt_id(f[i].trim()) {
            None => Ok(None),
            Some(s) => {
                s.parse::<u64>().map(Some).map_err(|_| bad(line_no, line, format!("{what} `{s}` is not a number")))
            }
        }
    };
    let time = |i: usize| -> Result<Option<i64>> {
        match opt_id(f[i].trim()) {
            None | Some("Unknown") | Some("None") => Ok(None),
            Some(s) => match s.parse::<i64>() {
                Ok(0) => Ok(None),
                Ok(t) => Ok(Some(t)),
                Err(_) => {
                    Err(bad(line_no, line, format!("time `{s}` is not Unix seconds (is SLURM_TIME_FORMAT=%s set?)")))
                }
            },
        }
    };
    let small =
        |v: u64, what: &str| u32::try_from(v).map_err(|_| bad(line_no, line, format!("{what} {v} is out of range")));

    let job_id = num(0, "JobID")?;
    let array_job_id = opt_num(1, "ArrayJobID")?;
    let (array_task, array_pending) = match opt_id(f[2].trim()) {
        None => (None, None),
        Some(s) => match s.parse::<u32>() {
            Ok(t) => (Some(t), None),
            Err(_) => (None, Some(s.to_owned())),
        },
    };
    // A job that is no array still has ArrayJobID = its own JobID: only a task or a remainder is one.
    let array_job_id = array_job_id.filter(|_| array_task.is_some() || array_pending.is_some());
    let het_job_id = opt_num(3, "HetJobID")?.filter(|&h| h != 0);
    let het_offset = match het_job_id {
        Some(_) => opt_num(4, "HetJobOffset")?.map(|v| small(v, "HetJobOffset")).transpose()?,
        None => None,
    };
    let state = f[5].trim().to_owned();
    if state.is_empty() {
        return Err(bad(line_no, line, "no State"));
    }
    let restarts = small(num(6, "RestartCnt")?, "RestartCnt")?;
    let nodes = match f[9].trim().split('-').next().unwrap_or("").parse::<u64>() {
        Ok(n) => small(n, "NumNodes")?,
        Err(_) => 0,
    };
    let exit_code = f[13].trim().parse::<i64>().map_err(|_| bad(line_no, line, "exit_code is not a number"))?;
    Ok(Row {
        job_id,
        array_job_id,
        array_task,
        array_pending,
        het_job_id,
        het_offset,
        state,
        restarts,
        start: time(7)?,
        end: time(8)?,
        nodes,
        tres_alloc: f[10].trim().to_owned(),
        batch_host: opt_id(f[11].trim()).map(str::to_owned),
        partition: f[12].trim().to_owned(),
        exit_code,
        user: f[14].trim().to_owned(),
        reason: f[15].trim().to_owned(),
        mig_pool: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real rows of Slurm 22.05.8 (two-node lab): an array's remainder and tasks, a het job's two
    /// components, held, requeued, SPECIAL_EXIT, failed (exit 3), timeout, cancelled before start.
    const ROWS: &str = include_str!("../tests/data/squeue-O-22.05.txt");

    fn row(rows: &[Row], id: u64) -> &Row {
        rows.iter().find(|r| r.job_id == id).unwrap_or_else(|| panic!("no row {id}"))
    }

    #[test]
    fn reads_real_rows() {
        let rows = parse_rows(ROWS).unwrap();
        assert_eq!(rows.len(), ROWS.lines().filter(|l| !l.is_empty()).count());
        // The array's remainder: one record for the pending tasks, throttled.
        let rest = row(&rows, 46);
        assert_eq!(rest.key(), Key::Array(46));
        assert_eq!(rest.array_pending.as_deref(), Some("2-5%2"));
        assert_eq!(rest.phase(), Phase::Pending);
        assert_eq!(rest.reason, "JobArrayTaskLimit");
        // A task: keyed by (array, task), not by its JobID.
        let task = row(&rows, 48);
        assert_eq!(task.key(), Key::Task(46, 1));
        assert_eq!(task.key().scancel_target(), "46_1");
        assert_eq!((task.phase(), task.ran()), (Phase::Running, true));
        assert_eq!(task.start, Some(1_796_417_623));
        // A plain job: ArrayJobID is its own id, but it is no array.
        let plain = row(&rows, 33);
        assert_eq!((plain.key(), plain.array_job_id), (Key::Job(33), None));
        // Heterogeneous components: jobs of their own, with the leader named.
        let het = row(&rows, 52);
        assert_eq!((het.key(), het.het_job_id, het.het_offset), (Key::Job(52), Some(51), Some(1)));
        assert_eq!(row(&rows, 33).het_job_id, None);
        // Requeued: pending again with RestartCnt 1 and an *expected* start in the future.
        let requeued = row(&rows, 34);
        assert_eq!((requeued.phase(), requeued.restarts, requeued.ran()), (Phase::Pending, 1, false));
        // SPECIAL_EXIT and requeue-hold are waits, not ends; the reason has spaces.
        let special = row(&rows, 36);
        assert_eq!((special.state.as_str(), special.phase()), ("SPECIAL_EXIT", Phase::Pending));
        assert_eq!(special.reason, "job requeued in held state");
        let failed = row(&rows, 40);
        assert_eq!((failed.phase(), failed.exit_code), (Phase::Ended(EndStatus::Failed), 768));
        assert_eq!(row(&rows, 41).phase(), Phase::Ended(EndStatus::Failed), "TIMEOUT");
        let cancelled_pending = row(&rows, 39);
        assert_eq!((cancelled_pending.phase(), cancelled_pending.ran()), (Phase::Ended(EndStatus::Cancelled), false));
        // Exclusive: 64 CPUs, and no GPU in tres-alloc without slurmdbd.
        let exclusive = row(&rows, 42);
        assert!(exclusive.tres_alloc.starts_with("cpu=64,"));
        assert_eq!(exclusive.tres_gpus(), None);
    }

    #[test]
    fn gpus_in_tres_alloc_where_slurmdbd_tracks_them() {
        let w = |n| Some(Gpus::whole(n));
        assert_eq!(tres_gpus("cpu=2,mem=2000M,node=2,billing=2,gres/gpu=4,gres/gpu:h100=4"), w(4));
        assert_eq!(tres_gpus("cpu=2,gres/gpu:h100=4,gres/gpu:a100=2"), w(6));
        assert_eq!(tres_gpus("cpu=1,mem=1000M,node=1,billing=1"), None);
        assert_eq!(tres_gpus(""), None);
    }

    /// MIG slices in `tres-alloc` (issue 55): the untyped count holds each slice as one unit; the
    /// typed entries say which are slices.
    #[test]
    fn mig_slices_in_tres_alloc_are_their_share() {
        let f = |n, d| Gpus::fraction(n, d);
        assert_eq!(tres_gpus("cpu=1,mem=1000M,node=1,billing=1,gres/gpu=2,gres/gpu:1g.10gb=2"), f(2, 7));
        assert_eq!(tres_gpus("cpu=1,gres/gpu:a100_1g.10gb=2"), f(2, 7), "typed only");
        assert_eq!(tres_gpus("cpu=1,gres/gpu=3,gres/gpu:1g.10gb=2"), f(9, 7), "one untracked whole GPU beside");
        assert_eq!(tres_gpus("cpu=1,gres/gpu=5,gres/gpu:1g.10gb=4,gres/gpu:3g.40gb=1"), f(7, 7));
        assert_eq!(tres_gpus("cpu=1,gres/gpu=2"), Some(Gpus::whole(2)), "untracked types: as whole GPUs");
        // Where the nodes have slices, an untyped count the typed entries do not cover is no answer
        // (the record is read); one they cover, or typed entries alone, still are.
        assert_eq!(tres_gpus_in("cpu=1,gres/gpu=2", true), None);
        assert_eq!(tres_gpus_in("cpu=1,gres/gpu=3,gres/gpu:1g.10gb=2", true), None);
        assert_eq!(tres_gpus_in("cpu=1,gres/gpu=3,gres/gpu:1g.10gb=2,gres/gpu:h100=1", true), f(9, 7));
        assert_eq!(tres_gpus_in("cpu=1,gres/gpu:1g.10gb=2", true), f(2, 7));
        assert_eq!(tres_gpus_in("cpu=1,mem=1000M", true), None);
        let mut row = parse_rows("17|17|N/A|N/A|N/A|RUNNING|0|1|2|1|cpu=1,gres/gpu=2|n1|mig|0|root|None|\n").unwrap();
        assert_eq!(row[0].tres_gpus(), Some(Gpus::whole(2)));
        row[0].mig_pool = true;
        assert_eq!(row[0].tres_gpus(), None, "read from the record instead");
    }

    #[test]
    fn keys_round_trip() {
        for k in [Key::Job(17), Key::Task(5, 3), Key::Array(5)] {
            assert_eq!(Key::parse(&k.to_string()), Some(k));
        }
        assert_eq!(Key::Array(5).scancel_target(), "5");
        assert_eq!(Key::parse("x"), None);
    }

    #[test]
    fn a_line_that_is_no_row_fails_the_poll() {
        for bad in [
            "squeue: error: Invalid user",
            "17|17|N/A|N/A|N/A|RUNNING|0|1|2|1|cpu=1|n1|debug|0|root|None",
            "x|17|N/A|N/A|N/A|RUNNING|0|1|2|1|cpu=1|n1|debug|0|root|None|",
            "17|17|N/A|N/A|N/A|RUNNING|0|2026-12-04T20:44:15|2|1|cpu=1|n1|debug|0|root|None|",
            "17|17|N/A|N/A|N/A||0|1|2|1|cpu=1|n1|debug|0|root|None|",
        ] {
            assert!(matches!(parse_rows(bad), Err(Error::Queue(_))), "{bad}");
        }
        assert_eq!(parse_rows("\n").unwrap(), vec![]);
        // A reason holding a `|` stays in the reason.
        let r = parse_rows("17|17|N/A|N/A|N/A|PENDING|0|N/A|N/A|1|cpu=1|n/a|debug|0|root|a|b|\n").unwrap();
        assert_eq!(r[0].reason, "a|b");
    }

    #[test]
    fn phases_of_every_state() {
        use EndStatus::*;
        for (s, p) in [
            ("PENDING", Phase::Pending),
            ("REQUEUED", Phase::Pending),
            ("REQUEUE_HOLD", Phase::Pending),
            ("SPECIAL_EXIT", Phase::Pending),
            ("RUNNING", Phase::Running),
            ("SUSPENDED", Phase::Running),
            ("COMPLETING", Phase::Running),
            ("CONFIGURING", Phase::Running),
            ("COMPLETED", Phase::Ended(Succeeded)),
            ("CANCELLED", Phase::Ended(Cancelled)),
            ("CANCELLED+", Phase::Ended(Cancelled)),
            ("PREEMPTED", Phase::Ended(Cancelled)),
            ("NODE_FAIL", Phase::Ended(Failed)),
            ("TIMEOUT", Phase::Ended(Failed)),
            ("OUT_OF_MEMORY", Phase::Ended(Failed)),
            ("BOOT_FAIL", Phase::Ended(Failed)),
            ("DEADLINE", Phase::Ended(Failed)),
            ("FAILED", Phase::Ended(Failed)),
        ] {
            assert_eq!(phase_of(s, 0), p, "{s}");
        }
        assert_eq!(phase_of("COMPLETED", 256), Phase::Ended(Failed));
    }
}
