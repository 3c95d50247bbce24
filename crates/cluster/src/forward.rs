//! Admissions forwarded between instances in batches (issue 54).
//!
//! A front end asks the owner of a partition that another instance owns (as the lease watch shows
//! it, [`crate::status::Status::owner_of`]) through that instance's subject
//! `bursar.admit.i.<instance>`: the submissions that wait for the same instance while
//! [`IN_FLIGHT`] requests to it are under way go together as the next request, one message with one
//! reply holding every answer, instead of a request and a reply per admission (a submission that
//! finds fewer under way goes at once: batching costs no latency when nothing waits). The receiving instance ([`serve`]) hands each to
//! its own owner thread of the partition, as its own front end does, and answers once every one is
//! answered (its journal writer stores them together). A submission for a partition it does not own
//! (any more), or whose lease lapsed here, is answered "retry", and the front end asks again through
//! `bursar.admit.<p>`, which whoever owns the partition now answers.
//!
//! Boundaries: no decisions here (the owners decide), no retries (the front end's loop retries).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
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

/// One instance's queue: whatever waits goes as one request, [`IN_FLIGHT`] requests under way at most.
async fn send(nats: Nats, subject: String, mut rx: mpsc::Receiver<Waiting>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        let (nats, subject) = (nats.clone(), subject.clone());
        tokio::spawn(async move {
            request(&nats, &subject, batch).await;
            drop(slot);
        });
    }
}

/// One request with the submissions of `batch`; each gets its answer, or why there is none.
async fn request(nats: &Nats, subject: &str, batch: Vec<Waiting>) {
    let items: Vec<&Forwarded> = batch.iter().map(|(f, _)| f).collect();
    let answers = match serde_json::to_vec(&items) {
        Ok(payload) => {
            let request = nats.client.request(subject.to_owned(), payload.into());
            match tokio::time::timeout(crate::front::ATTEMPT, request).await {
                Err(_) => Err(format!("`{subject}` did not answer within {} ms", crate::front::ATTEMPT.as_millis())),
                Ok(Err(e)) => Err(e.to_string()),
                Ok(Ok(m)) => match serde_json::from_slice::<Vec<OwnerAnswer>>(&m.payload) {
                    Ok(a) if a.len() == batch.len() => Ok(a),
                    Ok(a) => Err(format!("{} answers to {} submissions", a.len(), batch.len())),
                    Err(e) => Err(format!("the answers are unreadable: {e}")),
                },
            }
        }
        Err(e) => Err(format!("cannot encode the submissions: {e}")),
    };
    match answers {
        Ok(answers) => {
            for ((_, reply), a) in batch.into_iter().zip(answers) {
                let _ = reply.send(Ok(a));
            }
        }
        Err(why) => {
            for (_, reply) in batch {
                let _ = reply.send(Err(why.clone()));
            }
        }
    }
}

/// What a forwarded submission waits on at the receiving instance.
enum Pending {
    Answered(OwnerAnswer),
    Owner(oneshot::Receiver<OwnerAnswer>),
}

/// Answers the submissions other front ends forward to this instance (`instance`), through its own
/// owners `local`, until the connection closes.
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
        let mut pending = Vec::with_capacity(items.len());
        for f in items {
            pending.push(match hand(&local, f).await {
                Ok(rx) => Pending::Owner(rx),
                Err(a) => Pending::Answered(a),
            });
        }
        let client = nats.client.clone();
        tokio::spawn(async move {
            let mut answers = Vec::with_capacity(pending.len());
            for p in pending {
                answers.push(match p {
                    Pending::Answered(a) => a,
                    Pending::Owner(rx) => match tokio::time::timeout(OWNER_WAIT, rx).await {
                        Ok(Ok(a)) => a,
                        _ => refused(503, "the partition's owner did not answer in time", true),
                    },
                });
            }
            if let Ok(body) = serde_json::to_vec(&answers) {
                let _ = client.publish(reply, body.into()).await;
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
