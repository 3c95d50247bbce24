//! [`StreamJournal`]: a partition owner's [`Journal`] — each flush is one JetStream message (or a few,
//! split by size) on `bursar.journal.<p>`, published with `Nats-Expected-Last-Subject-Sequence`.
//!
//! That header is the fence. The owner knows the last sequence on its subject (the takeover marker
//! it wrote, then each of its own messages); a new owner's takeover marker moves it, after which
//! every publish of the old owner is refused by the stream (`wrong last sequence`) and nothing it
//! decides after the takeover can reach the decisions stream — however long it was paused, whatever
//! its clock says. Any failed publish is treated the same way: the owner steps down and the next
//! owner replays what is in the journal, so a publish whose ack was lost is never doubled.
//!
//! Receipts number each decision with its cursor ([`crate::partition::cursor`]): the message's
//! stream sequence and the decision's index in it.

use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bursar_engine::{PolicySet, Transition};
use bursar_model::Decision;
use bursar_model::api::Sequenced;
use bursar_session::{Entry, Journal, JournalError, Receipt};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::partition::{cursor, journal_subject};
use crate::wire::{EPOCH_HEADER, JournalBatchOut, PolicyLoad, ReloadFailure};

#[derive(Serialize)]
struct EntryRef<'a> {
    raw: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    decisions: &'a [Decision],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    steps: &'a [Transition],
    policy_set: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ledger: Option<&'a bursar_engine::LedgerAnswer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sender: Option<&'a bursar_model::Sender>,
}

/// Who writes, with which fence.
#[derive(Debug, Clone)]
pub struct Writer {
    /// The partition.
    pub partition: u32,
    /// The fencing epoch.
    pub epoch: u64,
    /// This instance.
    pub instance: Arc<str>,
}

/// Publishes `payload` on `subject` only if the subject's last message is `expected` (0: none);
/// returns the new message's stream sequence.
pub async fn publish_fenced(
    js: &jetstream::Context,
    subject: String,
    expected: u64,
    epoch: u64,
    extra: &[(&str, String)],
    payload: Vec<u8>,
) -> Result<u64, String> {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Expected-Last-Subject-Sequence", expected.to_string().as_str());
    headers.insert(EPOCH_HEADER, epoch.to_string().as_str());
    for (k, v) in extra {
        headers.insert(*k, v.as_str());
    }
    let ack =
        js.publish_with_headers(subject, headers, payload.into()).await.map_err(|e| e.to_string())?.await.map_err(
            |e| match e.kind() {
                jetstream::context::PublishErrorKind::WrongLastSequence => {
                    "fenced: another owner wrote to the subject since (wrong last sequence)".to_owned()
                }
                _ => e.to_string(),
            },
        )?;
    Ok(ack.sequence)
}

/// The journal of one owned partition.
#[derive(Debug)]
pub struct StreamJournal {
    rt: tokio::runtime::Handle,
    js: jetstream::Context,
    writer: Writer,
    subject: String,
    /// The last sequence on the subject, as far as this owner knows (its own last write).
    last_seq: u64,
    max_bytes: usize,
    events_through: u64,
    entries: Vec<Box<RawValue>>,
    decisions: Vec<Vec<Decision>>,
    loads: Vec<PolicyLoad>,
    failures: Vec<ReloadFailure>,
    fenced: bool,
    /// Where the ledger link leaves the answer of the submission being applied, journaled beside it.
    answered: Option<crate::ledger::Answered>,
}

impl StreamJournal {
    /// A journal continuing after the message at `last_seq` (the owner's takeover marker), with
    /// messages of at most `max_bytes`.
    pub fn new(
        rt: tokio::runtime::Handle,
        js: jetstream::Context,
        writer: Writer,
        last_seq: u64,
        events_through: u64,
        max_bytes: usize,
    ) -> StreamJournal {
        let subject = journal_subject(writer.partition);
        StreamJournal {
            rt,
            js,
            writer,
            subject,
            last_seq,
            max_bytes: max_bytes.max(4096),
            events_through,
            entries: Vec::new(),
            decisions: Vec::new(),
            loads: Vec::new(),
            failures: Vec::new(),
            fenced: false,
            answered: None,
        }
    }

    /// Journals, beside each submission, the answer the ledger partition gave it (left in
    /// `answered` by the partition's [`crate::ledger::Link`]).
    pub fn with_answers(mut self, answered: crate::ledger::Answered) -> StreamJournal {
        self.answered = Some(answered);
        self
    }

    /// Every event of the partition up to this events-stream sequence has been consumed (applied,
    /// or found a duplicate): recorded in the next message.
    pub fn set_events_through(&mut self, seq: u64) {
        self.events_through = self.events_through.max(seq);
    }

    /// The events-stream sequence consumed so far.
    pub fn events_through(&self) -> u64 {
        self.events_through
    }

    /// The stream sequence of the last message written (or of the takeover marker).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// True once a publish was refused or failed: nothing more is written.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    fn message(&self, entries: &[Box<RawValue>], first: bool) -> Result<Vec<u8>, JournalError> {
        let (loads, failures): (&[PolicyLoad], &[ReloadFailure]) =
            if first { (&self.loads, &self.failures) } else { (&[], &[]) };
        serde_json::to_vec(&JournalBatchOut {
            partition: self.writer.partition,
            epoch: self.writer.epoch,
            instance: &self.writer.instance,
            events_through: self.events_through,
            takeover: false,
            policy_sets: loads,
            reload_failures: failures,
            entries,
        })
        .map_err(|e| JournalError::Store(format!("cannot encode a journal batch: {e}")))
    }

    fn publish(&mut self, payload: Vec<u8>) -> Result<u64, JournalError> {
        let fut = publish_fenced(&self.js, self.subject.clone(), self.last_seq, self.writer.epoch, &[], payload);
        let result = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), fut).await });
        match result {
            Ok(Ok(seq)) => {
                self.last_seq = seq;
                Ok(seq)
            }
            Ok(Err(e)) => {
                self.fenced = true;
                Err(JournalError::Store(format!("partition {}: {e}", self.writer.partition)))
            }
            Err(_) => {
                self.fenced = true;
                Err(JournalError::Store(format!(
                    "partition {}: the journal publish was not acknowledged within 10 s",
                    self.writer.partition
                )))
            }
        }
    }
}

impl Journal for StreamJournal {
    fn append(&mut self, entry: Entry<'_>) -> Result<(), JournalError> {
        if self.fenced {
            return Err(JournalError::Store(format!("partition {} is fenced", self.writer.partition)));
        }
        let ledger = self.answered.as_ref().and_then(|a| a.lock().ok().and_then(|mut a| a.take()));
        let text = serde_json::to_string(&EntryRef {
            raw: entry.raw,
            decisions: entry.decisions,
            steps: entry.steps,
            policy_set: entry.policy_set,
            ledger: ledger.as_ref(),
            sender: entry.sender,
        })
        .map_err(|e| JournalError::Store(format!("cannot encode a journal entry: {e}")))?;
        let raw = RawValue::from_string(text)
            .map_err(|e| JournalError::Store(format!("cannot encode a journal entry: {e}")))?;
        self.entries.push(raw);
        self.decisions.push(std::mem::take(entry.decisions));
        Ok(())
    }

    fn policy_set(&mut self, set: &PolicySet) -> Result<(), JournalError> {
        self.loads.push(PolicyLoad { digest: set.digest().to_owned(), files: set.files().to_vec() });
        Ok(())
    }

    fn reload_failed(&mut self, error: &str, in_force: &str) -> Result<(), JournalError> {
        self.failures.push(ReloadFailure { error: error.to_owned(), in_force: in_force.to_owned() });
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Receipt>, JournalError> {
        if self.entries.is_empty() && self.loads.is_empty() && self.failures.is_empty() {
            return Ok(Vec::new());
        }
        if self.fenced {
            return Err(JournalError::Store(format!("partition {} is fenced", self.writer.partition)));
        }
        let entries = std::mem::take(&mut self.entries);
        let mut decisions = std::mem::take(&mut self.decisions).into_iter();
        let mut receipts = Vec::with_capacity(entries.len());
        let mut start = 0;
        let mut first = true;
        while start < entries.len() || first {
            // The longest run of entries from `start` that fits one message (at least one entry).
            let mut end = start;
            let mut size = 512 + self.loads.iter().map(|l| 128 + 96 * l.files.len()).sum::<usize>();
            while end < entries.len() {
                let n = entries[end].get().len() + 1;
                if end > start && size + n > self.max_bytes {
                    break;
                }
                size += n;
                end += 1;
            }
            let payload = self.message(&entries[start..end], first)?;
            if payload.len() > self.max_bytes + 512 {
                self.fenced = true;
                return Err(JournalError::Store(format!(
                    "partition {}: one journal entry of {} bytes is larger than the largest NATS message ({} bytes)",
                    self.writer.partition,
                    payload.len(),
                    self.max_bytes
                )));
            }
            let seq = self.publish(payload)?;
            if first {
                self.loads.clear();
                self.failures.clear();
            }
            first = false;
            let mut index = 0;
            for _ in start..end {
                let ds = decisions.next().unwrap_or_default();
                let sequenced = ds
                    .into_iter()
                    .map(|d| {
                        let s = Sequenced { seq: cursor(seq, index), decision: d };
                        index += 1;
                        s
                    })
                    .collect();
                receipts.push(Receipt { input_seq: Some(seq), duplicate: false, decisions: sequenced });
            }
            start = end;
        }
        Ok(receipts)
    }
}
