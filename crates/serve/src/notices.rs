//! `serve --notify FILE`: runs `bursar-notify`'s outbox loop on its own thread (blocking SQLite and
//! HTTP), answering its questions about jobs from the engine thread (reads, [`crate::core::Work::Read`]),
//! and loads the link key the action routes verify with ([`crate::people`]).
//!
//! The notifier is opened before the engine applies anything new, so on its first start its cursor
//! is the end of the recovered log and no decision made from then on is missed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bursar_notify::{EngineGone, EngineView, JobFacts, LinkKey, Notifier, NotifyConfig};
use tokio::sync::mpsc;

use crate::ServeError;
use crate::core::Work;

/// The notifier's view of the engine: reads over the engine queue (blocking: the notifier runs on
/// its own thread).
#[derive(Debug, Clone)]
pub struct EngineQueue(pub mpsc::Sender<Work>);

impl EngineView for EngineQueue {
    fn facts(&self, jobs: &[String]) -> Result<Vec<Option<JobFacts>>, EngineGone> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let jobs = jobs.to_vec();
        crate::core::blocking_read(&self.0, move |v| jobs.iter().map(|j| crate::pool::facts(v.engine, j)).collect())
            .ok_or(EngineGone)
    }

    fn open_jobs(&self) -> Result<Vec<String>, EngineGone> {
        crate::core::blocking_read(&self.0, |v| crate::pool::open_jobs(v.engine)).ok_or(EngineGone)
    }
}

/// The running notifier.
#[derive(Debug)]
pub struct Running {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Running {
    /// Asks the loop to stop after its pass and waits for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

fn failed(context: &str, e: impl std::fmt::Display) -> ServeError {
    ServeError::Io { context: context.into(), message: e.to_string() }
}

/// Loads the link key and starts the notifier, when `cfg` is set: the key the action links are
/// verified with, and the notifier.
pub fn start(
    cfg: Option<NotifyConfig>,
    audit: &Path,
    listening: std::net::SocketAddr,
    engine: mpsc::Sender<Work>,
) -> Result<(Option<Arc<LinkKey>>, Option<Running>), ServeError> {
    let Some(mut cfg) = cfg else { return Ok((None, None)) };
    cfg.listening_on(listening);
    let key =
        Arc::new(LinkKey::load_or_create(&cfg.key_path(audit)).map_err(|e| failed("load the action-link key", e))?);
    let notifier =
        Notifier::open(cfg, audit, key.clone(), EngineQueue(engine)).map_err(|e| failed("start the notifier", e))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("bursar-notify".into())
        .spawn(move || notifier.run(move || flag.load(Ordering::Relaxed)))
        .map_err(|e| failed("start the notifier thread", e))?;
    Ok((Some(key), Some(Running { stop, thread })))
}
