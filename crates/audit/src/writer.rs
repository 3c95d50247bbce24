//! [`Writer`]: the audit log off the evaluation path, on its own thread, with group commit.
//!
//! The evaluating thread sends [`Entry`]s into a bounded channel ([`Writer::send`] blocks when it is
//! full: back-pressure instead of unbounded memory). The writer thread takes whatever has queued up
//! (at least one entry, at most `max_group`), appends it in one transaction, and only after the commit
//! calls the `on_commit` hook with the committed entries. `bursar eval --audit` prints decisions in
//! that hook, so nothing printed can be missing from the log. The first error (disk full, unwritable
//! file, a failed hook) stops the thread; the next [`Writer::send`] or [`Writer::finish`] returns it,
//! and nothing queued after it is committed or handed on.

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;

use crate::error::{AuditError, Result};
use crate::log::{Appended, AuditLog, Entry};

/// What the writer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Entries received.
    pub entries: u64,
    /// Events written (duplicates excluded).
    pub events: u64,
    /// Entries skipped because their event id was already in the log.
    pub duplicates: u64,
    /// Decisions written.
    pub decisions: u64,
    /// Largest group committed at once, in entries.
    pub largest_group: usize,
}

/// Settings of the writer thread.
#[derive(Debug, Clone, Copy)]
pub struct WriterConfig {
    /// Entries the channel holds before [`Writer::send`] blocks.
    pub capacity: usize,
    /// Most entries committed in one transaction.
    pub max_group: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig { capacity: 16 * 1024, max_group: 8 * 1024 }
    }
}

/// Called on the writer thread after each commit with the committed entries and what happened to each.
pub type CommitHook = Box<dyn FnMut(&[Entry], &[Appended]) -> std::io::Result<()> + Send>;

/// A running writer thread.
#[derive(Debug)]
pub struct Writer {
    tx: Option<SyncSender<Entry>>,
    handle: Option<JoinHandle<Result<WriterStats>>>,
}

impl Writer {
    /// Starts the writer thread over `log`.
    pub fn spawn(log: AuditLog, config: WriterConfig, on_commit: CommitHook) -> Result<Writer> {
        let (tx, rx) = sync_channel(config.capacity.max(1));
        let handle = std::thread::Builder::new()
            .name("bursar-audit".into())
            .spawn(move || run(log, rx, config.max_group.max(1), on_commit))
            .map_err(|e| AuditError::WriterStopped(Some(format!("cannot start the writer thread: {e}"))))?;
        Ok(Writer { tx: Some(tx), handle: Some(handle) })
    }

    /// Queues an entry, blocking while the channel is full. If the writer stopped, returns its error.
    pub fn send(&mut self, entry: Entry) -> Result<()> {
        let Some(tx) = &self.tx else { return Err(AuditError::WriterStopped(None)) };
        if tx.send(entry).is_ok() {
            return Ok(());
        }
        // The thread has stopped: report why.
        self.tx = None;
        match self.join() {
            Err(e) => Err(e),
            Ok(_) => Err(AuditError::WriterStopped(None)),
        }
    }

    /// Closes the channel, waits until everything queued is committed and handed on, and returns the
    /// counters (or the first error).
    pub fn finish(mut self) -> Result<WriterStats> {
        self.tx = None;
        self.join()
    }

    fn join(&mut self) -> Result<WriterStats> {
        match self.handle.take() {
            None => Err(AuditError::WriterStopped(None)),
            Some(h) => match h.join() {
                Ok(r) => r,
                Err(_) => Err(AuditError::WriterStopped(Some("it panicked".into()))),
            },
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(mut log: AuditLog, rx: Receiver<Entry>, max_group: usize, mut on_commit: CommitHook) -> Result<WriterStats> {
    let mut stats = WriterStats::default();
    let mut group: Vec<Entry> = Vec::with_capacity(max_group.min(64 * 1024));
    loop {
        group.clear();
        match rx.recv() {
            Ok(e) => group.push(e),
            Err(_) => {
                // Closed: sign what a witness that signs every so often still has pending.
                log.sign_pending()?;
                return Ok(stats);
            }
        }
        while group.len() < max_group {
            match rx.try_recv() {
                Ok(e) => group.push(e),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let done = log.append(&group)?;
        stats.commits += 1;
        stats.entries += group.len() as u64;
        stats.largest_group = stats.largest_group.max(group.len());
        for a in &done {
            if a.duplicate {
                stats.duplicates += 1;
            } else if a.event_seq.is_some() {
                stats.events += 1;
            }
            stats.decisions += (a.decisions.end - a.decisions.start) as u64;
        }
        on_commit(&group, &done).map_err(AuditError::Output)?;
    }
}
