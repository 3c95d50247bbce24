//! Hot reload: a file watcher (debounced), `SIGHUP` and `POST /v1/reload` all ask the reloader task to
//! compile the policy directory again.
//!
//! Compiling runs on a blocking thread, never on the engine thread or the async workers. A set that
//! compiles is handed to the engine thread, which swaps it in between two batches (so no event is
//! evaluated half under one set and half under the other) and records the load in the audit log. A set
//! that fails leaves the previous one in force; the errors (`file:line:col: message`) are logged,
//! recorded in the audit log and kept for `GET /v1/policies`. Requests that arrive while a compile runs
//! are served by the next compile, so a burst of writes costs at most two compiles.
//!
//! The watcher watches the directory, not the files, so an editor that saves by writing a temporary
//! file and renaming it over the original is seen. Only changes to `*.toml`, `*.wasm` and `*.wat`
//! files count (the loader's own reads, editor swap files and backups do not).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bursar_engine::PolicySet;
use tokio::sync::{mpsc, oneshot};

use crate::core::Work;
use crate::metrics::Metrics;
use crate::{Loader, wall_time};

pub use bursar_model::api::{ConfigReload, ReloadOutcome};

/// What `GET /v1/policies` shows.
#[derive(Debug, Clone, Default)]
pub struct PolicyStatus {
    /// The set in force.
    pub set: Option<Arc<PolicySet>>,
    /// When it was loaded.
    pub loaded_at: String,
    /// The last reload's outcome.
    pub last: Option<ReloadOutcome>,
}

/// Shared policy status.
pub type SharedStatus = Arc<RwLock<PolicyStatus>>;

/// A request to reload.
#[derive(Debug)]
pub struct ReloadRequest {
    /// What asked.
    pub cause: &'static str,
    /// Where to send the outcome, if anyone waits.
    pub reply: Option<oneshot::Sender<ReloadOutcome>>,
}

/// The reloader: owns nothing but the channels; one runs per server.
pub struct Reloader {
    /// The policy directory.
    pub dir: PathBuf,
    /// Compiles it.
    pub loader: Loader,
    /// Where a new set goes.
    pub target: Target,
    /// Shown by `/v1/policies`.
    pub status: SharedStatus,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The configuration file, reread on every reload, and the authenticator it feeds.
    pub config: Option<(PathBuf, crate::auth::SharedAuth)>,
    /// The configuration file as it was at start (or at the last reload that changed nothing that
    /// needs a restart).
    pub site: SharedSite,
}

/// Where a set that compiled goes.
pub enum Target {
    /// The engine thread of this process: swapped in between two batches and recorded in the audit
    /// log, as a failed reload is.
    Engine(mpsc::Sender<Work>),
    /// A cluster instance's partition owners, which take it between two batches (`docs/cluster.md`,
    /// "Reloading"); a cluster's journal carries only inputs, so a failed reload is logged only.
    Instances(tokio::sync::watch::Sender<Arc<PolicySet>>),
}

impl Target {
    /// Hands `set` over; false when nobody takes it any more (shutting down).
    async fn swap(&self, set: Arc<PolicySet>, cause: &'static str) -> bool {
        match self {
            Target::Engine(engine) => {
                let (tx, rx) = oneshot::channel();
                let sent = engine.send(Work::Policies { set, cause, reply: tx }).await;
                matches!((sent, rx.await), (Ok(()), Ok(Ok(()))))
            }
            Target::Instances(w) => w.send(set).is_ok(),
        }
    }

    /// Records a failed reload where this target keeps records.
    async fn failed(&self, text: String) {
        if let Target::Engine(engine) = self {
            let (tx, rx) = oneshot::channel();
            if engine.send(Work::ReloadFailed { error: text, reply: tx }).await.is_ok() {
                let _ = rx.await;
            }
        }
    }
}

/// The configuration in force, to tell what a reload cannot take.
pub type SharedSite = Arc<std::sync::Mutex<Option<bursar_config::SiteConfig>>>;

/// Rereads the configuration file at `path` and swaps its principals in; the previous ones stay when
/// it does not read.
pub fn reload_config(path: &Path, auth: &crate::auth::SharedAuth, in_force: &SharedSite) -> ConfigReload {
    let read = bursar_config::load(path)
        .map_err(|ds| {
            ds.iter()
                .map(|d| match &d.help {
                    Some(h) => format!("{} ({h})", d.headline()),
                    None => d.headline(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .and_then(|c| {
            bursar_auth::Authenticator::new(&c.auth).map(|a| (a, c)).map_err(|e| format!("{}: {e}", path.display()))
        });
    match read {
        Ok((a, site)) => {
            let n = a.principals();
            if let Ok(mut w) = auth.write() {
                *w = Arc::new(a);
            }
            let restart = match in_force.lock() {
                Ok(mut old) => {
                    let r = old.as_ref().map(|o| o.needs_restart(&site)).unwrap_or_default();
                    if r.is_empty() {
                        *old = Some(site);
                    }
                    r
                }
                Err(_) => Vec::new(),
            };
            tracing::info!(file = %path.display(), principals = n, "configuration reloaded");
            let message = if restart.is_empty() {
                format!("{n} principal(s) in force")
            } else {
                tracing::warn!(file = %path.display(), sections = restart.join(", "), "configuration changes that need a restart");
                format!("{n} principal(s) in force; changed but not taken until a restart: {}", restart.join(", "))
            };
            ConfigReload { ok: true, message }
        }
        Err(message) => {
            tracing::error!(file = %path.display(), error = %message, "configuration reload failed; the previous principals stay in force");
            ConfigReload { ok: false, message }
        }
    }
}

impl Reloader {
    /// Serves reload requests until the channel closes.
    pub async fn run(self, mut rx: mpsc::Receiver<ReloadRequest>) {
        while let Some(first) = rx.recv().await {
            let mut waiting = vec![first];
            while let Ok(more) = rx.try_recv() {
                waiting.push(more);
            }
            let cause = waiting[0].cause;
            if cause == "sighup" {
                crate::systemd::reloading();
            }
            let mut outcome = self.reload(cause).await;
            if let Some((path, auth)) = &self.config {
                let (path, auth, site) = (path.clone(), auth.clone(), self.site.clone());
                let c = tokio::task::spawn_blocking(move || reload_config(&path, &auth, &site)).await.ok();
                if c.as_ref().is_some_and(|c| !c.ok) {
                    outcome.ok = false;
                }
                outcome.config = c;
                if let Ok(mut st) = self.status.write() {
                    st.last = Some(outcome.clone());
                }
            }
            if cause == "sighup" {
                crate::systemd::notify("READY=1");
            }
            for w in waiting {
                if let Some(r) = w.reply {
                    let _ = r.send(outcome.clone());
                }
            }
        }
    }

    async fn reload(&self, cause: &'static str) -> ReloadOutcome {
        let dir = self.dir.clone();
        let loader = self.loader.clone();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || loader(&dir)).await;
        let compile = started.elapsed();
        self.metrics.reload.observe(compile);
        let current = self.status.read().ok().and_then(|s| s.set.as_ref().map(|s| s.digest().to_owned()));
        let mut outcome = ReloadOutcome {
            ok: false,
            status: "failed".into(),
            cause: cause.into(),
            at: wall_time().to_string(),
            digest: current.clone().unwrap_or_default(),
            errors: Vec::new(),
            compile_ms: compile.as_secs_f64() * 1e3,
            config: None,
        };
        match result {
            Ok(Ok(set)) if current.as_deref() == Some(set.digest()) => {
                outcome.ok = true;
                outcome.status = "unchanged".into();
                self.metrics.reloads_unchanged.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(cause, digest = set.digest(), "policy files unchanged");
            }
            Ok(Ok(set)) => {
                let set = Arc::new(set);
                match self.target.swap(set.clone(), cause).await {
                    true => {
                        outcome.ok = true;
                        outcome.status = "loaded".into();
                        outcome.digest = set.digest().to_owned();
                        self.metrics.reloads_ok.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            cause,
                            digest = set.digest(),
                            policies = set.len(),
                            compile_ms = outcome.compile_ms,
                            "policies reloaded"
                        );
                        if let Ok(mut st) = self.status.write() {
                            st.set = Some(set);
                            st.loaded_at = outcome.at.clone();
                        }
                    }
                    false => {
                        outcome.errors.push("the engine is shutting down; the new set was not swapped in".into());
                        self.metrics.reloads_failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(Err(diags)) => {
                outcome.errors = diags.iter().map(|d| d.headline()).collect();
                self.fail(&mut outcome).await;
            }
            Err(e) => {
                outcome.errors.push(format!("the policy compiler crashed: {e}"));
                self.fail(&mut outcome).await;
            }
        }
        if let Ok(mut st) = self.status.write() {
            st.last = Some(outcome.clone());
        }
        outcome
    }

    async fn fail(&self, outcome: &mut ReloadOutcome) {
        self.metrics.reloads_failed.fetch_add(1, Ordering::Relaxed);
        let text = outcome.errors.join("\n");
        for e in &outcome.errors {
            tracing::error!(cause = %outcome.cause, error = %e, "policy reload failed; the previous policies stay in force");
        }
        self.target.failed(text).await;
    }
}

/// What asks for a reload besides the HTTP route: the directory watcher (when `watch` is on) and
/// SIGHUP. Dropping it (or [`Triggers::stop`]) stops both.
pub(crate) struct Triggers {
    _watcher: Option<notify::RecommendedWatcher>,
    hup: tokio::task::JoinHandle<()>,
}

impl Triggers {
    /// Starts the watcher on `dir` (if `watch`) and the SIGHUP listener, both sending on `reload`.
    pub(crate) fn start(
        dir: &Path,
        watch_dir: bool,
        debounce: Duration,
        reload: &mpsc::Sender<ReloadRequest>,
    ) -> Result<Triggers, crate::ServeError> {
        let watcher = if watch_dir {
            Some(watch(dir, debounce, reload.clone()).map_err(|e| crate::ServeError::Io {
                context: format!("watch `{}`", dir.display()),
                message: e.to_string(),
            })?)
        } else {
            None
        };
        let reload = reload.clone();
        let hup = tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(mut s) = signal(SignalKind::hangup()) else { return };
            while s.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading policies");
                if reload.send(ReloadRequest { cause: "sighup", reply: None }).await.is_err() {
                    return;
                }
            }
        });
        Ok(Triggers { _watcher: watcher, hup })
    }

    /// Stops watching and listening.
    pub(crate) fn stop(self) {
        self.hup.abort();
    }
}

/// True for paths whose change should trigger a reload.
pub fn relevant(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("toml" | "wasm" | "wat"))
}

/// Watches `dir` and sends a reload request after `debounce` of quiet following a relevant change.
/// Returns the watcher, which stops watching when dropped.
pub fn watch(
    dir: &Path,
    debounce: Duration,
    reload: mpsc::Sender<ReloadRequest>,
) -> Result<notify::RecommendedWatcher, notify::Error> {
    use notify::event::{AccessKind, AccessMode};
    use notify::{EventKind, RecursiveMode, Watcher};

    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(ev) = res else { return };
        let counts = matches!(
            ev.kind,
            EventKind::Create(_)
                | EventKind::Modify(_)
                | EventKind::Remove(_)
                | EventKind::Access(AccessKind::Close(AccessMode::Write))
        );
        if counts && ev.paths.iter().any(|p| relevant(p)) {
            // A full channel already holds a wake-up: this change is covered by it.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::Recursive)?;
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Wait until the directory has been quiet for `debounce`.
            loop {
                match tokio::time::timeout(debounce, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            if reload.send(ReloadRequest { cause: "watch", reply: None }).await.is_err() {
                return;
            }
        }
    });
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_policy_files_count() {
        assert!(relevant(Path::new("/p/quota.toml")));
        assert!(relevant(Path::new("/p/guest.wasm")));
        assert!(!relevant(Path::new("/p/.quota.toml.swp")));
        assert!(!relevant(Path::new("/p/quota.toml~")));
        assert!(!relevant(Path::new("/p/4913")));
    }
}
