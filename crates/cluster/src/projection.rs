//! Each instance's audit log: a SQLite projection of the decisions stream.
//!
//! A thread reads `bursar.journal.>` in stream order from where it stopped and appends every entry
//! (the input line, its decisions, its job steps, the policy-set digest) and every policy load to the
//! instance's own `bursar-audit` log, one transaction per group of messages. Every instance projects
//! the same messages in the same order, so every instance's log holds the same inputs and decisions
//! in the same order, its hash chains are over that order, and `bursar audit verify` checks each one
//! on its own; `bursar audit query`/`explain` and the report read it as they read a single server's.
//!
//! It also feeds the instance's job index ([`crate::jobs::JobIndex`]) with every submission it
//! reads, and keeps doing so if the audit log can no longer be written: the journal is where front
//! ends find a job's partition.
//!
//! Where it stopped is a small file beside the database (`<audit>.journal-seq`), written after a
//! commit at most every [`POSITION_EVERY`] and when the projection stops. After a crash, the
//! messages since the position written last are projected again and the log skips every input it
//! already holds (its ids are unique), so nothing is doubled.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bursar_audit::{AuditLog, Durability, Record};
use bursar_model::{EventKind, Input};
use bursar_session::{Entry, Frame, Line, Origin};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::ClusterError;
use crate::jobs::JobIndex;
use crate::nats::Nats;
use crate::status::Status;
use crate::wire::JournalBatch;

/// The position file of the audit log at `audit`.
pub fn position_path(audit: &Path) -> PathBuf {
    let mut p = audit.as_os_str().to_owned();
    p.push(".journal-seq");
    PathBuf::from(p)
}

fn read_position(path: &Path) -> u64 {
    std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// How long the projection waits, when a journal message comes alone, for others to share its audit
/// transaction (at 8 clients one message came at a time, and the commits of a transaction each were a
/// tenth of an instance's CPU, issue 54). A look-up waiting for the journal to be read (the job index,
/// `wait_ms`) waits that much longer.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(5);

/// How often, at most, the position file is written (each write is a file written and renamed: at
/// every group of a busy journal it was a tenth of an instance's CPU, issue 54); and once more when
/// the projection stops.
const POSITION_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

fn record(path: &Path, seq: u64, recorded: &mut (u64, std::time::Instant)) {
    match write_position(path, seq) {
        Ok(()) => *recorded = (seq, std::time::Instant::now()),
        Err(e) => tracing::warn!(error = %e, "cannot record the projection's position"),
    }
}

fn write_position(path: &Path, seq: u64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{seq}\n"))?;
    std::fs::rename(&tmp, path)
}

/// Starts the projection into the audit log at `audit`; it runs until `stop` is dropped... or the
/// runtime ends. Returns the thread.
pub fn spawn(
    nats: Nats,
    rt: tokio::runtime::Handle,
    audit: PathBuf,
    durability: Durability,
    status: Arc<Status>,
    jobs: Arc<JobIndex>,
) -> Result<std::thread::JoinHandle<()>, ClusterError> {
    let mut log = AuditLog::open(&audit, durability).map_err(|e| ClusterError::Audit(e.to_string()))?;
    let pos_file = position_path(&audit);
    let from = read_position(&pos_file);
    status.counters.projected_seq.store(from, Ordering::Relaxed);
    jobs.seen(from);
    // Each journal message.
    let (tx, mut rx) = mpsc::channel::<(u64, bytes::Bytes)>(4096);
    let journal = nats.journal.clone();
    // The ledger partition's batches hold bursar's own ledger ops, not inputs of the pool: they are
    // not projected, so every instance's log holds what one engine's would.
    let ledger = crate::partition::ledger_partition(nats.partitions);
    rt.spawn(async move {
        let mut messages = match crate::nats::read_from(&journal, "bursar.journal.>", from + 1).await {
            Ok(m) => m,
            Err(e) => return tracing::error!(error = %e, "the audit projection cannot read the journal"),
        };
        while let Some(m) = messages.next().await {
            match m {
                Ok(m) => {
                    let Ok(info) = m.info() else { continue };
                    if tx.send((info.stream_sequence, m.message.payload.clone())).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the audit projection's consumer: retrying"),
            }
        }
    });
    std::thread::Builder::new()
        .name("bursar-projection".into())
        .spawn(move || {
            let mut writing = true;
            // The position as last written to its file, and when.
            let mut recorded = (from, std::time::Instant::now());
            while let Some(first) = rx.blocking_recv() {
                // The messages that came with the first, or within a few milliseconds of it, share
                // one audit transaction; the job index reads each as soon as it is taken.
                let mut batches = Vec::new();
                let mut take = |(seq, payload): (u64, bytes::Bytes)| {
                    for read in decode(seq, &payload, ledger, &jobs) {
                        index(&jobs, &read);
                        batches.push(read);
                    }
                    jobs.seen(seq);
                    seq
                };
                let (mut last, mut projected) = (take(first), 1u64);
                if rx.is_empty() {
                    std::thread::sleep(COALESCE);
                }
                while projected < 256 {
                    let Ok(m) = rx.try_recv() else { break };
                    last = take(m);
                    projected += 1;
                }
                if writing {
                    if let Err(e) = project(&mut log, batches) {
                        tracing::error!(error = %e, "the audit projection stopped: cannot write the audit log");
                        writing = false;
                    } else {
                        status.counters.projected.fetch_add(projected, Ordering::Relaxed);
                        status.counters.projected_seq.store(last, Ordering::Relaxed);
                        if recorded.1.elapsed() >= POSITION_EVERY {
                            record(&pos_file, last, &mut recorded);
                        }
                    }
                }
            }
            // The journal's reader stopped (the instance is stopping): where the log stands.
            let projected = status.counters.projected_seq.load(Ordering::Relaxed);
            if writing && recorded.0 < projected {
                record(&pos_file, projected, &mut recorded);
            }
        })
        .map_err(|e| ClusterError::Audit(format!("cannot start the projection thread: {e}")))
}

/// A journal batch, read, with its message's stream sequence and its entries' inputs decoded.
type Read = (u64, JournalBatch, Vec<Option<Input>>);

/// Reads the journal message at `seq`: every batch's position in the events stream goes to `jobs`;
/// the batches to project (not fences, not the ledger partition's) come back in order, each entry's
/// input decoded once.
fn decode(seq: u64, payload: &[u8], ledger: u32, jobs: &JobIndex) -> Vec<Read> {
    let mut out = Vec::new();
    for batch in crate::wire::batches(payload) {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(seq, error = %e, "a journal batch cannot be read; not projected");
                continue;
            }
        };
        jobs.applied(batch.partition, batch.events_through);
        if batch.takeover || batch.partition == ledger {
            continue;
        }
        out.push(read(seq, batch));
    }
    out
}

/// A batch with its entries' inputs decoded.
fn read(seq: u64, batch: JournalBatch) -> Read {
    let inputs = batch
        .entries
        .iter()
        .map(|entry| {
            match bursar_session::decode(Frame::Line { line: seq, bytes: entry.raw.as_bytes() }, Origin::Journal) {
                Line::Input(d) => Some(d.input),
                _ => None,
            }
        })
        .collect();
    (seq, batch, inputs)
}

/// Every submission of a journal batch goes into the job index.
fn index(jobs: &JobIndex, (_, batch, inputs): &Read) {
    for input in inputs.iter().flatten() {
        if let Input::Event(e) = input
            && let EventKind::JobSubmitted(spec) = &e.kind
        {
            jobs.remember(&spec.id, batch.partition);
        }
    }
}

/// Appends a group of journal messages to the log.
fn project(log: &mut AuditLog, batches: Vec<Read>) -> Result<(), String> {
    let mut records: Vec<Record> = Vec::new();
    for (seq, batch, inputs) in batches {
        if !batch.policy_sets.is_empty() || !batch.reload_failures.is_empty() {
            // Loads are recorded in order with the entries around them.
            if !records.is_empty() {
                log.append(&records).map_err(|e| e.to_string())?;
                records.clear();
            }
            for l in &batch.policy_sets {
                log.record_policy_set(&l.digest, &l.files).map_err(|e| e.to_string())?;
            }
            for f in &batch.reload_failures {
                log.record_policy_failure(&f.error, Some(&f.in_force)).map_err(|e| e.to_string())?;
            }
        }
        for (mut entry, input) in batch.entries.into_iter().zip(inputs) {
            let Some(input) = input else {
                tracing::warn!(seq, "a journaled input cannot be decoded; not projected");
                continue;
            };
            let digest: Arc<str> = Arc::from(entry.policy_set.as_str());
            records.push(Record::of(Entry {
                input: &input,
                raw: &entry.raw,
                sender: entry.sender.as_ref(),
                decisions: &mut entry.decisions,
                steps: &entry.steps,
                policy_set: &digest,
            }));
        }
    }
    if !records.is_empty() {
        log.append(&records).map_err(|e| e.to_string())?;
    }
    Ok(())
}
