//! Audit log benchmarks (criterion; `cargo bench -p bursar-audit`). Figures go to docs/perf/audit.md.
//!
//! - `writer/durable_group_commit`: entries (one event + one decision each) through the real writer
//!   thread into a fresh file in durable mode (`synchronous=FULL`, WAL), group commit up to 8,192
//!   entries per transaction. Throughput is in decisions per second.
//! - `writer/fast_group_commit`: the same in fast mode (`synchronous=NORMAL`), for the ratio.
//! - `writer/durable_group_commit_default_cache` and `…_inline_checkpoints`: durable, with SQLite's
//!   default page cache, and with the checkpoints in the committing connection instead of on the
//!   checkpoint thread: the same-run baselines of those two choices.
//! - `query/project_week`: one project, one week, from a log of `BURSAR_BENCH_ROWS` decisions
//!   (default 10,000,000) spread over 50 projects and 26 weeks. The file is built once into
//!   `/tmp/bursar-audit-bench-<rows>.db` (bulk path: fast mode, `synchronous=OFF`, 100k-decision
//!   transactions, decisions only) and reused by later runs; `BURSAR_BENCH_DB=FILE` reuses any log.
//! - `witness/*`: the cost a witness adds to one commit. `sign` is one Ed25519 signature of the head
//!   alone; `commit_{fast,durable}_{unsigned,signed}` append one entry per transaction (the worst
//!   case: serve under light load commits per request), without and with a witness attached that
//!   signs after every commit (in durable mode the witness line is `fsync`ed too).
//! - `eval/audit_off` vs `eval/audit_on_durable`: the eval pipeline in-process (decode, engine,
//!   JSON lines) over 50,000 job submissions, without and with the audit writer, for the ratio.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bursar_audit::query::{Filter, query};
use bursar_audit::{AuditLog, Durability, Record, Writer, WriterConfig};
use bursar_engine::{Engine, PolicySet};
use bursar_model::{Decision, DecisionKind, Timestamp, decode_event};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const SET: &str = "5f0c9a7e3d2b1a08f6e4c2b0a9d8e7f65f0c9a7e3d2b1a08f6e4c2b0a9d8e7f6";
const WEEK_MS: i64 = 7 * 86_400_000;

fn t0() -> i64 {
    Timestamp::parse("2026-06-01T00:00:00Z").map(Timestamp::millis).unwrap_or(0)
}

fn decision(i: u64, time: i64, project: &str) -> Decision {
    Decision {
        decision_id: format!("e{i}/0"),
        event_id: format!("e{i}"),
        time: Timestamp(time),
        job_id: Some(format!("j{i}").into()),
        project: Some(project.into()),
        decision: if i.is_multiple_of(7) { DecisionKind::Deny } else { DecisionKind::Allow },
        until: None,
        policies: vec!["quota/monthly-gpu-hours".into(), "readiness/all-ready".into()],
        reason: format!("project {project} at {} of 10,000 GPU-hours for 2026-11", i % 10_000),
        dry_run: false,
        admission: true,
        user: Some(format!("u{}", i % 300).into()),
        gpus: Some(8.into()),
        gpu_hours: Some(32.0),
        hints: None,
    }
}

fn entries(n: u64, offset: u64) -> Vec<Record> {
    let set: Arc<str> = SET.into();
    (offset..offset + n)
        .map(|i| {
            let time = t0() + (i as i64) * 1000;
            let project = format!("p{}", i % 50);
            let raw = format!(
                r#"{{"id":"e{i}","time":"{}","type":"job.submitted","job":{{"id":"j{i}","project":"{project}","user":"u{}","gpus":8,"requested_hours":4.0}}}}"#,
                Timestamp(time),
                i % 300
            );
            match decode_event(&raw) {
                Ok(ev) => Record::new(&raw, &ev, vec![decision(i, time, &project)], set.clone()),
                Err(_) => Record::without_event(vec![decision(i, time, &project)], set.clone()),
            }
        })
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("bursar-audit-bench-{name}-{}.db", std::process::id()));
    for ext in ["", "-wal", "-shm", ".lock"] {
        let _ = std::fs::remove_file(format!("{}{ext}", p.display()));
    }
    p
}

fn writer(c: &mut Criterion) {
    const N: u64 = 100_000;
    let mut g = c.benchmark_group("writer");
    g.sample_size(10).measurement_time(Duration::from_secs(10)).throughput(Throughput::Elements(N));
    // The last two are same-run baselines: of the writer's page cache (SQLite's default, 2 MiB) and
    // of its checkpoint thread (checkpoints in the commits that fill the WAL, as SQLite does).
    for (name, durability, default_cache, checkpoint_thread) in [
        ("durable_group_commit", Durability::Durable, false, true),
        ("fast_group_commit", Durability::Fast, false, true),
        ("durable_group_commit_default_cache", Durability::Durable, true, true),
        ("durable_group_commit_inline_checkpoints", Durability::Durable, false, false),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let batch = entries(N, 0);
                    let db = scratch(name);
                    let Ok(log) = AuditLog::open(&db, durability) else { return total };
                    if default_cache && log.connection().pragma_update(None, "cache_size", -2000).is_err() {
                        return total;
                    }
                    let started = Instant::now();
                    let config = WriterConfig { checkpoint_thread, ..WriterConfig::default() };
                    let Ok(mut w) = Writer::spawn(log, config, Box::new(|_, _| Ok(()))) else {
                        return total;
                    };
                    for e in batch {
                        if w.send_record(e).is_err() {
                            break;
                        }
                    }
                    let stats = w.finish();
                    total += started.elapsed();
                    black_box(stats.ok());
                    for ext in ["", "-wal", "-shm", ".lock"] {
                        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
                    }
                }
                total
            })
        });
    }
    g.finish();
}

fn rows() -> u64 {
    let default = if benching() { 10_000_000 } else { 10_000 };
    std::env::var("BURSAR_BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Builds (once) the big log the query benchmark reads.
fn big_log(rows: u64) -> Option<PathBuf> {
    let path = std::env::temp_dir().join(format!("bursar-audit-bench-{rows}.db"));
    if let Ok(log) = AuditLog::open_read(&path)
        && log.last_decision_seq() as u64 == rows
    {
        return Some(path);
    }
    for ext in ["", "-wal", "-shm", ".lock"] {
        let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
    }
    let started = Instant::now();
    let mut log = AuditLog::open(&path, Durability::Fast).ok()?;
    log.connection().pragma_update(None, "synchronous", "OFF").ok()?;
    log.connection().pragma_update(None, "cache_size", -262_144).ok()?;
    let set: Arc<str> = SET.into();
    // 26 weeks of decisions, evenly spaced, over 50 projects.
    let step = (26 * WEEK_MS) / rows.max(1) as i64;
    let chunk = 100_000u64;
    let mut i = 0u64;
    while i < rows {
        let n = chunk.min(rows - i);
        let batch: Vec<Record> = (i..i + n)
            .map(|k| {
                let time = t0() + k as i64 * step;
                Record::without_event(vec![decision(k, time, &format!("p{}", k % 50))], set.clone())
            })
            .collect();
        log.append(&batch).ok()?;
        i += n;
    }
    log.connection().execute_batch("PRAGMA wal_checkpoint(TRUNCATE); ANALYZE;").ok()?;
    eprintln!("built {} with {rows} decisions in {:.1}s", path.display(), started.elapsed().as_secs_f64());
    Some(path)
}

/// True under `cargo bench` (which passes `--bench`); under `cargo test --benches` each benchmark runs
/// once as a test, on small inputs, so CI checks that it works without building a 10-million-row log.
fn benching() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// False when the command line names benchmarks (criterion's filter, the arguments that are not
/// options) and none of them mentions `group`: a group whose set-up is costly (the query's 10-million-
/// row log) then skips it, so `cargo bench … -- writer` does not build that log first.
fn selected(group: &str) -> bool {
    let names: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    names.is_empty() || names.iter().any(|n| n.contains(group))
}

fn query_bench(c: &mut Criterion) {
    if !selected("query") {
        return;
    }
    // BURSAR_BENCH_DB=FILE reuses a log built earlier (say, a partial build), as it is.
    let (path, rows) = match std::env::var("BURSAR_BENCH_DB") {
        Ok(p) => {
            let rows = AuditLog::open_read(&p).map(|l| l.last_decision_seq() as u64).unwrap_or(0);
            (PathBuf::from(p), rows)
        }
        Err(_) => {
            let rows = rows();
            let Some(path) = big_log(rows) else {
                eprintln!("cannot build the query benchmark's log");
                return;
            };
            (path, rows)
        }
    };
    let Ok(log) = AuditLog::open_read(&path) else { return };
    // Project p7, week 10 (or the middle week of what the file covers, if it covers less).
    let last: i64 = log.connection().query_row("SELECT MAX(time) FROM decisions", [], |r| r.get(0)).unwrap_or(0);
    let week = ((last - t0()) / WEEK_MS / 2).clamp(0, 10);
    let since = t0() + week * WEEK_MS;
    let filter =
        Filter { project: Some("p7".into()), since: Some(since), until: Some(since + WEEK_MS), ..Default::default() };
    let n = query(&log, &filter).map(|v| v.len()).unwrap_or(0);
    eprintln!("query/project_week returns {n} of {rows} decisions");
    let mut g = c.benchmark_group("query");
    g.sample_size(30);
    g.bench_function(format!("project_week_{rows}"), |b| b.iter(|| black_box(query(&log, &filter).map(|v| v.len()))));
    // The baseline, in the same run: as many rows through the same reader, found by time alone (the
    // first `n` of the week, every project), so the ratio is what finding one project's rows costs
    // beyond reading them.
    let floor = Filter { since: Some(since), limit: Some(n.max(1)), ..Default::default() };
    g.bench_function(format!("same_rows_by_time_{rows}"), |b| {
        b.iter(|| black_box(query(&log, &floor).map(|v| v.len())))
    });
    g.finish();
}

/// The `eval` pipeline in-process (decode each line, `Engine::process`, JSON lines out) with the audit
/// log off and on (durable, through the writer thread, printing after commit), over the same lines.
fn eval_pipeline(c: &mut Criterion) {
    const N: u64 = 50_000;
    let lines: Vec<String> = (0..N)
        .map(|i| {
            format!(
                r#"{{"id":"e{i}","time":"{}","type":"job.submitted","job":{{"id":"j{i}","project":"p{}","user":"u{}","gpus":8,"requested_hours":4.0}}}}"#,
                Timestamp(t0() + i as i64 * 1000),
                i % 50,
                i % 300
            )
        })
        .collect();
    let mut g = c.benchmark_group("eval");
    g.sample_size(10).measurement_time(Duration::from_secs(10)).throughput(Throughput::Elements(N));
    g.bench_function("audit_off", |b| {
        b.iter(|| {
            let mut engine = Engine::new(Arc::new(PolicySet::empty()));
            let mut out = Vec::with_capacity(1 << 20);
            let mut ds = Vec::new();
            for l in &lines {
                let Ok(ev) = decode_event(l) else { continue };
                ds.clear();
                engine.process(&ev, Some(l), &mut ds);
                for d in &ds {
                    d.write_line(&mut out);
                }
                if out.len() > 1 << 20 {
                    black_box(&out);
                    out.clear();
                }
            }
            black_box(out.len())
        })
    });
    g.bench_function("audit_on_durable", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let db = scratch("eval");
                let Ok(log) = AuditLog::open(&db, Durability::Durable) else { return total };
                let started = Instant::now();
                let mut out = Vec::with_capacity(1 << 20);
                let hook = Box::new(move |entries: &[Record], _: &[bursar_audit::Appended]| {
                    for e in entries {
                        for d in &e.decisions {
                            d.write_line(&mut out);
                        }
                    }
                    black_box(&out);
                    out.clear();
                    Ok(())
                });
                let Ok(mut w) = Writer::spawn(log, WriterConfig::default(), hook) else { return total };
                let mut engine = Engine::new(Arc::new(PolicySet::empty()));
                let set: Arc<str> = engine.policies().digest().into();
                let mut ds = Vec::new();
                for l in &lines {
                    let Ok(ev) = decode_event(l) else { continue };
                    ds.clear();
                    engine.process(&ev, Some(l), &mut ds);
                    if w.send_record(Record::new(l, &ev, ds.clone(), set.clone())).is_err() {
                        break;
                    }
                }
                black_box(w.finish().ok());
                total += started.elapsed();
                for ext in ["", "-wal", "-shm", ".lock"] {
                    let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
                }
            }
            total
        })
    });
    g.finish();
}

fn witness_bench(c: &mut Criterion) {
    use bursar_audit::{SigningKey, Witness};
    let mut g = c.benchmark_group("witness");
    g.sample_size(20);
    let Ok(key) = SigningKey::generate() else { return };
    let db = scratch("witness-sign");
    let Ok(mut log) = AuditLog::open(&db, Durability::Fast) else { return };
    let _ = log.append(&entries(10, 0));
    g.bench_function("sign", |b| {
        b.iter(|| black_box(bursar_audit::witness::sign_now(&log, &key).map(|h| h.sig.len())))
    });
    drop(log);
    remove(&db);
    for (durability, dname) in [(Durability::Fast, "fast"), (Durability::Durable, "durable")] {
        for signed in [false, true] {
            let name = format!("commit_{dname}_{}", if signed { "signed" } else { "unsigned" });
            let db = scratch(&name);
            let Ok(mut log) = AuditLog::open(&db, durability) else { return };
            if signed {
                let wit = db.with_extension("witness");
                let _ = std::fs::remove_file(&wit);
                let Ok(k) = SigningKey::generate() else { return };
                let Ok(w) = Witness::open(k, &wit) else { return };
                log.set_witness(w);
            }
            let mut next = 0u64;
            g.bench_function(&name, |b| {
                b.iter_batched(
                    || {
                        next += 1;
                        entries(1, next)
                    },
                    |e| black_box(log.append(&e).map(|a| a.len())),
                    criterion::BatchSize::SmallInput,
                )
            });
            drop(log);
            remove(&db);
            let _ = std::fs::remove_file(db.with_extension("witness"));
        }
    }
    g.finish();
}

/// Removes a scratch log and its WAL files (a bench leaves nothing in the temporary directory).
fn remove(db: &std::path::Path) {
    for ext in ["", "-wal", "-shm", ".lock"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
}

criterion_group!(benches, writer, query_bench, eval_pipeline, witness_bench);
criterion_main!(benches);
