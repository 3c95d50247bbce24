//! The agents' persisted state: one small JSON file each, rewritten atomically (write a temporary file,
//! fsync, rename), so a crash leaves either the old or the new state, never half of one.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

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

/// `enforce`'s state: the last decision handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnforceState {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// The `seq` of the last decision fully handled (action done and recorded).
    pub cursor: u64,
}

fn err(path: &Path, message: impl Into<String>) -> Error {
    Error::State { path: path.display().to_string(), message: message.into() }
}

/// Reads a state file; a missing file is the default state.
pub fn load<T: for<'de> Deserialize<'de> + Default>(path: &Path) -> Result<T> {
    match fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| err(path, format!("{e}; delete it to start afresh"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(err(path, e.to_string())),
    }
}

/// Replaces a state file atomically.
pub fn save<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string(value).map_err(|e| err(path, e.to_string()))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| err(path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state file's path in a fresh directory, removed when the guard drops.
    fn temp(name: &str) -> (bursar_testkit::TempDir, std::path::PathBuf) {
        let dir = bursar_testkit::TempDir::new(&format!("slurm-state-{name}")).unwrap();
        let path = dir.join("state.json");
        (dir, path)
    }

    #[test]
    fn round_trips_and_starts_empty() {
        let (_dir, path) = temp("roundtrip");
        let empty: WatchState = load(&path).unwrap();
        assert!(empty.jobs.is_empty());
        let mut s = WatchState::default();
        s.jobs.insert(17, ("lab-abc".into(), Sent::Started));
        save(&path, &s).unwrap();
        assert_eq!(load::<WatchState>(&path).unwrap(), s);
        save(&path, &EnforceState { version: 1, cursor: 9 }).unwrap();
        assert_eq!(load::<EnforceState>(&path).unwrap().cursor, 9);
        assert!(!path.with_extension("json.tmp").exists());
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_reset() {
        let (_dir, path) = temp("corrupt");
        fs::write(&path, "{\"cursor\":").unwrap();
        let e = load::<EnforceState>(&path).unwrap_err().to_string();
        assert!(e.contains("delete it to start afresh"), "{e}");
    }
}
