//! What `watch` remembers between polls (a `bursar-agent` state file, rewritten atomically), and
//! what `enforce` reads of it to find a bursar job's Slurm id without listing the queue.
//!
//! Version 2 keeps one [`Memo`] per [`Key`] (a job, an array task, an array): bursar's id, the last
//! thing sent about its current run, the run (Slurm's RestartCnt) and what is needed to notice the
//! next change (partition, hold). Jobs without bursar's mark are remembered too (as `foreign`), so
//! their records are read once, not on every poll. Version 1 (before per-run charging: Slurm id ->
//! bursar id and `started`/`finished`) is read and migrated: its jobs keep their ids and what was
//! sent, so nothing is sent twice across the upgrade.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::queue::{EndStatus, Key};
use crate::{Error, Result};

/// The state file's format version this code writes.
pub const VERSION: u32 = 2;

/// What a key is to bursar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A job bursar admitted (or a heterogeneous component).
    Job,
    /// A task of an array bursar admitted.
    Task,
    /// An array bursar admitted (the parent of its tasks).
    Array,
    /// A job without bursar's mark (submitted before the hook, or let through unadmitted).
    Foreign,
    /// A job carrying the `--test-only` marker: it was never reserved; it stays held.
    Forged,
}

/// The last thing sent about a key's current run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Last {
    /// `job.queued` (or nothing yet, for a task): waiting for its first run.
    Queued,
    /// `job.started` of run `restarts`.
    Running,
    /// `job.requeued`: the run ended, the job waits for another.
    Requeued,
    /// `job.finished`.
    Finished,
}

/// What `watch` remembers about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memo {
    /// bursar's id (a task: `<array's id>_<task>`); empty for foreign and forged jobs.
    #[serde(rename = "b", default, skip_serializing_if = "String::is_empty")]
    pub bursar: String,
    /// What it is.
    #[serde(rename = "k")]
    pub kind: Kind,
    /// Slurm's JobID of its record when last seen.
    #[serde(rename = "j")]
    pub slurm_id: u64,
    /// The last thing sent.
    #[serde(rename = "l")]
    pub last: Last,
    /// The run that event was about (Slurm's RestartCnt).
    #[serde(rename = "r", default)]
    pub restarts: u32,
    /// When the current (or last) run started, Unix seconds; 0 before the first.
    #[serde(rename = "s", default)]
    pub start: i64,
    /// Its partition when last read (a change is a re-admission).
    #[serde(rename = "p", default, skip_serializing_if = "String::is_empty")]
    pub partition: String,
    /// Held for approval by bursar when its record was last read.
    #[serde(rename = "h", default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// A `released_by` was sent already.
    #[serde(rename = "rb", default, skip_serializing_if = "std::ops::Not::not")]
    pub released_sent: bool,
    /// How it ended, once finished (an array's parent sums its tasks' ends).
    #[serde(rename = "e", default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EndStatus>,
    /// For a task: the array's bursar id.
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// For a heterogeneous component: (leader JobID, offset).
    #[serde(rename = "het", default, skip_serializing_if = "Option::is_none")]
    pub het: Option<(u64, u32)>,
    /// Slurm's reason it waits, as last sent (`job.queued`'s `reason`).
    #[serde(rename = "w", default, skip_serializing_if = "String::is_empty")]
    pub waits: String,
    /// How many reasons were sent for it.
    #[serde(rename = "wn", default, skip_serializing_if = "is_zero")]
    pub waits_sent: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Memo {
    /// A memo of a key first seen.
    pub fn new(kind: Kind, bursar: impl Into<String>, slurm_id: u64) -> Memo {
        Memo {
            bursar: bursar.into(),
            kind,
            slurm_id,
            last: Last::Queued,
            restarts: 0,
            start: 0,
            partition: String::new(),
            held: false,
            released_sent: false,
            status: None,
            parent: None,
            het: None,
            waits: String::new(),
            waits_sent: 0,
        }
    }

    /// Whether bursar admitted it (a job, task or array).
    pub fn is_bursars(&self) -> bool {
        matches!(self.kind, Kind::Job | Kind::Task | Kind::Array)
    }
}

/// `watch`'s state: per key (its [`Key`]'s text), what was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchState {
    /// Format version ([`VERSION`]).
    #[serde(default)]
    pub version: u32,
    /// Key -> memo.
    #[serde(default)]
    pub jobs: BTreeMap<String, Memo>,
}

impl WatchState {
    /// The memo of `key`.
    pub fn get(&self, key: &Key) -> Option<&Memo> {
        self.jobs.get(&key.to_string())
    }

    /// The key Slurm knows bursar job `bursar_id` by, from what the watcher last saw.
    pub fn find(&self, bursar_id: &str) -> Option<(Key, &Memo)> {
        self.jobs
            .iter()
            .filter(|(_, m)| m.is_bursars() && m.bursar == bursar_id)
            .find_map(|(k, m)| Key::parse(k).map(|k| (k, m)))
    }
}

/// Version 1's record of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum SentV1 {
    Started,
    Finished,
}

#[derive(Debug, Deserialize)]
struct StateV1 {
    #[serde(default)]
    jobs: BTreeMap<u64, (String, SentV1)>,
}

/// Reads a state file of any version (missing: empty), migrating version 1.
pub fn load(path: &Path) -> Result<WatchState> {
    let raw: serde_json::Value = bursar_agent::state::load(path)?;
    if raw.is_null() {
        return Ok(WatchState { version: VERSION, jobs: BTreeMap::new() });
    }
    let bad = |e: serde_json::Error| {
        Error::Agent(bursar_agent::Error::State {
            path: path.display().to_string(),
            message: format!("{e}; delete it to start afresh"),
        })
    };
    let version = raw.get("version").and_then(serde_json::Value::as_u64).unwrap_or(0);
    match version {
        0 | 1 => {
            let v1: StateV1 = serde_json::from_value(raw).map_err(bad)?;
            Ok(migrate_v1(v1))
        }
        2 => serde_json::from_value(raw).map_err(bad),
        v => Err(Error::Agent(bursar_agent::Error::State {
            path: path.display().to_string(),
            message: format!(
                "version {v} is newer than this bursar (writes {VERSION}); upgrade bursar or delete the file"
            ),
        })),
    }
}

fn migrate_v1(v1: StateV1) -> WatchState {
    let mut jobs = BTreeMap::new();
    for (id, (bursar, sent)) in v1.jobs {
        let mut m = Memo::new(Kind::Job, bursar, id);
        m.last = match sent {
            SentV1::Started => Last::Running,
            SentV1::Finished => Last::Finished,
        };
        jobs.insert(Key::Job(id).to_string(), m);
    }
    WatchState { version: VERSION, jobs }
}

/// Replaces the state file atomically.
pub fn save(path: &Path, state: &WatchState) -> Result<()> {
    Ok(bursar_agent::state::save(path, state)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> (bursar_testkit::TempDir, std::path::PathBuf) {
        let dir = bursar_testkit::TempDir::new(&format!("slurm-state-{name}")).unwrap();
        let path = dir.join("watch.json");
        (dir, path)
    }

    #[test]
    fn a_version_1_file_is_migrated_without_forgetting_what_was_sent() {
        let (_d, path) = temp("v1");
        std::fs::write(&path, r#"{"version":1,"jobs":{"17":["lab-a","started"],"18":["lab-b","finished"]}}"#).unwrap();
        let s = load(&path).unwrap();
        assert_eq!(s.version, VERSION);
        let a = s.get(&Key::Job(17)).unwrap();
        assert_eq!((a.bursar.as_str(), a.last, a.kind), ("lab-a", Last::Running, Kind::Job));
        assert_eq!(s.get(&Key::Job(18)).unwrap().last, Last::Finished);
        assert_eq!(s.find("lab-b").map(|(k, _)| k), Some(Key::Job(18)));
        save(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), s, "version 2 round-trips");
    }

    #[test]
    fn missing_is_empty_and_newer_or_corrupt_is_refused() {
        let (_d, path) = temp("versions");
        assert!(load(&path).unwrap().jobs.is_empty());
        std::fs::write(&path, r#"{"version":9,"jobs":{}}"#).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("newer than this bursar"));
        std::fs::write(&path, r#"{"version":2,"jobs":{"17":{"k":"nope"}}}"#).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("delete it to start afresh"));
    }
}
