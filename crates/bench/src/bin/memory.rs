//! Memory per tracked job: submit and start N jobs (default 1,000,000) into an engine with the example
//! policies and report the engine's live heap bytes per job, counted by a global allocator.
//!
//! Usage: `cargo run --release -p bursar-bench --bin bursar-bench-memory -- [JOBS] [POLICY_DIR]`.
//! Prints one line per checkpoint and a final `bytes/job` line. Event ids are remembered by the
//! dedupe window (default 24 h of event time); jobs are submitted one per second, so the window holds
//! the last 86,400 submissions' ids, which the figure includes.

use std::path::PathBuf;
use std::process::ExitCode;

use bursar_bench::{CountingAlloc, example_policies, load_toml, submissions, submit_event};
use bursar_engine::Engine;
use bursar_model::{Event, EventKind, Timestamp};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let jobs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let dir = args.next().map(PathBuf::from).unwrap_or_else(example_policies);
    let (set, skipped) = load_toml(&dir);
    for f in &skipped {
        eprintln!("left out (needs a WebAssembly host): {}", f.display());
    }
    let specs = submissions(4096, 100, 3);
    let mut engine = Engine::new(set.clone());
    let mut out = Vec::new();
    let base_heap = ALLOC.live();
    let base_rss = rss_kib().unwrap_or(0);
    let t0 = 1_793_577_600_000i64;
    let mut allowed = 0u64;
    for i in 0..jobs {
        let time = Timestamp(t0 + i as i64 * 1000);
        let spec = &specs[(i % specs.len() as u64) as usize];
        let id = format!("m{i}");
        out.clear();
        engine.process(&submit_event(spec, &id, time), None, &mut out);
        allowed += out.iter().filter(|d| d.decision == bursar_model::DecisionKind::Allow).count() as u64;
        out.clear();
        let start = Event {
            id: format!("r{i}"),
            time,
            kind: EventKind::JobStarted { job_id: id, info: Default::default() },
            extra: Vec::new(),
        };
        engine.process(&start, None, &mut out);
        if (i + 1) % 250_000 == 0 || i + 1 == jobs {
            let heap = ALLOC.live() - base_heap;
            println!(
                "{:>9} jobs: {:>12} heap bytes ({:.1} bytes/job), RSS +{} KiB",
                i + 1,
                heap,
                heap as f64 / (i + 1) as f64,
                rss_kib().unwrap_or(0).saturating_sub(base_rss)
            );
        }
    }
    let heap = ALLOC.live() - base_heap;
    println!(
        "policies: {} ({} policies); jobs tracked: {}; admitted: {allowed}; bytes/job: {:.1}",
        dir.display(),
        set.len(),
        engine.state().tracked_jobs(),
        heap as f64 / jobs as f64
    );
    ExitCode::SUCCESS
}
