//! The contract between the engine and a policy, whatever language the policy is written in.
//!
//! A policy sees one input at a time (an event, or a timer it scheduled), together with a read-only
//! view of the engine's [`State`], and pushes [`Verdict`]s and [`Effect`]s into an [`Output`]. It never
//! mutates state itself: the engine combines the verdicts of all policies and then applies the effects,
//! which is what makes TOML and WebAssembly policies interchangeable and replay deterministic.

use std::fmt;
use std::sync::Arc;

use bursar_model::{DecisionKind, Duration, Event, EventKind, Gpus, Hints, JobSpec, Period, Timestamp};
use serde::{Deserialize, Serialize};

use crate::state::{JobFacts, JobRecord, ScopeKind, State, Usage};

/// Whether a policy's verdicts are enforced or only reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Verdicts count.
    #[default]
    Enforce,
    /// Verdicts are reported as `dry_run` decisions and never change the outcome.
    DryRun,
}

impl Mode {
    /// The keyword used in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::DryRun => "dry_run",
        }
    }
}

/// A set of event types, as a bit mask over [`bursar_model::EVENT_TYPES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventMask(pub u16);

impl EventMask {
    /// Every event type.
    pub const ALL: EventMask = EventMask((1 << 12) - 1);
    /// No event type.
    pub const NONE: EventMask = EventMask(0);

    /// The bit index of an event kind.
    pub fn index(kind: &EventKind) -> usize {
        match kind {
            EventKind::JobSubmitted(_) => 0,
            EventKind::JobStarted { .. } => 1,
            EventKind::JobSample(_) => 2,
            EventKind::JobFinished { .. } => 3,
            EventKind::JobKeepalive { .. } => 4,
            EventKind::BillingCharge(_) => 5,
            EventKind::ApprovalGranted { .. } => 6,
            EventKind::ApprovalRejected { .. } => 7,
            EventKind::AssetRegistered { .. } => 8,
            EventKind::ClockTick => 9,
            EventKind::JobQueued { .. } => 10,
            EventKind::JobRequeued { .. } => 11,
        }
    }

    /// The mask of one type name (`job.sample`), if it is a v1 type.
    pub fn of_name(name: &str) -> Option<EventMask> {
        bursar_model::EVENT_TYPES.iter().position(|t| *t == name).map(|i| EventMask(1 << i))
    }

    /// The union.
    pub fn with(self, other: EventMask) -> EventMask {
        EventMask(self.0 | other.0)
    }

    /// True when `kind` is in the set.
    pub fn contains(self, kind: &EventKind) -> bool {
        self.0 & (1 << Self::index(kind)) != 0
    }
}

/// Which jobs a policy applies to. Empty lists match everything; every non-empty list must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// Projects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
    /// Users.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Queues.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<String>,
    /// Stages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<String>,
    /// GPU types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_types: Vec<String>,
    /// Tags that must be present with these values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<(String, String)>,
}

impl Selector {
    /// True when the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.projects.is_empty()
            && self.users.is_empty()
            && self.queues.is_empty()
            && self.stages.is_empty()
            && self.gpu_types.is_empty()
            && self.tags.is_empty()
    }

    /// Does the job match?
    pub fn matches(&self, job: &impl JobFacts) -> bool {
        fn any(list: &[String], v: &str) -> bool {
            list.is_empty() || list.iter().any(|x| x == v)
        }
        fn any_opt(list: &[String], v: Option<&str>) -> bool {
            list.is_empty() || v.is_some_and(|v| list.iter().any(|x| x == v))
        }
        any(&self.projects, job.project())
            && any(&self.users, job.user())
            && any_opt(&self.queues, job.queue())
            && any_opt(&self.stages, job.stage())
            && any_opt(&self.gpu_types, job.gpu_type())
            && self.tags.iter().all(|(k, v)| job.tag(k) == Some(v.as_str()))
    }
}

/// What every policy declares about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyMeta {
    /// Unique id, e.g. `quota/monthly-gpu-hours`.
    pub id: Arc<str>,
    /// What the policy is for, in a sentence.
    pub description: String,
    /// Enforce or dry-run.
    pub mode: Mode,
    /// Which jobs it applies to.
    pub selector: Selector,
    /// Which event types it wants to see.
    pub events: EventMask,
    /// The file it came from.
    pub source: String,
    /// The kind of policy (`quota`, `reclaim`, `rule`, `wasm`, …), for listings.
    pub kind: &'static str,
    /// Named branches (rules, conditions) it can take, for coverage reports; verdicts refer to them by
    /// index. An empty name marks a branch this policy's configuration can never take (a check it does
    /// not configure): coverage reports leave it out.
    pub branches: Vec<String>,
    /// Whether a job's own user may answer the approval this policy asks for (`self_approval =
    /// true`; by default they may not: a person does not approve their own 80-hour job).
    pub self_approval: bool,
}

/// What a policy concluded about one input.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The decision it asks for.
    pub kind: VerdictKind,
    /// The job concerned; `None` means the job of the input.
    pub job_id: Option<Arc<str>>,
    /// A sentence a person can read, or what to build it from.
    pub reason: Reason,
    /// GPU-hours concerned, for the decisions that have no figure of the engine's own: an alert
    /// carries it as its `gpu_hours` (summed when several policies alert about the same job on the same
    /// input). Admissions always carry the GPU-hours requested and reclaims the GPU-hours still
    /// reserved, whatever a policy says.
    pub gpu_hours: Option<f64>,
    /// Index into [`PolicyMeta::branches`] of the branch that produced it.
    pub branch: Option<u16>,
}

impl Verdict {
    /// A verdict about the input's job.
    #[inline]
    pub fn new(kind: VerdictKind, reason: impl Into<Reason>) -> Verdict {
        Verdict { kind, job_id: None, reason: reason.into(), gpu_hours: None, branch: None }
    }

    /// The same verdict, tagged with the branch that produced it.
    #[inline]
    pub fn on_branch(mut self, branch: u16) -> Verdict {
        self.branch = Some(branch);
        self
    }
}

/// A verdict's sentence: written already, or left for later.
///
/// Most verdicts of an admission never reach a person: when one policy denies, the notes of the
/// policies that allowed ("project nlp at 250 of 10,000 GPU-hours for 2026-11") are dropped. A policy
/// can therefore hand the engine the numbers of its sentence instead ([`Reason::Later`]), and the
/// engine asks it to write the sentence ([`Policy::render`]) only for the verdicts that end up in a
/// decision, straight into that decision's reason. The decision and its text are the same either way.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The sentence.
    Text(String),
    /// What the policy needs to write it when asked.
    Later(Later),
}

impl Reason {
    /// No sentence.
    pub const NONE: Reason = Reason::Text(String::new());

    /// The sentence when it is written already (`""` for [`Reason::Later`]: ask the policy).
    #[inline]
    pub fn text(&self) -> &str {
        match self {
            Reason::Text(s) => s,
            Reason::Later(_) => "",
        }
    }
}

impl From<String> for Reason {
    #[inline]
    fn from(s: String) -> Reason {
        Reason::Text(s)
    }
}

impl From<&str> for Reason {
    fn from(s: &str) -> Reason {
        Reason::Text(s.to_owned())
    }
}

impl From<Later> for Reason {
    fn from(l: Later) -> Reason {
        Reason::Later(l)
    }
}

/// The numbers of a sentence a policy writes only when asked ([`Policy::render`]); which sentence is
/// the policy's own numbering. Words the sentence needs from the job or the policy's settings are
/// not copied: the policy reads them again when it renders.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Later {
    /// Which sentence.
    pub code: u16,
    /// Its numbers.
    pub nums: [f64; 2],
    /// Its integer (a count, or a time in milliseconds).
    pub int: i64,
}

/// The decision a verdict asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum VerdictKind {
    /// No objection; may carry placement hints.
    Allow(Hints),
    /// Refuse.
    Deny,
    /// Hold for a person's approval.
    RequireApproval {
        /// Who may approve; empty means anyone. Shared with the policy that names them, so asking for
        /// an approval copies no name.
        approvers: Arc<[String]>,
        /// How long the request stays open.
        expires_after: Duration,
    },
    /// Admit later.
    Defer {
        /// When.
        until: Timestamp,
    },
    /// Release the job's GPUs.
    Reclaim,
    /// Tell the owner.
    Alert,
}

impl VerdictKind {
    /// The decision kind this verdict maps to.
    #[inline]
    pub fn decision(&self) -> DecisionKind {
        match self {
            VerdictKind::Allow(_) => DecisionKind::Allow,
            VerdictKind::Deny => DecisionKind::Deny,
            VerdictKind::RequireApproval { .. } => DecisionKind::RequireApproval,
            VerdictKind::Defer { .. } => DecisionKind::Defer,
            VerdictKind::Reclaim => DecisionKind::Reclaim,
            VerdictKind::Alert => DecisionKind::Alert,
        }
    }
}

/// A change to state a policy asks the engine to make after combining.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Call the policy's [`Policy::on_timer`] at `at` for `job_id` with `tag`.
    Timer {
        /// When.
        at: Timestamp,
        /// The job.
        job_id: Arc<str>,
        /// A number the policy chooses to tell its timers apart.
        tag: u32,
    },
    /// Store (or with `None`, clear) a private note on a job.
    Mark {
        /// The job.
        job_id: Arc<str>,
        /// Key, usually [`crate::state::mark_key`].
        key: u64,
        /// Value.
        value: Option<i64>,
    },
}

/// Where a policy writes its verdicts and effects.
#[derive(Debug, Default)]
pub struct Output {
    /// Verdicts.
    pub verdicts: Vec<Verdict>,
    /// Effects.
    pub effects: Vec<Effect>,
}

impl Output {
    /// Adds a verdict.
    #[inline]
    pub fn verdict(&mut self, v: Verdict) {
        self.verdicts.push(v);
    }

    /// Adds an effect.
    #[inline]
    pub fn effect(&mut self, e: Effect) {
        self.effects.push(e);
    }

    /// Empties both lists, keeping their memory.
    #[inline]
    pub fn clear(&mut self) {
        self.verdicts.clear();
        self.effects.clear();
    }
}

/// What a policy sees when it evaluates an event.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The event.
    pub event: &'a Event,
    /// The event as the producer sent it, when the caller has it.
    pub raw: Option<&'a str>,
    /// Event time of the engine (the latest time seen).
    pub now: Timestamp,
    /// The engine's state before this event's effects.
    pub state: &'a State,
    /// For job events other than `job.submitted`: the stored job.
    pub job: Option<&'a JobRecord>,
}

impl<'a> Context<'a> {
    /// The submitted job, for `job.submitted`.
    pub fn submitted(&self) -> Option<&'a JobSpec> {
        match &self.event.kind {
            EventKind::JobSubmitted(j) => Some(j),
            _ => None,
        }
    }
}

/// What a policy sees when one of its timers fires.
#[derive(Debug, Clone, Copy)]
pub struct TimerContext<'a> {
    /// When the timer was due.
    pub at: Timestamp,
    /// The job it was set for.
    pub job_id: &'a Arc<str>,
    /// The job's record, if the job is still known.
    pub job: Option<&'a JobRecord>,
    /// The tag it was set with.
    pub tag: u32,
    /// The engine's state.
    pub state: &'a State,
}

/// Whose usage a quota counts: the ledger it reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaScope {
    /// The job's project.
    Project,
    /// The job's user.
    User,
    /// The job's value of the tag with this key (ledger name `key=value`).
    Tag(String),
}

impl QuotaScope {
    /// The kind of ledger it reads.
    pub fn kind(&self) -> ScopeKind {
        match self {
            QuotaScope::Project => ScopeKind::Project,
            QuotaScope::User => ScopeKind::User,
            QuotaScope::Tag(_) => ScopeKind::Tag,
        }
    }

    /// Whether the ledger `name` of kind `kind` is one this scope counts against (for a tag scope,
    /// `name` is `key=value` with this scope's key).
    pub fn counts(&self, kind: ScopeKind, name: &str) -> bool {
        match self {
            QuotaScope::Tag(key) => {
                kind == ScopeKind::Tag && name.strip_prefix(key.as_str()).is_some_and(|rest| rest.starts_with('='))
            }
            other => other.kind() == kind,
        }
    }
}

/// Where a quota's settled usage comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settle {
    /// Actual runtime at release.
    #[default]
    Runtime,
    /// `billing.charge` events.
    Billing,
}

/// One quota as the policy that enforces it describes it: whose usage, over which period, how many
/// GPU-hours per ledger, and the concurrency caps. The quota family checks admissions with exactly
/// these numbers ([`QuotaLimit::gpu_hours_for`], [`QuotaLimit::counted`]), so a reader that uses them
/// agrees with the engine by construction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaLimit {
    /// Whose usage.
    pub scope: QuotaScope,
    /// The calendar period `gpu_hours` is counted over.
    pub period: Period,
    /// GPU-hours per period of a ledger without its own entry in `limits`.
    pub gpu_hours: Option<f64>,
    /// GPU-hours per period per scope value, as written in `limits`: a project, a user, or for a tag
    /// scope the tag's value (`search`, not `team=search`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<(String, f64)>,
    /// GPUs one ledger may hold at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gpus: Option<Gpus>,
    /// GPUs one ledger may hold at once per queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<(String, Gpus)>,
    /// Where settled usage comes from.
    #[serde(default)]
    pub settle: Settle,
}

impl QuotaLimit {
    /// The GPU-hours per period of the ledger `name` (for a tag scope `key=value`): its own limit,
    /// else the default.
    pub fn gpu_hours_for(&self, name: &str) -> Option<f64> {
        let value = match &self.scope {
            QuotaScope::Tag(key) => name.strip_prefix(key.as_str()).and_then(|r| r.strip_prefix('=')).unwrap_or(name),
            _ => name,
        };
        self.limits.iter().find(|(k, _)| k == value).map(|(_, v)| *v).or(self.gpu_hours)
    }

    /// What this quota counts of a ledger's `usage` in the period (reserved included): runtime
    /// settlement counts reserved + used, billing settlement reserved + finished-but-uncharged +
    /// charged. What is left is `gpu_hours_for(name) - counted(usage)`.
    pub fn counted(&self, usage: &Usage) -> f64 {
        match self.settle {
            Settle::Runtime => usage.by_runtime(),
            Settle::Billing => usage.by_billing(),
        }
    }
}

/// What one policy limits, as it describes itself through [`Policy::limits`]: the quotas it enforces
/// and the utilisation its idle-reclaim rule calls idle. Empty for a policy that limits nothing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Limits {
    /// The quotas it checks admissions against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<QuotaLimit>,
    /// GPU utilisation (0–1) under which its idle rule watches a job for reclaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_below: Option<f64>,
}

impl Limits {
    /// True when the policy limits nothing.
    pub fn is_empty(&self) -> bool {
        self.quotas.is_empty() && self.idle_below.is_none()
    }
}

/// A step a policy will take on a job by itself unless a person answers first: the idle rule's
/// reclaim after its alert, unless the owner sends a keepalive ([`Policy::deadline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deadline {
    /// When the policy told the person (the event time of its alert).
    pub since: Timestamp,
    /// When it acts.
    pub at: Timestamp,
    /// Since when the job has been under the rule's threshold, when the rule keeps that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<Timestamp>,
}

/// A compiled policy. Implemented by the TOML families, general rules and WebAssembly components.
///
/// Implementations must be deterministic: the same input and state give the same output.
pub trait Policy: Send + Sync + fmt::Debug {
    /// Id, mode, selector, event types.
    fn meta(&self) -> &PolicyMeta;

    /// Evaluates one event of a type in `meta().events`. For job events the engine has already checked
    /// the selector against the job.
    fn evaluate(&self, cx: &Context<'_>, out: &mut Output);

    /// Handles a timer this policy scheduled through [`Effect::Timer`].
    fn on_timer(&self, _cx: &TimerContext<'_>, _out: &mut Output) {}

    /// Writes the sentence of one of this policy's verdicts whose reason is a [`Reason::Later`], for
    /// the verdicts that end up in a decision. `job` is the submitted job when the verdict answered a
    /// `job.submitted`, and `now` the engine's time when it was given. A policy that never gives a
    /// `Later` (the default) writes nothing.
    fn render(&self, _verdict: &Verdict, _later: &Later, _job: Option<&JobSpec>, _now: Timestamp, _out: &mut String) {}

    /// Whether this policy can hold a job for an approval that names no `approvers` (answered by
    /// the approvers and admins the configuration names: `bursar check` says which policies).
    /// A WebAssembly policy decides its approvers per job: `false`.
    fn unnamed_approval(&self) -> bool {
        false
    }

    /// How long copying a dataset to a region without a copy takes, when this policy places jobs
    /// across regions (a `placement` policy's `cross_region.copy_hours`): `GET /v1/estimate` counts
    /// it for a request that names its dataset.
    fn dataset_copy(&self) -> Option<bursar_model::Duration> {
        None
    }

    /// Times this policy failed (a trapped guest, a timeout), for reports. TOML policies never fail.
    fn failures(&self) -> u64 {
        0
    }

    /// What this policy limits, for readers that must agree with it without reading its file again:
    /// the report's monthly budgets and idle threshold (`bursar-report`'s `PolicyHints`), and a live
    /// pool page showing, per ledger, the quota used, reserved and left in the current period —
    /// `State::usage(q.scope.kind(), name, q.period, now)` gives the usage, [`QuotaLimit::counted`]
    /// what the quota counts of it and [`QuotaLimit::gpu_hours_for`] the limit, the same arithmetic
    /// the quota family admits with. [`crate::PolicySet::limits`] collects them with each policy's
    /// mode and selector.
    ///
    /// The default is "nothing": a policy whose limits cannot be read off its configuration (a
    /// WebAssembly component, a general `rule`) describes none, and readers treat it as limiting
    /// nothing they can draw.
    fn limits(&self) -> Limits {
        Limits::default()
    }

    /// The step this policy will take on `job` by itself unless its owner answers first, if it is
    /// waiting to take one: for the idle rule, the reclaim due `grace` after its alert, which a
    /// `job.keepalive` calls off. Read by the notices (a keep-alive link and its deadline) and by
    /// serve's pool page (the time left before reclaim); never by the engine, which decides from its
    /// timers. The default is "none": a policy that cannot tell (a WebAssembly component, a `rule`)
    /// announces nothing, and its alerts go out as plain alerts.
    fn deadline(&self, _job: &JobRecord) -> Option<Deadline> {
        None
    }
}
