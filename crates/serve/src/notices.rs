//! `serve --notify FILE`: runs `bursar-notify`'s outbox loop on its own thread (blocking SQLite and
//! HTTP), answering its questions about jobs from the engine thread ([`Work::People`]), and holds the
//! link key the action routes verify with ([`crate::people`]).
//!
//! The notifier is opened before the engine applies anything new, so on its first start its cursor
//! is the end of the recovered log and no decision made from then on is missed.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bursar_notify::{EngineGone, EngineView, JobFacts, LinkKey, Notifier, NotifyConfig};
use tokio::sync::{mpsc, oneshot};

use crate::ServeError;
use crate::core::Work;
use crate::people::Links;
use crate::pool::{Answer, Ask};

/// The notifier's view of the engine: [`Work::People`] over the engine queue (blocking: the notifier
/// runs on its own thread).
#[derive(Debug, Clone)]
pub struct EngineQueue(pub mpsc::Sender<Work>);

impl EngineView for EngineQueue {
    fn facts(&self, jobs: &[String]) -> Result<Vec<Option<JobFacts>>, EngineGone> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = oneshot::channel();
        self.0
            .blocking_send(Work::People { ask: Ask::Facts { jobs: jobs.to_vec(), seen: None }, reply: tx })
            .map_err(|_| EngineGone)?;
        match rx.blocking_recv() {
            Ok(Answer::Facts(f, _)) => Ok(f),
            _ => Err(EngineGone),
        }
    }

    fn open_jobs(&self) -> Result<Vec<String>, EngineGone> {
        let (tx, rx) = oneshot::channel();
        self.0.blocking_send(Work::People { ask: Ask::OpenJobs, reply: tx }).map_err(|_| EngineGone)?;
        match rx.blocking_recv() {
            Ok(Answer::OpenJobs(jobs)) => Ok(jobs),
            _ => Err(EngineGone),
        }
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

/// Loads the link key and starts the notifier, when `cfg` is set.
pub fn start(
    cfg: Option<NotifyConfig>,
    audit: &Path,
    listening: std::net::SocketAddr,
    engine: mpsc::Sender<Work>,
) -> Result<(Links, Option<Running>), ServeError> {
    let Some(mut cfg) = cfg else { return Ok((Links::default(), None)) };
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
    Ok((Links { key: Some(key) }, Some(Running { stop, thread })))
}
