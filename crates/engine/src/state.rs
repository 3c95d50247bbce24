//! What the engine remembers between events: jobs, usage ledgers, pending approvals, registered assets,
//! successful trial runs and the measured throughput of each configuration on each GPU type.
//!
//! Policies read this through `&State` and never write it; the engine changes it only after it has
//! combined the policies' verdicts for an event. Usage is kept in day buckets per ledger (a project, a
//! user, or a tag pair such as `team=search`), so a quota over a day, an ISO week or a calendar month is
//! a sum over at most 31 buckets, and one admission touches one bucket per ledger. Everything here is
//! `Serialize` so that `serve` can persist it and resume after a restart.
//!
//! Partitioning: every ledger, job and approval belongs to one project, which is the partition key for a
//! future multi-core or multi-machine engine. Tag ledgers (`team=search`) span projects; they are kept in
//! the same single-writer state today, and a partitioned deployment would route tag-scoped quotas through
//! one owner partition per tag (see `docs/architecture.md`).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bursar_model::{FinishStatus, Gpus, JobSpec, Period, RunRate, Timestamp, Work};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::intern::{Interner, Sym};
use crate::jobs::JobTable;
pub use crate::profile::JobTag;
use crate::profile::{Profile, Profiles, Slot};
pub use crate::runs::Correction;

/// How long usage buckets are kept: enough for the longest quota period (a month) plus settlement lag.
pub const LEDGER_RETENTION_DAYS: i64 = 62;

/// Whose usage a ledger counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// A project.
    Project,
    /// A user.
    User,
    /// A tag pair `key=value`.
    Tag,
}

/// The key of one ledger: a scope kind and its value (`nlp`, `alice`, `team=search`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LedgerKey {
    /// Project, user or tag.
    pub kind: ScopeKind,
    /// The name; for a tag, `key=value`.
    pub name: Sym,
}

/// Every ledger, one book per scope kind so a lookup by name needs no allocation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ledgers {
    /// By project.
    pub project: Book,
    /// By user.
    pub user: Book,
    /// By tag pair `key=value`.
    pub tag: Book,
}

impl Ledgers {
    /// The book of one scope kind.
    pub fn of(&self, kind: ScopeKind) -> &Book {
        match kind {
            ScopeKind::Project => &self.project,
            ScopeKind::User => &self.user,
            ScopeKind::Tag => &self.tag,
        }
    }

    /// Number of ledgers.
    pub fn len(&self) -> usize {
        self.project.len() + self.user.len() + self.tag.len()
    }

    /// True when no ledger exists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The ledgers of one scope kind: side by side in one vector, in the order they were opened, with a
/// map from each name to its position. A job's profile remembers its ledgers' positions
/// ([`crate::profile::Slot`]), so an admission and a release reach them without hashing a name; a
/// policy asking by name goes through the map. Ledgers are never removed (a ledger is a name's usage
/// history; its day buckets are what ages out), so a position, once given, stays its name's.
///
/// Serialized as the map from name to ledger that snapshots have always held.
#[derive(Debug, Clone, Default)]
pub struct Book {
    index: FxHashMap<Sym, u32>,
    names: Vec<Sym>,
    ledgers: Vec<Ledger>,
}

impl Book {
    /// The ledger of `name`, if anything was ever counted in it.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&Ledger> {
        self.index.get(name).and_then(|&i| self.ledgers.get(i as usize))
    }

    /// Every ledger with its name, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&Sym, &Ledger)> {
        self.index.iter().filter_map(|(n, &i)| Some((n, self.ledgers.get(i as usize)?)))
    }

    /// Number of ledgers.
    pub fn len(&self) -> usize {
        self.ledgers.len()
    }

    /// True when no ledger exists.
    pub fn is_empty(&self) -> bool {
        self.ledgers.is_empty()
    }

    /// The position of `name`'s ledger, opened empty if it has none.
    fn position(&mut self, name: &Sym) -> usize {
        if let Some(&i) = self.index.get(name.as_str()) {
            return i as usize;
        }
        let i = self.ledgers.len();
        self.index.insert(name.clone(), u32::try_from(i).unwrap_or(u32::MAX));
        self.names.push(name.clone());
        self.ledgers.push(Ledger::default());
        i
    }

    /// `name`'s ledger, opened empty if it has none.
    fn named(&mut self, name: &Sym) -> &mut Ledger {
        let i = self.position(name);
        &mut self.ledgers[i]
    }

    /// `name`'s ledger, found first at the position `slot` remembers: used when the name there is
    /// `name` itself (one pointer compare), else looked up by name and remembered.
    fn at(&mut self, name: &Sym, slot: &Slot) -> &mut Ledger {
        let hint = slot.get();
        let i = if self.names.get(hint).is_some_and(|n| Sym::ptr_eq(n, name)) {
            hint
        } else {
            let i = self.position(name);
            slot.set(i);
            i
        };
        &mut self.ledgers[i]
    }

    /// The same book, positions unchanged, with its names interned in `names` (after a restore, so
    /// that the profiles' names, interned there too, find their ledgers by pointer).
    fn reinterned(self, names: &mut Interner) -> Book {
        let names: Vec<Sym> = self.names.iter().map(|n| names.intern(n)).collect();
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i as u32)).collect();
        Book { index, names, ledgers: self.ledgers }
    }
}

impl Serialize for Book {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Book {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Book, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Book;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map from ledger names to ledgers")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Book, A::Error> {
                let mut book = Book::default();
                while let Some((name, ledger)) = map.next_entry::<Sym, Ledger>()? {
                    // A name given twice keeps its last ledger, as a map would.
                    *book.named(&name) = ledger;
                }
                Ok(book)
            }
        }
        d.deserialize_map(Visit)
    }
}

/// GPU-hours of one day in one ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DayUsage {
    /// Day number since 1970-01-01 (UTC) of the admissions counted here.
    pub day: i64,
    /// Reserved at admission, not yet settled (gpus × requested hours).
    pub reserved: f64,
    /// Settled from actual runtime (gpus × hours from start to release).
    pub used: f64,
    /// Charged by `billing.charge` events.
    pub charged: f64,
    /// Settled from runtime but not yet charged (for quotas that count billing).
    pub unbilled: f64,
}

/// Usage summed over a period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Reserved, not yet settled.
    pub reserved: f64,
    /// Settled from runtime.
    pub used: f64,
    /// Charged by billing.
    pub charged: f64,
    /// Settled from runtime, not yet charged.
    pub unbilled: f64,
}

impl Usage {
    /// Usage when settlement is by runtime: reserved + used.
    pub fn by_runtime(&self) -> f64 {
        self.reserved + self.used
    }

    /// Usage when settlement is by billing: reserved + finished-but-uncharged + charged.
    pub fn by_billing(&self) -> f64 {
        self.reserved + self.unbilled + self.charged
    }
}

/// One ledger: usage by day, and what is held right now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// Day buckets, oldest first.
    pub days: VecDeque<DayUsage>,
    /// GPUs of admitted jobs not yet released.
    pub held_gpus: Gpus,
    /// GPUs of started jobs not yet released.
    pub running_gpus: Gpus,
    /// Held GPUs per queue.
    pub queues: Vec<(Sym, Gpus)>,
}

impl Ledger {
    pub(crate) fn bucket(&mut self, day: i64) -> &mut DayUsage {
        let pos = self.days.iter().rposition(|d| d.day <= day);
        match pos {
            Some(i) if self.days[i].day == day => &mut self.days[i],
            Some(i) => {
                self.days.insert(i + 1, DayUsage { day, ..DayUsage::default() });
                &mut self.days[i + 1]
            }
            None => {
                self.days.push_front(DayUsage { day, ..DayUsage::default() });
                &mut self.days[0]
            }
        }
    }

    fn prune(&mut self) {
        if let Some(newest) = self.days.back().map(|d| d.day) {
            while self.days.front().is_some_and(|d| d.day < newest - LEDGER_RETENTION_DAYS) {
                self.days.pop_front();
            }
        }
    }

    /// Usage over the period of `period` containing `day`.
    #[inline]
    pub fn usage(&self, period: Period, day: i64) -> Usage {
        let (from, to) = period.bounds(day);
        let mut u = Usage::default();
        for d in self.days.iter().rev() {
            if d.day < from {
                break;
            }
            if d.day < to {
                u.reserved += d.reserved;
                u.used += d.used;
                u.charged += d.charged;
                u.unbilled += d.unbilled;
            }
        }
        u
    }

    /// GPUs held in `queue`.
    pub fn queue_gpus(&self, queue: &str) -> Gpus {
        self.queues.iter().find(|(q, _)| &**q == queue).map_or(Gpus::ZERO, |(_, g)| *g)
    }

    pub(crate) fn add_queue(&mut self, queue: &Sym, delta: i64) {
        if let Some(e) = self.queues.iter_mut().find(|(q, _)| q == queue) {
            e.1 = e.1.offset(delta);
        } else if delta > 0 {
            self.queues.push((queue.clone(), Gpus::from_signed(delta)));
        }
    }
}

/// Where a job is in its life, as far as bursar knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobPhase {
    /// Waiting for a person's approval.
    PendingApproval,
    /// Admitted to start later.
    Deferred,
    /// Admitted, not started.
    Admitted,
    /// Started.
    Running,
    /// Ended; kept until billed or forgotten.
    Finished,
    /// GPUs released by a reclaim decision.
    Reclaimed,
}

impl JobPhase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::PendingApproval => "pending_approval",
            JobPhase::Deferred => "deferred",
            JobPhase::Admitted => "admitted",
            JobPhase::Running => "running",
            JobPhase::Finished => "finished",
            JobPhase::Reclaimed => "reclaimed",
        }
    }

    /// True while the job holds (or is about to hold) GPUs.
    pub fn is_live(self) -> bool {
        matches!(self, JobPhase::Admitted | JobPhase::Running | JobPhase::Deferred)
    }
}

/// A pending approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// Who may approve; empty means anyone.
    pub approvers: Vec<Arc<str>>,
    /// When the request lapses.
    pub expires: Timestamp,
    /// The policies that asked for approval.
    pub policies: Vec<Arc<str>>,
    /// Their reasons.
    pub reason: String,
    /// Whether the job's own user may answer (every policy that asked sets `self_approval = true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub self_approval: bool,
    /// Each policy's request, answered on its own ([`crate::approval`]); empty in a request
    /// recorded before they were kept apart, which [`Pending::asks`] reads as one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<crate::approval::PolicyAsk>,
}

/// The latest utilisation the engine saw for a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Utilisation {
    /// When the last sample arrived.
    pub last_sample: OptTime,
    /// GPU utilisation of the last sample.
    pub gpu_util: f32,
    /// Memory utilisation of the last sample (framebuffer used over total); negative when the last
    /// sample had none.
    pub mem_util: f32,
    /// Exponentially weighted average of GPU utilisation (α = 0.2).
    pub avg_gpu_util: f32,
    /// Samples seen.
    pub samples: u32,
    /// Last `job.keepalive`.
    pub keepalive: OptTime,
}

/// A policy's private note on a job (for example "utilisation low since t"): set through
/// [`crate::Effect::Mark`], read with [`JobRecord::mark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// A key the policy chose, usually [`mark_key`] of its id and a slot.
    pub key: u64,
    /// The value.
    pub value: i64,
}

/// A stable key for a policy's mark: the policy id and a slot number.
pub fn mark_key(policy_id: &str, slot: u8) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    policy_id.hash(&mut h);
    slot.hash(&mut h);
    h.finish()
}

/// An optional event time in 8 bytes (`Option<Timestamp>` takes 16): `i64::MIN` stands for "none",
/// an instant no wire timestamp (years 0001–9999) can reach. Serialized as `Option<Timestamp>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptTime(i64);

impl OptTime {
    /// No time.
    pub const NONE: OptTime = OptTime(i64::MIN);

    /// The time, if set.
    pub fn get(self) -> Option<Timestamp> {
        (self.0 != i64::MIN).then_some(Timestamp(self.0))
    }

    /// True when a time is set.
    pub fn is_some(self) -> bool {
        self.0 != i64::MIN
    }

    /// True when no time is set.
    pub fn is_none(self) -> bool {
        self.0 == i64::MIN
    }
}

impl Default for OptTime {
    fn default() -> OptTime {
        OptTime::NONE
    }
}

impl From<Option<Timestamp>> for OptTime {
    fn from(t: Option<Timestamp>) -> OptTime {
        t.map_or(OptTime::NONE, |t| OptTime(t.0))
    }
}

impl From<Timestamp> for OptTime {
    fn from(t: Timestamp) -> OptTime {
        OptTime(t.0)
    }
}

impl From<OptTime> for Option<Timestamp> {
    fn from(t: OptTime) -> Option<Timestamp> {
        t.get()
    }
}

impl std::fmt::Debug for OptTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.get(), f)
    }
}

impl Serialize for OptTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

impl<'de> Deserialize<'de> for OptTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OptTime, D::Error> {
        Ok(Option::<Timestamp>::deserialize(d)?.into())
    }
}

/// What the engine keeps per job: 120 bytes plus the id (the size is pinned by a test, because it is
/// most of the memory per tracked job; see `docs/performance.md`). What few jobs have (a deferral, a
/// pending approval, policies' marks) is behind one pointer. Stored (in snapshots) as
/// [`StoredRecord`], the layout every build so far has written and read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "StoredRecord", into = "StoredRecord")]
pub struct JobRecord {
    /// Project, user, queue, stage, GPU type and tags, shared with the jobs submitted the same way.
    pub(crate) profile: Arc<Profile>,
    /// GPUs.
    pub(crate) gpus: Gpus,
    /// Nodes.
    pub(crate) nodes: u32,
    /// Requested hours.
    pub(crate) requested_hours: f64,
    /// Submission time; its day's buckets hold the job's usage.
    pub(crate) submitted: Timestamp,
    /// GPU-hours reserved and not yet settled.
    pub(crate) reserved: f64,
    /// GPU-hours settled from runtime and not yet charged.
    pub(crate) unbilled: f64,
    /// Start time.
    pub(crate) started: OptTime,
    /// End time.
    pub(crate) ended: OptTime,
    /// Latest utilisation.
    pub(crate) util: Utilisation,
    /// Hash of the configuration key (trial-before-scale).
    pub(crate) config: u64,
    /// A deferral, a pending approval, policies' marks, notes on runs: `None` for most jobs.
    pub(crate) rare: Option<Box<Rare>>,
    /// How it ended.
    pub(crate) status: Option<FinishStatus>,
    /// Phase.
    pub(crate) phase: JobPhase,
    /// Deferrable work.
    pub(crate) deferrable: bool,
    /// Whether the job names a configuration ([`JobSpec::has_config`]); only then is its measured
    /// throughput kept.
    pub(crate) configured: bool,
}

/// The parts of a job record few jobs have.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Rare {
    defer_until: OptTime,
    pending: Option<Pending>,
    marks: Vec<Mark>,
    pub(crate) runs: RunNotes,
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.defer_until.is_none() && self.pending.is_none() && self.marks.is_empty() && self.runs.is_empty()
    }
}

/// What the scheduler told about a job's runs beyond one plain start and end (v1.x): its later runs,
/// an allocation that differed from the admission, the array it belongs to or is, a confirmation it
/// owes, a release outside bursar. Empty for nearly every job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunNotes {
    /// Runs after the first (one per `job.requeued` of a running job, and per rerun of a finished one).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reruns: u32,
    /// GPU-hours of the runs before the current one (each settled when it ended).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub earlier_gpu_hours: f64,
    /// GPUs the admission reserved, when the scheduler allocated a different number (then `gpus` is
    /// the allocation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_gpus: Option<Gpus>,
    /// The job is an array: its tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<Box<ArrayState>>,
    /// The job is a task of this array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Arc<str>>,
    /// The scheduler has until then to confirm it created the job, or the admission is released.
    #[serde(default, skip_serializing_if = "unset")]
    pub confirm_by: OptTime,
    /// Someone released the job in the scheduler while it waited for approval in bursar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_by: Option<Arc<str>>,
    /// The admission was released because the scheduler did not confirm it in time: a later
    /// confirmation (the scheduler's agent was down) admits it again, and is not a rerun.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released_unconfirmed: bool,
    /// A reclaim of the job was not carried out by the scheduler (recorded `action.failed`) at this
    /// time: it still runs, counted as before, until it ends or someone acts (shown on the pool page).
    #[serde(default, skip_serializing_if = "unset")]
    pub reclaim_failed: OptTime,
    /// The job was requeued and waits to run again: the scheduler freed its GPUs, so it holds none
    /// until its next run starts (its admission, and what is left of its reservation, carry over).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeued: bool,
    /// When it last entered the queue (admitted or requeued), when that was not its submission: a
    /// stale reservation's age counts from it ([`crate::EngineConfig::stale_after`]).
    #[serde(default, skip_serializing_if = "unset")]
    pub queued_since: OptTime,
    /// Its reservation and hold were released as stale (admitted, not started in time): it stays
    /// admitted, holding nothing, until a start reserves it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released_stale: bool,
    /// Why the scheduler says it waits (`job.queued`'s `reason`: Slurm's `Reason`, Kueue's pending
    /// condition), while it waits; cleared when a run starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits: Option<Arc<str>>,
    /// Since when the scheduler has given that reason.
    #[serde(default, skip_serializing_if = "unset")]
    pub waits_since: OptTime,
    /// The region it runs in: the one it asked for, or the one placement suggested. Kept only where
    /// the inventory names several regions ([`State::several_regions`]): a job with none is counted
    /// in every region that has its GPU type, which errs towards less room, never more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Arc<str>>,
    /// This job moved (`job.replaces`: a partition change admitted again) to the job named here: it
    /// holds and reserves nothing while that admission stands, and is reserved again if the scheduler
    /// drops the move ([`crate::Engine`]'s replacement rules, `crates/engine/src/runs.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<Arc<str>>,
    /// The job this admission replaces (its `job.replaces`), until the scheduler confirms it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<Arc<str>>,
}

/// The longest scheduler's reason a job keeps (characters); a longer one is cut.
pub const WAIT_REASON_MAX: usize = 200;

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

fn unset(t: &OptTime) -> bool {
    t.is_none()
}

impl RunNotes {
    fn is_empty(&self) -> bool {
        self.reruns == 0
            && self.earlier_gpu_hours == 0.0
            && self.admitted_gpus.is_none()
            && self.array.is_none()
            && self.parent.is_none()
            && self.confirm_by.is_none()
            && self.released_by.is_none()
            && !self.released_unconfirmed
            && !self.requeued
            && self.reclaim_failed.is_none()
            && self.queued_since.is_none()
            && !self.released_stale
            && self.waits.is_none()
            && self.waits_since.is_none()
            && self.region.is_none()
            && self.replaced_by.is_none()
            && self.replaces.is_none()
    }
}

/// An array job's tasks, as far as the engine tracks them: each task is a job of its own (created on
/// its first start), and the array holds the reservation of the tasks that have not started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArrayState {
    /// Tasks the array was admitted for.
    pub tasks: u32,
    /// Tasks that may run at once.
    pub slots: u32,
    /// Tasks created so far (started at least once).
    pub created: u32,
    /// Tasks created and not yet released, by id.
    pub live: Vec<Arc<str>>,
    /// The worst end of its tasks so far (failed over cancelled over succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst: Option<FinishStatus>,
}

impl ArrayState {
    /// Tasks not started yet.
    pub fn unstarted(&self) -> u32 {
        self.tasks.saturating_sub(self.created)
    }

    /// How many GPUs (in units of one task's) the array itself holds: slots for the tasks not started,
    /// as many as may run beside the live ones.
    pub fn held_tasks(&self) -> u32 {
        let live = u32::try_from(self.live.len()).unwrap_or(u32::MAX);
        self.unstarted().min(self.slots.saturating_sub(live))
    }
}

/// A job record as snapshots store it: the fields in the order and shape every build has written
/// (profiles and the rare part flattened; `usage_day`, always the submission's day, written for the
/// builds that read it and ignored when read). A snapshot stays readable by the build before and
/// after, which a rolling upgrade of a cluster needs.
#[derive(Serialize, Deserialize)]
struct StoredRecord {
    #[serde(flatten)]
    profile: Arc<Profile>,
    gpus: Gpus,
    nodes: u32,
    requested_hours: f64,
    submitted: Timestamp,
    usage_day: i64,
    reserved: f64,
    unbilled: f64,
    started: OptTime,
    ended: OptTime,
    defer_until: OptTime,
    pending: Option<Pending>,
    util: Utilisation,
    config: u64,
    marks: Option<Vec<Mark>>,
    status: Option<FinishStatus>,
    phase: JobPhase,
    deferrable: bool,
    #[serde(default)]
    configured: bool,
    /// Written only when not empty, so a record of a job with one plain run keeps the layout earlier
    /// builds write and read.
    #[serde(default, skip_serializing_if = "RunNotes::is_empty")]
    runs: RunNotes,
}

impl From<StoredRecord> for JobRecord {
    fn from(s: StoredRecord) -> JobRecord {
        let rare =
            Rare { defer_until: s.defer_until, pending: s.pending, marks: s.marks.unwrap_or_default(), runs: s.runs };
        JobRecord {
            profile: s.profile,
            gpus: s.gpus,
            nodes: s.nodes,
            requested_hours: s.requested_hours,
            submitted: s.submitted,
            reserved: s.reserved,
            unbilled: s.unbilled,
            started: s.started,
            ended: s.ended,
            util: s.util,
            config: s.config,
            rare: (!rare.is_empty()).then(|| Box::new(rare)),
            status: s.status,
            phase: s.phase,
            deferrable: s.deferrable,
            configured: s.configured,
        }
    }
}

impl From<JobRecord> for StoredRecord {
    fn from(r: JobRecord) -> StoredRecord {
        let rare = r.rare.map(|b| *b).unwrap_or_default();
        StoredRecord {
            profile: r.profile,
            gpus: r.gpus,
            nodes: r.nodes,
            requested_hours: r.requested_hours,
            submitted: r.submitted,
            usage_day: r.submitted.day(),
            reserved: r.reserved,
            unbilled: r.unbilled,
            started: r.started,
            ended: r.ended,
            defer_until: rare.defer_until,
            pending: rare.pending,
            util: r.util,
            config: r.config,
            marks: (!rare.marks.is_empty()).then_some(rare.marks),
            status: r.status,
            phase: r.phase,
            deferrable: r.deferrable,
            configured: r.configured,
            runs: rare.runs,
        }
    }
}

impl JobRecord {
    /// Project.
    pub fn project(&self) -> &str {
        self.profile.project()
    }

    /// User.
    pub fn user(&self) -> &str {
        self.profile.user()
    }

    /// Queue.
    pub fn queue(&self) -> Option<&str> {
        self.profile.queue()
    }

    /// Stage.
    pub fn stage(&self) -> Option<&str> {
        self.profile.stage()
    }

    /// GPU model.
    pub fn gpu_type(&self) -> Option<&str> {
        self.profile.gpu_type()
    }

    /// Tags, in the order submitted.
    pub fn tags(&self) -> &[JobTag] {
        &self.profile.tags
    }

    /// GPUs.
    pub fn gpus(&self) -> Gpus {
        self.gpus
    }

    /// Nodes.
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// Requested wall-clock hours.
    pub fn requested_hours(&self) -> f64 {
        self.requested_hours
    }

    /// When it was submitted (event time).
    pub fn submitted(&self) -> Timestamp {
        self.submitted
    }

    /// Why the scheduler says it waits, and since when (`job.queued`'s `reason`), while it waits.
    pub fn waits(&self) -> Option<(&str, Timestamp)> {
        let r = self.runs()?;
        Some((r.waits.as_deref()?, r.waits_since.get().unwrap_or(self.submitted)))
    }

    /// Since when it has waited in the queue: when it was last admitted or requeued (its submission
    /// unless that was later). Meaningful for an admitted job that has not started.
    pub fn queued_since(&self) -> Timestamp {
        self.runs().and_then(|r| r.queued_since.get()).unwrap_or(self.submitted)
    }

    /// GPU-hours reserved and not yet settled.
    pub fn reserved(&self) -> f64 {
        self.reserved
    }

    /// GPU-hours settled from runtime and not yet charged.
    pub fn unbilled(&self) -> f64 {
        self.unbilled
    }

    /// When it started.
    pub fn started(&self) -> Option<Timestamp> {
        self.started.get()
    }

    /// When it ended.
    pub fn ended(&self) -> Option<Timestamp> {
        self.ended.get()
    }

    /// For a deferred job, when it may start.
    pub fn defer_until(&self) -> Option<Timestamp> {
        self.rare.as_ref().and_then(|r| r.defer_until.get())
    }

    /// The approval it waits for.
    pub fn pending(&self) -> Option<&Pending> {
        self.rare.as_ref().and_then(|r| r.pending.as_ref())
    }

    /// Changes the rare part, allocated on first use and freed when it is empty again.
    fn with_rare<T>(&mut self, f: impl FnOnce(&mut Rare) -> T) -> T {
        let rare = self.rare.get_or_insert_default();
        let out = f(rare);
        if rare.is_empty() {
            self.rare = None;
        }
        out
    }

    pub(crate) fn set_defer_until(&mut self, until: Option<Timestamp>) {
        self.with_rare(|r| r.defer_until = until.into());
    }

    pub(crate) fn set_pending(&mut self, pending: Option<Pending>) {
        self.with_rare(|r| r.pending = pending);
    }

    pub(crate) fn take_pending(&mut self) -> Option<Pending> {
        self.pending()?;
        self.with_rare(|r| r.pending.take())
    }

    /// The region it runs in, where one is known ([`RunNotes::region`]).
    pub fn region(&self) -> Option<&str> {
        self.runs().and_then(|r| r.region.as_deref())
    }

    /// What the scheduler told about its runs beyond a plain start and end ([`RunNotes`]).
    pub fn runs(&self) -> Option<&RunNotes> {
        self.rare.as_ref().map(|r| &r.runs).filter(|r| !r.is_empty())
    }

    pub(crate) fn with_runs<T>(&mut self, f: impl FnOnce(&mut RunNotes) -> T) -> T {
        self.with_rare(|r| f(&mut r.runs))
    }

    /// For an array, its tasks.
    pub fn array(&self) -> Option<&ArrayState> {
        self.runs().and_then(|r| r.array.as_deref())
    }

    /// Admitted, but set aside: its reservation released as stale, or moved to the job that replaces
    /// it. It holds and reserves nothing until a start (or the move's failure) reserves it again.
    pub fn set_aside(&self) -> bool {
        self.runs().is_some_and(|r| r.released_stale || r.replaced_by.is_some())
    }

    /// For a task of an array, the array's id.
    pub fn parent(&self) -> Option<&Arc<str>> {
        self.runs().and_then(|r| r.parent.as_ref())
    }

    /// GPUs the job counts as held now (the ledgers' `held_gpus`): its GPUs, or for an array the
    /// GPUs of the tasks not started that may run beside its live ones (the live tasks hold their own).
    pub fn held_gpus(&self) -> Gpus {
        if self.runs().is_some_and(|r| r.requeued || r.released_stale || r.replaced_by.is_some()) {
            return Gpus::ZERO;
        }
        match self.array() {
            Some(a) => self.gpus.saturating_mul(a.held_tasks()),
            None => self.gpus,
        }
    }

    /// GPU-hours the job's admission reserves while nothing of it has run: gpus × requested hours,
    /// for each task of an array not started yet.
    pub fn full_reservation(&self) -> f64 {
        let tasks = self.array().map_or(1, ArrayState::unstarted);
        self.gpus.as_f64() * self.requested_hours * f64::from(tasks)
    }

    /// The latest utilisation.
    pub fn util(&self) -> &Utilisation {
        &self.util
    }

    /// Hash of its configuration key (trial-before-scale).
    pub fn config(&self) -> u64 {
        self.config
    }

    /// Whether it names a configuration at all ([`JobSpec::has_config`]).
    pub fn has_config(&self) -> bool {
        self.configured
    }

    /// How it ended.
    pub fn status(&self) -> Option<FinishStatus> {
        self.status
    }

    /// Where it is in its life.
    pub fn phase(&self) -> JobPhase {
        self.phase
    }

    /// Whether its work may run later.
    pub fn deferrable(&self) -> bool {
        self.deferrable
    }

    /// The value a policy stored under `key`.
    pub fn mark(&self, key: u64) -> Option<i64> {
        self.rare.as_ref().and_then(|r| r.marks.iter().find(|m| m.key == key)).map(|m| m.value)
    }

    /// Sets (or with `None` removes) the value a policy stores under `key`.
    pub fn set_mark(&mut self, key: u64, value: Option<i64>) {
        if value.is_none() && self.mark(key).is_none() {
            return;
        }
        self.with_rare(|r| {
            r.marks.retain(|m| m.key != key);
            if let Some(value) = value {
                r.marks.push(Mark { key, value });
            }
        });
    }

    /// Removes every policy's marks (they describe one run).
    pub(crate) fn clear_marks(&mut self) {
        if self.rare.as_ref().is_some_and(|r| !r.marks.is_empty()) {
            self.with_rare(|r| r.marks.clear());
        }
    }

    /// The tag value for `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.profile.tag(key)
    }

    /// GPU-hours of all its runs so far: the earlier ones (before a requeue or a rerun) and the
    /// current one ([`JobRecord::runtime_gpu_hours`]).
    pub fn total_runtime_gpu_hours(&self, now: Timestamp) -> f64 {
        self.runs().map_or(0.0, |r| r.earlier_gpu_hours) + self.runtime_gpu_hours(now)
    }

    /// GPU-hours of runtime of the current run so far (or until its end).
    pub fn runtime_gpu_hours(&self, now: Timestamp) -> f64 {
        match self.started.get() {
            Some(s) => self.gpus.as_f64() * self.ended.get().unwrap_or(now).since(s).as_hours().max(0.0),
            None => 0.0,
        }
    }
}

/// Facts about a job that selectors match on, shared by a submitted [`JobSpec`] and a stored
/// [`JobRecord`].
pub trait JobFacts {
    /// Project.
    fn project(&self) -> &str;
    /// User.
    fn user(&self) -> &str;
    /// Queue.
    fn queue(&self) -> Option<&str>;
    /// Stage.
    fn stage(&self) -> Option<&str>;
    /// GPU type.
    fn gpu_type(&self) -> Option<&str>;
    /// A tag's value.
    fn tag(&self, key: &str) -> Option<&str>;
}

impl JobFacts for JobSpec {
    fn project(&self) -> &str {
        &self.project
    }
    fn user(&self) -> &str {
        &self.user
    }
    fn queue(&self) -> Option<&str> {
        self.queue.as_deref()
    }
    fn stage(&self) -> Option<&str> {
        self.stage.as_deref()
    }
    fn gpu_type(&self) -> Option<&str> {
        self.gpu_type.as_deref()
    }
    fn tag(&self, key: &str) -> Option<&str> {
        JobSpec::tag(self, key)
    }
}

impl JobFacts for JobRecord {
    fn project(&self) -> &str {
        self.profile.project()
    }
    fn user(&self) -> &str {
        self.profile.user()
    }
    fn queue(&self) -> Option<&str> {
        self.profile.queue()
    }
    fn stage(&self) -> Option<&str> {
        self.profile.stage()
    }
    fn gpu_type(&self) -> Option<&str> {
        self.profile.gpu_type()
    }
    fn tag(&self, key: &str) -> Option<&str> {
        self.profile.tag(key)
    }
}

/// A registered asset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssetRecord {
    /// `dataset` or `image`.
    pub kind: Sym,
    /// Owning project.
    pub project: Sym,
    /// Where it is.
    pub uri: String,
    /// When it was registered.
    pub registered: Timestamp,
    /// The regions its copies are in (v1.x `asset.region`), in the order they were registered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<Sym>,
}

/// Run history of one configuration: for trial-before-scale, and its measured throughput.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialHistory {
    /// Latest success per GPU count, at most 8 entries.
    pub successes: Vec<(Gpus, Timestamp)>,
    /// Latest failure.
    pub last_failure: Option<Timestamp>,
    /// Measured throughput per GPU, one entry per (GPU type, GPU count, unit), at most
    /// [`MEASURED_PER_CONFIG`] (the least recently measured is forgotten first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throughput: Vec<Measured>,
}

/// Entries of measured throughput kept per configuration.
pub const MEASURED_PER_CONFIG: usize = 16;

/// The measured throughput per GPU of the runs of one configuration on one GPU type at one GPU count:
/// each run contributes its rate ([`RunRate`]: the mean of its `throughput` samples, or the rate of
/// its cumulative `progress`) divided by its GPUs, once, at its release. Mean and spread are kept
/// with Welford's update, so the entry stays this size however many runs it counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// GPU type of the runs.
    pub gpu_type: Sym,
    /// GPUs of each run.
    pub gpus: Gpus,
    /// What is counted (`tokens`), per second.
    pub unit: Sym,
    /// Runs counted.
    pub runs: u32,
    /// Mean throughput per GPU over the runs, units per second.
    pub mean: f64,
    /// Sum of squared deviations from the mean (Welford).
    m2: f64,
    /// The slowest run's throughput per GPU.
    pub min: f64,
    /// The fastest run's.
    pub max: f64,
    /// When the latest run was released.
    pub last: Timestamp,
}

impl Measured {
    fn new(gpu_type: Sym, gpus: Gpus, unit: Sym) -> Measured {
        Measured {
            gpu_type,
            gpus,
            unit,
            runs: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: 0.0,
            last: Timestamp(i64::MIN),
        }
    }

    fn add(&mut self, per_gpu: f64, at: Timestamp) {
        self.runs = self.runs.saturating_add(1);
        let d = per_gpu - self.mean;
        self.mean += d / f64::from(self.runs);
        self.m2 += d * (per_gpu - self.mean);
        self.min = self.min.min(per_gpu);
        self.max = self.max.max(per_gpu);
        self.last = self.last.max(at);
    }

    /// Sample standard deviation of the runs' throughput per GPU (0 for a single run).
    pub fn stddev(&self) -> f64 {
        if self.runs > 1 { (self.m2 / f64::from(self.runs - 1)).max(0.0).sqrt() } else { 0.0 }
    }
}

impl TrialHistory {
    /// The latest success of a run with at most `max_gpus` GPUs.
    pub fn last_success_at_most(&self, max_gpus: Gpus) -> Option<(Gpus, Timestamp)> {
        self.successes.iter().filter(|(g, _)| *g <= max_gpus).max_by_key(|(_, t)| *t).copied()
    }

    /// The measured throughput of this configuration on `gpu_type` at `gpus` GPUs in `unit`.
    pub fn measured(&self, gpu_type: &str, gpus: Gpus, unit: &str) -> Option<&Measured> {
        self.throughput.iter().find(|m| &*m.gpu_type == gpu_type && m.gpus == gpus && &*m.unit == unit)
    }

    fn record_throughput(&mut self, gpu_type: &Sym, gpus: Gpus, unit: Sym, per_gpu: f64, at: Timestamp) {
        let i = match self.throughput.iter().position(|m| m.gpu_type == *gpu_type && m.gpus == gpus && m.unit == unit) {
            Some(i) => i,
            None => {
                if self.throughput.len() >= MEASURED_PER_CONFIG
                    && let Some(old) = self.throughput.iter().enumerate().min_by_key(|(_, m)| m.last).map(|(i, _)| i)
                {
                    self.throughput.swap_remove(old);
                }
                self.throughput.push(Measured::new(gpu_type.clone(), gpus, unit));
                self.throughput.len() - 1
            }
        };
        if let Some(m) = self.throughput.get_mut(i) {
            m.add(per_gpu, at);
        }
    }

    fn record_success(&mut self, gpus: Gpus, at: Timestamp) {
        if let Some(e) = self.successes.iter_mut().find(|(g, _)| *g == gpus) {
            e.1 = e.1.max(at);
        } else {
            self.successes.push((gpus, at));
            if self.successes.len() > 8 {
                // Forget the oldest.
                if let Some(i) = self.successes.iter().enumerate().min_by_key(|(_, (_, t))| *t).map(|(i, _)| i) {
                    self.successes.swap_remove(i);
                }
            }
        }
    }
}

/// A stable 64-bit hash of a configuration key.
pub fn config_hash(key: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// The engine's whole state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// Latest event time seen.
    pub(crate) now: Timestamp,
    /// Jobs by id.
    pub(crate) jobs: JobTable,
    /// Ledgers of projects, users and tag pairs.
    pub(crate) ledgers: Ledgers,
    /// Registered assets by fingerprint.
    pub(crate) assets: FxHashMap<Box<str>, AssetRecord>,
    /// Run history by configuration hash.
    pub(crate) trials: FxHashMap<u64, TrialHistory>,
    /// The rate of work of running jobs that report one and name a configuration and a GPU type, by
    /// job id; folded into their configuration's [`TrialHistory::throughput`] at release.
    #[serde(default)]
    pub(crate) runs: FxHashMap<Arc<str>, RunRate>,
    /// The shared ledgers' side of this state (`serve --cluster`): jobs whose changes go to the
    /// ledger partition, or the answers the ledger partition gave ([`crate::shared`]).
    #[serde(default)]
    pub(crate) shared: crate::shared::Shared,
    /// Changes to tracked jobs made by the input being applied, to send to the ledger partition.
    #[serde(skip)]
    pub(crate) ledger_out: Vec<bursar_model::LedgerOp>,
    #[serde(skip)]
    pub(crate) names: Interner,
    /// The jobs' profiles, each stored once.
    #[serde(skip)]
    pub(crate) profiles: Profiles,
    /// Scratch space for building keys without allocating.
    #[serde(skip)]
    buf: String,
    /// The pool's latest capacity per (region, GPU type, queue), from `pool.inventory` inputs. Kept
    /// in the snapshot as a list of rows (a JSON object's keys are strings; the key is in the row).
    #[serde(default, with = "inventory_as_rows")]
    pub(crate) inventory: std::collections::BTreeMap<(String, String, String), InventoryRow>,
    /// The last [`RECENT_RUNS`] finished runs' runtimes against their requested limits, for the
    /// start estimator's history (`bursar-estimate`).
    #[serde(default)]
    pub(crate) recent_runs: VecDeque<RunSample>,
}

/// [`State::inventory`] in a snapshot: its rows, each key rebuilt from its row when read back.
mod inventory_as_rows {
    use super::InventoryRow;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::BTreeMap;

    type Key = (String, String, String);

    pub fn serialize<S: Serializer>(map: &BTreeMap<Key, InventoryRow>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.values())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<Key, InventoryRow>, D::Error> {
        let rows = Vec::<InventoryRow>::deserialize(d)?;
        Ok(rows.into_iter().map(|r| ((r.row.region.clone(), r.row.gpu_type.clone(), r.row.queue.clone()), r)).collect())
    }
}

/// How many finished runs [`State::recent_runs`] keeps.
pub const RECENT_RUNS: usize = 10_000;

/// One partition's capacity as last reported, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryRow {
    /// The row.
    pub row: bursar_model::CapacityRow,
    /// When it was read.
    pub time: Timestamp,
    /// Who reported it.
    pub source: Option<String>,
}

/// A finished run: whose, which configuration, the limit asked for and the runtime (ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSample {
    /// The user.
    pub user: String,
    /// The configuration's hash (0: none named).
    pub config: u64,
    /// The requested limit, in milliseconds.
    pub limit_ms: i64,
    /// The runtime, in milliseconds.
    pub runtime_ms: i64,
    /// When it ended.
    pub ended: Timestamp,
}

impl State {
    /// The engine's clock: the newest event time it has seen.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The pool's latest capacity rows, by (region, GPU type, queue).
    pub fn inventory(&self) -> impl Iterator<Item = &InventoryRow> {
        self.inventory.values()
    }

    /// Whether the inventory names more than one region (then a job's region is kept, and counts).
    /// The map is ordered by region first, so its first and last keys say it (every admission that
    /// is allowed asks: no walk of the rows).
    pub fn several_regions(&self) -> bool {
        match (self.inventory.first_key_value(), self.inventory.last_key_value()) {
            (Some(((first, _, _), _)), Some(((last, _, _), _))) => first != last,
            _ => false,
        }
    }

    /// Replaces the rows an inventory names.
    pub(crate) fn take_inventory(&mut self, inv: &bursar_model::Inventory) {
        for row in &inv.capacity {
            let key = (row.region.clone(), row.gpu_type.clone(), row.queue.clone());
            self.inventory.insert(key, InventoryRow { row: row.clone(), time: inv.time, source: inv.source.clone() });
        }
    }

    /// The finished runs kept for the start estimator, oldest first.
    pub fn recent_runs(&self) -> impl Iterator<Item = &RunSample> {
        self.recent_runs.iter()
    }

    /// A job's record.
    pub fn job(&self, id: &str) -> Option<&JobRecord> {
        self.jobs.get(id)
    }

    /// Every tracked job (live, pending approval, or ended and kept for late charges), in no
    /// particular order.
    pub fn jobs(&self) -> impl Iterator<Item = (&str, &JobRecord)> {
        self.jobs.iter().map(|(id, j)| (&**id, j))
    }

    /// Registered assets by fingerprint.
    pub fn assets(&self) -> impl Iterator<Item = (&str, &AssetRecord)> {
        self.assets.iter().map(|(f, a)| (&**f, a))
    }

    /// A ledger, if anything was ever counted in it.
    #[inline]
    pub fn ledger(&self, kind: ScopeKind, name: &str) -> Option<&Ledger> {
        self.ledgers.of(kind).get(name)
    }

    /// Every ledger of one scope kind, by name, in no particular order.
    pub fn ledgers(&self, kind: ScopeKind) -> impl Iterator<Item = (&str, &Ledger)> {
        self.ledgers.of(kind).iter().map(|(n, l)| (&**n, l))
    }

    /// Usage of a ledger over `period` containing `at`.
    pub fn usage(&self, kind: ScopeKind, name: &str, period: Period, at: Timestamp) -> Usage {
        self.ledger(kind, name).map(|l| l.usage(period, at.day())).unwrap_or_default()
    }

    /// The asset registered under `fingerprint`.
    pub fn asset(&self, fingerprint: &str) -> Option<&AssetRecord> {
        self.assets.get(fingerprint)
    }

    /// Run history of a configuration key.
    pub fn trial(&self, config_key: &str) -> Option<&TrialHistory> {
        self.trials.get(&config_hash(config_key))
    }

    /// The measured throughput of a configuration key on every GPU type and count it ran at (empty
    /// when none of its runs reported throughput).
    pub fn throughput(&self, config_key: &str) -> &[Measured] {
        self.trial(config_key).map_or(&[], |h| &h.throughput)
    }

    /// The rate of work a running job has reported so far, if it reports one.
    pub fn run_rate(&self, job_id: &str) -> Option<&RunRate> {
        self.runs.get(job_id)
    }

    /// Number of live jobs: holding or about to hold GPUs (admitted, deferred, running) or waiting for
    /// an approval. Ended jobs kept for late charges are not live.
    pub fn live_jobs(&self) -> usize {
        self.jobs.values().filter(|j| j.phase.is_live() || j.phase == JobPhase::PendingApproval).count()
    }

    /// Number of tracked jobs, ended ones kept for late charges included (what memory grows with).
    pub fn tracked_jobs(&self) -> usize {
        self.jobs.len()
    }

    /// Notes a change to job `job` made by input `cause`, for the ledger partition, when the job was
    /// admitted through it.
    pub(crate) fn share(&mut self, cause: &str, time: Timestamp, job: &str, change: bursar_model::LedgerChange) {
        if !self.shared.tracks(job) {
            return;
        }
        if matches!(change, bursar_model::LedgerChange::Drop { .. }) {
            self.shared.untrack(job);
        }
        let id = crate::shared::op_id(cause, job, &change);
        self.ledger_out.push(bursar_model::LedgerOp { id, time, op: change });
    }

    pub(crate) fn intern(&mut self, s: &str) -> Sym {
        self.names.intern(s)
    }

    /// Rebuilds the interner and the profiles after loading a persisted state, so names are shared
    /// again.
    pub fn reintern(&mut self) {
        let (mut names, mut profiles, mut buf) = (Interner::default(), Profiles::default(), String::new());
        for job in self.jobs.values_mut() {
            let shared = profiles.intern(&mut names, &*job.profile, &mut buf);
            job.profile = shared;
        }
        let ledgers = std::mem::take(&mut self.ledgers);
        self.ledgers = Ledgers {
            project: ledgers.project.reinterned(&mut names),
            user: ledgers.user.reinterned(&mut names),
            tag: ledgers.tag.reinterned(&mut names),
        };
        self.names = names;
        self.profiles = profiles;
    }

    pub(crate) fn record_from_spec(&mut self, spec: &JobSpec, now: Timestamp) -> JobRecord {
        let mut buf = std::mem::take(&mut self.buf);
        let profile = self.profiles.intern(&mut self.names, spec, &mut buf);
        buf.clear();
        spec.write_config_key(&mut buf);
        let config = config_hash(&buf);
        self.buf = buf;
        let mut record = JobRecord {
            profile,
            gpus: spec.gpus,
            nodes: spec.nodes,
            requested_hours: spec.requested_hours,
            submitted: now,
            reserved: 0.0,
            unbilled: 0.0,
            started: OptTime::NONE,
            ended: OptTime::NONE,
            status: None,
            phase: JobPhase::Admitted,
            util: Utilisation::default(),
            config,
            deferrable: spec.deferrable,
            rare: None,
            configured: spec.has_config(),
        };
        if let Some(a) = spec.array {
            record.with_runs(|r| {
                r.array = Some(Box::new(ArrayState { tasks: a.tasks, slots: a.slots(), ..ArrayState::default() }))
            });
        }
        if let Some(s) = spec.confirm_within_s {
            record.with_runs(|r| r.confirm_by = now.plus(bursar_model::Duration::seconds(i64::from(s))).into());
        }
        record
    }

    pub(crate) fn for_each_ledger(&mut self, job: &JobRecord, mut f: impl FnMut(&mut Ledger)) {
        let p = &*job.profile;
        f(self.ledgers.project.at(&p.project, &p.project_slot));
        f(self.ledgers.user.at(&p.user, &p.user_slot));
        for t in p.tags.iter() {
            f(self.ledgers.tag.at(&t.ledger, &t.slot));
        }
    }

    /// Reserves the job's requested GPU-hours (every task's, for an array) and holds its GPUs.
    pub(crate) fn reserve(&mut self, job: &mut JobRecord) {
        let hours = job.full_reservation();
        job.reserved = hours;
        let (day, gpus, queue) = (job.submitted.day(), job.held_gpus(), job.profile.queue.clone());
        self.for_each_ledger(job, |l| {
            l.bucket(day).reserved += hours;
            l.held_gpus += gpus;
            if let Some(q) = &queue {
                l.add_queue(q, gpus.signed());
            }
            l.prune();
        });
    }

    /// Marks a held job as started; a job that waited after a requeue holds its GPUs again.
    pub(crate) fn start(&mut self, job: &mut JobRecord, at: Timestamp) {
        if job.runs().is_some_and(|r| r.requeued) {
            let before = job.held_gpus();
            job.with_runs(|r| r.requeued = false);
            self.rehold(job, before);
        }
        if job.started.is_none() {
            job.started = at.into();
            let gpus = job.gpus;
            self.for_each_ledger(job, |l| l.running_gpus += gpus);
        }
        job.phase = JobPhase::Running;
    }

    /// Releases the job's GPUs and settles its reservation from runtime.
    pub(crate) fn release(&mut self, job: &mut JobRecord, at: Timestamp, phase: JobPhase) {
        if !job.phase.is_live() {
            job.phase = phase;
            return;
        }
        if job.started.is_some() && job.ended.is_none() {
            job.ended = at.into();
        }
        if let Some(started) = job.started()
            && job.requested_hours > 0.0
        {
            if self.recent_runs.len() >= RECENT_RUNS {
                self.recent_runs.pop_front();
            }
            self.recent_runs.push_back(RunSample {
                user: job.user().to_owned(),
                config: job.config,
                limit_ms: (job.requested_hours * 3_600_000.0).round() as i64,
                runtime_ms: at.millis().saturating_sub(started.millis()).max(0),
                ended: at,
            });
        }
        let used = job.runtime_gpu_hours(at);
        let (day, held, gpus, queue, reserved, running) = (
            job.submitted.day(),
            job.held_gpus(),
            job.gpus,
            job.profile.queue.clone(),
            job.reserved,
            job.started.is_some(),
        );
        self.for_each_ledger(job, |l| {
            let b = l.bucket(day);
            b.reserved = (b.reserved - reserved).max(0.0);
            b.used += used;
            b.unbilled += used;
            l.held_gpus = l.held_gpus.saturating_sub(held);
            if running {
                l.running_gpus = l.running_gpus.saturating_sub(gpus);
            }
            if let Some(q) = &queue {
                l.add_queue(q, -held.signed());
            }
        });
        job.reserved = 0.0;
        // Earlier runs (before a requeue) were settled already and are still unbilled here.
        job.unbilled += used;
        job.phase = phase;
        if let Some(a) = job.rare.as_mut().and_then(|r| r.runs.array.as_mut()) {
            // The array's own hold is gone: tasks not started will not start.
            a.created = a.tasks.max(a.created);
        }
    }

    /// Counts a billing charge; when it names a known job, that job's runtime usage counts as billed.
    pub(crate) fn charge(&mut self, project: Option<&str>, job_id: Option<&str>, gpu_hours: f64, at: Timestamp) {
        let job = job_id.and_then(|id| self.jobs.remove_entry(id));
        match job {
            Some((id, mut job)) => {
                let (day, unbilled) = (job.submitted.day(), job.unbilled);
                self.for_each_ledger(&job, |l| {
                    let b = l.bucket(day);
                    b.charged += gpu_hours;
                    b.unbilled = (b.unbilled - unbilled).max(0.0);
                });
                job.unbilled = 0.0;
                self.jobs.insert(id, job);
            }
            // A charge for a job the engine does not know, without a project (v1.x: an unattributed
            // line, or one naming a job from before this log) settles no ledger: no quota counts it.
            None => {
                let Some(project) = project else { return };
                let name = self.intern(project);
                let l = self.ledgers.project.named(&name);
                l.bucket(at.day()).charged += gpu_hours;
                l.prune();
            }
        }
    }

    /// A sample's measure of work for a running job that names a configuration and a GPU type.
    pub(crate) fn sample_work(&mut self, id: &Arc<str>, work: &Work<'_>, at: Timestamp) {
        let Some(j) = self.jobs.get(id) else { return };
        if j.phase != JobPhase::Running || !j.configured || j.profile.gpu_type.is_none() || j.gpus == 0 {
            return;
        }
        match self.runs.get_mut(&**id) {
            Some(r) => {
                r.add(at, work);
            }
            None => {
                let mut r = RunRate::default();
                if r.add(at, work) {
                    self.runs.insert(id.clone(), r);
                }
            }
        }
    }

    /// The job's run ended (its release) at `at`: its rate, per GPU, joins its configuration's
    /// measured throughput on its GPU type.
    pub(crate) fn end_run(&mut self, id: &str, job: &JobRecord, at: Timestamp) {
        let Some(run) = self.runs.remove(id) else { return };
        let (Some(rate), Some(gpu_type)) = (run.rate(), &job.profile.gpu_type) else { return };
        if job.gpus == 0 || !rate.is_finite() {
            return;
        }
        let unit = self.intern(run.unit());
        let per_gpu = rate / job.gpus.as_f64();
        self.trials.entry(job.config).or_default().record_throughput(gpu_type, job.gpus, unit, per_gpu, at);
    }

    /// A run another partition saw finish: the same history as [`State::record_run`], kept
    /// idempotent (the latest failure is the latest one seen, whatever order the facts come in).
    pub(crate) fn record_run_fact(&mut self, config: u64, gpus: Gpus, status: FinishStatus, at: Timestamp) {
        let h = self.trials.entry(config).or_default();
        match status {
            FinishStatus::Succeeded => h.record_success(gpus, at),
            FinishStatus::Failed => h.last_failure = h.last_failure.max(Some(at)),
            FinishStatus::Cancelled => {}
        }
    }

    pub(crate) fn record_run(&mut self, config: u64, gpus: Gpus, status: FinishStatus, at: Timestamp) {
        let h = self.trials.entry(config).or_default();
        match status {
            FinishStatus::Succeeded => h.record_success(gpus, at),
            FinishStatus::Failed => h.last_failure = Some(at),
            FinishStatus::Cancelled => {}
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn ledger_buckets_stay_sorted_and_sum_by_period() {
        let mut l = Ledger::default();
        let d0 = Timestamp::parse("2026-11-02T09:00:00Z").unwrap().day();
        l.bucket(d0 + 2).reserved += 1.0;
        l.bucket(d0).reserved += 2.0;
        l.bucket(d0 + 1).used += 4.0;
        l.bucket(d0 - 10).used += 8.0; // 2026-10-23: previous month
        let days: Vec<i64> = l.days.iter().map(|d| d.day).collect();
        assert_eq!(days, vec![d0 - 10, d0, d0 + 1, d0 + 2]);
        let m = l.usage(Period::Month, d0);
        assert_eq!(m.by_runtime(), 7.0);
        assert_eq!(l.usage(Period::Day, d0).by_runtime(), 2.0);
    }

    fn spec(id: &str, project: &str, gpus: u32) -> JobSpec {
        JobSpec {
            id: id.into(),
            project: project.into(),
            user: "ada".into(),
            gpus: gpus.into(),
            requested_hours: 1.0,
            tags: vec![("team".into(), "x".into())],
            ..JobSpec::default()
        }
    }

    fn held(st: &State, kind: ScopeKind, name: &str) -> u32 {
        st.ledger(kind, name).map_or(0, |l| l.held_gpus.floor())
    }

    #[test]
    fn a_profile_finds_its_ledgers_in_states_that_numbered_them_differently() {
        // Two states share a profile (a clone shares its interned names and profiles) but open their
        // ledgers in another order: the position a profile remembers from one is wrong in the other.
        let now = Timestamp::parse("2026-11-02T09:00:00Z").unwrap();
        let mut base = State::default();
        let mut x = base.record_from_spec(&spec("j1", "x", 1), now);
        let (mut a, mut b) = (base.clone(), base.clone());
        let mut y = a.record_from_spec(&spec("j2", "y", 2), now);
        a.reserve(&mut y);
        a.reserve(&mut x.clone());
        b.reserve(&mut x);
        a.reserve(&mut x.clone());
        b.reserve(&mut x.clone());
        assert_eq!((held(&a, ScopeKind::Project, "x"), held(&a, ScopeKind::Project, "y")), (2, 2));
        assert_eq!((held(&b, ScopeKind::Project, "x"), held(&b, ScopeKind::Project, "y")), (2, 0));
        assert_eq!((held(&a, ScopeKind::User, "ada"), held(&b, ScopeKind::User, "ada")), (4, 2));
        assert_eq!((held(&a, ScopeKind::Tag, "team=x"), held(&b, ScopeKind::Tag, "team=x")), (4, 2));
        // A user and a project of the same name are two ledgers.
        let mut same = b.record_from_spec(&JobSpec { user: "x".into(), ..spec("j3", "x", 4) }, now);
        b.reserve(&mut same);
        assert_eq!((held(&b, ScopeKind::Project, "x"), held(&b, ScopeKind::User, "x")), (6, 4));
        assert!(base.ledgers.is_empty(), "the clones' ledgers are their own");
    }

    #[test]
    fn ledgers_serialize_as_maps_by_name_and_are_found_after_a_restore() {
        let now = Timestamp::parse("2026-11-02T09:00:00Z").unwrap();
        let mut st = State::default();
        for (i, p) in ["x", "y", "x"].into_iter().enumerate() {
            let mut r = st.record_from_spec(&spec(&format!("j{i}"), p, 1), now);
            st.reserve(&mut r);
            st.jobs.insert(Arc::from(format!("j{i}").as_str()), r);
        }
        let json = serde_json::to_value(&st.ledgers).unwrap();
        assert_eq!(json["project"]["x"]["held_gpus"], 2);
        assert_eq!(json["project"]["y"]["held_gpus"], 1);
        assert_eq!(json["user"]["ada"]["held_gpus"], 3);
        assert_eq!(json["tag"]["team=x"]["held_gpus"], 3);
        let mut back: State = serde_json::from_str(&serde_json::to_string(&st).unwrap()).unwrap();
        back.reintern();
        assert_eq!(serde_json::to_value(&back.ledgers).unwrap(), json);
        // After the restore the ledgers' names are the profiles' own: found by position.
        let job = back.jobs.get("j0").unwrap().clone();
        let slot = job.profile.project_slot.get();
        back.release(&mut job.clone(), now, JobPhase::Finished);
        assert_eq!(held(&back, ScopeKind::Project, "x"), 1);
        assert!(Sym::ptr_eq(&back.ledgers.project.names[job.profile.project_slot.get()], &job.profile.project));
        assert_eq!(back.ledgers.project.names.len(), 2, "no ledger opened twice (slot was {slot})");
    }

    #[test]
    fn measured_throughput_keeps_mean_spread_and_a_bounded_number_of_entries() {
        let mut h = TrialHistory::default();
        let (a100, tokens) = (Sym::new("A100"), Sym::new("tokens"));
        // Runs of 900, 1000, 1100 tokens/s per GPU: mean 1000, sample stddev 100.
        for (i, v) in [900.0, 1000.0, 1100.0].into_iter().enumerate() {
            h.record_throughput(&a100, Gpus::from(1), tokens.clone(), v, Timestamp(i as i64));
        }
        let m = h.measured("A100", Gpus::from(1), "tokens").unwrap();
        assert_eq!((m.runs, m.mean, m.min, m.max, m.last), (3, 1000.0, 900.0, 1100.0, Timestamp(2)));
        assert!((m.stddev() - 100.0).abs() < 1e-9);
        // Entries per configuration are bounded: the least recently measured goes first.
        for g in 2..40u32 {
            h.record_throughput(&a100, Gpus::from(g), tokens.clone(), 1.0, Timestamp(i64::from(g) * 10));
        }
        assert_eq!(h.throughput.len(), MEASURED_PER_CONFIG);
        assert!(h.measured("A100", Gpus::from(1), "tokens").is_none());
        assert!(h.measured("A100", Gpus::from(39), "tokens").is_some());
    }

    /// A record as every snapshot so far has stored it (written by the build before profiles): it
    /// loads, and writes back byte for byte.
    pub(crate) const STORED_RECORD: &str = r#"{"project":"nlp","user":"ada","queue":"short","stage":null,"gpu_type":"A100","tags":[{"key":"team","value":"x","ledger":"team=x"}],"gpus":4,"nodes":1,"requested_hours":2.0,"submitted":1793577600000,"usage_day":20759,"reserved":8.0,"unbilled":0.0,"started":null,"ended":null,"defer_until":null,"pending":null,"util":{"last_sample":null,"gpu_util":0.0,"mem_util":0.0,"avg_gpu_util":0.0,"samples":0,"keepalive":null},"config":11347699277146412874,"marks":null,"status":null,"phase":"admitted","deferrable":false,"configured":true}"#;

    #[test]
    fn a_stored_job_record_loads_and_writes_back_unchanged() {
        let r: JobRecord = serde_json::from_str(STORED_RECORD).unwrap();
        assert_eq!(
            (r.project(), r.user(), r.queue(), r.stage(), r.gpu_type()),
            ("nlp", "ada", Some("short"), None, Some("A100"))
        );
        assert_eq!(r.tag("team"), Some("x"));
        assert_eq!(&*r.tags()[0].ledger, "team=x");
        assert_eq!((r.gpus(), r.reserved(), r.has_config()), (Gpus::whole(4), 8.0, true));
        assert_eq!(serde_json::to_string(&r).unwrap(), STORED_RECORD);
    }

    #[test]
    fn the_rare_part_is_stored_in_place_and_freed_when_empty() {
        let stored = STORED_RECORD
            .replace(
                r#""defer_until":null,"pending":null"#,
                r#""defer_until":1793581200000,"pending":{"approvers":["lead"],"expires":1793664000000,"policies":["big-jobs"],"reason":"large"}"#,
            )
            .replace(r#""marks":null"#, r#""marks":[{"key":7,"value":-3}]"#);
        let mut r: JobRecord = serde_json::from_str(&stored).unwrap();
        assert_eq!(r.defer_until(), Some(Timestamp(1_793_581_200_000)));
        assert_eq!(r.pending().map(|p| (&*p.approvers[0], p.expires)), Some(("lead", Timestamp(1_793_664_000_000))));
        assert_eq!(r.mark(7), Some(-3));
        assert_eq!(serde_json::to_string(&r).unwrap(), stored, "writes back as it was stored");

        assert_eq!(r.take_pending().map(|p| p.reason), Some("large".into()));
        r.set_defer_until(None);
        assert!(r.rare.is_some(), "a mark is left");
        r.set_mark(7, None);
        assert!(r.rare.is_none(), "nothing rare left: freed");
        assert_eq!(serde_json::to_string(&r).unwrap(), STORED_RECORD);
        r.set_mark(8, None);
        assert!(r.rare.is_none(), "removing an absent mark allocates nothing");
    }

    #[test]
    fn several_regions_reads_the_first_and_last_rows() {
        let row = |region: &str, gpu_type: &str| bursar_model::CapacityRow {
            region: region.into(),
            gpu_type: gpu_type.into(),
            queue: String::new(),
            in_service: bursar_model::Gpus::whole(8),
            allocated: bursar_model::Gpus::ZERO,
            free: bursar_model::Gpus::whole(8),
            drained: bursar_model::Gpus::ZERO,
            backfill: None,
        };
        let inv = |capacity| bursar_model::Inventory { id: "i".into(), time: Timestamp(0), source: None, capacity };
        let mut state = State::default();
        assert!(!state.several_regions(), "no inventory");
        state.take_inventory(&inv(vec![row("cn-north", "H100"), row("cn-north", "A100"), row("cn-north", "L4")]));
        assert!(!state.several_regions(), "one region, three types");
        state.take_inventory(&inv(vec![row("cn-east", "H100")]));
        assert!(state.several_regions(), "two regions");
    }

    #[test]
    fn reinterning_shares_the_profiles_of_loaded_jobs() {
        let mut state = State::default();
        for id in ["a", "b"] {
            state.jobs.insert(Arc::from(id), serde_json::from_str(STORED_RECORD).unwrap());
        }
        let profile = |id| &state.jobs.get(id).unwrap().profile;
        let [a, b] = [profile("a"), profile("b")];
        assert!(!Arc::ptr_eq(a, b), "loaded apart");
        state.reintern();
        let profile = |id| &state.jobs.get(id).unwrap().profile;
        let [a, b] = [profile("a"), profile("b")];
        assert!(Arc::ptr_eq(a, b), "shared once re-interned");
        assert_eq!(state.profiles.len(), 1);
        assert_eq!(**a, *serde_json::from_str::<JobRecord>(STORED_RECORD).unwrap().profile);
    }

    #[test]
    fn a_job_record_stays_small() {
        // Most of the memory per tracked job; docs/performance.md explains the budget.
        assert_eq!(size_of::<JobRecord>(), 120);
        assert_eq!(size_of::<OptTime>(), 8);
    }

    #[test]
    fn an_optional_time_round_trips_as_an_option() {
        let t = Timestamp(1_793_577_600_000);
        for v in [None, Some(t), Some(Timestamp(0)), Some(Timestamp(-5))] {
            let o = OptTime::from(v);
            assert_eq!(o.get(), v);
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, serde_json::to_string(&v).unwrap());
            assert_eq!(serde_json::from_str::<OptTime>(&json).unwrap(), o);
        }
    }
}
