//! The engine of this process as a [`Backend`]: the handle every door of single-node serve holds
//! (the engine thread's queue, the audit log's health, the decision feed) and what the local-only
//! routes read (the audit log, the pool views' cache, the prices, the action links' key).
//!
//! Inputs go to the engine thread as [`Work::Inputs`] and are answered once the audit log has
//! committed them. When the log cannot commit (a full disk), a request waiting for its commit is
//! answered 503 as soon as that is known (within [`COMMIT_WATCH`] of the failed commit), not when
//! space returns: the inputs are applied and will be committed once it does, so resending them (ids
//! make that safe) tells the sender what became of them.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use bursar_auth::Caller;
use bursar_model::api::{AdmitReply, Sequenced};
use bursar_model::{EventKind, Input};
use bursar_session::{Incoming, RefusedBy};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::backend::{Backend, Fate, Submitted};
use crate::core::{View, Work};
use crate::metrics::Metrics;
use crate::reload::{ReloadRequest, SharedStatus};
use crate::respond::Refusal;
use crate::stream::Format;

/// How often a request waiting for its commit looks whether the audit log can commit at all.
pub const COMMIT_WATCH: Duration = Duration::from_millis(50);

/// This process's engine, and what its routes read beside it.
pub struct Local {
    /// The engine thread's queue.
    pub engine: mpsc::Sender<Work>,
    /// The reloader's queue.
    pub reload: mpsc::Sender<ReloadRequest>,
    /// The live decision feed.
    pub decisions: broadcast::Sender<Arc<Sequenced>>,
    /// Policy status for `/v1/policies`.
    pub status: SharedStatus,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The audit database, for readers.
    pub audit: PathBuf,
    /// Becomes true at shutdown (ends the streams).
    pub shutdown: watch::Receiver<bool>,
    /// Whether the audit log commits.
    pub journal: Arc<bursar_audit::Health>,
    /// Lines `GET /healthz` adds after its `ok`: why the start did not restore the newest engine
    /// snapshot ([`crate::core::Recovered::health_notes`]).
    pub health_notes: Arc<[String]>,
    /// Rates for the report routes (`--prices`): the billing comparison and the cost per unit.
    pub prices: Option<Arc<bursar_report::Prices>>,
    /// The site's `[[capacity]]` rows (where no scheduler's agent reports).
    pub capacity: Arc<[bursar_model::CapacityRow]>,
    /// The action links' key, when notices are on (`serve --notify`).
    pub links: Option<Arc<bursar_notify::LinkKey>>,
    /// The last copy of the engine's state for the pool views, and when it was taken
    /// ([`crate::pool::PoolInput`]).
    pub pool_input: crate::pool::PoolInputCache,
    /// What the binary is.
    pub build: Arc<crate::BuildInfo>,
    /// Why the utilisation source sent no sample for a job at its last poll; `None` without a source.
    pub skips: Option<crate::utilisation::SharedSkips>,
}

/// How long a copy of the engine's state for the pool views is reused: requests in a burst share
/// one copy, so the engine thread makes at most one a second whatever the number of readers.
const POOL_INPUT_REUSE: std::time::Duration = std::time::Duration::from_secs(1);

impl Local {
    /// What the pool and pending views (and an admission's estimate) are built from: a copy of the
    /// engine's state at most a second old, or a new one.
    pub async fn pool_input(&self) -> Result<Arc<crate::pool::PoolInput>, Refusal> {
        let mut cached = self.pool_input.lock().await;
        if let Some((at, input)) = cached.as_ref()
            && at.elapsed() < POOL_INPUT_REUSE
        {
            return Ok(input.clone());
        }
        let input = self.read(|v| crate::pool::PoolInput::of(v.engine)).await?;
        let input = Arc::new(input.configured(&self.capacity));
        *cached = Some((std::time::Instant::now(), input.clone()));
        Ok(input)
    }

    /// Why the audit log cannot commit, as a sentence, if it cannot.
    pub fn journal_failing(&self) -> Option<String> {
        self.journal.failing().map(|f| {
            format!(
                "the audit log cannot commit since {} ({} attempts): {}; retrying, nothing is lost",
                bursar_model::Timestamp(f.since_ms),
                f.attempts,
                f.error
            )
        })
    }

    /// `f` run on the engine thread ([`crate::core::read`]), or why not.
    pub async fn read<T: Send + 'static>(&self, f: impl FnOnce(View<'_>) -> T + Send + 'static) -> Result<T, Refusal> {
        crate::core::read(&self.engine, f).await.ok_or_else(Refusal::engine_gone)
    }

    /// `fut`'s output, or why the audit log cannot commit as soon as it cannot (looked at every
    /// [`COMMIT_WATCH`]): a request never waits on a commit that cannot happen.
    async fn or_failing<F: std::future::Future>(&self, fut: F) -> Result<F::Output, String> {
        let mut fut = std::pin::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return Ok(out),
                () = tokio::time::sleep(COMMIT_WATCH) => {
                    if let Some(why) = self.journal_failing() {
                        return Err(why);
                    }
                }
            }
        }
    }

    /// The answer to a submission whose event id was seen before: the admission decision logged the
    /// first time, or a conflict that names why there is none.
    async fn resent_admission(&self, job_id: String, event_id: String) -> Result<AdmitReply, Refusal> {
        let audit = self.audit.clone();
        let found = tokio::task::spawn_blocking(move || {
            let log = bursar_audit::AuditLog::open_read(&audit)?;
            let admission = log.admission_of(&job_id, &event_id)?;
            let event = if admission.is_none() { log.event_by_id(&event_id)? } else { None };
            Ok::<_, bursar_audit::AuditError>((admission, event, job_id, event_id))
        })
        .await
        .map_err(|e| Refusal::Internal(e.to_string()))?
        .map_err(|e| Refusal::Internal(e.to_string()))?;
        match found {
            (Some(stored), _, _, _) => {
                let decision = stored
                    .to_decision()
                    .map_err(|e| Refusal::Internal(format!("the logged admission is unreadable: {e}")))?;
                Ok(AdmitReply {
                    admission: Sequenced { seq: u64::try_from(stored.seq).unwrap_or(0), decision },
                    duplicate: true,
                    other_decisions: Vec::new(),
                    test_only: false,
                    estimate: None,
                })
            }
            (None, Some(ev), job_id, event_id) if ev.job.as_deref() != Some(job_id.as_str()) => {
                Err(Refusal::Conflict(format!(
                    "event id `{event_id}` was already used for {}; a new submission needs a new event id",
                    match ev.job {
                        Some(j) => format!("job `{j}`"),
                        None => format!("a `{}` event", ev.kind),
                    }
                )))
            }
            (None, Some(_), job_id, event_id) => Err(Refusal::Conflict(format!(
                "event `{event_id}` for job `{job_id}` was already applied, but it holds no admission decision (it was not a new submission of this job)"
            ))),
            (None, None, _, event_id) => Err(Refusal::Conflict(format!(
                "event id `{event_id}` was already processed, but it is no longer in the audit log (pruned); a new submission needs a new event id"
            ))),
        }
    }
}

impl Backend for Local {
    async fn estimate(&self, req: crate::estimate::Request) -> Option<bursar_model::api::PartitionEstimate> {
        let input = self.pool_input().await.ok()?;
        let answer =
            tokio::task::spawn_blocking(move || crate::estimate::answer(input.estimate_input(), &req)).await.ok()?;
        answer.partitions.into_iter().find(|p| p.start.is_some())
    }

    fn unavailable(&self) -> Option<String> {
        self.journal_failing()
    }

    fn health_notes(&self) -> Vec<String> {
        self.health_notes.to_vec()
    }

    async fn submit(
        &self,
        items: Vec<Incoming>,
        caller: &Arc<Caller>,
        _wait: Option<Duration>,
    ) -> Result<Submitted, Refusal> {
        let (tx, rx) = oneshot::channel();
        let caller = Some(caller.clone());
        let not_durable = |why: String| {
            Refusal::Unavailable(format!(
                "{why}: this request may have been applied but is not durable yet; resend it later (ids make that safe) to learn what became of it"
            ))
        };
        match self.or_failing(self.engine.send(Work::Inputs { items, caller, reply: tx })).await {
            Err(why) => return Err(not_durable(why)),
            Ok(Err(_)) => return Err(Refusal::engine_gone()),
            Ok(Ok(())) => {}
        }
        match self.or_failing(rx).await {
            Err(why) => Err(not_durable(why)),
            Ok(Ok(Ok(outcomes))) => Ok(Submitted { outcomes, applied: None }),
            Ok(Ok(Err(e))) => Err(Refusal::Internal(e)),
            Ok(Err(_)) => Err(Refusal::Unavailable(
                "the engine stopped before the events were durable; resend them (ids make this safe)".into(),
            )),
        }
    }

    async fn admit(&self, item: Incoming, caller: &Arc<Caller>) -> Result<AdmitReply, Refusal> {
        let job_id = match &item.input {
            Input::Event(e) => match &e.kind {
                EventKind::JobSubmitted(spec) => spec.id.clone(),
                _ => String::new(),
            },
            _ => String::new(),
        };
        let event_id = item.input.id().into_owned();
        let submitted = self.submit(vec![item], caller, None).await?;
        let Some(a) = submitted.outcomes.into_iter().next() else {
            return Err(Refusal::Internal("the engine returned no outcome".into()));
        };
        let mut decisions = match a.fate {
            Fate::Accepted(d) => d,
            Fate::Denied(r) => return Err(r),
            // Never a decision: a deny with `admission: true` for a running job's id would be an
            // `scancel` of that job.
            Fate::Refused(r) => {
                return Err(match r.by {
                    RefusedBy::Clock => Refusal::Clock(r.reason),
                    RefusedBy::Engine => Refusal::Conflict(r.reason),
                });
            }
            // A resent submission (the producer retried after a timeout or a crash): answer with the
            // decision made the first time.
            Fate::Duplicate => return self.resent_admission(job_id, event_id).await,
        };
        let Some(pos) = decisions.iter().position(|d| d.decision.admission && d.decision.event_id == a.id) else {
            return Err(Refusal::Internal("the engine made no admission decision".into()));
        };
        let admission = decisions.remove(pos);
        Ok(AdmitReply { admission, duplicate: false, other_decisions: decisions, test_only: false, estimate: None })
    }

    async fn preview(&self, item: Incoming) -> Result<AdmitReply, Refusal> {
        let Input::Event(event) = item.input else {
            return Err(Refusal::BadRequest("expected a `job.submitted` event".into()));
        };
        let (tx, rx) = oneshot::channel();
        if self.engine.send(Work::Preview { event: Box::new(event), raw: item.raw, reply: tx }).await.is_err() {
            return Err(Refusal::engine_gone());
        }
        let decisions = match rx.await {
            Ok(Ok(d)) => d,
            Ok(Err(why)) => return Err(Refusal::Conflict(why)),
            Err(_) => return Err(Refusal::Unavailable("the engine stopped before it answered".into())),
        };
        let mut decisions: Vec<Sequenced> =
            decisions.into_iter().map(|decision| Sequenced { seq: 0, decision }).collect();
        let Some(pos) = decisions.iter().position(|d| d.decision.admission) else {
            return Err(Refusal::Internal("the engine made no admission decision".into()));
        };
        let admission = decisions.remove(pos);
        Ok(AdmitReply { admission, duplicate: false, other_decisions: decisions, test_only: true, estimate: None })
    }

    async fn record_refusal(&self, item: Incoming, reason: String) {
        let _ = self.engine.send(Work::Refusal { item: Box::new(item), reason }).await;
    }

    fn decisions(&self, after: u64, follow: bool, format: Format) -> Body {
        crate::stream::body(crate::stream::Stream {
            after,
            follow,
            format,
            audit: self.audit.clone(),
            live: self.decisions.subscribe(),
            shutdown: self.shutdown.clone(),
            metrics: self.metrics.clone(),
        })
    }

    fn policy_status(&self) -> &SharedStatus {
        &self.status
    }

    fn reloads(&self) -> &mpsc::Sender<ReloadRequest> {
        &self.reload
    }

    async fn metrics(&self) -> String {
        // The live jobs are counted by walking the job table: on the engine thread, once per scrape.
        let counted = tokio::time::timeout(
            Duration::from_secs(5),
            crate::core::read(&self.engine, |v| {
                let state = v.engine.state();
                let unstopped = state
                    .jobs()
                    .filter(|(_, j)| j.phase().is_live() && j.runs().is_some_and(|r| r.reclaim_failed.get().is_some()))
                    .count() as u64;
                (state.live_jobs() as u64, unstopped)
            }),
        )
        .await;
        let mut unstopped = None;
        if let Ok(Some((live, u))) = counted {
            self.metrics.live_jobs.store(live, Ordering::Relaxed);
            unstopped = Some(u);
        }
        let mut text = self.metrics.render();
        if let Some(u) = unstopped {
            let _ = write!(
                text,
                "# HELP bursar_reclaims_not_carried_out Live jobs bursar reclaimed and the scheduler did not stop (action.failed): they still run and count.\n\
                 # TYPE bursar_reclaims_not_carried_out gauge\nbursar_reclaims_not_carried_out {u}\n"
            );
        }
        // The audit writer's own totals: a transaction holds every batch that was queued when it began,
        // so these (not `bursar_audit_commit_seconds`, which is per batch) say how many fsyncs there are.
        let t = self.journal.totals();
        let _ = write!(
            text,
            "# HELP bursar_audit_transactions_total Audit-log transactions committed (each holds the batches queued when it began).\n\
             # TYPE bursar_audit_transactions_total counter\nbursar_audit_transactions_total {}\n\
             # HELP bursar_audit_transaction_records_total Records (one per input) in those transactions.\n\
             # TYPE bursar_audit_transaction_records_total counter\nbursar_audit_transaction_records_total {}\n\
             # HELP bursar_audit_writer_busy_seconds_total Time the audit writer spent writing and committing transactions.\n\
             # TYPE bursar_audit_writer_busy_seconds_total counter\nbursar_audit_writer_busy_seconds_total {:.6}\n\
             # HELP bursar_audit_checkpoints_total WAL checkpoints, by who ran them: the checkpoint thread, or the writer itself (the last pages after the thread's, or all of them when the thread fell behind).\n\
             # TYPE bursar_audit_checkpoints_total counter\nbursar_audit_checkpoints_total{{by=\"thread\"}} {}\nbursar_audit_checkpoints_total{{by=\"writer\"}} {}\n\
             # HELP bursar_audit_checkpoint_failures_total WAL checkpoints that failed (the pages stay in the WAL; the next checkpoint retries).\n\
             # TYPE bursar_audit_checkpoint_failures_total counter\nbursar_audit_checkpoint_failures_total {}\n",
            t.transactions,
            t.records,
            t.busy_micros as f64 / 1e6,
            t.checkpoints,
            t.inline_checkpoints,
            t.checkpoint_failures
        );
        // What an alert needs to see without probing /healthz: the journal failing, and a last reload
        // that could not take the files (the set and principals in force are older than them).
        let (policies_failed, config_failed) = self
            .status
            .read()
            .ok()
            // Each part on its own: `ok` is false when either failed, and a typo in the configuration
            // must not raise the policy alert (issue 45).
            .and_then(|s| s.last.as_ref().map(|l| (l.status == "failed", l.config.as_ref().is_some_and(|c| !c.ok))))
            .unwrap_or_default();
        let _ = write!(
            text,
            "# HELP bursar_audit_commit_failing 1 while the audit log cannot commit (GET /healthz answers 503 meanwhile), else 0.\n\
             # TYPE bursar_audit_commit_failing gauge\nbursar_audit_commit_failing {}\n\
             # HELP bursar_last_reload_failed 1 when the last reload could not take the policy directory (part=\"policies\") or the configuration file (part=\"config\"): what is in force is older than the files.\n\
             # TYPE bursar_last_reload_failed gauge\nbursar_last_reload_failed{{part=\"policies\"}} {}\nbursar_last_reload_failed{{part=\"config\"}} {}\n",
            u8::from(self.journal_failing().is_some()),
            u8::from(policies_failed),
            u8::from(config_failed),
        );
        let label = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = write!(
            text,
            "# HELP bursar_build_info The binary: version, commit and what it was built with (always 1).\n\
             # TYPE bursar_build_info gauge\nbursar_build_info{{version=\"{}\",commit=\"{}\",features=\"{}\"}} 1\n",
            label(self.build.version),
            label(self.build.commit),
            label(&self.build.features)
        );
        let (digest, loaded_at) = self
            .status
            .read()
            .ok()
            .map(|s| (s.set.as_ref().map(|x| x.digest().to_owned()).unwrap_or_default(), s.loaded_at.clone()))
            .unwrap_or_default();
        let loaded_s = bursar_model::Timestamp::parse(&loaded_at).map(|t| t.millis() as f64 / 1e3).unwrap_or(0.0);
        let _ = write!(
            text,
            "# HELP bursar_policy_set_info The policy set in force, by digest (always 1).\n\
             # TYPE bursar_policy_set_info gauge\nbursar_policy_set_info{{digest=\"{}\"}} 1\n\
             # HELP bursar_policy_set_loaded_timestamp_seconds When the set in force was loaded (Unix time).\n\
             # TYPE bursar_policy_set_loaded_timestamp_seconds gauge\nbursar_policy_set_loaded_timestamp_seconds {loaded_s:.3}\n",
            label(&digest)
        );
        // Failures of policies that can fail (WebAssembly guests: deadline, fuel, memory cap, trap, bad
        // output), by policy, from the set in force.
        let set = self.status.read().ok().and_then(|s| s.set.clone());
        text.push_str(
            "# HELP bursar_policy_failures_total Policy calls that failed (WebAssembly: deadline, fuel, memory, trap, bad output) and took the policy's on_error outcome.\n# TYPE bursar_policy_failures_total counter\n",
        );
        if let Some(set) = set {
            for p in set.policies().iter().filter(|p| p.meta().kind == "wasm") {
                let id = p.meta().id.replace('\\', "\\\\").replace('"', "\\\"");
                text.push_str(&format!("bursar_policy_failures_total{{policy=\"{id}\"}} {}\n", p.failures()));
            }
        }
        text
    }
}
