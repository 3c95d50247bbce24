//! The bodies of `bursar serve`'s HTTP API and Unix socket, as types.
//!
//! The server serialises every answer from these types and every client (the Slurm agents, the
//! terminal commands, the tests) deserialises them, so neither side builds or reads JSON by hand and
//! a field added or moved cannot silently break a reader that looked for it by position. The shapes
//! are documented in `docs/serve.md`; a decision inside them is exactly the wire decision of
//! `docs/wire-format.md` with its stream position `seq` first.

use serde::de::Deserializer;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::decision::Decision;
use crate::event::FinishStatus;
use crate::gpus::Gpus;

mod people;
pub use people::{
    ActionKind, ActionReply, ActionRequest, ApprovalWait, ArrayView, CapacityLine, DeferredWait, DenyLine, IdleWait,
    JobLine, NoticeKind, NoticeLink, NoticeMessage, NoticeStatus, PendingReply, PoolView, ProjectLine, QueueLine,
    QuotaLine, RunsView,
};

/// A line that was not applied, and why: the one shape of a rejected line everywhere (the `rejected`
/// list of `POST /v1/events`, a socket answer, `bursar eval --error-format json` on stderr).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// Where the line came from (a file name), when the answer is not already about one body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// 1-based line number in the file, body or connection.
    pub line: u64,
    /// What is wrong with it, as a sentence.
    pub error: String,
}

/// A decision with its position in the decision stream (its audit-log sequence number). Serialised
/// as the decision's own object with `seq` as its first field.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequenced {
    /// Position in the stream: a cursor for `GET /v1/decisions?after=SEQ`.
    pub seq: u64,
    /// The decision.
    pub decision: Decision,
}

impl Serialize for Sequenced {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("seq", &self.seq)?;
        self.decision.serialize_fields(&mut m)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for Sequenced {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            seq: u64,
            #[serde(flatten)]
            decision: Decision,
        }
        let w = Wire::deserialize(d)?;
        Ok(Sequenced { seq: w.seq, decision: w.decision })
    }
}

impl Sequenced {
    /// One JSON line, without the newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// An event whose id bursar had already seen: it changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    /// 1-based line in the body.
    pub line: u64,
    /// The event id.
    pub id: String,
}

/// The answer to `POST /v1/events`: what happened to each line, and every decision made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventsReply {
    /// Set when nothing was applied (no line was a valid event): the status is then 400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Events applied now.
    pub accepted: u64,
    /// Lines whose event id was already seen.
    pub duplicates: Vec<Duplicate>,
    /// Lines that are not valid events, each with its reason.
    pub rejected: Vec<Rejected>,
    /// The decisions the accepted events produced, in order, each with its stream position.
    pub decisions: Vec<Sequenced>,
    /// Cluster mode, asked to wait (`?wait_ms=N`): whether every accepted event was applied by its
    /// partition's owner within the wait. (A single `serve` applies before it answers.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<bool>,
}

/// The answer to `POST /v1/admit`: the admission decision (fields at the top level, so a hook reads
/// `decision` and `reason` directly), whether it was decided before, and any other decision the
/// submission produced (alerts, dry-run verdicts).
#[derive(Debug, Clone, PartialEq)]
pub struct AdmitReply {
    /// The admission decision.
    pub admission: Sequenced,
    /// The submission was sent before (same event id): this is the decision made the first time.
    pub duplicate: bool,
    /// The other decisions of the same event.
    pub other_decisions: Vec<Sequenced>,
    /// A preview (`POST /v1/admit?test_only=true`): what the submission would be answered now;
    /// nothing was recorded or reserved, and the decisions have no stream position (`seq` 0).
    pub test_only: bool,
    /// With `?estimate=true`, for an allow or a preview of a job naming its GPU type: when it is
    /// expected to start, in the partition that starts it soonest (`docs/estimate.md`).
    pub estimate: Option<PartitionEstimate>,
}

impl Serialize for AdmitReply {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("seq", &self.admission.seq)?;
        self.admission.decision.serialize_fields(&mut m)?;
        if self.duplicate {
            m.serialize_entry("duplicate", &true)?;
        }
        if self.test_only {
            m.serialize_entry("test_only", &true)?;
        }
        if !self.other_decisions.is_empty() {
            m.serialize_entry("other_decisions", &self.other_decisions)?;
        }
        if let Some(e) = &self.estimate {
            m.serialize_entry("estimate", e)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for AdmitReply {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            seq: u64,
            #[serde(default)]
            duplicate: bool,
            #[serde(default)]
            other_decisions: Vec<Sequenced>,
            #[serde(default)]
            test_only: bool,
            #[serde(default)]
            estimate: Option<PartitionEstimate>,
            #[serde(flatten)]
            decision: Decision,
        }
        let w = Wire::deserialize(d)?;
        Ok(AdmitReply {
            admission: Sequenced { seq: w.seq, decision: w.decision },
            duplicate: w.duplicate,
            other_decisions: w.other_decisions,
            test_only: w.test_only,
            estimate: w.estimate,
        })
    }
}

/// Any other failed request: `{"error": "…"}` with a 4xx or 5xx status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What went wrong and, where it helps, what to do.
    pub error: String,
}

/// One answer line on the Unix socket, per input line and in input order (blank lines get none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SocketAnswer {
    /// The line is not a valid event: `{"line":N,"error":"…"}`.
    Rejected(Rejected),
    /// The event id was already seen: `{"line":N,"id":"e1","duplicate":true}`.
    Duplicate {
        /// 1-based line on the connection.
        line: u64,
        /// The event id.
        id: String,
        /// Always true.
        duplicate: bool,
    },
    /// Applied and durable: `{"line":N,"id":"e1","accepted":true,"decisions":[…]}`.
    Accepted {
        /// 1-based line on the connection.
        line: u64,
        /// The event id.
        id: String,
        /// Always true.
        accepted: bool,
        /// Its decisions.
        decisions: Vec<Sequenced>,
    },
}

/// `GET /v1/jobs/{id}`: what bursar knows about a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// The job.
    pub job_id: String,
    /// Where it is: `pending_approval`, `deferred`, `admitted`, `running`, `finished`, `reclaimed`.
    pub phase: String,
    /// Whether it holds (or is about to hold) GPUs.
    pub live: bool,
    /// Project.
    pub project: String,
    /// User.
    pub user: String,
    /// Queue.
    pub queue: Option<String>,
    /// Stage.
    pub stage: Option<String>,
    /// GPU model.
    pub gpu_type: Option<String>,
    /// GPUs.
    pub gpus: crate::Gpus,
    /// Nodes.
    pub nodes: u32,
    /// Requested wall-clock hours.
    pub requested_hours: f64,
    /// Submission time.
    pub submitted: String,
    /// Start time.
    pub started: Option<String>,
    /// End time.
    pub ended: Option<String>,
    /// How it ended.
    pub status: Option<FinishStatus>,
    /// For a deferred job: when it may start.
    pub deferred_until: Option<String>,
    /// GPU-hours reserved and not yet settled.
    pub reserved_gpu_hours: f64,
    /// GPU-hours of runtime so far, over all its runs (the gaps between runs not counted).
    pub runtime_gpu_hours: f64,
    /// The approval it waits for.
    pub pending_approval: Option<PendingView>,
    /// The latest utilisation.
    pub utilisation: UtilisationView,
    /// Tags.
    pub tags: std::collections::BTreeMap<String, String>,
    /// The engine's clock (the newest event time).
    pub engine_time: String,
    /// What the scheduler reported about its runs beyond a plain start and end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<RunsView>,
}

/// A pending approval, in [`JobView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingView {
    /// When the request lapses.
    pub expires: String,
    /// Who may approve (empty: anyone).
    pub approvers: Vec<String>,
    /// The policies that asked.
    pub policies: Vec<String>,
    /// Why.
    pub reason: String,
}

/// The latest utilisation, in [`JobView`]. With no sample the numbers are `null`, not 0: no
/// sample is not idleness, and `no_sample` says why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UtilisationView {
    /// When the last sample arrived.
    pub last_sample: Option<String>,
    /// GPU utilisation of the last sample (0–1); `null` before the first.
    pub gpu_util: Option<f32>,
    /// Memory utilisation of the last sample (0–1); `null` before the first or when it had none.
    pub mem_util: Option<f32>,
    /// Exponentially weighted average of GPU utilisation; `null` before the first sample.
    pub avg_gpu_util: Option<f32>,
    /// Samples seen.
    pub samples: u32,
    /// Last keep-alive.
    pub keepalive: Option<String>,
    /// Why no sample has arrived, or why the utilisation source's last poll sent none for the job
    /// (its skip reason: no series, a stale series, a GPU missing, a DCGM error value, no Slurm id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_sample: Option<String>,
}

/// `GET /v1/projects/{name}`: a project's usage and the GPUs it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectView {
    /// The project.
    pub project: String,
    /// Whether bursar has counted anything for it.
    pub known: bool,
    /// GPUs of admitted jobs not yet released.
    pub held_gpus: crate::Gpus,
    /// GPUs of started jobs not yet released.
    pub running_gpus: crate::Gpus,
    /// Jobs holding or about to hold GPUs.
    pub live_jobs: u64,
    /// Usage over the day containing the engine's clock.
    pub day: UsageView,
    /// … the ISO week.
    pub week: UsageView,
    /// … the calendar month.
    pub month: UsageView,
    /// The engine's clock.
    pub engine_time: String,
}

/// GPU-hours of one period, in [`ProjectView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageView {
    /// The period, e.g. `2026-11`.
    pub period: String,
    /// Reserved, not yet settled.
    pub reserved: f64,
    /// Settled from runtime.
    pub used: f64,
    /// Charged by billing.
    pub charged: f64,
    /// Settled from runtime, not yet charged.
    pub unbilled: f64,
    /// reserved + used.
    pub by_runtime: f64,
    /// reserved + unbilled + charged.
    pub by_billing: f64,
}

/// What one policy reload did (`POST /v1/reload`, and `last_reload` in [`PoliciesView`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReloadOutcome {
    /// Whether the new set is in force (or the files were unchanged).
    pub ok: bool,
    /// `loaded`, `unchanged` or `failed`.
    pub status: String,
    /// What asked for it: `startup`, `watch`, `sighup` or `http`.
    pub cause: String,
    /// When it finished (RFC 3339, wall clock).
    pub at: String,
    /// Digest of the set in force afterwards.
    pub digest: String,
    /// For a failure: every error, `file:line:col: message`.
    pub errors: Vec<String>,
    /// Milliseconds spent compiling.
    pub compile_ms: f64,
    /// The configuration file's reload (`serve --config`): what changed, or why the file was not
    /// taken (the previous principals stay in force). Absent without a configuration file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigReload>,
}

/// What a reload did with the configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigReload {
    /// Whether the file was read and its principals are in force.
    pub ok: bool,
    /// What was taken (`5 principals`), or every error (`file:line:col: message`).
    pub message: String,
}

/// One policy of the set in force, in [`PoliciesView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// Policy id, e.g. `quota/monthly-gpu-hours`.
    pub id: String,
    /// Its family (`quota`, …, `wasm`).
    pub kind: String,
    /// `enforce` or `dry_run`.
    pub mode: String,
    /// What it is for.
    pub description: String,
    /// Where it is defined (`file:line`).
    pub source: String,
}

/// One policy file, in [`PoliciesView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyFile {
    /// The path.
    pub path: String,
    /// Its SHA-256.
    pub digest: String,
}

/// A WebAssembly policy's component, in [`PoliciesView`]: its bytes are in the set's digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyGuest {
    /// The policy that runs it.
    pub policy: String,
    /// The component file.
    pub path: String,
    /// SHA-256 of its bytes.
    pub digest: String,
}

/// `GET /v1/policies`: the set in force and the last reload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoliciesView {
    /// Digest of the set in force.
    pub digest: String,
    /// When it was loaded (RFC 3339, wall clock).
    pub loaded_at: String,
    /// Its policies.
    pub policies: Vec<PolicyInfo>,
    /// Its files (the WebAssembly components among them).
    pub files: Vec<PolicyFile>,
    /// Each WebAssembly policy's component, with the digest of its bytes.
    #[serde(default)]
    pub guests: Vec<PolicyGuest>,
    /// The last reload attempt, if any.
    pub last_reload: Option<ReloadOutcome>,
}

/// `POST /v1/snapshot`: the event seq the snapshot covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotReply {
    /// Every event up to this seq is in the snapshot.
    pub event_seq: u64,
}

/// `POST /v1/audit/prune`'s body: remove the events and decisions whose event time is before this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// RFC 3339 (`2026-01-01T00:00:00Z`), as every time in the API.
    pub before: String,
}

/// `POST /v1/audit/prune`: what serve's own writer pruned, after a snapshot that covers
/// every event so far (so a restart has one after the prune).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReply {
    /// Events removed.
    pub events: u64,
    /// Decisions removed.
    pub decisions: u64,
    /// Last event seq removed (0: none).
    pub events_through: i64,
    /// Last decision seq removed (0: none).
    pub decisions_through: i64,
    /// The engine snapshot taken just before the prune covers every event up to this seq.
    pub snapshot_event_seq: u64,
}

/// `GET /v1/cluster` of `bursar serve --cluster`: this instance, the partitions it owns and who owns
/// each partition (see `docs/cluster.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// This instance's name.
    pub instance: String,
    /// The cluster's partition count.
    pub partitions: u32,
    /// The partitions this instance owns, by partition.
    pub owned: Vec<OwnedPartition>,
    /// Every partition's lease holder as last read (`None`: no owner).
    pub owners: Vec<Option<String>>,
    /// Journal messages this instance's audit log has projected (the stream sequence of the last).
    pub projected_seq: u64,
}

/// One partition an instance owns, in [`ClusterView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnedPartition {
    /// The partition.
    pub partition: u32,
    /// Its fencing epoch (the lease revision at acquisition).
    pub epoch: u64,
    /// `restoring` (replaying to the head, not answering yet) or `live`.
    pub state: String,
    /// Milliseconds from acquiring the lease to answering (restore and replay included).
    pub takeover_ms: Option<f64>,
    /// Journal entries replayed at takeover.
    pub replayed: u64,
}

/// `GET /v1/unconfirmed?prefix=…`: the admissions the scheduler has yet to confirm it created (a
/// `job.queued` or `job.started` not seen since the `job.submitted` that promised one with
/// `confirm_within_s`). The Slurm watcher releases those it does not find in two polls (issue 55).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnconfirmedView {
    /// The engine's clock.
    pub engine_time: String,
    /// The admissions, oldest first.
    pub jobs: Vec<UnconfirmedJob>,
}

/// One admission waiting for its confirmation, in [`UnconfirmedView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnconfirmedJob {
    /// The job.
    pub job_id: String,
    /// When it was admitted (its submission's event time).
    pub admitted: String,
    /// When it is released unless confirmed.
    pub confirm_by: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DecisionKind, Timestamp};

    fn decision() -> Decision {
        Decision {
            decision_id: "e1/0".into(),
            event_id: "e1".into(),
            time: Timestamp(1_793_577_600_000),
            job_id: Some("j1".into()),
            project: Some("nlp".into()),
            decision: DecisionKind::Allow,
            until: None,
            policies: vec![],
            reason: "no policy applies to this job".into(),
            dry_run: false,
            admission: true,
            user: Some("alice".into()),
            gpus: Some(crate::Gpus::whole(8)),
            gpu_hours: Some(32.0),
            hints: None,
        }
    }

    #[test]
    fn a_sequenced_decision_is_the_decision_with_seq_first() {
        let s = Sequenced { seq: 7, decision: decision() };
        let json = s.to_json();
        assert!(json.starts_with(r#"{"seq":7,"decision_id":"e1/0","event_id":"e1""#), "{json}");
        assert_eq!(json.replace(r#""seq":7,"#, ""), decision().to_json());
        let back: Sequenced = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn an_admit_reply_round_trips_with_the_decision_at_the_top() {
        let mut alert = decision();
        alert.decision = DecisionKind::Alert;
        alert.admission = false;
        alert.decision_id = "e1/1".into();
        let r = AdmitReply {
            admission: Sequenced { seq: 3, decision: decision() },
            duplicate: true,
            other_decisions: vec![Sequenced { seq: 4, decision: alert }],
            test_only: false,
            estimate: None,
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["decision"], "allow");
        assert_eq!(v["seq"], 3);
        assert_eq!(v["duplicate"], true);
        assert_eq!(v["other_decisions"][0]["decision"], "alert");
        let back: AdmitReply = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        // The flags are left out when they do not apply.
        let plain = AdmitReply { duplicate: false, other_decisions: vec![], ..r };
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("duplicate") && !text.contains("other_decisions"), "{text}");
    }

    #[test]
    fn socket_answers_are_told_apart_by_their_keys() {
        let lines = [
            r#"{"line":1,"error":"column 1: expected value"}"#,
            r#"{"line":2,"id":"e2","duplicate":true}"#,
            r#"{"line":3,"id":"e3","accepted":true,"decisions":[]}"#,
        ];
        let answers: Vec<SocketAnswer> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(matches!(answers[0], SocketAnswer::Rejected(Rejected { line: 1, .. })));
        assert!(matches!(answers[1], SocketAnswer::Duplicate { line: 2, .. }));
        assert!(matches!(answers[2], SocketAnswer::Accepted { line: 3, .. }));
        for (a, l) in answers.iter().zip(lines) {
            assert_eq!(serde_json::to_string(a).unwrap(), l);
        }
    }
}

/// `GET /v1/estimate?gpus=8&gpu_type=H100&hours=12[&region=R][&queue=Q]`: when a request not yet
/// submitted would start, in each partition of the pool that could run it, soonest first
/// (`docs/estimate.md`). What `bursar estimate` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateReply {
    /// The engine's clock when estimated (RFC 3339).
    pub now: String,
    /// GPUs asked for.
    pub gpus: Gpus,
    /// GPU type asked for.
    pub gpu_type: String,
    /// Hours asked for (the limit).
    pub hours: f64,
    /// One line per partition of that GPU type (in the region, if one was asked), soonest first;
    /// those where it cannot start last.
    pub partitions: Vec<PartitionEstimate>,
    /// Why there is nothing to estimate, when `partitions` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `in about 40 min`, `now`, `in about 3 h 10 min`, `in about 3 days`: a wait for people (the one
/// wording `bursar estimate` and the admission messages share).
pub fn about(wait_s: i64) -> String {
    if wait_s < 60 {
        return "now".to_owned();
    }
    let m = (wait_s + 30) / 60;
    if m < 60 {
        format!("in about {m} min")
    } else if m < 48 * 60 {
        format!("in about {} h {} min", m / 60, m % 60)
    } else {
        format!("in about {} days", (m + 720) / 1440)
    }
}

impl PartitionEstimate {
    /// `expected start in about 40 min in cn-north / gpu`, or `None` when it cannot start there.
    pub fn sentence(&self) -> Option<String> {
        let wait = self.wait_s?;
        let place =
            if self.queue.is_empty() { self.region.clone() } else { format!("{} / {}", self.region, self.queue) };
        Some(format!("expected start {} in {place}", about(wait)))
    }
}

/// A request's estimated start in one partition (a region's GPU type in one queue).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionEstimate {
    /// The region.
    pub region: String,
    /// The queue or partition (empty: any).
    pub queue: String,
    /// GPUs in service, allocated, free and drained, as last reported.
    pub in_service: Gpus,
    /// GPUs allocated.
    pub allocated: Gpus,
    /// GPUs free.
    pub free: Gpus,
    /// GPUs drained or down.
    pub drained: Gpus,
    /// When the figures were read (RFC 3339), and by whom.
    pub reported: String,
    /// The inventory's source, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Jobs bursar knows running in it.
    pub running_jobs: u32,
    /// Jobs bursar knows waiting for it (admitted, not started), which go first.
    pub waiting_jobs: u32,
    /// The estimated start (RFC 3339); absent when it cannot start here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// Seconds from now to the estimated start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<i64>,
    /// The early end of the range (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest: Option<String>,
    /// The late end of the range: every job running to its limit (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<String>,
    /// Why it cannot start here, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the request names a dataset whose copies' regions are known: `has a copy here`, or
    /// `no copy here: copied first (about 2h)`, a copy the start above already waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
}
