//! The audit writer's per-row cost as a plain program, for `valgrind --tool=callgrind` (instruction
//! counts do not depend on the machine's load) and for a quick timing:
//!
//!     cargo build --release -p bursar-audit --example append_profile
//!     target/release/examples/append_profile 100000 fast
//!     valgrind --tool=callgrind target/release/examples/append_profile 20000 fast
//!
//! Appends N entries (one `job.submitted` and its admission decision each) in groups of 8,192, the
//! writer thread's largest group (what `eval` fills), to a fresh log; a third argument sets another
//! group size (`append_profile 20000 fast 16`: about what a transaction holds under `serve` at 32
//! clients, where the per-transaction costs show); a fourth, `thread`, checkpoints on a thread of
//! its own as the writer thread does (`bursar_audit::checkpoint`) instead of in the committing
//! connection.

use std::sync::Arc;
use std::time::Instant;

use bursar_audit::{AuditLog, Durability, Record};
use bursar_model::{Decision, DecisionKind, Timestamp, decode_event};

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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let durability =
        if args.get(2).map(String::as_str) == Some("durable") { Durability::Durable } else { Durability::Fast };
    let group: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(8192).max(1);
    let path = std::env::temp_dir().join(format!("bursar-append-profile-{}.db", std::process::id()));
    let set: Arc<str> = Arc::from("5f0c9a7e3d2b1a08f6e4c2b0a9d8e7f6");
    let t0 = Timestamp::parse("2026-06-01T00:00:00Z")?.millis();
    let mut records = Vec::with_capacity(n as usize);
    for i in 0..n {
        let time = t0 + (i as i64) * 1000;
        let project = format!("p{}", i % 50);
        let raw = format!(
            r#"{{"id":"e{i}","time":"{}","type":"job.submitted","job":{{"id":"j{i}","project":"{project}","user":"u{}","gpus":8,"requested_hours":4.0}}}}"#,
            Timestamp(time),
            i % 300
        );
        let ev = decode_event(&raw)?;
        records.push(Record::new(&raw, &ev, vec![decision(i, time, &project)], set.clone()));
    }
    let mut log = AuditLog::open(&path, durability)?;
    let checkpointer = if args.get(4).map(String::as_str) == Some("thread") {
        Some(bursar_audit::checkpoint::Checkpointer::start(&mut log)?)
    } else {
        None
    };
    let started = Instant::now();
    for group in records.chunks(group) {
        log.append(group)?;
    }
    let secs = started.elapsed().as_secs_f64();
    let wal = std::fs::metadata(format!("{}-wal", path.display())).map_or(0, |m| m.len());
    if let Some(c) = checkpointer {
        let stats = c.stats();
        c.stop(&mut log);
        let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        println!(
            "checkpoint thread: {} runs, {} inline, {} failed; WAL file {:.1} MiB",
            n(&stats.runs),
            n(&stats.inline),
            n(&stats.failures),
            wal as f64 / (1 << 20) as f64
        );
    } else {
        println!("checkpoints in the committing connection; WAL file {:.1} MiB", wal as f64 / (1 << 20) as f64);
    }
    println!("{n} entries in groups of {group} in {secs:.3} s: {:.0} decisions/s", n as f64 / secs);
    drop(log);
    for ext in ["", "-wal", "-shm", ".lock"] {
        let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
    }
    Ok(())
}
