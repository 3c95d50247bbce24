//! [`Checkpointer`]: the WAL checkpoints of a writing [`AuditLog`] on a thread of their own.
//!
//! In WAL mode SQLite appends every commit's pages to the `-wal` file and, by default, the
//! connection that commits copies them back into the database file ("checkpoints") once the WAL
//! holds 1,000 pages: one commit in every few dozen also copies about 4 MiB and, with
//! `synchronous=FULL`, waits for one more `fsync`, and the writer does nothing else meanwhile.
//!
//! [`Checkpointer::start`] moves most of that work to a thread with its own connection to the same
//! file. A WAL hook on the writing connection (which replaces SQLite's automatic checkpoint) sees
//! how many pages the WAL holds after each commit:
//! - whenever [`SOFT_PAGES`] of it are not yet in the database file, it wakes the thread, which
//!   copies them with one `PRAGMA wal_checkpoint(PASSIVE)` (one sync of the database file per
//!   stride, not per commit). A passive checkpoint never blocks the writer or a reader.
//! - once the thread has copied all but [`TAIL_PAGES`], the hook copies the rest itself. A
//!   checkpoint completes only if nothing commits while it runs, which under a steady stream of
//!   commits is true only between two of them, on the writing connection. SQLite restarts the WAL
//!   from its beginning at the first transaction after a complete checkpoint, so the file keeps the
//!   size it has without the thread.
//! - should the thread fall behind (a reader holding an old snapshot, a slow disk), the hook
//!   checkpoints at [`HARD_PAGES`], as SQLite would have at 1,000: the WAL stays bounded.
//!
//! Durability is unchanged: a commit is durable once its WAL frames are synced, as before, and the
//! thread's connection uses the writer's `synchronous` level, so the database file is synced before
//! SQLite lets the WAL be overwritten. Measured in docs/perf/audit.md: the writer bench +6 % and
//! `eval` with a durable audit +10 %, against the same code with the checkpoints in the commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::wal::CheckpointMode;

use crate::error::{AuditError, Result};
use crate::log::{AuditLog, Durability};

/// WAL pages not yet copied at which the thread is woken (SQLite's own automatic checkpoint
/// threshold): the stride it copies in.
pub const SOFT_PAGES: i32 = 1_000;

/// WAL pages at which the committing connection checkpoints itself (64 MiB of 4 KiB pages).
pub const HARD_PAGES: i32 = 16_384;

/// WAL pages not yet in the database file below which the committing connection copies them
/// itself: the commits that arrived while the thread's last round ran. A checkpoint completes only
/// when no commit lands during it, which under a steady load happens only on the committing
/// connection; copying this tail there is what lets the WAL restart instead of growing.
pub const TAIL_PAGES: i64 = 256;

/// What the checkpointer has done: shared with whoever reports on the writer.
#[derive(Debug, Default)]
pub struct CheckpointStats {
    /// Passive checkpoints run by the thread.
    pub runs: AtomicU64,
    /// Checkpoints the committing connection ran itself: the last [`TAIL_PAGES`] after the thread's,
    /// or everything because the WAL reached [`HARD_PAGES`].
    pub inline: AtomicU64,
    /// Checkpoints that failed (an I/O error; the WAL keeps the pages, the next run retries).
    pub failures: AtomicU64,
}

/// The checkpoint thread of one writing connection; stopping it (drop) joins the thread.
#[derive(Debug)]
pub struct Checkpointer {
    handle: Option<JoinHandle<()>>,
    stats: Arc<CheckpointStats>,
    wake: SyncSender<()>,
    stop: Arc<AtomicBool>,
}

impl Checkpointer {
    /// Moves `log`'s checkpoints to a new thread, until [`Checkpointer::stop`] gives them back.
    pub fn start(log: &mut AuditLog) -> Result<Checkpointer> {
        let mut conn = Connection::open(log.path())
            .map_err(AuditError::sqlite(format!("open `{}` for checkpoints", log.path())))?;
        let sync = match log.durability() {
            Durability::Durable => "FULL",
            Durability::Fast => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync).map_err(AuditError::sqlite("set the synchronous mode"))?;
        // Its reads are the WAL's frames, not the page cache: a small cache is enough.
        conn.pragma_update(None, "cache_size", -1024).map_err(AuditError::sqlite("set the page cache size"))?;
        let stats = Arc::new(CheckpointStats::default());
        let (wake, woken) = sync_channel::<()>(1);
        let hook_stats = stats.clone();
        let hook_wake = wake.clone();
        let backfilled = Arc::new(AtomicI64::new(0));
        let thread_backfilled = backfilled.clone();
        let wal_pages = Arc::new(AtomicI64::new(0));
        let thread_wal_pages = wal_pages.clone();
        log.conn
            .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
                let pages = i64::from(pages);
                wal_pages.store(pages, Relaxed);
                if pages < i64::from(SOFT_PAGES) {
                    // A small WAL is one that restarted: none of it is in the database file yet.
                    backfilled.store(0, Relaxed);
                    return Ok(());
                }
                let behind = pages - backfilled.load(Relaxed);
                if behind <= TAIL_PAGES || pages >= i64::from(HARD_PAGES) {
                    // The thread has copied all but the last few commits (or has fallen far behind):
                    // copy the rest here, between two transactions, where nothing can commit during
                    // it, so the checkpoint completes and the next transaction restarts the WAL. A
                    // busy checkpoint (the thread is in one) is no error: the commit has happened.
                    hook_stats.inline.fetch_add(1, Relaxed);
                    if let Ok((_, done)) = wal.checkpoint_v2(CheckpointMode::PASSIVE) {
                        backfilled.store(i64::from(done), Relaxed);
                    }
                } else if behind >= i64::from(SOFT_PAGES) {
                    // A stride's worth not yet copied: the thread copies it in one round (one sync
                    // of the database file per stride, not per commit).
                    match hook_wake.try_send(()) {
                        Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
                    }
                }
                Ok(())
            }))
            .map_err(AuditError::sqlite("install the WAL hook"))?;
        let thread_stats = stats.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bursar-checkpoint".into())
            .spawn(move || {
                let shared = Shared { wal_pages: thread_wal_pages, backfilled: thread_backfilled };
                run(&mut conn, &woken, &thread_stop, &thread_stats, &shared);
            })
            .map_err(|e| AuditError::Invalid(format!("cannot start the checkpoint thread: {e}")));
        let handle = match handle {
            Ok(h) => h,
            Err(e) => {
                restore(log);
                return Err(e);
            }
        };
        Ok(Checkpointer { handle: Some(handle), stats, wake, stop })
    }

    /// Stops the thread (after the checkpoint it is running, if any) and gives `log` its automatic
    /// checkpoints back. The thread's connection closes first, so `log`'s, the last to close,
    /// checkpoints what is left and removes the WAL as usual.
    pub fn stop(mut self, log: &mut AuditLog) {
        self.halt();
        restore(log);
    }

    fn halt(&mut self) {
        self.stop.store(true, Relaxed);
        // A full channel already holds a wake-up: the thread sees the flag on it.
        let _ = self.wake.try_send(());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }

    /// What it has done so far.
    pub fn stats(&self) -> Arc<CheckpointStats> {
        self.stats.clone()
    }
}

/// One passive checkpoint: the WAL's pages and how many of them are now in the database file.
fn passive(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))
}

/// The writing connection as it was: no hook, SQLite's automatic checkpoints.
fn restore(log: &mut AuditLog) {
    let _ = log.conn.wal_hook(None::<fn(&mut rusqlite::hooks::Wal, i32) -> rusqlite::Result<()>>);
    let _ = log.conn.pragma_update(None, "wal_autocheckpoint", SOFT_PAGES);
}

fn run(conn: &mut Connection, woken: &Receiver<()>, stop: &AtomicBool, stats: &CheckpointStats, shared: &Shared) {
    while woken.recv().is_ok() && !stop.load(Relaxed) {
        // A wake-up sent while the last round ran may find that round has copied it already.
        if shared.wal_pages.load(Relaxed) - shared.backfilled.load(Relaxed) < i64::from(SOFT_PAGES) / 2 {
            continue;
        }
        stats.runs.fetch_add(1, Relaxed);
        match passive(conn) {
            Ok((_, done)) => shared.backfilled.store(done, Relaxed),
            Err(_) => {
                stats.failures.fetch_add(1, Relaxed);
            }
        }
    }
}

/// What the hook and the thread both see of the WAL.
struct Shared {
    /// Pages in the WAL after the last commit.
    wal_pages: Arc<AtomicI64>,
    /// Pages of it already in the database file.
    backfilled: Arc<AtomicI64>,
}

impl Drop for Checkpointer {
    /// Stops the thread; the connection it served keeps the hook (and checkpoints itself only at
    /// [`HARD_PAGES`]) unless [`Checkpointer::stop`] was called.
    fn drop(&mut self) {
        self.halt();
    }
}
