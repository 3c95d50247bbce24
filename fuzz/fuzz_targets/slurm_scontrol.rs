//! Fuzz the reader of `scontrol show job -d -o` (a job's name, comment and paths are user text that
//! may hold `AdminComment=…`, `JOB_GRES=…` or newlines): any bytes give records, a doubt, or
//! nothing, never a panic; and a record it trusts never takes bursar's id from outside the
//! AdminComment and Comment values it cut.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for expected in 1..3 {
        let Ok(records) = bursar_slurm::detail::parse_scontrol(text, expected) else { continue };
        for d in records.values().flatten() {
            if let Some(id) = d.markers.job.as_deref() {
                assert!(d.admin_comment.contains(id), "{id} not in the AdminComment {:?}", d.admin_comment);
            }
            let _ = (d.markers.bursar_id(), bursar_slurm::detail::without_hold(&d.admin_comment));
        }
    }
    let _ = bursar_slurm::detail::gres_gpus(text);
    let _ = bursar_slurm::queue::tres_gpus(text);
});
