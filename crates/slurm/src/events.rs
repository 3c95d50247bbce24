//! The v1 events the agents send to `bursar serve`, one JSON object per line.
//!
//! Event ids are derived from what they describe, never random, so a resend after a crash or a retry is
//! the same event and serve's dedupe drops it:
//! - `slurm-<cluster>-<slurm id>-started`, `slurm-<cluster>-<slurm id>-finished` (watch);
//! - `enforce-<decision id>` (enforce).
//!
//! Every job event carries `slurm_job_id` (and `slurm_cluster`) as added fields — v1 keeps fields a
//! producer adds — which is how Slurm's job id reaches the audit log next to bursar's.
//!
//! An enforcement record has no v1 event type of its own, so it travels as a `clock.tick` (which changes
//! nothing but the engine's clock, and its time is "now") with the record in an added `enforcement`
//! field and the job in `job_id`/`slurm_job_id`.

use bursar_model::Timestamp;
use serde_json::{Value, json};

use crate::slurm::EndStatus;

fn time(unix_secs: i64) -> String {
    Timestamp(unix_secs.saturating_mul(1000)).to_string()
}

/// `job.started` for Slurm job `slurm_id`, which bursar knows as `bursar_id`.
pub fn started(cluster: &str, slurm_id: u64, bursar_id: &str, at_unix: i64) -> Value {
    json!({
        "id": format!("slurm-{cluster}-{slurm_id}-started"),
        "time": time(at_unix),
        "type": "job.started",
        "job_id": bursar_id,
        "slurm_job_id": slurm_id.to_string(),
        "slurm_cluster": cluster,
    })
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
) -> Value {
    let mut v = json!({
        "id": format!("slurm-{cluster}-{slurm_id}-finished"),
        "time": time(at_unix),
        "type": "job.finished",
        "job_id": bursar_id,
        "status": status.as_str(),
        "slurm_job_id": slurm_id.to_string(),
        "slurm_cluster": cluster,
        "slurm_state": slurm_state,
    });
    if let (Some(code), Some(o)) = (exit_code, v.as_object_mut()) {
        // Slurm reports the raw wait status: the exit code is the high byte, a signal the low one.
        o.insert("exit_code".into(), json!(code >> 8));
        if code & 0x7f != 0 {
            o.insert("signal".into(), json!(code & 0x7f));
        }
    }
    v
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

/// The audit record of an enforcement (see the module documentation for why a `clock.tick`).
pub fn enforcement(cluster: &str, r: &Record, at: Timestamp) -> Value {
    json!({
        "id": format!("enforce-{}", r.decision_id),
        "time": at.to_string(),
        "type": "clock.tick",
        "job_id": r.job_id,
        "slurm_job_id": r.slurm_job_id.map(|i| i.to_string()),
        "slurm_cluster": cluster,
        "enforcement": {
            "decision_id": r.decision_id,
            "decision_seq": r.decision_seq,
            "decision": r.decision,
            "action": r.action,
            "outcome": r.outcome.as_str(),
            "detail": r.detail,
            "attempts": r.attempts,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decodes(v: &Value) -> bursar_model::Event {
        bursar_model::decode_event(&v.to_string()).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    #[test]
    fn started_and_finished_are_v1_events_with_both_ids() {
        let s = decodes(&started("lab", 17, "lab-abc", 1_796_018_054));
        assert_eq!(s.id, "slurm-lab-17-started");
        assert_eq!(s.time.to_string(), "2026-11-30T05:54:14Z");
        assert_eq!(s.kind.job_id(), Some("lab-abc"));
        assert!(s.extra.iter().any(|(k, v)| k == "slurm_job_id" && v.get() == "\"17\""));

        let f = finished("lab", 17, "lab-abc", 1_796_018_059, EndStatus::Failed, "FAILED", Some(768));
        let e = decodes(&f);
        assert_eq!(e.id, "slurm-lab-17-finished");
        assert_eq!(e.kind.type_name(), "job.finished");
        assert_eq!(f["exit_code"], 3);
        assert!(f.get("signal").is_none());
        let killed = finished("lab", 18, "lab-x", 0, EndStatus::Cancelled, "CANCELLED", Some(15));
        assert_eq!(killed["signal"], 15);
        assert_eq!(killed["status"], "cancelled");
    }

    #[test]
    fn an_enforcement_record_is_a_clock_tick_keeping_the_record() {
        let r = Record {
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
        let v = enforcement("lab", &r, Timestamp(1_796_018_059_250));
        let e = decodes(&v);
        assert_eq!(e.id, "enforce-d-9");
        assert_eq!(e.kind.type_name(), "clock.tick");
        let kept: Value = serde_json::from_str(
            e.extra.iter().find(|(k, _)| k == "enforcement").map(|(_, v)| v.get()).unwrap_or("null"),
        )
        .unwrap();
        assert_eq!(kept["outcome"], "done");
        assert_eq!(kept["decision_seq"], 42);
        assert_eq!(v["slurm_job_id"], "17");
    }
}
