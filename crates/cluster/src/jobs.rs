//! Where each job lives: the job → partition index by which a front end routes the events that name
//! only a job (`job.started`, `job.sample`, `job.finished`, keep-alives, approvals, action records).
//!
//! A lookup asks, in order:
//! 1. this instance's [`JobIndex`]: the jobs its front end admitted or published, and every
//!    submission in the journal as this instance's audit projection reads it (the journal is the
//!    index: an admission answered through `/v1/admit` is journaled before it is answered, so it
//!    needs no index write of its own; issue 54 measured that write, a replicated JetStream
//!    message per admission, at about a third of the NATS servers' work);
//! 2. the `bursar_jobs` bucket, which a front end writes before it publishes a `job.submitted` to
//!    the events stream (a submission no owner has applied yet is in no journal);
//! 3. the journal as far as it goes now, when the projection is close behind its end: the lookup
//!    waits (at most [`CATCH_UP`]) for the projection to reach the journal's last message (an event
//!    sent right after its job's admission was answered through another instance);
//! 4. the owners ([`WHEREIS_SUBJECT`]): every instance asks its live owners' engines and says which
//!    of its partitions tracks the job (a job admitted before this instance read the journal from
//!    where it is, or forgotten by the bounded index). Until every project partition has been
//!    checked (one is being taken over), it asks again, within the admission timeout;
//! 5. else the job id's own hash: an unknown job's events reach one partition, which counts them as
//!    unknown, as a single engine does.
//!
//! Boundaries: no routing decisions beyond the partition (the front end routes), no journal
//! writes (the projection feeds [`JobIndex::remember`], [`JobIndex::applied`] and
//! [`JobIndex::seen`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::nats::Nats;
use crate::owner::{Item, LocalOwners};

/// Subject every instance answers "which partition tracks this job?" on.
pub const WHEREIS_SUBJECT: &str = "bursar.whereis";

/// Jobs kept per generation of the index; two generations are kept, so the index holds between
/// one and two of these counts (the older half is dropped when the newer fills).
const GENERATION: usize = 500_000;

/// Longest wait for the projection to reach the journal's end before the owners are asked.
pub const CATCH_UP: Duration = Duration::from_millis(250);

/// How far (in journal messages) the projection may be behind for a lookup to wait for it.
const CATCH_UP_WITHIN: u64 = 10_000;

/// How long one round of asking the owners waits for every partition to be checked.
const ASK_ROUND: Duration = Duration::from_millis(300);

/// How long an instance waits for one of its owners to say whether it tracks a job.
const OWNER_CHECK: Duration = Duration::from_millis(200);

/// This instance's job → partition index (see the module's documentation), and how far each
/// partition's journal says its owner has applied the events stream (`POST /v1/events?wait_ms=`).
#[derive(Debug, Default)]
pub struct JobIndex {
    generations: Mutex<[HashMap<String, u32>; 2]>,
    /// The journal's stream sequence up to which the projection has read every message.
    seen_through: AtomicU64,
    /// Per partition, the events-stream sequence its batches say was applied.
    applied: Mutex<HashMap<u32, u64>>,
}

impl JobIndex {
    /// Job `job` is in partition `p`.
    pub fn remember(&self, job: &str, p: u32) {
        if let Ok(mut g) = self.generations.lock() {
            if g[0].len() >= GENERATION {
                g[1] = std::mem::take(&mut g[0]);
            }
            g[0].insert(job.to_owned(), p);
        }
    }

    /// The partition of `job`, if this index has it.
    pub fn get(&self, job: &str) -> Option<u32> {
        let g = self.generations.lock().ok()?;
        g[0].get(job).or_else(|| g[1].get(job)).copied()
    }

    /// A batch of partition `p` says the events stream was applied up to `seq`.
    pub fn applied(&self, p: u32, seq: u64) {
        if let Ok(mut m) = self.applied.lock() {
            let e = m.entry(p).or_insert(0);
            *e = (*e).max(seq);
        }
    }

    /// The events-stream sequence partition `p`'s batches say was applied, as far as read.
    pub fn events_through(&self, p: u32) -> u64 {
        self.applied.lock().ok().and_then(|m| m.get(&p).copied()).unwrap_or(0)
    }

    /// The projection has read every journal message up to stream sequence `seq`.
    pub fn seen(&self, seq: u64) {
        self.seen_through.fetch_max(seq, Ordering::Relaxed);
    }

    /// The journal's stream sequence up to which every message was read.
    pub fn seen_through(&self) -> u64 {
        self.seen_through.load(Ordering::Relaxed)
    }

    /// Waits until the projection has read the journal up to its last message now, if it is close
    /// behind (at most [`CATCH_UP`]); returns whether it got there.
    pub async fn catch_up(&self, journal: &async_nats::jetstream::stream::Stream) -> bool {
        let Ok(info) = journal.get_info().await else { return false };
        let last = info.state.last_sequence;
        if last.saturating_sub(self.seen_through()) > CATCH_UP_WITHIN {
            return false;
        }
        let deadline = Instant::now() + CATCH_UP;
        while self.seen_through() < last {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }
}

/// What an instance answers on [`WHEREIS_SUBJECT`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whereis {
    /// The partitions it asked (its live owners that answered).
    pub checked: Vec<u32>,
    /// The one that tracks the job, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<u32>,
}

/// Asks every instance's owners which partition tracks `job`, until one says or every project
/// partition (`0..partitions`) has been checked; `None` when none tracks it, or when not every
/// partition could be checked before `deadline`.
pub async fn ask_owners(nats: &Nats, job: &str, deadline: Instant) -> Option<u32> {
    let all: BTreeSet<u32> = (0..nats.partitions).collect();
    loop {
        let round = Instant::now() + ASK_ROUND;
        let inbox = nats.client.new_inbox();
        let mut sub = nats.client.subscribe(inbox.clone()).await.ok()?;
        nats.client.publish_with_reply(WHEREIS_SUBJECT, inbox, job.to_owned().into()).await.ok()?;
        let mut checked = BTreeSet::new();
        loop {
            let left = round.min(deadline).saturating_duration_since(Instant::now());
            let Ok(Some(m)) = tokio::time::timeout(left, sub.next()).await else { break };
            let Ok(w) = serde_json::from_slice::<Whereis>(&m.payload) else { continue };
            if w.found.is_some() {
                return w.found;
            }
            checked.extend(w.checked);
            if all.is_subset(&checked) {
                return None;
            }
        }
        if Instant::now() >= deadline {
            tracing::debug!(job, ?checked, "not every partition could say whether it tracks the job");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Answers [`WHEREIS_SUBJECT`] for this instance's live owners until the connection closes.
pub async fn answer_whereis(nats: Nats, local: std::sync::Arc<LocalOwners>) {
    let mut sub = match nats.client.subscribe(WHEREIS_SUBJECT).await {
        Ok(s) => s,
        Err(e) => return tracing::error!(error = %e, "cannot answer where jobs are: subscribe failed"),
    };
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply else { continue };
        let Ok(job) = std::str::from_utf8(&msg.payload) else { continue };
        let mut asks = Vec::new();
        for (p, owner) in local.all() {
            let (tx, rx) = oneshot::channel();
            if owner.tx.try_send(Item::Has { job: job.to_owned(), reply: tx }).is_ok() {
                asks.push((p, rx));
            }
        }
        let nats = nats.clone();
        tokio::spawn(async move {
            let mut w = Whereis { checked: Vec::new(), found: None };
            for (p, rx) in asks {
                match tokio::time::timeout(OWNER_CHECK, rx).await {
                    Ok(Ok(true)) => {
                        w.found = Some(p);
                        break;
                    }
                    Ok(Ok(false)) => w.checked.push(p),
                    _ => {}
                }
            }
            if let Ok(body) = serde_json::to_vec(&w) {
                let _ = nats.client.publish(reply, body.into()).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_keeps_two_generations() {
        let index = JobIndex::default();
        for i in 0..GENERATION {
            index.remember(&format!("j{i}"), 1);
        }
        index.remember("newer", 2);
        assert_eq!(index.get("j0"), Some(1), "the older generation is still asked");
        assert_eq!(index.get("newer"), Some(2));
        assert_eq!(index.get("unknown"), None);
        index.seen(7);
        index.seen(3);
        assert_eq!(index.seen_through(), 7);
    }
}
