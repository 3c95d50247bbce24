//! The estimator's accuracy on real traces: `bursar-bench-estimate`.
//!
//! Usage: `cargo run --release -p bursar-bench --bin bursar-bench-estimate -- [--philly FILE]
//! [--openb FILE] [--scale F] [--truth replay|recorded]`. Without a trace option it reads the
//! repository's copies (`tests/data/philly/sampled_jobs.json`, the whole Philly sample, and
//! `tests/data/alibaba-gpu-2023/openb_pod_list_excerpt.csv`, an excerpt). The full OpenB pod list is
//! `openb_pod_list_default.csv` of Alibaba's `clusterdata`, `cluster-trace-gpu-v2023`. For each trace
//! it prints the median absolute error of the estimated wait and the share within a factor of two
//! of the true wait, for the estimate from the limits alone and for bursar's, in the same run, over
//! every job and over the jobs that waited more than a minute. See `docs/estimate.md`.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bursar_bench::estimate::{Accuracy, Outcome, Truth, accuracy, capacities, prepare, run};
use bursar_traces::{JobTrace, Report, openb, philly};

fn usage() -> &'static str {
    "usage: bursar-bench-estimate [--philly FILE] [--openb FILE] [--scale F] [--truth replay|recorded]\n\
     \n\
     Replays each trace, estimates every job's start at its submission from the requested limits\n\
     alone (what `squeue --start` does) and from history (bursar-estimate), and prints how far each\n\
     is from the true wait. --scale (default 0.7) sizes each queue as that share of its recorded\n\
     peak of GPUs in use; --truth recorded measures against the trace's own starts instead of the\n\
     replay's. Without --philly or --openb, the repository's copies under tests/data are read."
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn minutes(ms: i64) -> String {
    format!("{:.1} min", ms as f64 / 60_000.0)
}

fn main() -> ExitCode {
    let mut philly_path = None;
    let mut openb_path = None;
    let mut scale = 0.7;
    let mut truth = Truth::Replay;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = match a.as_str() {
            "--philly" | "--openb" | "--scale" | "--truth" => args.next(),
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            _ => {
                eprintln!("bursar-bench-estimate: unknown argument `{a}`\n{}", usage());
                return ExitCode::from(2);
            }
        };
        let Some(value) = value else {
            eprintln!("bursar-bench-estimate: `{a}` needs a value\n{}", usage());
            return ExitCode::from(2);
        };
        match a.as_str() {
            "--philly" => philly_path = Some(PathBuf::from(value)),
            "--openb" => openb_path = Some(PathBuf::from(value)),
            "--scale" => match value.parse::<f64>() {
                Ok(s) if s > 0.0 && s.is_finite() => scale = s,
                _ => {
                    eprintln!("bursar-bench-estimate: --scale takes a number above 0, not `{value}`");
                    return ExitCode::from(2);
                }
            },
            _ => {
                truth = match value.as_str() {
                    "replay" => Truth::Replay,
                    "recorded" => Truth::Recorded,
                    _ => {
                        eprintln!("bursar-bench-estimate: --truth is `replay` or `recorded`, not `{value}`");
                        return ExitCode::from(2);
                    }
                }
            }
        }
    }
    if philly_path.is_none() && openb_path.is_none() {
        philly_path = Some(repo().join("tests/data/philly/sampled_jobs.json"));
        openb_path = Some(repo().join("tests/data/alibaba-gpu-2023/openb_pod_list_excerpt.csv"));
    }
    println!(
        "truth: {}; each queue {scale} × its recorded peak of GPUs; limits modelled (docs/estimate.md)",
        match truth {
            Truth::Replay => "the trace replayed through the scheduler (EASY backfill) with true runtimes",
            Truth::Recorded => "the trace's recorded starts",
        }
    );
    let mut ok = true;
    for (name, path) in [("philly", philly_path), ("openb", openb_path)] {
        let Some(path) = path else { continue };
        let read = || -> Result<Vec<JobTrace>, String> {
            let file = File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            let mut report = Report::new(name);
            let jobs = if name == "philly" {
                philly::read(BufReader::new(file), philly::Fill::default(), &mut report)
            } else {
                openb::read(BufReader::new(file), &mut report)
            };
            jobs.map_err(|e| format!("{}: {e}", path.display()))
        };
        match read() {
            Ok(traces) => report(name, &path, &traces, scale, truth),
            Err(e) => {
                eprintln!("bursar-bench-estimate: {e}");
                ok = false;
            }
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn report(name: &str, path: &Path, traces: &[JobTrace], scale: f64, truth: Truth) {
    let queue_of = |t: &JobTrace| if name == "philly" { t.spec.project.clone() } else { "pool".to_owned() };
    let (jobs, left_out) = prepare(traces, queue_of);
    let caps = capacities(&jobs, scale);
    let gpus: u32 = caps.values().sum();
    let outcomes = run(&jobs, &caps, truth);
    println!(
        "\n{name} ({}): {} jobs ({left_out} left out: never started or ended), {} queues, {gpus} GPUs",
        path.display(),
        jobs.len(),
        caps.len()
    );
    println!(
        "  {:<40} {:>6} {:>14} {:>12} {:>10}",
        "jobs: estimate", "jobs", "median |err|", "mean |err|", "within 2×"
    );
    let all: Vec<&Outcome> = outcomes.iter().collect();
    let waited: Vec<&Outcome> = outcomes.iter().filter(|o| o.truth > 60_000).collect();
    for (label, set) in [("all", &all), ("waited > 1 min", &waited)] {
        let limits = accuracy(set, |o| o.limits);
        let history = accuracy(set, |o| o.history);
        let oracle = accuracy(set, |o| o.oracle);
        let line = |est: &str, a: Accuracy| {
            println!(
                "  {:<40} {:>6} {:>14} {:>12} {:>9.1}%",
                format!("{label}: {est}"),
                a.jobs,
                minutes(a.median_abs_error),
                minutes(a.mean_abs_error),
                a.within_2x * 100.0
            )
        };
        line("limits", limits);
        line("history (bursar)", history);
        line("oracle (true runtimes)", oracle);
        if limits.median_abs_error > 0 {
            println!(
                "  {:<40} history's median error is {:.2} of the limits'",
                "",
                history.median_abs_error as f64 / limits.median_abs_error as f64
            );
        }
    }
}
