//! The events the watcher sends to `bursar serve`, built as `bursar-model` types and serialised by the
//! model (no JSON is assembled here).
//!
//! The watcher decides in terms of [`Report`]s (what happened to which Slurm job and run); this module
//! turns each into a v1 event. Ids are derived from what they describe, never random, so a resend
//! after a crash or a retry is the same input and serve's dedupe drops it. `<key>` is Slurm's id of
//! what the event is about (`17`, an array task `5_3`, or the array `5` itself) and `rN` the run (its
//! RestartCnt), so a watcher that lost its state file rebuilds the same ids for the same runs:
//!
//! | report | id |
//! |---|---|
//! | queued | `slurm-<cluster>-<key>-queued` |
//! | started, first run | `slurm-<cluster>-<key>-started` (as before per-run charging) |
//! | started, run N > 0 | `slurm-<cluster>-<key>-started-rN` |
//! | requeued after run N | `slurm-<cluster>-<key>-requeued-rN` |
//! | rerun of a finished job, as run N | `slurm-<cluster>-<key>-rerun-rN` |
//! | finished, run 0 | `slurm-<cluster>-<key>-finished` (as before) |
//! | finished, run N > 0 | `slurm-<cluster>-<key>-finished-rN` |
//! | replaced (re-admitted elsewhere) | `slurm-<cluster>-<key>-replaced-<new id>` |
//! | queued under the new id (after a replacement) | `slurm-<cluster>-<key>-queued-<new id>` |
//! | still waiting, Slurm's `Reason` changed (the Nth time) | `slurm-<cluster>-<key>-waits-N` (a `job.queued` with `reason`) |
//!
//! Every event carries `slurm_job_id` (the record's own numeric JobID, which is what the Prolog and
//! dcgm-exporter's `hpc_job` name) and `slurm_cluster` as added fields — v1 keeps fields a producer
//! adds — and, for arrays, `slurm_array_job_id` / `slurm_array_task_id`; for heterogeneous
//! components `slurm_het_job_id` / `slurm_het_offset`.

use bursar_model::{Event, EventKind, Extra, FinishStatus, Gpus, StartInfo, Timestamp};

use crate::queue::{EndStatus, Key};

pub use bursar_agent::record::add_field as field;

fn time(unix_secs: i64) -> Timestamp {
    Timestamp(unix_secs.saturating_mul(1000))
}

/// The fields naming a Slurm job on every event and action record: `slurm_job_id`, `slurm_cluster`.
pub fn slurm_fields(cluster: &str, slurm_id: u64) -> Extra {
    let mut extra = Extra::new();
    field(&mut extra, "slurm_job_id", slurm_id.to_string());
    field(&mut extra, "slurm_cluster", cluster);
    extra
}

/// What happened, in the watcher's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// The job exists in Slurm's queue (confirms the admission).
    Queued,
    /// The job is in Slurm's queue under the admission that replaced its first (a partition change
    /// the hook admitted again): a `job.queued` of the new id, whose event id names it (the first
    /// admission's `queued` has the job's plain one).
    Moved,
    /// Run `run` began, holding `gpus` (None: as admitted).
    Started {
        /// GPUs allocated to this run (MIG slices as their share: `2/7`).
        gpus: Option<Gpus>,
        /// For an array task: the array's bursar id.
        parent: Option<String>,
        /// Released outside bursar while it waited for approval, by this person.
        released_by: Option<String>,
    },
    /// Run `run` ended and the job waits again.
    Requeued,
    /// A finished job waits to run again (its owner requeued it): run `run` is the rerun.
    Rerun,
    /// The job reached a final state after run `run`.
    Finished {
        /// How.
        status: EndStatus,
        /// Slurm's own word (`TIMEOUT`, `NODE_FAIL`, `unknown` when the end was not seen).
        slurm_state: String,
        /// Raw wait status, when known.
        exit_code: Option<i64>,
    },
    /// The job was re-admitted under `by` (a partition change): this admission ends.
    Replaced {
        /// The new admission.
        by: String,
    },
    /// The job still waits, for a reason Slurm gives that changed since the last sent (the `n`th
    /// such change): another `job.queued`, with the reason.
    Waits {
        /// How many reasons were sent for the job so far, this one included.
        n: u32,
    },
}

/// One event to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// What it is about, in Slurm.
    pub key: Key,
    /// The record's own JobID.
    pub slurm_id: u64,
    /// bursar's id of it.
    pub bursar_id: String,
    /// The run (Slurm's RestartCnt).
    pub run: u32,
    /// When, Unix seconds (never in the future: the watcher clamps it to its clock).
    pub at: i64,
    /// What.
    pub what: What,
    /// The heterogeneous job (leader, offset) it is a component of.
    pub het: Option<(u64, u32)>,
    /// For `job.queued`: Slurm's reason the job waits (`Reason`: `Resources`, `Priority`, …).
    pub reason: Option<String>,
}

impl Report {
    /// The event's id (see the module's table).
    pub fn event_id(&self, cluster: &str) -> String {
        let key = self.key.event_part();
        let run = |name: &str| {
            if self.run == 0 {
                format!("slurm-{cluster}-{key}-{name}")
            } else {
                format!("slurm-{cluster}-{key}-{name}-r{}", self.run)
            }
        };
        match &self.what {
            What::Queued => format!("slurm-{cluster}-{key}-queued"),
            What::Moved => format!("slurm-{cluster}-{key}-queued-{}", self.bursar_id),
            What::Started { .. } => run("started"),
            What::Finished { .. } => run("finished"),
            What::Requeued => format!("slurm-{cluster}-{key}-requeued-r{}", self.run),
            What::Rerun => format!("slurm-{cluster}-{key}-rerun-r{}", self.run),
            What::Replaced { by } => format!("slurm-{cluster}-{key}-replaced-{by}"),
            What::Waits { n } => format!("slurm-{cluster}-{key}-waits-{n}"),
        }
    }

    /// The v1 event.
    pub fn to_event(&self, cluster: &str) -> Event {
        let mut extra = slurm_fields(cluster, self.slurm_id);
        match self.key {
            Key::Task(a, t) => {
                field(&mut extra, "slurm_array_job_id", a.to_string());
                field(&mut extra, "slurm_array_task_id", t.to_string());
            }
            Key::Array(a) => field(&mut extra, "slurm_array_job_id", a.to_string()),
            Key::Job(_) => {}
        }
        if let Some((leader, offset)) = self.het {
            field(&mut extra, "slurm_het_job_id", leader.to_string());
            field(&mut extra, "slurm_het_offset", offset);
        }
        if self.run > 0 {
            field(&mut extra, "slurm_restarts", self.run);
        }
        let job_id = self.bursar_id.clone();
        let kind = match &self.what {
            What::Queued | What::Moved | What::Waits { .. } => {
                if let Some(r) = &self.reason {
                    field(&mut extra, "reason", r);
                }
                EventKind::JobQueued { job_id }
            }
            What::Started { gpus, parent, released_by } => EventKind::JobStarted {
                job_id,
                info: StartInfo { gpus: *gpus, parent: parent.clone(), released_by: released_by.clone() },
            },
            What::Requeued | What::Rerun => EventKind::JobRequeued { job_id },
            What::Finished { status, slurm_state, exit_code } => {
                field(&mut extra, "slurm_state", slurm_state);
                if let Some(code) = exit_code {
                    // Slurm reports the raw wait status: the exit code is the high byte, a signal the low one.
                    field(&mut extra, "exit_code", code >> 8);
                    if code & 0x7f != 0 {
                        field(&mut extra, "signal", code & 0x7f);
                    }
                }
                EventKind::JobFinished { job_id, status: finish_status(*status) }
            }
            What::Replaced { by } => {
                field(&mut extra, "slurm_state", "replaced");
                field(&mut extra, "replaced_by", by);
                EventKind::JobFinished { job_id, status: FinishStatus::Cancelled }
            }
        };
        Event { id: self.event_id(cluster), time: time(self.at), kind, extra }
    }
}

fn finish_status(s: EndStatus) -> FinishStatus {
    match s {
        EndStatus::Succeeded => FinishStatus::Succeeded,
        EndStatus::Failed => FinishStatus::Failed,
        EndStatus::Cancelled => FinishStatus::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::decode_event;

    fn extra<'a>(e: &'a Extra, k: &str) -> Option<&'a str> {
        e.iter().find(|(n, _)| n == k).map(|(_, v)| v.get())
    }

    fn report(key: Key, run: u32, what: What) -> Report {
        Report { key, slurm_id: 17, bursar_id: "lab-abc".into(), run, at: 1_796_018_054, what, het: None, reason: None }
    }

    #[test]
    fn every_report_is_a_v1_event_with_both_ids() {
        let started =
            report(Key::Job(17), 0, What::Started { gpus: Some(Gpus::whole(8)), parent: None, released_by: None });
        let e = started.to_event("lab");
        assert_eq!(decode_event(&e.to_json()).unwrap(), e);
        assert_eq!(e.id, "slurm-lab-17-started", "the first run keeps the id of the watcher before runs");
        assert_eq!(e.time.to_string(), "2026-11-30T05:54:14Z");
        assert_eq!(extra(&e.extra, "slurm_job_id"), Some("\"17\""));
        assert!(matches!(&e.kind, EventKind::JobStarted { info, .. } if info.gpus == Some(Gpus::whole(8))));

        let again =
            report(Key::Job(17), 2, What::Started { gpus: None, parent: None, released_by: Some("root".into()) });
        assert_eq!(again.event_id("lab"), "slurm-lab-17-started-r2");
        assert_eq!(extra(&again.to_event("lab").extra, "slurm_restarts"), Some("2"));

        let f = report(
            Key::Job(17),
            0,
            What::Finished { status: EndStatus::Failed, slurm_state: "FAILED".into(), exit_code: Some(768) },
        );
        let fe = f.to_event("lab");
        assert_eq!(decode_event(&fe.to_json()).unwrap(), fe);
        assert_eq!((fe.id.as_str(), extra(&fe.extra, "exit_code")), ("slurm-lab-17-finished", Some("3")));
        let killed = report(
            Key::Job(18),
            1,
            What::Finished { status: EndStatus::Cancelled, slurm_state: "CANCELLED".into(), exit_code: Some(15) },
        );
        assert_eq!(extra(&killed.to_event("lab").extra, "signal"), Some("15"));
        assert_eq!(killed.event_id("lab"), "slurm-lab-18-finished-r1");

        for (what, id, ty) in [
            (What::Queued, "slurm-lab-17-queued", "job.queued"),
            (What::Requeued, "slurm-lab-17-requeued-r1", "job.requeued"),
            (What::Rerun, "slurm-lab-17-rerun-r1", "job.requeued"),
            (What::Replaced { by: "lab-new".into() }, "slurm-lab-17-replaced-lab-new", "job.finished"),
            (What::Moved, "slurm-lab-17-queued-lab-abc", "job.queued"),
        ] {
            let e = report(Key::Job(17), 1, what).to_event("lab");
            assert_eq!(decode_event(&e.to_json()).unwrap(), e);
            assert_eq!((e.id.as_str(), e.kind.type_name()), (id, ty));
        }
    }

    /// A run on MIG slices starts with its share, which the event carries as the string `"2/7"` (and
    /// a whole count still as an integer).
    #[test]
    fn a_run_on_mig_slices_starts_with_its_share() {
        let slices = Gpus::fraction(2, 7).unwrap();
        let e = report(Key::Job(17), 0, What::Started { gpus: Some(slices), parent: None, released_by: None })
            .to_event("lab");
        let json = e.to_json();
        assert!(json.contains(r#""gpus":"2/7""#), "{json}");
        assert_eq!(decode_event(&json).unwrap(), e);
        assert!(matches!(&e.kind, EventKind::JobStarted { info, .. } if info.gpus == Some(slices)));
        let whole =
            report(Key::Job(17), 0, What::Started { gpus: Some(Gpus::whole(1)), parent: None, released_by: None });
        assert!(whole.to_event("lab").to_json().contains(r#""gpus":1"#));
    }

    #[test]
    fn a_task_names_its_array_and_its_own_jobid() {
        let mut r = report(
            Key::Task(5, 3),
            0,
            What::Started { gpus: Some(Gpus::whole(2)), parent: Some("lab-abc".into()), released_by: None },
        );
        r.bursar_id = "lab-abc_3".into();
        r.slurm_id = 22;
        let e = r.to_event("lab");
        assert_eq!(decode_event(&e.to_json()).unwrap(), e);
        assert_eq!(e.id, "slurm-lab-5_3-started");
        assert_eq!(extra(&e.extra, "slurm_job_id"), Some("\"22\""));
        assert_eq!(extra(&e.extra, "slurm_array_job_id"), Some("\"5\""));
        assert_eq!(extra(&e.extra, "slurm_array_task_id"), Some("\"3\""));
        let parent = report(Key::Array(5), 0, What::Queued);
        assert_eq!(parent.event_id("lab"), "slurm-lab-5-queued");
        let mut het = report(Key::Job(52), 0, What::Queued);
        het.het = Some((51, 1));
        assert_eq!(extra(&het.to_event("lab").extra, "slurm_het_job_id"), Some("\"51\""));
    }
}
