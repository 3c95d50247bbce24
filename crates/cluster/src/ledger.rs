//! The wire between project partitions and the ledger partition (the user and tag budgets that
//! span projects; the design is `bursar_engine::shared`'s).
//!
//! - [`Link`]: a project partition's [`LedgerClient`]. Changes to jobs admitted through the ledger
//!   partition are queued and sent, in order, before the next admission's check and before the
//!   owner journals ([`Link::sync`]); an admission's check waits for its answer. Each op goes out as
//!   a core NATS message to [`LEDGER_SUBJECT`] with a reply subject of this link's own inbox, so the
//!   ops of one partition reach the ledger partition in the order they were made; whatever is not
//!   answered within [`ATTEMPT`] is sent again, in order (the ledger partition applies an op once,
//!   by its id, and answers a resent admission with its first answer). A link gives up only when
//!   its partition's lease lapses or after [`GIVE_UP`]; the owner then steps down without
//!   journaling, and the next owner asks again.
//! - [`Replay`]: the client of a takeover's journal replay, which hands back the answers the journal
//!   holds instead of asking.
//! - [`ops`]: the ledger partition's subscriber, which hands each op to its owner thread.
//!
//! The answer a submission got is journaled beside it ([`Link::answered`] is read by the journal),
//! so a replay needs nothing from the ledger partition.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bursar_engine::{LedgerAnswer, LedgerClient};
use bursar_model::{LedgerChange, LedgerOp};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::nats::Nats;
use crate::owner::{Item, LeaseClock};
use crate::partition::LEDGER_SUBJECT;
use crate::status::Counters;

/// How long one attempt waits for the ledger partition's answers before sending again.
pub const ATTEMPT: Duration = Duration::from_millis(500);

/// How long a link keeps trying: past the lease time and a takeover of the ledger partition.
pub const GIVE_UP: Duration = Duration::from_secs(15);

/// What the ledger partition answers to an op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum LedgerReply {
    /// Applied (or applied before); for an admission, its answer.
    Done {
        /// The answer to an admission.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<LedgerAnswer>,
    },
    /// Not applied now (the owner is stepping down, or a resent admission is no longer remembered).
    Refused {
        /// Why.
        error: String,
        /// Whether asking again (the next owner) may help.
        retry: bool,
    },
}

/// The last answer an admission got, for the journal to keep beside it.
pub type Answered = Arc<Mutex<Option<LedgerAnswer>>>;

#[derive(Debug)]
struct State {
    nats: Nats,
    rt: tokio::runtime::Handle,
    partition: u32,
    lease: Arc<LeaseClock>,
    /// Ops made and not yet answered, in order: id and line.
    pending: VecDeque<(String, Bytes)>,
    answered: Answered,
    counters: Arc<crate::status::Status>,
    /// This link's reply subjects are `<inbox>.<n>`, `n` counting every op sent; one subscription
    /// for the link's life, so no reply arrives before the interest in it has spread.
    inbox: String,
    sub: Option<async_nats::Subscriber>,
    next: u64,
}

/// A project partition's way to the ledger partition. Cloning shares it: one clone is the engine's
/// client, another stays with the owner to [`Link::sync`] before each journal flush.
#[derive(Debug, Clone)]
pub struct Link(Arc<Mutex<State>>);

impl Link {
    /// A link for partition `partition`, while `lease` holds.
    pub fn new(
        nats: Nats,
        rt: tokio::runtime::Handle,
        partition: u32,
        lease: Arc<LeaseClock>,
        status: Arc<crate::status::Status>,
    ) -> Link {
        let inbox = nats.client.new_inbox();
        let sub = rt.block_on(nats.client.subscribe(format!("{inbox}.*"))).ok();
        Link(Arc::new(Mutex::new(State {
            nats,
            rt,
            partition,
            lease,
            pending: VecDeque::new(),
            answered: Arc::new(Mutex::new(None)),
            counters: status,
            inbox,
            sub,
            next: 0,
        })))
    }

    /// Where the answer of the last admission is left for the journal.
    pub fn answered(&self) -> Answered {
        self.0.lock().map(|s| s.answered.clone()).unwrap_or_default()
    }

    /// Sends every queued op and returns once the ledger partition has applied (and journaled)
    /// them all.
    pub fn sync(&self) -> Result<(), String> {
        let mut s = self.0.lock().map_err(|_| "the ledger link is poisoned".to_owned())?;
        s.exchange(None).map(|_| ())
    }
}

fn counters(s: &State) -> &Counters {
    &s.counters.counters
}

impl State {
    /// Sends the queued ops and then `admit` (if any), in order, until all are answered; returns the
    /// admission's answer.
    fn exchange(&mut self, admit: Option<(String, Bytes)>) -> Result<Option<LedgerAnswer>, String> {
        let admit_id = admit.as_ref().map(|(id, _)| id.clone());
        if let Some(a) = admit {
            self.pending.push_back(a);
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let ops: Vec<(String, Bytes)> = self.pending.iter().cloned().collect();
        let n = ops.len() as u64;
        let (nats, rt, lease, p) = (self.nats.clone(), self.rt.clone(), self.lease.clone(), self.partition);
        if self.sub.is_none() {
            self.sub = rt.block_on(nats.client.subscribe(format!("{}.*", self.inbox))).ok();
        }
        let Some(sub) = self.sub.as_mut() else {
            return Err("cannot subscribe for the ledger partition's answers".into());
        };
        let started = Instant::now();
        let result = rt.block_on(exchange(&nats, p, &lease, &self.inbox, sub, &mut self.next, ops));
        let c = counters(self);
        c.ledger_ops.fetch_add(n, Ordering::Relaxed);
        c.ledger_exchanges.fetch_add(1, Ordering::Relaxed);
        c.ledger_micros.fetch_add(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let mut answers = result?;
        self.pending.clear();
        match admit_id {
            Some(id) => match answers.remove(&id) {
                Some(Some(a)) => Ok(Some(a)),
                _ => Err(format!("the ledger partition gave no answer to admission op `{id}`")),
            },
            None => Ok(None),
        }
    }
}

/// Sends `ops` in order and collects their replies, sending what is unanswered again (in order)
/// every [`ATTEMPT`], until every one is answered, the lease lapses or [`GIVE_UP`] passes.
async fn exchange(
    nats: &Nats,
    partition: u32,
    lease: &LeaseClock,
    inbox: &str,
    sub: &mut async_nats::Subscriber,
    next: &mut u64,
    ops: Vec<(String, Bytes)>,
) -> Result<BTreeMap<String, Option<LedgerAnswer>>, String> {
    let mut done: BTreeMap<String, Option<LedgerAnswer>> = BTreeMap::new();
    // Reply token → op, for the answers of every attempt (a late answer to an earlier attempt
    // counts as well: the ledger partition applies an op once, whichever copy it answers).
    let mut sent: BTreeMap<u64, usize> = BTreeMap::new();
    let deadline = Instant::now() + GIVE_UP;
    let mut last = String::from("no answer yet");
    loop {
        for (i, (id, line)) in ops.iter().enumerate() {
            if done.contains_key(id) {
                continue;
            }
            *next += 1;
            sent.insert(*next, i);
            nats.client
                .publish_with_reply(LEDGER_SUBJECT, format!("{inbox}.{next}"), line.clone())
                .await
                .map_err(|e| format!("cannot send to the ledger partition: {e}"))?;
        }
        let _ = nats.client.flush().await;
        let attempt = tokio::time::sleep(ATTEMPT);
        tokio::pin!(attempt);
        while done.len() < ops.len() {
            let msg = tokio::select! {
                m = sub.next() => m,
                _ = &mut attempt => break,
            };
            let Some(msg) = msg else { return Err("the ledger answers' subscription ended".into()) };
            let Some(token) = msg.subject.rsplit('.').next().and_then(|i| i.parse::<u64>().ok()) else { continue };
            let Some((id, _)) = sent.get(&token).and_then(|i| ops.get(*i)) else { continue };
            match serde_json::from_slice::<LedgerReply>(&msg.payload) {
                Ok(LedgerReply::Done { answer }) => {
                    done.insert(id.clone(), answer);
                }
                Ok(LedgerReply::Refused { error, retry: true }) => last = error,
                Ok(LedgerReply::Refused { error, retry: false }) => {
                    return Err(format!("the ledger partition refused op `{id}`: {error}"));
                }
                Err(e) => last = format!("an unreadable answer: {e}"),
            }
        }
        if done.len() == ops.len() {
            return Ok(done);
        }
        if !lease.valid() {
            return Err(format!(
                "partition {partition}'s lease lapsed while waiting for the ledger partition ({last})"
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the ledger partition did not answer within {GIVE_UP:?} ({} of {} ops unanswered; {last})",
                ops.len() - done.len(),
                ops.len()
            ));
        }
    }
}

fn line(op: &LedgerOp) -> Bytes {
    Bytes::from(bursar_model::Input::Ledger(op.clone()).to_json())
}

/// The engine's side of a [`Link`].
#[derive(Debug)]
pub struct Client(pub Link);

impl LedgerClient for Client {
    fn admit(&mut self, op: LedgerOp) -> Result<LedgerAnswer, String> {
        let mut s = self.0.0.lock().map_err(|_| "the ledger link is poisoned".to_owned())?;
        let answer = s.exchange(Some((op.id.clone(), line(&op))))?.ok_or("no answer")?;
        if let Ok(mut a) = s.answered.lock() {
            *a = Some(answer.clone());
        }
        Ok(answer)
    }

    fn settle(&mut self, op: LedgerOp) {
        if let Ok(mut s) = self.0.0.lock() {
            s.pending.push_back((op.id.clone(), line(&op)));
        }
    }
}

/// The client of a journal replay: the answer journaled beside each submission, put here before
/// the submission is applied again. Changes are not sent (they were, before they were journaled).
#[derive(Debug, Clone, Default)]
pub struct Replay(pub Arc<Mutex<Option<LedgerAnswer>>>);

impl LedgerClient for Replay {
    fn admit(&mut self, op: LedgerOp) -> Result<LedgerAnswer, String> {
        let journaled = self.0.lock().ok().and_then(|mut a| a.take());
        // A submission journaled without an answer was decided while the set had no quota spanning
        // projects: nothing was reserved there, and its own verdict stood.
        Ok(journaled.unwrap_or_else(|| {
            let local = match &op.op {
                LedgerChange::Admit { local, .. } => *local,
                _ => bursar_model::DecisionKind::Allow,
            };
            LedgerAnswer { kind: local, verdicts: Vec::new() }
        }))
    }

    fn settle(&mut self, _op: LedgerOp) {}
}

/// The ledger partition's subscriber: every op, in the order it came, to the owner thread, which
/// answers once it is journaled.
pub async fn ops(nats: Nats, lease: Arc<LeaseClock>, tx: mpsc::Sender<Item>) {
    let mut sub = match nats.client.subscribe(LEDGER_SUBJECT).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(Item::Failed(format!("subscribe to `{LEDGER_SUBJECT}`: {e}"))).await;
            return;
        }
    };
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply.clone() else { continue };
        if !lease.valid() {
            let r = LedgerReply::Refused { error: "the ledger partition's lease lapsed here".into(), retry: true };
            answer(&nats, reply, &r).await;
            continue;
        }
        if tx.send(Item::Ledger { line: msg.payload, reply }).await.is_err() {
            return;
        }
    }
}

/// Answers one op.
pub async fn answer(nats: &Nats, reply: async_nats::Subject, r: &LedgerReply) {
    if let Ok(body) = serde_json::to_vec(r) {
        let _ = nats.client.publish(reply, body.into()).await;
    }
}
