//! The front end every instance runs, whatever it owns: events onto the stream, admissions to the
//! partition's owner, the decisions stream back.
//!
//! - [`Front::publish`]: each decoded input goes to its partition's subject with `Nats-Msg-Id` = its
//!   id (JetStream drops a resend within the stream's duplicate window; the engine's own dedupe drops
//!   a later one: the same id, the same answer, two windows). An event that names only a job is
//!   routed by the job's partition as [`crate::jobs`] finds it (the journal, read by this instance's
//!   projection; the `bursar_jobs` bucket, written when a submission is published here; the owners);
//!   an `asset.registered` or a producer's `clock.tick` goes to every partition, each copy with the
//!   id `<id>@p<n>` so each partition's copy is its own input.
//! - [`Front::admit`]: to the partition's owner, retried while no owner answers, within the admission
//!   timeout (below the Slurm hook's 2 s); then a 503 that names the partition and why. When this
//!   instance owns the partition, the submission goes straight to the owner's thread (no NATS
//!   request: issue 54); when another does, to that instance with the other submissions waiting for
//!   it ([`crate::forward`]); else (or when that instance says to) by NATS request-reply to
//!   `bursar.admit.<p>`. Either way it is answered once its decision is in the journal.
//! - [`Front::decisions`]: the journal stream from a cursor, as sequenced decisions.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bursar_model::api::{AdmitReply, Sequenced};
use bursar_model::{EventKind, Input};
use bursar_session::Incoming;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::jobs::JobIndex;
use crate::nats::Nats;
use crate::owner::{Item, LocalOwner, LocalOwners, Reply};
use crate::partition::{admit_subject, cursor, events_subject, job_key, partition_of, split_cursor};
use crate::status::Status;
use crate::wire::OwnerAnswer;

/// Longest wait for one admission attempt (a paused owner may still hold the subscription: the next
/// attempt reaches the new one).
pub const ATTEMPT: Duration = Duration::from_millis(700);

/// How long to wait before asking again when no owner holds the partition (a takeover or a
/// handover under way).
const RETRY_UNOWNED: Duration = Duration::from_millis(25);

/// How often [`Front::wait_applied`] reads a partition's journal head.
const APPLIED_POLL: Duration = Duration::from_millis(5);

/// How long to wait before asking again when the owner said to (it is stepping down).
const RETRY_REFUSED: Duration = Duration::from_millis(10);

/// Why [`Front::ask_owner`] has no decision.
enum AskError {
    /// The owner refused, for good.
    Refused(Refusal),
    /// No owner answered in time; the last cause.
    Unanswered(String),
}

/// What happened to one published input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// 1-based line in the body.
    pub line: u64,
    /// The input's id.
    pub id: String,
    /// The stream had it already (every copy, for an event sent to every partition).
    pub duplicate: bool,
    /// Where each copy is in the events stream (stored now, or first): partition and sequence.
    pub at: Vec<(u32, u64)>,
}

/// Why an admission got no decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// Why, naming the partition and the cause.
    pub error: String,
}

/// The front end.
#[derive(Debug)]
pub struct Front {
    nats: Nats,
    status: Arc<Status>,
    admit_timeout: Duration,
    /// This instance's live owners (a submission for one of them goes straight to its thread).
    local: Arc<LocalOwners>,
    /// Where jobs are.
    jobs: Arc<JobIndex>,
    /// The queues to the other instances.
    forward: crate::forward::Forwarders,
}

impl Front {
    /// A front end over `nats`, beside this instance's owners `local` and its job index `jobs`.
    pub fn new(
        nats: Nats,
        status: Arc<Status>,
        admit_timeout: Duration,
        local: Arc<LocalOwners>,
        jobs: Arc<JobIndex>,
    ) -> Front {
        let forward = crate::forward::Forwarders::new(nats.clone());
        Front { nats, status, admit_timeout, local, jobs, forward }
    }

    /// The partition count.
    pub fn partitions(&self) -> u32 {
        self.nats.partitions
    }

    /// Whether the NATS connection is up.
    pub fn connected(&self) -> bool {
        self.nats.client.connection_state() == async_nats::connection::State::Connected
    }

    /// A submission about to be published to the events stream: its job's partition goes into the
    /// `bursar_jobs` bucket first (no journal has it until its owner applies it).
    async fn index(&self, job: &str, p: u32) {
        self.jobs.remember(job, p);
        if let Err(e) = self.nats.jobs.put(job_key(job), p.to_string().into()).await {
            tracing::warn!(job, error = %e, "cannot index the job's partition; its later events may miss it");
        }
    }

    /// The partition of job `job`, as [`crate::jobs`] finds it; else the job id's own hash (an
    /// unknown job's events still reach one partition, which counts them as unknown, as a single
    /// engine does).
    pub async fn partition_of_job(&self, job: &str) -> u32 {
        if let Some(p) = self.jobs.get(job) {
            return p;
        }
        if let Ok(Some(v)) = self.nats.jobs.get(job_key(job)).await
            && let Some(p) = std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok())
        {
            self.jobs.remember(job, p);
            return p;
        }
        if self.jobs.catch_up(&self.nats.journal).await
            && let Some(p) = self.jobs.get(job)
        {
            return p;
        }
        self.status.counters.jobs_asked.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = crate::jobs::ask_owners(&self.nats, job, Instant::now() + self.admit_timeout).await {
            self.jobs.remember(job, p);
            return p;
        }
        partition_of(job, self.nats.partitions)
    }

    /// Where an input goes: `(partition, id, line)` per copy.
    async fn route(&self, input: &Input, raw: &str) -> Vec<(u32, String, String)> {
        let n = self.nats.partitions;
        let one = |p: u32| vec![(p, input.id().into_owned(), raw.to_owned())];
        match input {
            Input::Event(e) => match &e.kind {
                EventKind::JobSubmitted(spec) => {
                    let p = partition_of(&spec.project, n);
                    self.index(&spec.id, p).await;
                    one(p)
                }
                // A charge that names only its job goes where the job is; an unattributed one
                // settles no ledger, so any partition keeps it (the first).
                EventKind::BillingCharge(c) => match (&c.project, &c.job_id) {
                    (Some(p), _) => one(partition_of(p, n)),
                    (None, Some(job)) => one(self.partition_of_job(job).await),
                    (None, None) => one(0),
                },
                EventKind::AssetRegistered { .. } | EventKind::ClockTick => (0..n)
                    .map(|p| {
                        let mut copy = e.clone();
                        copy.id = format!("{}@p{p}", e.id);
                        let line = Input::Event(copy).to_json();
                        (p, format!("{}@p{p}", e.id), line)
                    })
                    .collect(),
                kind => match kind.job_id() {
                    Some(job) => one(self.partition_of_job(job).await),
                    None => one(0),
                },
            },
            Input::Action(a) => match &a.job_id {
                Some(job) => one(self.partition_of_job(job).await),
                None => one(0),
            },
            // Every partition estimates starts, so each keeps the whole inventory.
            Input::Inventory(inv) => (0..n)
                .map(|p| {
                    let mut copy = inv.clone();
                    copy.id = format!("{}@p{p}", inv.id);
                    let line = Input::Inventory(copy).to_json();
                    (p, format!("{}@p{p}", inv.id), line)
                })
                .collect(),
            // Producers cannot send wall ticks or run facts (the session's decoder refuses them at
            // the edge); run facts are published by the partitions' owners themselves.
            Input::WallTick(_) | Input::Run(_) | Input::Ledger(_) => Vec::new(),
        }
    }

    /// Publishes decoded inputs (already admitted under the producer's rules) to their partitions;
    /// returns once every one is stored (replicated) in the events stream.
    pub async fn publish(&self, items: Vec<Incoming>) -> Result<Vec<Published>, String> {
        let mut pending = Vec::with_capacity(items.len());
        for inc in &items {
            let copies = self.route(&inc.input, &inc.raw).await;
            let mut acks = Vec::with_capacity(copies.len());
            for (p, id, line) in copies {
                let mut headers = crate::wire::sender_headers(inc.sender.as_deref());
                headers.insert("Nats-Msg-Id", id.as_str());
                let f = self
                    .nats
                    .js
                    .publish_with_headers(events_subject(p), headers, line.into_bytes().into())
                    .await
                    .map_err(|e| format!("cannot publish to the events stream: {e}"))?;
                acks.push((p, f));
            }
            pending.push((inc.line, inc.input.id().into_owned(), acks));
        }
        let mut out = Vec::with_capacity(pending.len());
        let c = &self.status.counters;
        for (line, id, acks) in pending {
            let mut all_duplicate = !acks.is_empty();
            let mut at = Vec::with_capacity(acks.len());
            for (p, f) in acks {
                let ack = f.await.map_err(|e| format!("the events stream did not store an event: {e}"))?;
                all_duplicate &= ack.duplicate;
                if ack.duplicate {
                    c.events_duplicate.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.events_published.fetch_add(1, Ordering::Relaxed);
                }
                // A duplicate's ack names the copy stored first: waiting for it is waiting for
                // the event.
                if ack.sequence > 0 {
                    at.push((p, ack.sequence));
                }
            }
            out.push(Published { line, id, duplicate: all_duplicate, at });
        }
        Ok(out)
    }

    /// Waits until the owner of each partition in `at` has applied the events stream up to the
    /// sequence given (its journal says so), or `within` passes; returns whether they all have.
    /// What `POST /v1/events?wait_ms=N` gives a producer that needs its events in force before its
    /// next request: an event is stored when [`Front::publish`] returns, and applied when its
    /// partition's owner has consumed and journaled it, which a takeover can delay by a lease.
    pub async fn wait_applied(&self, at: &[(u32, u64)], within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut through: HashMap<u32, u64> = HashMap::new();
        for (p, seq) in at {
            let seq = (*seq).max(through.get(p).copied().unwrap_or(0));
            loop {
                match self.journaled_through(*p).await {
                    Some(t) if t >= seq => {
                        through.insert(*p, t);
                        break;
                    }
                    _ if Instant::now() >= deadline => return false,
                    _ => tokio::time::sleep(APPLIED_POLL).await,
                }
            }
        }
        true
    }

    /// The events-stream sequence partition `p`'s journal says its owner has applied through, as far
    /// as this instance has read the journal.
    async fn journaled_through(&self, p: u32) -> Option<u64> {
        Some(self.jobs.events_through(p))
    }

    /// Asks the owner of the submission's partition for its admission decision.
    pub async fn admit(&self, item: &Incoming) -> Result<AdmitReply, Refusal> {
        self.admit_as(item, false).await
    }

    /// Asks the owner what the submission would be answered now, recording nothing
    /// (`POST /v1/admit?test_only=true`).
    pub async fn preview(&self, item: &Incoming) -> Result<AdmitReply, Refusal> {
        self.admit_as(item, true).await
    }

    async fn admit_as(&self, item: &Incoming, test_only: bool) -> Result<AdmitReply, Refusal> {
        let deadline = Instant::now() + self.admit_timeout;
        let Input::Event(e) = &item.input else {
            return Err(Refusal { status: 400, error: "expected a `job.submitted` event".into() });
        };
        let EventKind::JobSubmitted(spec) = &e.kind else {
            return Err(Refusal { status: 400, error: "expected a `job.submitted` event".into() });
        };
        let p = partition_of(&spec.project, self.nats.partitions);
        // No index is written: the owner journals the submission before it answers, and the journal
        // is where front ends find the job (crate::jobs). This front end knows it at once. A preview
        // records nothing, so its job is not remembered either.
        if !test_only {
            self.jobs.remember(&spec.id, p);
        }
        let c = &self.status.counters;
        let t = Instant::now();
        let decided = self.ask_owner(p, item, deadline, test_only).await;
        c.ask_micros.fetch_add(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        match decided {
            Ok(reply) => Ok(reply),
            Err(AskError::Refused(r)) => Err(r),
            Err(AskError::Unanswered(cause)) => {
                self.status.counters.admissions_unowned.fetch_add(1, Ordering::Relaxed);
                Err(Refusal {
                    status: 503,
                    error: format!(
                        "no decision: partition {p} (project `{}`) has no owner answering yet ({cause}) within {} ms; the hook's fail-closed setting applies, and the submission may be resent with the same event id",
                        spec.project,
                        self.admit_timeout.as_millis()
                    ),
                })
            }
        }
    }

    /// Sends the submission to partition `p`'s owner until it answers or `deadline` passes.
    async fn ask_owner(
        &self,
        p: u32,
        item: &Incoming,
        deadline: Instant,
        test_only: bool,
    ) -> Result<AdmitReply, AskError> {
        let subject = admit_subject(p);
        let payload: bytes::Bytes = item.raw.clone().into_bytes().into();
        let mut headers = crate::wire::sender_headers(item.sender.as_deref());
        if test_only {
            headers.insert(crate::wire::TEST_ONLY_HEADER, "1");
        }
        let mut cause = String::from("no instance answered");
        let c = &self.status.counters;
        // Through the instance the lease watch names, until it fails or says to ask again; then
        // through the partition's subject, whoever owns it.
        let mut batched = true;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let attempt = left.min(ATTEMPT);
            let other = self.status.owner_of(p).filter(|o| batched && *o != self.status.instance);
            let answer = match (self.local.get(p), other) {
                // This instance owns the partition: straight to the owner's thread.
                (Some(owner), _) => self.ask_local(&owner, item, test_only, attempt).await,
                (None, Some(instance)) => {
                    let f = crate::forward::Forwarded {
                        partition: p,
                        line: item.raw.clone(),
                        sender: item.sender.as_deref().cloned(),
                        test_only,
                    };
                    let a = self.forward.ask(&instance, f, attempt).await;
                    c.admissions_forwarded.fetch_add(1, Ordering::Relaxed);
                    if matches!(a, Err(_) | Ok(OwnerAnswer::Refused { retry: true, .. })) {
                        batched = false;
                    }
                    a.map_err(|why| (why, false))
                }
                (None, None) => {
                    let request =
                        self.nats.client.request_with_headers(subject.clone(), headers.clone(), payload.clone());
                    match tokio::time::timeout(attempt, request).await {
                        Err(_) => Err((format!("the owner did not answer within {} ms", attempt.as_millis()), false)),
                        Ok(Err(e)) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => {
                            Err(("no instance holds its lease (no responders)".into(), true))
                        }
                        Ok(Err(e)) => Err((e.to_string(), true)),
                        Ok(Ok(msg)) => serde_json::from_slice::<OwnerAnswer>(&msg.payload)
                            .map_err(|e| (format!("the owner's answer is unreadable: {e}"), false)),
                    }
                }
            };
            match answer {
                Ok(OwnerAnswer::Decided { reply }) => {
                    c.admissions_decided.fetch_add(1, Ordering::Relaxed);
                    return Ok(*reply);
                }
                Ok(OwnerAnswer::Refused { status, error, retry: false }) => {
                    return Err(AskError::Refused(Refusal { status, error }));
                }
                Ok(OwnerAnswer::Refused { error, .. }) => {
                    cause = error;
                    tokio::time::sleep(RETRY_REFUSED.min(left)).await;
                }
                Err((why, wait)) => {
                    cause = why;
                    if wait {
                        tokio::time::sleep(RETRY_UNOWNED.min(left)).await;
                    }
                }
            }
        }
        Err(AskError::Unanswered(cause))
    }

    /// One attempt at this instance's own owner of the partition: the submission handed to its
    /// thread, answered once its decision is in the journal (or refused, as over NATS). An error is
    /// the cause and whether to wait before the next attempt.
    async fn ask_local(
        &self,
        owner: &LocalOwner,
        item: &Incoming,
        test_only: bool,
        attempt: Duration,
    ) -> Result<OwnerAnswer, (String, bool)> {
        // As the NATS subscriber does: a lapsed lease takes no admission.
        if !owner.lease.valid() {
            return Err(("the partition's lease lapsed on this instance".into(), true));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let line = bytes::Bytes::from(item.raw.clone());
        let sent = if test_only {
            Item::Preview { line, reply: Reply::Local(tx) }
        } else {
            Item::Admit { id: item.input.id().into_owned(), line, reply: Reply::Local(tx), sender: item.sender.clone() }
        };
        if owner.tx.send(sent).await.is_err() {
            return Err(("the partition's owner is stepping down".into(), true));
        }
        self.status.counters.admissions_local.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(attempt, rx).await {
            Err(_) => Err((format!("the owner did not answer within {} ms", attempt.as_millis()), false)),
            Ok(Err(_)) => Err(("the partition's owner stopped before answering".into(), true)),
            Ok(Ok(answer)) => Ok(answer),
        }
    }

    /// The decisions after cursor `after`, in stream order, on a channel; with `follow` the channel
    /// stays open for new ones, without it it closes once caught up.
    pub fn decisions(&self, after: u64, follow: bool) -> mpsc::Receiver<Result<Sequenced, String>> {
        let (tx, rx) = mpsc::channel(1024);
        let journal = self.nats.journal.clone();
        tokio::spawn(async move {
            let (from, skip_through) = split_cursor(after);
            let start = if after == 0 { 1 } else { from.max(1) };
            let mut messages = match crate::nats::read_from(&journal, "bursar.journal.>", start).await {
                Ok(m) => m,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            let last = journal.get_info().await.map(|i| i.state.last_sequence).unwrap_or(0);
            if !follow && last < start {
                return;
            }
            while let Some(m) = messages.next().await {
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string())).await;
                        return;
                    }
                };
                let (seq, pending) = match m.info() {
                    Ok(i) => (i.stream_sequence, i.pending),
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string())).await;
                        return;
                    }
                };
                let mut index = 0;
                for batch in crate::wire::batches(&m.message.payload).flatten() {
                    for entry in batch.entries {
                        for d in entry.decisions {
                            let at = index;
                            index += 1;
                            if seq == from && after != 0 && (at as u64) <= skip_through {
                                continue;
                            }
                            if tx.send(Ok(Sequenced { seq: cursor(seq, at), decision: d })).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                if !follow && (pending == 0 || seq >= last) {
                    return;
                }
            }
        });
        rx
    }
}
