//! The Slurm commands the agents run, and what each costs.
//!
//! | call | command | when |
//! |---|---|---|
//! | [`Slurm::queue`] | `squeue -h --states=all -O <16 fields>` | every watcher poll: ~25 bytes a job |
//! | [`Slurm::details`] | `scontrol show job -d -o ID` per job | a job first seen; a run starting (GPUs) |
//! | [`Slurm::dump`] | `squeue --json --states=all` | more jobs new at once than [`bulk_threshold`]; a reading user text made ambiguous; the enforcer's last resort |
//! | [`Slurm::nodes`] | `scontrol -d show node -o` | every `--nodes-every` polls (default 10): the inventory |
//! | [`Slurm::rows_of`] | `squeue -h --states=all -j ID -O …` | the enforcer: one job's state before and after it acts |
//! | [`Slurm::cancel`], [`Slurm::release`] | `scancel`, `scontrol update` + `scontrol release` | the enforcer |
//!
//! Every command runs with `SLURM_TIME_FORMAT=%s`, so times are Unix seconds whatever the locale or
//! time zone of the host.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::detail::{self, Ambiguous, Details};
use crate::queue::{self, Row};
use crate::{Error, Result};

/// How many records are cheaper to read with one `squeue --json` of a queue of `queued` jobs than
/// with one `scontrol show job` each: on the lab a dump costs about 0.1 ms a job (1.05 s at 10,000,
/// 1.87 s at 20,000) and a record about 3.5 ms whatever the queue (20 in 0.06–0.07 s;
/// docs/perf/slurm.md, `integrations/slurm/bench-queue.sh`), so the break-even is about one record per
/// 35 jobs queued; never under 50.
pub fn bulk_threshold(queued: usize) -> usize {
    (queued / 35).max(50)
}

/// The Slurm commands the agents run (paths configurable, for sites that install Slurm elsewhere).
#[derive(Debug, Clone)]
pub struct Slurm {
    /// `squeue`.
    pub squeue: String,
    /// `scancel`.
    pub scancel: String,
    /// `scontrol`.
    pub scontrol: String,
}

impl Default for Slurm {
    fn default() -> Slurm {
        Slurm { squeue: "squeue".into(), scancel: "scancel".into(), scontrol: "scontrol".into() }
    }
}

/// What a command printed and how it exited.
#[derive(Debug, Clone)]
pub struct Output {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error, trimmed.
    pub stderr: String,
    /// Whether it exited 0.
    pub success: bool,
}

fn run_raw(program: &str, args: &[&str]) -> Result<Output> {
    let out = Command::new(program)
        .args(args)
        .env("SLURM_TIME_FORMAT", "%s")
        .output()
        .map_err(|e| Error::Command { command: format!("{program} {}", args.join(" ")), message: e.to_string() })?;
    Ok(Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        success: out.status.success(),
    })
}

fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = run_raw(program, args)?;
    if out.success {
        Ok(out.stdout)
    } else {
        let message = if out.stderr.is_empty() { "non-zero exit status".to_owned() } else { out.stderr };
        Err(Error::Command { command: format!("{program} {}", args.join(" ")), message })
    }
}

/// How [`Slurm::details`] read what it was asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetailsRead {
    /// By JobID.
    pub jobs: BTreeMap<u64, Details>,
    /// `scontrol` calls made.
    pub scontrol_calls: usize,
    /// Whether the whole queue was read as JSON (and why).
    pub dumped: Option<String>,
}

/// One question to [`Slurm::details`]: a JobID, and how many records `scontrol show job` lists for
/// it (more than one for an array's own JobID or a heterogeneous leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ask {
    /// The JobID.
    pub job_id: u64,
    /// Records expected.
    pub records: usize,
}

impl Ask {
    /// How many records `scontrol show job ID` lists for `id`, given the poll's rows: every record of
    /// the array whose own JobID it is, every component of the heterogeneous job it leads, else 1.
    pub fn for_row(rows: &[Row], id: u64) -> Ask {
        let array = rows.iter().filter(|r| r.array_job_id == Some(id)).count();
        let het = rows.iter().filter(|r| r.het_job_id == Some(id)).count();
        Ask { job_id: id, records: array.max(het).max(1) }
    }
}

impl Slurm {
    /// Every job slurmctld still knows (pending, running, and ended within `MinJobAge`), one row each.
    pub fn queue(&self) -> Result<Vec<Row>> {
        let text = run(&self.squeue, &["-h", "--states=all", "-O", queue::FORMAT])?;
        queue::parse_rows(&text)
    }

    /// The rows of one job, array task or whole array (`17`, `5_3`, `5`), read cheaply (squeue's
    /// text output honours `-j`, unlike its JSON). A job Slurm no longer knows has none.
    pub fn rows_of(&self, target: &str) -> Result<Vec<Row>> {
        let out = run_raw(&self.squeue, &["-h", "--states=all", "-j", target, "-O", queue::FORMAT])?;
        if !out.success {
            // squeue exits 1 with "Invalid job id specified" for a job it no longer knows.
            if out.stderr.contains("Invalid job id") {
                return Ok(Vec::new());
            }
            return Err(Error::Command { command: format!("{} -j {target}", self.squeue), message: out.stderr });
        }
        queue::parse_rows(&out.stdout)
    }

    /// The whole queue as JSON (every field, unambiguous; costly: see the module's table), read as
    /// squeue writes it ([`detail::read_json`]): the watcher never holds the whole document.
    pub fn dump(&self) -> Result<Vec<detail::JsonJob>> {
        use std::process::Stdio;
        let command = || format!("{} --json --states=all", self.squeue);
        let mut child = Command::new(&self.squeue)
            .args(["--json", "--states=all"])
            .env("SLURM_TIME_FORMAT", "%s")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Command { command: command(), message: e.to_string() })?;
        // stderr is read on its own thread so a chatty squeue cannot block on a full pipe.
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut e, &mut s);
                s
            })
        });
        let parsed = match child.stdout.take() {
            Some(out) => detail::read_json(out),
            None => Err(Error::Squeue("no output".into())),
        };
        if parsed.is_err() {
            // It may still be writing to a pipe nobody reads now.
            let _ = child.kill();
        }
        let status = child.wait().map_err(|e| Error::Command { command: command(), message: e.to_string() })?;
        let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default().trim().to_owned();
        if !status.success() {
            let message = if stderr.is_empty() { "non-zero exit status".to_owned() } else { stderr };
            return Err(Error::Command { command: command(), message });
        }
        parsed
    }

    /// The details of each asked JobID: one `scontrol show job -d -o` each, or one JSON dump of the
    /// queue (of `queued` jobs) when more than [`bulk_threshold`] are asked or a reading was
    /// [`Ambiguous`]. A job Slurm no longer lists is absent from the answer.
    pub fn details(&self, asks: &[Ask], queued: usize) -> Result<DetailsRead> {
        let mut read = DetailsRead::default();
        if asks.is_empty() {
            return Ok(read);
        }
        let mut doubtful: BTreeSet<u64> = BTreeSet::new();
        let mut why = String::new();
        if asks.len() > bulk_threshold(queued) {
            why = format!("{} jobs to read", asks.len());
            doubtful.extend(asks.iter().map(|a| a.job_id));
        } else {
            for ask in asks {
                let id = ask.job_id.to_string();
                read.scontrol_calls += 1;
                let out = run_raw(&self.scontrol, &["show", "job", "-d", "-o", &id])?;
                if !out.success {
                    if out.stderr.contains("Invalid job id") {
                        continue; // gone between the poll and now
                    }
                    return Err(Error::Command {
                        command: format!("{} show job -d -o {id}", self.scontrol),
                        message: out.stderr,
                    });
                }
                match detail::parse_scontrol(&out.stdout, ask.records) {
                    Ok(records) => {
                        for (job, rec) in records {
                            match rec {
                                Ok(d) => {
                                    read.jobs.insert(job, d);
                                }
                                Err(Ambiguous(w)) => {
                                    doubtful.insert(job);
                                    why = format!("job {job}: {w}");
                                }
                            }
                        }
                    }
                    Err(Ambiguous(w)) => {
                        doubtful.insert(ask.job_id);
                        why = format!("job {}: {w}", ask.job_id);
                    }
                }
            }
        }
        if !doubtful.is_empty() {
            for j in self.dump()? {
                if doubtful.contains(&j.job_id) {
                    read.jobs.insert(j.job_id, j.details());
                }
            }
            read.dumped = Some(why);
        }
        Ok(read)
    }

    /// The nodes (`scontrol -d show node -o`: one line a node, `-d` for `GresUsed`), for the
    /// inventory ([`crate::nodes`]).
    pub fn nodes(&self) -> Result<Vec<crate::nodes::Node>> {
        run(&self.scontrol, &["-d", "show", "node", "-o"]).map(|out| crate::nodes::parse_nodes(&out))
    }

    /// `scancel <target>`: exits 0 even when Slurm refused (22.05), so the caller checks the job.
    pub fn cancel(&self, target: &str) -> Result<Output> {
        run_raw(&self.scancel, &[target])
    }

    /// Clears the hold marker from the AdminComment, then `scontrol release <id>`.
    pub fn release(&self, job_id: u64, admin_comment: &str) -> Result<()> {
        let id = format!("JobId={job_id}");
        let comment = format!("AdminComment={}", detail::without_hold(admin_comment));
        run(&self.scontrol, &["update", &id, &comment])?;
        run(&self.scontrol, &["release", &job_id.to_string()]).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_dump_beats_many_reads_in_proportion_to_the_queue() {
        assert_eq!(bulk_threshold(0), 50);
        assert_eq!(bulk_threshold(10_000), 285);
        assert_eq!(bulk_threshold(20_000), 571);
    }

    #[test]
    fn an_array_or_a_het_leader_lists_every_record() {
        let rows = queue::parse_rows(include_str!("../tests/data/squeue-O-22.05.txt")).unwrap();
        assert_eq!(Ask::for_row(&rows, 46).records, 3, "the array's remainder and its two tasks");
        assert_eq!(Ask::for_row(&rows, 51).records, 2, "the heterogeneous leader and its component");
        assert_eq!(Ask::for_row(&rows, 47).records, 1, "a task alone");
        assert_eq!(Ask::for_row(&rows, 33).records, 1);
    }
}
