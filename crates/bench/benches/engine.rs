//! criterion benches of the engine with the example policy set (`policies/`).
//!
//! - `admission/example_set`: one `job.submitted` → one decision, on an engine primed with a realistic
//!   stream (ledgers with usage, jobs running). Submissions are timed in batches of 1,000 and each batch
//!   is then finished (untimed); ids and finished jobs are forgotten after `BENCH_WINDOW`, so the state
//!   stays at what a pool submitting a job a second holds (86,400 submissions' ids and records) instead
//!   of growing with the iteration count.
//! - `admission/<file>`: the same with each policy file alone (one family per file).
//! - `admission/empty_set`: the engine's own cost with no policy (dedupe, job record, combination).
//! - `eval/decode_only` and `eval/decode_and_process`: `bursar eval`'s loop over a generated stream, in
//!   events per second, without the audit log.
//!
//! Run: `cargo bench -p bursar-bench` (figures in docs/perf/bench.md).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bursar_bench::{
    example_files, example_policies, finish_event, load, load_toml, primed_engine, submissions, submit_event,
};
use bursar_engine::{Engine, Outcome, PolicySet};
use bursar_model::{Decision, Event, Timestamp, decode_event};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

// The allocator the `bursar` binary uses, so the figures are those of what runs in production.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: u64 = 1_000;

/// Times `iters` admissions. `next_job` numbers the jobs across calls: criterion calls this many times
/// on the same engine, and a reused id would be a resent event (dropped by dedupe) or a known job, not
/// an admission.
fn admission_loop(engine: &mut Engine, start: Timestamp, iters: u64, next_job: &mut u64) -> Duration {
    let specs = submissions(512, 16, 5);
    let mut out: Vec<Decision> = Vec::with_capacity(8);
    let mut total = Duration::ZERO;
    let mut done = 0u64;
    let mut clock = start.millis();
    let first = *next_job;
    *next_job += iters;
    while done < iters {
        let n = BATCH.min(iters - done);
        let batch: Vec<Event> = (0..n)
            .map(|i| {
                clock += 1;
                let k = first + done + i;
                submit_event(&specs[(k % specs.len() as u64) as usize], &format!("bench-{k}"), Timestamp(clock))
            })
            .collect();
        let t = Instant::now();
        let mut duplicates = 0u64;
        for e in &batch {
            out.clear();
            duplicates += u64::from(black_box(engine.process(e, None, &mut out)) == Outcome::Duplicate);
        }
        total += t.elapsed();
        // A bench that timed dedupe instead of admissions once went unnoticed; never again.
        assert_eq!(duplicates, 0, "the timed submissions must be new events, not resends");
        for i in 0..n {
            clock += 1;
            out.clear();
            engine.process(&finish_event(&format!("bench-{}", first + done + i), Timestamp(clock)), None, &mut out);
        }
        done += n;
    }
    total
}

fn bench_admission(c: &mut Criterion) {
    let mut g = c.benchmark_group("admission");
    let mut sets: Vec<(String, Arc<PolicySet>)> = vec![("empty_set".into(), Arc::new(PolicySet::empty()))];
    let (example, skipped) = load_toml(&example_policies());
    for f in &skipped {
        eprintln!("left out (WebAssembly, measured by bursar-wasm): {}", f.display());
    }
    sets.push(("example_set".into(), example));
    for file in example_files() {
        let name = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        match load(&file) {
            Ok(set) => sets.push((format!("file/{name}"), set)),
            Err(_) => eprintln!("{} needs a WebAssembly host, left out", file.display()),
        }
    }
    for (name, set) in sets {
        let (mut engine, last) = primed_engine(set, 2_000, 16);
        let mut start = Timestamp(last.millis() + 1);
        let mut next_job = 0u64;
        g.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                let d = admission_loop(&mut engine, start, iters, &mut next_job);
                start = Timestamp(start.millis() + 2 * iters as i64 + 2);
                d
            })
        });
    }
    g.finish();
}

fn bench_eval(c: &mut Criterion) {
    let lines = bursar_bench::stream_lines(10_000, 16, 11);
    let mut g = c.benchmark_group("eval");
    g.throughput(Throughput::Elements(lines.len() as u64));
    g.sample_size(10);
    g.bench_function("decode_only", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for l in &lines {
                n += decode_event(l).is_ok() as usize;
            }
            black_box(n)
        })
    });
    let (set, _) = load_toml(&example_policies());
    g.bench_function("decode_and_process", |b| {
        b.iter(|| {
            let mut engine = Engine::new(set.clone());
            let mut out = Vec::new();
            let mut decisions = 0usize;
            for l in &lines {
                if let Ok(e) = decode_event(l) {
                    out.clear();
                    engine.process(&e, Some(l), &mut out);
                    decisions += out.len();
                }
            }
            black_box(decisions)
        })
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

criterion_group! { name = benches; config = config(); targets = bench_admission, bench_eval }
criterion_main!(benches);
