//! The engine: one writer that applies events in order, asks the policies, combines their verdicts
//! into decisions and applies the effects.
//!
//! For each event: drop it if its id was seen; advance event time and fire the timers now due; let every
//! policy that wants the event type (and whose selector matches the job) evaluate it against the state
//! as it was before the event; combine the verdicts; apply the engine's own bookkeeping (reservations,
//! starts, releases, settlement) and the policies' effects. Decisions come out in a deterministic order
//! with deterministic ids (`<event id>/<n>`), so the same input always yields byte-identical output.

use std::sync::Arc;

use bursar_model::{
    Decision, DecisionKind, Duration, Event, EventKind, FinishStatus, Gpus, Hints, Input, JobSpec, LedgerChange,
    LedgerOp, RunFact, Sample, StartInfo, Timestamp,
};
use serde::{Deserialize, Serialize};

use crate::dedupe::Dedupe;
use crate::policy::{Context, Effect, EventMask, Mode, Output, Policy, Reason, TimerContext, Verdict, VerdictKind};
use crate::set::PolicySet;
use crate::shared::{LedgerAnswer, LedgerClient, SharedVerdicts, of_rank, rank};
use crate::state::{JobPhase, JobRecord, Pending, ScopeKind, State};
use crate::timers::{Timer, TimerKind, TimerQueue};

/// The policy id the engine itself uses for the decisions it makes without a policy.
pub const ENGINE_POLICY: &str = "bursar/engine";

/// The engine's own policy id for an allocation that differed from the admission's reservation.
pub const ALLOCATION_POLICY: &str = "bursar/allocation";

/// The engine's own policy id for a finished job the scheduler ran again without an admission.
pub const RERUN_POLICY: &str = "bursar/rerun";

/// The engine's own policy id for a job released in the scheduler while it waited for approval.
pub const OVERRIDE_POLICY: &str = "bursar/override";

/// The engine's own policy id for an admission the scheduler never confirmed.
pub const UNCONFIRMED_POLICY: &str = "bursar/unconfirmed";

/// The engine's own policy id for a reservation released as stale (an admitted job that did not
/// start within [`EngineConfig::stale_after`]), and for the alert when such a job starts after all.
pub const STALE_POLICY: &str = "bursar/stale";

/// The engine's own policy id for a move (`job.replaces`, a Slurm partition change admitted again)
/// the scheduler did not make: the job it would have replaced is reserved again, with an alert.
pub const MOVE_POLICY: &str = "bursar/move";

/// The policy named by the alert that a reclaim was not carried out by the scheduler (its agent
/// recorded `action.failed`), and the job counts again.
pub const RECLAIM_FAILED_POLICY: &str = "bursar/reclaim-failed";

/// Engine settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// How long event ids are remembered for deduplication.
    pub dedupe_window: Duration,
    /// How many event ids are remembered at most.
    pub dedupe_capacity: usize,
    /// How long a finished job's record is kept (for late billing charges) before it is dropped.
    pub finished_retention: Duration,
    /// How long an admitted job may wait without starting before its reservation is released as
    /// stale, with an alert from [`STALE_POLICY`] (counted from its admission, or its requeue);
    /// zero: never. Default [`STALE_AFTER`]. A snapshot written before the setting existed reads
    /// as the default.
    #[serde(default = "default_stale_after")]
    pub stale_after: Duration,
}

/// The default of [`EngineConfig::stale_after`]: 7 days. Longer than a busy queue's waits (a job
/// that starts later is admitted again, with an alert), short enough that a job the scheduler lost
/// does not hold its reservation for weeks.
pub const STALE_AFTER: Duration = Duration::hours(7 * 24);

fn default_stale_after() -> Duration {
    STALE_AFTER
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            dedupe_window: Duration::hours(24),
            dedupe_capacity: 4_000_000,
            finished_retention: Duration::hours(24),
            stale_after: STALE_AFTER,
        }
    }
}

/// What happened to an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Applied.
    Applied,
    /// Its id was seen before; ignored.
    Duplicate,
    /// Not applied, and its id not remembered, for the reason given: a `job.submitted` for a job id
    /// the engine already knows. (Before December 2026 that was an enforceable `deny` of the job,
    /// which `bursar slurm enforce` turned into an `scancel` of the job already running: anyone who
    /// could submit could cancel anyone's job by resubmitting its id.)
    Refused(String),
}

/// One step in a job's life, as the engine decided it: the one definition of the job lifecycle that
/// everything downstream (the report's accounting, the audit log's `lifecycle` rows) reads instead of
/// inferring it again from events and decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Admitted: may start now (at submission, on approval, or when a deferral ended).
    Admitted,
    /// Admitted to start later (a `defer`).
    Deferred,
    /// Held for a person's approval.
    Held,
    /// Refused (at submission, by a rejection, or because the approval request expired).
    Denied,
    /// Started on its GPUs (its first run, or a run after a requeue).
    Started,
    /// Its run ended and it waits to run again (`job.requeued`): the run is settled, the job keeps
    /// its admission.
    Requeued,
    /// Ended, with the scheduler's status.
    Finished(FinishStatus),
    /// Its GPUs were released by a reclaim decision.
    Reclaimed,
}

impl Step {
    /// The stored name (`finished` for every finish status; the status is kept beside it).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Admitted => "admitted",
            Step::Deferred => "deferred",
            Step::Held => "held",
            Step::Denied => "denied",
            Step::Started => "started",
            Step::Requeued => "requeued",
            Step::Finished(_) => "finished",
            Step::Reclaimed => "reclaimed",
        }
    }
}

/// A job's step at an event time, produced while applying one input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// The job.
    pub job: Arc<str>,
    /// Event time of the step (for a timer, when it was due).
    pub at: Timestamp,
    /// What happened.
    pub step: Step,
}

/// Counters since the engine started (or was restored).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Events applied.
    pub events: u64,
    /// Events ignored as duplicates.
    pub duplicates: u64,
    /// Job events for a job the engine does not know.
    pub unknown_jobs: u64,
    /// Decisions by kind, in [`DecisionKind::ALL`] order.
    pub decisions: [u64; 6],
    /// Dry-run decisions.
    pub dry_run_decisions: u64,
    /// Timers fired.
    pub timers_fired: u64,
    /// Action records taken (`action.executed`, `action.failed`).
    #[serde(default)]
    pub actions: u64,
    /// Run facts from other partitions applied (`run.recorded`, cluster mode).
    #[serde(default)]
    pub runs_from_elsewhere: u64,
    /// Wall ticks applied.
    #[serde(default)]
    pub wall_ticks: u64,
}

/// Everything needed to resume an engine: state, timers, remembered ids, counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    /// Engine state.
    pub state: State,
    /// Pending timers.
    pub timers: Vec<Timer>,
    /// Remembered event ids.
    pub dedupe: Dedupe,
    /// Counters.
    pub stats: Stats,
    /// Settings.
    pub config: EngineConfig,
}

/// A run of a configuration that a `job.finished` recorded (trial-before-scale's history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedRun {
    /// When it finished.
    pub time: Timestamp,
    /// Hash of its configuration key.
    pub config: u64,
    /// Its GPUs.
    pub gpus: Gpus,
    /// How it ended.
    pub status: FinishStatus,
}

impl RecordedRun {
    /// The `run.recorded` fact of this run, recorded by the input `cause` (its id: `run-<cause>`).
    pub fn fact(&self, cause: &str) -> RunFact {
        RunFact {
            id: format!("run-{cause}"),
            time: self.time,
            config: self.config,
            gpus: self.gpus,
            status: self.status,
        }
    }
}

/// The evaluation engine.
#[derive(Debug)]
pub struct Engine {
    state: State,
    policies: Arc<PolicySet>,
    timers: TimerQueue,
    dedupe: Dedupe,
    stats: Stats,
    config: EngineConfig,
    scratch: Scratch,
    coverage: Option<Coverage>,
    transitions: Vec<Transition>,
    runs: Vec<RecordedRun>,
    /// How this engine reaches the ledger partition, in a partitioned deployment whose set has
    /// quotas that span projects ([`crate::shared`]).
    ledgers: Option<Box<dyn LedgerClient>>,
    /// Why the last input could not be decided: the ledger partition could not be reached.
    ledger_failure: Option<String>,
    /// The answer the last [`Input::Ledger`] admission got (the ledger partition's side).
    ledger_answer: Option<LedgerAnswer>,
    /// Spanning admissions whose combined decision differed from the ledger partition's (sets out of
    /// step during a reload).
    ledger_mismatches: u64,
}

/// Reused per-policy output buffers, so evaluating an event allocates no vectors once warm.
#[derive(Debug, Default)]
struct Scratch {
    slots: Vec<(usize, Output)>,
    used: usize,
}

/// Which policy branches produced a verdict: `(policy id, branch index)`.
pub type Coverage = std::collections::BTreeSet<(Arc<str>, u16)>;

/// The ledger client as one admission sees it, and where to say it failed.
struct Remote<'a> {
    client: Option<&'a mut (dyn LedgerClient + 'static)>,
    failure: &'a mut Option<String>,
}

/// Builds decisions for one event, numbering them.
struct Emitter<'a> {
    cause: &'a str,
    n: usize,
    out: &'a mut Vec<Decision>,
    steps: &'a mut Vec<Transition>,
    runs: &'a mut Vec<RecordedRun>,
    stats: &'a mut Stats,
    coverage: Option<&'a mut Coverage>,
}

/// The parts of a decision that vary.
struct Draft {
    time: Timestamp,
    job_id: Option<Arc<str>>,
    project: Option<Arc<str>>,
    user: Option<Arc<str>>,
    kind: DecisionKind,
    until: Option<Timestamp>,
    policies: Vec<Arc<str>>,
    reason: String,
    dry_run: bool,
    admission: bool,
    gpus: Option<Gpus>,
    gpu_hours: Option<f64>,
    hints: Option<Hints>,
}

/// Whom a decision is about, when there is no stored record to read it from.
struct Who {
    project: Arc<str>,
    user: Arc<str>,
    gpus: Gpus,
}

impl Draft {
    fn about_who(job_id: &Arc<str>, who: &Who, time: Timestamp, kind: DecisionKind) -> Draft {
        Draft::with(job_id, Some(Arc::clone(&who.project)), Some(Arc::clone(&who.user)), Some(who.gpus), time, kind)
    }

    fn about(job_id: &Arc<str>, job: Option<&JobRecord>, time: Timestamp, kind: DecisionKind) -> Draft {
        let (project, user, gpus) =
            (job.map(|j| j.profile.project.to_arc()), job.map(|j| j.profile.user.to_arc()), job.map(|j| j.gpus));
        Draft::with(job_id, project, user, gpus, time, kind)
    }

    fn with(
        job_id: &Arc<str>,
        project: Option<Arc<str>>,
        user: Option<Arc<str>>,
        gpus: Option<Gpus>,
        time: Timestamp,
        kind: DecisionKind,
    ) -> Draft {
        Draft {
            time,
            job_id: Some(job_id.clone()),
            project,
            user,
            kind,
            until: None,
            policies: Vec::new(),
            reason: String::new(),
            dry_run: false,
            admission: false,
            gpus,
            gpu_hours: None,
            hints: None,
        }
    }
}

impl Emitter<'_> {
    fn cover(&mut self, policy: &Arc<str>, out: &Output) {
        if let Some(c) = self.coverage.as_deref_mut() {
            for v in &out.verdicts {
                if let Some(b) = v.branch {
                    c.insert((policy.clone(), b));
                }
            }
        }
    }

    fn step(&mut self, job: &Arc<str>, at: Timestamp, step: Step) {
        self.steps.push(Transition { job: job.clone(), at, step });
    }

    fn emit(&mut self, d: Draft) {
        self.stats.decisions[DecisionKind::ALL.iter().position(|k| *k == d.kind).unwrap_or(0)] += 1;
        if d.dry_run {
            self.stats.dry_run_decisions += 1;
        }
        let mut decision_id = String::with_capacity(self.cause.len() + 3);
        decision_id.push_str(self.cause);
        decision_id.push('/');
        bursar_model::push_int(&mut decision_id, self.n as i64);
        self.out.push(Decision {
            decision_id,
            event_id: self.cause.to_owned(),
            time: d.time,
            job_id: d.job_id,
            project: d.project,
            decision: d.kind,
            until: d.until,
            policies: d.policies,
            reason: d.reason,
            dry_run: d.dry_run,
            admission: d.admission,
            user: d.user,
            gpus: d.gpus,
            gpu_hours: d.gpu_hours,
            hints: d.hints,
        });
        self.n += 1;
    }
}

fn join_reasons<'a>(reasons: impl Iterator<Item = &'a str>) -> String {
    let mut s = String::new();
    for r in reasons.filter(|r| !r.is_empty()) {
        if !s.is_empty() {
            s.push_str("; ");
        }
        s.push_str(r);
    }
    s
}

/// Appends the sentence of `policy`'s verdict `v` to `out`: its text, or what the policy writes for a
/// [`Reason::Later`].
fn write_reason(policy: &dyn Policy, v: &Verdict, job: Option<&JobSpec>, now: Timestamp, out: &mut String) {
    match &v.reason {
        Reason::Text(t) => out.push_str(t),
        Reason::Later(l) => policy.render(v, l, job, now, out),
    }
}

/// Appends a sentence to a decision's reason, after a `; ` when there is one already; an empty
/// sentence adds nothing (as [`join_reasons`] skips it).
fn join_into(out: &mut String, write: impl FnOnce(&mut String)) {
    let mark = out.len();
    if mark > 0 {
        out.push_str("; ");
    }
    let body = out.len();
    write(out);
    if out.len() == body {
        out.truncate(mark);
    }
}

/// Writes out the [`Reason::Later`]s of `out` as text, for the paths that keep verdicts beyond the
/// call that gave them (follow-ups of events and timers).
fn settle_reasons(policy: &dyn Policy, out: &mut Output, job: Option<&JobSpec>, now: Timestamp) {
    for i in 0..out.verdicts.len() {
        if let Reason::Later(l) = out.verdicts[i].reason {
            let mut text = String::new();
            policy.render(&out.verdicts[i], &l, job, now, &mut text);
            out.verdicts[i].reason = Reason::Text(text);
        }
    }
}

/// The scheduler's reason a waiting job waits (`job.queued`'s `reason`, v1.x): kept, with when it
/// was first given, while the job is admitted and not running; an empty reason clears it.
fn note_wait_reason(j: &mut JobRecord, event: &Event) {
    if j.phase != JobPhase::Admitted || j.started.is_some() {
        return;
    }
    let Some(reason) =
        event.extra.iter().find(|(k, _)| k == "reason").and_then(|(_, v)| serde_json::from_str::<String>(v.get()).ok())
    else {
        return;
    };
    let reason: String = reason.trim().chars().take(crate::state::WAIT_REASON_MAX).collect();
    if j.waits().map(|(r, _)| r) == Some(reason.as_str()) {
        return;
    }
    let at = event.time;
    j.with_runs(|r| {
        if reason.is_empty() {
            r.waits = None;
            r.waits_since = crate::state::OptTime::NONE;
        } else {
            r.waits = Some(Arc::from(reason.as_str()));
            r.waits_since = at.into();
        }
    });
}

/// A job released as never confirmed by the scheduler (its late confirmation admits it again).
fn late_confirmation(j: &JobRecord) -> bool {
    j.phase == JobPhase::Finished && j.runs().is_some_and(|r| r.released_unconfirmed)
}

/// GPU-hours a job would still have used had it run to its requested end.
fn remaining_gpu_hours(job: &JobRecord, now: Timestamp) -> f64 {
    let start = job.started.get().unwrap_or(job.submitted);
    let end = start.plus(Duration((job.requested_hours * 3_600_000.0) as i64));
    job.gpus.as_f64() * end.since(now).as_hours().max(0.0)
}

impl Engine {
    /// An engine with empty state running `policies`.
    pub fn new(policies: Arc<PolicySet>) -> Engine {
        Engine::with_config(policies, EngineConfig::default())
    }

    /// An engine with explicit settings.
    pub fn with_config(policies: Arc<PolicySet>, config: EngineConfig) -> Engine {
        Engine {
            state: State::default(),
            policies,
            timers: TimerQueue::default(),
            dedupe: Dedupe::new(config.dedupe_window, config.dedupe_capacity),
            stats: Stats::default(),
            config,
            scratch: Scratch::default(),
            coverage: None,
            transitions: Vec::new(),
            runs: Vec::new(),
            ledgers: None,
            ledger_failure: None,
            ledger_answer: None,
            ledger_mismatches: 0,
        }
    }

    /// Resumes from a snapshot.
    pub fn restore(policies: Arc<PolicySet>, snapshot: Snapshot) -> Engine {
        let Snapshot { mut state, timers, mut dedupe, stats, config } = snapshot;
        state.reintern();
        dedupe.rebuild();
        Engine {
            state,
            policies,
            timers: TimerQueue::from_vec(timers),
            dedupe,
            stats,
            config,
            scratch: Scratch::default(),
            coverage: None,
            transitions: Vec::new(),
            runs: Vec::new(),
            ledgers: None,
            ledger_failure: None,
            ledger_answer: None,
            ledger_mismatches: 0,
        }
    }

    /// A snapshot of everything needed to resume.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            state: self.state.clone(),
            timers: self.timers.to_vec(),
            dedupe: self.dedupe.clone(),
            stats: self.stats.clone(),
            config: self.config,
        }
    }

    /// Consults the ledger partition through `client` for the quotas that span projects, from now on
    /// (`serve --cluster`; [`crate::shared`]). Without a client (single node) they are evaluated here.
    pub fn set_ledger_client(&mut self, client: Box<dyn LedgerClient>) {
        self.ledgers = Some(client);
    }

    /// The ledger client, taken back.
    pub fn take_ledger_client(&mut self) -> Option<Box<dyn LedgerClient>> {
        self.ledgers.take()
    }

    /// Why the last input was not decided: the ledger partition could not be reached. The input was
    /// then applied only in part; whoever drives the engine must not journal it and should start
    /// again from what was journaled (a cluster owner steps down).
    pub fn ledger_failure(&self) -> Option<&str> {
        self.ledger_failure.as_deref()
    }

    /// The answer the last [`Input::Ledger`] admission got (applied now, or remembered for a resend).
    pub fn ledger_answer(&self) -> Option<&LedgerAnswer> {
        self.ledger_answer.as_ref()
    }

    /// Spanning admissions whose decision here differed from the ledger partition's.
    pub fn ledger_mismatches(&self) -> u64 {
        self.ledger_mismatches
    }

    /// Sends the changes the last input made to jobs admitted through the ledger partition.
    fn send_ledger_ops(&mut self) {
        if self.state.ledger_out.is_empty() {
            return;
        }
        match self.ledgers.as_mut() {
            Some(c) => {
                for op in self.state.ledger_out.drain(..) {
                    c.settle(op);
                }
            }
            None => self.state.ledger_out.clear(),
        }
    }

    /// Swaps in a new policy set; state, timers and pending approvals are kept.
    pub fn set_policies(&mut self, policies: Arc<PolicySet>) {
        self.policies = policies;
    }

    /// The policy set in force.
    pub fn policies(&self) -> &Arc<PolicySet> {
        &self.policies
    }

    /// Read-only state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Starts recording which policy branches produce verdicts (for `bursar test --coverage`).
    pub fn enable_coverage(&mut self) {
        self.coverage.get_or_insert_with(Coverage::new);
    }

    /// The branches recorded since [`Engine::enable_coverage`].
    pub fn coverage(&self) -> Option<&Coverage> {
        self.coverage.as_ref()
    }

    /// Pending timers.
    pub fn timers(&self) -> &TimerQueue {
        &self.timers
    }

    /// True when an input with id `id` was applied and is still remembered: applying it again would
    /// be a duplicate. How serve tells a used action link (whose event id derives from its token)
    /// from a fresh one before sending anything.
    pub fn seen(&self, id: &str) -> bool {
        self.dedupe.contains(id)
    }

    /// Remembers `id` as applied at `time`, as if an input with that id had been: a start that
    /// learns an input's id under another name it must answer to (issue 56: a person's ids kept
    /// before people had a namespace of their own) makes a resend of it a duplicate. False when it
    /// was remembered already.
    pub fn remember_id(&mut self, id: &str, time: Timestamp) -> bool {
        self.dedupe.insert(id, time.max(self.state.now))
    }

    /// How long an id is remembered after it was applied (`EngineConfig::dedupe_window`).
    pub fn dedupe_window(&self) -> Duration {
        self.config.dedupe_window
    }

    /// How long an admitted job may wait to start before its reservation is released as stale
    /// (`EngineConfig::stale_after`; zero: never).
    pub fn stale_after(&self) -> Duration {
        self.config.stale_after
    }

    /// The steps the enforced policies that apply to job `job_id` will take on it by themselves unless
    /// a person answers first ([`Policy::deadline`]: the idle rule's reclaim), with each policy's id,
    /// in policy order. Empty for an unknown job.
    pub fn deadlines(&self, job_id: &str) -> Vec<(Arc<str>, crate::policy::Deadline)> {
        let Some(job) = self.state.job(job_id) else { return Vec::new() };
        self.policies
            .policies()
            .iter()
            .filter(|p| p.meta().mode == Mode::Enforce && p.meta().selector.matches(job))
            .filter_map(|p| p.deadline(job).map(|d| (p.meta().id.clone(), d)))
            .collect()
    }

    /// Starts applying a fact that is not an event (an action record, a run from another
    /// partition): it leaves no job steps or runs of its own, and is remembered by id. False, counted
    /// as a duplicate, when `id` was seen already.
    fn first_fact(&mut self, id: &str, time: Timestamp) -> bool {
        self.transitions.clear();
        self.runs.clear();
        let fresh = self.dedupe.insert(id, time.max(self.state.now));
        if !fresh {
            self.stats.duplicates += 1;
        }
        fresh
    }

    /// Applies one input and appends its decisions to `out`; the job steps it caused are then in
    /// [`Engine::transitions`]. `raw` is the line as received, passed to policies that want the
    /// producer's own fields.
    ///
    /// - An [`Input::Event`] is deduplicated by id, moves event time forward, fires the timers due and
    ///   is evaluated by the policies that want its type.
    /// - An [`Input::WallTick`] moves event time to the wall clock and fires the timers due, attributing
    ///   their decisions to the tick's id; it runs no policy (`clock.tick` rules see only producers'
    ///   ticks) and is not deduplicated.
    /// - An [`Input::Action`] is deduplicated by id and counted; it changes no state and reaches no
    ///   policy (and does not move the clock: it reports on the past).
    /// - An [`Input::Run`] is deduplicated by id and joins its configuration's run history (as a
    ///   finish seen here would, but idempotently: a fact applied twice changes nothing); it reaches
    ///   no policy, makes no decision and does not move the clock.
    /// - An [`Input::Inventory`] is deduplicated by id and replaces the capacity rows it names; it
    ///   reaches no policy, makes no decision and does not move the clock.
    pub fn apply(&mut self, input: &Input, raw: Option<&str>, out: &mut Vec<Decision>) -> Outcome {
        self.ledger_failure = None;
        let outcome = self.apply_input(input, raw, out);
        self.note_queue_entries();
        self.send_ledger_ops();
        outcome
    }

    /// For each job the last input admitted or requeued that now waits to start: when it entered
    /// the queue on the engine's clock (the step's time, or the clock when the event came in late:
    /// a backfilled log's old admission has not waited since its old date) — kept when it differs
    /// from its submission — and the timer that releases its reservation if it is still waiting
    /// [`EngineConfig::stale_after`] later.
    fn note_queue_entries(&mut self) {
        let now = self.state.now;
        for t in &self.transitions {
            if !matches!(t.step, Step::Admitted | Step::Requeued) {
                continue;
            }
            let Some(j) = self.state.jobs.get_mut(&t.job) else { continue };
            if j.phase != JobPhase::Admitted || j.started.is_some() {
                continue;
            }
            let entered = t.at.max(now);
            let at = (entered != j.submitted).then_some(entered);
            if at.is_some() || j.runs().is_some_and(|r| r.queued_since.is_some()) {
                j.with_runs(|r| r.queued_since = at.into());
            }
            if self.config.stale_after.millis() > 0 {
                self.timers.set(entered.plus(self.config.stale_after), t.job.clone(), TimerKind::StaleReservation);
            }
        }
    }

    fn apply_input(&mut self, input: &Input, raw: Option<&str>, out: &mut Vec<Decision>) -> Outcome {
        match input {
            Input::Event(e) => self.process(e, raw, out),
            Input::WallTick(t) => {
                self.transitions.clear();
                self.runs.clear();
                self.stats.wall_ticks += 1;
                self.advance(t.time, &t.id(), out);
                Outcome::Applied
            }
            Input::Ledger(op) => {
                self.ledger_answer = None;
                if !self.first_fact(&op.id, op.time) {
                    self.ledger_answer = self.state.shared.answer(&op.id).cloned();
                    return Outcome::Duplicate;
                }
                self.state.now = self.state.now.max(op.time);
                self.keep_ledgers(op);
                Outcome::Applied
            }
            Input::Action(a) => {
                if !self.first_fact(&a.id, a.time) {
                    return Outcome::Duplicate;
                }
                self.stats.actions += 1;
                if a.outcome == bursar_model::ActionOutcome::Failed && a.decision_kind().as_deref() == Some("reclaim") {
                    self.reclaim_failed(a, out);
                }
                Outcome::Applied
            }
            Input::Run(r) => {
                if !self.first_fact(&r.id, r.time) {
                    return Outcome::Duplicate;
                }
                self.stats.runs_from_elsewhere += 1;
                self.state.record_run_fact(r.config, r.gpus, r.status, r.time);
                Outcome::Applied
            }
            Input::Inventory(inv) => {
                if !self.first_fact(&inv.id, inv.time) {
                    return Outcome::Duplicate;
                }
                self.state.take_inventory(inv);
                Outcome::Applied
            }
        }
    }

    /// A reclaim the scheduler did not carry out (`action.failed` of a reclaim decision): the job still
    /// runs, so it counts again — held, reserved and charged from the reclaim on ([`State::unreclaim`])
    /// — and an alert from [`RECLAIM_FAILED_POLICY`] says so, until it ends or someone acts. The
    /// agent's retries happened before it recorded the failure; a later reclaim decision (the idle
    /// rule's next window) asks again.
    fn reclaim_failed(&mut self, a: &bursar_model::Action, out: &mut Vec<Decision>) {
        let Some((id, mut j)) = a.job_id.as_deref().and_then(|id| self.state.jobs.remove_entry(id)) else {
            return;
        };
        let Some(at) = j.ended.get().filter(|_| j.phase == JobPhase::Reclaimed) else {
            self.state.jobs.insert(id, j);
            return;
        };
        let restored = self.state.unreclaim(&mut j, at);
        let time = self.state.now.max(a.time);
        let mut em = Emitter {
            cause: &a.id,
            n: 0,
            out,
            steps: &mut self.transitions,
            runs: &mut self.runs,
            stats: &mut self.stats,
            coverage: self.coverage.as_mut(),
        };
        if restored {
            self.state.share(&a.id, a.time, &id, LedgerChange::Unreclaim { job_id: id.to_string(), at });
            if j.phase == JobPhase::Running {
                em.step(&id, at, Step::Started);
            }
        }
        let mut d = Draft::about(&id, Some(&j), time, DecisionKind::Alert);
        d.policies = vec![Arc::from(RECLAIM_FAILED_POLICY)];
        d.reason = if restored {
            format!(
                "the scheduler did not carry out the reclaim of job {id} at {at} ({}): it still runs, so it is held, reserved and charged again from {at} until it ends or someone stops it",
                a.detail.as_deref().unwrap_or("no detail")
            )
        } else {
            format!(
                "the scheduler did not carry out the reclaim of array {id} at {at} ({}): its tasks still running are not counted again; stop them by hand",
                a.detail.as_deref().unwrap_or("no detail")
            )
        };
        d.gpu_hours = restored.then_some(j.reserved);
        em.emit(d);
        self.state.jobs.insert(id, j);
    }

    /// The runs the last [`Engine::apply`] recorded from a `job.finished` (for trial-before-scale):
    /// what `serve --cluster` sends the other partitions as `run.recorded` facts
    /// ([`RecordedRun::fact`]).
    pub fn recorded_runs(&self) -> &[RecordedRun] {
        &self.runs
    }

    /// The job steps of the last [`Engine::apply`], in the order they happened.
    pub fn transitions(&self) -> &[Transition] {
        &self.transitions
    }

    /// [`Engine::apply`] of a producer's event, for callers that hold an [`Event`] rather than an
    /// [`Input`] (benchmarks, tests): the same path, without wrapping the event.
    pub fn process(&mut self, event: &Event, raw: Option<&str>, out: &mut Vec<Decision>) -> Outcome {
        self.transitions.clear();
        self.runs.clear();
        if let EventKind::JobSubmitted(spec) = &event.kind
            && let Some(existing) = self.state.job(&spec.id)
        {
            if self.dedupe.contains(&event.id) {
                self.stats.duplicates += 1;
                return Outcome::Duplicate;
            }
            return Outcome::Refused(format!(
                "job id `{}` is already known ({} since {}): a second submission of it is refused and changes nothing; a new job needs a new job id",
                spec.id,
                existing.phase.as_str(),
                existing.submitted
            ));
        }
        if !self.dedupe.insert(&event.id, event.time.max(self.state.now)) {
            self.stats.duplicates += 1;
            return Outcome::Duplicate;
        }
        self.stats.events += 1;
        let now = self.state.now.max(event.time);
        self.state.now = now;
        let policies = self.policies.clone();
        let mut em = Emitter {
            cause: &event.id,
            n: 0,
            out,
            steps: &mut self.transitions,
            runs: &mut self.runs,
            stats: &mut self.stats,
            coverage: self.coverage.as_mut(),
        };
        Self::fire_timers(&mut self.state, &mut self.timers, &policies, self.config, now, &mut em);

        match &event.kind {
            EventKind::JobSubmitted(spec) if policies.rewrites_tags() => {
                // The tags that decide whose budget a job spends come from the set's sources, not from
                // the submitter: every policy sees the job with them.
                let mut trusted = event.clone();
                if let EventKind::JobSubmitted(s) = &mut trusted.kind {
                    policies.trust_tags(s);
                }
                let EventKind::JobSubmitted(spec) = &trusted.kind else { return Outcome::Applied };
                let mut remote = Remote { client: self.ledgers.as_deref_mut(), failure: &mut self.ledger_failure };
                let mismatch = Self::admit(
                    &mut self.state,
                    &mut self.timers,
                    &policies,
                    &mut self.scratch,
                    &trusted,
                    raw,
                    spec,
                    &mut em,
                    &mut remote,
                    true,
                );
                self.ledger_mismatches += u64::from(mismatch);
            }
            EventKind::JobSubmitted(spec) => {
                let mut remote = Remote { client: self.ledgers.as_deref_mut(), failure: &mut self.ledger_failure };
                let mismatch = Self::admit(
                    &mut self.state,
                    &mut self.timers,
                    &policies,
                    &mut self.scratch,
                    event,
                    raw,
                    spec,
                    &mut em,
                    &mut remote,
                    true,
                );
                self.ledger_mismatches += u64::from(mismatch);
            }
            _ => Self::observe(
                &mut self.state,
                &mut self.timers,
                &policies,
                &mut self.scratch,
                self.config,
                event,
                raw,
                &mut em,
            ),
        }
        Outcome::Applied
    }

    /// What a `job.submitted` would be answered now, without applying it: the admission decision
    /// (and the alerts and dry-run verdicts that would come with it) as [`Engine::apply`] would make
    /// them at the later of the engine's clock and the event's time, while nothing changes: no job is
    /// recorded, nothing reserved, no timer set, the id not remembered, no counter moved. What
    /// `sbatch --test-only` asks (`POST /v1/admit?test_only=true`). In a partition of
    /// `serve --cluster`, the quotas that span projects are not asked (asking them reserves).
    /// `Err` for an event that is not a submission, or a job id already known (which a real
    /// submission would be refused for).
    pub fn preview(&mut self, event: &Event, raw: Option<&str>) -> Result<Vec<Decision>, String> {
        let EventKind::JobSubmitted(spec) = &event.kind else {
            return Err(format!("a preview is of a `job.submitted`, not of a `{}`", event.kind.type_name()));
        };
        if let Some(existing) = self.state.job(&spec.id) {
            return Err(format!(
                "job id `{}` is already known ({} since {}): a submission of it would be refused",
                spec.id,
                existing.phase.as_str(),
                existing.submitted
            ));
        }
        let policies = self.policies.clone();
        let mut trusted = event.clone();
        if let EventKind::JobSubmitted(s) = &mut trusted.kind {
            policies.trust_tags(s);
        }
        let EventKind::JobSubmitted(spec) = &trusted.kind else { return Ok(Vec::new()) };
        let clock = self.state.now;
        self.state.now = clock.max(event.time);
        let (mut out, mut steps, mut runs, mut stats) = (Vec::new(), Vec::new(), Vec::new(), Stats::default());
        let mut em = Emitter {
            cause: &event.id,
            n: 0,
            out: &mut out,
            steps: &mut steps,
            runs: &mut runs,
            stats: &mut stats,
            coverage: None,
        };
        let mut failure = None;
        let mut remote = Remote { client: None, failure: &mut failure };
        Self::admit(
            &mut self.state,
            &mut self.timers,
            &policies,
            &mut self.scratch,
            &trusted,
            raw,
            spec,
            &mut em,
            &mut remote,
            false,
        );
        self.state.now = clock;
        Ok(out)
    }

    fn advance(&mut self, now: Timestamp, cause: &str, out: &mut Vec<Decision>) {
        let now = self.state.now.max(now);
        self.state.now = now;
        let policies = self.policies.clone();
        let mut em = Emitter {
            cause,
            n: 0,
            out,
            steps: &mut self.transitions,
            runs: &mut self.runs,
            stats: &mut self.stats,
            coverage: self.coverage.as_mut(),
        };
        Self::fire_timers(&mut self.state, &mut self.timers, &policies, self.config, now, &mut em);
    }

    fn fire_timers(
        state: &mut State,
        timers: &mut TimerQueue,
        policies: &PolicySet,
        config: EngineConfig,
        now: Timestamp,
        em: &mut Emitter<'_>,
    ) {
        while let Some(timer) = timers.pop_due(now) {
            em.stats.timers_fired += 1;
            let Timer { at, job_id, kind, .. } = timer;
            match kind {
                TimerKind::Policy { policy, tag } => {
                    let Some(p) = policies.get(&policy) else { continue };
                    let mut out = Output::default();
                    let cx = TimerContext { at, job_id: &job_id, job: state.job(&job_id), tag, state };
                    p.on_timer(&cx, &mut out);
                    settle_reasons(p.as_ref(), &mut out, None, at);
                    let mode = p.meta().mode;
                    let id = p.meta().id.clone();
                    em.cover(&id, &out);
                    Self::follow_up(state, timers, config, at, &job_id, &[(id, mode, out)], em);
                }
                TimerKind::ApprovalExpiry => {
                    let expired = state.jobs.get(&job_id).is_some_and(|j| {
                        j.phase == JobPhase::PendingApproval && j.pending().is_some_and(|p| p.expires == at)
                    });
                    if !expired {
                        continue;
                    }
                    if let Some(job) = state.jobs.remove(&job_id) {
                        state.share(em.cause, at, &job_id, LedgerChange::Drop { job_id: job_id.to_string() });
                        let pending = job.pending().cloned();
                        let mut d = Draft::about(&job_id, Some(&job), at, DecisionKind::Deny);
                        d.admission = true;
                        d.gpu_hours = Some(job.gpus.as_f64() * job.requested_hours);
                        if let Some(p) = pending {
                            d.policies = p.policies.clone();
                            d.reason = format!("approval request expired unanswered at {at} ({})", p.reason);
                        }
                        em.emit(d);
                        em.step(&job_id, at, Step::Denied);
                    }
                }
                TimerKind::DeferRelease => {
                    let Some(job) = state.jobs.get_mut(&job_id) else { continue };
                    if job.phase != JobPhase::Deferred || job.defer_until() != Some(at) {
                        continue;
                    }
                    job.phase = JobPhase::Admitted;
                    let mut d = Draft::about(&job_id, Some(job), at, DecisionKind::Allow);
                    d.policies = vec![Arc::from(ENGINE_POLICY)];
                    d.reason = format!("deferral of job {job_id} ended at {at}; it may start now");
                    em.emit(d);
                    em.step(&job_id, at, Step::Admitted);
                }
                TimerKind::ConfirmDeadline => Self::unconfirmed(state, timers, config, at, &job_id, em),
                TimerKind::StaleReservation => Self::stale(state, config, at, &job_id, em),
                TimerKind::Forget => {
                    if state
                        .jobs
                        .get(&job_id)
                        .is_some_and(|j| !j.phase.is_live() && j.phase != JobPhase::PendingApproval)
                    {
                        state.jobs.remove(&job_id);
                        state.runs.remove(&*job_id);
                        state.share(em.cause, at, &job_id, LedgerChange::Drop { job_id: job_id.to_string() });
                    }
                }
            }
        }
    }

    /// Runs the policies that want `event` and whose selector matches, collecting (index, output).
    /// `matches` asks a policy's selector; a policy whose selector selects every job is not asked.
    fn ask<'s>(
        policies: &PolicySet,
        scratch: &'s mut Scratch,
        cx: &Context<'_>,
        matches: impl Fn(&dyn Policy) -> bool,
        skip_spanning: bool,
    ) -> &'s [(usize, Output)] {
        scratch.used = 0;
        for &i in policies.for_type(EventMask::index(&cx.event.kind)) {
            let Some(p) = policies.policies().get(i) else { continue };
            if skip_spanning && policies.spans(i) {
                continue;
            }
            if !policies.selects_all(i) && !matches(p.as_ref()) {
                continue;
            }
            if scratch.used == scratch.slots.len() {
                scratch.slots.push((i, Output::default()));
            }
            let slot = &mut scratch.slots[scratch.used];
            slot.0 = i;
            slot.1.clear();
            p.evaluate(cx, &mut slot.1);
            if !slot.1.verdicts.is_empty() || !slot.1.effects.is_empty() {
                scratch.used += 1;
            }
        }
        &scratch.slots[..scratch.used]
    }

    #[allow(clippy::too_many_arguments)]
    fn admit(
        state: &mut State,
        timers: &mut TimerQueue,
        policies: &PolicySet,
        scratch: &mut Scratch,
        event: &Event,
        raw: Option<&str>,
        spec: &JobSpec,
        em: &mut Emitter<'_>,
        remote: &mut Remote<'_>,
        commit: bool,
    ) -> bool {
        let now = state.now;
        let job_id: Arc<str> = Arc::from(spec.id.as_str());
        let requested = spec.requested_gpu_hours();
        // A move (`job.replaces`): the job it replaces is set aside before the policies look, so the
        // move is judged as the one job it is, not as a second one beside the first.
        let aside = if commit { Self::set_aside(state, spec, &job_id, em) } else { None };

        // Partitioned, the quotas that span projects are the ledger partition's to check (step 2 of
        // the two-step reservation, `crate::shared`): evaluated there, not here.
        let spanning = remote.client.is_some() && policies.has_spanning();
        // A preview (`commit` false) asks the spanning quotas nothing: asking is reserving there.
        let ask_remote = spanning && commit;
        let cx = Context { event, raw, now, state, job: None };
        Self::ask(policies, scratch, &cx, |p| p.meta().selector.matches(spec), spanning);
        let mut answered: Option<DecisionKind> = None;
        if let Some(client) = remote.client.as_deref_mut().filter(|_| ask_remote) {
            let local = Self::local_rank(policies, &scratch.slots[..scratch.used]);
            // What this input changed before (a timer it fired released a job) reaches the ledger
            // partition first, in order.
            for op in state.ledger_out.drain(..) {
                client.settle(op);
            }
            let change = LedgerChange::Admit { now, local: of_rank(local), job: Box::new(spec.clone()) };
            let op = LedgerOp { id: crate::shared::op_id(&event.id, &spec.id, &change), time: event.time, op: change };
            match client.admit(op) {
                Ok(answer) => {
                    answered = Some(answer.kind);
                    Self::take_shared(policies, scratch, answer.verdicts);
                }
                Err(e) => {
                    *remote.failure = Some(e);
                    if let Some(old) = &aside {
                        Self::take_back(state, old, None, em);
                    }
                    return false;
                }
            }
        }
        let results = &scratch.slots[..scratch.used];
        if em.coverage.is_some() {
            for (i, out) in results {
                em.cover(&policies.policies()[*i].meta().id, out);
            }
        }

        // One pass over the verdicts. Combine the enforced ones: any deny wins; then require-approval;
        // then defer; else allow. Count, for each of those four outcomes, the enforced verdicts that ask
        // for it and the length of their reasons, so the reason of whichever wins is allocated once at
        // about its length (a sentence left for later is guessed at 96 bytes). And note whether any
        // verdict is an alert or a dry run's objection, and whether any policy asked for an effect, so
        // the passes for those are skipped when there is none (nearly always).
        let rank = |k: DecisionKind| match k {
            DecisionKind::Allow => Some(0),
            DecisionKind::Defer => Some(1),
            DecisionKind::RequireApproval => Some(2),
            DecisionKind::Deny => Some(3),
            _ => None,
        };
        let (mut top, mut quoted, mut length) = (0usize, [0usize; 4], [0usize; 4]);
        let (mut extra, mut effects) = (false, false);
        for (i, out) in results {
            let enforced = policies.policies()[*i].meta().mode == Mode::Enforce;
            effects |= !out.effects.is_empty();
            for v in &out.verdicts {
                let k = v.kind.decision();
                if !enforced {
                    extra |= k != DecisionKind::Allow;
                    continue;
                }
                extra |= k == DecisionKind::Alert;
                if let Some(r) = rank(k) {
                    top = top.max(r);
                    quoted[r] += 1;
                    length[r] += match &v.reason {
                        Reason::Text(t) if t.is_empty() => 0,
                        Reason::Text(t) => t.len() + 2,
                        Reason::Later(_) => 96,
                    };
                }
            }
        }
        let kind = [DecisionKind::Allow, DecisionKind::Defer, DecisionKind::RequireApproval, DecisionKind::Deny][top];
        let (quoted, length) = (quoted[top], length[top]);
        let mut policy_ids: Vec<Arc<str>> = Vec::with_capacity(quoted);
        let mut reason = String::with_capacity(length);
        let mut until: Option<Timestamp> = None;
        let mut approvers: Vec<Arc<str>> = Vec::new();
        // Each holding policy's own request ([`crate::approval`]).
        let mut asks: Vec<(crate::approval::PolicyAsk, bool)> = Vec::new();
        let mut expires_after: Option<Duration> = None;
        // A job's own user may answer only when every policy that asks for the approval says so.
        let mut self_approval = true;
        let mut hints = Hints::default();
        for (i, out) in results {
            let meta = policies.policies()[*i].meta();
            if meta.mode != Mode::Enforce {
                continue;
            }
            let mut counted = false;
            for v in out.verdicts.iter().filter(|v| v.kind.decision() == kind) {
                if !counted {
                    policy_ids.push(meta.id.clone());
                    counted = true;
                }
                join_into(&mut reason, |s| write_reason(policies.policies()[*i].as_ref(), v, Some(spec), now, s));
                match &v.kind {
                    VerdictKind::Defer { until: u } => until = Some(until.map_or(*u, |x: Timestamp| x.max(*u))),
                    VerdictKind::RequireApproval { approvers: a, expires_after: e } => {
                        self_approval &= meta.self_approval;
                        for name in a.iter() {
                            if !approvers.iter().any(|x| &**x == name) {
                                approvers.push(Arc::from(name.as_str()));
                            }
                        }
                        let i = match asks.iter().position(|(x, _)| x.policy == meta.id) {
                            Some(i) => i,
                            None => {
                                let ask = crate::approval::PolicyAsk {
                                    policy: meta.id.clone(),
                                    approvers: Vec::new(),
                                    self_approval: meta.self_approval,
                                    granted_by: None,
                                };
                                asks.push((ask, false));
                                asks.len() - 1
                            }
                        };
                        if let Some((ask, anyone)) = asks.get_mut(i) {
                            // A verdict that names nobody lets any approver answer the policy.
                            *anyone |= a.is_empty();
                            for name in a.iter() {
                                if !ask.approvers.iter().any(|x| &**x == name) {
                                    ask.approvers.push(Arc::from(name.as_str()));
                                }
                            }
                        }
                        expires_after = Some(expires_after.map_or(*e, |x: Duration| x.min(*e)));
                    }
                    VerdictKind::Allow(h) => {
                        hints.queue = hints.queue.take().or_else(|| h.queue.clone());
                        hints.priority = hints.priority.or(h.priority);
                        hints.region = hints.region.take().or_else(|| h.region.clone());
                    }
                    _ => {}
                }
            }
        }
        if kind == DecisionKind::Allow && reason.is_empty() {
            reason = if policy_ids.is_empty() {
                "no policy applies to this job".to_owned()
            } else {
                "no policy objects".to_owned()
            };
        }

        // A denied job is not kept: its record (five names and the tags interned, the configuration
        // key hashed) is built only for the other outcomes; a denial's decisions need only its
        // project, user and GPUs.
        let mut record = (kind != DecisionKind::Deny).then(|| state.record_from_spec(spec, now));
        let who = match &record {
            Some(_) => None,
            None => Some(Who {
                project: state.intern(&spec.project).to_arc(),
                user: state.intern(&spec.user).to_arc(),
                gpus: spec.gpus,
            }),
        };
        let draft = |record: Option<&JobRecord>, kind| match (record, &who) {
            (Some(r), _) => Draft::about(&job_id, Some(r), event.time, kind),
            (None, Some(w)) => Draft::about_who(&job_id, w, event.time, kind),
            (None, None) => Draft::about(&job_id, None, event.time, kind),
        };
        let mut d = draft(record.as_ref(), kind);
        d.admission = true;
        d.policies = policy_ids;
        d.gpu_hours = Some(requested);
        match (kind, &mut record) {
            (DecisionKind::Allow, Some(record)) => {
                if state.several_regions() {
                    // Where it will run, so a region's room counts it there and nowhere else.
                    let region = hints
                        .region
                        .clone()
                        .or_else(|| spec.region.as_deref().filter(|r| !r.eq_ignore_ascii_case("any")).map(Arc::from));
                    if region.is_some() {
                        record.with_runs(|r| r.region = region);
                    }
                }
                d.hints = Some(hints);
                if commit {
                    state.reserve(record);
                }
                if let Some(old) = &aside {
                    record.with_runs(|r| r.replaces = Some(old.clone()));
                }
            }
            (DecisionKind::Defer, Some(record)) => {
                d.until = until;
                record.phase = JobPhase::Deferred;
                record.set_defer_until(until);
                if commit {
                    state.reserve(record);
                    if let Some(u) = until {
                        timers.set(u, job_id.clone(), TimerKind::DeferRelease);
                    }
                }
            }
            (DecisionKind::RequireApproval, Some(record)) => {
                let expires = now.plus(expires_after.unwrap_or(Duration::hours(24)));
                record.phase = JobPhase::PendingApproval;
                record.set_pending(Some(Pending {
                    approvers,
                    expires,
                    policies: d.policies.clone(),
                    reason: reason.clone(),
                    self_approval,
                    asks: asks
                        .into_iter()
                        .map(|(mut ask, anyone)| {
                            if anyone {
                                ask.approvers.clear();
                            }
                            ask
                        })
                        .collect(),
                }));
                if commit {
                    timers.set(expires, job_id.clone(), TimerKind::ApprovalExpiry);
                }
            }
            _ => {}
        }
        d.reason = reason;
        em.emit(d);
        let step = match kind {
            DecisionKind::Allow => Step::Admitted,
            DecisionKind::Defer => Step::Deferred,
            DecisionKind::RequireApproval => Step::Held,
            _ => Step::Denied,
        };
        em.step(&job_id, event.time, step);

        // Alerts, then dry-run verdicts, in policy order.
        let alerting = if extra { results } else { &[] };
        for (i, out) in alerting {
            let meta = policies.policies()[*i].meta();
            for v in &out.verdicts {
                let dry = meta.mode == Mode::DryRun;
                let k = v.kind.decision();
                if k == DecisionKind::Alert || (dry && k != DecisionKind::Allow) {
                    let mut a = draft(record.as_ref(), k);
                    a.policies = vec![meta.id.clone()];
                    write_reason(policies.policies()[*i].as_ref(), v, Some(spec), now, &mut a.reason);
                    a.dry_run = dry;
                    if dry && k != DecisionKind::Alert {
                        a.gpu_hours = Some(requested);
                    } else {
                        // An alert has no figure of the engine's own: the policy's, when it gives one.
                        a.gpu_hours = v.gpu_hours;
                    }
                    if let VerdictKind::Defer { until } = v.kind {
                        a.until = Some(until);
                    }
                    em.emit(a);
                }
            }
        }

        if !commit {
            return false;
        }
        if let Some(by) = record.as_ref().and_then(|r| r.runs()).and_then(|r| r.confirm_by.get()) {
            timers.set(by, job_id.clone(), TimerKind::ConfirmDeadline);
        }
        let mut mismatch = false;
        if let Some(theirs) = answered {
            mismatch = theirs != kind;
            if kind != DecisionKind::Deny {
                state.shared.track(&job_id);
            }
        }
        if let Some(old) = aside.filter(|_| kind != DecisionKind::Allow) {
            // Not moved: the old admission stands as it was.
            Self::take_back(state, &old, None, em);
        }
        if let Some(record) = record {
            state.jobs.insert(job_id.clone(), record);
            if effects {
                Self::apply_effects(
                    state,
                    timers,
                    results.iter().map(|(i, o)| (policies.policies()[*i].meta().id.clone(), o)),
                );
            }
        }
        mismatch
    }

    /// The combined rank ([`rank`]) of the enforced verdicts in `results`.
    fn local_rank(policies: &PolicySet, results: &[(usize, Output)]) -> usize {
        let mut top = 0;
        for (i, out) in results {
            if policies.policies().get(*i).is_none_or(|p| p.meta().mode != Mode::Enforce) {
                continue;
            }
            for v in &out.verdicts {
                top = top.max(rank(v.kind.decision()).unwrap_or(0));
            }
        }
        top
    }

    /// Puts the spanning quotas' verdicts among the ones evaluated here, in policy order.
    fn take_shared(policies: &PolicySet, scratch: &mut Scratch, shared: Vec<SharedVerdicts>) {
        for group in shared {
            let Some(i) = policies.index_of(&group.policy) else { continue };
            if group.verdicts.is_empty() {
                continue;
            }
            if scratch.used == scratch.slots.len() {
                scratch.slots.push((i, Output::default()));
            }
            let slot = &mut scratch.slots[scratch.used];
            slot.0 = i;
            slot.1.clear();
            slot.1.verdicts.extend(group.verdicts.iter().map(|v| v.verdict()));
            scratch.used += 1;
        }
        scratch.slots[..scratch.used].sort_by_key(|(i, _)| *i);
    }

    /// The ledger partition's side of an [`Input::Ledger`] op: check and reserve, or follow a change.
    fn keep_ledgers(&mut self, op: &LedgerOp) {
        let time = op.time;
        match &op.op {
            LedgerChange::Admit { now, local, job } => {
                let answer = self.shared_admit(&op.id, time, *now, *local, job);
                self.state.shared.remember(&op.id, answer.clone());
                self.ledger_answer = Some(answer);
            }
            LedgerChange::Reserve { job_id } => {
                if let Some(mut j) = self.state.jobs.remove(job_id.as_str()) {
                    if j.phase == JobPhase::PendingApproval {
                        j.phase = JobPhase::Admitted;
                        self.state.reserve(&mut j);
                    }
                    self.state.jobs.insert(Arc::from(job_id.as_str()), j);
                }
            }
            LedgerChange::Start { job_id, gpus } => {
                if let Some(mut j) = self.state.jobs.remove(job_id.as_str()) {
                    if let Some(g) = gpus {
                        self.state.correct_allocation(&mut j, *g);
                    }
                    if matches!(j.phase, JobPhase::Admitted | JobPhase::Deferred) {
                        self.state.start(&mut j, time);
                    }
                    self.state.jobs.insert(Arc::from(job_id.as_str()), j);
                }
            }
            LedgerChange::Requeue { job_id } => {
                if let Some(mut j) = self.state.jobs.remove(job_id.as_str()) {
                    self.state.requeue(&mut j, time);
                    self.state.jobs.insert(Arc::from(job_id.as_str()), j);
                }
            }
            LedgerChange::Unreclaim { job_id, at } => {
                if let Some(mut j) = self.state.jobs.remove(job_id.as_str()) {
                    self.state.unreclaim(&mut j, *at);
                    self.state.jobs.insert(Arc::from(job_id.as_str()), j);
                }
            }
            LedgerChange::Reopen { job_id } => {
                if let Some(mut j) = self.state.jobs.remove(job_id.as_str()) {
                    self.state.reopen(&mut j, time);
                    self.state.jobs.insert(Arc::from(job_id.as_str()), j);
                }
            }
            LedgerChange::Task { parent, job_id } => {
                let _ = self.state.spawn_task(parent, &Arc::from(job_id.as_str()));
            }
            LedgerChange::Release { job_id, reclaimed } => {
                if let Some(mut j) = self.state.jobs.remove(job_id.as_str()) {
                    let phase = if *reclaimed { JobPhase::Reclaimed } else { JobPhase::Finished };
                    let live = j.phase.is_live();
                    self.state.release(&mut j, time, phase);
                    self.state.jobs.insert(Arc::from(job_id.as_str()), j);
                    if live {
                        self.state.task_released(job_id, FinishStatus::Cancelled, time);
                    }
                }
            }
            LedgerChange::Charge { job_id, gpu_hours } => {
                if let Some(j) = self.state.jobs.get(job_id.as_str()) {
                    let project = j.project().to_owned();
                    self.state.charge(Some(&project), Some(job_id), *gpu_hours, time);
                }
            }
            LedgerChange::Drop { job_id } => {
                self.state.jobs.remove(job_id.as_str());
            }
        }
    }

    /// Checks a submission against the quotas that span projects, here where every project's usage
    /// of them is kept, and reserves when the decision combined with the project's own verdict
    /// admits: what one engine's admission does to these ledgers, in the same order.
    fn shared_admit(
        &mut self,
        id: &str,
        time: Timestamp,
        now: Timestamp,
        local: DecisionKind,
        spec: &JobSpec,
    ) -> LedgerAnswer {
        let policies = self.policies.clone();
        let event =
            Event { id: id.to_owned(), time, kind: EventKind::JobSubmitted(Box::new(spec.clone())), extra: Vec::new() };
        let cx = Context { event: &event, raw: None, now, state: &self.state, job: None };
        let mut top = rank(local).unwrap_or(0);
        let mut verdicts = Vec::new();
        let mut out = Output::default();
        for &i in policies.for_type(EventMask::index(&event.kind)) {
            let Some(p) = policies.policies().get(i) else { continue };
            if !policies.spans(i) || (!policies.selects_all(i) && !p.meta().selector.matches(spec)) {
                continue;
            }
            out.clear();
            p.evaluate(&cx, &mut out);
            if out.verdicts.is_empty() {
                continue;
            }
            if p.meta().mode == Mode::Enforce {
                for v in &out.verdicts {
                    top = top.max(rank(v.kind.decision()).unwrap_or(0));
                }
            }
            verdicts.push(SharedVerdicts {
                policy: p.meta().id.to_string(),
                verdicts: out.verdicts.iter().map(crate::shared::SharedVerdict::of).collect(),
            });
        }
        let kind = of_rank(top);
        let job_id: Arc<str> = Arc::from(spec.id.as_str());
        match kind {
            DecisionKind::Allow | DecisionKind::Defer => {
                let mut record = self.state.record_from_spec(spec, now);
                if kind == DecisionKind::Defer {
                    record.phase = JobPhase::Deferred;
                }
                self.state.reserve(&mut record);
                self.state.jobs.insert(job_id, record);
            }
            DecisionKind::RequireApproval => {
                let mut record = self.state.record_from_spec(spec, now);
                record.phase = JobPhase::PendingApproval;
                self.state.jobs.insert(job_id, record);
            }
            _ => {}
        }
        LedgerAnswer { kind, verdicts }
    }

    #[allow(clippy::too_many_arguments)]
    fn observe(
        state: &mut State,
        timers: &mut TimerQueue,
        policies: &PolicySet,
        scratch: &mut Scratch,
        config: EngineConfig,
        event: &Event,
        raw: Option<&str>,
        em: &mut Emitter<'_>,
    ) {
        let now = state.now;
        let job_id: Option<Arc<str>> = event.kind.job_id().map(Arc::from);
        let is_job_event = !matches!(
            event.kind,
            EventKind::BillingCharge(_) | EventKind::AssetRegistered { .. } | EventKind::ClockTick
        );
        // A task of an array starts for the first time: it becomes a job of its own, admitted by the
        // array's admission, before the policies see its start.
        if let (EventKind::JobStarted { info, .. }, Some(id)) = (&event.kind, &job_id)
            && let Some(parent) = &info.parent
            && state.job(id).is_none()
            && state.spawn_task(parent, id).is_ok()
        {
            state.share(
                em.cause,
                event.time,
                parent,
                LedgerChange::Task { parent: parent.clone(), job_id: id.to_string() },
            );
            if state.shared.tracks(parent) {
                state.shared.track(id);
            }
            em.step(id, event.time, Step::Admitted);
        }
        let job = job_id.as_deref().and_then(|id| state.job(id));
        if is_job_event && job.is_none() {
            em.stats.unknown_jobs += 1;
            return;
        }

        // Engine-level handling of approvals comes first: it is the resolution of an admission.
        match &event.kind {
            EventKind::ApprovalGranted { by, .. } | EventKind::ApprovalRejected { by, .. } => {
                Self::resolve_approval(state, timers, event, job_id.as_ref(), by.as_deref(), em);
                return;
            }
            _ => {}
        }

        let cx = Context { event, raw, now, state, job };
        let results = Self::ask(policies, scratch, &cx, |p| job.is_none_or(|j| p.meta().selector.matches(j)), false);
        for (i, out) in results {
            em.cover(&policies.policies()[*i].meta().id, out);
        }
        let outputs: Vec<(Arc<str>, Mode, Output)> = results
            .iter()
            .map(|(i, o)| {
                let p = &policies.policies()[*i];
                let m = p.meta();
                let mut out = Output { verdicts: o.verdicts.clone(), effects: o.effects.clone() };
                settle_reasons(p.as_ref(), &mut out, cx.submitted(), now);
                (m.id.clone(), m.mode, out)
            })
            .collect();

        // The engine's own bookkeeping for the event.
        match &event.kind {
            EventKind::JobStarted { info, .. } => {
                if let Some(id) = &job_id {
                    Self::on_start(state, policies, event, id, info, em);
                }
            }
            EventKind::JobQueued { .. } => {
                if let Some(id) = &job_id {
                    if state.job(id).is_some_and(late_confirmation) {
                        Self::confirmed_late(state, event, id, em);
                    } else if let Some(j) = state.jobs.get_mut(id) {
                        State::confirm(j);
                    }
                    if let Some(j) = state.jobs.get_mut(id) {
                        note_wait_reason(j, event);
                    }
                }
            }
            EventKind::JobRequeued { .. } => {
                if let Some(id) = &job_id {
                    Self::on_requeue(state, event, id, em);
                }
            }
            EventKind::JobSample(sample @ Sample { gpu_util, mem_util, .. }) => {
                if let Some(j) = job_id.as_deref().and_then(|id| state.jobs.get_mut(id)) {
                    let u = &mut j.util;
                    u.avg_gpu_util =
                        if u.samples == 0 { *gpu_util as f32 } else { 0.8 * u.avg_gpu_util + 0.2 * *gpu_util as f32 };
                    u.samples += 1;
                    u.last_sample = event.time.into();
                    u.gpu_util = *gpu_util as f32;
                    u.mem_util = mem_util.map_or(-1.0, |m| m as f32);
                }
                if let (Some(id), Some(work)) = (&job_id, sample.work()) {
                    state.sample_work(id, &work, event.time);
                }
            }
            EventKind::JobKeepalive { .. } => {
                if let Some(j) = job_id.as_deref().and_then(|id| state.jobs.get_mut(id)) {
                    j.util.keepalive = event.time.into();
                }
            }
            EventKind::BillingCharge(c) => {
                state.charge(c.project.as_deref(), c.job_id.as_deref(), c.gpu_hours, event.time);
                if let Some(j) = c.job_id.as_deref().filter(|j| state.jobs.get(j).is_some()) {
                    let change = LedgerChange::Charge { job_id: j.to_owned(), gpu_hours: c.gpu_hours };
                    state.share(em.cause, event.time, j, change);
                }
            }
            EventKind::AssetRegistered { project, asset } => {
                let region = asset.region.as_deref().map(|r| state.intern(r));
                let (state_kind, state_project) = (state.intern(&asset.kind), state.intern(project));
                if let Some(known) = state.assets.get_mut(asset.fingerprint.as_str()) {
                    // Another copy of what is registered: where it is counts; who made it first stays.
                    match region {
                        Some(r) if !known.regions.contains(&r) => known.regions.push(r),
                        Some(_) => {}
                        None => {
                            // Registered again, nowhere in particular: as before regions, the newer
                            // registration replaces the older (its copies' regions stay known).
                            known.uri = asset.uri.clone();
                            known.registered = event.time;
                            known.kind = state_kind.clone();
                            known.project = state_project.clone();
                        }
                    }
                } else {
                    let rec = crate::state::AssetRecord {
                        kind: state_kind,
                        project: state_project,
                        uri: asset.uri.clone(),
                        registered: event.time,
                        regions: region.into_iter().collect(),
                    };
                    state.assets.insert(asset.fingerprint.as_str().into(), rec);
                }
            }
            _ => {}
        }

        // A job that ends has finished, with its status, before any reclaim its end triggers (an
        // `on_finish` reclaim releases it in `follow_up`, which would otherwise hide the status).
        if let EventKind::JobFinished { status, .. } = &event.kind
            && let Some(id) = &job_id
            && state.job(id).is_some_and(|j| !matches!(j.phase, JobPhase::Reclaimed | JobPhase::Finished))
        {
            em.step(id, event.time, Step::Finished(*status));
        }
        if let Some(id) = &job_id {
            Self::follow_up(state, timers, config, event.time, id, &outputs, em);
        } else {
            // Events without a job (billing without job id, assets, ticks): report alerts only.
            for (pid, mode, out) in &outputs {
                for v in &out.verdicts {
                    if v.kind.decision() == DecisionKind::Alert {
                        em.emit(Draft {
                            time: event.time,
                            job_id: None,
                            project: None,
                            user: None,
                            kind: DecisionKind::Alert,
                            until: None,
                            policies: vec![pid.clone()],
                            reason: v.reason.text().to_owned(),
                            dry_run: *mode == Mode::DryRun,
                            admission: false,
                            gpus: None,
                            gpu_hours: v.gpu_hours,
                            hints: None,
                        });
                    }
                }
            }
            Self::apply_effects(state, timers, outputs.iter().map(|(id, _, o)| (id.clone(), o)));
        }

        if let EventKind::JobFinished { status, .. } = &event.kind
            && let Some(id) = &job_id
            && let Some(mut j) = state.jobs.remove(id)
        {
            j.status = Some(*status);
            if j.started.is_some() {
                j.ended = event.time.into();
            }
            // A move that ends before the scheduler confirmed it was never made (read before the
            // finish confirms the job).
            let moved_from = j.runs().and_then(|r| r.replaces.clone());
            State::confirm(&mut j);
            let released = j.phase.is_live();
            if released {
                state.release(&mut j, event.time, JobPhase::Finished);
                state.share(
                    em.cause,
                    event.time,
                    id,
                    LedgerChange::Release { job_id: id.to_string(), reclaimed: false },
                );
                state.end_run(id, &j, event.time);
            }
            // Released here or by a policy's reclaim of this finish, a move that was never confirmed
            // did not happen.
            Self::move_dropped(state, moved_from, &j, id, em);
            j.phase = if j.phase == JobPhase::Reclaimed { JobPhase::Reclaimed } else { JobPhase::Finished };
            if j.started.is_some() || *status == FinishStatus::Succeeded {
                state.record_run(j.config, j.gpus, *status, event.time);
                em.runs.push(RecordedRun { time: event.time, config: j.config, gpus: j.gpus, status: *status });
            }
            state.jobs.insert(id.clone(), j);
            timers.set(event.time.plus(config.finished_retention), id.clone(), TimerKind::Forget);
            if released {
                Self::after_task(state, timers, config, event.time, id, *status, em);
            }
        }
    }

    /// The engine's bookkeeping of a `job.started`: a job released outside bursar while it waited for
    /// approval (an override) or a finished job started again (a rerun) is admitted again first; the
    /// allocation, when the scheduler names it, replaces the admission's estimate; then the run starts.
    fn on_start(
        state: &mut State,
        policies: &PolicySet,
        event: &Event,
        id: &Arc<str>,
        info: &StartInfo,
        em: &mut Emitter<'_>,
    ) {
        if state.job(id).is_some_and(late_confirmation) {
            Self::confirmed_late(state, event, id, em);
        } else if state
            .job(id)
            .is_some_and(|j| j.phase == JobPhase::Admitted && j.runs().is_some_and(|r| r.released_stale))
        {
            Self::started_after_stale(state, event, id, em);
        }
        if let Some(to) = state.job(id).and_then(|j| j.runs()).and_then(|r| r.replaced_by.clone()) {
            let why =
                format!("job {id} was admitted again as {to} (a move), and the scheduler started {id} where it was");
            Self::take_back(state, id, Some(&why), em);
        }
        let Some(mut j) = state.jobs.remove(id) else { return };
        let t = event.time;
        // A run after a requeue holds its GPUs again from this start (they were freed meanwhile).
        let after_requeue = j.runs().is_some_and(|r| r.requeued);
        State::confirm(&mut j);
        if j.waits().is_some() {
            j.with_runs(|r| {
                r.waits = None;
                r.waits_since = crate::state::OptTime::NONE;
            });
        }
        match j.phase {
            JobPhase::PendingApproval => {
                let pending = j.take_pending();
                let who = info.released_by.as_deref();
                j.phase = JobPhase::Admitted;
                if let Some(who) = who {
                    j.with_runs(|r| r.released_by = Some(Arc::from(who)));
                }
                state.reserve(&mut j);
                state.share(em.cause, t, id, LedgerChange::Reserve { job_id: id.to_string() });
                let mut d = Draft::about(id, Some(&j), t, DecisionKind::Alert);
                d.policies = vec![Arc::from(OVERRIDE_POLICY)];
                d.reason = format!(
                    "job {id} waited for approval ({}) and {} released it in the scheduler at {t}, outside bursar: recorded as an override; it is charged from this start and its approval request is closed",
                    pending.as_ref().map_or("no request on record", |p| p.reason.as_str()),
                    who.unwrap_or("a person the scheduler did not name"),
                );
                d.gpu_hours = Some(j.reserved);
                em.emit(d);
                em.step(id, t, Step::Admitted);
            }
            JobPhase::Finished | JobPhase::Reclaimed => Self::rerun(state, &mut j, id, t, "started it again", em),
            _ => {}
        }
        if let Some(g) = info.gpus
            && let Some(c) = state.correct_allocation(&mut j, g)
        {
            let mut d = Draft::about(id, Some(&j), t, DecisionKind::Alert);
            d.policies = vec![Arc::from(ALLOCATION_POLICY)];
            d.reason = format!(
                "job {id} was admitted for {} and the scheduler allocated {}: its reservation follows the allocation, {} GPU-hours instead of {}",
                crate::runs::gpus_text(c.before),
                crate::runs::gpus_text(c.after),
                crate::runs::hours_text(c.reserved_after),
                crate::runs::hours_text(c.reserved_before),
            );
            d.gpu_hours = Some(c.reserved_after - c.reserved_before);
            em.emit(d);
        }
        if matches!(j.phase, JobPhase::Admitted | JobPhase::Deferred) {
            state.start(&mut j, t);
            em.step(id, t, Step::Started);
        }
        if matches!(j.phase, JobPhase::Running) {
            state.share(em.cause, t, id, LedgerChange::Start { job_id: id.to_string(), gpus: info.gpus });
        }
        if after_requeue && j.phase == JobPhase::Running {
            // Its GPUs were free while it waited, and others may have been admitted into them: the
            // start is checked against the concurrent caps, and going over is on record.
            let over = over_caps(state, policies, &j);
            if !over.is_empty() {
                let mut d = Draft::about(id, Some(&j), t, DecisionKind::Alert);
                d.policies = over.iter().map(|(p, _)| p.clone()).collect();
                d.policies.dedup();
                d.reason = format!(
                    "job {id} runs again after its requeue and holds its {} again: {}",
                    crate::runs::gpus_text(j.gpus),
                    over.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>().join("; ")
                );
                em.emit(d);
            }
        }
        state.jobs.insert(id.clone(), j);
    }

    /// The engine's bookkeeping of a `job.requeued`: a running job's run is settled and it waits to
    /// run again; a finished job requeued is a rerun, admitted again.
    fn on_requeue(state: &mut State, event: &Event, id: &Arc<str>, em: &mut Emitter<'_>) {
        let Some(mut j) = state.jobs.remove(id) else { return };
        let t = event.time;
        State::confirm(&mut j);
        match j.phase {
            JobPhase::Running => {
                state.requeue(&mut j, t);
                state.share(em.cause, t, id, LedgerChange::Requeue { job_id: id.to_string() });
                state.end_run(id, &j, t);
                em.step(id, t, Step::Requeued);
            }
            JobPhase::Finished | JobPhase::Reclaimed => {
                Self::rerun(state, &mut j, id, t, "requeued it to run again", em)
            }
            _ => {}
        }
        state.jobs.insert(id.clone(), j);
    }

    /// The alert from `policy` that job `id`, released earlier, holds its reservation again: `why`,
    /// then what it reserves.
    /// Sets aside the job `spec` replaces (`job.replaces`), when it is an admitted or deferred job of
    /// the same project that has not started and is not set aside already; returns its id.
    fn set_aside(state: &mut State, spec: &JobSpec, new: &Arc<str>, em: &mut Emitter<'_>) -> Option<Arc<str>> {
        let old = spec.replaces.as_deref()?;
        let movable = state.job(old).is_some_and(|j| {
            matches!(j.phase, JobPhase::Admitted | JobPhase::Deferred)
                && j.started.is_none()
                && j.array().is_none()
                && !j.set_aside()
                && j.profile.project.as_str() == spec.project
        });
        if !movable {
            return None;
        }
        let (id, mut j) = state.jobs.remove_entry(old)?;
        let at = state.now;
        state.set_aside_for(&mut j, new);
        state.share(em.cause, at, &id, LedgerChange::Release { job_id: id.to_string(), reclaimed: false });
        state.jobs.insert(id.clone(), j);
        Some(id)
    }

    /// The job `old` was set aside for a move that did not happen: it holds and reserves again. With
    /// `why` (the move was admitted, and then the scheduler dropped it or ran the old job), from now,
    /// with an alert from [`MOVE_POLICY`]; without (the move was not admitted), as it was.
    fn take_back(state: &mut State, old: &Arc<str>, why: Option<&str>, em: &mut Emitter<'_>) {
        let Some(mut j) = state.jobs.remove(old) else { return };
        let at = state.now;
        if state.take_back(&mut j, why.map(|_| at)) {
            state.share(em.cause, at, old, LedgerChange::Reopen { job_id: old.to_string() });
            if let Some(why) = why {
                Self::reserved_again(em, old, &j, at, MOVE_POLICY, why);
            }
        }
        state.jobs.insert(old.clone(), j);
    }

    /// A job admitted as the move of another (`job.replaces`) left without the scheduler ever
    /// confirming it: the move did not happen, and the job it was to replace counts again.
    fn move_dropped(state: &mut State, from: Option<Arc<str>>, j: &JobRecord, id: &str, em: &mut Emitter<'_>) {
        let Some(old) = from else { return };
        if j.started.is_some()
            || !state
                .job(&old)
                .is_some_and(|o| o.phase.is_live() && o.runs().and_then(|r| r.replaced_by.as_deref()) == Some(id))
        {
            return;
        }
        let why = format!(
            "job {old} was admitted again as {id} (a move), and the scheduler never created {id}: the move did not happen"
        );
        Self::take_back(state, &old, Some(&why), em);
    }

    fn reserved_again(em: &mut Emitter<'_>, id: &Arc<str>, j: &JobRecord, t: Timestamp, policy: &str, why: &str) {
        let mut d = Draft::about(id, Some(j), t, DecisionKind::Alert);
        d.policies = vec![Arc::from(policy)];
        d.reason = format!("{why}: it is reserved again ({} GPU-hours)", crate::runs::hours_text(j.reserved));
        d.gpu_hours = Some(j.reserved);
        em.emit(d);
    }

    /// A job whose admission was released as never confirmed turns out to exist after all (the
    /// scheduler's agent was down past the deadline): admitted again, with an alert, not a rerun.
    fn confirmed_late(state: &mut State, event: &Event, id: &Arc<str>, em: &mut Emitter<'_>) {
        let Some(mut j) = state.jobs.remove(id) else { return };
        let t = event.time;
        state.reopen(&mut j, t);
        state.share(em.cause, t, id, LedgerChange::Reopen { job_id: id.to_string() });
        let why = format!(
            "job {id} was released as never created, and the scheduler confirmed it at {t} after all (its agent was late)"
        );
        Self::reserved_again(em, id, &j, t, UNCONFIRMED_POLICY, &why);
        em.step(id, t, Step::Admitted);
        state.jobs.insert(id.clone(), j);
    }

    /// A finished job the scheduler runs again without an admission (it `what`): admitted again as a
    /// new run, with an alert from [`RERUN_POLICY`].
    fn rerun(state: &mut State, j: &mut JobRecord, id: &Arc<str>, t: Timestamp, what: &str, em: &mut Emitter<'_>) {
        let (status, ended) = (j.status, j.ended.get());
        state.reopen(j, t);
        state.share(em.cause, t, id, LedgerChange::Reopen { job_id: id.to_string() });
        let mut d = Draft::about(id, Some(j), t, DecisionKind::Alert);
        d.policies = vec![Arc::from(RERUN_POLICY)];
        let end = match (status, ended) {
            (Some(s), Some(e)) => format!("ended ({}) at {e}", s.as_str()),
            (Some(s), None) => format!("ended ({})", s.as_str()),
            (None, Some(e)) => format!("was released at {e}"),
            (None, None) => "was released".to_owned(),
        };
        d.reason = format!(
            "job {id} {end}, and the scheduler {what} at {t} without an admission: it is reserved and charged as a new run ({} GPU-hours)",
            crate::runs::hours_text(j.reserved)
        );
        d.gpu_hours = Some(j.reserved);
        em.emit(d);
        em.step(id, t, Step::Admitted);
    }

    /// After job `id` was released with `status`: when it is a task, its array learns of it, and is
    /// itself finished when no task is left.
    fn after_task(
        state: &mut State,
        timers: &mut TimerQueue,
        config: EngineConfig,
        at: Timestamp,
        id: &Arc<str>,
        status: FinishStatus,
        em: &mut Emitter<'_>,
    ) {
        if let Some((parent, end)) = state.task_released(id, status, at) {
            em.step(&parent, at, Step::Finished(end));
            timers.set(at.plus(config.finished_retention), parent, TimerKind::Forget);
        }
    }

    /// An admitted job still waiting to start [`EngineConfig::stale_after`] after it entered the
    /// queue: its reservation and hold are released, with an alert from [`STALE_POLICY`]; the job
    /// stays admitted (the queue shows it), and a start reserves it again
    /// ([`Engine::started_after_stale`]). A timer of an earlier wait (the job started and was
    /// requeued since) finds it younger and does nothing. An array is not released: its tasks start
    /// one by one, each a job of its own.
    fn stale(state: &mut State, config: EngineConfig, at: Timestamp, id: &Arc<str>, em: &mut Emitter<'_>) {
        let bound = config.stale_after;
        let due = state.jobs.get(id).is_some_and(|j| {
            j.phase == JobPhase::Admitted
                && j.started.is_none()
                && j.array().is_none()
                && bound.millis() > 0
                && !j.runs().is_some_and(|r| r.released_stale)
                && j.queued_since().plus(bound) <= at
        });
        if !due {
            return;
        }
        let Some(mut j) = state.jobs.remove(id) else { return };
        let since = j.queued_since();
        let (hours, gpus) = state.unreserve_stale(&mut j);
        state.share(em.cause, at, id, LedgerChange::Release { job_id: id.to_string(), reclaimed: false });
        let mut d = Draft::about(id, Some(&j), at, DecisionKind::Alert);
        d.policies = vec![Arc::from(STALE_POLICY)];
        d.gpu_hours = Some(hours);
        d.reason = format!(
            "job {id} was admitted at {since} and has not started in {} (the bound, stale_after): its reservation of {} GPU-hours and {} is released; it stays in the queue, and if the scheduler starts it, it is reserved again",
            at.since(since),
            crate::runs::hours_text(hours),
            crate::runs::gpus_text(gpus)
        );
        em.emit(d);
        state.jobs.insert(id.clone(), j);
    }

    /// A job whose reservation was released as stale and that the scheduler started after all:
    /// reserved and held again, with an alert from [`STALE_POLICY`]; its run starts as any other.
    fn started_after_stale(state: &mut State, event: &Event, id: &Arc<str>, em: &mut Emitter<'_>) {
        let Some(mut j) = state.jobs.remove(id) else { return };
        let t = event.time;
        if state.rereserve_stale(&mut j, t) {
            state.share(em.cause, t, id, LedgerChange::Reopen { job_id: id.to_string() });
            let why = format!("job {id} had its reservation released as stale, and the scheduler started it at {t}");
            Self::reserved_again(em, id, &j, t, STALE_POLICY, &why);
        }
        state.jobs.insert(id.clone(), j);
    }

    /// An admission the scheduler did not confirm by its deadline: released (or, held for approval,
    /// withdrawn), with an alert saying why.
    fn unconfirmed(
        state: &mut State,
        timers: &mut TimerQueue,
        config: EngineConfig,
        at: Timestamp,
        id: &Arc<str>,
        em: &mut Emitter<'_>,
    ) {
        let due = state.jobs.get(id).is_some_and(|j| j.runs().is_some_and(|r| r.confirm_by.get() == Some(at)));
        if !due {
            return;
        }
        let Some(mut j) = state.jobs.remove(id) else { return };
        State::confirm(&mut j);
        let window = at.since(j.submitted);
        let mut d = Draft::about(id, Some(&j), at, DecisionKind::Alert);
        d.policies = vec![Arc::from(UNCONFIRMED_POLICY)];
        let what = if j.phase == JobPhase::PendingApproval {
            j.take_pending();
            state.share(em.cause, at, id, LedgerChange::Drop { job_id: id.to_string() });
            "its approval request is withdrawn".to_owned()
        } else {
            let text = format!(
                "its reservation of {} GPU-hours and {} is released",
                crate::runs::hours_text(j.reserved),
                crate::runs::gpus_text(j.held_gpus())
            );
            d.gpu_hours = Some(j.reserved);
            state.release(&mut j, at, JobPhase::Finished);
            state.share(em.cause, at, id, LedgerChange::Release { job_id: id.to_string(), reclaimed: false });
            let moved_from = j.runs().and_then(|r| r.replaces.clone());
            Self::move_dropped(state, moved_from, &j, id, em);
            text
        };
        d.reason = format!(
            "job {id} was admitted at {} and the scheduler did not confirm within {window} that it created it (a test-only submission, a submission the scheduler rejected after admission, a refused part of a heterogeneous job): {what}",
            j.submitted
        );
        j.phase = JobPhase::Finished;
        j.status = Some(FinishStatus::Cancelled);
        j.with_runs(|r| r.released_unconfirmed = true);
        em.emit(d);
        em.step(id, at, Step::Finished(FinishStatus::Cancelled));
        state.jobs.insert(id.clone(), j);
        timers.set(at.plus(config.finished_retention), id.clone(), TimerKind::Forget);
    }

    fn resolve_approval(
        state: &mut State,
        timers: &mut TimerQueue,
        event: &Event,
        job_id: Option<&Arc<str>>,
        by: Option<&str>,
        em: &mut Emitter<'_>,
    ) {
        let Some(id) = job_id else { return };
        let Some(mut job) = state.jobs.remove(id) else { return };
        let pending = match (job.phase, job.take_pending()) {
            (JobPhase::PendingApproval, Some(p)) => p,
            (_, p) => {
                job.set_pending(p);
                state.jobs.insert(id.clone(), job);
                return;
            }
        };
        let who = by.unwrap_or("an unnamed approver");
        let granted = matches!(event.kind, EventKind::ApprovalGranted { .. });
        let verb = if granted { "approval" } else { "rejection" };
        // Who may answer which policy's request ([`crate::approval`]): an approver a policy names
        // answers its request (anyone's when it names nobody), never the job's own user unless
        // that policy allows it. Otherwise the request stays pending.
        let answered = pending.answers(who, job.user(), granted);
        let answered = match answered {
            Ok(a) => a,
            Err(why) => {
                let mut d = Draft::about(id, Some(&job), event.time, DecisionKind::Alert);
                d.policies = pending.policies.clone();
                d.reason = format!("{verb} of job {id} by {who} ignored: {why}");
                em.emit(d);
                job.set_pending(Some(pending));
                state.jobs.insert(id.clone(), job);
                return;
            }
        };
        let mut pending = pending;
        if granted && !pending.grant(&answered, who) {
            // A grant that leaves another policy's request waiting: recorded, the job stays held.
            let asks = pending.asks();
            let mut d = Draft::about(id, Some(&job), event.time, DecisionKind::Alert);
            d.policies = answered.iter().filter_map(|i| asks.get(*i).map(|a| a.policy.clone())).collect();
            d.reason = format!(
                "approval of job {id} by {who} recorded for {}; it still waits for {}",
                d.policies.iter().map(|p| &**p).collect::<Vec<_>>().join(", "),
                pending.waiting()
            );
            em.emit(d);
            job.set_pending(Some(pending));
            state.jobs.insert(id.clone(), job);
            return;
        }
        let who = if granted { pending.granted_by() } else { who.to_owned() };
        let who = who.as_str();
        let mut d =
            Draft::about(id, Some(&job), event.time, if granted { DecisionKind::Allow } else { DecisionKind::Deny });
        d.admission = true;
        d.policies = pending.policies.clone();
        d.gpu_hours = Some(job.gpus.as_f64() * job.requested_hours);
        if granted {
            d.reason = format!("approved by {who} (asked because: {})", pending.reason);
            job.phase = JobPhase::Admitted;
            state.reserve(&mut job);
            state.share(em.cause, event.time, id, LedgerChange::Reserve { job_id: id.to_string() });
            em.emit(d);
            em.step(id, event.time, Step::Admitted);
            state.jobs.insert(id.clone(), job);
        } else {
            // A rejection may say why (`"reason"`, as `bursar reject --reason` sends it): the owner reads it here.
            let why = event
                .extra
                .iter()
                .find(|(k, _)| k == "reason")
                .and_then(|(_, v)| serde_json::from_str::<String>(v.get()).ok())
                .filter(|r| !r.trim().is_empty())
                .map(|r| format!(": {}", r.trim()))
                .unwrap_or_default();
            d.reason = format!("approval rejected by {who}{why} (asked because: {})", pending.reason);
            state.share(em.cause, event.time, id, LedgerChange::Drop { job_id: id.to_string() });
            em.emit(d);
            em.step(id, event.time, Step::Denied);
        }
        let _ = timers;
    }

    /// Turns the verdicts of non-admission inputs (events after submission, policy timers) into
    /// decisions about `job_id`, one per decision kind, and applies reclaims and effects.
    fn follow_up(
        state: &mut State,
        timers: &mut TimerQueue,
        config: EngineConfig,
        time: Timestamp,
        job_id: &Arc<str>,
        outputs: &[(Arc<str>, Mode, Output)],
        em: &mut Emitter<'_>,
    ) {
        const ORDER: [DecisionKind; 6] = [
            DecisionKind::Reclaim,
            DecisionKind::Deny,
            DecisionKind::RequireApproval,
            DecisionKind::Defer,
            DecisionKind::Allow,
            DecisionKind::Alert,
        ];
        for dry in [false, true] {
            for kind in ORDER {
                let mut ids: Vec<Arc<str>> = Vec::new();
                // Settled to text by the callers (`settle_reasons`).
                let mut reasons: Vec<&str> = Vec::new();
                let mut hours: Option<f64> = None;
                for (pid, mode, out) in outputs {
                    if (*mode == Mode::DryRun) != dry {
                        continue;
                    }
                    let mut counted = false;
                    for v in out.verdicts.iter().filter(|v| v.kind.decision() == kind) {
                        if v.job_id.as_ref().is_some_and(|j| j != job_id) {
                            continue;
                        }
                        if !counted {
                            ids.push(pid.clone());
                            counted = true;
                        }
                        reasons.push(v.reason.text());
                        if let Some(h) = v.gpu_hours {
                            hours = Some(hours.unwrap_or(0.0) + h);
                        }
                    }
                }
                if ids.is_empty() {
                    continue;
                }
                let job = state.job(job_id);
                // A reclaim of a job that no longer holds GPUs is moot.
                if kind == DecisionKind::Reclaim && !dry && job.is_none_or(|j| !j.phase.is_live()) {
                    continue;
                }
                let mut d = Draft::about(job_id, job, time, kind);
                d.policies = ids;
                d.reason = join_reasons(reasons.into_iter());
                d.dry_run = dry;
                if kind == DecisionKind::Reclaim {
                    d.gpu_hours = job.map(|j| remaining_gpu_hours(j, time));
                } else if kind == DecisionKind::Alert {
                    // An alert has no figure of the engine's own: the policies', when they give one.
                    d.gpu_hours = hours;
                }
                em.emit(d);
                if kind == DecisionKind::Reclaim && !dry {
                    // A reclaim of an array reclaims its running tasks too (the scheduler cancels the
                    // whole array).
                    let tasks = state.live_tasks(job_id);
                    for id in std::iter::once(job_id.clone()).chain(tasks) {
                        let Some(mut j) = state.jobs.remove(&id) else { continue };
                        if !j.phase.is_live() {
                            state.jobs.insert(id, j);
                            continue;
                        }
                        state.release(&mut j, time, JobPhase::Reclaimed);
                        state.share(
                            em.cause,
                            time,
                            &id,
                            LedgerChange::Release { job_id: id.to_string(), reclaimed: true },
                        );
                        state.end_run(&id, &j, time);
                        em.step(&id, time, Step::Reclaimed);
                        state.jobs.insert(id.clone(), j);
                        timers.set(time.plus(config.finished_retention), id.clone(), TimerKind::Forget);
                        Self::after_task(state, timers, config, time, &id, FinishStatus::Cancelled, em);
                    }
                }
            }
        }
        Self::apply_effects(state, timers, outputs.iter().map(|(id, _, o)| (id.clone(), o)));
    }

    fn apply_effects<'o>(
        state: &mut State,
        timers: &mut TimerQueue,
        outputs: impl Iterator<Item = (Arc<str>, &'o Output)>,
    ) {
        for (policy, out) in outputs {
            for e in &out.effects {
                match e {
                    Effect::Timer { at, job_id, tag } => {
                        timers.set(*at, job_id.clone(), TimerKind::Policy { policy: policy.clone(), tag: *tag })
                    }
                    Effect::Mark { job_id, key, value } => {
                        if let Some(j) = state.jobs.get_mut(job_id) {
                            j.set_mark(*key, *value);
                        }
                    }
                }
            }
        }
    }
}

/// Convenience for tests and tools: a verdict about the current job.
pub fn verdict(kind: VerdictKind, reason: impl Into<Reason>) -> Verdict {
    Verdict::new(kind, reason)
}

/// The concurrent-GPU caps (`max_gpus` of the enforced quotas whose selector takes `job`) that one of
/// the job's ledgers is over now, each with its policy and a sentence.
fn over_caps(state: &State, policies: &PolicySet, job: &JobRecord) -> Vec<(Arc<str>, String)> {
    use crate::policy::QuotaScope;
    let p = &job.profile;
    let mut out = Vec::new();
    for pl in policies.limits().enforced().filter(|pl| pl.selector.matches(job)) {
        for q in &pl.limits.quotas {
            let Some(max) = q.max_gpus else { continue };
            let names: Vec<&str> = match &q.scope {
                QuotaScope::Project => vec![&*p.project],
                QuotaScope::User => vec![&*p.user],
                QuotaScope::Tag(key) => p.tags.iter().filter(|t| &*t.key == key.as_str()).map(|t| &*t.ledger).collect(),
            };
            for name in names {
                let kind = q.scope.kind();
                if let Some(l) = state.ledger(kind, name).filter(|l| l.held_gpus > max) {
                    out.push((
                        Arc::from(pl.policy.as_str()),
                        format!(
                            "{} {name} now holds {} GPUs, over its cap of {max}",
                            match kind {
                                ScopeKind::Project => "project",
                                ScopeKind::User => "user",
                                ScopeKind::Tag => "tag",
                            },
                            l.held_gpus
                        ),
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::decode_event;

    fn run(engine: &mut Engine, lines: &[String]) {
        let mut out = Vec::new();
        for l in lines {
            engine.process(&decode_event(l).unwrap(), Some(l), &mut out);
        }
    }

    fn ev(id: &str, min: u32, rest: &str) -> String {
        format!(r#"{{"id":"{id}","time":"2026-11-02T{:02}:{:02}:00Z",{rest}}}"#, 9 + min / 60, min % 60)
    }

    fn job(id: &str, gpus: u32, gpu_type: &str, config: Option<&str>) -> String {
        let config = config.map(|c| format!(r#","config":"{c}""#)).unwrap_or_default();
        format!(
            r#""type":"job.submitted","job":{{"id":"{id}","project":"p","gpus":{gpus},"gpu_type":"{gpu_type}","requested_hours":2{config}}}"#
        )
    }

    fn sample(job: &str, tp: f64) -> String {
        format!(r#""type":"job.sample","job_id":"{job}","gpu_util":0.9,"throughput":{tp},"unit":"tokens/s""#)
    }

    #[test]
    fn measured_throughput_is_folded_per_configuration_and_gpu_type_at_release() {
        let mut e = Engine::new(Arc::new(PolicySet::empty()));
        run(
            &mut e,
            &[
                ev("s1", 0, &job("a", 8, "A100", Some("cfg"))),
                ev("s2", 0, &job("b", 8, "A100", None)),
                ev("t1", 1, r#""type":"job.started","job_id":"a""#),
                ev("t2", 1, r#""type":"job.started","job_id":"b""#),
                // Job a reports 8,000 and 10,000 tokens/s for its 8 GPUs: 9,000 / 8 = 1,125 per GPU.
                ev("u1", 10, &sample("a", 8000.0)),
                ev("u2", 20, &sample("a", 10000.0)),
                // Job b names no configuration: its throughput is not kept.
                ev("u3", 10, &sample("b", 8000.0)),
            ],
        );
        assert_eq!(e.state().run_rate("a").and_then(|r| r.rate()), Some(9000.0));
        assert!(e.state().run_rate("b").is_none());
        assert!(e.state().throughput("cfg").is_empty(), "nothing until the run ends");
        // The snapshot keeps the run in progress.
        let mut e = Engine::restore(Arc::new(PolicySet::empty()), e.snapshot());
        run(
            &mut e,
            &[
                ev("f1", 30, r#""type":"job.finished","job_id":"a","status":"cancelled""#),
                // A sample after the release counts nothing.
                ev("u4", 31, &sample("a", 1e9)),
            ],
        );
        let m = e.state().throughput("cfg");
        assert_eq!(m.len(), 1);
        assert_eq!(
            (&*m[0].gpu_type, m[0].gpus, &*m[0].unit, m[0].runs, m[0].mean),
            ("A100", Gpus::whole(8), "tokens", 1, 1125.0)
        );
        assert!(e.state().run_rate("a").is_none(), "released: the run is folded and dropped");
    }

    #[test]
    fn an_inventory_keeps_the_latest_row_per_partition_and_runs_are_kept_for_the_estimator() {
        let mut e = Engine::new(Arc::new(PolicySet::empty()));
        let inv = |id: &str, min: u32, free: u32| {
            let line = ev(
                id,
                min,
                &format!(
                    r#""type":"pool.inventory","capacity":[{{"region":"r","gpu_type":"H100","queue":"q","in_service":8,"allocated":{},"free":{free}}}]"#,
                    8 - free
                ),
            );
            bursar_model::decode_input(&line).unwrap()
        };
        let mut out = Vec::new();
        assert_eq!(e.apply(&inv("i1", 0, 8), None, &mut out), Outcome::Applied);
        assert_eq!(e.apply(&inv("i2", 5, 2), None, &mut out), Outcome::Applied);
        assert_eq!(e.apply(&inv("i2", 5, 2), None, &mut out), Outcome::Duplicate);
        let rows: Vec<_> = e.state().inventory().collect();
        assert_eq!((rows.len(), rows[0].row.free), (1, Gpus::whole(2)), "the later row replaced the first");
        assert!(out.is_empty(), "an inventory makes no decision");
        run(
            &mut e,
            &[
                ev("s1", 10, &job("a", 8, "H100", Some("cfg"))),
                ev("t1", 10, r#""type":"job.started","job_id":"a""#),
                ev("f1", 40, r#""type":"job.finished","job_id":"a","status":"succeeded""#),
            ],
        );
        let runs: Vec<_> = e.state().recent_runs().cloned().collect();
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].limit_ms, runs[0].runtime_ms), (2 * 3_600_000, 30 * 60_000));
        let e = Engine::restore(Arc::new(PolicySet::empty()), e.snapshot());
        assert_eq!((e.state().inventory().count(), e.state().recent_runs().count()), (1, 1), "both in the snapshot");
        // serve writes the snapshot as JSON on shutdown: the tuple-keyed map must survive that too.
        let json = serde_json::to_string(&e.snapshot()).expect("the snapshot is JSON");
        let back: Snapshot = serde_json::from_str(&json).expect("and reads back");
        let e = Engine::restore(Arc::new(PolicySet::empty()), back);
        let rows: Vec<_> = e.state().inventory().collect();
        assert_eq!((rows.len(), &*rows[0].row.region, rows[0].row.free), (1, "r", Gpus::whole(2)), "through JSON");
    }
}
