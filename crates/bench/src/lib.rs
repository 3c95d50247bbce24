//! Shared set-up for bursar's benchmarks: the example policy set, realistic submissions from the seeded
//! workload generator, a primed engine, and a counting allocator for memory figures.
//!
//! The criterion benches live in `benches/engine.rs` (run `cargo bench -p bursar-bench`); the memory
//! figure comes from the `bursar-bench-memory` binary. Figures and the commands that produce them are in
//! `docs/perf/bench.md`.
//!
//! Layout: [`estimate`] (the estimator's accuracy on traces, the `bursar-bench-estimate` binary); this
//! file — [`example_policies`], [`load`], [`submissions`], [`primed_engine`],
//! [`CountingAlloc`].

pub mod estimate;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bursar_engine::{Engine, PolicySet};
use bursar_model::{Event, EventKind, FinishStatus, JobSpec, Timestamp};
use bursar_traces::workload::{GenConfig, Generator};

/// The repository's example policy directory (`policies/`).
pub fn example_policies() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies")
}

/// Loads a policy directory or a single policy file; `Err` carries every diagnostic as text.
pub fn load(path: &Path) -> Result<Arc<PolicySet>, String> {
    bursar_loader::load_dir(path, &bursar_loader::NoComponents)
        .map(Arc::new)
        .map_err(|ds| ds.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))
}

/// The TOML policies of a directory: every policy file that loads without a WebAssembly host, merged
/// into one set, and the files left out (those declaring `kind = "wasm"` policies). The benches use
/// this so they do not depend on wasmtime; the WebAssembly policies are measured by `bursar-wasm`.
pub fn load_toml(dir: &Path) -> (Arc<PolicySet>, Vec<PathBuf>) {
    let mut policies = Vec::new();
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for file in bursar_loader::policy_files(dir).unwrap_or_default() {
        match bursar_loader::load_dir(&file, &bursar_loader::NoComponents) {
            Ok(set) => {
                policies.extend(set.policies().iter().cloned());
                files.extend(set.files().iter().cloned());
            }
            Err(_) => skipped.push(file),
        }
    }
    let set = PolicySet::new(policies, files, "bench-toml-only".to_owned()).unwrap_or_else(|_| PolicySet::empty());
    (Arc::new(set), skipped)
}

/// The policy files under the example directory, sorted (each family alone).
pub fn example_files() -> Vec<PathBuf> {
    bursar_loader::policy_files(&example_policies()).unwrap_or_default()
}

/// `n` realistic submissions (sizes, stages, projects) from the seeded generator.
pub fn submissions(n: usize, projects: u32, seed: u64) -> Vec<JobSpec> {
    let cfg = GenConfig { jobs: n as u64, projects, seed, ..GenConfig::default() };
    Generator::new(cfg)
        .filter_map(|e| match e.kind {
            EventKind::JobSubmitted(j) => Some(*j),
            _ => None,
        })
        .collect()
}

/// The generated stream for `jobs` jobs, as JSON lines (what `bursar eval` reads).
pub fn stream_lines(jobs: u64, projects: u32, seed: u64) -> Vec<String> {
    let cfg = GenConfig { jobs, projects, seed, ..GenConfig::default() };
    Generator::new(cfg).map(|e| e.to_json()).collect()
}

/// How long the admission benches' engine remembers event ids and finished jobs: 86.4 s of event time.
/// Their submissions are 1 ms apart, so the engine holds what a pool submitting one job a second
/// holds with the default 24 h windows (the last 86,400 submissions' ids and finished records), in a
/// steady state, while the policies' periods and the time of day stay put. With the defaults the
/// state grew with the iteration count, and the benches timed its growth along with the admissions.
pub const BENCH_WINDOW: bursar_model::Duration = bursar_model::Duration(86_400);

/// An engine that has already processed the generated stream of `jobs` jobs (usage in the ledgers,
/// jobs running), and the time of its last event; it forgets ids and finished jobs after
/// [`BENCH_WINDOW`].
pub fn primed_engine(set: Arc<PolicySet>, jobs: u64, projects: u32) -> (Engine, Timestamp) {
    let config = bursar_engine::EngineConfig {
        dedupe_window: BENCH_WINDOW,
        finished_retention: BENCH_WINDOW,
        ..bursar_engine::EngineConfig::default()
    };
    let mut engine = Engine::with_config(set, config);
    let mut out = Vec::new();
    let mut last = Timestamp(0);
    let cfg = GenConfig { jobs, projects, seed: 99, ..GenConfig::default() };
    for e in Generator::new(cfg) {
        last = e.time;
        out.clear();
        engine.process(&e, None, &mut out);
    }
    (engine, last)
}

/// A `job.submitted` event for `spec` renamed to job `id` at `time`.
pub fn submit_event(spec: &JobSpec, id: &str, time: Timestamp) -> Event {
    let mut job = spec.clone();
    job.id = id.to_owned();
    Event { id: format!("s-{id}"), time, kind: EventKind::JobSubmitted(Box::new(job)), extra: Vec::new() }
}

/// A `job.finished` (cancelled) event for job `id` at `time`, to take a bench job out of the state.
pub fn finish_event(id: &str, time: Timestamp) -> Event {
    Event {
        id: format!("f-{id}"),
        time,
        kind: EventKind::JobFinished { job_id: id.to_owned(), status: FinishStatus::Cancelled },
        extra: Vec::new(),
    }
}

/// A global allocator that counts live heap bytes, for memory-per-job figures. Install it with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc::new();` and read [`CountingAlloc::live`].
#[derive(Debug)]
pub struct CountingAlloc {
    live: AtomicI64,
}

impl CountingAlloc {
    /// A counter at zero.
    pub const fn new() -> CountingAlloc {
        CountingAlloc { live: AtomicI64::new(0) }
    }

    /// Heap bytes allocated and not yet freed.
    pub fn live(&self) -> i64 {
        self.live.load(Ordering::Relaxed)
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        CountingAlloc::new()
    }
}

#[expect(unsafe_code, reason = "GlobalAlloc is an unsafe trait; every call is forwarded unchanged to System")]
// SAFETY: each method forwards to `System` with the caller's arguments, which upholds the same contract.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.live.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.live.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.live.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submissions_are_realistic_and_events_round_trip() {
        let subs = submissions(50, 4, 3);
        assert_eq!(subs.len(), 50);
        assert!(subs.iter().all(|s| s.gpus >= 1 && s.project.starts_with('p')));
        let e = submit_event(&subs[0], "x1", Timestamp(1_000));
        let back = bursar_model::decode_event(&e.to_json()).unwrap();
        assert_eq!(back, e);
        let f = finish_event("x1", Timestamp(2_000));
        assert_eq!(bursar_model::decode_event(&f.to_json()).unwrap(), f);
    }

    #[test]
    fn a_primed_engine_tracks_jobs_and_an_admission_gets_one_decision() {
        let set = Arc::new(PolicySet::empty());
        let (mut engine, last) = primed_engine(set, 200, 4);
        assert!(last.millis() > 0);
        let subs = submissions(1, 4, 1);
        let mut out = Vec::new();
        engine.process(&submit_event(&subs[0], "bench-1", Timestamp(last.millis() + 1)), None, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
    }
}
