//! Queries, explain and stats over a real file, checked against what was appended.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

/// One appended row: (i, project, user, day, kind, policy).
type Row<'a> = (u64, &'a str, &'a str, u32, DecisionKind, &'a str);

use std::sync::Arc;

use crate::common::{TempDir, decision, entry, submitted_line};
use bursar_audit::query::{Filter, Step, explain, query, stats};
use bursar_audit::{AuditLog, Durability, Record};
use bursar_model::{DecisionKind, Timestamp, decode_event};

fn ms(s: &str) -> i64 {
    Timestamp::parse(s).unwrap().millis()
}

#[test]
fn filters_select_exactly_the_matching_decisions() {
    let dir = TempDir::new("q");
    let mut log = AuditLog::open(dir.path("q.db"), Durability::Fast).unwrap();
    let projects = ["nlp", "cv", "speech"];
    let kinds = [DecisionKind::Allow, DecisionKind::Deny, DecisionKind::Reclaim];
    let policies = ["quota/monthly", "quota/weekly", "reclaim/idle", "fit/memory"];
    let mut all = Vec::new();
    let mut batch = Vec::new();
    for i in 1..=300u64 {
        let p = projects[(i % 3) as usize];
        let u = if i % 4 == 0 { "bob" } else { "alice" };
        let day = 1 + (i % 28) as u32;
        let k = kinds[(i % 5 % 3) as usize];
        let pol = policies[(i % 4) as usize];
        all.push((i, p, u, day, k, pol));
        batch.push(entry(i, p, u, day, k, pol, "s"));
    }
    log.append(&batch).unwrap();

    let check = |f: Filter, pred: &dyn Fn(&Row<'_>) -> bool| {
        let got: Vec<String> = query(&log, &f).unwrap().into_iter().map(|d| d.decision_id).collect();
        let mut want: Vec<&Row<'_>> = all.iter().filter(|r| pred(r)).collect();
        want.sort_by_key(|r| (r.3, r.0));
        let want: Vec<String> = want.iter().map(|r| format!("e{}/0", r.0)).collect();
        assert_eq!(got, want, "{f:?}");
        got.len()
    };
    let week = (ms("2026-11-09T00:00:00Z"), ms("2026-11-16T00:00:00Z"));
    let n = check(
        Filter { project: Some("nlp".into()), since: Some(week.0), until: Some(week.1), ..Default::default() },
        &|r| r.1 == "nlp" && (9..16).contains(&r.3),
    );
    assert!(n > 5);
    check(Filter { user: Some("bob".into()), decision: Some("deny".into()), ..Default::default() }, &|r| {
        r.2 == "bob" && r.4 == DecisionKind::Deny
    });
    check(Filter { policy: Some("quota/*".into()), ..Default::default() }, &|r| r.5.starts_with("quota/"));
    check(Filter { policy: Some("fit/memory".into()), ..Default::default() }, &|r| r.5 == "fit/memory");
    check(Filter { job: Some("j7".into()), ..Default::default() }, &|r| r.0 == 7);
    check(Filter { dry_run: Some(true), ..Default::default() }, &|_| false);
    check(Filter { dry_run: Some(false), ..Default::default() }, &|_| true);
    let limited = query(&log, &Filter { limit: Some(7), ..Default::default() }).unwrap();
    assert_eq!(limited.len(), 7);

    // The (project, time) look-up table answers the project-week query in its key order: no full
    // scan, no sort.
    let plan: Vec<String> = log
        .connection()
        .prepare(
            "EXPLAIN QUERY PLAN SELECT d.seq FROM decisions_by_project x JOIN decisions d ON d.seq = x.seq \
             WHERE x.project = ?1 AND x.time >= ?2 AND x.time < ?3 ORDER BY x.time, x.seq",
        )
        .unwrap()
        .query_map(rusqlite::params!["nlp", week.0, week.1], |r| r.get::<_, String>(3))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert!(
        plan.iter().any(|p| p.contains("SEARCH x USING PRIMARY KEY (project=? AND time>? AND time<?)")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|p| p.contains("TEMP B-TREE")), "{plan:?}");
}

/// The project and user look-ups are filled in runs (`INDEX_RUN` decisions at a time), so a query
/// reads part of its answer from the tables and the rest from the decisions after the last run. Over
/// a log appended in groups of every size, with event times out of order, every project and user
/// query (with time ranges, other filters and limits) returns exactly what filtering all decisions
/// gives, in `(time, seq)` order, and `verify` finds the tables consistent after every group.
#[test]
fn project_and_user_queries_read_the_lookups_and_the_decisions_after_them() {
    /// What was appended: seq (= i), project, user, day, kind.
    type Made = (u64, &'static str, &'static str, u32, DecisionKind);
    use bursar_audit::log::INDEX_RUN;
    let dir = TempDir::new("lookups");
    let mut log = AuditLog::open(dir.path("l.db"), Durability::Fast).unwrap();
    let projects = ["nlp", "cv", "speech", "rl"];
    let users = ["ann", "bob", "cyd"];
    let mut all: Vec<Made> = Vec::new();
    let mut i = 0u64;
    // Group sizes that cross a run boundary inside a group, land exactly on one, and stay short.
    for group in [7usize, 500, 3, 1, 700, 64, 511, 2, 1200, 9] {
        let mut batch = Vec::new();
        for _ in 0..group {
            i += 1;
            let p = projects[(i * 7 % 4) as usize];
            let u = users[(i * 5 % 3) as usize];
            // Days jump around: a later decision can have an earlier event time.
            let day = 1 + (i * 11 % 28) as u32;
            let k = if i.is_multiple_of(6) { DecisionKind::Deny } else { DecisionKind::Allow };
            all.push((i, p, u, day, k));
            batch.push(entry(i, p, u, day, k, "quota/monthly", "s"));
        }
        log.append(&batch).unwrap();
        assert!(bursar_audit::verify::verify(&log).unwrap().is_ok(), "after a group of {group}");
        let through: i64 = log
            .connection()
            .query_row("SELECT through_seq FROM lookup_cursors WHERE chain = 'decisions'", [], |r| r.get(0))
            .unwrap();
        assert!(i as i64 - through < INDEX_RUN, "the tail stays under a run: {through} of {i}");
        let check = |f: Filter, pred: &dyn Fn(&Made) -> bool| {
            let got: Vec<i64> = query(&log, &f).unwrap().into_iter().map(|d| d.seq).collect();
            let mut want: Vec<_> = all.iter().filter(|r| pred(r)).collect();
            want.sort_by_key(|r| (r.3, r.0));
            let mut want: Vec<i64> = want.iter().map(|r| r.0 as i64).collect();
            if let Some(l) = f.limit {
                want.truncate(l);
            }
            assert_eq!(got, want, "{f:?} after {i} decisions");
        };
        let days = (ms("2026-11-05T00:00:00Z"), ms("2026-11-19T00:00:00Z"));
        for p in projects {
            check(Filter { project: Some(p.into()), ..Default::default() }, &|r| r.1 == p);
            check(
                Filter { project: Some(p.into()), since: Some(days.0), until: Some(days.1), ..Default::default() },
                &|r| r.1 == p && (5..19).contains(&r.3),
            );
            check(Filter { project: Some(p.into()), limit: Some(40), ..Default::default() }, &|r| r.1 == p);
        }
        for u in users {
            check(Filter { user: Some(u.into()), decision: Some("deny".into()), ..Default::default() }, &|r| {
                r.2 == u && r.4 == DecisionKind::Deny
            });
            check(Filter { user: Some(u.into()), project: Some("cv".into()), ..Default::default() }, &|r| {
                r.2 == u && r.1 == "cv"
            });
        }
    }
}

#[test]
fn explain_orders_events_and_decisions_and_names_the_policy_set() {
    let dir = TempDir::new("x");
    let mut log = AuditLog::open(dir.path("x.db"), Durability::Fast).unwrap();
    log.record_policy_set("setA", &[bursar_audit::SourceFile { path: "a.toml".into(), digest: "11".into() }]).unwrap();
    let sub = submitted_line(1, "nlp", "alice", 2);
    let started = r#"{"id":"e2","time":"2026-11-02T10:00:00Z","type":"job.started","job_id":"j1"}"#;
    let other = submitted_line(3, "cv", "bob", 2);
    let tick = r#"{"id":"e4","time":"2026-11-02T12:00:00Z","type":"clock.tick"}"#;
    let mut reclaim = decision(1, 0, "nlp", "alice", 2, DecisionKind::Reclaim, "reclaim/idle");
    reclaim.event_id = "e4".into();
    reclaim.decision_id = "e4/0".into();
    let set: Arc<str> = "setA".into();
    log.append(&[
        Record::new(
            &sub,
            &decode_event(&sub).unwrap(),
            vec![decision(1, 0, "nlp", "alice", 2, DecisionKind::Allow, "q")],
            set.clone(),
        ),
        Record::new(started, &decode_event(started).unwrap(), vec![], set.clone()),
        Record::new(
            &other,
            &decode_event(&other).unwrap(),
            vec![decision(3, 0, "cv", "bob", 2, DecisionKind::Deny, "q")],
            set.clone(),
        ),
    ])
    .unwrap();
    log.record_policy_failure("bad", Some("setA")).unwrap();
    log.append(&[Record::new(tick, &decode_event(tick).unwrap(), vec![reclaim], set)]).unwrap();

    let story = explain(&log, "j1").unwrap();
    assert_eq!(story.project.as_deref(), Some("nlp"));
    assert_eq!(story.user.as_deref(), Some("alice"));
    let shape: Vec<String> = story
        .steps
        .iter()
        .map(|s| match s {
            Step::Event(e) => format!("event {}", e.event_id),
            Step::Decision(d) => format!("{} {}", d.decision, d.decision_id),
        })
        .collect();
    assert_eq!(shape, vec!["event e1", "allow e1/0", "event e2", "reclaim e4/0"]);
    assert_eq!(story.policy_sets.len(), 1);
    assert_eq!(story.policy_sets[0].files[0].path, "a.toml");
    assert!(story.loads.iter().any(|l| !l.ok && l.error.as_deref() == Some("bad")));
    assert!(explain(&log, "nope").unwrap().steps.is_empty());
}

#[test]
fn stats_count_by_kind_policy_project_and_dry_run_disagreement() {
    let dir = TempDir::new("s");
    let mut log = AuditLog::open(dir.path("s.db"), Durability::Fast).unwrap();
    let mut entries = Vec::new();
    for i in 1..=10u64 {
        let raw = submitted_line(i, if i <= 6 { "nlp" } else { "cv" }, "a", 3);
        let mut ds = vec![decision(i, 0, if i <= 6 { "nlp" } else { "cv" }, "a", 3, DecisionKind::Allow, "quota/m")];
        if i <= 4 {
            // A dry-run policy that would have denied 4 admissions (and agreed on none).
            let mut d = decision(i, 1, "nlp", "a", 3, DecisionKind::Deny, "quota/new");
            d.dry_run = true;
            d.admission = false;
            ds.push(d);
        }
        entries.push(Record::new(&raw, &decode_event(&raw).unwrap(), ds, "s".into()));
    }
    log.append(&entries).unwrap();
    let st = stats(&log, None, None).unwrap();
    assert_eq!((st.events, st.decisions, st.dry_run), (10, 10, 4));
    assert_eq!(st.by_kind.len(), 1);
    assert_eq!((st.by_kind[0].key.as_str(), st.by_kind[0].count), ("allow", 10));
    assert_eq!(st.by_kind[0].gpu_hours, 320.0);
    let nlp = st.by_project.iter().find(|c| c.key == "nlp").unwrap();
    assert_eq!(nlp.count, 6);
    assert_eq!(st.dry_run_diffs.len(), 1);
    let d = &st.dry_run_diffs[0];
    assert_eq!(
        (d.policy.as_str(), d.would.as_str(), d.enforced.as_str(), d.count, d.differs),
        ("quota/new", "deny", "allow", 4, true)
    );
    // A period with nothing in it.
    let empty = stats(&log, Some(ms("2027-01-01T00:00:00Z")), None).unwrap();
    assert_eq!((empty.events, empty.decisions), (0, 0));
}
