//! The one road around the engine: every input reaches [`bursar_engine::Engine`] through a
//! [`Session`], and every applied input leaves through a [`Journal`].
//!
//! ```text
//!  file / stdin (eval, replay, test)   HTTP body, socket (serve)   audit log (recovery, replay --audit)
//!            └─────────────────────────────────┬──────────────────────────────────┘
//!   frame (bounded, true line numbers) → decode (wire v1 → Input) → origin rules (reserved ids, types)
//!            → Engine::apply (dedupe, ticks, policies) → Journal::append → Journal::flush → receipts
//! ```
//!
//! Before this crate, each entry point framed, decoded and handed off on its own, and the copies
//! disagreed (a non-UTF-8 line swallowed the next one in `eval`; serve's ticks were replayed as
//! producers' ticks by `replay`). Now `bursar eval`, `bursar replay`, `bursar test`, `bursar serve`'s
//! HTTP and socket handlers and its restart recovery all drive a session, and none of them loops over
//! lines itself.
//!
//! Exports:
//! - [`Framer`], [`Frame`] ([`frame`]): bytes to numbered lines, with the line-length limit enforced
//!   while reading.
//! - [`decode`], [`Origin`] ([`decode`](mod@decode)): what each origin may send, and old journals read right.
//! - [`Session`], [`Applied`], [`LineOutcome`], [`Counts`] ([`session`]): apply, journal, count.
//! - [`Journal`], [`Entry`], [`Receipt`], [`Memory`], [`Discard`] ([`journal`]): the one trait and the
//!   one entry type every journal implements (the audit log implements it in `bursar-audit`).
//!
//! Boundaries: no I/O of its own beyond reading the `Read` it is given, no SQL, no HTTP, no policy
//! semantics. It depends on `bursar-model` and `bursar-engine` only.

pub mod decode;
pub mod frame;
pub mod journal;
pub mod session;

pub use decode::{Decoded, Incoming, Line, NAMESPACE_SEPARATOR, Origin, decode, decode_body, namespaced};
pub use frame::{Frame, Framer, ReadError, read_frames};
pub use journal::{Discard, Entry, FlushDone, Journal, JournalError, Memory, Receipt, Refusal};
pub use session::{Applied, ClockBound, Counts, LineOutcome, Refused, RefusedBy, Session, SessionError};

/// The longest line `eval` and `replay` accept from a file or stdin by default (64 MiB): far above any
/// real event, low enough that one line without a newline cannot exhaust memory. `serve` bounds a
/// line by its `--max-body` (8 MiB by default) instead.
pub const DEFAULT_MAX_LINE: usize = 64 * 1024 * 1024;
