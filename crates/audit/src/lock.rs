//! One writer per log: an exclusive OS file lock (`flock`) on `<db>.lock`, taken by every process
//! that opens the log for writing ([`crate::AuditLog::open`]: `serve`, `eval --audit`, `audit
//! prune`, `audit migrate`, `audit head --adopt-unsigned`) and held for as long as that handle
//! lives, which for `serve` is the process's life.
//!
//! Why a lock and not a check: two writers on one file each keep the chains' heads in memory, so the
//! second one's write forks the chains (`UNIQUE constraint failed: anchors.seq` for the first, an
//! unverifiable log for both). SQLite's own locks only serialise transactions, not that knowledge.
//!
//! The kernel releases an `flock` when its file is closed, which a process's death does (SIGKILL
//! included): a stale lock file never blocks a start. After taking the lock the holder writes its
//! pid and command line into the file, so the next writer is refused with who holds it
//! ([`AuditError::Locked`]). Readers (`verify`, `query`, `explain`, `report`, `audit backup`) take no
//! lock: SQLite's WAL lets them read beside the writer.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{AuditError, Result};

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct WriterLock {
    file: File,
    path: PathBuf,
}

impl WriterLock {
    /// The lock file of the log at `db`: `<db>.lock` beside it.
    pub fn path_of(db: &Path) -> PathBuf {
        let mut p = db.as_os_str().to_owned();
        p.push(".lock");
        PathBuf::from(p)
    }

    /// Takes the log's writer lock without waiting, and records this process as its holder; refused
    /// with the holder's pid and command when another process (or another handle in this one) has it.
    pub fn acquire(db: &Path) -> Result<WriterLock> {
        let path = WriterLock::path_of(db);
        let shown = path.display().to_string();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(crate::AuditLog::FILE_MODE)
            .open(&path)
            .map_err(|e| AuditError::Invalid(format!("cannot open the writer lock `{shown}`: {e}")))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut held = String::new();
                let _ = file.read_to_string(&mut held);
                return Err(AuditError::Locked { path: db.display().to_string(), holder: describe(&held) });
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(AuditError::Invalid(format!("cannot lock `{shown}`: {e}")));
            }
        }
        let me = holder_line();
        let written = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(me.as_bytes()))
            .and_then(|()| file.flush());
        written.map_err(|e| AuditError::Invalid(format!("cannot record this process in `{shown}`: {e}")))?;
        Ok(WriterLock { file, path })
    }

    /// Who holds the lock of the log at `db` now, as [`AuditError::Locked`] says it; `None` when
    /// nobody does (or there is no lock file).
    pub fn holder(db: &Path) -> Option<String> {
        let path = WriterLock::path_of(db);
        let mut file = OpenOptions::new().read(true).open(&path).ok()?;
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                None
            }
            Err(_) => {
                let mut held = String::new();
                let _ = file.read_to_string(&mut held);
                Some(describe(&held))
            }
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open lock file (kept open: closing it releases the lock).
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// This process as the lock file records it: `pid N` and `command …` lines.
fn holder_line() -> String {
    let command: Vec<String> = std::env::args().collect();
    format!("pid {}\ncommand {}\n", std::process::id(), command.join(" "))
}

/// The lock file's content as a phrase: `pid 4242 (bursar serve --config /etc/bursar/bursar.toml)`.
fn describe(held: &str) -> String {
    let pid = held.lines().find_map(|l| l.strip_prefix("pid ")).map(str::trim);
    let command = held.lines().find_map(|l| l.strip_prefix("command ")).map(str::trim);
    match (pid, command) {
        (Some(p), Some(c)) => format!("pid {p} (`{c}`)"),
        (Some(p), None) => format!("pid {p}"),
        // Taken, but not written yet (the holder is starting this instant), or by a bursar that
        // wrote nothing.
        _ => "a process that has not said who it is yet".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("bursar-lock-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("audit.db")
    }

    #[test]
    fn a_second_writer_is_refused_with_the_holder_and_the_lock_is_free_after_a_drop() {
        let db = temp("second");
        let held = WriterLock::acquire(&db).unwrap();
        let e = WriterLock::acquire(&db).unwrap_err().to_string();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(e.contains("bursar audit prune --server"), "{e}");
        assert!(WriterLock::holder(&db).is_some_and(|h| h.starts_with(&format!("pid {}", std::process::id()))));
        drop(held);
        assert_eq!(WriterLock::holder(&db), None);
        let again = WriterLock::acquire(&db).unwrap();
        assert!(again.path().ends_with("audit.db.lock"));
    }

    #[test]
    fn a_stale_lock_file_without_a_holder_blocks_nobody() {
        let db = temp("stale");
        std::fs::write(WriterLock::path_of(&db), "pid 1\ncommand bursar serve\n").unwrap();
        assert_eq!(WriterLock::holder(&db), None);
        let held = WriterLock::acquire(&db).unwrap();
        let text = std::fs::read_to_string(held.path()).unwrap();
        assert!(text.starts_with(&format!("pid {}\ncommand ", std::process::id())), "{text}");
    }

    #[test]
    fn the_holder_is_described_from_what_it_wrote() {
        assert_eq!(describe("pid 7\ncommand bursar serve --config x\n"), "pid 7 (`bursar serve --config x`)");
        assert_eq!(describe("pid 7\n"), "pid 7");
        assert_eq!(describe(""), "a process that has not said who it is yet");
    }
}
