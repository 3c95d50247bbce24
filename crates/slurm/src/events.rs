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
//! `docs/wire-format.md`), built by `bursar-agent`'s [`bursar_agent::record::Record`] with the Slurm
//! ids added by [`slurm_fields`].

use bursar_model::{Event, EventKind, Extra, FinishStatus, Timestamp};

use crate::slurm::EndStatus;

fn time(unix_secs: i64) -> Timestamp {
    Timestamp(unix_secs.saturating_mul(1000))
}

use bursar_agent::record::add_field as field;

/// The fields naming a Slurm job on every event and action record: `slurm_job_id`, `slurm_cluster`.
pub fn slurm_fields(cluster: &str, slurm_id: u64) -> Extra {
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
        kind: EventKind::JobStarted { job_id: bursar_id.to_owned(), info: Default::default() },
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

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::decode_event;

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
}
