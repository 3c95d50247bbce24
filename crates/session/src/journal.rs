//! The journal: where every applied input and its decisions go, once, whatever the entry point.
//!
//! One trait ([`Journal`]) and one entry type ([`Entry`]). The session hands each applied input to the
//! journal with its decisions and the job steps the engine took ([`bursar_engine::Transition`]);
//! [`Journal::flush`] returns once everything handed over is durable, with a [`Receipt`] per entry
//! (its decisions numbered by their position in the decision stream) for journals that number them.
//!
//! Implementations: the audit log (`bursar-audit`: SQLite, group commit on its own thread, used by
//! `eval --audit` and `serve`), the plain decision printer of `eval` without `--audit` (in the CLI),
//! and here [`Memory`] (tests, `bursar test`, `replay`) and [`Discard`] (restart recovery, which
//! re-applies what the journal already holds).

use std::sync::Arc;

use bursar_engine::{PolicySet, Transition};
use bursar_model::api::Sequenced;
use bursar_model::{Decision, Input, Sender};

/// One applied input, as the journal receives it.
#[derive(Debug)]
pub struct Entry<'a> {
    /// The input.
    pub input: &'a Input,
    /// Its line as received (for a wall tick, its canonical line).
    pub raw: &'a str,
    /// Who sent it, when a server authenticated it.
    pub sender: Option<&'a Sender>,
    /// The decisions it produced, in order. A journal that keeps them may take them
    /// (`std::mem::take`) rather than copy them.
    pub decisions: &'a mut Vec<Decision>,
    /// The job steps it caused, in order.
    pub steps: &'a [Transition],
    /// Digest of the policy set that decided.
    pub policy_set: &'a Arc<str>,
}

/// An input that was refused when applied ([`crate::Applied::Refused`]): kept in the journal so
/// the refusal is on record, though the input changed nothing.
#[derive(Debug, Clone, Copy)]
pub struct Refusal<'a> {
    /// The input.
    pub input: &'a Input,
    /// Its line as received.
    pub raw: &'a str,
    /// Who sent it.
    pub sender: Option<&'a Sender>,
    /// Why it was refused.
    pub reason: &'a str,
}

/// What became of one entry once durable.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Receipt {
    /// Sequence number the journal gave the input (None when it keeps no numbers).
    pub input_seq: Option<u64>,
    /// The journal already held an input with this id: nothing was written again.
    pub duplicate: bool,
    /// The decisions, with their positions in the decision stream.
    pub decisions: Vec<Sequenced>,
}

/// Why a journal could not take or keep an entry.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Writing the output failed (a closed stdout, say).
    #[error("{0}")]
    Output(#[from] std::io::Error),
    /// The store refused (disk full, unwritable file, a database that is not one); already phrased.
    #[error("{0}")]
    Store(String),
}

impl JournalError {
    /// True for a closed output pipe (`bursar eval … | head`), which is not worth reporting.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, JournalError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// Where applied inputs and their decisions go.
pub trait Journal {
    /// Takes one applied input. The journal may hold it until [`Journal::flush`].
    fn append(&mut self, entry: Entry<'_>) -> Result<(), JournalError>;

    /// Records that `set` is now in force (at start and on every reload).
    fn policy_set(&mut self, set: &PolicySet) -> Result<(), JournalError> {
        let _ = set;
        Ok(())
    }

    /// Records an input that was refused when applied; it reaches nothing else. A journal that keeps
    /// no record of refusals ignores it (the default).
    fn refused(&mut self, refusal: Refusal<'_>) -> Result<(), JournalError> {
        let _ = refusal;
        Ok(())
    }

    /// Records a reload that failed while the set with digest `in_force` stays in force.
    fn reload_failed(&mut self, error: &str, in_force: &str) -> Result<(), JournalError> {
        let _ = (error, in_force);
        Ok(())
    }

    /// Returns once everything taken so far is durable (and handed on), with one receipt per entry
    /// taken since the last flush, in order (or none, for a journal that does not number entries).
    fn flush(&mut self) -> Result<Vec<Receipt>, JournalError>;

    /// Like [`Journal::flush`], but without waiting: `done` is called with the receipts once
    /// everything taken so far is durable, and the caller may go on appending meanwhile (`serve`
    /// applies its next batch while the previous one commits). Callbacks run in the order of their
    /// calls. If the journal fails before the commit, `done` is dropped uncalled: whoever waits on it
    /// sees the sender gone, never an answer about something that is not durable.
    ///
    /// The default flushes and calls `done` at once.
    fn flush_then(&mut self, done: FlushDone) -> Result<(), JournalError> {
        let receipts = self.flush()?;
        done(receipts);
        Ok(())
    }
}

/// What [`Journal::flush_then`] calls once the entries it covers are durable.
pub type FlushDone = Box<dyn FnOnce(Vec<Receipt>) + Send>;

/// Keeps nothing: for re-applying inputs that are already journaled (restart recovery).
#[derive(Debug, Default, Clone, Copy)]
pub struct Discard;

impl Journal for Discard {
    fn append(&mut self, _entry: Entry<'_>) -> Result<(), JournalError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Receipt>, JournalError> {
        Ok(Vec::new())
    }
}

/// Keeps every entry's decisions in memory, numbered from 1 like a fresh audit log would number them:
/// for tests, `bursar test` and `bursar replay`.
#[derive(Debug, Default, Clone)]
pub struct Memory {
    /// Every decision taken, in order.
    pub decisions: Vec<Decision>,
    /// Entries taken, per input id, with how many decisions each had: `(id, first index, count)`.
    pub entries: Vec<(String, usize, usize)>,
    unflushed: usize,
    inputs: u64,
    /// Decisions forgotten by [`Memory::clear`], so numbering goes on.
    forgotten: u64,
    /// Refused inputs: `(id, reason)`.
    pub refused: Vec<(String, String)>,
    /// The sender of each entry taken, in order (`None` for inputs without one).
    pub senders: Vec<Option<Sender>>,
}

impl Memory {
    /// The decisions of the last entry taken.
    pub fn last(&self) -> &[Decision] {
        match self.entries.last() {
            Some(&(_, first, n)) => &self.decisions[first..first + n],
            None => &[],
        }
    }

    /// Forgets everything kept (the numbering goes on).
    pub fn clear(&mut self) {
        self.forgotten += self.decisions.len() as u64;
        self.decisions.clear();
        self.entries.clear();
        self.senders.clear();
        self.unflushed = 0;
    }
}

impl Journal for Memory {
    fn append(&mut self, entry: Entry<'_>) -> Result<(), JournalError> {
        let first = self.decisions.len();
        self.decisions.append(entry.decisions);
        self.entries.push((entry.input.id().into_owned(), first, self.decisions.len() - first));
        self.senders.push(entry.sender.cloned());
        self.unflushed += 1;
        Ok(())
    }

    fn refused(&mut self, refusal: Refusal<'_>) -> Result<(), JournalError> {
        self.refused.push((refusal.input.id().into_owned(), refusal.reason.to_owned()));
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Receipt>, JournalError> {
        let from = self.entries.len() - self.unflushed.min(self.entries.len());
        self.unflushed = 0;
        let mut receipts = Vec::new();
        for &(_, first, n) in &self.entries[from..] {
            self.inputs += 1;
            receipts.push(Receipt {
                input_seq: Some(self.inputs),
                duplicate: false,
                decisions: self.decisions[first..first + n]
                    .iter()
                    .enumerate()
                    .map(|(i, d)| Sequenced { seq: self.forgotten + (first + i + 1) as u64, decision: d.clone() })
                    .collect(),
            });
        }
        Ok(receipts)
    }
}
