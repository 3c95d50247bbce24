//! The vocabulary of bursar: events in, decisions out, and the event time that drives every window.
//!
//! This crate defines wire format v1 (see `docs/wire-format.md`): [`Event`] and its decoder
//! [`decode_event`], [`Decision`] and its canonical JSON line, and [`Timestamp`], [`Duration`] and
//! [`Period`] for calendar arithmetic. It performs no I/O and depends on neither the policy language, the
//! WebAssembly host nor SQLite, so every other crate (engine, audit log, server, importers) can share it.
//!
//! Layout:
//! - [`time`]: RFC 3339 instants, durations, quota periods.
//! - [`event`]: the ten v1 event types and the hand-written, single-pass decoder.
//! - [`decision`]: decision kinds and the decision line.

pub mod decision;
pub mod event;
pub mod time;

pub use decision::{Decision, DecisionKind, Hints};
pub use event::{
    Asset, BillingCharge, BillingMode, DecodeError, EVENT_TYPES, Event, EventKind, FinishStatus, JobSpec, RawJson,
    Ready, decode_event,
};
pub use time::{Duration, Period, TimeError, Timestamp, push_int};
