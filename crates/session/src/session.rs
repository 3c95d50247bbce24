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
use bursar_model::{Decision, Duration, Input, Sender, Timestamp, WallTick};

use crate::decode::{self, Line, Origin};
use crate::frame::Frame;
use crate::journal::{Entry, Journal, JournalError, Receipt, Refusal};

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
    /// Inputs refused when applied ([`Applied::Refused`]).
    pub refused: u64,
}

/// How far ahead an input may move the event clock: what keeps one event dated `9999-12-31` from
/// expiring every approval, reclaiming every running job and moving every quota to the year 9999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockBound {
    /// No bound (tests, and bursar's own journal, which holds only what was accepted).
    #[default]
    Unbounded,
    /// `serve`: an event dated more than `skew` after the wall clock (read when it is applied) is
    /// refused.
    Wall {
        /// The allowed skew.
        skew: Duration,
    },
    /// `eval`, `replay`: an event dated more than `max` after the event clock (the latest event time
    /// applied so far) is refused; the first event sets the clock freely.
    Jump {
        /// The largest jump.
        max: Duration,
    },
}

/// A long span for people: `about 2,914,000 days`, `about 3 hours`, `12 minutes`.
fn about(d: Duration) -> String {
    let ms = d.millis();
    let (n, unit) = if ms >= 2 * 86_400_000 {
        (ms / 86_400_000, "days")
    } else if ms >= 2 * 3_600_000 {
        (ms / 3_600_000, "hours")
    } else if ms >= 2 * 60_000 {
        (ms / 60_000, "minutes")
    } else {
        return format!("{d}");
    };
    format!("about {n} {unit}")
}

impl ClockBound {
    /// Why an event at `time` is refused, given the event clock `now` (`None` before any event),
    /// or `None` when it is within the bound.
    pub fn refuses(&self, time: Timestamp, now: Option<Timestamp>) -> Option<String> {
        match *self {
            ClockBound::Unbounded => None,
            ClockBound::Wall { skew } => {
                let wall = Timestamp::wall_clock();
                let limit = wall.plus(skew);
                (time > limit).then(|| {
                    format!(
                        "event time {time} is {} ahead of this server's clock ({wall}), more than the {skew} allowed\n  help: check the producer's clock; the bound is `[clock] max_skew` in the configuration",
                        about(time.since(wall))
                    )
                })
            }
            ClockBound::Jump { max } => {
                let now = now?;
                (time > now.plus(max)).then(|| {
                    format!(
                        "event time {time} jumps {} past the event clock ({now}), more than the {max} allowed\n  help: if the stream really has such a gap, pass `--max-clock-jump` with a longer bound, or `--allow-clock-jump`",
                        about(time.since(now))
                    )
                })
            }
        }
    }
}

/// What happened to one input.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Refused: nothing changed, and the refusal (not the input) was journaled.
    Refused(Refused),
}

/// Why an input was refused when applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What refused it.
    pub by: RefusedBy,
    /// The sentence: why, and what bound it broke.
    pub reason: String,
}

/// What refused an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// The [`ClockBound`]: dated too far ahead.
    Clock,
    /// The engine: a second submission of a job it knows.
    Engine,
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

/// Lines decoded per chunk handed from [`Session::read`]'s reading thread to the applying one.
pub const CHUNK_LINES: usize = 1024;

/// Chunks that may wait between the two threads of [`Session::read`].
pub const CHUNKS_IN_FLIGHT: usize = 4;

/// Decoded lines on their way from the reading thread to the applying one: their texts in one buffer.
#[derive(Debug, Default)]
struct Chunk {
    text: String,
    items: Vec<Item>,
}

#[derive(Debug)]
enum Item {
    Rejected(Rejected),
    Input { line: u64, text: std::ops::Range<usize>, input: Input },
}

impl Chunk {
    fn push(&mut self, frame: Frame<'_>, origin: Origin) {
        let item = match decode::decode(frame, origin) {
            // Nothing to count or report.
            Line::Blank => return,
            Line::Rejected(r) => Item::Rejected(r),
            Line::Input(d) => {
                let start = self.text.len();
                self.text.push_str(d.text);
                Item::Input { line: d.line, text: start..self.text.len(), input: d.input }
            }
        };
        self.items.push(item);
    }
}

/// [`Session::read`]'s reading side: frames and decodes `source` into chunks sent on `tx`, one at
/// least per read of the source. Stops early, without error, when the applying side hangs up.
fn read_chunks(
    mut source: impl Read,
    max_line: usize,
    origin: Origin,
    tx: &std::sync::mpsc::SyncSender<Chunk>,
) -> std::io::Result<()> {
    let mut framer = crate::frame::Framer::new(max_line);
    let mut buf = vec![0u8; 256 * 1024];
    let mut chunk = Chunk::default();
    let mut hung_up = false;
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // What was read before the failure is still applied.
                if !chunk.items.is_empty() {
                    let _ = tx.send(chunk);
                }
                return Err(e);
            }
        };
        framer.push(&buf[..n], |frame| {
            chunk.push(frame, origin);
            if chunk.items.len() >= CHUNK_LINES && !hung_up {
                hung_up = tx.send(std::mem::take(&mut chunk)).is_err();
            }
        });
        if hung_up {
            return Ok(());
        }
        // Whatever this read completed goes now: a live source may not send more for a while.
        if !chunk.items.is_empty() && tx.send(std::mem::take(&mut chunk)).is_err() {
            return Ok(());
        }
    }
    framer.finish(|frame| chunk.push(frame, origin));
    if !chunk.items.is_empty() {
        let _ = tx.send(chunk);
    }
    Ok(())
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
    clock: ClockBound,
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
            clock: ClockBound::Unbounded,
        }
    }

    /// Bounds how far an input may move the event clock from now on.
    pub fn with_clock_bound(mut self, bound: ClockBound) -> Session<J> {
        self.clock = bound;
        self
    }

    /// The clock bound in force.
    pub fn clock_bound(&self) -> ClockBound {
        self.clock
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

    fn journal_entry(&mut self, input: &Input, raw: &str, sender: Option<&Sender>) -> Result<usize, JournalError> {
        let n = self.decisions.len();
        self.journal.append(Entry {
            input,
            raw,
            sender,
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
                sender: None,
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
        self.apply_from(input, raw, None)
    }

    /// [`Session::apply`] of an input `sender` sent: the journal keeps the sender beside it.
    ///
    /// An event beyond the [`ClockBound`], or one the engine refuses (a second submission of a job
    /// it knows), changes nothing: the refusal is journaled ([`Journal::refused`]) and returned.
    pub fn apply_from(&mut self, input: &Input, raw: &str, sender: Option<&Sender>) -> Result<Applied, JournalError> {
        self.flush_tick()?;
        self.decisions.clear();
        if let Input::Event(e) = input {
            let now = self.engine.state().now();
            let now = (now != Timestamp::default()).then_some(now);
            if let Some(reason) = self.clock.refuses(e.time, now) {
                // A resend of something applied is still a duplicate, not a refusal.
                if self.engine.seen(&e.id) {
                    self.counts.duplicates += 1;
                    return Ok(Applied::Duplicate);
                }
                return self.refuse(input, raw, sender, RefusedBy::Clock, reason);
            }
        }
        match self.engine.apply(input, Some(raw), &mut self.decisions) {
            Outcome::Duplicate => {
                self.counts.duplicates += 1;
                return Ok(Applied::Duplicate);
            }
            Outcome::Refused(reason) => return self.refuse(input, raw, sender, RefusedBy::Engine, reason),
            Outcome::Applied => {}
        }
        self.counts.applied += 1;
        let entry = self.unflushed;
        let decisions = self.journal_entry(input, raw, sender)?;
        Ok(Applied::Applied { entry, decisions })
    }

    fn refuse(
        &mut self,
        input: &Input,
        raw: &str,
        sender: Option<&Sender>,
        by: RefusedBy,
        reason: String,
    ) -> Result<Applied, JournalError> {
        self.decisions.clear();
        self.counts.refused += 1;
        self.journal.refused(Refusal { input, raw, sender, reason: &reason })?;
        Ok(Applied::Refused(Refused { by, reason }))
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
        let decisions = self.journal_entry(&input, &raw, None)?;
        Ok(Applied::Applied { entry, decisions })
    }

    /// Decodes one framed line under the origin's rules and applies it.
    pub fn line(&mut self, frame: Frame<'_>) -> Result<LineOutcome, JournalError> {
        self.line_from(frame, None)
    }

    /// [`Session::line`] of a line `sender` sent: the journal keeps the sender beside the input
    /// (`serve --cluster`'s owners, whose lines come over NATS with the front end's sender).
    pub fn line_from(&mut self, frame: Frame<'_>, sender: Option<&Sender>) -> Result<LineOutcome, JournalError> {
        match decode::decode(frame, self.origin) {
            Line::Blank => Ok(LineOutcome::Blank),
            Line::Rejected(r) => {
                self.counts.lines += 1;
                self.counts.rejected += 1;
                Ok(LineOutcome::Rejected(r))
            }
            Line::Input(d) => {
                self.counts.lines += 1;
                let applied = self.apply_from(&d.input, d.text, sender)?;
                Ok(LineOutcome::Input { line: d.line, id: d.input.id().into_owned(), applied })
            }
        }
    }

    /// Reads `source` to its end, line by line (a line is at most `max_line` bytes), applying every
    /// input and calling `on_line` with what happened to each non-blank line.
    ///
    /// Two threads share the work: one reads, frames and decodes (the origin's rules included) into
    /// chunks, the calling thread applies them in order — so decoding line
    /// N+1 overlaps applying line N, and what is applied, in what order, and every count are exactly
    /// what one thread would give. A chunk is handed over when it holds [`CHUNK_LINES`] lines or when
    /// the source has nothing more to give at once, so a live stream (`--events -` from a pipe) is
    /// applied as its lines arrive, never held back to fill a chunk. At most [`CHUNKS_IN_FLIGHT`]
    /// chunks wait, so memory stays bounded however fast the source is. If the journal refuses,
    /// reading stops there.
    pub fn read(
        &mut self,
        source: impl Read + Send,
        max_line: usize,
        mut on_line: impl FnMut(&LineOutcome),
    ) -> Result<(), SessionError> {
        let origin = self.origin;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(CHUNKS_IN_FLIGHT);
        std::thread::scope(|scope| {
            let reader = scope.spawn(move || read_chunks(source, max_line, origin, &tx));
            let mut applied = Ok(());
            'chunks: for chunk in rx {
                for item in &chunk.items {
                    match self.item(&chunk.text, item) {
                        Ok(outcome) => on_line(&outcome),
                        Err(e) => {
                            applied = Err(SessionError::Journal(e));
                            break 'chunks;
                        }
                    }
                }
            }
            // Dropping the receiver (leaving the loop) stops a reader still sending.
            let read = reader.join().unwrap_or_else(|_| Err(std::io::Error::other("the reading thread panicked")));
            applied?;
            read.map_err(SessionError::Read)
        })
    }

    /// Applies one decoded item of a chunk.
    fn item(&mut self, text: &str, item: &Item) -> Result<LineOutcome, JournalError> {
        match item {
            Item::Rejected(r) => {
                self.counts.lines += 1;
                self.counts.rejected += 1;
                Ok(LineOutcome::Rejected(r.clone()))
            }
            Item::Input { line, text: range, input } => {
                self.counts.lines += 1;
                let applied = self.apply(input, &text[range.clone()])?;
                Ok(LineOutcome::Input { line: *line, id: input.id().into_owned(), applied })
            }
        }
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

    /// A source that gives what the test sends it, when it sends it: a pipe with a live producer.
    struct Pipe(std::sync::mpsc::Receiver<Vec<u8>>, Vec<u8>);

    impl std::io::Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.1.is_empty() {
                match self.0.recv() {
                    Ok(bytes) => self.1 = bytes,
                    Err(_) => return Ok(0),
                }
            }
            let n = buf.len().min(self.1.len());
            buf[..n].copy_from_slice(&self.1[..n]);
            self.1.drain(..n);
            Ok(n)
        }
    }

    #[test]
    fn a_live_stream_is_applied_as_its_lines_arrive_not_when_a_chunk_fills() {
        let (feed, source) = std::sync::mpsc::channel::<Vec<u8>>();
        let (seen_tx, seen) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut s = session();
            s.read(Pipe(source, Vec::new()), 1024, |o| {
                if let LineOutcome::Input { id, .. } = o {
                    let _ = seen_tx.send(id.clone());
                }
            })
            .unwrap();
            s.counts().applied
        });
        feed.send(format!("{SUBMIT}\n").into_bytes()).unwrap();
        // The producer sends nothing more until the first line is decided.
        let first = seen.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(first.as_deref(), Ok("e1"), "the first line waited for more input");
        feed.send(br#"{"id":"e2","time":"2026-11-02T10:00:00Z","type":"job.started","job_id":"j1"}"#.to_vec()).unwrap();
        drop(feed);
        assert_eq!(reader.join().unwrap(), 2, "the last line, without its newline, is applied at the end");
        assert_eq!(seen.recv().as_deref(), Ok("e2"));
    }

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
        assert_eq!(*s.counts(), Counts { lines: 5, applied: 2, duplicates: 1, rejected: 2, refused: 0 });
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
