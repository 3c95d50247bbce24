//! The vocabulary of bursar: events in, decisions out, and the event time that drives every window.
//!
//! This crate defines wire format v1 (see `docs/wire-format.md`): [`Event`] and its decoder
//! [`decode_event`], [`Decision`] and its canonical JSON line, and [`Timestamp`], [`Duration`] and
//! [`Period`] for calendar arithmetic. It performs no I/O and depends on neither the policy language, the
//! WebAssembly host nor SQLite, so every other crate (engine, audit log, server, importers) can share it.
//!
//! Layout:
//! - [`time`]: RFC 3339 instants, durations, quota periods.
//! - [`bill`]: what a `billing.charge` says about its bill line (v1.x), as `bursar import bill` writes it.
//! - [`event`]: the ten v1 event types and the hand-written, single-pass decoder.
//! - [`gpus`]: GPU counts exact to a MIG slice, and a MIG profile's share of a GPU.
//! - [`input`]: [`Input`], everything that reaches the engine: events, `serve`'s wall tick, action records.
//! - [`decision`]: decision kinds and the decision line.
//! - [`throughput`]: what a sample's `throughput`, `progress` and `unit` mean, and the rate of a run.
//! - [`names`]: bounds on the ids, names and texts an input carries (length, printable characters).
//! - [`sender`]: who sent an input to `serve` and how they proved it, as the journal keeps it.
//! - [`api`]: the bodies of `bursar serve`'s HTTP API and socket, shared by the server and its clients.

pub mod api;
pub mod bill;
pub mod decision;
pub mod event;
pub mod gpus;
pub mod input;
pub mod names;
pub mod sender;
pub mod throughput;
pub mod time;

pub use bill::{Attribution, BillLine, ChargeCategory, UseStatus};
pub use decision::{Decision, DecisionKind, Hints};
pub use event::{
    ArraySpec, Asset, BillingCharge, BillingMode, DecodeError, EVENT_TYPES, Event, EventKind, Extra, FinishStatus,
    JobSpec, RawJson, Ready, Sample, StartInfo, decode_event, decode_input, limits,
};
pub use gpus::{Gpus, GpusError, mig_share};
pub use input::{
    Action, ActionOutcome, CapacityRow, INVENTORY_TYPE, Input, Inventory, LEDGER_TYPE, LedgerChange, LedgerOp,
    RUN_TYPE, RunFact, WALL_TICK_PREFIX, WALL_TICK_TYPE, WallTick,
};
pub use names::NameError;
pub use sender::Sender;
pub use throughput::{RunRate, Work};
pub use time::{Duration, Period, TimeError, TimeText, Timestamp, counted, push_int};
