//! Admissions forwarded between instances in batches (issue 54).
//!
//! A front end asks the owner of a partition that another instance owns (as the lease watch shows
//! it, [`crate::status::Status::owner_of`]) through that instance's subject
//! `bursar.admit.i.<instance>`: the submissions that wait for the same instance while
//! [`IN_FLIGHT`] requests to it are under way go together as the next request, one message instead
//! of one each (a submission that finds fewer under way goes at once: batching costs no latency
//! when nothing waits). The receiving instance ([`serve`]) hands each to its own owner thread of the
//! partition, as its own front end does, and replies as answers come: each reply holds the answers
//! ready when it is sent (those its journal writer stored together come together), so no admission
//! waits for a slower one of its request. A submission for a partition it does not own (any more),
//! or whose lease lapsed here, is answered "retry", and the front end asks again through
//! `bursar.admit.<p>`, which whoever owns the partition now answers.
//!
//! Boundaries: no decisions here (the owners decide), no retries (the front end's loop retries).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::nats::Nats;
use crate::owner::{Item, LocalOwners, Reply, refused, submission_id};
use crate::partition::instance_subject;
use crate::wire::OwnerAnswer;

/// Submissions in one forwarded request at most.
const MAX_BATCH: usize = 256;

/// Requests under way to one instance at most; the submissions that come meanwhile wait and go
/// together.
pub const IN_FLIGHT: usize = 4;

/// How long the receiving instance waits for its owners' answers before answering "retry" (a
/// little less than the front end's attempt, so its answer arrives in time).
const OWNER_WAIT: Duration = Duration::from_millis(600);

/// One forwarded submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forwarded {
    /// Its partition.
    pub partition: u32,
    /// Its line.
    pub line: String,
    /// Who sent it, as the forwarding front end authenticated them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<bursar_model::Sender>,
    /// Only previewed (`POST /v1/admit?test_only=true`): nothing recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub test_only: bool,
}

type Waiting = (Forwarded, oneshot::Sender<Result<OwnerAnswer, String>>);

/// Where one submission's answer goes.
type Answer = oneshot::Sender<Result<OwnerAnswer, String>>;

/// What one reply message of the receiving instance holds: answers by the submission's index in
/// its request. A request gets as many replies as it takes for every submission to be answered: an
/// answer goes as soon as its owner gives it (with the others ready then), so no admission waits for
/// a slower one of the same request.
type Answers = Vec<(usize, OwnerAnswer)>;

/// One request's submissions' answer slots (each taken once answered) and its "all answered" signal.
type Slots = (Vec<Option<Answer>>, Option<oneshot::Sender<()>>);

/// The requests to one instance still waiting for answers.
#[derive(Debug, Default)]
struct Open {
    /// Request number → its [`Slots`].
    requests: HashMap<u64, Slots>,
}

/// This front end's queues to the other instances, one task each.
#[derive(Debug)]
pub struct Forwarders {
    nats: Nats,
    queues: Mutex<HashMap<String, mpsc::Sender<Waiting>>>,
}

impl Forwarders {
    /// No queue yet.
    pub fn new(nats: Nats) -> Forwarders {
        Forwarders { nats, queues: Mutex::new(HashMap::new()) }
    }

    /// Forwards `item` to instance `instance` with the submissions waiting beside it and waits at
    /// most `wait` for its answer; an error is why there is none (the instance is gone, or slow).
    pub async fn ask(&self, instance: &str, item: Forwarded, wait: Duration) -> Result<OwnerAnswer, String> {
        let tx = self.queue(instance).ok_or("cannot queue the submission")?;
        let (reply, rx) = oneshot::channel();
        tx.send((item, reply)).await.map_err(|_| format!("the queue to instance `{instance}` closed"))?;
        match tokio::time::timeout(wait, rx).await {
            Err(_) => Err(format!("instance `{instance}` did not answer within {} ms", wait.as_millis())),
            Ok(Err(_)) => Err(format!("the queue to instance `{instance}` closed")),
            Ok(Ok(answer)) => answer,
        }
    }

    fn queue(&self, instance: &str) -> Option<mpsc::Sender<Waiting>> {
        let mut queues = self.queues.lock().ok()?;
        if let Some(tx) = queues.get(instance).filter(|tx| !tx.is_closed()) {
            return Some(tx.clone());
        }
        let (tx, rx) = mpsc::channel(4096);
        tokio::spawn(send(self.nats.clone(), instance_subject(instance), rx));
        queues.insert(instance.to_owned(), tx.clone());
        Some(tx)
    }
}

/// One instance's queue: whatever waits goes as one request, [`IN_FLIGHT`] requests under way at
/// most; the replies of every request come to one inbox of this queue (`<inbox>.<request>`).
async fn send(nats: Nats, subject: String, mut rx: mpsc::Receiver<Waiting>) {
    let inbox = nats.client.new_inbox();
    let replies = match nats.client.subscribe(format!("{inbox}.*")).await {
        Ok(s) => s,
        Err(e) => {
            let why = format!("cannot take answers from `{subject}`: {e}");
            while let Some((_, reply)) = rx.recv().await {
                let _ = reply.send(Err(why.clone()));
            }
            return;
        }
    };
    let open = Arc::new(Mutex::new(Open::default()));
    let router = tokio::spawn(route(replies, open.clone()));
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut next = 0u64;
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        next += 1;
        let (nats, subject, reply, open) = (nats.clone(), subject.clone(), format!("{inbox}.{next}"), open.clone());
        tokio::spawn(async move {
            request(&nats, &subject, reply, next, batch, &open).await;
            drop(slot);
        });
    }
    router.abort();
}

/// Hands the answers that arrive on the queue's inbox to whoever waits for them.
async fn route(mut replies: async_nats::Subscriber, open: Arc<Mutex<Open>>) {
    while let Some(m) = replies.next().await {
        let Some(n) = m.subject.rsplit('.').next().and_then(|n| n.parse::<u64>().ok()) else { continue };
        let answers: Result<Answers, String> = if m.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
            Err("no instance takes admissions there (no responders)".into())
        } else {
            serde_json::from_slice(&m.payload).map_err(|e| format!("the answers are unreadable: {e}"))
        };
        let Ok(mut open) = open.lock() else { return };
        let Some((slots, done)) = open.requests.get_mut(&n) else { continue };
        match answers {
            Ok(answers) => {
                for (i, a) in answers {
                    if let Some(tx) = slots.get_mut(i).and_then(Option::take) {
                        let _ = tx.send(Ok(a));
                    }
                }
            }
            Err(why) => {
                for tx in slots.iter_mut().filter_map(Option::take) {
                    let _ = tx.send(Err(why.clone()));
                }
            }
        }
        if slots.iter().all(Option::is_none) {
            if let Some(done) = done.take() {
                let _ = done.send(());
            }
            open.requests.remove(&n);
        }
    }
}

/// Request `n` with the submissions of `batch`, answered on `reply`; whatever is not answered within
/// an attempt is told so.
async fn request(nats: &Nats, subject: &str, reply: String, n: u64, batch: Vec<Waiting>, open: &Mutex<Open>) {
    let items: Vec<&Forwarded> = batch.iter().map(|(f, _)| f).collect();
    let payload = match serde_json::to_vec(&items) {
        Ok(p) => p,
        Err(e) => {
            for (_, tx) in batch {
                let _ = tx.send(Err(format!("cannot encode the submissions: {e}")));
            }
            return;
        }
    };
    let (done_tx, done) = oneshot::channel();
    if let Ok(mut open) = open.lock() {
        let slots = batch.into_iter().map(|(_, tx)| Some(tx)).collect();
        open.requests.insert(n, (slots, Some(done_tx)));
    }
    let sent = nats.client.publish_with_reply(subject.to_owned(), reply, payload.into()).await;
    let why = match sent {
        Err(e) => format!("cannot forward to `{subject}`: {e}"),
        Ok(()) => match tokio::time::timeout(crate::front::ATTEMPT, done).await {
            Ok(_) => return,
            Err(_) => format!("`{subject}` did not answer within {} ms", crate::front::ATTEMPT.as_millis()),
        },
    };
    let left = open.lock().ok().and_then(|mut o| o.requests.remove(&n));
    for tx in left.into_iter().flat_map(|(slots, _)| slots).flatten() {
        let _ = tx.send(Err(why.clone()));
    }
}

/// Answers the submissions other front ends forward to this instance (`instance`), through its own
/// owners `local`, until the connection closes: each reply holds the answers ready at the time it is
/// sent, until every submission of the request has one.
pub async fn serve(nats: Nats, instance: String, local: Arc<LocalOwners>) {
    let subject = instance_subject(&instance);
    let mut sub = match nats.client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => return tracing::error!(subject, error = %e, "cannot take forwarded admissions: subscribe failed"),
    };
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply else { continue };
        let items: Vec<Forwarded> = serde_json::from_slice(&msg.payload).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "forwarded admissions that cannot be read");
            Vec::new()
        });
        let mut ready: Answers = Vec::new();
        let waiting = FuturesUnordered::new();
        for (i, f) in items.into_iter().enumerate() {
            match hand(&local, f).await {
                Ok(rx) => waiting.push(async move {
                    let a = match tokio::time::timeout(OWNER_WAIT, rx).await {
                        Ok(Ok(a)) => a,
                        _ => refused(503, "the partition's owner did not answer in time", true),
                    };
                    (i, a)
                }),
                Err(a) => ready.push((i, a)),
            }
        }
        let client = nats.client.clone();
        tokio::spawn(async move {
            let mut waiting = waiting;
            loop {
                if !ready.is_empty()
                    && let Ok(body) = serde_json::to_vec(&ready)
                {
                    let _ = client.publish(reply.clone(), body.into()).await;
                }
                let Some(first) = waiting.next().await else { return };
                ready = vec![first];
                while let Some(Some(a)) = waiting.next().now_or_never() {
                    ready.push(a);
                }
            }
        });
    }
}

/// Hands one forwarded submission to this instance's owner of its partition.
async fn hand(local: &LocalOwners, f: Forwarded) -> Result<oneshot::Receiver<OwnerAnswer>, OwnerAnswer> {
    let p = f.partition;
    let owner = local.get(p).ok_or_else(|| refused(503, format!("partition {p} is not owned here"), true))?;
    let id = submission_id(f.line.as_bytes(), p, &owner.lease)?;
    let (tx, rx) = oneshot::channel();
    let line = Bytes::from(f.line);
    let item = if f.test_only {
        Item::Preview { line, reply: Reply::Local(tx) }
    } else {
        Item::Admit { id, line, reply: Reply::Local(tx), sender: f.sender.map(Arc::new) }
    };
    owner.tx.send(item).await.map_err(|_| refused(503, "the partition's owner is stepping down", true))?;
    Ok(rx)
}
