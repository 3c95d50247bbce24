//! Helpers shared by the audit integration tests: temp dirs and sample events and decisions.
#![allow(dead_code, reason = "each test binary uses a different subset of the helpers")]
#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::PathBuf;
use std::sync::Arc;

use bursar_audit::Record;
use bursar_model::{Decision, DecisionKind, Timestamp, decode_event};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("bursar-audit-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The raw line of a `job.submitted` event `e{i}` for job `j{i}` in `project`, at day `day` of Nov 2026.
pub fn submitted_line(i: u64, project: &str, user: &str, day: u32) -> String {
    format!(
        r#"{{"id":"e{i}","time":"2026-11-{day:02}T09:00:00Z","type":"job.submitted","job":{{"id":"j{i}","project":"{project}","user":"{user}","gpus":8,"requested_hours":4.0}}}}"#
    )
}

/// A decision about job `j{i}` caused by event `e{i}`.
pub fn decision(i: u64, n: usize, project: &str, user: &str, day: u32, kind: DecisionKind, policy: &str) -> Decision {
    Decision {
        decision_id: format!("e{i}/{n}"),
        event_id: format!("e{i}"),
        time: Timestamp::parse(&format!("2026-11-{day:02}T09:00:00Z")).unwrap(),
        job_id: Some(format!("j{i}").into()),
        project: Some(project.into()),
        decision: kind,
        until: None,
        policies: vec![policy.into()],
        reason: format!("{policy} said {}", kind.as_str()),
        dry_run: false,
        admission: n == 0,
        user: Some(user.into()),
        gpus: Some(8.into()),
        gpu_hours: Some(32.0),
        hints: None,
    }
}

/// An entry: submitted event `e{i}` and one decision of `kind`.
pub fn entry(i: u64, project: &str, user: &str, day: u32, kind: DecisionKind, policy: &str, set: &str) -> Record {
    let raw = submitted_line(i, project, user, day);
    let ev = decode_event(&raw).unwrap();
    Record::new(&raw, &ev, vec![decision(i, 0, project, user, day, kind, policy)], Arc::from(set))
}

/// What an attacker with write access and this crate's public hashing rules can do: recompute every
/// chain from its start (or its checkpoint) over the rows as they now are, then every anchor (each head
/// an anchor records moved to the recomputed hash of that row, or of the newest row at or before it
/// when rows were removed), then `chain_heads`. The result passes every check that has no outside
/// witness.
pub fn rehash(db: &std::path::Path) {
    use bursar_audit::canon::{Canon, GENESIS, Hash};
    use std::collections::BTreeMap;
    let conn = rusqlite::Connection::open(db).unwrap();
    let cols = |chain: &str| match chain {
        "events" => "seq, event_id, time, type, job, project, user, raw, recorded_at",
        "decisions" => {
            "seq, decision_id, event_id, event_seq, time, recorded_at, job, project, user, decision, dry_run, admission, policies, reason, until, gpus, gpu_hours, policy_set, json"
        }
        "policy_loads" => "seq, at, event_seq, ok, digest, error",
        _ => {
            "seq, at, kind, events_seq, events_hash, decisions_seq, decisions_hash, loads_seq, loads_hash, subject, subject_seq, digest, note"
        }
    };
    let mut new: BTreeMap<&str, BTreeMap<i64, Hash>> = BTreeMap::new();
    for chain in ["events", "decisions", "policy_loads"] {
        let start: Option<(i64, Vec<u8>)> = conn
            .query_row(
                "SELECT through_seq, hash FROM checkpoints WHERE chain = ?1 ORDER BY id DESC LIMIT 1",
                [chain],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .ok();
        let (from, mut prev) = match start {
            Some((s, h)) => (s, Hash::try_from(h.as_slice()).unwrap()),
            None => (0, GENESIS),
        };
        let mut hashes = BTreeMap::new();
        hashes.insert(from, prev);
        let rows: Vec<(i64, Hash)> = {
            let mut st = conn.prepare(&format!("SELECT {} FROM {chain} ORDER BY seq", cols(chain))).unwrap();
            let n = st.column_count();
            let mut rows = st.query([]).unwrap();
            let mut out = Vec::new();
            while let Some(r) = rows.next().unwrap() {
                let mut c = Canon::after(&prev);
                for i in 0..n {
                    c.value(r.get_ref(i).unwrap());
                }
                prev = c.finish();
                out.push((r.get(0).unwrap(), prev));
            }
            out
        };
        for (seq, h) in rows {
            conn.execute(&format!("UPDATE {chain} SET hash = ?1 WHERE seq = ?2"), rusqlite::params![&h[..], seq])
                .unwrap();
            hashes.insert(seq, h);
        }
        let (last, h) = hashes.iter().next_back().map(|(s, h)| (*s, *h)).unwrap();
        conn.execute(
            "INSERT INTO chain_heads (chain, seq, hash) VALUES (?1, ?2, ?3) ON CONFLICT(chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
            rusqlite::params![chain, last, &h[..]],
        )
        .unwrap();
        new.insert(chain, hashes);
    }
    let at = |chain: &str, seq: i64| -> (i64, Hash) {
        let m = &new[chain];
        m.range(..=seq).next_back().map(|(s, h)| (*s, *h)).unwrap()
    };
    let anchors: Vec<(i64, i64, i64, i64)> = {
        let mut st =
            conn.prepare("SELECT seq, events_seq, decisions_seq, loads_seq FROM anchors ORDER BY seq").unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(Result::unwrap).collect()
    };
    let mut prev = GENESIS;
    for (seq, e, d, l) in anchors {
        let (e, eh) = at("events", e);
        let (d, dh) = at("decisions", d);
        let (l, lh) = at("policy_loads", l);
        conn.execute(
            "UPDATE anchors SET events_seq = ?1, events_hash = ?2, decisions_seq = ?3, decisions_hash = ?4, loads_seq = ?5, loads_hash = ?6 WHERE seq = ?7",
            rusqlite::params![e, &eh[..], d, &dh[..], l, &lh[..], seq],
        )
        .unwrap();
        let mut st = conn.prepare(&format!("SELECT {} FROM anchors WHERE seq = ?1", cols("anchors"))).unwrap();
        let n = st.column_count();
        let h = st
            .query_row([seq], |r| {
                let mut c = Canon::after(&prev);
                for i in 0..n {
                    c.value(r.get_ref(i)?);
                }
                Ok(c.finish())
            })
            .unwrap();
        conn.execute("UPDATE anchors SET hash = ?1 WHERE seq = ?2", rusqlite::params![&h[..], seq]).unwrap();
        conn.execute(
            "INSERT INTO chain_heads (chain, seq, hash) VALUES ('anchors', ?1, ?2) ON CONFLICT(chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
            rusqlite::params![seq, &h[..]],
        )
        .unwrap();
        prev = h;
    }
}

/// Runs `sql` on the file with a plain connection, as anyone with write access could.
pub fn sql(db: &std::path::Path, sql: &str) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch(sql).unwrap();
}
