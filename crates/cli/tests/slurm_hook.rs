//! The Slurm admission hook (`integrations/slurm/job_submit.lua`) outside slurmctld: runs
//! `integrations/slurm/test/hook_test.lua` under Debian's `lua5.1` (the Lua that Debian's Slurm links),
//! with a fake `curl` answering what `bursar serve` answers. The end-to-end test against a real Slurm
//! (`integrations/slurm/e2e.sh`) runs the same hook inside slurmctld.
//!
//! `scripts/setup.sh` installs `lua5.1`; without it the test is skipped, unless `CI` is set.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_hook_reads_serves_answer_by_field() {
    let Ok(lua) = which("lua5.1") else {
        bursar_testkit::need::missing("lua5.1", "scripts/setup.sh");
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("bursar-hook-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(lua)
        .arg(root.join("integrations/slurm/test/hook_test.lua"))
        .arg(&dir)
        .env("BURSAR_SLURM_CONFIG", dir.join("bursar.lua"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all cases passed"), "{text}");
}

fn which(name: &str) -> Result<PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).ok_or(())
}
