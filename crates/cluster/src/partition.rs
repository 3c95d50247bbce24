//! Partitions: which partition a project belongs to, and the names of everything a partition has on
//! NATS (subjects, keys) — the one place these names are spelled.
//!
//! The partition of a project is FNV-1a (64-bit) of its UTF-8 bytes modulo the partition count. It is
//! written out here rather than taken from `std`'s hasher, whose output may change between Rust
//! releases: the hash decides where a project's state lives, so it must never change while a stream
//! exists. The count is fixed when the cluster's streams are created (`--partitions`) and stored in
//! the `bursar_meta` bucket; every instance reads it from there.

/// Stream of producers' events, one subject per partition.
pub const EVENTS_STREAM: &str = "BURSAR_EVENTS";
/// Stream of journal batches (the decisions stream), one subject per partition.
pub const JOURNAL_STREAM: &str = "BURSAR_JOURNAL";
/// Stream of snapshot chunks, one subject per partition.
pub const SNAPSHOTS_STREAM: &str = "BURSAR_SNAPSHOTS";
/// Key-value bucket of the cluster's settings (the partition count).
pub const META_BUCKET: &str = "bursar_meta";
/// Key-value bucket of partition leases.
pub const LEASES_BUCKET: &str = "bursar_leases";
/// Key-value bucket of snapshot pointers.
pub const POINTERS_BUCKET: &str = "bursar_snapshots";
/// Key-value bucket of the job → partition index (for events that name only a job).
pub const JOBS_BUCKET: &str = "bursar_jobs";
/// Key-value bucket of instance heartbeats (for sharing partitions fairly).
pub const MEMBERS_BUCKET: &str = "bursar_members";

/// The key of the partition count in [`META_BUCKET`].
pub const PARTITIONS_KEY: &str = "partitions";

/// FNV-1a, 64-bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The partition that owns `project` (or, for an event about a job no instance has indexed, the job
/// id) among `partitions`.
pub fn partition_of(key: &str, partitions: u32) -> u32 {
    let n = u64::from(partitions.max(1));
    u32::try_from(fnv1a(key.as_bytes()) % n).unwrap_or(0)
}

/// The partition that keeps the ledgers spanning projects (user and tag budgets,
/// [`bursar_engine::shared`]): the one after the projects' partitions, `partitions` itself. No
/// project hashes to it; it has a lease, a journal and snapshots like the others.
pub fn ledger_partition(partitions: u32) -> u32 {
    partitions
}

/// Subject the owner of the ledger partition answers ledger ops on.
pub const LEDGER_SUBJECT: &str = "bursar.ledger";

/// Subject of partition `p`'s events.
pub fn events_subject(p: u32) -> String {
    format!("bursar.events.{p}")
}

/// Subject of partition `p`'s journal batches before issue 54 (each instance now writes its own
/// subject, [`writer_subject`]; a partition taken over from such an owner is fenced here).
pub fn journal_subject(p: u32) -> String {
    format!("bursar.journal.{p}")
}

/// Subject an instance's journal writer publishes its messages on (`incarnation`: the instance's
/// name and start time, so a restarted instance writes a subject of its own).
pub fn writer_subject(incarnation: &str) -> String {
    format!("bursar.journal.w.{incarnation}")
}

/// Subject of partition `p`'s snapshot chunks.
pub fn snapshot_subject(p: u32) -> String {
    format!("bursar.snapshots.{p}")
}

/// Subject the owner of partition `p` answers admissions on.
pub fn admit_subject(p: u32) -> String {
    format!("bursar.admit.{p}")
}

/// Subject an instance takes admissions forwarded to it in batches on ([`crate::forward`]).
pub fn instance_subject(instance: &str) -> String {
    format!("bursar.admit.i.{instance}")
}

/// Key of partition `p` in the lease and pointer buckets.
pub fn partition_key(p: u32) -> String {
    format!("p{p}")
}

/// The partition a subject `bursar.<kind>.<p>` names.
pub fn partition_of_subject(subject: &str) -> Option<u32> {
    subject.rsplit('.').next()?.parse().ok()
}

/// A key-value key for a job id: the id itself when it is a valid key (letters, digits, `-`, `_`,
/// `=`, `/`, and `.` not at either end), else `x` and the hex of its bytes.
pub fn job_key(job_id: &str) -> String {
    let valid = !job_id.is_empty()
        && !job_id.starts_with('.')
        && !job_id.ends_with('.')
        && !job_id.starts_with('x')
        && job_id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'=' | b'/' | b'.'));
    if valid {
        return job_id.to_owned();
    }
    let mut k = String::with_capacity(1 + job_id.len() * 2);
    k.push('x');
    for b in job_id.bytes() {
        k.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        k.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    k
}

/// Bits of a decision cursor that number the decision inside its journal message.
pub const CURSOR_INDEX_BITS: u32 = 20;

/// The cursor of the `index`-th decision of the journal message at stream sequence `journal_seq`:
/// `journal_seq × 2^20 + index`. Cursors grow in stream order, so `GET /v1/decisions?after=C`
/// resumes exactly after decision `C`. A message holds fewer than 2^20 decisions (it is smaller
/// than NATS's largest payload, and a decision is more than a byte).
pub fn cursor(journal_seq: u64, index: usize) -> u64 {
    (journal_seq << CURSOR_INDEX_BITS) | (u64::try_from(index).unwrap_or(0) & ((1 << CURSOR_INDEX_BITS) - 1))
}

/// The journal sequence and index a cursor names.
pub fn split_cursor(cursor: u64) -> (u64, u64) {
    (cursor >> CURSOR_INDEX_BITS, cursor & ((1 << CURSOR_INDEX_BITS) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_hash_is_fnv1a_and_never_changes() {
        // The reference values of FNV-1a 64: if these change, every cluster's data is misplaced.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(partition_of("nlp", 16), (fnv1a(b"nlp") % 16) as u32);
        let spread: std::collections::BTreeSet<u32> =
            (0..200).map(|i| partition_of(&format!("project-{i}"), 8)).collect();
        assert_eq!(spread.len(), 8, "200 projects reach every one of 8 partitions");
    }

    #[test]
    fn job_keys_are_valid_and_distinct() {
        assert_eq!(job_key("slurm-42"), "slurm-42");
        assert_eq!(job_key("a b"), "x612062");
        // An id that starts with `x` is hex-encoded too, so it cannot collide with an encoded one.
        assert_eq!(job_key("x61"), "x783631");
        assert_ne!(job_key("x61"), job_key("a"));
        assert_eq!(job_key(".j"), "x2e6a");
    }

    #[test]
    fn cursors_order_by_message_then_index() {
        let c = cursor(7, 3);
        assert_eq!(split_cursor(c), (7, 3));
        assert!(cursor(7, 1_000_000) < cursor(8, 0));
        assert_eq!(partition_of_subject("bursar.events.12"), Some(12));
    }
}
