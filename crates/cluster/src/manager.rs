//! The lease manager: which partitions this instance owns.
//!
//! Every `ttl / 4` it writes its heartbeat, renews each lease it holds (`update` with the revision it
//! last wrote: a lease someone else took cannot be renewed, and its owner thread is stopped), and
//! takes partitions while it holds fewer than its fair share (`⌈partitions / live instances⌉`): a
//! partition with no lease (or a deleted one, after a handover) at once, one whose lease revision has
//! not changed for `ttl` by this instance's own clock as expired (`update` on that revision, so of
//! several instances that see it expire only one gets it). The revision of the acquiring write is
//! the owner's fencing epoch. An instance holding more than its share while another holds less
//! hands one partition over (its owner writes a snapshot and the lease is deleted), so three
//! instances started one after another end up sharing the partitions.
//!
//! Expiry is judged on revisions observed locally, never on timestamps written by another machine,
//! so clock skew between instances does not matter; only the rate of each instance's own clock does.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use bursar_engine::PolicySet;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::nats::Nats;
use crate::owner::{self, Exit, Item, LeaseClock, OwnerCtx, OwnerSettings};
use crate::partition::{fnv1a, partition_key};
use crate::status::Status;
use crate::wire::{LeaseValue, MemberValue};

/// What the manager needs.
pub struct ManagerCtx {
    /// NATS.
    pub nats: Nats,
    /// This instance.
    pub instance: Arc<str>,
    /// Lease time.
    pub ttl: Duration,
    /// The policy set in force.
    pub policies: watch::Receiver<Arc<PolicySet>>,
    /// Owner settings.
    pub settings: OwnerSettings,
    /// Shared status.
    pub status: Arc<Status>,
}

struct Owned {
    /// Revision of our last lease write.
    rev: u64,
    last_ok: Instant,
    tx: mpsc::Sender<Item>,
    thread: Option<JoinHandle<Exit>>,
    lease: Arc<LeaseClock>,
    releasing: bool,
}

fn lease_value(instance: &str) -> bytes::Bytes {
    let v = LeaseValue { instance: instance.to_owned(), at_ms: bursar_model::Timestamp::wall_clock().millis() };
    serde_json::to_vec(&v).unwrap_or_default().into()
}

struct Manager {
    ctx: ManagerCtx,
    rt: tokio::runtime::Handle,
    owned: HashMap<u32, Owned>,
    /// Other instances' leases: revision and when this instance first saw it.
    seen: HashMap<u32, (u64, Instant)>,
    /// Members: revision, first seen, partitions owned.
    members: HashMap<String, (u64, Instant, usize)>,
    /// Partitions given up recently, not taken again before this instant.
    cooldown: HashMap<u32, Instant>,
    started: Instant,
}

impl Manager {
    async fn heartbeat(&mut self) {
        let mut owns: Vec<u32> = self.owned.keys().copied().collect();
        owns.sort_unstable();
        let v = MemberValue { owns, at_ms: bursar_model::Timestamp::wall_clock().millis() };
        if let Ok(b) = serde_json::to_vec(&v)
            && let Err(e) = self.ctx.nats.members.put(&*self.ctx.instance, b.into()).await
        {
            tracing::warn!(error = %e, "cannot write this instance's heartbeat");
        }
        // Who else is alive: a member whose key changed within the lease time.
        let Ok(mut keys) = self.ctx.nats.members.keys().await else { return };
        let mut names = Vec::new();
        while let Some(k) = keys.next().await {
            if let Ok(k) = k {
                names.push(k);
            }
        }
        for name in names {
            let Ok(Some(e)) = self.ctx.nats.members.entry(name.as_str()).await else { continue };
            if e.operation != kv::Operation::Put {
                self.members.remove(&name);
                continue;
            }
            let owns = serde_json::from_slice::<MemberValue>(&e.value).map(|m| m.owns.len()).unwrap_or(0);
            match self.members.get_mut(&name) {
                Some(m) if m.0 == e.revision => m.2 = owns,
                _ => {
                    self.members.insert(name, (e.revision, Instant::now(), owns));
                }
            }
        }
    }

    fn live_members(&self) -> Vec<(&str, usize)> {
        let ttl = self.ctx.ttl;
        self.members
            .iter()
            .filter(|(name, m)| **name == *self.ctx.instance || m.1.elapsed() < ttl)
            .map(|(n, m)| (n.as_str(), if **n == *self.ctx.instance { self.owned.len() } else { m.2 }))
            .collect()
    }

    async fn renew(&mut self) {
        let ttl = self.ctx.ttl;
        let parts: Vec<u32> = self.owned.keys().copied().collect();
        for p in parts {
            let Some(o) = self.owned.get_mut(&p) else { continue };
            let at = Instant::now();
            match self.ctx.nats.leases.update(partition_key(p), lease_value(&self.ctx.instance), o.rev).await {
                Ok(rev) => {
                    o.rev = rev;
                    o.last_ok = at;
                    o.lease.renewed(at, ttl);
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    tracing::warn!(
                        partition = p,
                        "the lease was taken over by another instance; stopping the partition"
                    );
                    o.lease.revoke();
                    let _ = o.tx.try_send(Item::Stop { release: false });
                }
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "cannot renew the lease");
                    if o.last_ok.elapsed() >= ttl {
                        o.lease.revoke();
                        let _ = o.tx.try_send(Item::Stop { release: false });
                    }
                }
            }
        }
    }

    /// Joins the owner threads that ended; deletes their leases (if still ours).
    async fn reap(&mut self) {
        let done: Vec<u32> = self
            .owned
            .iter()
            .filter(|(_, o)| o.thread.as_ref().is_none_or(|t| t.is_finished()))
            .map(|(p, _)| *p)
            .collect();
        for p in done {
            let Some(mut o) = self.owned.remove(&p) else { continue };
            let exit = match o.thread.take() {
                Some(t) => {
                    tokio::task::spawn_blocking(move || t.join().unwrap_or(Exit::SteppedDown("panicked".into())))
                        .await
                        .unwrap_or(Exit::SteppedDown("panicked".into()))
                }
                None => Exit::SteppedDown("no thread".into()),
            };
            if let Err(e) = self.ctx.nats.leases.delete_expect_revision(partition_key(p), Some(o.rev)).await {
                tracing::debug!(partition = p, error = %e, "the lease was not ours to delete any more");
            }
            if matches!(exit, Exit::SteppedDown(_)) {
                self.cooldown.insert(p, Instant::now() + self.ctx.ttl);
            }
        }
    }

    fn start_owner(&mut self, p: u32, rev: u64) {
        let (tx, rx) = mpsc::channel(8192);
        let lease = Arc::new(LeaseClock::new(self.ctx.ttl));
        let ctx = OwnerCtx {
            nats: self.ctx.nats.clone(),
            rt: self.rt.clone(),
            partition: p,
            epoch: rev,
            instance: self.ctx.instance.clone(),
            policies: self.ctx.policies.clone(),
            settings: self.ctx.settings.clone(),
            status: self.ctx.status.clone(),
            lease: lease.clone(),
        };
        let tx2 = tx.clone();
        let thread = std::thread::Builder::new().name(format!("bursar-p{p}")).spawn(move || owner::run(ctx, rx, tx2));
        match thread {
            Ok(t) => {
                tracing::info!(partition = p, epoch = rev, "lease acquired; taking over");
                self.owned
                    .insert(p, Owned { rev, last_ok: Instant::now(), tx, thread: Some(t), lease, releasing: false });
            }
            Err(e) => tracing::error!(partition = p, error = %e, "cannot start the partition's thread"),
        }
    }

    async fn acquire(&mut self) {
        if self.started.elapsed() < self.ctx.ttl {
            // Give the instances starting together a lease time to see each other first.
            return;
        }
        let n = self.ctx.nats.partitions;
        let live = self.live_members().len().max(1) as u32;
        let fair = n.div_ceil(live) as usize;
        let offset = u32::try_from(fnv1a(self.ctx.instance.as_bytes()) % u64::from(n.max(1))).unwrap_or(0);
        let mut owners = vec![None; n as usize];
        for i in 0..n {
            let p = (i + offset) % n;
            if self.owned.contains_key(&p) {
                owners[p as usize] = Some(self.ctx.instance.to_string());
                continue;
            }
            let key = partition_key(p);
            let entry = match self.ctx.nats.leases.entry(key.as_str()).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "cannot read a lease");
                    continue;
                }
            };
            let want = self.owned.len() < fair && self.cooldown.get(&p).is_none_or(|t| Instant::now() >= *t);
            let attempt = match &entry {
                None => want.then_some(None),
                Some(e) if e.operation != kv::Operation::Put => want.then_some(Some(e.revision)),
                Some(e) => {
                    owners[p as usize] = serde_json::from_slice::<LeaseValue>(&e.value).ok().map(|v| v.instance);
                    let seen = self.seen.entry(p).or_insert((e.revision, Instant::now()));
                    if seen.0 != e.revision {
                        *seen = (e.revision, Instant::now());
                    }
                    (want && seen.1.elapsed() >= self.ctx.ttl).then_some(Some(e.revision))
                }
            };
            let Some(expected) = attempt else { continue };
            let value = lease_value(&self.ctx.instance);
            let won = match expected {
                None => self.ctx.nats.leases.create(key.as_str(), value).await.map_err(|e| e.to_string()),
                Some(rev) => self.ctx.nats.leases.update(key.as_str(), value, rev).await.map_err(|e| e.to_string()),
            };
            match won {
                Ok(rev) => {
                    if let Some(prev) = &entry
                        && prev.operation == kv::Operation::Put
                    {
                        tracing::warn!(
                            partition = p,
                            "the lease expired (no renewal within the lease time); taking over"
                        );
                    }
                    self.seen.remove(&p);
                    owners[p as usize] = Some(self.ctx.instance.to_string());
                    self.start_owner(p, rev);
                }
                Err(e) => tracing::debug!(partition = p, error = %e, "another instance took the partition first"),
            }
        }
        self.ctx.status.set_owners(owners);
        // Hand one over when this instance holds more than its share and another holds less.
        let others_min =
            self.live_members().iter().filter(|(name, _)| *name != &*self.ctx.instance).map(|(_, k)| *k).min();
        if self.owned.len() > fair
            && others_min.is_some_and(|k| k < fair)
            && !self.owned.values().any(|o| o.releasing)
            && let Some(p) = self.owned.keys().copied().max()
            && let Some(o) = self.owned.get_mut(&p)
        {
            tracing::info!(partition = p, fair, "handing a partition over to share them fairly");
            o.releasing = true;
            let _ = o.tx.try_send(Item::Stop { release: true });
        }
    }
}

/// Runs the lease manager until `shutdown` turns true, then hands every partition over.
pub async fn run(ctx: ManagerCtx, mut shutdown: watch::Receiver<bool>) {
    let every = ctx.ttl / 4;
    let mut m = Manager {
        rt: tokio::runtime::Handle::current(),
        ctx,
        owned: HashMap::new(),
        seen: HashMap::new(),
        members: HashMap::new(),
        cooldown: HashMap::new(),
        started: Instant::now(),
    };
    let mut iv = tokio::time::interval(every);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = iv.tick() => {}
            _ = shutdown.changed() => break,
        }
        if *shutdown.borrow() {
            break;
        }
        m.renew().await;
        m.reap().await;
        m.heartbeat().await;
        m.acquire().await;
    }
    // Hand everything over: a final snapshot each, leases deleted, heartbeat removed.
    for o in m.owned.values_mut() {
        o.releasing = true;
        let _ = o.tx.send(Item::Stop { release: true }).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !m.owned.is_empty() && Instant::now() < deadline {
        m.renew().await;
        m.reap().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = m.ctx.nats.members.delete(&*m.ctx.instance).await;
    tracing::info!("every partition handed over");
}
