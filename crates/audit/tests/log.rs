//! The audit log's storage API on real SQLite files: append, idempotency, cursors, snapshots, policy
//! loads, reopen, and the disk-full path.

use std::sync::Arc;

use crate::common::{TempDir, decision, entry, submitted_line};
use bursar_audit::{AuditLog, Durability, Record, SourceFile, Writer, WriterConfig};
use bursar_model::DecisionKind;

#[test]
fn append_assigns_contiguous_seqs_and_skips_known_event_ids() {
    let dir = TempDir::new("append");
    let db = dir.path("a.db");
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    let raw = submitted_line(1, "nlp", "alice", 2);
    let ev = bursar_model::decode_event(&raw).unwrap();
    let two = vec![
        decision(1, 0, "nlp", "alice", 2, DecisionKind::Allow, "p/a"),
        decision(1, 1, "nlp", "alice", 2, DecisionKind::Alert, "p/b"),
    ];
    let batch = vec![
        Record::new(&raw, &ev, two, Arc::from("set1")),
        entry(2, "cv", "bob", 3, DecisionKind::Deny, "quota/x", "set1"),
        Record::without_event(
            vec![decision(9, 0, "cv", "bob", 3, DecisionKind::Reclaim, "reclaim/idle")],
            "set1".into(),
        ),
    ];
    let done = log.append(&batch).unwrap();
    assert_eq!(done[0].event_seq, Some(1));
    assert_eq!(done[0].decisions, 1..3);
    assert_eq!(done[1].event_seq, Some(2));
    assert_eq!(done[1].decisions, 3..4);
    assert_eq!(done[2].event_seq, None);
    assert_eq!(done[2].decisions, 4..5);
    assert!(done.iter().all(|a| !a.duplicate));

    // The same events again (a rerun): nothing new, flagged as duplicates, in a batch with a new one.
    let again = vec![
        entry(1, "nlp", "alice", 2, DecisionKind::Allow, "p/a", "set1"),
        entry(3, "nlp", "carol", 4, DecisionKind::Allow, "p/a", "set1"),
    ];
    let done = log.append(&again).unwrap();
    assert!(done[0].duplicate);
    assert!(done[0].decisions.is_empty());
    assert_eq!(done[1].event_seq, Some(3));
    assert_eq!(done[1].decisions, 5..6);
    drop(log);

    // Reopen: the cursors continue where they were.
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    assert_eq!(log.last_event_seq(), 3);
    assert_eq!(log.last_decision_seq(), 5);
    let done = log.append(&[entry(4, "nlp", "alice", 5, DecisionKind::Deny, "q", "set2")]).unwrap();
    assert_eq!(done[0].decisions, 6..7);

    let all = log.decisions_since(0, 100).unwrap();
    assert_eq!(all.iter().map(|d| d.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(all[1].decision, "alert");
    assert_eq!(all[1].event_seq, Some(1));
    assert_eq!(all[3].event_seq, None);
    assert_eq!(all[5].policy_set, "set2");
    assert_eq!(all[2].policies, vec!["quota/x".to_owned()]);
    let back: bursar_model::Decision = all[2].to_decision().unwrap();
    assert_eq!(back, decision(2, 0, "cv", "bob", 3, DecisionKind::Deny, "quota/x"));
    let page = log.decisions_since(4, 1).unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].seq, 5);

    let evs = log.events_since(1, 10).unwrap();
    assert_eq!(evs.iter().map(|e| e.event_id.as_str()).collect::<Vec<_>>(), vec!["e2", "e3", "e4"]);
    assert_eq!(evs[0].kind, "job.submitted");
    assert_eq!(evs[0].project.as_deref(), Some("cv"));
    assert_eq!(evs[0].user.as_deref(), Some("bob"));
    assert_eq!(evs[0].raw, submitted_line(2, "cv", "bob", 3));
}

#[test]
fn snapshots_and_policy_loads_round_trip() {
    let dir = TempDir::new("snap");
    let db = dir.path("s.db");
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    assert!(log.latest_snapshot().unwrap().is_none());
    let files = vec![SourceFile { path: "p/q.toml".into(), digest: "ab".into() }];
    assert_eq!(log.record_policy_set("d1", &files).unwrap(), 1);
    log.append(&[entry(1, "nlp", "a", 2, DecisionKind::Allow, "p", "d1")]).unwrap();
    assert_eq!(log.record_policy_failure("q.toml:1: bad", Some("d1")).unwrap(), 2);
    log.save_snapshot(1, Some("d1"), b"one").unwrap();
    log.save_snapshot(5, Some("d1"), b"five").unwrap();
    log.save_snapshot(3, None, b"three").unwrap();
    let s = log.latest_snapshot().unwrap().unwrap();
    assert_eq!((s.event_seq, s.blob.as_slice(), s.policy_set.as_deref()), (5, &b"five"[..], Some("d1")));
    assert_eq!(log.prune_snapshots(1).unwrap(), 2);
    drop(log);

    let log = AuditLog::open_read(&db).unwrap();
    let loads = log.policy_loads().unwrap();
    assert_eq!(loads.len(), 2);
    assert!(loads[0].ok);
    assert_eq!(loads[0].event_seq, 0);
    assert!(!loads[1].ok);
    assert_eq!(loads[1].event_seq, 1);
    assert_eq!(loads[1].error.as_deref(), Some("q.toml:1: bad"));
    let (f, _) = log.policy_set_files("d1").unwrap().unwrap();
    assert_eq!(f, files);
    assert!(log.policy_set_files("nope").unwrap().is_none());
    assert_eq!(log.latest_snapshot().unwrap().unwrap().event_seq, 5);
}

#[test]
fn a_full_disk_fails_the_append_and_keeps_the_committed_rows() {
    let dir = TempDir::new("full");
    let db = dir.path("f.db");
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    log.append(&[entry(1, "nlp", "a", 2, DecisionKind::Allow, "p", "d")]).unwrap();
    let pages: i64 = log.connection().query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    log.set_max_pages(pages + 2).unwrap();
    let mut err = None;
    for i in 0..2_000u64 {
        let batch: Vec<Record> =
            (0..50).map(|k| entry(10 + i * 50 + k, "nlp", "a", 3, DecisionKind::Deny, "p", "d")).collect();
        if let Err(e) = log.append(&batch) {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("the page limit must be reached");
    assert!(err.is_disk_full(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("full"), "{msg}");
    // Whatever was committed before is intact, and the failed batch left nothing half-written.
    let n = log.last_decision_seq();
    drop(log);
    let log = AuditLog::open_read(&db).unwrap();
    let all = log.decisions_since(0, usize::MAX).unwrap();
    assert_eq!(all.len() as i64, n);
    assert_eq!(all.len() % 50, 1);
    assert!(bursar_audit::verify::verify(&log).unwrap().is_ok());
}

#[test]
fn the_writer_thread_hands_on_only_committed_entries_and_reports_a_full_disk() {
    let dir = TempDir::new("writer");
    let db = dir.path("w.db");
    let log = AuditLog::open(&db, Durability::Durable).unwrap();
    let pages: i64 = log.connection().query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    log.set_max_pages(pages + 30).unwrap();
    let handed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let h2 = handed.clone();
    let mut w = Writer::spawn(
        log,
        WriterConfig { capacity: 8, max_group: 16, ..WriterConfig::default() },
        Box::new(move |entries, _| {
            let mut v = h2.lock().unwrap();
            for e in entries {
                for d in &e.decisions {
                    v.push(d.decision_id.clone());
                }
            }
            Ok(())
        }),
    )
    .unwrap();
    let mut failed = None;
    for i in 0..100_000u64 {
        if let Err(e) = w.send_record(entry(i, "nlp", "a", 2, DecisionKind::Allow, "p", "d")) {
            failed = Some(e);
            break;
        }
    }
    let err = match failed {
        Some(e) => e,
        None => w.finish().unwrap_err(),
    };
    assert!(err.is_disk_full(), "{err}");
    let handed = handed.lock().unwrap().clone();
    assert!(!handed.is_empty());
    let log = AuditLog::open_read(&db).unwrap();
    let stored: Vec<String> = log.decisions_since(0, usize::MAX).unwrap().into_iter().map(|d| d.decision_id).collect();
    // Everything handed on is stored, in the same order; nothing was handed on that is not stored.
    assert_eq!(stored, handed);
}

#[test]
fn flush_then_calls_back_in_order_with_each_batchs_own_receipts_once_they_are_committed() {
    use bursar_audit::Journal;
    let dir = TempDir::new("flush-then");
    let db = dir.path("f.db");
    let log = AuditLog::open(&db, Durability::Durable).unwrap();
    let mut w = Writer::spawn(log, WriterConfig { receipts: true, ..WriterConfig::default() }, bursar_audit::no_hook())
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(u64, Vec<String>, Vec<String>)>::new()));
    for batch in 0..40u64 {
        for k in 0..3 {
            let i = batch * 3 + k;
            w.send_record(entry(i, "nlp", "a", 2, DecisionKind::Allow, "p", "d")).unwrap();
        }
        let seen = seen.clone();
        let db = db.clone();
        w.flush_then(Box::new(move |receipts| {
            let ids: Vec<String> =
                receipts.iter().flat_map(|r| r.decisions.iter().map(|s| s.decision.decision_id.clone())).collect();
            // Called only once durable: a fresh reader already sees every decision it is told about.
            let read = AuditLog::open_read(&db).unwrap();
            let stored: Vec<String> =
                read.decisions_since(0, usize::MAX).unwrap().into_iter().map(|d| d.decision_id).collect();
            let missing: Vec<String> = ids.iter().filter(|id| !stored.contains(id)).cloned().collect();
            seen.lock().unwrap().push((batch, ids, missing));
        }))
        .unwrap();
    }
    // A plain flush after the callbacks: they have all run, and nothing is left for it.
    let rest = w.flush().unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 40);
    for (n, (batch, ids, missing)) in seen.iter().enumerate() {
        assert_eq!(*batch, n as u64, "callbacks run in the order of their flushes");
        let want: Vec<String> = (0..3).map(|k| format!("e{}/0", batch * 3 + k)).collect();
        assert_eq!(ids, &want, "each callback gets exactly its own batch's receipts");
        assert!(missing.is_empty(), "told about decisions not yet committed: {missing:?}");
    }
    let stats = w.finish().unwrap();
    assert_eq!(stats.entries, 120);
}

/// The writer thread's checkpoints run on a thread of their own (`bursar_audit::checkpoint`): under a
/// steady stream of small transactions (what `serve` commits), the checkpoint thread copies most of
/// the WAL, the writer copies the last pages so the checkpoint completes and the WAL restarts (it
/// would otherwise grow by every page of every transaction: about 90 MiB here), and closing the
/// writer leaves a complete database file and no WAL.
#[test]
fn checkpoints_run_beside_the_writer_and_keep_the_wal_bounded() {
    use bursar_audit::checkpoint::HARD_PAGES;
    let dir = TempDir::new("checkpoints");
    let db = dir.path("c.db");
    let wal = dir.path("c.db-wal");
    let log = AuditLog::open(&db, Durability::Fast).unwrap();
    let mut w =
        Writer::spawn(log, WriterConfig { max_group: 16, ..WriterConfig::default() }, bursar_audit::no_hook()).unwrap();
    let health = w.health();
    let n = 8_000u64;
    let mut largest_wal = 0;
    for i in 0..n {
        // 50 projects and 300 users: each small transaction dirties a page per record in the
        // (project, time) and (user, time) indexes, as under serve.
        w.send_record(entry(i, &format!("p{}", i % 50), &format!("u{}", i % 300), 2, DecisionKind::Allow, "p", "d"))
            .unwrap();
        if i % 16 == 15 {
            bursar_audit::Journal::flush(&mut w).unwrap();
            largest_wal = largest_wal.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
        }
    }
    let t = health.totals();
    assert!(t.checkpoints > 0, "the checkpoint thread never ran: {t:?}");
    assert!(t.inline_checkpoints > 0, "the writer never completed a checkpoint: {t:?}");
    assert_eq!(t.checkpoint_failures, 0, "{t:?}");
    // A WAL frame is a page and a 24-byte header; one transaction may land past the limit.
    let bound = (i64::from(HARD_PAGES) + 200) as u64 * (4096 + 24);
    assert!(largest_wal > 0 && largest_wal <= bound, "largest WAL {largest_wal} bytes, bound {bound}");
    w.finish().unwrap();
    assert!(!wal.exists(), "the last connection to close checkpoints and removes the WAL");
    let log = AuditLog::open_read(&db).unwrap();
    assert_eq!(log.decisions_since(0, usize::MAX).unwrap().len() as u64, n);
    assert!(bursar_audit::verify::verify(&log).unwrap().is_ok());
}

/// A job's events come from the `events_by_job` look-up up to its cursor and from `events` after
/// it (schema version 5): over samples of ten jobs appended in groups that cross run boundaries,
/// `events_of_job` always returns exactly that job's events in order, and `explain` tells the same.
#[test]
fn a_jobs_events_are_read_from_the_lookup_and_the_events_after_it() {
    use bursar_audit::log::INDEX_RUN;
    let dir = TempDir::new("job-events");
    let mut log = AuditLog::open(dir.path("j.db"), Durability::Fast).unwrap();
    let mut jobs_of = Vec::new();
    let mut n = 0u64;
    for group in [10usize, 400, 3, 300, 1, 900, 20] {
        let mut batch = Vec::new();
        for _ in 0..group {
            n += 1;
            let job = format!("j{}", n * 7 % 10);
            let raw = format!(
                r#"{{"id":"s{n}","time":"2026-11-02T09:{:02}:00Z","type":"job.sample","job_id":"{job}","gpu_util":0.5}}"#,
                n % 60
            );
            let ev = bursar_model::decode_event(&raw).unwrap();
            batch.push(Record::new(&raw, &ev, Vec::new(), Arc::from("s")));
            jobs_of.push((n as i64, job));
        }
        log.append(&batch).unwrap();
        let through: i64 = log
            .connection()
            .query_row("SELECT through_seq FROM lookup_cursors WHERE chain = 'events'", [], |r| r.get(0))
            .unwrap();
        assert!(n as i64 - through < INDEX_RUN, "{through} of {n}");
        for k in 0..10 {
            let job = format!("j{k}");
            let got: Vec<i64> = log.events_of_job(&job).unwrap().into_iter().map(|e| e.seq).collect();
            let want: Vec<i64> = jobs_of.iter().filter(|(_, j)| *j == job).map(|(s, _)| *s).collect();
            assert_eq!(got, want, "{job} after {n} events");
            let story = bursar_audit::query::explain(&log, &job).unwrap();
            assert_eq!(story.steps.len(), want.len(), "{job}");
        }
    }
    assert!(bursar_audit::verify::verify(&log).unwrap().is_ok());
}

/// Schema version 6 stores a decision's JSON only when its columns cannot give it back. Over arbitrary
/// decisions (any text, every optional field present or not, any GPU-hour figure including NaN,
/// infinities and -0.0, placement hints or none), what a reader gets is exactly what was emitted.
mod stored_once {
    use super::*;
    use bursar_audit::stores_as_columns;
    use bursar_model::{Decision, Hints, Timestamp};
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        // Plain names, any string, and the characters JSON escapes (quotes, backslashes, controls).
        prop_oneof![
            Just(String::new()),
            "[a-z0-9/._-]{1,12}",
            any::<String>(),
            "[\"\\\\\u{0}-\u{1f}\u{7f}\u{2028}é]{0,4}"
        ]
    }

    fn hours() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            any::<f64>().prop_map(Some),
            prop::sample::select(vec![0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300, 5e-324, 0.1])
                .prop_map(Some),
        ]
    }

    fn decision() -> impl Strategy<Value = Decision> {
        let names = (text(), text(), prop::option::of(text()), prop::option::of(text()), prop::option::of(text()));
        let kind = prop::sample::select(DecisionKind::ALL.to_vec());
        // Years 0001–9999: the times RFC 3339 can write (and so the decoder can read back).
        let year = || -62_135_596_800_000i64..253_402_300_799_999;
        let when = (year(), prop::option::of(year()));
        let rest = (
            prop::collection::vec(text(), 0..3),
            text(),
            any::<bool>(),
            any::<bool>(),
            // Whole counts (an INTEGER in the log) and MIG shares (a TEXT such as "2/7").
            prop::option::of(prop_oneof![
                (0u32..=bursar_model::limits::GPUS).prop_map(bursar_model::Gpus::whole),
                (0u64..=u64::from(bursar_model::limits::GPUS) * bursar_model::Gpus::PARTS)
                    .prop_map(bursar_model::Gpus::from_parts),
            ]),
            hours(),
        );
        let hints =
            prop::option::of((prop::option::of(text()), prop::option::of(any::<i64>()), prop::option::of(text())));
        (names, kind, when, rest, hints).prop_map(
            |(
                (id, ev, job, project, user),
                decision,
                (time, until),
                (policies, reason, dry_run, admission, gpus, gpu_hours),
                hints,
            )| {
                Decision {
                    decision_id: id,
                    event_id: ev,
                    time: Timestamp(time),
                    job_id: job.map(Into::into),
                    project: project.map(Into::into),
                    decision,
                    until: until.map(Timestamp),
                    policies: policies.into_iter().map(Into::into).collect(),
                    reason,
                    dry_run,
                    admission,
                    user: user.map(Into::into),
                    gpus,
                    gpu_hours,
                    hints: hints.map(|(q, priority, r)| Hints {
                        queue: q.map(Into::into),
                        priority,
                        region: r.map(Into::into),
                    }),
                }
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn readers_get_the_emitted_json(batch in prop::collection::vec(decision(), 1..24)) {
            let dir = TempDir::new("stored-once");
            let db = dir.path("a.db");
            let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
            log.append(&[Record::without_event(batch.clone(), "set".into())]).unwrap();
            let stored = log.decisions_since(0, usize::MAX).unwrap();
            prop_assert_eq!(stored.len(), batch.len());
            for (d, s) in batch.iter().zip(&stored) {
                prop_assert_eq!(s.stored_json.is_empty(), stores_as_columns(d));
                prop_assert_eq!(s.wire_json().unwrap(), d.to_json());
                // The decision itself comes from the columns (hints from the JSON), so it is exact
                // wherever SQLite keeps a value bit for bit: all but a NaN or -0.0 GPU-hour figure.
                if d.gpu_hours.is_none_or(|h| !(h.is_nan() || h == 0.0 && h.is_sign_negative())) {
                    let mut want = d.clone();
                    want.hints = want.hints.filter(|h| !h.is_empty());
                    prop_assert_eq!(s.to_decision().unwrap(), want);
                }
            }
        }
    }

    /// A log holding both kinds of row (a decision with placement hints keeps its JSON) verifies,
    /// and editing a column of a row without JSON is caught by the chain like any other edit.
    #[test]
    fn both_kinds_of_row_verify_and_edits_are_caught() {
        let dir = TempDir::new("stored-once-verify");
        let db = dir.path("a.db");
        let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
        let plain = crate::common::decision(1, 0, "nlp", "alice", 2, DecisionKind::Allow, "p/a");
        let mut hinted = crate::common::decision(2, 0, "nlp", "alice", 2, DecisionKind::Allow, "placement/x");
        hinted.hints = Some(Hints { queue: Some("short".into()), priority: Some(3), region: None });
        log.append(&[entry(1, "nlp", "alice", 2, DecisionKind::Allow, "p/a", "set1")]).unwrap();
        log.append(&[Record::without_event(vec![plain.clone(), hinted.clone()], "set1".into())]).unwrap();
        let stored = log.decisions_since(0, usize::MAX).unwrap();
        assert_eq!(stored.iter().map(|s| s.stored_json.is_empty()).collect::<Vec<_>>(), vec![true, true, false]);
        assert_eq!(stored[1].wire_json().unwrap(), plain.to_json());
        assert_eq!(stored[2].wire_json().unwrap(), hinted.to_json());
        drop(log);
        let report = bursar_audit::verify::verify(&AuditLog::open_read(&db).unwrap()).unwrap();
        assert!(report.is_ok(), "{report:?}");
        crate::common::sql(&db, "UPDATE decisions SET reason = 'edited' WHERE seq = 2");
        let report = bursar_audit::verify::verify(&AuditLog::open_read(&db).unwrap()).unwrap();
        assert!(!report.is_ok(), "an edited reason must break the chain");
    }
}

#[test]
fn a_reader_maps_the_whole_file_and_a_writer_maps_nothing() {
    let dir = TempDir::new("mmap");
    let db = dir.path("m.db");
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    log.append(&[entry(1, "nlp", "alice", 2, DecisionKind::Allow, "p/a", "set1")]).unwrap();
    let mapped = |log: &AuditLog| -> i64 { log.connection().query_row("PRAGMA mmap_size", [], |r| r.get(0)).unwrap() };
    // SQLite's compile-time cap (2 GiB by default) would clamp the reader's setting: the 1 TiB
    // reported here is `.cargo/config.toml`'s `SQLITE_MAX_MMAP_SIZE` reaching the bundled build.
    assert_eq!(mapped(&log), 0);
    let reader = AuditLog::open_read(&db).unwrap();
    assert_eq!(mapped(&reader), bursar_audit::log::READER_MMAP_BYTES);
    assert_eq!(reader.decisions_since(0, 10).unwrap().len(), 1);
}
