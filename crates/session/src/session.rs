//! [`Session`]: an engine, a journal and the rules of one origin, driven by lines or inputs.
//!
//! Every entry point owns one: `eval` and `replay` over a file or stdin, `test` per case, `serve`'s
//! engine thread (fed by HTTP bodies, socket lines and its ticker) and serve's recovery. The session
//! decodes each framed line under its origin's rules, applies it to the engine, hands what was applied
//! to the journal, and keeps the counts an entry point reports. It also owns the handling of `serve`'s
//! wall ticks: a tick that fired nothing is journaled lazily, just before the next input (it moved the
//! clock, so replay must see it, but a second-by-second log of nothing is not worth a row each).

use std::io::Read;
use std::sync::Arc;

use bursar_engine::{Engine, Outcome, PolicySet};
use bursar_model::api::Rejected;
use bursar_model::{Decision, Input, Timestamp, WallTick};

use crate::decode::{self, Line, Origin};
use crate::frame::{Frame, ReadError};
use crate::journal::{Entry, Journal, JournalError, Receipt};

/// What the session counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Lines read, blank lines excluded.
    pub lines: u64,
    /// Lines (or inputs) applied.
    pub applied: u64,
    /// Inputs whose id was seen before.
    pub duplicates: u64,
    /// Lines that were not inputs the origin may send.
    pub rejected: u64,
}

/// What happened to one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied; its entry is the `entry`-th handed to the journal since the last flush (the index of
    /// its receipt), and it made `decisions` decisions.
    Applied {
        /// Index of its receipt in the next [`Session::flush`].
        entry: usize,
        /// How many decisions it made.
        decisions: usize,
    },
    /// Its id was seen before; nothing changed and nothing was journaled.
    Duplicate,
}

/// What happened to one line.
#[derive(Debug, Clone, PartialEq)]
pub enum LineOutcome {
    /// A blank line.
    Blank,
    /// Rejected, with the reason.
    Rejected(Rejected),
    /// Decoded and applied (or a duplicate).
    Input {
        /// 1-based line number.
        line: u64,
        /// The input's id.
        id: String,
        /// What happened.
        applied: Applied,
    },
}

/// Reading a stream failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The source could not be read.
    #[error("{0}")]
    Read(std::io::Error),
    /// The journal refused.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// An engine, a journal and an origin.
#[derive(Debug)]
pub struct Session<J> {
    engine: Engine,
    journal: J,
    origin: Origin,
    digest: Arc<str>,
    decisions: Vec<Decision>,
    pending_tick: Option<WallTick>,
    unflushed: usize,
    counts: Counts,
}

impl<J: Journal> Session<J> {
    /// A session over `engine` that records its policy set in the journal first (`eval`, `serve`: a
    /// log says which set decided from its first row).
    pub fn open(engine: Engine, mut journal: J, origin: Origin) -> Result<Session<J>, JournalError> {
        journal.policy_set(engine.policies())?;
        Ok(Session::new(engine, journal, origin))
    }

    /// A session over `engine` that records nothing up front (recovery, replay, tests).
    pub fn new(engine: Engine, journal: J, origin: Origin) -> Session<J> {
        let digest = Arc::from(engine.policies().digest());
        Session {
            engine,
            journal,
            origin,
            digest,
            decisions: Vec::new(),
            pending_tick: None,
            unflushed: 0,
            counts: Counts::default(),
        }
    }

    /// The engine (read-only: only the session applies inputs).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, for what is not an input: coverage recording in `bursar test`.
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The journal.
    pub fn journal(&self) -> &J {
        &self.journal
    }

    /// The journal, for its own operations (a snapshot in serve's audit log, say).
    pub fn journal_mut(&mut self) -> &mut J {
        &mut self.journal
    }

    /// What was counted so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// The origin whose rules apply.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Takes the engine and the journal back.
    pub fn into_parts(self) -> (Engine, J) {
        (self.engine, self.journal)
    }

    fn journal_entry(&mut self, input: &Input, raw: &str) -> Result<usize, JournalError> {
        let n = self.decisions.len();
        self.journal.append(Entry {
            input,
            raw,
            decisions: &mut self.decisions,
            steps: self.engine.transitions(),
            policy_set: &self.digest,
        })?;
        self.decisions.clear();
        self.unflushed += 1;
        Ok(n)
    }

    fn flush_tick(&mut self) -> Result<(), JournalError> {
        if let Some(tick) = self.pending_tick.take() {
            let input = Input::WallTick(tick);
            let raw = input.to_json();
            // The tick was applied when it came; only its journal entry was put off.
            self.decisions.clear();
            self.journal.append(Entry {
                input: &input,
                raw: &raw,
                decisions: &mut self.decisions,
                steps: &[],
                policy_set: &self.digest,
            })?;
            self.unflushed += 1;
        }
        Ok(())
    }

    /// Applies one decoded input (already admitted under the origin's rules) and journals it. `raw`
    /// is its line as received.
    pub fn apply(&mut self, input: &Input, raw: &str) -> Result<Applied, JournalError> {
        self.flush_tick()?;
        self.decisions.clear();
        if self.engine.apply(input, Some(raw), &mut self.decisions) == Outcome::Duplicate {
            self.counts.duplicates += 1;
            return Ok(Applied::Duplicate);
        }
        self.counts.applied += 1;
        let entry = self.unflushed;
        let decisions = self.journal_entry(input, raw)?;
        Ok(Applied::Applied { entry, decisions })
    }

    /// `serve`'s wall clock at `now`: fires the timers due. A tick that fired nothing is journaled
    /// only before the next input; returns the decisions it made (0 for such a tick).
    pub fn wall_tick(&mut self, now: Timestamp) -> Result<Applied, JournalError> {
        let tick = WallTick { time: now };
        let input = Input::WallTick(tick);
        let fired = self.engine.stats().timers_fired;
        self.decisions.clear();
        self.engine.apply(&input, None, &mut self.decisions);
        if self.decisions.is_empty() && self.engine.stats().timers_fired == fired {
            self.pending_tick = Some(tick);
            return Ok(Applied::Applied { entry: usize::MAX, decisions: 0 });
        }
        self.pending_tick = None;
        let raw = input.to_json();
        let entry = self.unflushed;
        let decisions = self.journal_entry(&input, &raw)?;
        Ok(Applied::Applied { entry, decisions })
    }

    /// Decodes one framed line under the origin's rules and applies it.
    pub fn line(&mut self, frame: Frame<'_>) -> Result<LineOutcome, JournalError> {
        match decode::decode(frame, self.origin) {
            Line::Blank => Ok(LineOutcome::Blank),
            Line::Rejected(r) => {
                self.counts.lines += 1;
                self.counts.rejected += 1;
                Ok(LineOutcome::Rejected(r))
            }
            Line::Input(d) => {
                self.counts.lines += 1;
                let applied = self.apply(&d.input, d.text)?;
                Ok(LineOutcome::Input { line: d.line, id: d.input.id().into_owned(), applied })
            }
        }
    }

    /// Reads `source` to its end, line by line (a line is at most `max_line` bytes), applying every
    /// input and calling `on_line` with what happened to each non-blank line.
    pub fn read(
        &mut self,
        source: impl Read,
        max_line: usize,
        mut on_line: impl FnMut(&LineOutcome),
    ) -> Result<(), SessionError> {
        crate::frame::read_frames(source, max_line, |frame| {
            match self.line(frame)? {
                LineOutcome::Blank => {}
                outcome => on_line(&outcome),
            }
            Ok::<(), JournalError>(())
        })
        .map_err(|e| match e {
            ReadError::Read(io) => SessionError::Read(io),
            ReadError::Stopped(j) => SessionError::Journal(j),
        })
    }

    /// Swaps in a new policy set (state, timers and pending approvals are kept) and journals the load.
    pub fn set_policies(&mut self, set: Arc<PolicySet>) -> Result<(), JournalError> {
        self.flush_tick()?;
        self.journal.policy_set(&set)?;
        self.digest = Arc::from(set.digest());
        self.engine.set_policies(set);
        Ok(())
    }

    /// Journals a reload that failed; the set in force stays.
    pub fn reload_failed(&mut self, error: &str) -> Result<(), JournalError> {
        let digest = self.digest.clone();
        self.journal.reload_failed(error, &digest)
    }

    /// Returns once everything journaled is durable, with a receipt per entry since the last flush.
    pub fn flush(&mut self) -> Result<Vec<Receipt>, JournalError> {
        self.unflushed = 0;
        self.journal.flush()
    }

    /// Calls `done` with a receipt per entry since the last flush once they are durable, without
    /// waiting for it ([`Journal::flush_then`]).
    pub fn flush_then(&mut self, done: crate::FlushDone) -> Result<(), JournalError> {
        self.unflushed = 0;
        self.journal.flush_then(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Memory;
    use bursar_model::{DecisionKind, decode_input};

    fn session() -> Session<Memory> {
        Session::new(Engine::new(Arc::new(PolicySet::default())), Memory::default(), Origin::Producer)
    }

    const SUBMIT: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","gpus":8,"requested_hours":4}}"#;

    #[test]
    fn a_stream_is_applied_line_by_line_and_every_bad_line_reported_by_its_number() {
        let mut s = session();
        let text = format!(
            "{SUBMIT}\n\u{ff}\n\n{{\"id\":\"e2\"}}\n{SUBMIT}\r\n{{\"id\":\"e3\",\"time\":\"2026-11-02T10:00:00Z\",\"type\":\"job.started\",\"job_id\":\"j1\"}}"
        );
        let mut bytes = text.into_bytes();
        // A non-UTF-8 byte on line 2 must not swallow line 3 (blank) or line 4.
        let pos = bytes.iter().position(|&b| b == 0xc3).unwrap();
        bytes.splice(pos..pos + 2, [0xff]);
        let mut seen = Vec::new();
        s.read(&bytes[..], 1024, |o| seen.push(o.clone())).unwrap();
        let lines: Vec<u64> = seen
            .iter()
            .map(|o| match o {
                LineOutcome::Rejected(r) => r.line,
                LineOutcome::Input { line, .. } => *line,
                LineOutcome::Blank => 0,
            })
            .collect();
        assert_eq!(lines, [1, 2, 4, 5, 6]);
        assert!(matches!(&seen[1], LineOutcome::Rejected(r) if r.error.contains("UTF-8")));
        assert!(matches!(&seen[3], LineOutcome::Input { applied: Applied::Duplicate, .. }));
        assert_eq!(*s.counts(), Counts { lines: 5, applied: 2, duplicates: 1, rejected: 2 });
        let receipts = s.flush().unwrap();
        assert_eq!(receipts.len(), 2);
        assert_eq!(receipts[0].decisions[0].decision.decision, DecisionKind::Allow);
    }

    #[test]
    fn an_idle_wall_tick_is_journaled_before_the_next_input_only() {
        let mut s = session();
        assert_eq!(
            s.wall_tick(Timestamp(1_793_610_000_000)).unwrap(),
            Applied::Applied { entry: usize::MAX, decisions: 0 }
        );
        assert!(s.journal().entries.is_empty());
        let input = decode_input(SUBMIT).unwrap();
        assert_eq!(s.apply(&input, SUBMIT).unwrap(), Applied::Applied { entry: 1, decisions: 1 });
        let ids: Vec<&str> = s.journal().entries.iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(ids, ["bursar-tick-1793610000000", "e1"]);
    }
}
