//! The engine thread: the single owner of [`Engine`] and of the audit log's write connection.
//!
//! Handlers, the ticker and the reloader send [`Work`] over a bounded channel (a full channel makes
//! senders wait: back-pressure, never an unbounded buffer). The thread takes whatever is queued (up to
//! [`MAX_BATCH`] items), applies it in arrival order, appends every applied event and its decisions to
//! the audit log in one transaction (group commit), and only then answers the senders and publishes
//! the decisions to the live streams. So an answer always describes something durable, and a decision
//! a client saw is always in the log.
//!
//! Wall-clock ticks are applied with [`Engine::advance`] under a synthetic cause id
//! (`bursar-tick-<millis>`). A tick that fired a timer is logged as a synthetic `clock.tick` event with
//! that id; a tick that fired nothing is logged lazily, just before the next event, because it still
//! moved the engine's clock. On start, [`recover`] restores the last snapshot and replays the logged
//! events after it (ticks through `advance` again), discarding the decisions, so the state is exactly
//! what it was when the last batch committed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bursar_engine::{Engine, EngineConfig, Outcome, PolicySet};
use bursar_model::{Decision, Event, EventKind, Timestamp, decode_event};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::metrics::Metrics;
use crate::store::{Entry, Store, StoreError};

/// Most work items taken into one batch (one audit transaction).
pub const MAX_BATCH: usize = 512;

/// Event ids starting with this are reserved for the ticker's synthetic events.
pub const TICK_PREFIX: &str = "bursar-tick-";

/// An event that passed decoding, with where it came from.
#[derive(Debug)]
pub struct Incoming {
    /// 1-based line in the request body.
    pub line: usize,
    /// The line as received.
    pub raw: String,
    /// The decoded event.
    pub event: Event,
}

/// A decision with its sequence number in the audit log (the stream cursor).
#[derive(Debug, Clone)]
pub struct Sequenced {
    /// Decision sequence number.
    pub seq: u64,
    /// The decision.
    pub decision: Decision,
}

impl Sequenced {
    /// The decision as one JSON line with `seq` first, without the newline.
    pub fn to_json(&self) -> String {
        with_seq(self.seq, &self.decision.to_json())
    }
}

/// `{"seq":N,…}` from a decision's JSON object.
pub fn with_seq(seq: u64, json: &str) -> String {
    match json.strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => format!("{{\"seq\":{seq}}}"),
        Some(rest) => format!("{{\"seq\":{seq},{rest}"),
        None => json.to_owned(),
    }
}

/// What happened to one incoming event.
#[derive(Debug)]
pub struct Applied {
    /// Its line in the request.
    pub line: usize,
    /// Its id.
    pub event_id: String,
    /// Ignored because the id was seen before.
    pub duplicate: bool,
    /// Its decisions, durable.
    pub decisions: Vec<Sequenced>,
}

/// A request to the engine thread.
#[derive(Debug)]
pub enum Work {
    /// Apply events and answer once they are durable.
    Events {
        /// The events, in order.
        items: Vec<Incoming>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Vec<Applied>, String>>,
    },
    /// Fire the timers due by this wall-clock instant.
    Tick(Timestamp),
    /// Swap in a new policy set (already compiled) and record the load.
    Policies {
        /// The new set.
        set: Arc<PolicySet>,
        /// Why (`startup`, `watch`, `sighup`, `http`).
        cause: &'static str,
        /// Answered once swapped and recorded.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Record a failed reload in the audit log.
    ReloadFailed {
        /// The errors, one `file:line:col: message` per line.
        error: String,
        /// Answered once recorded.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// What the engine knows about a job.
    Job {
        /// The job id.
        id: String,
        /// The answer (`None` for an unknown job).
        reply: oneshot::Sender<Option<serde_json::Value>>,
    },
    /// A ledger's usage and held GPUs.
    Project {
        /// The project.
        name: String,
        /// The answer.
        reply: oneshot::Sender<serde_json::Value>,
    },
    /// Persist a snapshot now.
    Snapshot {
        /// Answered with the event seq the snapshot covers.
        reply: Option<oneshot::Sender<Result<u64, String>>>,
    },
    /// Finish what is queued, write a snapshot and stop.
    Shutdown,
}

/// The synthetic event logged for a tick.
pub fn tick_event(now: Timestamp) -> (String, Event) {
    let id = format!("{TICK_PREFIX}{}", now.millis());
    let raw = format!(r#"{{"id":"{id}","time":"{now}","type":"clock.tick"}}"#);
    let event = Event { id, time: now, kind: EventKind::ClockTick, extra: Vec::new() };
    (raw, event)
}

fn is_tick(event: &Event) -> bool {
    matches!(event.kind, EventKind::ClockTick) && event.id.starts_with(TICK_PREFIX)
}

/// Rebuilds the engine from the audit log: the last snapshot, then every logged event after it.
/// Returns the engine, the last event seq applied and how many events were replayed.
pub fn recover(store: &mut Store, set: Arc<PolicySet>, config: EngineConfig) -> Result<(Engine, u64, u64), StoreError> {
    let (mut engine, mut seq) = match store.load_snapshot()? {
        Some((seq, blob)) => match serde_json::from_slice(&blob) {
            Ok(snap) => (Engine::restore(set, snap), seq),
            Err(e) => {
                tracing::warn!(error = %e, "the engine snapshot cannot be read; replaying the whole log");
                (Engine::with_config(set, config), 0)
            }
        },
        None => (Engine::with_config(set, config), 0),
    };
    let mut replayed = 0;
    let mut scratch = Vec::new();
    loop {
        let page = store.events_after(seq, 10_000)?;
        if page.is_empty() {
            break;
        }
        for (s, raw) in page {
            seq = s;
            let event = match decode_event(&raw) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(seq = s, error = %e, "a logged event cannot be decoded; skipped in replay");
                    continue;
                }
            };
            scratch.clear();
            if is_tick(&event) {
                engine.advance(event.time, &event.id, &mut scratch);
            } else {
                engine.process(&event, Some(&raw), &mut scratch);
            }
            replayed += 1;
        }
    }
    Ok((engine, seq, replayed))
}

/// The engine thread's state.
pub struct Core {
    /// The engine.
    pub engine: Engine,
    /// The audit log.
    pub store: Store,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Live decision streams.
    pub decisions: broadcast::Sender<Arc<Sequenced>>,
    /// Last event seq committed.
    pub last_event_seq: u64,
    /// Event seq covered by the last snapshot.
    pub snapshot_seq: u64,
    /// A tick applied but not yet logged (it fired nothing).
    pending_tick: Option<Timestamp>,
}

/// A policy load to record: the new set, or the error of a failed one.
enum Load {
    Ok(Arc<PolicySet>),
    Failed(String),
}

/// Replies to send once the batch is durable.
enum After {
    Events { reply: oneshot::Sender<Result<Vec<Applied>, String>>, results: Vec<(Applied, usize)> },
    Ack(oneshot::Sender<Result<(), String>>),
    Job(oneshot::Sender<Option<serde_json::Value>>, Option<serde_json::Value>),
    Project(oneshot::Sender<serde_json::Value>, serde_json::Value),
}

impl Core {
    /// A core over a recovered engine.
    pub fn new(
        engine: Engine,
        store: Store,
        metrics: Arc<Metrics>,
        decisions: broadcast::Sender<Arc<Sequenced>>,
        last_event_seq: u64,
    ) -> Core {
        Core { engine, store, metrics, decisions, last_event_seq, snapshot_seq: last_event_seq, pending_tick: None }
    }

    /// Runs until [`Work::Shutdown`] or until every sender is gone; writes a final snapshot.
    pub fn run(mut self, mut rx: mpsc::Receiver<Work>, snapshot_every: std::time::Duration) {
        let mut batch: Vec<Work> = Vec::with_capacity(MAX_BATCH);
        let mut last_snapshot = Instant::now();
        let mut stop = false;
        while !stop {
            let Some(first) = rx.blocking_recv() else { break };
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            let mut want_snapshot = Vec::new();
            if let Some(i) = batch.iter().position(|w| matches!(w, Work::Shutdown)) {
                // Everything queued before the shutdown is finished; anything after it is dropped
                // unanswered (its sender sees the thread gone).
                batch.truncate(i);
                stop = true;
            }
            for w in batch.iter_mut() {
                if let Work::Snapshot { reply } = w {
                    want_snapshot.push(reply.take());
                }
            }
            if let Err(e) = self.apply(std::mem::take(&mut batch)) {
                // The engine has moved past what is durable: stop, so a restart replays the log.
                tracing::error!(error = %e, "cannot write the audit log; stopping the engine (a restart replays the log)");
                return;
            }
            if !want_snapshot.is_empty()
                || stop
                || (last_snapshot.elapsed() >= snapshot_every && self.last_event_seq > self.snapshot_seq)
            {
                let r = self.snapshot();
                if let Err(e) = &r {
                    tracing::error!(error = %e, "cannot write the engine snapshot");
                }
                last_snapshot = Instant::now();
                for reply in want_snapshot.into_iter().flatten() {
                    let _ = reply.send(r.clone().map_err(|e| e.to_string()));
                }
            }
        }
        if !stop && let Err(e) = self.snapshot() {
            tracing::error!(error = %e, "cannot write the engine snapshot");
        }
        tracing::info!(event_seq = self.last_event_seq, "engine stopped");
    }

    /// Writes a snapshot covering everything committed.
    pub fn snapshot(&mut self) -> Result<u64, StoreError> {
        let blob = serde_json::to_vec(&self.engine.snapshot()).map_err(|e| StoreError(e.to_string()))?;
        self.store.save_snapshot(self.last_event_seq, self.engine.policies().digest(), &blob)?;
        self.snapshot_seq = self.last_event_seq;
        self.metrics.snapshots.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(event_seq = self.last_event_seq, bytes = blob.len(), "engine snapshot written");
        Ok(self.last_event_seq)
    }

    fn flush_tick(&mut self, entries: &mut Vec<Entry>) {
        if let Some(t) = self.pending_tick.take() {
            let (raw, event) = tick_event(t);
            entries.push(Entry {
                raw,
                event,
                decisions: Vec::new(),
                policy_set: self.engine.policies().digest().to_owned(),
            });
        }
    }

    fn apply(&mut self, batch: Vec<Work>) -> Result<(), StoreError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut after: Vec<After> = Vec::new();
        let mut loads: Vec<Load> = Vec::new();
        let mut out = Vec::new();
        for w in batch {
            match w {
                Work::Events { items, reply } => {
                    self.flush_tick(&mut entries);
                    let mut results = Vec::with_capacity(items.len());
                    for inc in items {
                        out.clear();
                        let started = Instant::now();
                        let outcome = self.engine.process(&inc.event, Some(&inc.raw), &mut out);
                        self.metrics.eval.observe(started.elapsed());
                        let duplicate = outcome == Outcome::Duplicate;
                        let applied = Applied {
                            line: inc.line,
                            event_id: inc.event.id.clone(),
                            duplicate,
                            decisions: Vec::new(),
                        };
                        if duplicate {
                            self.metrics.events_duplicate.fetch_add(1, Ordering::Relaxed);
                            results.push((applied, usize::MAX));
                        } else {
                            self.metrics.events_applied.fetch_add(1, Ordering::Relaxed);
                            results.push((applied, entries.len()));
                            entries.push(Entry {
                                raw: inc.raw,
                                event: inc.event,
                                decisions: std::mem::take(&mut out),
                                policy_set: self.engine.policies().digest().to_owned(),
                            });
                        }
                    }
                    after.push(After::Events { reply, results });
                }
                Work::Tick(now) => {
                    let (raw, event) = tick_event(now);
                    let fired = self.engine.stats().timers_fired;
                    out.clear();
                    self.engine.advance(now, &event.id, &mut out);
                    if out.is_empty() && self.engine.stats().timers_fired == fired {
                        self.pending_tick = Some(now);
                    } else {
                        self.pending_tick = None;
                        self.metrics.tick_decisions.fetch_add(out.len() as u64, Ordering::Relaxed);
                        entries.push(Entry {
                            raw,
                            event,
                            decisions: std::mem::take(&mut out),
                            policy_set: self.engine.policies().digest().to_owned(),
                        });
                    }
                }
                Work::Policies { set, cause, reply } => {
                    self.metrics.policies.store(set.len() as u64, Ordering::Relaxed);
                    self.engine.set_policies(set.clone());
                    tracing::debug!(cause, digest = set.digest(), "policy set swapped in");
                    loads.push(Load::Ok(set));
                    after.push(After::Ack(reply));
                }
                Work::ReloadFailed { error, reply } => {
                    loads.push(Load::Failed(error));
                    after.push(After::Ack(reply));
                }
                Work::Job { id, reply } => {
                    let v = crate::views::job(&self.engine, &id);
                    after.push(After::Job(reply, v));
                }
                Work::Project { name, reply } => {
                    let v = crate::views::project(&self.engine, &name);
                    after.push(After::Project(reply, v));
                }
                Work::Snapshot { .. } | Work::Shutdown => {}
            }
        }

        let mut seqs = Vec::new();
        if !entries.is_empty() {
            let started = Instant::now();
            let appended = self.store.append(&entries)?;
            self.metrics.commit.observe(started.elapsed());
            if let Some(last) = appended.last_event_seq {
                self.last_event_seq = last;
            }
            seqs = appended.decision_seqs;
        }
        for load in &loads {
            match load {
                Load::Ok(set) => self.store.record_load(self.last_event_seq, Some(set), None)?,
                Load::Failed(e) => self.store.record_failure(e, self.engine.policies().digest())?,
            }
        }

        // Durable: number the decisions, publish them, answer.
        let mut numbered: Vec<Vec<Sequenced>> = Vec::with_capacity(entries.len());
        for (entry, s) in entries.into_iter().zip(seqs.into_iter().chain(std::iter::repeat(Vec::new()))) {
            self.metrics.count_decisions(entry.decisions.iter());
            let list: Vec<Sequenced> =
                entry.decisions.into_iter().zip(s).map(|(decision, seq)| Sequenced { seq, decision }).collect();
            for d in &list {
                let _ = self.decisions.send(Arc::new(d.clone()));
            }
            numbered.push(list);
        }
        self.metrics.live_jobs.store(self.engine.state().live_jobs() as u64, Ordering::Relaxed);
        self.metrics.timers.store(self.engine.timers().len() as u64, Ordering::Relaxed);
        for a in after {
            match a {
                After::Events { reply, results } => {
                    let applied = results
                        .into_iter()
                        .map(|(mut a, i)| {
                            if let Some(list) = numbered.get_mut(i) {
                                a.decisions = std::mem::take(list);
                            }
                            a
                        })
                        .collect();
                    let _ = reply.send(Ok(applied));
                }
                After::Ack(reply) => {
                    let _ = reply.send(Ok(()));
                }
                After::Job(reply, v) => {
                    let _ = reply.send(v);
                }
                After::Project(reply, v) => {
                    let _ = reply.send(v);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_is_spliced_first() {
        assert_eq!(with_seq(7, r#"{"a":1}"#), r#"{"seq":7,"a":1}"#);
        assert_eq!(with_seq(7, "{}"), r#"{"seq":7}"#);
    }

    #[test]
    fn tick_events_decode_back_as_ticks() {
        let (raw, event) = tick_event(Timestamp(1_700_000_000_123));
        let back = decode_event(&raw).unwrap();
        assert_eq!(back, event);
        assert!(is_tick(&back));
        assert!(!is_tick(&decode_event(r#"{"id":"x","time":"2026-11-02T09:00:00Z","type":"clock.tick"}"#).unwrap()));
    }
}
