//! What `watch` remembers between polls: per Slurm job, bursar's id and what was sent. Kept in a
//! `bursar-agent` state file (atomic rewrite).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Result;

/// What `watch` remembers about one Slurm job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sent {
    /// `job.started` was accepted by serve.
    Started,
    /// `job.finished` was accepted by serve (the job is forgotten once squeue no longer lists it).
    Finished,
}

/// `watch`'s state: per Slurm job id, bursar's id and what was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchState {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// Slurm job id -> (bursar job id, last event sent).
    #[serde(default)]
    pub jobs: BTreeMap<u64, (String, Sent)>,
}

/// Reads the state file (missing: empty).
pub fn load(path: &Path) -> Result<WatchState> {
    Ok(bursar_agent::state::load(path)?)
}

/// Replaces the state file atomically.
pub fn save(path: &Path, state: &WatchState) -> Result<()> {
    Ok(bursar_agent::state::save(path, state)?)
}
