//! The lease manager: which partitions this instance owns.
//!
//! It follows the lease and member buckets with key-value watches (every change arrives as it is
//! written, so nothing is polled), and on a short tick it:
//! - renews each lease it holds every `ttl / 4` (`update` with the revision it last wrote: a lease
//!   someone else took cannot be renewed, and its owner thread is stopped) and writes its heartbeat;
//! - takes partitions while it holds fewer than its fair share (`⌈partitions / live instances⌉`): a
//!   partition with no lease (or a deleted one) at once, one whose lease revision has not changed
//!   for `ttl` by this instance's own clock as expired (`update` on that revision, so of several
//!   instances that see it expire only one gets it). The revision of the acquiring write is the
//!   owner's fencing epoch;
//! - hands partitions over while it holds more than its share and another holds less.
//!
//! **A handover has no gap** (issue 33). The giving owner stops taking admissions, applies and
//! answers what is queued, writes a final snapshot and ends; the manager then rewrites the lease
//! *naming the receiver* (`update` on its own revision, so only the holder can). The receiver sees
//! the write through its watch and starts the partition at once, with that write's revision as its
//! epoch: no lease time is waited, and admissions in between are retried by the front ends for the
//! few milliseconds the takeover takes. Fencing is unchanged (the receiver's takeover marker
//! moves the journal's last sequence), so a paused or old owner still writes nothing after it. A
//! receiver that never takes the partition leaves the lease revision unchanged, and after `ttl`
//! the lease expires for anyone, as a dead owner's does.
//!
//! Expiry is judged on revisions observed locally, never on timestamps written by another machine,
//! so clock skew between instances does not matter; only the rate of each instance's own clock does.
//! Watching, the first sight of a revision is within milliseconds of its write, so a dead owner's
//! partitions are taken about `ttl` after its last renewal (plus one tick and the takeover).

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
    /// This instance's live owners, for its front end.
    pub local: Arc<owner::LocalOwners>,
    /// This instance's journal writer, which every owner journals through.
    pub writer: crate::journal::Writer,
}

struct Owned {
    /// Revision of our last lease write.
    rev: u64,
    last_ok: Instant,
    tx: mpsc::Sender<Item>,
    thread: Option<JoinHandle<Exit>>,
    lease: Arc<LeaseClock>,
    /// Being handed over: to whom (`None`: released for anyone).
    releasing: Option<Option<String>>,
    /// When the release was asked for (the start of the handover's gap).
    release_asked: Option<Instant>,
}

/// A lease as the watch last showed it.
#[derive(Debug, Clone)]
struct Seen {
    revision: u64,
    /// When this instance first saw this revision.
    since: Instant,
    /// Put (a holder), or deleted / purged (free).
    held: bool,
    /// The holder, when held.
    holder: Option<String>,
    /// Who handed it over, for a lease written by a handover.
    from: Option<String>,
}

/// A member as the watch last showed it.
#[derive(Debug, Clone)]
struct Member {
    revision: u64,
    since: Instant,
    owns: usize,
}

fn lease_value(instance: &str, from: Option<&str>) -> bytes::Bytes {
    let v = LeaseValue {
        instance: instance.to_owned(),
        at_ms: bursar_model::Timestamp::wall_clock().millis(),
        from: from.map(str::to_owned),
    };
    serde_json::to_vec(&v).unwrap_or_default().into()
}

struct Manager {
    ctx: ManagerCtx,
    rt: tokio::runtime::Handle,
    owned: HashMap<u32, Owned>,
    leases: HashMap<u32, Seen>,
    members: HashMap<String, Member>,
    /// Partitions given up recently, not taken again before this instant.
    cooldown: HashMap<u32, Instant>,
    started: Instant,
    /// Owner threads tell the manager here when they end, so a handover is written at once.
    ended_tx: mpsc::UnboundedSender<u32>,
    last_renewal: Instant,
    /// Handovers received: partition → when the lease naming this instance was seen.
    receiving: HashMap<u32, Instant>,
}

impl Manager {
    fn member_key(&self) -> &str {
        &self.ctx.instance
    }

    /// A change the lease watch delivered.
    fn lease_seen(&mut self, e: kv::Entry) {
        let Some(p) = e.key.strip_prefix('p').and_then(|n| n.parse::<u32>().ok()) else { return };
        let held = e.operation == kv::Operation::Put;
        let value = held.then(|| serde_json::from_slice::<LeaseValue>(&e.value).ok()).flatten();
        let entry = Seen {
            revision: e.revision,
            since: Instant::now(),
            held,
            holder: value.as_ref().map(|v| v.instance.clone()),
            from: value.and_then(|v| v.from),
        };
        match self.leases.get(&p) {
            Some(s) if s.revision >= entry.revision => {}
            _ => {
                self.leases.insert(p, entry.clone());
            }
        }
        // A handover to this instance: take it at once, with the handover's revision as the epoch.
        if entry.held
            && entry.holder.as_deref() == Some(&*self.ctx.instance)
            && entry.from.as_deref().is_some_and(|f| f != &*self.ctx.instance)
            && !self.owned.contains_key(&p)
        {
            tracing::info!(
                partition = p,
                from = entry.from.as_deref().unwrap_or(""),
                "a partition was handed over to this instance; taking it at once"
            );
            self.ctx.status.counters.handovers_received.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.receiving.insert(p, Instant::now());
            self.start_owner(p, entry.revision);
        }
    }

    /// A change the member watch delivered.
    fn member_seen(&mut self, e: kv::Entry) {
        if e.operation != kv::Operation::Put {
            self.members.remove(&e.key);
            return;
        }
        let owns = serde_json::from_slice::<MemberValue>(&e.value).map(|m| m.owns.len()).unwrap_or(0);
        match self.members.get_mut(&e.key) {
            Some(m) if m.revision >= e.revision => {}
            Some(m) => *m = Member { revision: e.revision, since: Instant::now(), owns },
            None => {
                self.members.insert(e.key, Member { revision: e.revision, since: Instant::now(), owns });
            }
        }
    }

    async fn heartbeat(&mut self) {
        let mut owns: Vec<u32> = self.owned.keys().copied().collect();
        owns.sort_unstable();
        let v = MemberValue { owns, at_ms: bursar_model::Timestamp::wall_clock().millis() };
        if let Ok(b) = serde_json::to_vec(&v)
            && let Err(e) = self.ctx.nats.members.put(self.member_key(), b.into()).await
        {
            tracing::warn!(error = %e, "cannot write this instance's heartbeat");
        }
    }

    /// Live instances with the partitions each owns: this one, and every member whose heartbeat
    /// changed within the lease time.
    fn live_members(&self) -> Vec<(String, usize)> {
        let ttl = self.ctx.ttl;
        let me = &*self.ctx.instance;
        let mut live: Vec<(String, usize)> = self
            .members
            .iter()
            .filter(|(name, m)| name.as_str() != me && m.since.elapsed() < ttl)
            .map(|(n, m)| (n.clone(), m.owns))
            .collect();
        live.push((me.to_owned(), self.owned.len()));
        live.sort();
        live
    }

    async fn renew(&mut self) {
        let ttl = self.ctx.ttl;
        let parts: Vec<u32> = self.owned.keys().copied().collect();
        let me = self.ctx.instance.clone();
        for p in parts {
            let Some(o) = self.owned.get_mut(&p) else { continue };
            let at = Instant::now();
            match self.ctx.nats.leases.update(partition_key(p), lease_value(&me, None), o.rev).await {
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

    /// Joins the owner threads that ended. A handed-over partition's lease is rewritten to name
    /// its receiver (or deleted, when it has none); a failed one's lease is deleted if still ours.
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
            let counters = &self.ctx.status.counters;
            match (&exit, o.releasing.take()) {
                (Exit::Released, Some(Some(to))) => {
                    let value = lease_value(&to, Some(&self.ctx.instance));
                    match self.ctx.nats.leases.update(partition_key(p), value, o.rev).await {
                        Ok(_) => {
                            counters.handovers_given.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let ms = o.release_asked.map(|t| t.elapsed().as_secs_f64() * 1e3).unwrap_or(0.0);
                            self.ctx.status.handover_given(ms);
                            tracing::info!(partition = p, to, ms, "partition handed over");
                        }
                        Err(e) => {
                            tracing::warn!(partition = p, to, error = %e, "cannot name the receiver in the lease; releasing it for anyone");
                            let _ = self.ctx.nats.leases.delete_expect_revision(partition_key(p), Some(o.rev)).await;
                        }
                    }
                }
                _ => {
                    if let Err(e) = self.ctx.nats.leases.delete_expect_revision(partition_key(p), Some(o.rev)).await {
                        tracing::debug!(partition = p, error = %e, "the lease was not ours to delete any more");
                    }
                }
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
            local: self.ctx.local.clone(),
            writer: self.ctx.writer.clone(),
        };
        let tx2 = tx.clone();
        let ended = self.ended_tx.clone();
        let thread = std::thread::Builder::new().name(format!("bursar-p{p}")).spawn(move || {
            let exit = owner::run(ctx, rx, tx2);
            let _ = ended.send(p);
            exit
        });
        match thread {
            Ok(t) => {
                tracing::info!(partition = p, epoch = rev, "lease acquired; taking over");
                self.owned.insert(
                    p,
                    Owned {
                        rev,
                        last_ok: Instant::now(),
                        tx,
                        thread: Some(t),
                        lease,
                        releasing: None,
                        release_asked: None,
                    },
                );
            }
            Err(e) => tracing::error!(partition = p, error = %e, "cannot start the partition's thread"),
        }
    }

    /// How many partitions have leases: the projects', and the ledger partition when shared
    /// ledgers are on ([`OwnerSettings::shared_ledgers`]).
    fn leased(&self) -> u32 {
        self.ctx.nats.partitions + u32::from(self.ctx.settings.shared_ledgers)
    }

    async fn acquire(&mut self) {
        let n = self.leased();
        let mut owners = vec![None; n as usize];
        for (p, s) in &self.leases {
            if let Some(slot) = owners.get_mut(*p as usize) {
                *slot = if s.held { s.holder.clone() } else { None };
            }
        }
        for p in self.owned.keys() {
            if let Some(slot) = owners.get_mut(*p as usize) {
                *slot = Some(self.ctx.instance.to_string());
            }
        }
        self.ctx.status.set_owners(owners);
        if self.started.elapsed() < self.ctx.ttl {
            // Give the instances starting together a lease time to see each other first (handovers
            // to this instance are taken meanwhile).
            return;
        }
        let live = self.live_members();
        let fair = n.div_ceil(live.len().max(1) as u32) as usize;
        let offset = u32::try_from(fnv1a(self.ctx.instance.as_bytes()) % u64::from(n.max(1))).unwrap_or(0);
        for i in 0..n {
            if self.owned.len() >= fair {
                break;
            }
            let p = (i + offset) % n;
            if self.owned.contains_key(&p) || self.cooldown.get(&p).is_some_and(|t| Instant::now() < *t) {
                continue;
            }
            let key = partition_key(p);
            let value = lease_value(&self.ctx.instance, None);
            let won = match self.leases.get(&p) {
                None => self.ctx.nats.leases.create(key.as_str(), value).await.map_err(|e| e.to_string()),
                Some(s) if !s.held => {
                    self.ctx.nats.leases.update(key.as_str(), value, s.revision).await.map_err(|e| e.to_string())
                }
                Some(s) if s.since.elapsed() >= self.ctx.ttl => {
                    tracing::warn!(
                        partition = p,
                        holder = s.holder.as_deref().unwrap_or(""),
                        "the lease expired (no renewal within the lease time); taking over"
                    );
                    self.ctx.status.counters.expired_takeovers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.ctx.nats.leases.update(key.as_str(), value, s.revision).await.map_err(|e| e.to_string())
                }
                Some(_) => continue,
            };
            match won {
                Ok(rev) => self.start_owner(p, rev),
                Err(e) => tracing::debug!(partition = p, error = %e, "another instance took the partition first"),
            }
        }
        self.balance(&live, fair);
    }

    /// Hands partitions over while this instance holds at least two more than another: only the
    /// instance holding the most gives (ties: the first by name), so two instances do not pile onto
    /// one receiver, and to the live instance holding the fewest, half the difference.
    fn balance(&mut self, live: &[(String, usize)], fair: usize) {
        if self.owned.values().any(|o| o.releasing.is_some()) {
            return;
        }
        let me = &*self.ctx.instance;
        let most = live.iter().map(|(_, k)| *k).max().unwrap_or(0);
        let giver = live.iter().find(|(_, k)| *k == most).map(|(n, _)| n.as_str());
        let Some((to, has)) = live.iter().filter(|(n, _)| n.as_str() != me).min_by_key(|(n, k)| (*k, n.clone())) else {
            return;
        };
        // Until no two instances differ by more than one partition: with ⌈n / live⌉ as the only
        // bound, 16 partitions on 3 instances could rest at 6, 6, 4.
        let mine = self.owned.len();
        if giver != Some(me) || mine <= has + 1 {
            return;
        }
        let give = (mine - has) / 2;
        let mut parts: Vec<u32> = self.owned.iter().filter(|(_, o)| o.thread.is_some()).map(|(p, _)| *p).collect();
        parts.sort_unstable_by(|a, b| b.cmp(a));
        for p in parts.into_iter().take(give) {
            if let Some(o) = self.owned.get_mut(&p) {
                tracing::info!(partition = p, to, fair, "handing a partition over to share them fairly");
                o.releasing = Some(Some(to.clone()));
                o.release_asked = Some(Instant::now());
                let _ = o.tx.try_send(Item::Stop { release: true });
            }
        }
    }

    /// Notes the partitions received by handover that are now live (the receiving side's gap).
    fn received(&mut self) {
        let live = self.ctx.status.live();
        let done: Vec<u32> = self.receiving.keys().copied().filter(|p| live.contains(p)).collect();
        for p in done {
            if let Some(t) = self.receiving.remove(&p) {
                self.ctx.status.handover_received(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        self.receiving.retain(|p, _| self.owned.contains_key(p));
    }
}

/// Watches every key of `bucket` from its current values on; `None` when the watch cannot start.
async fn watch_all(bucket: &kv::Store, what: &str) -> Option<kv::Watch> {
    match bucket.watch_with_history(">").await {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the {what}; trying again");
            None
        }
    }
}

/// Runs the lease manager until `shutdown` turns true, then hands every partition over.
pub async fn run(ctx: ManagerCtx, mut shutdown: watch::Receiver<bool>) {
    let ttl = ctx.ttl;
    // Renewals and heartbeats every ttl/4; expiry and balance checked more often, on what the watches
    // have shown (no request to NATS unless something is to be taken).
    let renew_every = ttl / 4;
    let tick = (ttl / 20).clamp(Duration::from_millis(20), Duration::from_millis(100));
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel();
    let mut m = Manager {
        rt: tokio::runtime::Handle::current(),
        ctx,
        owned: HashMap::new(),
        leases: HashMap::new(),
        members: HashMap::new(),
        cooldown: HashMap::new(),
        started: Instant::now(),
        ended_tx,
        last_renewal: Instant::now() - renew_every,
        receiving: HashMap::new(),
    };
    let mut lease_watch = watch_all(&m.ctx.nats.leases, "leases").await;
    let mut member_watch = watch_all(&m.ctx.nats.members, "members").await;
    let mut iv = tokio::time::interval(tick);
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    m.heartbeat().await;
    loop {
        tokio::select! {
            _ = iv.tick() => {}
            _ = shutdown.changed() => break,
            Some(p) = ended_rx.recv() => {
                let _ = p;
                m.reap().await;
                continue;
            }
            e = async { match lease_watch.as_mut() { Some(w) => w.next().await, None => std::future::pending().await } } => {
                match e {
                    Some(Ok(e)) => m.lease_seen(e),
                    _ => lease_watch = None,
                }
                continue;
            }
            e = async { match member_watch.as_mut() { Some(w) => w.next().await, None => std::future::pending().await } } => {
                match e {
                    Some(Ok(e)) => m.member_seen(e),
                    _ => member_watch = None,
                }
                continue;
            }
        }
        if *shutdown.borrow() {
            break;
        }
        if lease_watch.is_none() {
            lease_watch = watch_all(&m.ctx.nats.leases, "leases").await;
        }
        if member_watch.is_none() {
            member_watch = watch_all(&m.ctx.nats.members, "members").await;
        }
        if m.last_renewal.elapsed() >= renew_every {
            m.last_renewal = Instant::now();
            m.renew().await;
            m.heartbeat().await;
        }
        m.reap().await;
        m.acquire().await;
        m.received();
    }
    // Hand everything over: to the live instances holding the fewest (a final snapshot each, the
    // lease rewritten to name the receiver), or released for anyone when no other is alive.
    let mut live: Vec<(String, usize)> =
        m.live_members().into_iter().filter(|(n, _)| n.as_str() != &*m.ctx.instance).collect();
    let mut parts: Vec<u32> = m.owned.keys().copied().collect();
    parts.sort_unstable();
    for p in parts {
        let to = live.iter_mut().min_by_key(|(n, k)| (*k, n.clone())).map(|(n, k)| {
            *k += 1;
            n.clone()
        });
        if let Some(o) = m.owned.get_mut(&p) {
            o.releasing = Some(to);
            o.release_asked = Some(Instant::now());
            let _ = o.tx.send(Item::Stop { release: true }).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !m.owned.is_empty() && Instant::now() < deadline {
        if m.last_renewal.elapsed() >= renew_every {
            m.last_renewal = Instant::now();
            m.renew().await;
        }
        m.reap().await;
        tokio::select! {
            _ = ended_rx.recv() => {}
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    let _ = m.ctx.nats.members.delete(m.member_key()).await;
    tracing::info!("every partition handed over");
}
