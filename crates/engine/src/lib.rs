//! bursar's evaluation engine: the single writer that turns a stream of events into decisions.
//!
//! It owns all mutable state (jobs, usage ledgers, pending approvals, assets, trial history, timers) and
//! applies events strictly in order, so replaying a file gives the same decisions as the live run did.
//! Policies are trait objects ([`Policy`]) that read the state and return verdicts; the TOML language
//! (`bursar-lang`) and the WebAssembly host (`bursar-wasm`) both implement the trait, and the engine
//! combines their verdicts the same way: any deny wins, then require-approval, then defer, else allow.
//!
//! Boundaries: no I/O, no parsing of policy files, no SQLite. Persistence is a [`Snapshot`] that the
//! caller stores; the audit log is fed from the decisions this crate returns.
//!
//! Exports (the public face; everything else is an implementation detail):
//! - [`Engine`]: [`Engine::apply`] is the one way in (an [`bursar_model::Input`]: a producer's event,
//!   serve's wall tick, an action record); it appends decisions and records the job [`Transition`]s it
//!   took. [`Engine::snapshot`] / [`Engine::restore`] persist it; [`Engine::state`] reads it.
//! - [`State`] and [`JobRecord`], behind read methods only (a policy or a view reads; only the engine
//!   writes), with [`Ledger`], [`Usage`], [`ScopeKind`], [`JobPhase`].
//! - [`Policy`], [`PolicyMeta`], [`Verdict`], [`Effect`], [`Selector`], [`Context`]: what a policy
//!   family implements (`bursar-lang`, `bursar-wasm`).
//! - [`PolicySet`]: the immutable set swapped whole on reload; [`PolicySet::limits`] describes what
//!   it limits ([`PoolLimits`], [`QuotaLimit`]), for the report and the pool page.
//!
//! Layout:
//! - [`policy`]: the [`Policy`] trait, [`Verdict`]s, [`Effect`]s, [`Selector`].
//! - [`set`]: [`PolicySet`], the immutable set swapped whole on reload.
//! - [`state`]: jobs, ledgers and what policies may ask of them.
//! - [`approval`]: who may answer a held job's approval, policy by policy, and when it is admitted.
//! - [`runs`]: a job's runs as the scheduler reports them: allocations, requeues, reruns, array
//!   tasks, admissions the scheduler never confirms.
//! - [`engine`]: [`Engine::apply`], timer firing, decision combination, lifecycle steps.
//! - [`shared`]: the user and tag ledgers of a partitioned deployment, kept by one partition and
//!   consulted by the others ([`LedgerClient`]).
//! - `timers`, `dedupe`, `intern`, `profile`, `jobs`: supporting structures, public only because a [`Snapshot`] holds
//!   them (hidden from the documentation; not an API).

pub mod approval;
#[doc(hidden)]
pub mod dedupe;
pub mod engine;
#[doc(hidden)]
pub mod intern;
#[doc(hidden)]
pub mod jobs;
pub mod policy;
#[doc(hidden)]
pub mod profile;
pub mod runs;
pub mod set;
pub mod shared;
pub mod state;
#[doc(hidden)]
pub mod timers;

pub use engine::{
    Coverage, ENGINE_POLICY, Engine, EngineConfig, Outcome, RecordedRun, STALE_AFTER, STALE_POLICY, Snapshot, Stats,
    Step, Transition,
};
pub use intern::Sym;
pub use policy::{
    Context, Deadline, Effect, EventMask, Later, Limits, Mode, Output, Policy, PolicyMeta, QuotaLimit, QuotaScope,
    Reason, Selector, Settle, TimerContext, Verdict, VerdictKind,
};
pub use set::{Guest, PolicyLimits, PolicySet, PoolLimits, SetError, SourceFile, TagFrom, TagSource};
pub use shared::{LedgerAnswer, LedgerClient};
pub use state::{
    ArrayState, InventoryRow, JobFacts, JobPhase, JobRecord, Ledger, RECENT_RUNS, RunNotes, RunSample, ScopeKind,
    State, Usage, mark_key,
};
