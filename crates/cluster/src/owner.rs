//! The owner of one partition: a thread with the partition's [`Session`] — one engine, one writer —
//! fed by the partition's events in stream order, answering admissions once their decisions are in
//! the journal.
//!
//! Taking over (before anything is answered):
//! 1. write a takeover marker on `bursar.journal.<p>` with the expected last subject sequence: from
//!    now on the previous owner's journal publishes are refused;
//! 2. fence the snapshot subject and rewrite the snapshot pointer under the new epoch
//!    ([`Snapshots::take_over`]);
//! 3. restore the snapshot the pointer names and replay every journal message after the sequence it
//!    covers up to the marker, through a session of the journal's origin (decisions discarded: they
//!    are in the journal already), rebuilding the recent admissions;
//! 4. consume `bursar.events.<p>` from the sequence after the last one the journal says was
//!    consumed, and only then subscribe to `bursar.admit.<p>`.
//!
//! Running: the thread takes what is queued (events, admission waiters, ticks, snapshot requests; at
//! most [`MAX_BATCH`]), applies it through the session, flushes the journal once (one fenced
//! message) and only then answers the waiters. The runs the batch saw finish are sent to every other
//! partition (`run.recorded`) before that flush, so a crash in between resends them, never loses them. Any journal or snapshot error ends the thread: the
//! partition is then the next owner's, which replays what was published.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::Subject;
use bursar_engine::{Engine, EngineConfig, PolicySet};
use bursar_model::api::{AdmitReply, Sequenced};
use bursar_model::{EventKind, Input, RunFact, Timestamp};
use bursar_session::{Applied, Discard, Frame, Line, LineOutcome, Origin, Session};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::ClusterError;
use crate::journal::{StreamJournal, Writer, publish_fenced};
use crate::nats::Nats;
use crate::partition::{admit_subject, cursor, events_subject, journal_subject};
use crate::snapshot::{Snapshots, last_on_subject, read_subject};
use crate::status::{Counters, OwnedState, Status};
use crate::wire::{JournalBatch, JournalBatchOut, OwnerAnswer, PartitionSnapshot};

/// Most items applied in one batch (one journal message).
pub const MAX_BATCH: usize = 512;

/// Recent admissions kept per partition to answer a resent submission.
const ADMISSIONS_KEPT: usize = 100_000;

/// A snapshot is written at least this often, changed or not (the snapshot stream keeps a day).
const FORCED_SNAPSHOT: Duration = Duration::from_secs(3600);

/// Settings of an owner.
#[derive(Debug, Clone)]
pub struct OwnerSettings {
    /// Wall-clock tick.
    pub tick: Duration,
    /// How often a changed state is snapshotted.
    pub snapshot_every: Duration,
    /// Largest journal message.
    pub max_message: usize,
    /// Engine settings for a partition that has no snapshot yet.
    pub engine: EngineConfig,
}

/// Until when this instance may act as the partition's owner, by its own monotonic clock: the start
/// of the last successful lease renewal plus the lease time. Checked before an owner publishes an
/// admission's event; the journal and snapshots do not depend on it (they are fenced by the stream).
#[derive(Debug)]
pub struct LeaseClock {
    base: Instant,
    valid_until_ms: AtomicU64,
}

impl LeaseClock {
    /// A clock valid for `ttl` from now.
    pub fn new(ttl: Duration) -> LeaseClock {
        let c = LeaseClock { base: Instant::now(), valid_until_ms: AtomicU64::new(0) };
        c.renewed(Instant::now(), ttl);
        c
    }

    /// A renewal that started at `at` succeeded.
    pub fn renewed(&self, at: Instant, ttl: Duration) {
        let ms = u64::try_from((at.saturating_duration_since(self.base) + ttl).as_millis()).unwrap_or(u64::MAX);
        self.valid_until_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Whether the lease is still held by this clock.
    pub fn valid(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.valid_until_ms.load(Ordering::Relaxed)
    }

    /// Ends validity at once (stepping down).
    pub fn revoke(&self) {
        self.valid_until_ms.store(0, Ordering::Relaxed);
    }
}

/// Work for the owner thread.
#[derive(Debug)]
pub enum Item {
    /// An event of the partition at this events-stream sequence.
    Event {
        /// Stream sequence.
        seq: u64,
        /// The line.
        data: Bytes,
    },
    /// An admission whose event is in the stream at `seq`: answer once decided.
    Waiter {
        /// Event id.
        id: String,
        /// Stream sequence the publish was acknowledged with.
        seq: u64,
        /// The stream found it a duplicate.
        duplicate: bool,
        /// Where to answer.
        reply: Subject,
    },
    /// Fire the timers due.
    Tick,
    /// Snapshot if the state changed.
    Snapshot,
    /// A source task failed.
    Failed(String),
    /// Stop; `release` writes a snapshot first (a handover).
    Stop {
        /// Handover rather than failure.
        release: bool,
    },
}

/// How the owner thread ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Handed over on request.
    Released,
    /// Stopped because it can no longer write (fenced, NATS failure): the reason.
    SteppedDown(String),
}

/// Everything an owner needs.
pub struct OwnerCtx {
    /// NATS.
    pub nats: Nats,
    /// The runtime the async parts run on.
    pub rt: tokio::runtime::Handle,
    /// The partition.
    pub partition: u32,
    /// The fencing epoch.
    pub epoch: u64,
    /// This instance.
    pub instance: Arc<str>,
    /// The policy set in force (changes on reload).
    pub policies: watch::Receiver<Arc<PolicySet>>,
    /// Settings.
    pub settings: OwnerSettings,
    /// Shared status.
    pub status: Arc<Status>,
    /// The lease clock.
    pub lease: Arc<LeaseClock>,
}

struct Recent {
    by_id: HashMap<String, (AdmitReply, u64)>,
    order: VecDeque<String>,
}

impl Recent {
    fn new() -> Recent {
        Recent { by_id: HashMap::new(), order: VecDeque::new() }
    }

    /// `reply` answered the submission `id` first published at events-stream sequence `seq` (0 when
    /// the sequence is not known: replayed from the journal).
    fn insert(&mut self, id: String, reply: AdmitReply, seq: u64) {
        if self.by_id.insert(id.clone(), (reply, seq)).is_none() {
            self.order.push_back(id);
            while self.order.len() > ADMISSIONS_KEPT {
                if let Some(old) = self.order.pop_front() {
                    self.by_id.remove(&old);
                }
            }
        }
    }

    fn to_vec(&self) -> Vec<(String, Sequenced)> {
        self.order.iter().filter_map(|id| self.by_id.get(id).map(|(r, _)| (id.clone(), r.admission.clone()))).collect()
    }
}

fn first_reply(admission: Sequenced) -> AdmitReply {
    AdmitReply { admission, duplicate: false, other_decisions: Vec::new() }
}

/// What the takeover produced.
struct Restored {
    engine: Engine,
    marker: u64,
    events_through: u64,
    journal_seq: u64,
    recent: Recent,
    snapshots: Snapshots,
    replayed: u64,
}

fn nerr(what: impl Into<String>, e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Nats { what: what.into(), error: e.to_string() }
}

async fn take_over(ctx: &OwnerCtx) -> Result<Restored, ClusterError> {
    let p = ctx.partition;
    let subject = journal_subject(p);
    // 1. The journal fence.
    let mut marker = None;
    for _ in 0..20 {
        let last = last_on_subject(&ctx.nats.journal, &subject).await?;
        let payload = serde_json::to_vec(&JournalBatchOut {
            partition: p,
            epoch: ctx.epoch,
            instance: &ctx.instance,
            events_through: 0,
            takeover: true,
            policy_sets: &[],
            reload_failures: &[],
            entries: &[],
        })
        .map_err(|e| nerr("encode a takeover marker", e))?;
        match publish_fenced(&ctx.nats.js, subject.clone(), last, ctx.epoch, &[], payload).await {
            Ok(seq) => {
                marker = Some(seq);
                break;
            }
            Err(e) if e.starts_with("fenced") => continue,
            Err(e) => return Err(nerr(format!("write the takeover marker of partition {p}"), e)),
        }
    }
    let marker = marker.ok_or_else(|| nerr(format!("fence `{subject}`"), "the subject kept moving"))?;
    // 2. The snapshot fence, and the snapshot.
    let snapshots = Snapshots::take_over(&ctx.nats, p, ctx.epoch).await?;
    let set = ctx.policies.borrow().clone();
    let mut recent = Recent::new();
    let (engine, mut journal_seq, mut events_through) = match snapshots.read(&ctx.nats).await? {
        Some(s) => {
            for (id, a) in s.admissions {
                recent.insert(id, first_reply(a), 0);
            }
            (Engine::restore(set, s.engine), s.journal_seq, s.events_through)
        }
        None => (Engine::with_config(set, ctx.settings.engine), 0, 0),
    };
    // 3. Replay the journal after the snapshot, up to the marker.
    let mut session = Session::new(engine, Discard, Origin::Journal);
    let mut replayed = 0u64;
    let mut failed: Option<ClusterError> = None;
    read_subject(&ctx.nats.journal, &subject, journal_seq + 1, |seq, m| {
        if seq >= marker {
            return Ok(false);
        }
        let batch: JournalBatch = match serde_json::from_slice(&m.payload) {
            Ok(b) => b,
            Err(e) => {
                failed = Some(nerr(format!("decode journal message {seq} of partition {p}"), e));
                return Ok(false);
            }
        };
        events_through = events_through.max(batch.events_through);
        journal_seq = seq;
        let mut index = 0;
        for entry in batch.entries {
            let frame = Frame::Line { line: seq, bytes: entry.raw.as_bytes() };
            if let Line::Input(d) = bursar_session::decode(frame, Origin::Journal)
                && let Err(e) = session.apply(&d.input, d.text)
            {
                failed = Some(nerr("replay the journal", e));
                return Ok(false);
            }
            replayed += 1;
            for d in entry.decisions {
                if d.admission {
                    let id = d.event_id.clone();
                    recent.insert(id, first_reply(Sequenced { seq: cursor(seq, index), decision: d }), 0);
                }
                index += 1;
            }
        }
        Ok(true)
    })
    .await?;
    if let Some(e) = failed {
        return Err(e);
    }
    let (engine, _) = session.into_parts();
    Ok(Restored { engine, marker, events_through, journal_seq, recent, snapshots, replayed })
}

/// The events consumer: every event of the partition after `from`, in stream order, to the thread.
async fn consume(nats: Nats, partition: u32, from: u64, tx: mpsc::Sender<Item>) {
    let subject = events_subject(partition);
    let mut messages = match crate::nats::read_from(&nats.events, &subject, from).await {
        Ok(m) => m,
        Err(e) => {
            let _ = tx.send(Item::Failed(format!("consume `{subject}`: {e}"))).await;
            return;
        }
    };
    while let Some(m) = messages.next().await {
        let item = match m {
            Ok(m) => match m.info() {
                Ok(info) => Item::Event { seq: info.stream_sequence, data: m.message.payload.clone() },
                Err(e) => Item::Failed(format!("consume `{subject}`: {e}")),
            },
            Err(e) => Item::Failed(format!("consume `{subject}`: {e}")),
        };
        let failed = matches!(item, Item::Failed(_));
        if tx.send(item).await.is_err() || failed {
            return;
        }
    }
}

/// Publishes each run fact to every partition but `from`, each copy with its own id
/// (`run-<event id>@p<n>`, also its `Nats-Msg-Id`), and waits until the stream has stored them all.
async fn send_runs(nats: &Nats, from: u32, runs: &[RunFact]) -> Result<(), String> {
    let mut acks = Vec::new();
    for run in runs {
        for p in (0..nats.partitions.max(1)).filter(|p| *p != from) {
            let copy = run.for_partition(p);
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", copy.id.as_str());
            let line = Input::Run(copy).to_json();
            let ack = nats
                .js
                .publish_with_headers(events_subject(p), headers, Bytes::from(line))
                .await
                .map_err(|e| e.to_string())?;
            acks.push(ack);
        }
    }
    for ack in acks {
        ack.await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

async fn answer(client: &async_nats::Client, reply: Subject, a: &OwnerAnswer) {
    if let Ok(body) = serde_json::to_vec(a) {
        let _ = client.publish(reply, body.into()).await;
    }
}

fn refused(status: u16, error: impl Into<String>, retry: bool) -> OwnerAnswer {
    OwnerAnswer::Refused { status, error: error.into(), retry }
}

/// The admission subscriber: puts each submission on the partition's event subject (the one road:
/// the owner decides it in stream order like any other event) and hands the thread a waiter.
async fn admissions(ctx_nats: Nats, partition: u32, lease: Arc<LeaseClock>, tx: mpsc::Sender<Item>) {
    let subject = admit_subject(partition);
    let mut sub = match ctx_nats.client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(Item::Failed(format!("subscribe to `{subject}`: {e}"))).await;
            return;
        }
    };
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply.clone() else { continue };
        let (nats, lease, tx) = (ctx_nats.clone(), lease.clone(), tx.clone());
        tokio::spawn(async move {
            let frame = Frame::Line { line: 1, bytes: &msg.payload };
            let id = match bursar_session::decode(frame, Origin::Producer) {
                Line::Input(d) => match &d.input {
                    Input::Event(e) if matches!(e.kind, EventKind::JobSubmitted(_)) => e.id.clone(),
                    _ => {
                        return answer(&nats.client, reply, &refused(400, "expected a `job.submitted` event", false))
                            .await;
                    }
                },
                Line::Rejected(r) => {
                    return answer(&nats.client, reply, &refused(400, format!("malformed event: {}", r.error), false))
                        .await;
                }
                Line::Blank => {
                    return answer(&nats.client, reply, &refused(400, "the body holds no event", false)).await;
                }
            };
            if !lease.valid() {
                return answer(
                    &nats.client,
                    reply,
                    &refused(503, format!("partition {partition}'s lease lapsed on this instance"), true),
                )
                .await;
            }
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", id.as_str());
            let ack = match nats.js.publish_with_headers(events_subject(partition), headers, msg.payload.clone()).await
            {
                Ok(f) => f.await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match ack {
                Ok(ack) => {
                    let w = Item::Waiter { id, seq: ack.sequence, duplicate: ack.duplicate, reply: reply.clone() };
                    if tx.send(w).await.is_err() {
                        answer(&nats.client, reply, &refused(503, "the partition's owner is stepping down", true))
                            .await;
                    }
                }
                Err(e) => {
                    answer(&nats.client, reply, &refused(503, format!("the event could not be stored: {e}"), true))
                        .await
                }
            }
        });
    }
}

struct Waiter {
    seq: u64,
    duplicate: bool,
    reply: Subject,
}

/// Runs the owner of `ctx.partition` until it is stopped or can no longer write.
pub fn run(ctx: OwnerCtx, mut rx: mpsc::Receiver<Item>, tx: mpsc::Sender<Item>) -> Exit {
    let p = ctx.partition;
    let started = Instant::now();
    ctx.status.set_owned(p, OwnedState::restoring(ctx.epoch));
    let restored = match ctx.rt.block_on(take_over(&ctx)) {
        Ok(r) => r,
        Err(e) => {
            ctx.status.remove_owned(p);
            return Exit::SteppedDown(format!("takeover failed: {e}"));
        }
    };
    let Restored { engine, marker, events_through, mut journal_seq, mut recent, mut snapshots, replayed } = restored;
    let max_message = ctx.settings.max_message;
    let journal = StreamJournal::new(
        ctx.rt.clone(),
        ctx.nats.js.clone(),
        Writer { partition: p, epoch: ctx.epoch, instance: ctx.instance.clone() },
        marker,
        events_through,
        max_message,
    );
    let mut session = match Session::open(engine, journal, Origin::Cluster) {
        Ok(s) => s,
        Err(e) => return Exit::SteppedDown(e.to_string()),
    };
    let counters: &Counters = &ctx.status.counters;
    let mut tasks = vec![ctx.rt.spawn(consume(ctx.nats.clone(), p, events_through + 1, tx.clone()))];
    // Ticks and snapshot requests.
    {
        let (tick, every, tx) = (ctx.settings.tick, ctx.settings.snapshot_every, tx.clone());
        tasks.push(ctx.rt.spawn(async move {
            let mut t = tokio::time::interval(tick);
            let mut s = tokio::time::interval(every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            s.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            s.tick().await;
            loop {
                let item = tokio::select! {
                    _ = t.tick() => Item::Tick,
                    _ = s.tick() => Item::Snapshot,
                };
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        }));
    }
    // Catch up before answering: the partition's events the stream holds now are applied first.
    let head = match ctx.rt.block_on(last_on_subject(&ctx.nats.events, &events_subject(p))) {
        Ok(h) => h,
        Err(e) => {
            for t in &tasks {
                t.abort();
            }
            ctx.status.remove_owned(p);
            return Exit::SteppedDown(e.to_string());
        }
    };
    let mut consumed = events_through;
    let mut waiters: HashMap<String, Vec<Waiter>> = HashMap::new();
    let mut subscribed = false;
    let mut policies = ctx.policies.clone();
    let mut last_snapshot = Instant::now();
    let mut snapshot_journal_seq = snapshots.current().map(|r| r.journal_seq).unwrap_or(0);
    let partitions = ctx.nats.partitions.max(1);
    let mut batch: Vec<Item> = Vec::with_capacity(MAX_BATCH);
    let exit = loop {
        if !subscribed && consumed >= head {
            subscribed = true;
            tasks.push(ctx.rt.spawn(admissions(ctx.nats.clone(), p, ctx.lease.clone(), tx.clone())));
            let ms = started.elapsed().as_secs_f64() * 1e3;
            ctx.status.set_owned(p, OwnedState::live(ctx.epoch, ms, replayed));
            counters.takeovers.fetch_add(1, Ordering::Relaxed);
            tracing::info!(partition = p, epoch = ctx.epoch, replayed, ms, "partition live: restored and caught up");
        }
        let wait = if subscribed { Duration::from_secs(3600) } else { Duration::from_millis(50) };
        let first = ctx.rt.block_on(async { tokio::time::timeout(wait, rx.recv()).await });
        match first {
            Ok(Some(item)) => batch.push(item),
            Ok(None) => break Exit::SteppedDown("every sender is gone".into()),
            Err(_) => continue,
        }
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        if policies.has_changed().unwrap_or(false) {
            let set = policies.borrow_and_update().clone();
            if let Err(e) = session.set_policies(set) {
                break Exit::SteppedDown(e.to_string());
            }
        }
        let mut applied: Vec<(String, usize, u64)> = Vec::new();
        let mut duplicates: Vec<String> = Vec::new();
        // Inputs the engine refused (a second submission of a job it knows): why, for their waiters.
        let mut refusals: std::collections::HashMap<String, String> = std::collections::HashMap::new();
        let mut new_waiters: Vec<(String, Waiter)> = Vec::new();
        let mut stop = None;
        let mut want_snapshot = false;
        let mut error = None;
        let mut runs: Vec<RunFact> = Vec::new();
        for item in batch.drain(..) {
            match item {
                Item::Event { seq, data } => {
                    consumed = consumed.max(seq);
                    let outcome = session.line(Frame::Line { line: seq, bytes: &data });
                    session.journal_mut().set_events_through(seq);
                    match outcome {
                        Ok(LineOutcome::Input { id, applied: Applied::Applied { entry, .. }, .. }) => {
                            counters.events_applied.fetch_add(1, Ordering::Relaxed);
                            runs.extend(session.engine().recorded_runs().iter().map(|r| r.fact(&id)));
                            applied.push((id, entry, seq));
                        }
                        Ok(LineOutcome::Input { id, applied: Applied::Duplicate, .. }) => duplicates.push(id),
                        Ok(LineOutcome::Input { id, applied: Applied::Refused(r), .. }) => {
                            tracing::info!(partition = p, seq, id, reason = %r.reason, "input refused");
                            refusals.insert(id.clone(), r.reason);
                            duplicates.push(id);
                        }
                        Ok(LineOutcome::Rejected(r)) => {
                            tracing::warn!(partition = p, seq, error = %r.error, "an event in the stream is not valid; skipped")
                        }
                        Ok(LineOutcome::Blank) => {}
                        Err(e) => {
                            error = Some(e.to_string());
                            break;
                        }
                    }
                }
                Item::Waiter { id, seq, duplicate, reply } => new_waiters.push((id, Waiter { seq, duplicate, reply })),
                Item::Tick => {
                    let now = Timestamp::wall_clock().millis();
                    // Each partition's ticks fall on their own milliseconds (≡ p mod the count), so
                    // two partitions never journal a tick with the same id.
                    let n = i64::from(partitions);
                    let t = now - now.rem_euclid(n) + i64::from(p);
                    if let Err(e) = session.wall_tick(Timestamp(t)) {
                        error = Some(e.to_string());
                        break;
                    }
                }
                Item::Snapshot => want_snapshot = true,
                Item::Failed(e) => {
                    error = Some(e);
                    break;
                }
                Item::Stop { release } => {
                    stop = Some(release);
                    break;
                }
            }
        }
        if let Some(e) = error {
            break Exit::SteppedDown(e);
        }
        // The runs this batch saw finish go to every other partition before the batch is journalled:
        // if this owner dies in between, the next one applies the same `job.finished` again (the
        // journal does not have it yet) and sends the same facts, with the same ids.
        if !runs.is_empty() {
            if let Err(e) = ctx.rt.block_on(send_runs(&ctx.nats, p, &runs)) {
                break Exit::SteppedDown(format!("cannot send run facts to the other partitions: {e}"));
            }
            counters.run_facts_sent.fetch_add((runs.len() as u64) * u64::from(partitions - 1), Ordering::Relaxed);
        }
        let mut receipts = match session.flush() {
            Ok(r) => r,
            Err(e) => {
                if session.journal().fenced() {
                    counters.fenced.fetch_add(1, Ordering::Relaxed);
                }
                break Exit::SteppedDown(e.to_string());
            }
        };
        journal_seq = journal_seq.max(session.journal().last_seq());
        // What the batch decided, then the answers.
        for (id, entry, seq) in applied {
            let Some(r) = receipts.get_mut(entry) else { continue };
            let mut ds = std::mem::take(&mut r.decisions);
            if let Some(pos) = ds.iter().position(|d| d.decision.admission && d.decision.event_id == id) {
                let admission = ds.remove(pos);
                recent.insert(id, AdmitReply { admission, duplicate: false, other_decisions: ds }, seq);
            }
        }
        for (id, w) in new_waiters {
            waiters.entry(id).or_default().push(w);
        }
        let mut answers = Vec::new();
        let ready: Vec<String> = waiters
            .iter()
            .filter(|(_, ws)| ws.iter().any(|w| w.seq <= consumed))
            .map(|(id, _)| id.clone())
            .chain(duplicates)
            .collect();
        for id in ready {
            let Some(ws) = waiters.remove(&id) else { continue };
            let (now, later): (Vec<Waiter>, Vec<Waiter>) = ws.into_iter().partition(|w| w.seq <= consumed);
            if !later.is_empty() {
                waiters.insert(id.clone(), later);
            }
            for w in now {
                let a = match recent.by_id.get(&id) {
                    Some((reply, first)) => {
                        let mut reply = reply.clone();
                        // The first answer for the publish that put the event in the stream; any
                        // other request for the same id is told it was decided before.
                        reply.duplicate = w.duplicate || *first != w.seq;
                        if reply.duplicate {
                            reply.other_decisions.clear();
                        }
                        OwnerAnswer::Decided { reply: Box::new(reply) }
                    }
                    None if refusals.contains_key(&id) => {
                        refused(409, refusals.get(&id).cloned().unwrap_or_default(), false)
                    }
                    None => refused(
                        409,
                        format!(
                            "event id `{id}` was already used for another event, or its admission is no longer remembered; a new submission needs a new event id"
                        ),
                        false,
                    ),
                };
                answers.push((w.reply, a));
            }
        }
        if !answers.is_empty() {
            counters.admissions_answered.fetch_add(answers.len() as u64, Ordering::Relaxed);
            let client = ctx.nats.client.clone();
            ctx.rt.spawn(async move {
                for (reply, a) in answers {
                    answer(&client, reply, &a).await;
                }
            });
        }
        let changed = journal_seq > snapshot_journal_seq;
        let forced = last_snapshot.elapsed() >= FORCED_SNAPSHOT;
        if (want_snapshot && changed) || forced || stop == Some(true) {
            let snap = PartitionSnapshot {
                partition: p,
                engine: session.engine().snapshot(),
                journal_seq,
                events_through: session.journal().events_through(),
                admissions: recent.to_vec(),
            };
            match ctx.rt.block_on(snapshots.write(&ctx.nats, &snap)) {
                Ok(r) => {
                    snapshot_journal_seq = r.journal_seq;
                    last_snapshot = Instant::now();
                    counters.snapshots.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(partition = p, journal_seq = r.journal_seq, bytes = r.bytes, "snapshot written");
                }
                Err(e) => {
                    if matches!(e, ClusterError::Fenced { .. }) {
                        counters.fenced.fetch_add(1, Ordering::Relaxed);
                    }
                    break Exit::SteppedDown(e.to_string());
                }
            }
        }
        match stop {
            Some(true) => break Exit::Released,
            Some(false) => break Exit::SteppedDown("stopped: the lease was lost".into()),
            None => {}
        }
    };
    ctx.lease.revoke();
    for t in &tasks {
        t.abort();
    }
    // Whoever still waits asks the next owner.
    let client = ctx.nats.client.clone();
    let left: Vec<Subject> = waiters.into_values().flatten().map(|w| w.reply).collect();
    rx.close();
    let mut late = Vec::new();
    while let Ok(item) = rx.try_recv() {
        if let Item::Waiter { reply, .. } = item {
            late.push(reply);
        }
    }
    ctx.rt.block_on(async move {
        for reply in left.into_iter().chain(late) {
            answer(&client, reply, &refused(503, format!("partition {p}'s owner stepped down"), true)).await;
        }
    });
    ctx.status.remove_owned(p);
    match &exit {
        Exit::Released => tracing::info!(partition = p, epoch = ctx.epoch, "partition handed over"),
        Exit::SteppedDown(why) => tracing::warn!(partition = p, epoch = ctx.epoch, why, "partition stepped down"),
    }
    exit
}
