//! The bodies of the people-facing part of `bursar serve`: what waits for whom (`GET /v1/pending`),
//! the pool as the page `/` shows it (`GET /v1/pool`) with its capacity and its queue, the answers a person gives
//! (`POST /v1/jobs/{id}/approve|reject|keepalive`), and the notices serve sends to a webhook.
//!
//! `bursar pending|approve|reject|keepalive`, the page and the tests read these types; serve
//! serialises them. Times are RFC 3339 strings, as everywhere in the API.

use serde::{Deserialize, Serialize};

use super::Sequenced;
use crate::gpus::Gpus;

/// A job waiting for a person's approval, in [`PendingReply`] and [`PoolView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalWait {
    /// The job.
    pub job_id: String,
    /// Its project.
    pub project: String,
    /// Its user.
    pub user: String,
    /// GPUs asked for.
    pub gpus: Gpus,
    /// Hours asked for.
    pub requested_hours: f64,
    /// When it was submitted (held since then).
    pub submitted: String,
    /// When the request lapses (the job is then denied).
    pub expires: String,
    /// Who may approve it (empty: anyone).
    pub approvers: Vec<String>,
    /// The policies that asked.
    pub policies: Vec<String>,
    /// Why.
    pub reason: String,
    /// A quota's GPU-hour budget held it (the project, user or tag is out of budget): approving it
    /// runs the job over that budget. A concurrent-GPU or queue cap is not a budget: see `held_by`.
    pub over_budget: bool,
    /// Which limits held it, for people: `over budget`, `over the concurrent-GPU cap`, `over the
    /// queue cap` (empty: no quota asked; a person's approval policy did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
    /// The job's own user may answer (every policy that asked sets `self_approval = true`).
    #[serde(default)]
    pub self_approval: bool,
}

impl ApprovalWait {
    /// What held it, for a label: `over budget`, `over the concurrent-GPU cap`, both joined by `and`;
    /// None when no quota held it.
    pub fn hold_label(&self) -> Option<String> {
        if !self.held_by.is_empty() {
            Some(self.held_by.join(" and "))
        } else {
            self.over_budget.then(|| "over budget".to_owned())
        }
    }
}

/// A job its idle rule alerted about, reclaimed at `reclaim_at` unless its owner sends a keepalive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleWait {
    /// The job.
    pub job_id: String,
    /// Its project.
    pub project: String,
    /// Its user (who may keep it alive).
    pub user: String,
    /// GPUs it holds.
    pub gpus: Gpus,
    /// When the owner was alerted.
    pub alerted: String,
    /// When it is reclaimed unless kept alive.
    pub reclaim_at: String,
    /// The idle rule.
    pub policy: String,
    /// Since when its utilisation has been under the rule's threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<String>,
    /// GPU utilisation of its last sample (0–1); `None` before the first.
    #[serde(default)]
    pub gpu_util: Option<f32>,
    /// Memory utilisation of its last sample (0–1); `None` when it had none.
    #[serde(default)]
    pub mem_util: Option<f32>,
    /// When its last sample arrived.
    #[serde(default)]
    pub last_sample: Option<String>,
    /// Why the utilisation source's last poll sent no sample for it, if it sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_sample: Option<String>,
}

/// `GET /v1/pending`: what waits for a person, oldest first, and the queue (what waits for
/// capacity) with the pool's capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingReply {
    /// The engine's clock (the newest event time).
    pub engine_time: String,
    /// Jobs waiting for an approval.
    pub approvals: Vec<ApprovalWait>,
    /// Jobs alerted as idle, waiting for a keepalive.
    pub idle: Vec<IdleWait>,
    /// The pool's capacity per region, GPU type and queue (empty before the first inventory).
    #[serde(default)]
    pub capacity: Vec<CapacityLine>,
    /// The admitted jobs not started yet, per queue in the scheduler's order.
    #[serde(default)]
    pub queue: Vec<QueueLine>,
    /// Whose view this is: absent, everything (the `read` power); a name, what that principal may
    /// answer and their own jobs in the queue (the `answer` or `keepalive` power without `read`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_user: Option<String>,
}

/// One partition of the pool (a region's GPU type in one queue or partition) as people see it, in
/// [`PoolView`] and [`PendingReply`]: the last inventory's figures, what bursar holds in it, and the
/// GPUs expected free in an hour (`bursar_estimate::free_at`: running jobs' ends predicted from
/// history, the queue ahead having started as it can).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityLine {
    /// The region (a pool or cluster).
    pub region: String,
    /// The GPU type.
    pub gpu_type: String,
    /// The queue or partition (empty: the GPU type's capacity in the region whatever the queue).
    pub queue: String,
    /// GPUs in service (not drained or down).
    pub in_service: Gpus,
    /// GPUs allocated to jobs.
    pub allocated: Gpus,
    /// GPUs free now.
    pub free: Gpus,
    /// GPUs drained or down.
    pub drained: Gpus,
    /// GPUs expected free an hour from the engine's clock.
    pub free_in_hour: Gpus,
    /// GPUs bursar holds for admitted jobs of this GPU type and queue that have not started (a job
    /// whose reservation was released as stale holds none).
    pub reserved: Gpus,
    /// Jobs bursar knows running in it.
    pub running_jobs: u32,
    /// Jobs bursar knows waiting for it (admitted, not started).
    pub waiting_jobs: u32,
    /// How the scheduler lets later jobs pass (`easy`, `strict`, `best_effort`).
    pub backfill: String,
    /// When the figures were read (RFC 3339).
    pub reported: String,
    /// Who read them, if the inventory said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// An admitted job that has not started, in [`PoolView`] and [`PendingReply`]: its place in its
/// queue, how long it has waited, when it is expected to start and why it waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueLine {
    /// The queue or partition it asked for (empty: none named).
    pub queue: String,
    /// Its place in that queue (1: next), in the order the scheduler takes them (submission).
    pub position: u32,
    /// The job.
    pub job_id: String,
    /// Its project.
    pub project: String,
    /// Its user.
    pub user: String,
    /// GPUs asked for.
    pub gpus: Gpus,
    /// The GPU type asked for, if named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Hours asked for (the limit).
    pub requested_hours: f64,
    /// Since when it has been admitted and waiting (RFC 3339): its reservation's age counts from it.
    pub since: String,
    /// When its reservation is released if it has still not started (RFC 3339; the engine's
    /// `stale_after`); absent when no bound applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_at: Option<String>,
    /// Its reservation was released as stale (it holds nothing; a start reserves it again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reservation_released: bool,
    /// The region of the partition where it is expected to start soonest, if any can run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The estimated start (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// The early end of the estimate's range (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest: Option<String>,
    /// The late end: every job ahead running to its limit (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<String>,
    /// Why it waits: the scheduler's reason when it gave one (Slurm's `Reason`, Kueue's pending
    /// condition), else what the estimate shows (GPUs short, jobs ahead, no inventory).
    pub reason: String,
    /// Whether `reason` is the scheduler's own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scheduler_reason: bool,
    /// Since when the scheduler has given that reason (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_since: Option<String>,
    /// What the estimate shows, when `reason` is the scheduler's (GPUs short, jobs ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_note: Option<String>,
}

/// A deferred job, in [`PoolView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeferredWait {
    /// The job.
    pub job_id: String,
    /// Its project.
    pub project: String,
    /// Its user.
    pub user: String,
    /// GPUs.
    pub gpus: Gpus,
    /// When it may start.
    pub until: String,
}

/// One quota of one ledger in the current period, in [`PoolView`]: the numbers the quota admits
/// with (`bursar_engine::QuotaLimit::counted` of the ledger's usage against its budget), and a burn
/// rate from what was used, never from what was reserved.
///
/// Usage counts in the period of the job's submission day, as the quota counts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaLine {
    /// The quota policy.
    pub policy: String,
    /// `project`, `user` or `tag:<key>`.
    pub scope: String,
    /// The ledger: a project, a user, or a tag pair `team=search`.
    pub ledger: String,
    /// The period, e.g. `2026-11` or `2026-W45`.
    pub period: String,
    /// GPU-hours the ledger may use in the period.
    pub limit: f64,
    /// Settled so far: the runtime of ended jobs (or what billing charged, for a quota settled by
    /// billing).
    pub used: f64,
    /// Reserved by admitted and running jobs and not yet settled: what they asked for (GPUs ×
    /// requested hours). The quota admits against it; it is not burn.
    pub reserved: f64,
    /// Of what is reserved, what the running jobs have run so far (GPUs × time since their start).
    #[serde(default)]
    pub running: f64,
    /// `limit - used - reserved` (negative when over): what the quota still admits.
    pub left: f64,
    /// Settled today.
    #[serde(default)]
    pub used_today: f64,
    /// Days of the period gone by (a fraction; at least an hour's worth).
    #[serde(default)]
    pub days: f64,
    /// The burn rate: `(used + running) / days`, in GPU-hours a day.
    #[serde(default)]
    pub per_day: f64,
    /// The day on which `left` is used up at `per_day`, when that falls inside the period; `None`
    /// when nothing was used, or the budget lasts the period at that rate.
    pub runs_out: Option<String>,
}

/// A live job in a project's section of the pool page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobLine {
    /// The job.
    pub job_id: String,
    /// Its user.
    pub user: String,
    /// GPUs.
    pub gpus: Gpus,
    /// `admitted`, `running` or `deferred`.
    pub phase: String,
    /// When it started.
    pub started: Option<String>,
    /// GPU utilisation of its last sample (0–1); `None` before the first.
    pub gpu_util: Option<f32>,
    /// When its last sample arrived.
    pub last_sample: Option<String>,
    /// Why the utilisation source's last poll sent no sample for it, if it sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_sample: Option<String>,
    /// What the scheduler did differently from the admission: the GPUs admitted when it allocated
    /// another number, runs after a requeue, an array's tasks, a release outside bursar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<RunsView>,
}

/// What the scheduler reported about a job's runs beyond one plain start and end (wire format v1.x),
/// in [`JobLine`] and the job view.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunsView {
    /// GPUs the admission reserved, when the scheduler allocated a different number (`gpus` is then
    /// the allocation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_gpus: Option<Gpus>,
    /// Runs after the first (requeues, preemptions, reruns of a finished job).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reruns: u32,
    /// For an array: its tasks, how many started, how many are live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayView>,
    /// For a task of an array: the array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Released in the scheduler outside bursar while it waited for approval, by this person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_by: Option<String>,
    /// The scheduler has until then to confirm it created the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_by: Option<String>,
    /// bursar reclaimed the job then and the scheduler did not carry it out (`action.failed`): it
    /// still runs and counts, until it ends or someone stops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_failed: Option<String>,
    /// Requeued, and waiting to run again (holding no GPUs meanwhile).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeued: bool,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// An array's tasks, in [`RunsView`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ArrayView {
    /// Tasks admitted.
    pub tasks: u32,
    /// Tasks that may run at once.
    pub slots: u32,
    /// Tasks started so far.
    pub started: u32,
    /// Tasks started and not yet released.
    pub live: u32,
}

/// A project on the pool page: what it holds now, its live jobs and its quotas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectLine {
    /// The project.
    pub project: String,
    /// GPUs of admitted jobs not yet released.
    pub held_gpus: Gpus,
    /// GPUs of started jobs not yet released.
    pub running_gpus: Gpus,
    /// Jobs holding or about to hold GPUs.
    pub live_jobs: u64,
    /// The first of them (running first, the longest-running first), at most
    /// 50 (`bursar_serve::pool::PROJECT_JOBS_SHOWN`); `live_jobs` counts them all.
    #[serde(default)]
    pub jobs: Vec<JobLine>,
    /// Its quotas (project-scoped ones) in their current period.
    pub quotas: Vec<QuotaLine>,
}

/// A recent deny, in [`PoolView`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenyLine {
    /// Event time of the decision.
    pub time: String,
    /// The job.
    pub job_id: Option<String>,
    /// Its project.
    pub project: Option<String>,
    /// Its user.
    pub user: Option<String>,
    /// The policies.
    pub policies: Vec<String>,
    /// Why.
    pub reason: String,
}

/// `GET /v1/pool`: everything the page `/` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    /// The engine's clock (the newest event time).
    pub engine_time: String,
    /// The wall clock when the view was built (countdowns count from it).
    pub now: String,
    /// Projects with usage or a quota of their own, by name.
    pub projects: Vec<ProjectLine>,
    /// Quotas of users and tags (a `tag:team` budget spans projects).
    pub shared_quotas: Vec<QuotaLine>,
    /// Jobs waiting for an approval.
    pub approvals: Vec<ApprovalWait>,
    /// Jobs alerted as idle.
    pub idle: Vec<IdleWait>,
    /// Deferred jobs.
    pub deferred: Vec<DeferredWait>,
    /// The last denies, newest first.
    pub denies: Vec<DenyLine>,
    /// The pool's capacity per region, GPU type and queue (empty before the first inventory).
    #[serde(default)]
    pub capacity: Vec<CapacityLine>,
    /// The admitted jobs not started yet, per queue in the scheduler's order.
    #[serde(default)]
    pub queue: Vec<QueueLine>,
}

/// What a person does about a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Keep an idle job (a `job.keepalive`).
    Keepalive,
    /// Approve a held job (an `approval.granted`).
    Approve,
    /// Approve a job held because a quota is exhausted: it runs over that budget (an
    /// `approval.granted` with `"over_budget": true`).
    ApproveOverBudget,
    /// Reject a held job (an `approval.rejected`).
    Reject,
}

impl ActionKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Keepalive => "keepalive",
            ActionKind::Approve => "approve",
            ActionKind::ApproveOverBudget => "approve_over_budget",
            ActionKind::Reject => "reject",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<ActionKind> {
        Some(match s {
            "keepalive" => ActionKind::Keepalive,
            "approve" => ActionKind::Approve,
            "approve_over_budget" => ActionKind::ApproveOverBudget,
            "reject" => ActionKind::Reject,
            _ => return None,
        })
    }

    /// True for the two kinds of approval.
    pub fn approves(self) -> bool {
        matches!(self, ActionKind::Approve | ActionKind::ApproveOverBudget)
    }
}

/// The body of `POST /v1/jobs/{id}/approve|reject|keepalive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRequest {
    /// Who answers (an approver's name, the job's owner): the event's `by`. A server with
    /// principals takes it from the credential; a name given here must be the credential's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// For a rejection: why (kept in the event as `reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Approve over budget (a job a quota held).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub over_budget: bool,
    /// The event id to use, so a retried request is a duplicate (generated by serve when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// What an answer did, once durable: the answer to a successful `POST /v1/jobs/{id}/…` (a refusal
/// is an [`super::ErrorReply`] with 403, 404, 409 or 410).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionReply {
    /// The job.
    pub job_id: String,
    /// What was done.
    pub action: ActionKind,
    /// Who did it.
    pub by: String,
    /// The event id it was applied under.
    pub event_id: String,
    /// What happened, as a sentence.
    pub message: String,
    /// The decisions it produced.
    pub decisions: Vec<Sequenced>,
}

/// Whether a notice is open or over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeStatus {
    /// Its cause stands.
    Firing,
    /// Its cause ended (`resolution` says how).
    Resolved,
}

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// A job waits for an approval.
    Approval,
    /// A job was alerted as idle and is reclaimed unless kept alive.
    Idle,
    /// A job's GPUs were reclaimed.
    Reclaim,
    /// Any other alert (advice, an ignored approval, a keepalive acknowledged).
    Alert,
}

impl NoticeKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Approval => "approval",
            NoticeKind::Idle => "idle",
            NoticeKind::Reclaim => "reclaim",
            NoticeKind::Alert => "alert",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<NoticeKind> {
        Some(match s {
            "approval" => NoticeKind::Approval,
            "idle" => NoticeKind::Idle,
            "reclaim" => NoticeKind::Reclaim,
            "alert" => NoticeKind::Alert,
            _ => return None,
        })
    }
}

/// A signed action link in a notice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoticeLink {
    /// What it does.
    pub action: ActionKind,
    /// Who it is for (the event's `by` when used).
    pub for_user: String,
    /// The URL (`GET` shows what it will do; only a `POST` there acts). Filled when the notice is
    /// sent: the outbox keeps only the token's hash ([`NoticeLink::token_sha256`]), so whoever can
    /// read the audit database cannot lift a link from it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// When it stops working.
    pub expires: String,
    /// SHA-256 of the link's token, hex: what the outbox keeps instead of the URL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_sha256: String,
    /// An approval link's request (GPUs, hours, submission time in ms), which the link is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<(Gpus, f64, i64)>,
}

/// One notice as the webhook sink sends it (`POST` to the configured URL, one notice per request;
/// the same notice is sent once firing and once resolved).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoticeMessage {
    /// Stable id of the notice (`notice-<decision seq>`): a receiver that sees it twice (serve
    /// killed between the receiver's answer and its own record) can drop the second.
    pub id: String,
    /// Firing or resolved.
    pub status: NoticeStatus,
    /// What it is about.
    pub kind: NoticeKind,
    /// Who should act (the approvers, the job's owner); empty when nobody in particular.
    pub recipients: Vec<String>,
    /// The job.
    pub job_id: Option<String>,
    /// Its project.
    pub project: Option<String>,
    /// Its user.
    pub user: Option<String>,
    /// The policies behind the decision.
    pub policies: Vec<String>,
    /// The decision that raised it (`require_approval`, `alert`, `reclaim`).
    pub decision: String,
    /// Its decision id.
    pub decision_id: String,
    /// A line for a person.
    pub summary: String,
    /// The decision's reason.
    pub reason: String,
    /// When the cause began (the decision's time).
    pub starts_at: String,
    /// When something happens by itself unless someone acts (the approval lapses, the job is
    /// reclaimed).
    pub deadline: Option<String>,
    /// For a resolved notice: when and how its cause ended.
    pub resolved_at: Option<String>,
    /// For a resolved notice: how (`approved`, `kept alive`, `reclaimed`, `job finished`, …).
    pub resolution: Option<String>,
    /// The action links.
    pub links: Vec<NoticeLink>,
}
