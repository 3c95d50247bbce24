//! Snapshots of a partition: written in chunks on `bursar.snapshots.<p>` (each chunk fenced with
//! `Nats-Expected-Last-Subject-Sequence`), found through the partition's pointer in the
//! `bursar_snapshots` bucket (written with `update` on the expected revision), read back in order by
//! a new owner. The pointer also names the journal subject the partition's owner writes on: a new
//! owner fences that subject before it rewrites the pointer to name its own ([`Snapshots::take_over`],
//! [`crate::journal`]).
//!
//! A snapshot is a pure function of a prefix of the partition's journal: the owner writes one only
//! between batches, after a flush, and it records the journal sequence it covers. So whichever
//! snapshot a new owner finds, restoring it and replaying the journal after that sequence gives the
//! same state. Old chunks are not purged (a purge would be one more write a fenced owner could make);
//! the stream keeps chunks a day and the owner writes a snapshot at least every hour.

use std::time::Duration;

use async_nats::jetstream::stream::Stream;
use futures_util::StreamExt;

use crate::ClusterError;
use crate::journal::publish_fenced;
use crate::nats::Nats;
use crate::partition::{journal_subject, partition_key, snapshot_subject};
use crate::wire::{CHUNK_HEADER, PartitionSnapshot, SnapshotPointer, SnapshotRef};

/// Bytes per chunk (well under NATS's default 1 MiB payload).
pub const CHUNK: usize = 256 * 1024;

/// How long to wait for each message of a subject being read before giving up.
const READ_WAIT: Duration = Duration::from_secs(5);

fn err(what: impl Into<String>) -> impl Fn(&dyn std::fmt::Display) -> ClusterError {
    let what = what.into();
    move |e| ClusterError::Nats { what: what.clone(), error: e.to_string() }
}

/// Reads the messages of `subject` from stream sequence `from` in order, handing each to `f` until it
/// returns false.
pub async fn read_subject(
    stream: &Stream,
    subject: &str,
    from: u64,
    mut f: impl FnMut(u64, &async_nats::Message) -> Result<bool, ClusterError>,
) -> Result<(), ClusterError> {
    let mut messages = crate::nats::read_from(stream, subject, from)
        .await
        .map_err(|e| ClusterError::Nats { what: format!("read `{subject}`"), error: e })?;
    loop {
        let next = tokio::time::timeout(READ_WAIT, messages.next()).await.map_err(|_| ClusterError::Nats {
            what: format!("read `{subject}` from sequence {from}"),
            error: format!("no message within {READ_WAIT:?}: it was removed or never written"),
        })?;
        let Some(m) = next else {
            return Err(ClusterError::Nats { what: format!("read `{subject}`"), error: "the consumer ended".into() });
        };
        let m = m.map_err(|e| err(format!("read `{subject}`"))(&e))?;
        let seq = m.info().map_err(|e| err(format!("read `{subject}`"))(&*e))?.stream_sequence;
        if !f(seq, &m.message)? {
            return Ok(());
        }
    }
}

/// The last stream sequence on `subject` (0 when it has none).
pub async fn last_on_subject(stream: &Stream, subject: &str) -> Result<u64, ClusterError> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => Ok(m.sequence),
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(e) => Err(err(format!("read the last message of `{subject}`"))(&e)),
    }
}

/// The journal fences a takeover wrote.
#[derive(Debug, Clone, Default)]
pub struct Fenced {
    /// Each journal subject fenced, with the stream sequence its writer's batches of the partition
    /// follow (a previous owner's takeover fence; 0 when not known).
    pub subjects: Vec<(String, u64)>,
    /// The stream sequence of the last fence written (0: none, the partition never had a writer):
    /// every batch of the partition in the journal is before it.
    pub end: u64,
}

impl Fenced {
    /// The one subject that holds every batch of the partition after stream sequence `after`
    /// (`None`: read the whole journal): the one writer fenced, when it wrote the partition since
    /// before `after`.
    pub fn only_subject(&self, after: u64) -> Option<&str> {
        match self.subjects.as_slice() {
            [(subject, since)] if *since <= after => Some(subject),
            _ => None,
        }
    }
}

/// An owner's handle on its partition's snapshots: the fence positions it holds.
#[derive(Debug, Clone)]
pub struct Snapshots {
    partition: u32,
    epoch: u64,
    /// The last sequence on the snapshot subject, as this owner knows it.
    last_seq: u64,
    /// The pointer's revision this owner last wrote.
    pointer_rev: u64,
    /// The pointer as written.
    pointer: SnapshotPointer,
}

impl Snapshots {
    /// Takes over partition `partition` with fencing `epoch` for `instance`, whose journal writer
    /// publishes on `writer`: a marker on the snapshot subject (so an old owner's chunks are
    /// refused), a fence on the journal subject the pointer names (so an old owner's batches are
    /// refused, [`crate::journal::fence`]), and the pointer rewritten under the new epoch, naming
    /// `writer` (so an old owner's pointer update is refused). A pointer that moved in between is
    /// read again, and the writer it names fenced too; one of a newer epoch ends the takeover.
    /// Returns the handle (with the pointer found) and the fences written.
    pub async fn take_over(
        nats: &Nats,
        partition: u32,
        epoch: u64,
        instance: &str,
        writer: &str,
    ) -> Result<(Snapshots, Fenced), ClusterError> {
        let subject = snapshot_subject(partition);
        let mut marker = None;
        for _ in 0..20 {
            let last = last_on_subject(&nats.snapshots, &subject).await?;
            match publish_fenced(
                &nats.js,
                subject.clone(),
                last,
                Some(epoch),
                &[(CHUNK_HEADER, "fence".into())],
                Vec::new(),
            )
            .await
            {
                Ok(seq) => {
                    marker = Some(seq);
                    break;
                }
                Err(e) if e.starts_with("fenced") => continue,
                Err(e) => return Err(ClusterError::Nats { what: format!("fence `{subject}`"), error: e }),
            }
        }
        let last_seq = marker.ok_or_else(|| ClusterError::Nats {
            what: format!("fence `{subject}`"),
            error: "another writer kept moving the subject".into(),
        })?;
        let key = partition_key(partition);
        let mut fenced = Fenced::default();
        for _ in 0..20 {
            let entry = nats.pointers.entry(key.as_str()).await.map_err(|e| err("read a snapshot pointer")(&e))?;
            let (found, rev) = match &entry {
                Some(e) if e.operation == async_nats::jetstream::kv::Operation::Put => {
                    (serde_json::from_slice::<SnapshotPointer>(&e.value).unwrap_or_default(), Some(e.revision))
                }
                Some(e) => (SnapshotPointer::default(), Some(e.revision)),
                None => (SnapshotPointer::default(), None),
            };
            if found.epoch > epoch {
                return Err(ClusterError::Fenced {
                    partition,
                    why: format!("a newer owner (epoch {}) took the partition over first", found.epoch),
                });
            }
            // The journal subject the pointer names (an owner from before issue 54 wrote the
            // partition's own subject), fenced once: from here its writer stores nothing more of
            // the partition. A partition that never had a pointer never had a writer.
            if rev.is_some() {
                let previous = found.journal.clone().unwrap_or_else(|| journal_subject(partition));
                if !fenced.subjects.iter().any(|(s, _)| *s == previous) {
                    let seq = crate::journal::fence(&nats.js, &previous, partition, epoch, instance).await?;
                    fenced.end = fenced.end.max(seq);
                    fenced.subjects.push((previous, found.since));
                }
            }
            let pointer = SnapshotPointer {
                epoch,
                snapshot: found.snapshot.clone(),
                journal: Some(writer.to_owned()),
                since: fenced.end,
            };
            let value: bytes::Bytes = serde_json::to_vec(&pointer).map_err(|e| err("encode a pointer")(&e))?.into();
            let written = match rev {
                Some(r) => nats.pointers.update(key.as_str(), value, r).await.map_err(|e| e.to_string()),
                None => nats.pointers.create(key.as_str(), value).await.map_err(|e| e.to_string()),
            };
            match written {
                Ok(pointer_rev) => {
                    return Ok((Snapshots { partition, epoch, last_seq, pointer_rev, pointer }, fenced));
                }
                Err(e) => tracing::debug!(partition, error = %e, "the snapshot pointer moved; reading it again"),
            }
        }
        Err(ClusterError::Nats {
            what: format!("take over the snapshot pointer of partition {partition}"),
            error: "it kept changing".into(),
        })
    }

    /// The snapshot the pointer names, if any.
    pub fn current(&self) -> Option<&SnapshotRef> {
        self.pointer.snapshot.as_ref()
    }

    /// Reads the snapshot the pointer names.
    pub async fn read(&self, nats: &Nats) -> Result<Option<PartitionSnapshot>, ClusterError> {
        let Some(r) = self.pointer.snapshot.clone() else { return Ok(None) };
        let subject = snapshot_subject(self.partition);
        let mut blob = Vec::with_capacity(usize::try_from(r.bytes).unwrap_or(0));
        let mut got = 0u32;
        read_subject(&nats.snapshots, &subject, r.first_seq, |_, m| {
            let chunk = m.headers.as_ref().and_then(|h| h.get(CHUNK_HEADER)).map(|v| v.as_str().to_owned());
            let want = format!("{got}/{}", r.chunks);
            if chunk.as_deref() != Some(want.as_str()) {
                return Err(ClusterError::Nats {
                    what: format!("read the snapshot of partition {}", self.partition),
                    error: format!("expected chunk {want}, found {chunk:?}"),
                });
            }
            blob.extend_from_slice(&m.payload);
            got += 1;
            Ok(got < r.chunks)
        })
        .await?;
        let snap: PartitionSnapshot = serde_json::from_slice(&blob).map_err(|e| ClusterError::Nats {
            what: format!("decode the snapshot of partition {}", self.partition),
            error: e.to_string(),
        })?;
        Ok(Some(snap))
    }

    /// Writes `snap` in chunks and points the pointer at it. Fails (fenced) once a newer owner wrote
    /// its marker or its pointer.
    pub async fn write(&mut self, nats: &Nats, snap: &PartitionSnapshot) -> Result<SnapshotRef, ClusterError> {
        let blob = serde_json::to_vec(snap).map_err(|e| err("encode a snapshot")(&e))?;
        let subject = snapshot_subject(self.partition);
        let chunks: Vec<&[u8]> = if blob.is_empty() { vec![&blob[..]] } else { blob.chunks(CHUNK).collect() };
        let n = u32::try_from(chunks.len()).unwrap_or(u32::MAX);
        let mut first_seq = 0;
        for (i, c) in chunks.iter().enumerate() {
            let seq = publish_fenced(
                &nats.js,
                subject.clone(),
                self.last_seq,
                Some(self.epoch),
                &[(CHUNK_HEADER, format!("{i}/{n}"))],
                c.to_vec(),
            )
            .await
            .map_err(|e| ClusterError::Fenced { partition: self.partition, why: e })?;
            self.last_seq = seq;
            if i == 0 {
                first_seq = seq;
            }
        }
        let r = SnapshotRef {
            first_seq,
            chunks: n,
            bytes: blob.len() as u64,
            journal_seq: snap.journal_seq,
            events_through: snap.events_through,
        };
        let pointer = SnapshotPointer { epoch: self.epoch, snapshot: Some(r.clone()), ..self.pointer.clone() };
        let value = serde_json::to_vec(&pointer).map_err(|e| err("encode a pointer")(&e))?;
        let rev =
            nats.pointers.update(partition_key(self.partition), value.into(), self.pointer_rev).await.map_err(|e| {
                ClusterError::Fenced { partition: self.partition, why: format!("snapshot pointer: {e}") }
            })?;
        self.pointer_rev = rev;
        self.pointer = pointer;
        Ok(r)
    }
}
