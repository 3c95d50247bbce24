//! The journal, each partition's log of truth, on `BURSAR_JOURNAL`: every instance's [`Writer`], and
//! [`StreamJournal`], one owned partition's [`Journal`] through it.
//!
//! **One message for the partitions' commits that are ready together** (issue 54). An instance's
//! writer is one task that publishes the group commits of every partition the instance owns: the
//! commits that wait while a publish is in flight go out together as the next message, one line (a
//! [`crate::wire::JournalBatch`]) per commit, on the instance's own subject
//! `bursar.journal.w.<instance>-<start>`. One message is in flight at a time, each published with
//! `Nats-Expected-Last-Subject-Sequence` = the writer's last message; an owner's flush waits for
//! its commit's acknowledgement. Eight clients' admissions spread over sixteen partitions gave each
//! partition's commit one entry; one instance's commits together hold them all.
//!
//! **Fencing.** Partition p's snapshot pointer names the subject its owner writes on
//! ([`crate::wire::SnapshotPointer::journal`]). A new owner first writes a *fence* (a takeover line
//! for p with its epoch, [`fence`]) on that subject, then rewrites the pointer to name its own
//! (compare-and-set on the revision, [`crate::snapshot::Snapshots::take_over`]). The fence moves the
//! old writer's subject, so its next publish is refused (`wrong last sequence`); the old writer then
//! reads what was written on its subject since its last message, refuses every commit of a partition
//! a newer epoch fenced (that owner steps down, its admissions unanswered), and publishes the others
//! again. So once the fence is written, nothing of the old owner for p reaches the journal, however
//! long it was paused and whatever its clock says; and every batch of p in the stream lies between
//! the fence that made its owner p's writer and the fence that ended it, so a new owner replays p by
//! reading p's lines from its snapshot to its own fence. Any other failed publish is settled the same
//! way: the writer reads its subject, and its message is either there (the commits are durable) or
//! not (their owners step down; the next owner replays what the journal holds, so nothing is
//! answered that is not durable, and nothing is doubled).
//!
//! Receipts number each decision with its cursor ([`crate::partition::cursor`]): the message's
//! stream sequence and the decision's index among all the decisions of the message.
//!
//! For the tests of a crash in the middle of a batch, `BURSAR_TEST_JOURNAL_STALL` makes the writer
//! stop for good at one point of its first message holding at least N entries, saying so in the
//! log: `before-publish:N` (every commit of it applied, none stored) or `after-ack:N` (stored, no
//! owner told, so nothing answered); the test then kills the process. Unset, as everywhere but in
//! those tests, nothing stalls.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bursar_engine::{PolicySet, Transition};
use bursar_model::Decision;
use bursar_model::api::Sequenced;
use bursar_session::{Entry, Journal, JournalError, Receipt};
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use crate::ClusterError;
use crate::partition::cursor;
use crate::status::Status;
use crate::wire::{COMMIT_HEADER, EPOCH_HEADER, JournalBatchOut, PolicyLoad, ReloadFailure};

/// How long an owner waits for its commit's acknowledgement before stepping down.
const COMMIT_WAIT: Duration = Duration::from_secs(15);

/// How long one publish waits for its acknowledgement before the writer reads its subject to see.
const PUBLISH_WAIT: Duration = Duration::from_secs(10);

/// Commits queued for the writer before an owner's flush waits for room.
const QUEUE: usize = 4096;

/// The environment variable of the test stall (see the module's documentation).
pub const STALL_VAR: &str = "BURSAR_TEST_JOURNAL_STALL";

/// Where the writer stalls for a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    /// Before publishing the first message of at least this many entries.
    BeforePublish(usize),
    /// After that message is acknowledged, before any owner is told.
    AfterAck(usize),
}

impl Stall {
    fn from_env() -> Option<Stall> {
        let v = std::env::var(STALL_VAR).ok()?;
        let (at, n) = v.split_once(':')?;
        let n = n.trim().parse().ok()?;
        match at.trim() {
            "before-publish" => Some(Stall::BeforePublish(n)),
            "after-ack" => Some(Stall::AfterAck(n)),
            _ => None,
        }
    }

    /// Stops the writer for good if a message of `entries` reaches this stall, before it is
    /// published (`before`) or once it is acknowledged.
    async fn at(this: Option<Stall>, before: bool, entries: usize) {
        let n = match this {
            Some(Stall::BeforePublish(n)) if before => n,
            Some(Stall::AfterAck(n)) if !before => n,
            _ => return,
        };
        if entries >= n {
            tracing::warn!(stall = ?this, entries, "test stall: the journal writer stops here ({STALL_VAR})");
            std::future::pending::<()>().await;
        }
    }
}

#[derive(Serialize)]
struct EntryRef<'a> {
    raw: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    decisions: &'a [Decision],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    steps: &'a [Transition],
    policy_set: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ledger: Option<&'a bursar_engine::LedgerAnswer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sender: Option<&'a bursar_model::Sender>,
}

/// Publishes `payload` on `subject` only if the subject's last message is `expected` (0: none),
/// with the writer's fencing `epoch` in [`EPOCH_HEADER`] when it has one; returns the new message's
/// stream sequence.
pub async fn publish_fenced(
    js: &jetstream::Context,
    subject: String,
    expected: u64,
    epoch: Option<u64>,
    extra: &[(&str, String)],
    payload: Vec<u8>,
) -> Result<u64, String> {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Expected-Last-Subject-Sequence", expected.to_string().as_str());
    if let Some(epoch) = epoch {
        headers.insert(EPOCH_HEADER, epoch.to_string().as_str());
    }
    for (k, v) in extra {
        headers.insert(*k, v.as_str());
    }
    let ack =
        js.publish_with_headers(subject, headers, payload.into()).await.map_err(|e| e.to_string())?.await.map_err(
            |e| match e.kind() {
                jetstream::context::PublishErrorKind::WrongLastSequence => {
                    "fenced: another owner wrote to the subject since (wrong last sequence)".to_owned()
                }
                _ => e.to_string(),
            },
        )?;
    Ok(ack.sequence)
}

/// Writes the fence of partition `partition` for `epoch` (a takeover line) on journal subject
/// `subject`, its previous writer's; returns its stream sequence. Unconditional: whatever that
/// writer stored before it stays part of the partition's history, and its next publish, which
/// expects its own last message, is refused.
pub async fn fence(
    js: &jetstream::Context,
    subject: &str,
    partition: u32,
    epoch: u64,
    instance: &str,
) -> Result<u64, ClusterError> {
    let payload = serde_json::to_vec(&JournalBatchOut {
        partition,
        epoch,
        instance,
        events_through: 0,
        takeover: true,
        policy_sets: &[],
        reload_failures: &[],
        entries: &[],
    })
    .map_err(|e| ClusterError::Nats { what: "encode a fence".into(), error: e.to_string() })?;
    let mut headers = HeaderMap::new();
    headers.insert(EPOCH_HEADER, epoch.to_string().as_str());
    let what = || format!("fence `{subject}` for partition {partition}");
    let ack = js
        .publish_with_headers(subject.to_owned(), headers, payload.into())
        .await
        .map_err(|e| ClusterError::Nats { what: what(), error: e.to_string() })?
        .await
        .map_err(|e| ClusterError::Nats { what: what(), error: e.to_string() })?;
    Ok(ack.sequence)
}

/// One owner's commit: its lines (a batch each, serialised) and how many decisions each holds.
struct Commit {
    partition: u32,
    epoch: u64,
    /// Entries in all its lines.
    entries: usize,
    lines: Vec<Vec<u8>>,
    decisions: Vec<usize>,
    /// Per line: the stream sequence of its message and the index of its first decision there.
    reply: oneshot::Sender<Result<Vec<(u64, usize)>, String>>,
}

impl Commit {
    fn bytes(&self) -> usize {
        self.lines.iter().map(|l| l.len() + 1).sum()
    }

    fn fail(self, why: &str) {
        let _ = self.reply.send(Err(why.to_owned()));
    }
}

/// This instance's journal writer: where its owners send their commits.
#[derive(Debug, Clone)]
pub struct Writer {
    tx: mpsc::Sender<Commit>,
    subject: Arc<str>,
}

impl std::fmt::Debug for Commit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commit").field("partition", &self.partition).field("lines", &self.lines.len()).finish()
    }
}

impl Writer {
    /// Starts the writer of instance `instance` on `rt`: its subject is
    /// `bursar.journal.w.<instance>-<now in ms>` (a restarted instance writes a new one), its messages
    /// at most `max_bytes`.
    pub fn start(
        rt: &tokio::runtime::Handle,
        js: jetstream::Context,
        journal: jetstream::stream::Stream,
        instance: &str,
        max_bytes: usize,
        status: Arc<Status>,
    ) -> Writer {
        let incarnation = format!("{instance}-{}", bursar_model::Timestamp::wall_clock().millis());
        let subject: Arc<str> = Arc::from(crate::partition::writer_subject(&incarnation));
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = Task {
            js,
            journal,
            subject: subject.clone(),
            incarnation,
            max_bytes: max_bytes.max(4096),
            last: None,
            fenced: HashMap::new(),
            published: 0,
            status,
            stall: Stall::from_env(),
        };
        rt.spawn(task.run(rx));
        Writer { tx, subject }
    }

    /// The subject this writer publishes on.
    pub fn subject(&self) -> &str {
        &self.subject
    }
}

/// The writer's task.
struct Task {
    js: jetstream::Context,
    journal: jetstream::stream::Stream,
    subject: Arc<str>,
    incarnation: String,
    max_bytes: usize,
    /// The last stream sequence on the subject as this writer knows it (`None`: not read yet).
    last: Option<u64>,
    /// Per partition, the newest epoch a fence on this subject named.
    fenced: HashMap<u32, u64>,
    /// Publishes made (the commit header's number).
    published: u64,
    status: Arc<Status>,
    /// A test's stall.
    stall: Option<Stall>,
}

/// How a publish went.
enum Published {
    Stored(u64),
    /// Refused: the subject moved (a fence).
    Moved,
    /// Unknown: no acknowledgement, or another error.
    Unknown(String),
}

impl Task {
    async fn run(mut self, mut rx: mpsc::Receiver<Commit>) {
        let mut queue: VecDeque<Commit> = VecDeque::new();
        loop {
            if queue.is_empty() {
                match rx.recv().await {
                    Some(c) => queue.push_back(c),
                    None => return,
                }
            }
            while let Ok(c) = rx.try_recv() {
                queue.push_back(c);
            }
            if self.last.is_none()
                && let Err(e) = self.read_on(None).await
            {
                for c in queue.drain(..) {
                    c.fail(&format!("cannot read the journal subject `{}`: {e}", self.subject));
                }
                continue;
            }
            // The commits that fit one message (at least one: a larger one goes out alone, in
            // several).
            let mut batch = Vec::new();
            let mut size = 0;
            while let Some(c) = queue.front() {
                let n = c.bytes();
                if !batch.is_empty() && size + n > self.max_bytes {
                    break;
                }
                size += n;
                if let Some(c) = queue.pop_front() {
                    batch.push(c);
                }
            }
            if batch.len() == 1 && size > self.max_bytes {
                if let Some(c) = batch.pop() {
                    self.write_alone(c).await;
                }
            } else {
                self.write(batch).await;
            }
        }
    }

    fn refuse_fenced(&self, batch: Vec<Commit>) -> Vec<Commit> {
        let mut keep = Vec::with_capacity(batch.len());
        for c in batch {
            match self.fenced.get(&c.partition) {
                Some(e) if *e > c.epoch => {
                    let why = format!(
                        "fenced: partition {} was taken over (epoch {e} after {}); its commit is not journaled",
                        c.partition, c.epoch
                    );
                    c.fail(&why);
                }
                _ => keep.push(c),
            }
        }
        keep
    }

    /// Publishes the commits of `batch` as one message, again without those a fence refuses until
    /// it is stored or its fate is known.
    async fn write(&mut self, batch: Vec<Commit>) {
        let mut batch = self.refuse_fenced(batch);
        while !batch.is_empty() {
            let mut payload = Vec::with_capacity(batch.iter().map(Commit::bytes).sum());
            for line in batch.iter().flat_map(|c| &c.lines) {
                payload.extend_from_slice(line);
                payload.push(b'\n');
            }
            let entries = batch.iter().map(|c| c.entries).sum();
            Stall::at(self.stall, true, entries).await;
            match self.publish(payload).await {
                Published::Stored(seq) => {
                    Stall::at(self.stall, false, entries).await;
                    return self.stored(seq, batch);
                }
                Published::Moved => match self.read_on(None).await {
                    Ok(_) => batch = self.refuse_fenced(batch),
                    Err(e) => return fail_all(batch, &e),
                },
                Published::Unknown(e) => {
                    let id = self.commit_id();
                    match self.read_on(Some(&id)).await {
                        // It was stored after all: the commits are durable.
                        Ok(Some(seq)) => return self.stored(seq, batch),
                        Ok(None) => return fail_all(batch, &format!("the journal publish failed: {e}")),
                        Err(r) => return fail_all(batch, &format!("the journal publish failed: {e}; then: {r}")),
                    }
                }
            }
        }
    }

    /// The commits of `batch` are in the message at `seq`: each line's place in it goes back.
    fn stored(&self, seq: u64, batch: Vec<Commit>) {
        let counters = &self.status.counters;
        counters.journal_messages.fetch_add(1, Ordering::Relaxed);
        let mut index = 0;
        for c in batch {
            counters.journal_message_entries.fetch_add(c.entries as u64, Ordering::Relaxed);
            let mut at = Vec::with_capacity(c.lines.len());
            for n in &c.decisions {
                at.push((seq, index));
                index += n;
            }
            let _ = c.reply.send(Ok(at));
        }
    }

    /// A commit larger than one message: its lines in as many messages as it takes. If one of them
    /// fails, the lines before it stay in the journal (the next owner replays them) and the commit
    /// fails.
    async fn write_alone(&mut self, c: Commit) {
        let Some(c) = self.refuse_fenced(vec![c]).pop() else { return };
        let mut at = Vec::with_capacity(c.lines.len());
        let mut start = 0;
        while start < c.lines.len() {
            let mut end = start;
            let mut size = 0;
            while end < c.lines.len() && (end == start || size + c.lines[end].len() < self.max_bytes) {
                size += c.lines[end].len() + 1;
                end += 1;
            }
            let mut payload = Vec::with_capacity(size);
            for line in &c.lines[start..end] {
                payload.extend_from_slice(line);
                payload.push(b'\n');
            }
            match self.publish(payload).await {
                Published::Stored(seq) => {
                    let mut index = 0;
                    for n in &c.decisions[start..end] {
                        at.push((seq, index));
                        index += n;
                    }
                }
                Published::Moved => {
                    let _ = self.read_on(None).await;
                    return c.fail("fenced: the journal subject moved while a large commit was written");
                }
                Published::Unknown(e) => {
                    let _ = self.read_on(None).await;
                    return c.fail(&format!("the journal publish failed: {e}"));
                }
            }
            start = end;
        }
        self.status.counters.journal_messages.fetch_add(1, Ordering::Relaxed);
        self.status.counters.journal_message_entries.fetch_add(c.entries as u64, Ordering::Relaxed);
        let _ = c.reply.send(Ok(at));
    }

    fn commit_id(&self) -> String {
        format!("{}/{}", self.incarnation, self.published)
    }

    /// One publish, expecting the subject's last message to be this writer's last.
    async fn publish(&mut self, payload: Vec<u8>) -> Published {
        self.published += 1;
        let id = self.commit_id();
        let expected = self.last.unwrap_or(0);
        let header = [(COMMIT_HEADER, id)];
        let fut = publish_fenced(&self.js, self.subject.to_string(), expected, None, &header, payload);
        match tokio::time::timeout(PUBLISH_WAIT, fut).await {
            Ok(Ok(seq)) => {
                self.last = Some(seq);
                Published::Stored(seq)
            }
            Ok(Err(e)) if e.starts_with("fenced") => Published::Moved,
            Ok(Err(e)) => Published::Unknown(e),
            Err(_) => Published::Unknown(format!("not acknowledged within {PUBLISH_WAIT:?}")),
        }
    }

    /// Reads what was written on the subject after this writer's last message: the fences (noted)
    /// and, when `mine` is given, the message of that commit id (its sequence is returned). Moves the
    /// writer's last message to the subject's.
    async fn read_on(&mut self, mine: Option<&str>) -> Result<Option<u64>, String> {
        let head = crate::snapshot::last_on_subject(&self.journal, &self.subject).await.map_err(|e| e.to_string())?;
        let from = self.last.unwrap_or(0);
        let mut found = None;
        if head > from {
            let fenced = &mut self.fenced;
            crate::snapshot::read_subject(&self.journal, &self.subject, from + 1, |seq, m| {
                if let Some(id) = mine
                    && m.headers.as_ref().and_then(|h| h.get(COMMIT_HEADER)).is_some_and(|v| v.as_str() == id)
                {
                    found = Some(seq);
                }
                for b in crate::wire::batches(&m.payload).flatten() {
                    if b.takeover {
                        let e = fenced.entry(b.partition).or_insert(0);
                        *e = (*e).max(b.epoch);
                    }
                }
                Ok(seq < head)
            })
            .await
            .map_err(|e| e.to_string())?;
        }
        self.last = Some(head);
        Ok(found)
    }
}

fn fail_all(batch: Vec<Commit>, why: &str) {
    for c in batch {
        c.fail(why);
    }
}

/// The owner of a partition: its number, epoch and instance.
#[derive(Debug, Clone)]
pub struct Owner {
    /// The partition.
    pub partition: u32,
    /// The fencing epoch.
    pub epoch: u64,
    /// This instance.
    pub instance: Arc<str>,
}

/// The journal of one owned partition, written through its instance's [`Writer`].
#[derive(Debug)]
pub struct StreamJournal {
    rt: tokio::runtime::Handle,
    writer: Writer,
    owner: Owner,
    /// The stream sequence of the last message holding this partition's batches (or of its
    /// takeover's fence).
    last_seq: u64,
    max_bytes: usize,
    events_through: u64,
    entries: Vec<Box<RawValue>>,
    decisions: Vec<Vec<Decision>>,
    loads: Vec<PolicyLoad>,
    failures: Vec<ReloadFailure>,
    fenced: bool,
    /// Where the ledger link leaves the answer of the submission being applied, journaled beside it.
    answered: Option<crate::ledger::Answered>,
}

impl StreamJournal {
    /// A journal continuing after the message at `last_seq` (the owner's takeover fence), with
    /// batches of at most `max_bytes`.
    pub fn new(
        rt: tokio::runtime::Handle,
        writer: Writer,
        owner: Owner,
        last_seq: u64,
        events_through: u64,
        max_bytes: usize,
    ) -> StreamJournal {
        StreamJournal {
            rt,
            writer,
            owner,
            last_seq,
            max_bytes: max_bytes.max(4096),
            events_through,
            entries: Vec::new(),
            decisions: Vec::new(),
            loads: Vec::new(),
            failures: Vec::new(),
            fenced: false,
            answered: None,
        }
    }

    /// Journals, beside each submission, the answer the ledger partition gave it (left in
    /// `answered` by the partition's [`crate::ledger::Link`]).
    pub fn with_answers(mut self, answered: crate::ledger::Answered) -> StreamJournal {
        self.answered = Some(answered);
        self
    }

    /// Every event of the partition up to this events-stream sequence has been consumed (applied,
    /// or found a duplicate): recorded in the next batch.
    pub fn set_events_through(&mut self, seq: u64) {
        self.events_through = self.events_through.max(seq);
    }

    /// The events-stream sequence consumed so far.
    pub fn events_through(&self) -> u64 {
        self.events_through
    }

    /// The stream sequence of the last message holding this partition's batches (or of the fence).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// True once a commit was refused or failed: nothing more is written.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    fn line(&self, entries: &[Box<RawValue>], first: bool) -> Result<Vec<u8>, JournalError> {
        let (loads, failures): (&[PolicyLoad], &[ReloadFailure]) =
            if first { (&self.loads, &self.failures) } else { (&[], &[]) };
        serde_json::to_vec(&JournalBatchOut {
            partition: self.owner.partition,
            epoch: self.owner.epoch,
            instance: &self.owner.instance,
            events_through: self.events_through,
            takeover: false,
            policy_sets: loads,
            reload_failures: failures,
            entries,
        })
        .map_err(|e| JournalError::Store(format!("cannot encode a journal batch: {e}")))
    }

    /// Hands the lines to the writer and waits for their place in the journal.
    fn commit(
        &mut self,
        entries: usize,
        lines: Vec<Vec<u8>>,
        decisions: Vec<usize>,
    ) -> Result<Vec<(u64, usize)>, JournalError> {
        let p = self.owner.partition;
        let (reply, rx) = oneshot::channel();
        let commit = Commit { partition: p, epoch: self.owner.epoch, entries, lines, decisions, reply };
        let tx = self.writer.tx.clone();
        let result = self.rt.block_on(async move {
            tx.send(commit).await.map_err(|_| "the journal writer stopped".to_owned())?;
            match tokio::time::timeout(COMMIT_WAIT, rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err("the journal writer stopped".to_owned()),
                Err(_) => Err(format!("the commit was not acknowledged within {COMMIT_WAIT:?}")),
            }
        });
        result.map_err(|e| {
            self.fenced = true;
            JournalError::Store(format!("partition {p}: {e}"))
        })
    }
}

impl Journal for StreamJournal {
    fn append(&mut self, entry: Entry<'_>) -> Result<(), JournalError> {
        if self.fenced {
            return Err(JournalError::Store(format!("partition {} is fenced", self.owner.partition)));
        }
        let ledger = self.answered.as_ref().and_then(|a| a.lock().ok().and_then(|mut a| a.take()));
        let text = serde_json::to_string(&EntryRef {
            raw: entry.raw,
            decisions: entry.decisions,
            steps: entry.steps,
            policy_set: entry.policy_set,
            ledger: ledger.as_ref(),
            sender: entry.sender,
        })
        .map_err(|e| JournalError::Store(format!("cannot encode a journal entry: {e}")))?;
        let raw = RawValue::from_string(text)
            .map_err(|e| JournalError::Store(format!("cannot encode a journal entry: {e}")))?;
        self.entries.push(raw);
        self.decisions.push(std::mem::take(entry.decisions));
        Ok(())
    }

    fn policy_set(&mut self, set: &PolicySet) -> Result<(), JournalError> {
        self.loads.push(PolicyLoad { digest: set.digest().to_owned(), files: set.files().to_vec() });
        Ok(())
    }

    fn reload_failed(&mut self, error: &str, in_force: &str) -> Result<(), JournalError> {
        self.failures.push(ReloadFailure { error: error.to_owned(), in_force: in_force.to_owned() });
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Receipt>, JournalError> {
        if self.entries.is_empty() && self.loads.is_empty() && self.failures.is_empty() {
            return Ok(Vec::new());
        }
        if self.fenced {
            return Err(JournalError::Store(format!("partition {} is fenced", self.owner.partition)));
        }
        let entries = std::mem::take(&mut self.entries);
        let decisions = std::mem::take(&mut self.decisions);
        // The longest runs of entries that fit one message each (at least one entry): a line each.
        let mut lines = Vec::new();
        let mut counts = Vec::new();
        let mut runs = Vec::new();
        let mut start = 0;
        let mut first = true;
        while start < entries.len() || first {
            let mut end = start;
            let mut size = 512 + self.loads.iter().map(|l| 128 + 96 * l.files.len()).sum::<usize>();
            while end < entries.len() {
                let n = entries[end].get().len() + 1;
                if end > start && size + n > self.max_bytes {
                    break;
                }
                size += n;
                end += 1;
            }
            let line = self.line(&entries[start..end], first)?;
            if line.len() > self.max_bytes + 512 {
                self.fenced = true;
                return Err(JournalError::Store(format!(
                    "partition {}: one journal entry of {} bytes is larger than the largest NATS message ({} bytes)",
                    self.owner.partition,
                    line.len(),
                    self.max_bytes
                )));
            }
            lines.push(line);
            counts.push(decisions[start..end].iter().map(Vec::len).sum());
            runs.push(start..end);
            first = false;
            start = end;
        }
        let at = self.commit(entries.len(), lines, counts)?;
        self.loads.clear();
        self.failures.clear();
        let mut receipts = Vec::with_capacity(entries.len());
        let mut decisions = decisions.into_iter();
        for (run, (seq, first_index)) in runs.into_iter().zip(at) {
            self.last_seq = self.last_seq.max(seq);
            let mut index = first_index;
            for _ in run {
                let sequenced = decisions
                    .next()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|d| {
                        let s = Sequenced { seq: cursor(seq, index), decision: d };
                        index += 1;
                        s
                    })
                    .collect();
                receipts.push(Receipt { input_seq: Some(seq), duplicate: false, decisions: sequenced });
            }
        }
        Ok(receipts)
    }
}
