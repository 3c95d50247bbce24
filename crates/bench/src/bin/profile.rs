//! `bursar-bench-profile`: the admission and eval loops of the criterion benches as a plain program, for a
//! profiler (`valgrind --tool=callgrind`, `perf record`), which needs a fixed amount of work and no
//! harness around it.
//!
//! Usage: `bursar-bench-profile admission [N]` — N `job.submitted` events (default 20,000) through the
//! example TOML set on an engine primed like `admission/example_set`, each batch of 1,000 then finished;
//! `bursar-bench-profile admission-empty [N]` — the same with no policy (the engine's own cost);
//! `bursar-bench-profile eval [JOBS]` — decode and process a generated stream of JOBS jobs (default
//! 2,000), like `eval/decode_and_process`. A run prints what it did, so two profiles can be compared;
//! with `BURSAR_PROFILE_PRINT=1` an admission run also writes every decision as JSON to stderr, so two
//! builds can be checked to decide byte for byte the same (`cmp`).
//!
//! Instructions per admission, the figure docs/performance.md reports, come from
//! `valgrind --tool=callgrind target/release/bursar-bench-profile admission 20000` minus the same with
//! `admission 0` (the set-up), divided by 20,000.

use std::hint::black_box;
use std::process::ExitCode;

use bursar_bench::{example_policies, finish_event, load_toml, primed_engine, stream_lines, submissions, submit_event};
use bursar_engine::Engine;
use bursar_model::{Decision, Event, Timestamp, decode_event};

// The allocator the `bursar` binary uses, so the profile is of what runs in production.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One admission, kept out of line so a profiler reports its inclusive cost on its own.
#[inline(never)]
fn admit(engine: &mut Engine, e: &Event, out: &mut Vec<Decision>) -> usize {
    out.clear();
    engine.process(e, None, out);
    black_box(out.len())
}

fn admission(n: u64, empty: bool) {
    let set =
        if empty { std::sync::Arc::new(bursar_engine::PolicySet::empty()) } else { load_toml(&example_policies()).0 };
    let (mut engine, last) = primed_engine(set, 2_000, 16);
    let specs = submissions(512, 16, 5);
    let mut clock = last.millis() + 1;
    let mut out: Vec<Decision> = Vec::with_capacity(8);
    let mut decisions = 0usize;
    let mut kinds = std::collections::BTreeMap::<&'static str, u64>::new();
    let print = std::env::var_os("BURSAR_PROFILE_PRINT").is_some();
    let mut done = 0u64;
    while done < n {
        let batch = 1_000.min(n - done);
        let events: Vec<Event> = (0..batch)
            .map(|i| {
                clock += 1;
                let k = done + i;
                submit_event(&specs[(k % specs.len() as u64) as usize], &format!("p-{k}"), Timestamp(clock))
            })
            .collect();
        for e in &events {
            decisions += admit(&mut engine, e, &mut out);
            for d in &out {
                *kinds.entry(d.decision.as_str()).or_default() += 1;
                if print {
                    eprintln!("{}", d.to_json());
                }
            }
        }
        for i in 0..batch {
            clock += 1;
            out.clear();
            engine.process(&finish_event(&format!("p-{}", done + i), Timestamp(clock)), None, &mut out);
        }
        done += batch;
    }
    let mix: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    println!("admission: {n} submissions, {decisions} decisions ({})", mix.join(", "));
}

fn eval(jobs: u64) {
    let lines = stream_lines(jobs, 16, 11);
    let (set, _) = load_toml(&example_policies());
    let mut engine = Engine::new(set);
    let mut out = Vec::new();
    let mut decisions = 0usize;
    for l in &lines {
        if let Ok(e) = decode_event(l) {
            out.clear();
            engine.process(&e, Some(l), &mut out);
            decisions += out.len();
        }
    }
    println!("eval: {} events, {decisions} decisions", lines.len());
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |default: u64| args.get(1).and_then(|a| a.parse().ok()).unwrap_or(default);
    match args.first().map(String::as_str) {
        Some("admission") => admission(n(20_000), false),
        Some("admission-empty") => admission(n(20_000), true),
        Some("eval") => eval(n(2_000)),
        _ => {
            eprintln!("usage: bursar-bench-profile admission [N] | admission-empty [N] | eval [JOBS]");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
