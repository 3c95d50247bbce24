//! The v1 events and action records the agents send to `bursar serve`, built as `bursar-model`
//! types and serialised by the model (no JSON is assembled here).
//!
//! Ids are derived from what they describe, never random, so a resend after a crash or a retry is
//! the same input and serve's dedupe drops it:
//! - `slurm-<cluster>-<slurm id>-started`, `slurm-<cluster>-<slurm id>-finished` (watch);
//! - `enforce-<decision id>` (enforce).
//!
//! Every job event carries `slurm_job_id` (and `slurm_cluster`) as added fields — v1 keeps fields a
//! producer adds — which is how Slurm's job id reaches the audit log next to bursar's.
//!
//! An enforcement is an action record (`action.executed` or `action.failed`, see
//! `docs/wire-format.md`): it names the decision it carried out, is deduplicated and journaled, and
//! reaches no policy.

use bursar_model::{Action, ActionOutcome, Event, EventKind, Extra, FinishStatus, RawJson, Timestamp};
use serde_json::value::RawValue;

use crate::slurm::EndStatus;

fn time(unix_secs: i64) -> Timestamp {
    Timestamp(unix_secs.saturating_mul(1000))
}

/// A producer's added field, serialised from a typed value.
fn field(extra: &mut Extra, name: &str, value: impl serde::Serialize) {
    if let Ok(text) = serde_json::to_string(&value)
        && let Ok(raw) = RawValue::from_string(text)
    {
        extra.push((name.to_owned(), RawJson(raw)));
    }
}

fn slurm_fields(cluster: &str, slurm_id: u64) -> Extra {
    let mut extra = Extra::new();
    field(&mut extra, "slurm_job_id", slurm_id.to_string());
    field(&mut extra, "slurm_cluster", cluster);
    extra
}

/// `job.started` for Slurm job `slurm_id`, which bursar knows as `bursar_id`.
pub fn started(cluster: &str, slurm_id: u64, bursar_id: &str, at_unix: i64) -> Event {
    Event {
        id: format!("slurm-{cluster}-{slurm_id}-started"),
        time: time(at_unix),
        kind: EventKind::JobStarted { job_id: bursar_id.to_owned() },
        extra: slurm_fields(cluster, slurm_id),
    }
}

/// `job.finished` for Slurm job `slurm_id`; `slurm_state` is Slurm's own word (`TIMEOUT`, `unknown`, …).
pub fn finished(
    cluster: &str,
    slurm_id: u64,
    bursar_id: &str,
    at_unix: i64,
    status: EndStatus,
    slurm_state: &str,
    exit_code: Option<i64>,
) -> Event {
    let mut extra = slurm_fields(cluster, slurm_id);
    field(&mut extra, "slurm_state", slurm_state);
    if let Some(code) = exit_code {
        // Slurm reports the raw wait status: the exit code is the high byte, a signal the low one.
        field(&mut extra, "exit_code", code >> 8);
        if code & 0x7f != 0 {
            field(&mut extra, "signal", code & 0x7f);
        }
    }
    let status = match status {
        EndStatus::Succeeded => FinishStatus::Succeeded,
        EndStatus::Failed => FinishStatus::Failed,
        EndStatus::Cancelled => FinishStatus::Cancelled,
    };
    Event {
        id: format!("slurm-{cluster}-{slurm_id}-finished"),
        time: time(at_unix),
        kind: EventKind::JobFinished { job_id: bursar_id.to_owned(), status },
        extra,
    }
}

/// What became of one decision that asked something of Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The decision's id.
    pub decision_id: String,
    /// The decision's position in the stream.
    pub decision_seq: u64,
    /// `reclaim`, `allow`, `deny`.
    pub decision: String,
    /// bursar's job id.
    pub job_id: String,
    /// Slurm's job id, when the job was found.
    pub slurm_job_id: Option<u64>,
    /// `scancel`, `scontrol release`, or `none`.
    pub action: String,
    /// `done`, `failed` or `skipped`.
    pub outcome: Outcome,
    /// A sentence: what was done, or why it failed or was not needed.
    pub detail: String,
    /// How many times the action was tried.
    pub attempts: u32,
}

/// The outcome of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The action was carried out.
    Done,
    /// The action was tried and failed (the detail says why).
    Failed,
    /// Nothing had to be done (the job had already ended, or is not a Slurm job).
    Skipped,
}

impl Outcome {
    /// The wire word.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
        }
    }
}

/// The action record of an enforcement: `action.executed` when the action was done or nothing needed
/// doing (then `action` is `none` and `asked` says what the decision asked for), `action.failed` when
/// it was tried and failed.
pub fn enforcement(cluster: &str, r: &Record, at: Timestamp) -> Action {
    let mut extra = Extra::new();
    if let Some(id) = r.slurm_job_id {
        field(&mut extra, "slurm_job_id", id.to_string());
    }
    field(&mut extra, "slurm_cluster", cluster);
    field(&mut extra, "decision", &r.decision);
    let (outcome, action) = match r.outcome {
        Outcome::Done => (ActionOutcome::Executed, r.action.clone()),
        Outcome::Failed => (ActionOutcome::Failed, r.action.clone()),
        Outcome::Skipped => {
            field(&mut extra, "asked", &r.action);
            (ActionOutcome::Executed, "none".to_owned())
        }
    };
    Action {
        id: format!("enforce-{}", r.decision_id),
        time: at,
        outcome,
        decision_id: r.decision_id.clone(),
        decision_seq: Some(r.decision_seq),
        job_id: Some(r.job_id.clone()),
        action,
        detail: Some(r.detail.clone()),
        attempts: Some(r.attempts),
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::{Input, decode_event, decode_input};

    fn extra<'a>(e: &'a Extra, k: &str) -> Option<&'a str> {
        e.iter().find(|(n, _)| n == k).map(|(_, v)| v.get())
    }

    #[test]
    fn started_and_finished_are_v1_events_with_both_ids() {
        let s = started("lab", 17, "lab-abc", 1_796_018_054);
        let back = decode_event(&s.to_json()).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.id, "slurm-lab-17-started");
        assert_eq!(s.time.to_string(), "2026-11-30T05:54:14Z");
        assert_eq!(s.kind.job_id(), Some("lab-abc"));
        assert_eq!(extra(&s.extra, "slurm_job_id"), Some("\"17\""));

        let f = finished("lab", 17, "lab-abc", 1_796_018_059, EndStatus::Failed, "FAILED", Some(768));
        assert_eq!(decode_event(&f.to_json()).unwrap(), f);
        assert_eq!(f.id, "slurm-lab-17-finished");
        assert_eq!(f.kind.type_name(), "job.finished");
        assert_eq!(extra(&f.extra, "exit_code"), Some("3"));
        assert_eq!(extra(&f.extra, "signal"), None);
        let killed = finished("lab", 18, "lab-x", 0, EndStatus::Cancelled, "CANCELLED", Some(15));
        assert_eq!(extra(&killed.extra, "signal"), Some("15"));
        assert!(matches!(killed.kind, EventKind::JobFinished { status: FinishStatus::Cancelled, .. }));
    }

    #[test]
    fn an_enforcement_is_an_action_record_naming_its_decision() {
        let mut r = Record {
            decision_id: "d-9".into(),
            decision_seq: 42,
            decision: "reclaim".into(),
            job_id: "lab-abc".into(),
            slurm_job_id: Some(17),
            action: "scancel".into(),
            outcome: Outcome::Done,
            detail: "cancelled Slurm job 17".into(),
            attempts: 1,
        };
        let a = enforcement("lab", &r, Timestamp(1_796_018_059_250));
        let Input::Action(back) = decode_input(&Input::Action(a.clone()).to_json()).unwrap() else {
            panic!("an action record decodes as one")
        };
        assert_eq!(back, a);
        assert_eq!((a.id.as_str(), a.outcome, a.decision_seq), ("enforce-d-9", ActionOutcome::Executed, Some(42)));
        assert_eq!(extra(&a.extra, "slurm_job_id"), Some("\"17\""));
        r.outcome = Outcome::Failed;
        assert_eq!(enforcement("lab", &r, Timestamp(0)).outcome, ActionOutcome::Failed);
        r.outcome = Outcome::Skipped;
        let skipped = enforcement("lab", &r, Timestamp(0));
        assert_eq!((skipped.outcome, skipped.action.as_str()), (ActionOutcome::Executed, "none"));
        assert_eq!(extra(&skipped.extra, "asked"), Some("\"scancel\""));
    }
}
