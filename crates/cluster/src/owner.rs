//! The owner of one partition: a thread with the partition's [`Session`] — one engine, one writer —
//! fed by the partition's events in stream order, answering admissions once their decisions are in
//! the journal.
//!
//! Taking over (before anything is answered):
//! 1. fence the snapshot subject, write a takeover marker for the partition on the journal subject
//!    the snapshot pointer names (the previous owner's writer's: from now on its batches of the
//!    partition are refused), and rewrite the pointer under the new epoch, naming this instance's
//!    writer ([`Snapshots::take_over`], [`crate::journal`]);
//! 2. restore the snapshot the pointer names and replay the partition's journal lines after the
//!    sequence it covers up to the marker, through a session of the journal's origin (decisions
//!    discarded: they are in the journal already), rebuilding the recent admissions;
//! 3. consume `bursar.events.<p>` from the sequence after the last one the journal says was
//!    consumed, and only then take admissions: `bursar.admit.<p>`, and this instance's own front end
//!    and those forwarding to it ([`LocalOwners`]).
//!
//! Running: the thread takes what is queued (events from the stream, admissions from the front
//! ends, ticks, snapshot requests; at most [`MAX_BATCH`]), applies it through the session,
//! flushes the journal once (one commit, which the instance's writer puts in one message with the
//! other partitions' commits ready at the time) and only then answers the admissions. An admission
//! is applied straight from its request, not published to the events stream first: the journal is
//! the partition's record, so an admission is durable exactly when it is answered, and one the owner
//! applied but could not journal (it died, or was fenced) was never answered and is decided afresh
//! when the front end resends it to the next owner. That saves a replicated publish and a consume
//! per admission (issue 33). When the set in force reads run history, the runs the batch saw finish
//! are sent to every other partition (`run.recorded`) before that flush, so a crash in between
//! resends them, never loses them. Any journal or snapshot error ends the thread: the partition is
//! then the next owner's, which replays what was published.
//!
//! A handover ([`Item::Stop`] with `release`) stops taking admissions first, applies and answers
//! what is already queued, writes a final snapshot and ends; the lease manager then names the
//! receiver in the lease, which takes the partition at once.

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
use tokio::sync::{mpsc, oneshot, watch};

use crate::ClusterError;
use crate::journal::{Owner, StreamJournal, Writer};
use crate::ledger::{LedgerReply, Link};
use crate::nats::Nats;
use crate::partition::{admit_subject, cursor, events_subject, ledger_partition};
use crate::snapshot::{Snapshots, last_on_subject, read_subject};
use crate::status::{Counters, OwnedState, Status};
use crate::wire::{OwnerAnswer, PartitionSnapshot};

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
    /// Run the ledger partition and link the project partitions to it (the user and tag budgets
    /// that span projects, [`crate::ledger`]). `serve --cluster` always does; a project partition
    /// asks it only when the set in force has such a quota.
    pub shared_ledgers: bool,
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
        /// Who sent it (the front end's authentication, from the message's headers).
        sender: Option<Arc<bursar_model::Sender>>,
    },
    /// A submission a front end forwarded (already decoded under the producer's rules there): apply
    /// it and answer `reply` once its decision is in the journal.
    Admit {
        /// Its event id.
        id: String,
        /// Its line.
        line: Bytes,
        /// Where to answer.
        reply: Reply,
        /// Who sent it.
        sender: Option<Arc<bursar_model::Sender>>,
    },
    /// A forwarded submission to preview (`test_only`): answer what it would get, apply nothing.
    Preview {
        /// Its line.
        line: Bytes,
        /// Where to answer.
        reply: Reply,
    },
    /// An op for the ledger partition's engine (only its owner gets these): apply it and answer
    /// `reply` once it is journaled.
    Ledger {
        /// Its line.
        line: Bytes,
        /// Where to answer.
        reply: Subject,
    },
    /// Whether the partition's engine tracks job `job` (a front end looking for the job's
    /// partition, [`crate::jobs`]): answered at once, nothing applied.
    Has {
        /// The job id.
        job: String,
        /// Where to answer.
        reply: oneshot::Sender<bool>,
    },
    /// Fire the timers due.
    Tick,
    /// Snapshot if the state changed.
    Snapshot,
    /// A source task failed.
    Failed(String),
    /// Stop; `release` hands the partition over: no more admissions, what is queued applied and
    /// answered, a final snapshot.
    Stop {
        /// Handover rather than failure.
        release: bool,
    },
}

/// Where an admission's answer goes: the reply subject of a request that came over NATS, or the
/// front end of this instance, which handed the submission to its own owner thread directly.
#[derive(Debug)]
pub enum Reply {
    /// A NATS reply subject.
    Nats(Subject),
    /// This instance's front end.
    Local(oneshot::Sender<OwnerAnswer>),
}

/// The owners of this instance that take admissions now, by partition: the front end hands a
/// submission for one of them straight to its thread, without a NATS request (an owner registers
/// once live, and unregisters as soon as it stops taking admissions).
#[derive(Debug, Default)]
pub struct LocalOwners {
    owners: std::sync::RwLock<HashMap<u32, LocalOwner>>,
}

/// One live owner of this instance.
#[derive(Debug, Clone)]
pub struct LocalOwner {
    /// Its thread's queue.
    pub tx: mpsc::Sender<Item>,
    /// Its lease, checked before each admission as the NATS subscriber checks it.
    pub lease: Arc<LeaseClock>,
    /// Its epoch (an owner unregisters only itself).
    epoch: u64,
}

impl LocalOwners {
    /// The live owner of `p` on this instance, if any.
    pub fn get(&self, p: u32) -> Option<LocalOwner> {
        self.owners.read().ok().and_then(|m| m.get(&p).cloned())
    }

    /// Every live owner of this instance, by partition.
    pub fn all(&self) -> Vec<(u32, LocalOwner)> {
        self.owners.read().map(|m| m.iter().map(|(p, o)| (*p, o.clone())).collect()).unwrap_or_default()
    }

    fn register(&self, p: u32, owner: LocalOwner) {
        if let Ok(mut m) = self.owners.write() {
            m.insert(p, owner);
        }
    }

    fn unregister(&self, p: u32, epoch: u64) {
        if let Ok(mut m) = self.owners.write()
            && m.get(&p).is_some_and(|o| o.epoch == epoch)
        {
            m.remove(&p);
        }
    }
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
    /// This instance's live owners, for its front end.
    pub local: Arc<LocalOwners>,
    /// This instance's journal writer.
    pub writer: Writer,
}

struct Recent {
    by_id: HashMap<String, AdmitReply>,
    order: VecDeque<String>,
}

impl Recent {
    fn new() -> Recent {
        Recent { by_id: HashMap::new(), order: VecDeque::new() }
    }

    /// `reply` answered the submission `id` (the first time it was decided).
    fn insert(&mut self, id: String, reply: AdmitReply) {
        if self.by_id.insert(id.clone(), reply).is_none() {
            self.order.push_back(id);
            while self.order.len() > ADMISSIONS_KEPT {
                if let Some(old) = self.order.pop_front() {
                    self.by_id.remove(&old);
                }
            }
        }
    }

    fn to_vec(&self) -> Vec<(String, Sequenced)> {
        self.order.iter().filter_map(|id| self.by_id.get(id).map(|r| (id.clone(), r.admission.clone()))).collect()
    }
}

fn first_reply(admission: Sequenced) -> AdmitReply {
    AdmitReply { admission, duplicate: false, other_decisions: Vec::new(), test_only: false, estimate: None }
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
    // 1 and 2. The snapshot fence, the journal fence on the subject of the previous writer, and the
    // pointer naming this instance's writer; then the snapshot.
    let (snapshots, fenced) =
        Snapshots::take_over(&ctx.nats, p, ctx.epoch, &ctx.instance, ctx.writer.subject()).await?;
    let marker = fenced.end;
    let set = ctx.policies.borrow().clone();
    let mut recent = Recent::new();
    let (engine, mut journal_seq, mut events_through) = match snapshots.read(&ctx.nats).await? {
        Some(s) => {
            for (id, a) in s.admissions {
                recent.insert(id, first_reply(a));
            }
            (Engine::restore(set, s.engine), s.journal_seq, s.events_through)
        }
        None => (Engine::with_config(set, ctx.settings.engine), 0, 0),
    };
    // 3. Replay the partition's batches after the snapshot, up to the fence: on the previous
    // writer's subject when it wrote the partition since before the snapshot, else on every
    // subject. A submission the ledger partition checked replays with the answer journaled beside
    // it.
    let replay = crate::ledger::Replay::default();
    let mut engine = engine;
    engine.set_ledger_client(Box::new(replay.clone()));
    let mut session = Session::new(engine, Discard, Origin::Journal);
    let mut replayed = 0u64;
    let mut failed: Option<ClusterError> = None;
    if marker > journal_seq {
        let subject = fenced.only_subject(journal_seq).unwrap_or("bursar.journal.>").to_owned();
        read_subject(&ctx.nats.journal, &subject, journal_seq + 1, |seq, m| {
            if seq > marker {
                return Ok(false);
            }
            let mut index = 0;
            for batch in crate::wire::batches(&m.payload) {
                let batch = match batch {
                    Ok(b) => b,
                    Err(e) => {
                        failed = Some(nerr(format!("decode journal message {seq}"), e));
                        return Ok(false);
                    }
                };
                if batch.partition != p || batch.takeover {
                    index += batch.entries.iter().map(|e| e.decisions.len()).sum::<usize>();
                    continue;
                }
                events_through = events_through.max(batch.events_through);
                journal_seq = seq;
                for entry in batch.entries {
                    if let Ok(mut a) = replay.0.lock() {
                        *a = entry.ledger;
                    }
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
                            recent.insert(id, first_reply(Sequenced { seq: cursor(seq, index), decision: d }));
                        }
                        index += 1;
                    }
                }
            }
            Ok(seq < marker)
        })
        .await?;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let (mut engine, _) = session.into_parts();
    engine.take_ledger_client();
    Ok(Restored { engine, marker, events_through, journal_seq: journal_seq.max(marker), recent, snapshots, replayed })
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
                Ok(info) => Item::Event {
                    seq: info.stream_sequence,
                    data: m.message.payload.clone(),
                    sender: crate::wire::sender_of(m.message.headers.as_ref()).map(Arc::new),
                },
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

async fn answer(client: &async_nats::Client, reply: Reply, a: OwnerAnswer) {
    match reply {
        Reply::Nats(subject) => {
            if let Ok(body) = serde_json::to_vec(&a) {
                let _ = client.publish(subject, body.into()).await;
            }
        }
        Reply::Local(tx) => {
            let _ = tx.send(a);
        }
    }
}

pub(crate) fn refused(status: u16, error: impl Into<String>, retry: bool) -> OwnerAnswer {
    OwnerAnswer::Refused { status, error: error.into(), retry }
}

/// The admission subscriber: checks that each request is one submission and hands it to the thread,
/// in the order the requests came. Nothing is published here: the thread applies the submission and
/// answers once its decision is in the journal.
async fn admissions(nats: Nats, partition: u32, lease: Arc<LeaseClock>, tx: mpsc::Sender<Item>) {
    let subject = admit_subject(partition);
    let mut sub = match nats.client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(Item::Failed(format!("subscribe to `{subject}`: {e}"))).await;
            return;
        }
    };
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply.clone() else { continue };
        let id = match submission_id(&msg.payload, partition, &lease) {
            Ok(id) => id,
            Err(refusal) => {
                answer(&nats.client, Reply::Nats(reply), refusal).await;
                continue;
            }
        };
        let sender = crate::wire::sender_of(msg.headers.as_ref()).map(Arc::new);
        let test_only = msg.headers.as_ref().is_some_and(|h| h.get(crate::wire::TEST_ONLY_HEADER).is_some());
        let reply = Reply::Nats(reply);
        let item = if test_only {
            Item::Preview { line: msg.payload, reply }
        } else {
            Item::Admit { id, line: msg.payload, reply, sender }
        };
        if let Err(mpsc::error::SendError(item)) = tx.send(item).await {
            if let Item::Admit { reply, .. } | Item::Preview { reply, .. } = item {
                answer(&nats.client, reply, refused(503, "the partition's owner is stepping down", true)).await;
            }
            return;
        }
    }
}

/// The event id of a forwarded submission for `partition`, or the refusal to answer: it must be
/// one `job.submitted` (under the producer's rules), and the partition's lease must still be held
/// here by `lease`'s clock.
pub(crate) fn submission_id(line: &[u8], partition: u32, lease: &LeaseClock) -> Result<String, OwnerAnswer> {
    let id = match bursar_session::decode(Frame::Line { line: 1, bytes: line }, Origin::Producer) {
        Line::Input(d) => match &d.input {
            Input::Event(e) if matches!(e.kind, EventKind::JobSubmitted(_)) => e.id.clone(),
            _ => return Err(refused(400, "expected a `job.submitted` event", false)),
        },
        Line::Rejected(r) => return Err(refused(400, format!("malformed event: {}", r.error), false)),
        Line::Blank => return Err(refused(400, "the body holds no event", false)),
    };
    if !lease.valid() {
        return Err(refused(503, format!("partition {partition}'s lease lapsed on this instance"), true));
    }
    Ok(id)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What one batch applied, and whom to answer once it is journaled.
#[derive(Default)]
struct Batch {
    /// Inputs applied: event id, receipt index, and where to answer for a forwarded admission.
    applied: Vec<(String, usize, Option<Reply>)>,
    /// Forwarded admissions that were not applied (decided before, or refused): whom to answer.
    again: Vec<(String, Reply)>,
    /// Why the engine refused an input (a second submission of a job it knows), by event id.
    refusals: HashMap<String, String>,
    /// Forwarded lines that were not a valid input after all: whom to tell, and why.
    rejected: Vec<(Reply, String)>,
    /// Ledger ops applied (or applied before): whom to answer, and an admission's answer.
    ledger: Vec<(Subject, LedgerReply)>,
    /// Previews (`test_only`) answered: nothing of them is journaled.
    previews: Vec<(Reply, OwnerAnswer)>,
    /// The runs the batch saw finish.
    runs: Vec<RunFact>,
    /// A snapshot was asked for.
    snapshot: bool,
    /// A stop was asked for (true: a handover).
    stop: Option<bool>,
    /// The session failed.
    error: Option<String>,
}

impl Batch {
    /// Every request of the batch still waiting for an answer (when the batch is not journaled).
    fn replies(self) -> impl Iterator<Item = Reply> {
        self.applied
            .into_iter()
            .filter_map(|(_, _, r)| r)
            .chain(self.again.into_iter().map(|(_, r)| r))
            .chain(self.rejected.into_iter().map(|(r, _)| r))
            .chain(self.ledger.into_iter().map(|(r, _)| Reply::Nats(r)))
            .chain(self.previews.into_iter().map(|(r, _)| r))
    }
}

/// Where the thread stands between batches.
struct Position {
    partition: u32,
    partitions: u32,
    /// Events-stream sequence consumed.
    consumed: u64,
}

/// Applies one item of a batch through the session.
fn take(session: &mut Session<StreamJournal>, item: Item, b: &mut Batch, at: &mut Position, counters: &Counters) {
    take_one(session, item, b, at, counters);
    if let Some(why) = session.engine().ledger_failure()
        && b.error.is_none()
    {
        b.error = Some(format!("cannot reach the ledger partition: {why}"));
    }
}

fn take_one(session: &mut Session<StreamJournal>, item: Item, b: &mut Batch, at: &mut Position, counters: &Counters) {
    let p = at.partition;
    match item {
        Item::Event { seq, data, sender } => {
            at.consumed = at.consumed.max(seq);
            let outcome = session.line_from(Frame::Line { line: seq, bytes: &data }, sender.as_deref());
            session.journal_mut().set_events_through(seq);
            match outcome {
                Ok(LineOutcome::Input { id, applied: Applied::Applied { entry, .. }, .. }) => {
                    counters.events_applied.fetch_add(1, Ordering::Relaxed);
                    b.runs.extend(session.engine().recorded_runs().iter().map(|r| r.fact(&id)));
                    b.applied.push((id, entry, None));
                }
                Ok(LineOutcome::Input { applied: Applied::Duplicate, .. }) => {}
                Ok(LineOutcome::Input { id, applied: Applied::Refused(r), .. }) => {
                    tracing::info!(partition = p, seq, id, reason = %r.reason, "input refused");
                    b.refusals.insert(id, r.reason);
                }
                Ok(LineOutcome::Rejected(r)) => {
                    tracing::warn!(partition = p, seq, error = %r.error, "an event in the stream is not valid; skipped")
                }
                Ok(LineOutcome::Blank) => {}
                Err(e) => b.error = Some(e.to_string()),
            }
        }
        Item::Admit { id, line, reply, sender } => {
            match session.line_from(Frame::Line { line: 1, bytes: &line }, sender.as_deref()) {
                Ok(LineOutcome::Input { id, applied: Applied::Applied { entry, .. }, .. }) => {
                    counters.events_applied.fetch_add(1, Ordering::Relaxed);
                    b.applied.push((id, entry, Some(reply)));
                }
                Ok(LineOutcome::Input { applied: Applied::Duplicate, .. }) => b.again.push((id, reply)),
                Ok(LineOutcome::Input { applied: Applied::Refused(r), .. }) => {
                    b.refusals.insert(id.clone(), r.reason);
                    b.again.push((id, reply));
                }
                Ok(LineOutcome::Rejected(r)) => b.rejected.push((reply, format!("malformed event: {}", r.error))),
                Ok(LineOutcome::Blank) => b.rejected.push((reply, "the body holds no event".into())),
                Err(e) => {
                    b.again.push((id, reply));
                    b.error = Some(e.to_string());
                }
            }
        }
        Item::Preview { line, reply } => {
            let text = String::from_utf8_lossy(&line);
            let answer = match bursar_model::decode_event(&text) {
                Ok(event) => match session.engine_mut().preview(&event, Some(&text)) {
                    Ok(decisions) => {
                        let mut ds: Vec<Sequenced> =
                            decisions.into_iter().map(|decision| Sequenced { seq: 0, decision }).collect();
                        match ds.iter().position(|d| d.decision.admission) {
                            Some(pos) => {
                                let admission = ds.remove(pos);
                                OwnerAnswer::Decided {
                                    reply: Box::new(AdmitReply {
                                        admission,
                                        duplicate: false,
                                        other_decisions: ds,
                                        test_only: true,
                                        estimate: None,
                                    }),
                                }
                            }
                            None => refused(500, "the engine made no admission decision", false),
                        }
                    }
                    Err(why) => refused(409, why, false),
                },
                Err(e) => refused(400, format!("malformed event: {e}"), false),
            };
            b.previews.push((reply, answer));
        }
        Item::Ledger { line, reply } => match session.line(Frame::Line { line: 1, bytes: &line }) {
            Ok(LineOutcome::Input { applied: Applied::Applied { .. } | Applied::Duplicate, .. }) => {
                counters.ledger_applied.fetch_add(1, Ordering::Relaxed);
                b.ledger.push((reply, LedgerReply::Done { answer: session.engine().ledger_answer().cloned() }));
            }
            Ok(LineOutcome::Input { applied: Applied::Refused(r), .. }) => {
                b.ledger.push((reply, LedgerReply::Refused { error: r.reason, retry: false }))
            }
            Ok(LineOutcome::Rejected(r)) => {
                let error = format!("not a ledger op: {}", r.error);
                b.ledger.push((reply, LedgerReply::Refused { error, retry: false }))
            }
            Ok(LineOutcome::Blank) => {
                b.ledger.push((reply, LedgerReply::Refused { error: "the op is empty".into(), retry: false }))
            }
            Err(e) => {
                b.ledger.push((reply, LedgerReply::Refused { error: e.to_string(), retry: true }));
                b.error = Some(e.to_string());
            }
        },
        Item::Tick => {
            let now = Timestamp::wall_clock().millis();
            // Each partition's ticks fall on their own milliseconds (≡ p mod the count + 1: the
            // ledger partition is number `count`), so two partitions never journal a tick with the
            // same id.
            let n = i64::from(at.partitions) + 1;
            let t = now - now.rem_euclid(n) + i64::from(p);
            if let Err(e) = session.wall_tick(Timestamp(t)) {
                b.error = Some(e.to_string());
            }
        }
        Item::Has { job, reply } => {
            let _ = reply.send(session.engine().state().job(&job).is_some());
        }
        Item::Snapshot => b.snapshot = true,
        Item::Failed(e) => b.error = Some(e),
        Item::Stop { release } => {
            // A loss of the lease wins over a handover asked for before it.
            b.stop = Some(b.stop.unwrap_or(true) && release);
        }
    }
}

/// The answer to a forwarded admission that was not applied in its batch: the first decision for
/// its id, or why there is none.
fn answer_again(recent: &Recent, refusals: &HashMap<String, String>, id: &str) -> OwnerAnswer {
    match recent.by_id.get(id) {
        Some(reply) => {
            let mut reply = reply.clone();
            reply.duplicate = true;
            reply.other_decisions.clear();
            OwnerAnswer::Decided { reply: Box::new(reply) }
        }
        None => match refusals.get(id) {
            Some(why) => refused(409, why.clone(), false),
            None => refused(
                409,
                format!(
                    "event id `{id}` was already used for another event, or its admission is no longer remembered; a new submission needs a new event id"
                ),
                false,
            ),
        },
    }
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
    let Restored { mut engine, marker, events_through, mut journal_seq, mut recent, mut snapshots, replayed } =
        restored;
    let max_message = ctx.settings.max_message;
    let keeps_ledgers = p == ledger_partition(ctx.nats.partitions);
    let mut journal = StreamJournal::new(
        ctx.rt.clone(),
        ctx.writer.clone(),
        Owner { partition: p, epoch: ctx.epoch, instance: ctx.instance.clone() },
        marker,
        events_through,
        max_message,
    );
    // A project partition checks the quotas spanning projects with the ledger partition.
    let link = (ctx.settings.shared_ledgers && !keeps_ledgers).then(|| {
        let link = Link::new(ctx.nats.clone(), ctx.rt.clone(), p, ctx.lease.clone(), ctx.status.clone());
        engine.set_ledger_client(Box::new(crate::ledger::Client(link.clone())));
        link
    });
    if let Some(link) = &link {
        journal = journal.with_answers(link.answered());
    }
    let mut session = match Session::open(engine, journal, Origin::Cluster) {
        Ok(s) => s,
        Err(e) => {
            ctx.status.remove_owned(p);
            return Exit::SteppedDown(e.to_string());
        }
    };
    let counters: &Counters = &ctx.status.counters;
    let consumer = ctx.rt.spawn(consume(ctx.nats.clone(), p, events_through + 1, tx.clone()));
    // Ticks and snapshot requests.
    let ticker = {
        let (tick, every, tx) = (ctx.settings.tick, ctx.settings.snapshot_every, tx.clone());
        ctx.rt.spawn(async move {
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
        })
    };
    let mut admitting: Option<tokio::task::JoinHandle<()>> = None;
    // Catch up before answering: the partition's events the stream holds now are applied first.
    let head = match ctx.rt.block_on(last_on_subject(&ctx.nats.events, &events_subject(p))) {
        Ok(h) => h,
        Err(e) => {
            consumer.abort();
            ticker.abort();
            ctx.status.remove_owned(p);
            return Exit::SteppedDown(e.to_string());
        }
    };
    let mut at = Position { partition: p, partitions: ctx.nats.partitions.max(1), consumed: events_through };
    let mut policies = ctx.policies.clone();
    let mut last_snapshot = Instant::now();
    let mut snapshot_journal_seq = snapshots.current().map(|r| r.journal_seq).unwrap_or(0);
    let mut items: Vec<Item> = Vec::with_capacity(MAX_BATCH);
    let mut unanswered: Vec<Reply> = Vec::new();
    let mut seen_mismatches = 0u64;
    let exit = loop {
        if admitting.is_none() && at.consumed >= head {
            admitting = Some(if keeps_ledgers {
                ctx.rt.spawn(crate::ledger::ops(ctx.nats.clone(), ctx.lease.clone(), tx.clone()))
            } else {
                // This instance's front end hands its submissions for the partition straight to
                // this thread; the others' come through the subscriber.
                let local = LocalOwner { tx: tx.clone(), lease: ctx.lease.clone(), epoch: ctx.epoch };
                ctx.local.register(p, local);
                ctx.rt.spawn(admissions(ctx.nats.clone(), p, ctx.lease.clone(), tx.clone()))
            });
            let ms = started.elapsed().as_secs_f64() * 1e3;
            ctx.status.set_owned(p, OwnedState::live(ctx.epoch, ms, replayed));
            counters.takeovers.fetch_add(1, Ordering::Relaxed);
            tracing::info!(partition = p, epoch = ctx.epoch, replayed, ms, "partition live: restored and caught up");
        }
        let wait = if admitting.is_some() { Duration::from_secs(3600) } else { Duration::from_millis(50) };
        let first = ctx.rt.block_on(async { tokio::time::timeout(wait, rx.recv()).await });
        match first {
            Ok(Some(item)) => items.push(item),
            Ok(None) => break Exit::SteppedDown("every sender is gone".into()),
            Err(_) => continue,
        }
        while items.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(item) => items.push(item),
                Err(_) => break,
            }
        }
        if policies.has_changed().unwrap_or(false) {
            let set = policies.borrow_and_update().clone();
            if let Err(e) = session.set_policies(set) {
                break Exit::SteppedDown(e.to_string());
            }
        }
        let applying = Instant::now();
        let mut b = Batch::default();
        let mut queue = items.drain(..);
        for item in queue.by_ref() {
            take(&mut session, item, &mut b, &mut at, counters);
            if b.error.is_some() || b.stop == Some(false) {
                break;
            }
        }
        // Whatever the loop did not reach waits for nobody but its requester.
        for item in queue {
            if let Item::Admit { reply, .. } = item {
                unanswered.push(reply);
            }
        }
        if b.stop == Some(true) && b.error.is_none() {
            // A handover: no new admissions (the front ends retry theirs at the receiver), no new
            // events (the receiver consumes from where the final snapshot ends); what is queued
            // already is applied and answered here.
            ctx.local.unregister(p, ctx.epoch);
            if let Some(t) = admitting.take() {
                t.abort();
            }
            consumer.abort();
            for _ in 0..4 * MAX_BATCH {
                let Ok(item) = rx.try_recv() else { break };
                if !matches!(item, Item::Stop { .. }) {
                    take(&mut session, item, &mut b, &mut at, counters);
                }
                if b.error.is_some() {
                    break;
                }
            }
        }
        if let Some(e) = b.error.take() {
            unanswered.extend(b.replies());
            break Exit::SteppedDown(e);
        }
        // The runs this batch saw finish go to every other partition before the batch is journalled:
        // if this owner dies in between, the next one applies the same `job.finished` again (the
        // journal does not have it yet) and sends the same facts, with the same ids. Only when a
        // policy of the set reads run history: otherwise they would be written for nothing (issue
        // 33: 71k of 89k audit rows in a minute were such facts).
        if !b.runs.is_empty() {
            if session.engine().policies().reads_runs() {
                if let Err(e) = ctx.rt.block_on(send_runs(&ctx.nats, p, &b.runs)) {
                    unanswered.extend(b.replies());
                    break Exit::SteppedDown(format!("cannot send run facts to the other partitions: {e}"));
                }
                let copies = (b.runs.len() as u64) * u64::from(at.partitions - 1);
                counters.run_facts_sent.fetch_add(copies, Ordering::Relaxed);
            } else {
                counters.run_facts_skipped.fetch_add(b.runs.len() as u64, Ordering::Relaxed);
            }
        }
        // What this batch changed of jobs admitted through the ledger partition is applied there
        // before the batch is journaled here: a later admission anywhere sees it.
        if let Some(link) = &link
            && let Err(e) = link.sync()
        {
            unanswered.extend(b.replies());
            break Exit::SteppedDown(format!("cannot reach the ledger partition: {e}"));
        }
        let mismatches = session.engine().ledger_mismatches();
        if mismatches > seen_mismatches {
            counters.ledger_mismatches.fetch_add(mismatches - seen_mismatches, Ordering::Relaxed);
            tracing::warn!(
                partition = p,
                "a spanning admission was decided otherwise here than by the ledger partition (policy sets out of step?)"
            );
            seen_mismatches = mismatches;
        }
        let flushing = Instant::now();
        counters.apply_micros.fetch_add(micros(flushing - applying), Ordering::Relaxed);
        let mut receipts = match session.flush() {
            Ok(r) => {
                if !r.is_empty() {
                    counters.flushes.fetch_add(1, Ordering::Relaxed);
                    counters.flushed_entries.fetch_add(r.len() as u64, Ordering::Relaxed);
                    counters.flush_micros.fetch_add(micros(flushing.elapsed()), Ordering::Relaxed);
                }
                r
            }
            Err(e) => {
                if session.journal().fenced() {
                    counters.fenced.fetch_add(1, Ordering::Relaxed);
                }
                unanswered.extend(b.replies());
                break Exit::SteppedDown(e.to_string());
            }
        };
        journal_seq = journal_seq.max(session.journal().last_seq());
        // What the batch decided, then the answers.
        let mut answers: Vec<(Reply, OwnerAnswer)> = Vec::new();
        for (id, entry, reply) in b.applied {
            let admission = receipts.get_mut(entry).and_then(|r| {
                let mut ds = std::mem::take(&mut r.decisions);
                let pos = ds.iter().position(|d| d.decision.admission && d.decision.event_id == id)?;
                let admission = ds.remove(pos);
                Some(AdmitReply { admission, duplicate: false, other_decisions: ds, test_only: false, estimate: None })
            });
            match (admission, reply) {
                (Some(a), Some(reply)) => {
                    answers.push((reply, OwnerAnswer::Decided { reply: Box::new(a.clone()) }));
                    recent.insert(id, a);
                }
                (Some(a), None) => recent.insert(id, a),
                (None, Some(reply)) => answers.push((reply, answer_again(&recent, &b.refusals, &id))),
                (None, None) => {}
            }
        }
        for (id, reply) in b.again {
            answers.push((reply, answer_again(&recent, &b.refusals, &id)));
        }
        for (reply, why) in b.rejected {
            answers.push((reply, refused(400, why, false)));
        }
        answers.extend(b.previews);
        let ledger_answers = b.ledger;
        if !ledger_answers.is_empty() {
            let nats = ctx.nats.clone();
            ctx.rt.spawn(async move {
                for (reply, a) in ledger_answers {
                    crate::ledger::answer(&nats, reply, &a).await;
                }
            });
        }
        if !answers.is_empty() {
            counters.admissions_answered.fetch_add(answers.len() as u64, Ordering::Relaxed);
            // This instance's front end is answered from here; NATS requesters by a task.
            let mut remote = Vec::new();
            for (reply, a) in answers {
                match reply {
                    Reply::Local(tx) => {
                        let _ = tx.send(a);
                    }
                    nats => remote.push((nats, a)),
                }
            }
            if !remote.is_empty() {
                let client = ctx.nats.client.clone();
                ctx.rt.spawn(async move {
                    for (reply, a) in remote {
                        answer(&client, reply, a).await;
                    }
                });
            }
        }
        let changed = journal_seq > snapshot_journal_seq;
        let forced = last_snapshot.elapsed() >= FORCED_SNAPSHOT;
        if (b.snapshot && changed) || forced || b.stop == Some(true) {
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
        match b.stop {
            Some(true) => break Exit::Released,
            Some(false) => break Exit::SteppedDown("stopped: the lease was lost".into()),
            None => {}
        }
    };
    ctx.lease.revoke();
    ctx.local.unregister(p, ctx.epoch);
    for t in [Some(consumer), Some(ticker), admitting].into_iter().flatten() {
        t.abort();
    }
    // Whoever still waits asks the next owner.
    rx.close();
    while let Ok(item) = rx.try_recv() {
        if let Item::Admit { reply, .. } | Item::Preview { reply, .. } = item {
            unanswered.push(reply);
        }
    }
    let client = ctx.nats.client.clone();
    ctx.rt.block_on(async move {
        for reply in unanswered {
            answer(&client, reply, refused(503, format!("partition {p}'s owner stepped down"), true)).await;
        }
    });
    ctx.status.remove_owned(p);
    match &exit {
        Exit::Released => tracing::info!(partition = p, epoch = ctx.epoch, "partition handed over"),
        Exit::SteppedDown(why) => tracing::warn!(partition = p, epoch = ctx.epoch, why, "partition stepped down"),
    }
    exit
}
