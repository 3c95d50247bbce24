//! The engine thread: the single owner of the [`Session`] (the engine and its journal, the audit log's
//! writer).
//!
//! Handlers, the ticker and the reloader send [`Work`] over a bounded channel (a full channel makes
//! senders wait: back-pressure, never an unbounded buffer). The thread takes whatever is queued (up to
//! [`MAX_BATCH`] items), applies it in arrival order through the session and hands the batch's
//! records to the audit writer with a callback ([`bursar_session::Journal::flush_then`]). It does not
//! wait for the commit: while the writer commits batch N (in one transaction with whatever else is
//! queued behind it), this thread applies batch N+1. The writer calls back after the commit, and only
//! then are the decisions published to the live streams and the senders answered from the receipts.
//! So an answer always describes something durable, and a decision a client saw is always in the log;
//! if the writer fails, the callbacks are dropped and their senders see an error, never an answer.
//!
//! Wall-clock ticks are the session's [`bursar_model::Input::WallTick`]s: a tick that fired a timer
//! is journaled as a `bursar.tick` line; one that fired nothing only before the next input. On start,
//! [`recover`] restores the last snapshot and replays the journaled inputs after it through a session
//! of the journal's origin (so every tick is replayed as a tick), discarding the decisions, so the
//! state is exactly what it was when the last batch committed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bursar_audit::{AuditLog, Writer};
use bursar_engine::{Engine, EngineConfig, PolicySet};
use bursar_model::Timestamp;
use bursar_model::api::Sequenced;
use bursar_session::{Applied, Discard, Frame, Incoming, Journal as _, Line, Origin, Receipt, Session};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::metrics::Metrics;
use crate::respond::Refusal;

/// Most work items taken into one batch (one audit transaction).
pub const MAX_BATCH: usize = 512;

/// How many engine snapshots the audit log keeps.
const SNAPSHOTS_KEPT: usize = 2;

/// What became of one input of a request, once its backend took it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// 1-based line in the request body (or on the connection).
    pub line: u64,
    /// The input's id.
    pub id: String,
    /// What became of it.
    pub fate: Fate,
}

/// What became of one input.
#[derive(Debug, Clone, PartialEq)]
pub enum Fate {
    /// Applied and durable, with its decisions and their stream positions (none where decisions
    /// come only on the stream: a cluster's front end).
    Accepted(Vec<Sequenced>),
    /// Its id was seen before: nothing changed.
    Duplicate,
    /// Not applied and not journaled: the caller may not send it, or it names a job bursar does
    /// not know ([`crate::gate`]; a [`Refusal::Forbidden`] or [`Refusal::UnknownJob`]).
    Denied(Refusal),
    /// Refused when applied (dated beyond the clock bound, a second submission of a known job);
    /// the refusal is journaled where the backend keeps refusals.
    Refused(bursar_session::Refused),
}

/// A read of the engine's state, run on the engine thread between two inputs: it computes its
/// answer from the [`View`] and returns what sends it, which runs once the batch it was queued in
/// is durable (a reader never sees what is not).
pub type Read = Box<dyn FnOnce(View<'_>) -> Box<dyn FnOnce() + Send> + Send>;

/// What a [`Read`] may look at.
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// The engine.
    pub engine: &'a Engine,
    /// The utilisation source's job index, when it runs.
    pub jobs: Option<&'a crate::jobkeys::JobIndex>,
}

/// Queues `f` on the engine thread as a [`Work::Read`] and awaits its answer (`None`: the engine
/// thread is gone).
pub async fn read<T: Send + 'static>(
    engine: &mpsc::Sender<Work>,
    f: impl FnOnce(View<'_>) -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    engine.send(Work::read(f, tx)).await.ok()?;
    rx.await.ok()
}

/// [`read`] from a thread that may block (the utilisation source, the notifier).
pub fn blocking_read<T: Send + 'static>(
    engine: &mpsc::Sender<Work>,
    f: impl FnOnce(View<'_>) -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    engine.blocking_send(Work::read(f, tx)).ok()?;
    rx.blocking_recv().ok()
}

/// A unit of work for the engine thread.
pub enum Work {
    /// Apply these inputs (in order) and answer once durable.
    Inputs {
        /// The decoded lines.
        items: Vec<Incoming>,
        /// Who sent them (checked against the engine's state before each is applied); `None` for
        /// bursar's own sources.
        caller: Option<Arc<bursar_auth::Caller>>,
        /// Answered after the commit.
        reply: oneshot::Sender<Result<Vec<Outcome>, String>>,
    },
    /// Journal a request refused before it reached the engine (over its sender's write budget,
    /// [`crate::budget`]): its first input, with its sender, in the audit log's `refused` table.
    Refusal {
        /// The request's first input.
        item: Box<Incoming>,
        /// Why.
        reason: String,
    },
    /// What a submission would be answered now, applying nothing (`POST /v1/admit?test_only=true`).
    Preview {
        /// The `job.submitted`.
        event: Box<bursar_model::Event>,
        /// The line as received.
        raw: String,
        /// The decisions, or why there are none.
        reply: oneshot::Sender<Result<Vec<bursar_model::Decision>, String>>,
    },
    /// A read of the state: the job and project views, the pool's, the utilisation source's
    /// running jobs ([`Read`], [`read`]).
    Read(Read),
    /// Fire the timers due by this wall-clock instant.
    Tick(Timestamp),
    /// Swap in a new policy set (already compiled) and record the load.
    Policies {
        /// The new set.
        set: Arc<PolicySet>,
        /// Why (`startup`, `watch`, `sighup`, `http`).
        cause: &'static str,
        /// Answered once swapped and recorded.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Record a failed reload in the audit log.
    ReloadFailed {
        /// The errors, one `file:line:col: message` per line.
        error: String,
        /// Answered once recorded.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Persist a snapshot now.
    Snapshot {
        /// Answered with the event seq the snapshot covers.
        reply: Option<oneshot::Sender<Result<u64, String>>>,
    },
    /// Write a snapshot, then prune the rows before `before` on the audit writer, in order with
    /// everything queued (`POST /v1/audit/prune`; the log was verified by the caller).
    Prune {
        /// Event time: rows before it go.
        before: Timestamp,
        /// Answered once the prune committed (or failed).
        reply: oneshot::Sender<Result<bursar_model::api::PruneReply, String>>,
    },
    /// Finish what is queued, write a snapshot and stop.
    Shutdown,
}

impl Work {
    /// The [`Work::Read`] of `f`, answered on `reply`.
    pub fn read<T: Send + 'static>(f: impl FnOnce(View<'_>) -> T + Send + 'static, reply: oneshot::Sender<T>) -> Work {
        Work::Read(Box::new(move |view| {
            let answer = f(view);
            Box::new(move || {
                let _ = reply.send(answer);
            })
        }))
    }
}

/// Why recovery failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RecoverError(pub String);

/// What [`recover`] rebuilt.
pub struct Recovered {
    /// The engine, as it was when the last batch committed.
    pub engine: Engine,
    /// The last input seq applied.
    pub seq: u64,
    /// How many inputs were replayed after the snapshot.
    pub replayed: u64,
    /// The snapshot restored from (its event seq; 0: none, the whole log was replayed).
    pub from_snapshot: u64,
    /// Newer snapshots that were not used, and why (an edited snapshot, one no signed head covers,
    /// one that cannot be read), newest first: `GET /healthz` shows them.
    pub refused: Vec<String>,
}

impl Recovered {
    /// The lines `GET /healthz` adds after its `ok` when a snapshot was refused: where the state was
    /// rebuilt from, then one line per refused snapshot. None when the newest one was used.
    pub fn health_notes(&self) -> Vec<String> {
        if self.refused.is_empty() {
            return Vec::new();
        }
        let n = self.refused.len();
        let from = if self.from_snapshot > 0 {
            format!("the engine snapshot at event {} and the {} inputs after it", self.from_snapshot, self.replayed)
        } else {
            format!("the whole log ({} inputs replayed)", self.replayed)
        };
        let mut out = vec![format!(
            "note: restore: {n} engine snapshot{} refused at start; the state was rebuilt from {from}",
            if n == 1 { " was" } else { "s were" }
        )];
        out.extend(self.refused.iter().map(|r| format!("note: refused: {}", r.replace('\n', " "))));
        out
    }
}

/// Issue 56's migration of a log written before people had an id namespace of their own: the ids a
/// person sent in the last dedupe window were kept as `<name>:<id>` and are now `~<name>:<id>`, so
/// each is remembered under its new name too, and a person's resend across the upgrade is still a
/// duplicate. A sender is a person when its credential can only name one (a JWT, MUNGE, a proxy's
/// header) or when no declared principal of `auth` has its name. Reads back from the newest event
/// to the window's start (at most [`MIGRATION_ROWS`] rows); returns how many ids it remembered.
pub fn remember_person_ids(
    log: &AuditLog,
    engine: &mut Engine,
    auth: &bursar_auth::Authenticator,
) -> Result<usize, bursar_audit::AuditError> {
    if auth.is_open() {
        return Ok(0);
    }
    let from = engine.state().now().millis() - engine.dedupe_window().millis();
    let mut added = 0;
    for e in log.recent_sent_events(from, MIGRATION_ROWS)? {
        let Some(sender) = e.sender() else { continue };
        let person = matches!(sender.via.as_str(), "jwt" | "munge" | "proxy")
            || (matches!(sender.via.as_str(), "cert" | "unix") && auth.principal(&sender.principal).is_none());
        let prefix = format!("{}{}", sender.principal, bursar_session::NAMESPACE_SEPARATOR);
        if person && e.event_id.starts_with(&prefix) {
            let aliased = format!("{}{}", bursar_auth::PERSON_MARK, e.event_id);
            if engine.remember_id(&aliased, Timestamp(e.time)) {
                added += 1;
            }
        }
    }
    Ok(added)
}

/// The most events [`remember_person_ids`] reads back.
pub const MIGRATION_ROWS: usize = 2_000_000;

/// Rebuilds the engine from the audit log: the newest snapshot it trusts, then every journaled input
/// after it, replayed through a session of the journal's origin.
///
/// The snapshot is the log's restore point ([`AuditLog::restore_point`]): one that matches its
/// anchor and, when a witness is attached (`--signing-key`, `--witness`), that a signed head covers.
/// Each newer one refused is logged (warn) and returned; with none left the whole log is replayed.
///
/// A pruned log is the exception: without a snapshot at or after its prune, what is left to replay
/// starts mid-stream (the pruned submissions' reservations and running jobs forgotten, quotas
/// undercounted), so recovery fails and says how to go on, unless `replay_after_prune` (`serve
/// --replay-after-prune`, an operator's decision for one start) accepts that state, loudly.
pub fn recover(
    log: &AuditLog,
    set: Arc<PolicySet>,
    config: EngineConfig,
    replay_after_prune: bool,
    on_input: &mut dyn FnMut(&bursar_model::Input),
) -> Result<Recovered, RecoverError> {
    let audit = |e: bursar_audit::AuditError| RecoverError(e.to_string());
    let point = log.restore_point().map_err(audit)?;
    let mut refused: Vec<String> = point.rejected.iter().map(ToString::to_string).collect();
    for why in &refused {
        tracing::warn!(problem = %why, "audit log: an engine snapshot was refused; restoring from an older one or replaying the log");
    }
    let (engine, mut seq) = match point.snapshot {
        Some(snap) => match serde_json::from_slice(&snap.blob) {
            Ok(s) => (Engine::restore(set, s), snap.event_seq),
            Err(e) => {
                tracing::warn!(error = %e, "the engine snapshot cannot be read; replaying the whole log");
                refused.push(format!("the engine snapshot at event {} cannot be read: {e}", snap.event_seq));
                (Engine::with_config(set, config), 0)
            }
        },
        None => (Engine::with_config(set, config), 0),
    };
    if seq == 0 && point.pruned_through > 0 {
        let why = if refused.is_empty() {
            "the log holds no engine snapshot at or after it".to_owned()
        } else {
            format!("no engine snapshot at or after it can be used: {}", refused.join("; "))
        };
        if !replay_after_prune {
            return Err(RecoverError(format!(
                "the audit log was pruned through event {} and {why}; replaying what is left would forget every \
                 pruned submission still running or reserved, and undercount its quotas\n  \
                 help: restore the log from a backup taken before the prune (docs/operations.md, \"Restore\"), \
                 or start once with `--replay-after-prune` to accept the state the remaining events give",
                point.pruned_through
            )));
        }
        tracing::warn!(
            pruned_through = point.pruned_through,
            "audit log: pruned with no usable engine snapshot after the prune; replaying only the events after it \
             (--replay-after-prune): jobs and usage from before it are not counted"
        );
        refused.push(format!(
            "the log was pruned through event {} and {why}: only the events after the prune were replayed \
             (--replay-after-prune), so jobs and usage from before it are not counted",
            point.pruned_through
        ));
    }
    let from_snapshot = u64::try_from(seq).unwrap_or(0);
    let mut session = Session::new(engine, Discard, Origin::Journal);
    let mut replayed = 0;
    loop {
        let page = log.events_since(seq, 10_000).map_err(audit)?;
        if page.is_empty() {
            break;
        }
        for stored in page {
            seq = stored.seq;
            let frame = Frame::Line { line: u64::try_from(stored.seq).unwrap_or(0), bytes: stored.raw.as_bytes() };
            match bursar_session::decode(frame, Origin::Journal) {
                Line::Rejected(r) => {
                    tracing::warn!(seq = stored.seq, error = %r.error, "a logged input cannot be decoded; skipped in replay");
                }
                Line::Blank => {}
                Line::Input(d) => {
                    session.apply(&d.input, d.text).map_err(|e| RecoverError(e.to_string()))?;
                    on_input(&d.input);
                    replayed += 1;
                }
            }
        }
    }
    let (engine, _) = session.into_parts();
    Ok(Recovered { engine, seq: u64::try_from(seq).unwrap_or(0), replayed, from_snapshot, refused })
}

/// What became of one input of a batch, before its commit.
enum Handled {
    /// Applied: the index of its receipt.
    Applied(usize),
    Duplicate,
    Denied(Refusal),
    Refused(bursar_session::Refused),
}

/// Replies to send once the batch is durable.
enum After {
    /// Per item: its line, id and what became of it.
    Inputs {
        reply: oneshot::Sender<Result<Vec<Outcome>, String>>,
        items: Vec<(u64, String, Handled)>,
    },
    Ack(oneshot::Sender<Result<(), String>>),
    /// A [`Work::Read`]'s answer, to send.
    Read(Box<dyn FnOnce() + Send>),
    Preview(oneshot::Sender<Result<Vec<bursar_model::Decision>, String>>, Result<Vec<bursar_model::Decision>, String>),
}

/// The engine thread's state.
pub struct Core {
    session: Session<Writer>,
    metrics: Arc<Metrics>,
    decisions: broadcast::Sender<Arc<Sequenced>>,
    /// Last input seq committed (set by the writer's thread as commits land).
    committed: Arc<AtomicU64>,
    /// Input seq covered by the last snapshot.
    snapshot_seq: u64,
    /// The Prometheus source's job index, when it runs.
    jobs: Option<crate::jobkeys::JobIndex>,
}

impl Core {
    /// A core over a recovered engine's session.
    pub fn new(
        session: Session<Writer>,
        metrics: Arc<Metrics>,
        decisions: broadcast::Sender<Arc<Sequenced>>,
        last_event_seq: u64,
        jobs: Option<crate::jobkeys::JobIndex>,
    ) -> Core {
        Core {
            session,
            metrics,
            decisions,
            committed: Arc::new(AtomicU64::new(last_event_seq)),
            snapshot_seq: last_event_seq,
            jobs,
        }
    }

    /// Runs until [`Work::Shutdown`] or until every sender is gone; writes a final snapshot.
    pub fn run(mut self, mut rx: mpsc::Receiver<Work>, snapshot_every: std::time::Duration) {
        let mut batch: Vec<Work> = Vec::with_capacity(MAX_BATCH);
        let mut last_snapshot = Instant::now();
        let mut stop = false;
        while !stop {
            let Some(first) = rx.blocking_recv() else { break };
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            let mut want_snapshot = Vec::new();
            if let Some(i) = batch.iter().position(|w| matches!(w, Work::Shutdown)) {
                // Everything queued before the shutdown is finished; anything after it is dropped
                // unanswered (its sender sees the thread gone).
                batch.truncate(i);
                stop = true;
            }
            for w in batch.iter_mut() {
                if let Work::Snapshot { reply } = w {
                    want_snapshot.push(reply.take());
                }
            }
            if let Err(e) = self.apply(std::mem::take(&mut batch)) {
                // The engine has moved past what is durable: stop, so a restart replays the log.
                tracing::error!(error = %e, "cannot write the audit log; stopping the engine (a restart replays the log)");
                return;
            }
            if !want_snapshot.is_empty()
                || stop
                || (last_snapshot.elapsed() >= snapshot_every
                    && self.committed.load(Ordering::Relaxed) > self.snapshot_seq)
            {
                let r = self.snapshot();
                if let Err(e) = &r {
                    tracing::error!(error = %e, "cannot write the engine snapshot");
                }
                last_snapshot = Instant::now();
                for reply in want_snapshot.into_iter().flatten() {
                    let _ = reply.send(r.clone());
                }
            }
        }
        if !stop && let Err(e) = self.snapshot() {
            tracing::error!(error = %e, "cannot write the engine snapshot");
        }
        tracing::info!(event_seq = self.committed.load(Ordering::Relaxed), "engine stopped");
    }

    /// Writes a snapshot covering everything journaled.
    pub fn snapshot(&mut self) -> Result<u64, String> {
        let blob = serde_json::to_vec(&self.session.engine().snapshot()).map_err(|e| e.to_string())?;
        let bytes = blob.len();
        let digest = self.session.engine().policies().digest().to_owned();
        let seq = self.session.journal_mut().snapshot(&digest, blob, SNAPSHOTS_KEPT).map_err(|e| e.to_string())?;
        let seq = u64::try_from(seq).unwrap_or(0);
        self.committed.fetch_max(seq, Ordering::Relaxed);
        self.snapshot_seq = seq;
        self.metrics.snapshots.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(event_seq = seq, bytes, "engine snapshot written");
        Ok(seq)
    }

    /// A prune through serve: a snapshot of everything applied so far first (a restart then has
    /// one after the prune, [`recover`]), then the prune on the writer, behind the records already
    /// queued. The engine thread does not wait for it: admissions queued behind it wait only for
    /// its one transaction. A failed snapshot or prune is the caller's answer, never a stop.
    fn prune(
        &mut self,
        before: Timestamp,
        reply: oneshot::Sender<Result<bursar_model::api::PruneReply, String>>,
    ) -> Result<(), String> {
        let snapshot_event_seq = match self.snapshot() {
            Ok(seq) => seq,
            Err(e) => {
                let _ = reply.send(Err(format!("not pruned: the engine snapshot before the prune failed: {e}")));
                return Ok(());
            }
        };
        let done: bursar_audit::PruneDone = Box::new(move |r| {
            let _ = reply.send(
                r.map(|p| bursar_model::api::PruneReply {
                    events: p.events,
                    decisions: p.decisions,
                    events_through: p.events_through,
                    decisions_through: p.decisions_through,
                    snapshot_event_seq,
                })
                .map_err(|e| e.to_string()),
            );
        });
        self.session.journal_mut().prune(before.millis(), done).map_err(|e| e.to_string())
    }

    fn apply(&mut self, batch: Vec<Work>) -> Result<(), String> {
        let mut after: Vec<After> = Vec::new();
        for w in batch {
            match w {
                Work::Inputs { items, caller, reply } => {
                    let mut results = Vec::with_capacity(items.len());
                    for inc in items {
                        let id = inc.input.id().into_owned();
                        if let Some(c) = &caller
                            && let Err(d) = crate::gate::check(self.session.engine(), c, &inc.input)
                        {
                            self.metrics.events_denied.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(principal = c.name(), id, reason = %d, "input refused before it was applied");
                            results.push((inc.line, id, Handled::Denied(d)));
                            continue;
                        }
                        let started = Instant::now();
                        let applied = self
                            .session
                            .apply_from(&inc.input, &inc.raw, inc.sender.as_deref())
                            .map_err(|e| e.to_string())?;
                        self.metrics.eval.observe(started.elapsed());
                        match applied {
                            Applied::Duplicate => {
                                self.metrics.events_duplicate.fetch_add(1, Ordering::Relaxed);
                                results.push((inc.line, id, Handled::Duplicate));
                            }
                            Applied::Refused(r) => {
                                self.metrics.events_refused.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(id, reason = %r.reason, "input refused");
                                results.push((inc.line, id, Handled::Refused(r)));
                            }
                            Applied::Applied { entry, .. } => {
                                self.metrics.events_applied.fetch_add(1, Ordering::Relaxed);
                                if let Some(jobs) = self.jobs.as_mut() {
                                    jobs.observe(&inc.input);
                                }
                                results.push((inc.line, id, Handled::Applied(entry)));
                            }
                        }
                    }
                    after.push(After::Inputs { reply, items: results });
                }
                Work::Refusal { item, reason } => {
                    let refusal = bursar_session::Refusal {
                        input: &item.input,
                        raw: &item.raw,
                        sender: item.sender.as_deref(),
                        reason: &reason,
                    };
                    self.session.journal_mut().refused(refusal).map_err(|e| e.to_string())?;
                }
                Work::Tick(now) => {
                    if let Applied::Applied { decisions, .. } =
                        self.session.wall_tick(now).map_err(|e| e.to_string())?
                    {
                        self.metrics.tick_decisions.fetch_add(decisions as u64, Ordering::Relaxed);
                    }
                }
                Work::Policies { set, cause, reply } => {
                    self.metrics.policies.store(set.len() as u64, Ordering::Relaxed);
                    tracing::debug!(cause, digest = set.digest(), "policy set swapped in");
                    self.session.set_policies(set).map_err(|e| e.to_string())?;
                    after.push(After::Ack(reply));
                }
                Work::ReloadFailed { error, reply } => {
                    self.session.reload_failed(&error).map_err(|e| e.to_string())?;
                    after.push(After::Ack(reply));
                }
                Work::Preview { event, raw, reply } => {
                    let answer = self.session.engine_mut().preview(&event, Some(&raw));
                    after.push(After::Preview(reply, answer));
                }
                Work::Read(read) => {
                    let view = View { engine: self.session.engine(), jobs: self.jobs.as_ref() };
                    after.push(After::Read(read(view)));
                }
                Work::Prune { before, reply } => self.prune(before, reply)?,
                Work::Snapshot { .. } | Work::Shutdown => {}
            }
        }

        // The batch's records are with the writer: it commits them (together with whatever else is
        // queued behind them) while this thread goes on to the next batch, and calls back once they
        // are durable. Only then are the decisions published and the senders answered.
        let engine = self.session.engine();
        self.metrics.tracked_jobs.store(engine.state().tracked_jobs() as u64, Ordering::Relaxed);
        self.metrics.timers.store(engine.timers().len() as u64, Ordering::Relaxed);
        let started = Instant::now();
        let metrics = self.metrics.clone();
        let decisions = self.decisions.clone();
        let committed = self.committed.clone();
        self.session
            .flush_then(Box::new(move |receipts| answer(receipts, after, started, &metrics, &decisions, &committed)))
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Publishes a durable batch's decisions and answers its senders (on the audit writer's thread,
/// after the commit).
fn answer(
    mut receipts: Vec<Receipt>,
    after: Vec<After>,
    started: Instant,
    metrics: &Metrics,
    decisions: &broadcast::Sender<Arc<Sequenced>>,
    committed: &AtomicU64,
) {
    if !receipts.is_empty() {
        metrics.commit.observe(started.elapsed());
    }
    for r in &receipts {
        if let Some(s) = r.input_seq {
            committed.fetch_max(s, Ordering::Relaxed);
        }
        metrics.count_decisions(r.decisions.iter().map(|s| &s.decision));
        for d in &r.decisions {
            let _ = decisions.send(Arc::new(d.clone()));
        }
    }
    for a in after {
        match a {
            After::Inputs { reply, items } => {
                let outcomes = items
                    .into_iter()
                    .map(|(line, id, handled)| {
                        let fate = match handled {
                            Handled::Applied(i) => match receipts.get_mut(i) {
                                Some(r) if r.duplicate => Fate::Duplicate,
                                Some(r) => Fate::Accepted(std::mem::take(&mut r.decisions)),
                                None => Fate::Accepted(Vec::new()),
                            },
                            Handled::Duplicate => Fate::Duplicate,
                            Handled::Denied(d) => Fate::Denied(d),
                            Handled::Refused(r) => Fate::Refused(r),
                        };
                        Outcome { line, id, fate }
                    })
                    .collect();
                let _ = reply.send(Ok(outcomes));
            }
            After::Ack(reply) => {
                let _ = reply.send(Ok(()));
            }
            After::Read(send) => send(),
            After::Preview(reply, v) => {
                let _ = reply.send(v);
            }
        }
    }
}
