//! [`Writer`]: the audit log as the session's [`Journal`], on its own thread, with group commit.
//!
//! Both entry points that keep an audit log journal through it: `bursar eval --audit` (which never
//! waits: the writer commits whatever has queued up and a hook prints each group's decisions after
//! its commit) and `bursar serve` (whose engine thread flushes after each batch of requests and
//! answers from the receipts, which carry every decision with its sequence number).
//!
//! The session's [`Entry`] becomes a [`Record`] and goes into a bounded channel ([`Journal::append`]
//! blocks when it is full: back-pressure instead of unbounded memory). The thread takes whatever has
//! queued up (at least one record, at most `max_group`), appends it in one transaction, and only
//! after the commit calls the `on_commit` hook with the committed records. Policy loads, failed
//! reloads and engine snapshots travel on the same channel, so they are written in order with the
//! records around them (a snapshot covers exactly the events queued before it). The first error
//! (disk full, unwritable file, a failed hook) stops the thread; every later call returns it, and
//! nothing queued after it is committed or handed on.

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;

use bursar_engine::{PolicySet, SourceFile};
use bursar_model::api::Sequenced;
use bursar_session::{Entry, FlushDone, Journal, JournalError, Receipt};

use crate::checkpoint::{CheckpointStats, Checkpointer};
use crate::error::{AuditError, Result};
use crate::log::{Appended, AuditLog, EventRow, Record};

/// What the writer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Records received.
    pub entries: u64,
    /// Inputs written (duplicates excluded).
    pub events: u64,
    /// Records skipped because their input id was already in the log.
    pub duplicates: u64,
    /// Decisions written.
    pub decisions: u64,
    /// Largest group committed at once, in records.
    pub largest_group: usize,
}

/// Settings of the writer thread.
#[derive(Debug, Clone, Copy)]
pub struct WriterConfig {
    /// Messages the channel holds before [`Journal::append`] blocks.
    pub capacity: usize,
    /// Most records committed in one transaction.
    pub max_group: usize,
    /// Keep a [`Receipt`] per record until the next [`Journal::flush`] (serve answers from them;
    /// `eval` does not need them).
    pub receipts: bool,
    /// When a commit fails (disk full, an I/O error), retry it with a growing pause (up to
    /// [`MAX_RETRY_PAUSE`]) until it succeeds or [`Health::give_up`] is called, reporting the
    /// failure in [`Writer::health`], instead of stopping: what a long-lived server wants (serve),
    /// not a batch run (eval stops and says why).
    pub retry: bool,
    /// Run the WAL checkpoints on a thread of their own ([`crate::checkpoint`]) instead of in the
    /// commits that fill the WAL. On by default; off is the same-run baseline of the benches.
    pub checkpoint_thread: bool,
}

/// Whether the writer can commit, and what it has committed so far: shared with whoever reports
/// health (`serve`'s `/healthz` and `/metrics`).
#[derive(Debug, Default)]
pub struct Health {
    failing: std::sync::Mutex<Option<Failing>>,
    /// Set by [`Health::give_up`]: a failing write stops retrying.
    give_up: std::sync::atomic::AtomicBool,
    transactions: std::sync::atomic::AtomicU64,
    records: std::sync::atomic::AtomicU64,
    busy_micros: std::sync::atomic::AtomicU64,
    /// The checkpoint thread's counters, once it runs.
    checkpoints: std::sync::OnceLock<std::sync::Arc<CheckpointStats>>,
}

/// The writer's running totals ([`Health::totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Transactions committed.
    pub transactions: u64,
    /// Records they held.
    pub records: u64,
    /// Time spent writing and committing them (the `fsync`s included, and the pauses between the
    /// attempts of a commit that failed and was retried), in microseconds: over a wall interval, how
    /// busy the writer thread was.
    pub busy_micros: u64,
    /// WAL checkpoints run on the checkpoint thread ([`crate::checkpoint`]).
    pub checkpoints: u64,
    /// Checkpoints the writer ran itself: the last pages after the thread's, so that the checkpoint
    /// completes, or all of them when the thread had fallen behind.
    pub inline_checkpoints: u64,
    /// Checkpoints that failed (retried at the next one; the WAL keeps the pages meanwhile).
    pub checkpoint_failures: u64,
}

/// The longest pause between two attempts of a failing write: once space returns on a full disk,
/// the next commit lands within this (serve resumes on its own, docs/serve.md).
pub const MAX_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// A commit that keeps failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// The error of the last attempt.
    pub error: String,
    /// Wall time (ms) of the first failed attempt.
    pub since_ms: i64,
    /// Attempts so far.
    pub attempts: u64,
}

impl Health {
    /// `None` when commits succeed; else why they fail, since when.
    pub fn failing(&self) -> Option<Failing> {
        self.failing.lock().ok().and_then(|f| f.clone())
    }

    /// What the writer has committed since it started.
    pub fn totals(&self) -> Totals {
        use std::sync::atomic::Ordering::Relaxed;
        let ck = |f: fn(&CheckpointStats) -> &std::sync::atomic::AtomicU64| {
            self.checkpoints.get().map_or(0, |c| f(c).load(Relaxed))
        };
        Totals {
            transactions: self.transactions.load(Relaxed),
            records: self.records.load(Relaxed),
            busy_micros: self.busy_micros.load(Relaxed),
            checkpoints: ck(|c| &c.runs),
            inline_checkpoints: ck(|c| &c.inline),
            checkpoint_failures: ck(|c| &c.failures),
        }
    }

    /// Stops retrying a failing write: the writer returns its error at once (and at the next
    /// failure), so a server stopping on a full disk exits instead of waiting for space. Nothing
    /// unanswered is lost: what was not committed was never answered as done.
    pub fn give_up(&self) {
        self.give_up.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn giving_up(&self) -> bool {
        self.give_up.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn committed(&self, records: usize, took: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.transactions.fetch_add(1, Relaxed);
        self.records.fetch_add(records as u64, Relaxed);
        self.busy_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    fn set(&self, f: Option<Failing>) {
        if let Ok(mut g) = self.failing.lock() {
            *g = f;
        }
    }
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            capacity: 16 * 1024,
            max_group: 8 * 1024,
            receipts: false,
            retry: false,
            checkpoint_thread: true,
        }
    }
}

/// Called on the writer thread after each commit with the committed records and what happened to each.
pub type CommitHook = Box<dyn FnMut(&[Record], &[Appended]) -> std::io::Result<()> + Send>;

/// A hook that does nothing.
pub fn no_hook() -> CommitHook {
    Box::new(|_, _| Ok(()))
}

enum Msg {
    Record(Record),
    PolicySet {
        digest: String,
        files: Vec<SourceFile>,
    },
    ReloadFailed {
        error: String,
        in_force: String,
    },
    Refused {
        row: EventRow,
        reason: String,
    },
    Snapshot {
        policy_set: String,
        blob: Vec<u8>,
        keep: usize,
        reply: SyncSender<std::result::Result<i64, String>>,
    },
    Flush(SyncSender<Vec<Receipt>>),
    /// Prune the oldest rows (after committing what is queued before it) and call back with the
    /// outcome: a failed prune is its caller's to report, never a reason to stop the journal.
    Prune {
        before: i64,
        done: PruneDone,
    },
    /// Call back with the receipts of the records sent since the previous flush once committed.
    FlushThen(FlushDone),
}

/// Called on the writer thread with a prune's outcome ([`Writer::prune`]).
pub type PruneDone = Box<dyn FnOnce(Result<crate::verify::PruneReport>) + Send>;

/// A running writer thread.
#[derive(Debug)]
pub struct Writer {
    tx: Option<SyncSender<Msg>>,
    handle: Option<JoinHandle<Result<WriterStats>>>,
    /// The error that stopped the thread, once seen.
    failed: Option<String>,
    health: std::sync::Arc<Health>,
}

impl Writer {
    /// Starts the writer thread over `log`.
    pub fn spawn(log: AuditLog, config: WriterConfig, on_commit: CommitHook) -> Result<Writer> {
        let (tx, rx) = sync_channel(config.capacity.max(1));
        let health = std::sync::Arc::new(Health::default());
        let shared = health.clone();
        let handle = std::thread::Builder::new()
            .name("bursar-audit".into())
            .spawn(move || run(log, rx, config, on_commit, shared))
            .map_err(|e| AuditError::WriterStopped(Some(format!("cannot start the writer thread: {e}"))))?;
        Ok(Writer { tx: Some(tx), handle: Some(handle), failed: None, health })
    }

    /// Whether commits succeed; shared, so a health check can read it from any thread.
    pub fn health(&self) -> std::sync::Arc<Health> {
        self.health.clone()
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let Some(tx) = &self.tx else { return Err(self.stopped()) };
        if tx.send(msg).is_ok() {
            return Ok(());
        }
        Err(self.stopped())
    }

    /// The thread has stopped: why.
    fn stopped(&mut self) -> AuditError {
        self.tx = None;
        if let Some(why) = &self.failed {
            return AuditError::WriterStopped(Some(why.clone()));
        }
        let e = match self.join() {
            Err(e) => e,
            Ok(_) => AuditError::WriterStopped(None),
        };
        self.failed = Some(e.to_string());
        e
    }

    /// Queues a record, blocking while the channel is full. If the writer stopped, returns its error.
    pub fn send_record(&mut self, record: Record) -> Result<()> {
        self.send(Msg::Record(record))
    }

    /// Stores an engine snapshot covering every event queued before it (keeping the `keep` newest
    /// snapshots) once those events are committed; returns the event seq it covers.
    pub fn snapshot(&mut self, policy_set: &str, blob: Vec<u8>, keep: usize) -> Result<i64> {
        let (reply, rx) = sync_channel(1);
        self.send(Msg::Snapshot { policy_set: policy_set.to_owned(), blob, keep, reply })?;
        match rx.recv() {
            Ok(Ok(seq)) => Ok(seq),
            Ok(Err(e)) => Err(AuditError::Invalid(format!("the engine snapshot was not written: {e}"))),
            Err(_) => Err(self.stopped()),
        }
    }

    /// Prunes the rows before `before` (ms since the epoch, event time) in order with the records
    /// sent before it, on the writer's own connection (the one writer of the log: a prune by another
    /// process is refused by [`crate::lock`]), and calls `done` with what it removed. The caller
    /// verifies the log first ([`crate::verify::prune`] does both for a log it opens itself) and
    /// saves an engine snapshot before it, so that a restart has one after the prune.
    pub fn prune(&mut self, before: i64, done: PruneDone) -> Result<()> {
        self.send(Msg::Prune { before, done })
    }

    /// Closes the channel, waits until everything queued is committed and handed on, and returns the
    /// counters (or the first error).
    pub fn finish(mut self) -> Result<WriterStats> {
        self.tx = None;
        self.join()
    }

    fn join(&mut self) -> Result<WriterStats> {
        match self.handle.take() {
            None => Err(AuditError::WriterStopped(self.failed.clone())),
            Some(h) => match h.join() {
                Ok(r) => r,
                Err(_) => Err(AuditError::WriterStopped(Some("it panicked".into()))),
            },
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn journal_err(e: AuditError) -> JournalError {
    match e {
        AuditError::Output(io) => JournalError::Output(io),
        other => JournalError::Store(other.to_string()),
    }
}

impl Journal for Writer {
    fn append(&mut self, entry: Entry<'_>) -> Result<(), JournalError> {
        self.send(Msg::Record(Record::of(entry))).map_err(journal_err)
    }

    fn policy_set(&mut self, set: &PolicySet) -> Result<(), JournalError> {
        self.send(Msg::PolicySet { digest: set.digest().to_owned(), files: set.files().to_vec() }).map_err(journal_err)
    }

    fn refused(&mut self, refusal: bursar_session::Refusal<'_>) -> Result<(), JournalError> {
        let row = EventRow::new(refusal.raw, refusal.input).sent_by(refusal.sender);
        self.send(Msg::Refused { row, reason: refusal.reason.to_owned() }).map_err(journal_err)
    }

    fn reload_failed(&mut self, error: &str, in_force: &str) -> Result<(), JournalError> {
        self.send(Msg::ReloadFailed { error: error.to_owned(), in_force: in_force.to_owned() }).map_err(journal_err)
    }

    fn flush(&mut self) -> Result<Vec<Receipt>, JournalError> {
        let (reply, rx) = sync_channel(1);
        self.send(Msg::Flush(reply)).map_err(journal_err)?;
        rx.recv().map_err(|_| journal_err(self.stopped()))
    }

    /// Queues the callback behind the records sent so far and returns: the writer thread calls it
    /// after the commit that makes them durable. Flushes queued back to back share one commit (group
    /// commit across the caller's batches).
    fn flush_then(&mut self, done: FlushDone) -> Result<(), JournalError> {
        self.send(Msg::FlushThen(done)).map_err(journal_err)
    }
}

struct Thread {
    health: std::sync::Arc<Health>,
    log: AuditLog,
    config: WriterConfig,
    on_commit: CommitHook,
    stats: WriterStats,
    group: Vec<Record>,
    receipts: Vec<Receipt>,
    /// Records received since the last flush of either kind.
    since_flush: usize,
    /// Callbacks waiting for a commit, each with how many of the oldest receipts are its own.
    waiting: std::collections::VecDeque<(usize, FlushDone)>,
    /// The sender marks the end of its batches with [`Msg::FlushThen`]: commit when one is waiting,
    /// not whenever the channel is momentarily empty (which, mid-batch, would spend a commit on half
    /// of it).
    flush_driven: bool,
}

impl Thread {
    fn commit(&mut self) -> Result<()> {
        if self.group.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let done = self.append_group()?;
        self.health.committed(self.group.len(), started.elapsed());
        self.stats.commits += 1;
        self.stats.entries += self.group.len() as u64;
        self.stats.largest_group = self.stats.largest_group.max(self.group.len());
        for a in &done {
            if a.duplicate {
                self.stats.duplicates += 1;
            } else if a.event_seq.is_some() {
                self.stats.events += 1;
            }
            self.stats.decisions += (a.decisions.end - a.decisions.start) as u64;
        }
        (self.on_commit)(&self.group, &done).map_err(AuditError::Output)?;
        if self.config.receipts {
            for (record, a) in self.group.drain(..).zip(&done) {
                let decisions = if a.duplicate {
                    Vec::new()
                } else {
                    record
                        .decisions
                        .into_iter()
                        .zip(a.decisions.clone())
                        .map(|(decision, seq)| Sequenced { seq: u64::try_from(seq).unwrap_or(0), decision })
                        .collect()
                };
                self.receipts.push(Receipt {
                    input_seq: a.event_seq.and_then(|s| u64::try_from(s).ok()),
                    duplicate: a.duplicate,
                    decisions,
                });
            }
        }
        self.group.clear();
        Ok(())
    }

    /// Appends the group; with `retry`, tries again (pausing up to [`MAX_RETRY_PAUSE`]) until the
    /// cause is gone.
    fn append_group(&mut self) -> Result<Vec<Appended>> {
        let group = std::mem::take(&mut self.group);
        let done = self.retrying(|log| log.append(&group));
        self.group = group;
        done
    }

    /// Runs `write`; with `retry`, runs it again (pausing up to [`MAX_RETRY_PAUSE`]) until it
    /// succeeds or the health says to give up, reporting the failure in the health meanwhile. A
    /// failed write leaves the log as it was (one transaction).
    fn retrying<T>(&mut self, mut write: impl FnMut(&mut AuditLog) -> Result<T>) -> Result<T> {
        let mut pause = std::time::Duration::from_millis(100);
        let mut attempts = 0u64;
        let mut since = None;
        loop {
            match write(&mut self.log) {
                Ok(done) => {
                    if attempts > 0 {
                        self.health.set(None);
                    }
                    return Ok(done);
                }
                Err(e) if self.config.retry && !matches!(e, AuditError::Output(_)) && !self.health.giving_up() => {
                    attempts += 1;
                    let since_ms = *since.get_or_insert_with(crate::log::wall_ms);
                    self.health.set(Some(Failing { error: e.to_string(), since_ms, attempts }));
                    // Slept in slices, so a give-up is seen within one.
                    let until = std::time::Instant::now() + pause;
                    while std::time::Instant::now() < until && !self.health.giving_up() {
                        std::thread::sleep(std::time::Duration::from_millis(20).min(pause));
                    }
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn handle(&mut self, msg: Msg) -> Result<()> {
        match msg {
            Msg::Record(r) => {
                self.since_flush += 1;
                self.group.push(r);
                if self.group.len() >= self.config.max_group.max(1) {
                    self.commit()?;
                }
            }
            Msg::PolicySet { digest, files } => {
                self.commit()?;
                self.retrying(|log| log.record_policy_set(&digest, &files))?;
            }
            Msg::ReloadFailed { error, in_force } => {
                self.commit()?;
                self.retrying(|log| log.record_policy_failure(&error, Some(&in_force)))?;
            }
            Msg::Refused { row, reason } => {
                // In order with the records around it; refusals are rare, so a transaction of its own.
                self.commit()?;
                self.retrying(|log| log.record_refusal(&row, &reason))?;
            }
            Msg::Snapshot { policy_set, blob, keep, reply } => {
                self.commit()?;
                let seq = self.log.last_event_seq();
                // A snapshot only saves replay time: one that cannot be written is reported to its
                // caller, never a reason to stop the journal.
                let saved =
                    self.log.save_snapshot(seq, Some(&policy_set), &blob).and_then(|()| self.log.prune_snapshots(keep));
                match saved {
                    Ok(_) => {
                        let _ = reply.send(Ok(seq));
                    }
                    Err(e) if self.config.retry => {
                        let _ = reply.send(Err(e.to_string()));
                    }
                    Err(e) => return Err(e),
                }
            }
            Msg::Flush(reply) => {
                self.commit()?;
                self.call_back();
                self.since_flush = 0;
                let _ = reply.send(std::mem::take(&mut self.receipts));
            }
            Msg::Prune { before, done } => {
                self.commit()?;
                done(self.log.prune_prefix(before));
            }
            Msg::FlushThen(done) => {
                // Not committed yet: whatever else is queued joins the group, and the callbacks run
                // after the commit that ends this round ([`run`]).
                self.flush_driven = true;
                self.waiting.push_back((std::mem::take(&mut self.since_flush), done));
            }
        }
        Ok(())
    }

    /// Calls the waiting callbacks, in order, each with its own receipts: only after a commit, so
    /// everything they cover is durable.
    fn call_back(&mut self) {
        while let Some((n, done)) = self.waiting.pop_front() {
            let n = n.min(self.receipts.len());
            let mine: Vec<Receipt> = self.receipts.drain(..n).collect();
            done(mine);
        }
    }

    /// Commits the group, then answers the callbacks it completes.
    fn commit_and_call_back(&mut self) -> Result<()> {
        self.commit()?;
        self.call_back();
        Ok(())
    }
}

fn run(
    log: AuditLog,
    rx: Receiver<Msg>,
    config: WriterConfig,
    on_commit: CommitHook,
    health: std::sync::Arc<Health>,
) -> Result<WriterStats> {
    let mut t = Thread {
        health,
        log,
        config,
        on_commit,
        stats: WriterStats::default(),
        group: Vec::with_capacity(config.max_group.clamp(1, 64 * 1024)),
        receipts: Vec::new(),
        since_flush: 0,
        waiting: std::collections::VecDeque::new(),
        flush_driven: false,
    };
    // Checkpoints on their own thread; without it (off, or it could not start: `Totals` then shows
    // no checkpoints) SQLite's automatic ones.
    let checkpointer = if config.checkpoint_thread { Checkpointer::start(&mut t.log).ok() } else { None };
    if let Some(c) = &checkpointer {
        let _ = t.health.checkpoints.set(c.stats());
    }
    let result = write_all(&mut t, &rx);
    if let Some(c) = checkpointer {
        c.stop(&mut t.log);
    }
    result
}

fn write_all(t: &mut Thread, rx: &Receiver<Msg>) -> Result<WriterStats> {
    loop {
        match rx.recv() {
            Ok(m) => t.handle(m)?,
            Err(_) => {
                t.commit_and_call_back()?;
                // Closed: sign what a witness that signs every so often still has pending.
                t.log.sign_pending()?;
                return Ok(t.stats.clone());
            }
        }
        // Whatever queued up meanwhile joins the same group.
        loop {
            match rx.try_recv() {
                Ok(m) => t.handle(m)?,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    t.commit_and_call_back()?;
                    t.log.sign_pending()?;
                    return Ok(t.stats.clone());
                }
            }
        }
        if t.flush_driven && t.waiting.is_empty() {
            // Records of a batch whose end has not arrived yet: they wait for it (the group still
            // commits at `max_group`).
            continue;
        }
        t.commit_and_call_back()?;
    }
}
