//! The enforcer's loop, the same for every scheduler: follow `GET /v1/decisions?after=CURSOR`, hand
//! each decision to the scheduler's [`Executor`], post the action record it returns, and only then move
//! the persisted cursor past the decision.
//!
//! After a crash the agent therefore redoes at most the decisions whose record was not yet durable;
//! the executor looks at the job's current state first (so repeating an action does nothing twice)
//! and serve drops a record it already has (same id). Decisions that ask nothing are cheap to redo:
//! their cursor is persisted at most once a second. A broken stream is reopened with a back-off
//! (200 ms doubling to 10 s); only a state-file error stops the loop, since a retry would not fix it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bursar_model::api::Sequenced;
use bursar_model::{DecisionKind, Input, Timestamp};
use serde::{Deserialize, Serialize};

use crate::record::Record;
use crate::server::Server;
use crate::state;
use crate::{Error, Result};

/// An enforcer's persisted state: the last decision handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Format version.
    #[serde(default)]
    pub version: u32,
    /// The `seq` of the last decision fully handled (action done and recorded).
    pub cursor: u64,
}

/// What a scheduler's enforcer does with one decision.
pub trait Executor {
    /// Carries out what `decision` asks of the scheduler, if anything, and returns the record of it
    /// (done, failed after retries, or skipped with the reason). `None`: the decision asks nothing.
    fn handle(&mut self, decision: &Sequenced) -> Option<Record>;
}

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// serve.
    pub server: Server,
    /// The state file (the cursor).
    pub state: PathBuf,
    /// Cursor to start from when there is no state file yet.
    pub start_after: u64,
    /// The prefix of the action records' ids (`enforce` for Slurm, `kube` for Kubernetes).
    pub id_prefix: String,
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowReport {
    /// Decisions read.
    pub decisions: u64,
    /// Actions recorded (done, failed or skipped) for the first time.
    pub recorded: u64,
    /// Actions whose record serve already had (the decision was handled before a restart).
    pub already_recorded: u64,
    /// The cursor at the end.
    pub cursor: u64,
}

/// Handles the decisions of one connection to the stream; returns when the stream ends or breaks.
fn follow_once(
    cfg: &FollowConfig,
    exec: &mut dyn Executor,
    st: &mut Cursor,
    follow: bool,
    report: &mut FollowReport,
) -> Result<()> {
    let mut stream = cfg.server.decisions(st.cursor, follow)?;
    let mut saved = Instant::now();
    let mut dirty = false;
    let result = loop {
        let d = match stream.next_decision() {
            Ok(Some(d)) => d,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        report.decisions += 1;
        if d.decision.decision == DecisionKind::Alert && !d.decision.dry_run {
            tracing::info!(job = d.decision.job_id.as_deref().unwrap_or("-"), reason = %d.decision.reason, "alert");
        }
        if let Some(record) = exec.handle(&d) {
            tracing::info!(
                job = %record.job_id,
                decision = %record.decision,
                action = %record.action,
                outcome = record.outcome.as_str(),
                detail = %record.detail,
                "enforced"
            );
            let action = record.to_action(&cfg.id_prefix, Timestamp::wall_clock());
            // Not recorded, not done: the cursor stays before this decision and it is redone.
            match cfg.server.post(&[Input::Action(action)]) {
                Ok(p) if p.duplicates > 0 => report.already_recorded += 1,
                Ok(_) => report.recorded += 1,
                Err(e) => break Err(e),
            }
            st.cursor = d.seq;
            state::save(&cfg.state, st)?;
            saved = Instant::now();
            dirty = false;
        } else {
            st.cursor = d.seq;
            dirty = true;
            if saved.elapsed() >= Duration::from_secs(1) {
                state::save(&cfg.state, st)?;
                saved = Instant::now();
                dirty = false;
            }
        }
        report.cursor = st.cursor;
    };
    if dirty {
        state::save(&cfg.state, st)?;
    }
    result
}

/// Follows the decision stream forever (reconnecting with a back-off), or with `once` until it has
/// caught up. Returns on a state-file error, or with `once` on any error.
pub fn run(cfg: &FollowConfig, exec: &mut dyn Executor, once: bool) -> Result<FollowReport> {
    let mut st: Cursor = state::load(&cfg.state)?;
    if st.version == 0 {
        st = Cursor { version: 1, cursor: st.cursor.max(cfg.start_after) };
    }
    let mut report = FollowReport { cursor: st.cursor, ..FollowReport::default() };
    tracing::info!(state = %cfg.state.display(), cursor = st.cursor, "enforcer starting");
    let mut backoff = Duration::from_millis(200);
    loop {
        match follow_once(cfg, exec, &mut st, !once, &mut report) {
            Ok(()) if once => return Ok(report),
            Ok(()) => backoff = Duration::from_millis(200),
            Err(e @ Error::State { .. }) => return Err(e),
            Err(e) if once => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, cursor = st.cursor, "decision stream broke; reconnecting");
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
        std::thread::sleep(backoff);
    }
}
