//! Decisions, wire format v1: what bursar tells the scheduler, one JSON object per line.

use std::sync::Arc;

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::gpus::Gpus;
use crate::time::Timestamp;

/// What the scheduler should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Admit the job.
    Allow,
    /// Refuse the job.
    Deny,
    /// Hold the job until a person approves it.
    RequireApproval,
    /// Admit the job later, at `until`.
    Defer,
    /// Release the job's GPUs.
    Reclaim,
    /// Tell the owner something; changes nothing.
    Alert,
}

impl DecisionKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Allow => "allow",
            DecisionKind::Deny => "deny",
            DecisionKind::RequireApproval => "require_approval",
            DecisionKind::Defer => "defer",
            DecisionKind::Reclaim => "reclaim",
            DecisionKind::Alert => "alert",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<DecisionKind> {
        Some(match s {
            "allow" => DecisionKind::Allow,
            "deny" => DecisionKind::Deny,
            "require_approval" => DecisionKind::RequireApproval,
            "defer" => DecisionKind::Defer,
            "reclaim" => DecisionKind::Reclaim,
            "alert" => DecisionKind::Alert,
            _ => return None,
        })
    }

    /// All kinds, in wire order.
    pub const ALL: [DecisionKind; 6] = [
        DecisionKind::Allow,
        DecisionKind::Deny,
        DecisionKind::RequireApproval,
        DecisionKind::Defer,
        DecisionKind::Reclaim,
        DecisionKind::Alert,
    ];
}

/// Scheduling hints attached to an admission by placement policies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hints {
    /// Queue the job should go to (shared with the policy that names it: an allow copies no text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Arc<str>>,
    /// Scheduler priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Region the job should run in (shared, like the queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Arc<str>>,
}

impl Hints {
    /// True when no hint is set.
    pub fn is_empty(&self) -> bool {
        self.queue.is_none() && self.priority.is_none() && self.region.is_none()
    }
}

/// One decision. Serialized with the brief's fields first (`decision_id`, `event_id`, `time`, `job_id`,
/// `project`, `decision`, `until`, `policies`, `reason`), then bursar's additions when they apply:
/// `dry_run`, `admission`, `user`, `gpus`, `gpu_hours`, `hints`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Decision {
    /// Deterministic id: `<event_id>/<n>`, n counting the decisions made while handling that event.
    pub decision_id: String,
    /// The event that produced it (for a timer, the event whose time made the timer fire).
    pub event_id: String,
    /// Event time of the decision (for a timer, when it was due).
    #[serde(with = "ts")]
    pub time: Timestamp,
    /// The job, if the decision is about one.
    #[serde(default)]
    pub job_id: Option<Arc<str>>,
    /// The project.
    #[serde(default)]
    pub project: Option<Arc<str>>,
    /// What to do.
    pub decision: DecisionKind,
    /// For `defer`: when the job may start.
    #[serde(default, with = "opt_ts")]
    pub until: Option<Timestamp>,
    /// The policies that produced it.
    pub policies: Vec<Arc<str>>,
    /// A sentence a person can read.
    pub reason: String,
    /// Produced by dry-run policies: reported, never enforced.
    #[serde(default)]
    pub dry_run: bool,
    /// This is the admission decision of a `job.submitted` (or the resolution of a pending one).
    #[serde(default)]
    pub admission: bool,
    /// The job's user.
    #[serde(default)]
    pub user: Option<Arc<str>>,
    /// GPUs concerned.
    #[serde(default)]
    pub gpus: Option<Gpus>,
    /// GPU-hours concerned: requested for an admission, still reserved for a reclaim.
    #[serde(default)]
    pub gpu_hours: Option<f64>,
    /// Placement hints for an allow.
    #[serde(default)]
    pub hints: Option<Hints>,
}

impl Serialize for Decision {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        self.serialize_fields(&mut m)?;
        m.end()
    }
}

impl Decision {
    /// Writes the decision's fields, in wire order, into a map being serialized: the one definition
    /// of the decision's shape, shared by the bare decision and by the API bodies that put a `seq`
    /// before it ([`crate::api::Sequenced`]).
    pub fn serialize_fields<M: SerializeMap>(&self, m: &mut M) -> Result<(), M::Error> {
        m.serialize_entry("decision_id", &self.decision_id)?;
        m.serialize_entry("event_id", &self.event_id)?;
        m.serialize_entry("time", &self.time.text())?;
        if let Some(v) = &self.job_id {
            m.serialize_entry("job_id", v)?;
        }
        if let Some(v) = &self.project {
            m.serialize_entry("project", v)?;
        }
        m.serialize_entry("decision", &self.decision)?;
        if let Some(v) = &self.until {
            m.serialize_entry("until", &v.text())?;
        }
        m.serialize_entry("policies", &self.policies)?;
        m.serialize_entry("reason", &self.reason)?;
        if self.dry_run {
            m.serialize_entry("dry_run", &true)?;
        }
        if self.admission {
            m.serialize_entry("admission", &true)?;
        }
        if let Some(v) = &self.user {
            m.serialize_entry("user", v)?;
        }
        if let Some(v) = &self.gpus {
            m.serialize_entry("gpus", v)?;
        }
        if let Some(v) = &self.gpu_hours {
            m.serialize_entry("gpu_hours", v)?;
        }
        if let Some(h) = self.hints.as_ref().filter(|h| !h.is_empty()) {
            m.serialize_entry("hints", h)?;
        }
        Ok(())
    }
}

impl Decision {
    /// The decision as one line of JSON (without the newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Appends the decision as one line of JSON, with the newline, to `out`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }
}

mod ts {
    use super::Timestamp;
    use serde::{Deserialize, Deserializer};
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).map_err(serde::de::Error::custom)
    }
}

mod opt_ts {
    use super::Timestamp;
    use serde::{Deserialize, Deserializer};
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| Timestamp::parse(&s).map_err(serde::de::Error::custom)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_brief_field_order() {
        let d = Decision {
            decision_id: "e1/0".into(),
            event_id: "e1".into(),
            time: Timestamp::parse("2026-11-02T09:00:00Z").unwrap(),
            job_id: Some("j1".into()),
            project: Some("nlp".into()),
            decision: DecisionKind::Deny,
            until: None,
            policies: vec!["quota/monthly-gpu-hours".into()],
            reason: "no".into(),
            dry_run: false,
            admission: true,
            user: None,
            gpus: Some(Gpus::whole(8)),
            gpu_hours: Some(32.0),
            hints: None,
        };
        let j = d.to_json();
        assert!(j.starts_with(r#"{"decision_id":"e1/0","event_id":"e1","time":"2026-11-02T09:00:00Z","job_id":"j1","project":"nlp","decision":"deny","policies":["quota/monthly-gpu-hours"],"reason":"no""#), "{j}");
        let back: Decision = serde_json::from_str(&j).unwrap();
        assert_eq!(back, d);
    }
}
