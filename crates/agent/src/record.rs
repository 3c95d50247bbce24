//! The action record of an enforcement: what became of one decision that asked something of the
//! scheduler, as the `action.executed` / `action.failed` input serve journals (docs/wire-format.md).
//!
//! Its id is derived from the decision it carried out (`<prefix>-<decision id>`), never random, so a
//! resend after a crash is the same input and serve's dedupe drops it. The scheduler's own names for
//! the job (`slurm_job_id`, `kube_namespace`, …) travel as added fields, which v1 keeps.

use std::fmt::Display;
use std::time::Duration;

use bursar_model::{Action, ActionOutcome, Extra, RawJson, Timestamp};
use serde_json::value::RawValue;

/// Appends a producer's added field, serialised from a typed value.
pub fn add_field(extra: &mut Extra, name: &str, value: impl serde::Serialize) {
    if let Ok(text) = serde_json::to_string(&value)
        && let Ok(raw) = RawValue::from_string(text)
    {
        extra.push((name.to_owned(), RawJson(raw)));
    }
}

/// The outcome of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The action was carried out (and the scheduler confirmed it).
    Done,
    /// The action was tried and failed (the detail says why).
    Failed,
    /// Nothing had to be done (the job had already ended, or is not the scheduler's).
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

/// What became of one decision that asked something of the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The decision's id.
    pub decision_id: String,
    /// The decision's position in the stream.
    pub decision_seq: u64,
    /// `reclaim`, `allow`, `deny`.
    pub decision: String,
    /// bursar's job id.
    pub job_id: String,
    /// What was (or would have been) done: `scancel`, `scontrol release`, `deactivate`, …
    pub action: String,
    /// `done`, `failed` or `skipped`.
    pub outcome: Outcome,
    /// A sentence: what was done, or why it failed or was not needed.
    pub detail: String,
    /// How many times the action was tried.
    pub attempts: u32,
    /// The scheduler's own names for the job and itself, added to the record as fields.
    pub fields: Extra,
}

impl Record {
    /// A record of `action` for the decision `seen`, not yet tried.
    pub fn new(seen: &Seen, job_id: &str, action: &str) -> Record {
        Record {
            decision_id: seen.decision_id.clone(),
            decision_seq: seen.seq,
            decision: seen.decision.clone(),
            job_id: job_id.to_owned(),
            action: action.to_owned(),
            outcome: Outcome::Failed,
            detail: String::new(),
            attempts: 0,
            fields: Extra::new(),
        }
    }

    /// Sets (or replaces) an added field.
    pub fn set_field(&mut self, name: &str, value: impl serde::Serialize) {
        self.fields.retain(|(n, _)| n != name);
        add_field(&mut self.fields, name, value);
    }

    /// Tries the action (`step`, which may add fields to the record) until it says what became of
    /// it, or until `max_attempts` tries (at least one) failed: the record is then `failed` with the
    /// last error. Waits `delay` after the first failed try and twice as long after each next.
    /// Blocking, as the follower is.
    pub fn tried<E: Display>(
        mut self,
        max_attempts: u32,
        delay: Duration,
        mut step: impl FnMut(&mut Record) -> Result<(Outcome, String), E>,
    ) -> Record {
        let mut delay = delay;
        let max = max_attempts.max(1);
        loop {
            self.attempts += 1;
            match step(&mut self) {
                Ok((outcome, detail)) => {
                    self.outcome = outcome;
                    self.detail = detail;
                    return self;
                }
                Err(e) if self.attempts >= max => {
                    self.outcome = Outcome::Failed;
                    self.detail = format!("gave up after {} attempts: {e}", self.attempts);
                    return self;
                }
                Err(e) => {
                    tracing::warn!(job = %self.job_id, attempt = self.attempts, error = %e, "action failed; retrying");
                    std::thread::sleep(delay);
                    delay = delay.saturating_mul(2);
                }
            }
        }
    }

    /// The action record serve journals: `action.executed` when the action was done or nothing needed
    /// doing (then `action` is `none` and `asked` says what the decision asked for), `action.failed`
    /// when it was tried and failed. Its id is `<id_prefix>-<decision id>`.
    pub fn to_action(&self, id_prefix: &str, at: Timestamp) -> Action {
        let mut extra = self.fields.clone();
        add_field(&mut extra, "decision", &self.decision);
        let (outcome, action) = match self.outcome {
            Outcome::Done => (ActionOutcome::Executed, self.action.clone()),
            Outcome::Failed => (ActionOutcome::Failed, self.action.clone()),
            Outcome::Skipped => {
                add_field(&mut extra, "asked", &self.action);
                (ActionOutcome::Executed, "none".to_owned())
            }
        };
        Action {
            id: format!("{id_prefix}-{}", self.decision_id),
            time: at,
            outcome,
            decision_id: self.decision_id.clone(),
            decision_seq: Some(self.decision_seq),
            job_id: Some(self.job_id.clone()),
            action,
            detail: Some(self.detail.clone()),
            attempts: Some(self.attempts),
            extra,
        }
    }
}

/// The fields of a decision an enforcer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Position in the stream.
    pub seq: u64,
    /// Decision id.
    pub decision_id: String,
    /// `reclaim`, `allow`, …
    pub decision: String,
    /// bursar's job id.
    pub job_id: Option<String>,
    /// The reason, for logs.
    pub reason: String,
}

impl Seen {
    /// The fields of a sequenced decision.
    pub fn of(s: &bursar_model::api::Sequenced) -> Seen {
        let d = &s.decision;
        Seen {
            seq: s.seq,
            decision_id: d.decision_id.clone(),
            decision: d.decision.as_str().to_owned(),
            job_id: d.job_id.as_deref().map(str::to_owned),
            reason: d.reason.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::{Input, decode_input};

    fn extra<'a>(e: &'a Extra, k: &str) -> Option<&'a str> {
        e.iter().find(|(n, _)| n == k).map(|(_, v)| v.get())
    }

    #[test]
    fn an_enforcement_is_an_action_record_naming_its_decision() {
        let seen = Seen {
            seq: 42,
            decision_id: "d-9".into(),
            decision: "reclaim".into(),
            job_id: Some("lab-abc".into()),
            reason: "idle".into(),
        };
        let mut r = Record::new(&seen, "lab-abc", "scancel");
        r.set_field("slurm_job_id", "17");
        r.set_field("slurm_job_id", "18");
        r.outcome = Outcome::Done;
        r.detail = "cancelled Slurm job 18".into();
        r.attempts = 1;
        let a = r.to_action("enforce", Timestamp(1_796_018_059_250));
        let Input::Action(back) = decode_input(&Input::Action(a.clone()).to_json()).unwrap() else {
            panic!("an action record decodes as one")
        };
        assert_eq!(back, a);
        assert_eq!((a.id.as_str(), a.outcome, a.decision_seq), ("enforce-d-9", ActionOutcome::Executed, Some(42)));
        assert_eq!(extra(&a.extra, "slurm_job_id"), Some("\"18\""), "a field set twice is kept once");
        assert_eq!(a.extra.iter().filter(|(n, _)| n == "slurm_job_id").count(), 1);
        r.outcome = Outcome::Failed;
        assert_eq!(r.to_action("enforce", Timestamp(0)).outcome, ActionOutcome::Failed);
        r.outcome = Outcome::Skipped;
        let skipped = r.to_action("kube", Timestamp(0));
        assert_eq!((skipped.outcome, skipped.action.as_str()), (ActionOutcome::Executed, "none"));
        assert_eq!(extra(&skipped.extra, "asked"), Some("\"scancel\""));
        assert_eq!(skipped.id, "kube-d-9");
    }

    #[test]
    fn an_action_is_tried_until_it_says_what_became_of_it() {
        let seen =
            Seen { seq: 1, decision_id: "d".into(), decision: "reclaim".into(), job_id: None, reason: String::new() };
        let mut tries = 0;
        let r = Record::new(&seen, "j", "scancel").tried(5, Duration::ZERO, |r| {
            tries += 1;
            r.set_field("try", tries);
            if tries < 3 { Err("busy") } else { Ok((Outcome::Done, "cancelled".to_owned())) }
        });
        assert_eq!((r.outcome, r.detail.as_str(), r.attempts), (Outcome::Done, "cancelled", 3));
        assert_eq!(extra(&r.fields, "try"), Some("3"));
        let r = Record::new(&seen, "j", "scancel").tried(0, Duration::ZERO, |_| Err::<(Outcome, String), _>("down"));
        assert_eq!((r.outcome, r.detail.as_str(), r.attempts), (Outcome::Failed, "gave up after 1 attempts: down", 1));
    }
}
