//! Fuzz the readers of the queue (`squeue -O` rows and `squeue --json`; AdminComments, comments and
//! job names in the JSON are user text) and the watcher's planning over what they read: any bytes
//! parse or return an error, never panic; a second plan over the state the first produced sends
//! nothing; no event is dated after the poll.
#![no_main]

use std::collections::BTreeMap;

use bursar_slurm::state::WatchState;
use libfuzzer_sys::fuzz_target;

const NOW: i64 = 1_800_000_000;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(jobs) = bursar_slurm::detail::parse_json(text) {
        for j in &jobs {
            let _ = j.details();
        }
    }
    let Ok(rows) = bursar_slurm::queue::parse_rows(text) else { return };
    for r in &rows {
        let _ = (r.key(), r.phase(), r.ran(), r.tres_gpus(), r.key().scancel_target());
    }
    // Every row's record says it is bursar's job `fuzz-<id>`.
    let details: BTreeMap<u64, bursar_slurm::detail::Details> = rows
        .iter()
        .map(|r| {
            let markers = bursar_slurm::detail::Markers { job: Some(format!("fuzz-{}", r.job_id)), ..Default::default() };
            (r.job_id, bursar_slurm::detail::Details { job_id: r.job_id, admin_comment: String::new(), markers, gpus: Some(1.into()) })
        })
        .collect();
    let mut state = WatchState::default();
    let _ = bursar_slurm::watch::asks(&state, &rows);
    let first = bursar_slurm::watch::plan(&state, &rows, &details, NOW);
    assert!(first.reports.iter().all(|r| r.at <= NOW), "an event in the future: {:?}", first.reports);
    first.apply(&mut state);
    // Two rows with one key (a corrupt listing) may disagree; otherwise nothing is sent twice.
    let mut keys: Vec<String> = rows.iter().map(|r| r.key().to_string()).collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.len() == rows.len() {
        let again = bursar_slurm::watch::plan(&state, &rows, &details, NOW);
        assert!(again.reports.is_empty(), "a second poll over the same rows sent {:?}", again.reports);
    }
});
