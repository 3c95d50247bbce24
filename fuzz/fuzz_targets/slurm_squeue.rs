//! Fuzz the reader of `squeue --json` (job names, comments and AdminComments in it are user text) and
//! the watcher's planning over what it reads: any bytes parse or return an error, never panic, and a
//! second plan over the state the first one produced sends nothing.
#![no_main]

use bursar_slurm::state::WatchState;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(jobs) = bursar_slurm::slurm::parse_squeue(text) else { return };
    for j in &jobs {
        let _ = (j.bursar_id(), j.held_by_bursar(), j.phase(), j.admin_comment_released());
    }
    let mut state = WatchState::default();
    let (steps, _) = bursar_slurm::watch::plan("fuzz", &state, &jobs, 1_800_000_000);
    for s in steps {
        state.jobs.insert(s.slurm_id, (s.bursar_id, s.sent));
    }
    let (again, _) = bursar_slurm::watch::plan("fuzz", &state, &jobs, 1_800_000_000);
    // Two listed jobs may share a Slurm id only in a corrupt input; otherwise nothing is sent twice.
    let mut ids: Vec<u64> = jobs.iter().map(|j| j.job_id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() == jobs.len() {
        assert!(again.is_empty(), "a second poll over the same jobs sent {again:?}");
    }
});
