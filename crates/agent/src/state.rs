//! The agents' persisted state: one small JSON file each, rewritten atomically (write a temporary file,
//! fsync, rename, fsync the directory), so a crash leaves either the old or the new state, never half
//! of one. What a state holds is each agent's own business; this module only reads and replaces it.

use std::fs;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

fn err(path: &Path, message: impl Into<String>) -> Error {
    Error::State { path: path.display().to_string(), message: message.into() }
}

/// Reads a state file; a missing file is the default state. A file that does not parse is an error,
/// never a silent reset (an agent that forgot what it sent would send it again under new ids).
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
    use std::collections::BTreeMap;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct S {
        version: u32,
        jobs: BTreeMap<u64, String>,
    }

    /// A state file's path in a fresh directory, removed when the guard drops.
    fn temp(name: &str) -> (bursar_testkit::TempDir, std::path::PathBuf) {
        let dir = bursar_testkit::TempDir::new(&format!("agent-state-{name}")).unwrap();
        let path = dir.join("state.json");
        (dir, path)
    }

    #[test]
    fn round_trips_and_starts_empty() {
        let (_dir, path) = temp("roundtrip");
        let empty: S = load(&path).unwrap();
        assert!(empty.jobs.is_empty());
        let mut s = S::default();
        s.jobs.insert(17, "lab-abc".into());
        save(&path, &s).unwrap();
        assert_eq!(load::<S>(&path).unwrap(), s);
        assert!(!path.with_extension("json.tmp").exists());
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_reset() {
        let (_dir, path) = temp("corrupt");
        fs::write(&path, "{\"version\":").unwrap();
        let e = load::<S>(&path).unwrap_err().to_string();
        assert!(e.contains("delete it to start afresh"), "{e}");
    }
}
