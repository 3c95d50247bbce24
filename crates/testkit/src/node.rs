//! A GPU node's driver view for the Slurm prolog/epilog pair (`integrations/slurm/prolog-dcgm.sh`,
//! `epilog-dcgm.sh`): a fake `/proc/driver/nvidia/gpus/<bus>/information` and a fake `nvidia-smi`,
//! whose device minor numbers are *not* the NVML indices (the trap the prolog exists to get right),
//! and a runner of the scripts with the environment Slurm gives them.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fake driver view in a folder.
#[derive(Debug, Clone)]
pub struct FakeNode {
    dir: PathBuf,
    /// `perm[d]` is the NVML index of the GPU whose device file is `/dev/nvidia<d>`.
    pub perm: Vec<u32>,
}

impl FakeNode {
    /// Writes the driver view into `dir`: GPU `/dev/nvidia<d>` is NVML index `perm[d]`, its PCI bus
    /// `0x18 + 0x10 × index` (as `crate::FakeDcgm` numbers them).
    pub fn new(dir: &Path, perm: &[u32]) -> io::Result<FakeNode> {
        let proc_dir = dir.join("proc");
        let mut smi = String::from("#!/bin/sh\n");
        for (minor, index) in perm.iter().enumerate() {
            let bus = format!("{:02x}", 0x18 + index * 0x10);
            let d = proc_dir.join(format!("0000:{bus}:00.0"));
            std::fs::create_dir_all(&d)?;
            std::fs::write(
                d.join("information"),
                format!("Model: \t\t NVIDIA H100 80GB HBM3\nDevice Minor: \t {minor}\n"),
            )?;
        }
        for index in 0..perm.len() as u32 {
            smi.push_str(&format!("echo '{index}, 00000000:{:02X}:00.0'\n", 0x18 + index * 0x10));
        }
        std::fs::write(dir.join("nvidia-smi"), smi)?;
        let status = Command::new("chmod").arg("+x").arg(dir.join("nvidia-smi")).status()?;
        if !status.success() {
            return Err(io::Error::other("chmod +x nvidia-smi failed"));
        }
        Ok(FakeNode { dir: dir.to_path_buf(), perm: perm.to_vec() })
    }

    /// Runs `script` (the prolog or the epilog) for Slurm job `slurm_id` on Slurm's GPU numbers
    /// `gpus` (`SLURM_JOB_GPUS`, e.g. `0,1`), writing mapping files under `map_dir`.
    pub fn run(&self, script: &Path, map_dir: &Path, slurm_id: &str, gpus: &str) -> io::Result<()> {
        let out = Command::new(script)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SLURM_JOB_ID", slurm_id)
            .env("SLURM_JOB_GPUS", gpus)
            .env("BURSAR_DCGM_MAP_DIR", map_dir)
            .env("BURSAR_NVIDIA_SMI", self.dir.join("nvidia-smi"))
            .env("BURSAR_NVIDIA_PROC", self.dir.join("proc"))
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "{} failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }
}
