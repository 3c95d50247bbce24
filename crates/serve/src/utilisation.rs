//! GPU utilisation from Prometheus (`--utilisation FILE`): `bursar-prometheus`'s source run inside
//! serve, feeding `job.sample` events into the same engine queue as every HTTP and socket input.
//!
//! Why inside serve rather than an agent beside it, like `bursar slurm watch`: the source needs the
//! engine's view of which jobs run on how many GPUs (a sample needs exactly as many GPUs as the job
//! holds, or it is bad data), its counters belong on serve's `/metrics` beside the idle rule they feed,
//! and its resume point must never run ahead of what the journal holds — all three are at hand in the
//! engine's process, and an agent would need an API for each. It still enters the one road: its events
//! are decoded inputs handed to the engine thread as [`Work::Inputs`], journaled and deduplicated like
//! any producer's (ids `prom-<job>-<evaluation time>`, so a restart or an overlapping poll never counts
//! a sample twice).
//!
//! The loop (on its own thread, blocking I/O): poll every evaluation time due since the resume point
//! (`Source::catch_up`), send the events, wait until they are durable, only then move the resume
//! point (a file beside the audit log, `<audit>.prometheus`), sleep until the next evaluation time.
//! A poll that fails (Prometheus down) sends nothing and is retried next time: nothing is skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use bursar_model::{Event, Input, Timestamp};
use bursar_prometheus::{Config as SourceConfig, Counters, ResumeFile, Source};
use bursar_session::Incoming;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot, watch};

use crate::core::Work;
pub use crate::jobkeys::{JobIndex, JobsConfig, Keys, Running};

/// The file given to `--utilisation`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilisationConfig {
    /// The Prometheus source (`bursar_prometheus::Config`; every field optional, see
    /// `docs/integrations/utilisation.md`).
    #[serde(default)]
    pub prometheus: SourceConfig,
    /// How keys name jobs.
    #[serde(default)]
    pub jobs: JobsConfig,
}

/// Why the utilisation file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum UtilisationError {
    /// The file cannot be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a valid utilisation configuration (the message has line and column).
    #[error("`{path}`: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and where.
        message: String,
    },
}

impl UtilisationConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<UtilisationConfig, UtilisationError> {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|source| UtilisationError::Read { path: shown.clone(), source })?;
        let cfg: UtilisationConfig = toml::from_str(&text).map_err(|e| UtilisationError::Invalid {
            path: shown.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        cfg.checked(&shown)
    }

    /// The checks of a read configuration that serde cannot make (a `[utilisation]` section of the
    /// site's configuration goes through them as a file does); `shown` names where it came from.
    pub fn checked(self, shown: &str) -> Result<UtilisationConfig, UtilisationError> {
        let mut cfg = self;
        if cfg.jobs.keys == Keys::Kubernetes && cfg.prometheus.attribution == bursar_prometheus::Attribution::slurm() {
            cfg.prometheus.attribution = bursar_prometheus::Attribution::kubernetes();
        }
        let shown = shown.to_owned();
        if let Err(e) = cfg.prometheus.validate() {
            let help = e.help().map(|h| format!("\n  help: {h}")).unwrap_or_default();
            return Err(UtilisationError::Invalid { path: shown, message: format!("[prometheus]: {e}{help}") });
        }
        if cfg.jobs.keys == Keys::Slurm && cfg.jobs.slurm_cluster.as_deref().is_none_or(str::is_empty) {
            return Err(UtilisationError::Invalid {
                path: shown,
                message: "[jobs]: `keys = \"slurm\"` needs `slurm_cluster`, the `--cluster` of `bursar slurm watch`\n  help: or set `keys = \"bursar\"` when the mapping files hold bursar's job ids".into(),
            });
        }
        Ok(cfg)
    }
}

/// The source's counters, shared with `/metrics`.
pub type SharedCounters = Arc<Mutex<Counters>>;

/// Why the source's last successful poll sent no sample for each running job it skipped, by job id:
/// what `GET /v1/jobs/{id}` and the pool page say instead of a utilisation.
#[derive(Debug, Default)]
pub struct Skips {
    /// The evaluation time of that poll.
    pub at: Option<Timestamp>,
    /// Job id → the reason, as a sentence.
    pub by_job: HashMap<String, String>,
}

/// The skip reasons, shared with the handlers; `None` in [`crate::local::Local`] when serve runs
/// no utilisation source.
pub type SharedSkips = Arc<Mutex<Skips>>;

/// Why a job has no utilisation to show, if it has none: `samples` is how many the engine saw,
/// `running` whether it runs now, `skips` the source's board (`None`: no source).
pub fn no_sample(job: &str, samples: u32, running: bool, skips: Option<&Skips>) -> Option<String> {
    if let Some(reason) = skips.and_then(|s| s.by_job.get(job)) {
        let at = skips.and_then(|s| s.at).map(|t| format!(" at {t}")).unwrap_or_default();
        return Some(format!("the utilisation source's last poll{at} sent no sample: {reason}"));
    }
    if samples > 0 {
        return None;
    }
    Some(match (running, skips) {
        (false, _) => "no sample: the job is not running".to_owned(),
        (true, None) => "no `job.sample` has arrived, and this server runs no utilisation source (`[utilisation]` in bursar.toml): samples must come from a producer".to_owned(),
        (true, Some(s)) if s.at.is_none() => "no `job.sample` has arrived: the utilisation source has not completed a poll yet".to_owned(),
        (true, Some(_)) => "no `job.sample` has arrived yet: the utilisation source has not polled since the job started".to_owned(),
    })
}

/// Replaces the board with the skips of one poll, logging at info each job whose reason is new or
/// changed (a job skipped every minute for the same reason is logged once).
fn post_skips(
    board: &SharedSkips,
    at: Timestamp,
    skipped: &[(String, bursar_prometheus::Skip)],
    unkeyed: &[(String, String)],
) {
    let mut by_job: HashMap<String, String> = HashMap::with_capacity(skipped.len() + unkeyed.len());
    for (job, why) in skipped {
        by_job.insert(job.clone(), why.to_string());
    }
    for (job, why) in unkeyed {
        by_job.entry(job.clone()).or_insert_with(|| why.clone());
    }
    let Ok(mut b) = board.lock() else { return };
    let mut changed: Vec<(&String, &String)> =
        by_job.iter().filter(|(job, why)| b.by_job.get(*job) != Some(*why)).collect();
    changed.sort();
    for (job, why) in changed {
        tracing::info!(job_id = %job, at = %at, reason = %why, "utilisation: no sample for a running job");
    }
    b.at = Some(at);
    b.by_job = by_job;
}

/// Where the resume point of the audit log `audit` is kept.
pub fn resume_path(audit: &Path) -> PathBuf {
    let mut p = audit.as_os_str().to_owned();
    p.push(".prometheus");
    PathBuf::from(p)
}

/// Runs the source until `shutdown` turns true. Blocking: run it on its own thread.
pub fn run(
    mut source: Source,
    resume: ResumeFile,
    engine: mpsc::Sender<Work>,
    counters: SharedCounters,
    skips: SharedSkips,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut at = match resume.load() {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(file = %resume.path().display(), error = %e, "cannot read the utilisation resume point; starting from now");
            None
        }
    };
    tracing::info!(server = %source.config().server, resume = ?at.map(|t| t.to_string()), "utilisation source starting");
    loop {
        if *shutdown.borrow() {
            return;
        }
        let Some(running) =
            crate::core::blocking_read(&engine, |v| v.jobs.map(|j| j.running(v.engine)).unwrap_or_default())
        else {
            return;
        };
        let catch = source.catch_up(at, Timestamp::wall_clock(), &running);
        if let Ok(mut c) = counters.lock() {
            *c = *source.counters();
        }
        for poll in catch.polls {
            if let Some(e) = &poll.error {
                tracing::warn!(at = %poll.at, error = %e, help = e.help(), "utilisation poll failed; retried next time");
                break;
            }
            post_skips(&skips, poll.at, &poll.skipped, &running.unkeyed);
            if !send(&engine, poll.events) {
                return;
            }
            at = Some(poll.at);
            if let Err(e) = resume.store(poll.at) {
                tracing::error!(file = %resume.path().display(), error = %e, "cannot store the utilisation resume point");
            }
        }
        let now = Timestamp::wall_clock();
        let wake = source.schedule().next_wake(now);
        // Sleep until the next evaluation time, looking at the shutdown flag every 200 ms.
        while Timestamp::wall_clock() < wake {
            if *shutdown.borrow_and_update() {
                return;
            }
            let left = wake.since(Timestamp::wall_clock()).millis().clamp(1, 200);
            std::thread::sleep(StdDuration::from_millis(u64::try_from(left).unwrap_or(200)));
        }
    }
}

/// Sends one evaluation time's samples and waits until they are durable.
fn send(engine: &mpsc::Sender<Work>, events: Vec<Event>) -> bool {
    if events.is_empty() {
        return true;
    }
    let items = events
        .into_iter()
        .enumerate()
        .map(|(i, e)| Incoming::new(i as u64 + 1, e.to_json(), Input::Event(e)))
        .collect();
    let (tx, rx) = oneshot::channel();
    // bursar's own source: no caller to check, nothing to namespace.
    if engine.blocking_send(Work::Inputs { items, caller: None, reply: tx }).is_err() {
        return false;
    }
    matches!(rx.blocking_recv(), Ok(Ok(_)))
}
