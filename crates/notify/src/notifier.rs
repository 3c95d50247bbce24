//! [`Notifier`]: the outbox loop. Each pass reads the audit log after the outbox's cursor, raises
//! and resolves notices ([`crate::notice`]), stores them with the new cursor in one transaction, then
//! delivers what its sink has not acknowledged, backing off while the sink is down.
//!
//! Guarantees (`docs/notifications.md`):
//! - **Nothing lost**: a notice is stored before anything is sent, in the same transaction that
//!   moves the cursor past its decision; a notice is marked delivered only after the sink answered
//!   2xx. A crash anywhere leaves either the decision unread (read again after the restart) or its
//!   notice stored and unsent (sent after the restart).
//! - **Nothing repeated across a restart**: the cursor never moves back, and a notice is raised once
//!   per decision (keyed by its seq). The one window left is a crash after the sink's 2xx and
//!   before the outbox recorded it: that notice is sent again, with the same id and
//!   `Idempotency-Key` (Alertmanager merges the repeat into the alert it has).
//!
//! Blocking I/O throughout: `bursar serve` runs [`Notifier::run`] on its own thread.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use bursar_audit::{
    AuditError, AuditLog, Delivered, NoticeRow, Outbox, OutboxCursor, Resolved, StoredDecision, StoredStep,
};
use bursar_model::Timestamp;
use bursar_model::api::{NoticeKind, NoticeMessage, NoticeStatus};

use crate::config::{NotifyConfig, SinkKind};
use crate::notice::{JobFacts, Linker, Open, Resolution, Resolver, raise};
use crate::sink;
use crate::token::LinkKey;

/// Decisions read per pass.
const PAGE: usize = 500;
/// Notices sent per pass.
const SEND_BATCH: usize = 200;

/// The engine stopped: the notifier stops too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the engine stopped")]
pub struct EngineGone;

/// What the notifier asks the engine, implemented by `bursar serve` over its engine queue.
pub trait EngineView: Send {
    /// What the engine knows now about each of `jobs` (`None` for a job it does not know).
    fn facts(&self, jobs: &[String]) -> Result<Vec<Option<JobFacts>>, EngineGone>;

    /// The jobs that wait for a person now: held for an approval, or alerted as idle with their
    /// reclaim standing.
    fn open_jobs(&self) -> Result<Vec<String>, EngineGone>;
}

/// Why the notifier cannot run.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The audit log or the outbox failed.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The configuration names no usable sink.
    #[error("notify: {0}")]
    Config(String),
    /// The engine stopped.
    #[error(transparent)]
    Engine(#[from] EngineGone),
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Decisions read.
    pub decisions: usize,
    /// Notices raised.
    pub raised: usize,
    /// Notices resolved.
    pub resolved: usize,
    /// Deliveries the sink acknowledged.
    pub sent: usize,
    /// Deliveries that failed.
    pub failed: usize,
    /// The log had more than one page to read.
    pub more: bool,
}

/// The outbox loop over one audit file.
pub struct Notifier<E> {
    cfg: NotifyConfig,
    sink: SinkKind,
    key: Arc<LinkKey>,
    log: AuditLog,
    outbox: Outbox,
    engine: E,
    failures: u32,
    next_try: Option<Instant>,
    /// On the first start on an audit log: where the cursor starts (the log's end), stored by the
    /// first pass together with the notices of what already waits for a person.
    first_start: Option<OutboxCursor>,
}

impl<E> std::fmt::Debug for Notifier<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").field("sink", &self.sink).field("failures", &self.failures).finish_non_exhaustive()
    }
}

fn wall() -> Timestamp {
    Timestamp::wall_clock()
}

fn std_duration(d: bursar_model::Duration) -> StdDuration {
    StdDuration::from_millis(u64::try_from(d.millis()).unwrap_or(0).max(1))
}

impl<E: EngineView> Notifier<E> {
    /// Opens the outbox of the audit file `audit` (already created by serve's journal). On the first
    /// start with notices on, its cursor starts at the end of the log: notices are about what is
    /// decided from then on, and about what already waits for a person (a job held for an approval, an
    /// idle job whose reclaim stands), whose notices the first pass raises from their decisions.
    /// Call it before the engine applies anything new.
    pub fn open(cfg: NotifyConfig, audit: &Path, key: Arc<LinkKey>, engine: E) -> Result<Notifier<E>, NotifyError> {
        let sink = cfg.sink().map_err(NotifyError::Config)?;
        let outbox = Outbox::open(audit)?;
        let log = AuditLog::open_read(audit)?;
        let first_start = match outbox.cursor()? {
            Some(_) => None,
            None => {
                let (event_seq, decision_seq) = log.newest_seqs()?;
                Some(OutboxCursor { decision_seq, event_seq })
            }
        };
        tracing::info!(sink = ?sink, first_start = first_start.is_some(), "notifier ready");
        Ok(Notifier { cfg, sink, key, log, outbox, engine, failures: 0, next_try: None, first_start })
    }

    /// The first pass on an audit log: the notices of what waits for a person now, raised from the
    /// decisions that asked (at most the last one per job and kind, before `start`), stored with the
    /// cursor at `start`. A crash before they are stored leaves no cursor: the next start does it again.
    fn first_pass(&mut self, start: OutboxCursor) -> Result<(), NotifyError> {
        let jobs = {
            let mut j = self.engine.open_jobs()?;
            j.sort();
            j.dedup();
            j
        };
        let facts = self.engine.facts(&jobs)?;
        let links = Linker { key: &self.key, base: self.cfg.base_url() };
        let mut raised = Vec::new();
        for (job, f) in jobs.iter().zip(&facts) {
            let Some(f) = f else { continue };
            let asked = |kind: &str| -> Result<Vec<StoredDecision>, NotifyError> {
                let filter = bursar_audit::query::Filter {
                    job: Some(job.clone()),
                    decision: Some(kind.to_owned()),
                    dry_run: Some(false),
                    ..bursar_audit::query::Filter::default()
                };
                Ok(bursar_audit::query::query(&self.log, &filter)?
                    .into_iter()
                    .filter(|d| d.seq <= start.decision_seq)
                    .collect())
            };
            if f.approval.is_some()
                && let Some(d) = asked("require_approval")?.into_iter().rfind(|d| d.admission)
            {
                raised.extend(raise(&d, Some(f), links, self.cfg.info_for));
            }
            if !f.idle.is_empty() {
                let alerts = asked("alert")?;
                for w in &f.idle {
                    let at = Timestamp::parse(&w.alerted).map(|t| t.millis()).ok();
                    if let Some(d) = alerts.iter().rev().find(|d| Some(d.time) == at && d.policies.contains(&w.policy))
                    {
                        raised.extend(raise(d, Some(f), links, self.cfg.info_for));
                    }
                }
            }
        }
        raised.sort_by_key(|n| n.seq);
        raised.dedup_by_key(|n| n.seq);
        self.outbox.advance(start, &raised, &[])?;
        if raised.is_empty() {
            tracing::info!("notifier: first start on this audit log; nothing waits for a person");
        } else {
            tracing::warn!(
                notices = raised.len(),
                "notifier: first start on this audit log; sending the notices of what already waits for a person (approvals, idle jobs about to be reclaimed); earlier reclaims and advice are not sent"
            );
        }
        Ok(())
    }

    /// Runs passes every `poll` until `stop()` is true (checked every 100 ms at most).
    pub fn run(mut self, stop: impl Fn() -> bool) {
        let poll = std_duration(self.cfg.poll);
        let mut first = true;
        while !stop() {
            let pass = self.pass();
            if std::mem::take(&mut first) {
                tracing::info!(outcome = ?pass, "notifier: first pass done");
            }
            match pass {
                Ok(p) if p.more => continue,
                Ok(_) => {}
                Err(NotifyError::Engine(_)) => return,
                Err(e) => tracing::error!(error = %e, "notifier pass failed; retried"),
            }
            let until = Instant::now() + poll;
            while Instant::now() < until {
                if stop() {
                    return;
                }
                std::thread::sleep((until - Instant::now()).min(StdDuration::from_millis(100)));
            }
        }
    }

    /// One pass: read, record, deliver.
    pub fn pass(&mut self) -> Result<Pass, NotifyError> {
        let mut p = self.read()?;
        self.deliver(&mut p)?;
        Ok(p)
    }

    /// Reads the log after the cursor; stores the notices it raises and resolves with the new cursor.
    fn read(&mut self) -> Result<Pass, NotifyError> {
        let mut pass = Pass::default();
        if let Some(start) = self.first_start {
            self.first_pass(start)?;
            self.first_start = None;
        }
        let Some(cursor) = self.outbox.cursor()? else {
            return Err(NotifyError::Config("the outbox has no cursor".into()));
        };
        let (newest_event, _) = self.log.newest_seqs()?;
        let mut decisions = self.log.decisions_since(cursor.decision_seq, PAGE)?;
        let full = decisions.len() == PAGE;
        // A decision committed after `newest_event` was read belongs to a later event: next pass.
        decisions.retain(|d| d.event_seq.is_none_or(|e| e <= newest_event));
        let mut through = newest_event;
        if full && let Some(last) = decisions.last().and_then(|d| d.event_seq) {
            // The last event's decisions may go on in the next page: read them all next time.
            if decisions.iter().any(|d| d.event_seq.is_some_and(|e| e < last)) {
                decisions.retain(|d| d.event_seq.is_none_or(|e| e < last));
                through = last - 1;
            } else {
                through = last;
            }
            pass.more = true;
        }
        through = through.max(cursor.event_seq);
        let steps = self.log.steps_between(cursor.event_seq, through)?;
        pass.decisions = decisions.len();

        let open_rows = self.outbox.open_notices()?;
        let mut expiring: Vec<(i64, i64)> = open_rows.iter().filter_map(|n| n.expires_at.map(|e| (n.seq, e))).collect();
        let mut resolver = Resolver::new(open_rows.iter().filter_map(open_of).collect());

        // What the engine knows about the jobs the new decisions may raise a notice for.
        let mut jobs: Vec<String> = decisions
            .iter()
            .filter(|d| !d.dry_run && (d.decision == "require_approval" || d.decision == "alert"))
            .filter_map(|d| d.job.clone())
            .collect();
        jobs.sort();
        jobs.dedup();
        let facts = self.engine.facts(&jobs)?;
        let fact = |job: &str| jobs.binary_search_by(|j| j.as_str().cmp(job)).ok().and_then(|i| facts.get(i)?.as_ref());

        // The log in order: each event's decisions, then its steps (a step is read once every
        // decision of its event was).
        let links = Linker { key: &self.key, base: self.cfg.base_url() };
        let mut raised = Vec::new();
        let mut resolved: Vec<Resolution> = Vec::new();
        let mut si = 0;
        let flush_steps = |upto: i64, si: &mut usize, resolver: &mut Resolver, resolved: &mut Vec<Resolution>| {
            while let Some(s) = steps.get(*si).filter(|s: &&StoredStep| s.event_seq <= upto) {
                resolver.step(s, resolved);
                *si += 1;
            }
        };
        for d in &decisions {
            if let Some(e) = d.event_seq {
                flush_steps(e - 1, &mut si, &mut resolver, &mut resolved);
            }
            if resolver.decision(d, &mut resolved) {
                continue;
            }
            if let Some(n) = raise(d, d.job.as_deref().and_then(fact), links, self.cfg.info_for) {
                if let Some(e) = n.expires_at {
                    expiring.push((n.seq, e));
                }
                if let Some(kind) = NoticeKind::parse(&n.kind) {
                    resolver.opened(Open {
                        seq: n.seq,
                        job: n.job.clone(),
                        kind,
                        policy: n.policy.clone(),
                        opened_at: n.opened_at,
                    });
                }
                raised.push(n);
            }
        }
        flush_steps(through, &mut si, &mut resolver, &mut resolved);
        let now = wall().millis();
        resolver.expire(&expiring, now, &mut resolved);
        let last_decision = decisions.last().map_or(cursor.decision_seq, |d| d.seq.max(cursor.decision_seq));
        if !pass.more {
            // Caught up: an idle notice whose deadline the engine no longer holds is over.
            let idle_jobs: Vec<String> =
                resolver.open().iter().filter(|o| o.kind == NoticeKind::Idle).filter_map(|o| o.job.clone()).collect();
            if !idle_jobs.is_empty() {
                let now_facts = self.engine.facts(&idle_jobs)?;
                // The engine answers once what it applied is durable, so a decision about one of these
                // jobs made since this pass read the log (a keepalive's, a reclaim) is in the log now.
                // Such a job's notice is left to the next pass, which closes it with that decision's
                // reason instead of "busy again".
                let decided: Vec<String> =
                    self.log.decisions_since(last_decision, PAGE)?.into_iter().filter_map(|d| d.job).collect();
                let holds = |o: &Open| {
                    o.job.as_ref().is_some_and(|j| decided.contains(j))
                        || idle_jobs.iter().zip(&now_facts).any(|(j, f)| {
                            Some(j) == o.job.as_ref()
                                && f.as_ref().is_some_and(|f| {
                                    f.idle.iter().any(|w| {
                                        Some(&w.policy) == o.policy.as_ref()
                                            && Timestamp::parse(&w.alerted).is_ok_and(|t| t.millis() == o.opened_at)
                                    })
                                })
                        })
                };
                resolver.no_longer_idle(holds, now, &mut resolved);
            }
        }
        let to = OutboxCursor { decision_seq: last_decision, event_seq: through };
        pass.raised = raised.len();
        pass.resolved = resolved.len();
        let resolved: Vec<Resolved> =
            resolved.into_iter().map(|r| Resolved { seq: r.seq, at: r.at, resolution: r.how }).collect();
        if to != cursor || !raised.is_empty() || !resolved.is_empty() {
            self.outbox.advance(to, &raised, &resolved)?;
        }
        for n in &raised {
            tracing::debug!(notice = n.seq, kind = %n.kind, job = ?n.job, "notice raised");
        }
        Ok(pass)
    }

    fn backoff(&mut self, error: &sink::SendError) {
        self.failures = self.failures.saturating_add(1);
        let first = self.cfg.retry.first.millis().max(1);
        let wait = first
            .saturating_mul(1i64 << self.failures.saturating_sub(1).min(20))
            .min(self.cfg.retry.max.millis().max(first));
        self.next_try = Some(Instant::now() + StdDuration::from_millis(u64::try_from(wait).unwrap_or(1000)));
        tracing::warn!(error = %error, failures = self.failures, retry_ms = wait, "cannot deliver notices; retrying");
    }

    fn delivered(&mut self, row: &NoticeRow, m: &NoticeMessage, at: Timestamp) -> Result<(), NotifyError> {
        let state = match m.status {
            NoticeStatus::Firing => Delivered::Firing,
            NoticeStatus::Resolved => Delivered::Resolved,
        };
        self.outbox.delivered(row.seq, state, at.millis())?;
        let first = row.delivered == Delivered::Nothing && m.status == NoticeStatus::Firing;
        // The latency from decision to delivery is a first delivery's; a resend (Alertmanager's
        // lease renewed) or a resolution says what it is instead.
        let delivery = match (first, m.status) {
            (true, _) => "first",
            (false, NoticeStatus::Firing) => "resend",
            (false, NoticeStatus::Resolved) => "resolved",
        };
        tracing::info!(
            notice = %m.id,
            kind = m.kind.as_str(),
            status = ?m.status,
            job = ?m.job_id,
            delivery,
            since_decision_ms = first.then(|| at.millis() - row.opened_at),
            "notice delivered"
        );
        Ok(())
    }

    /// Sends what the sink has not acknowledged (and, to Alertmanager, re-sends open notices).
    fn deliver(&mut self, pass: &mut Pass) -> Result<(), NotifyError> {
        if self.next_try.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        let now = wall();
        let resend_before = match self.sink {
            SinkKind::Alertmanager(_) => Some(now.millis() - self.cfg.resend.millis()),
            SinkKind::Webhook(_) => None,
        };
        let rows = self.outbox.to_send(resend_before, SEND_BATCH)?;
        if rows.is_empty() {
            return Ok(());
        }
        let linker = Linker { key: &self.key, base: self.cfg.base_url() };
        let messages: Vec<(NoticeRow, NoticeMessage)> = rows
            .into_iter()
            .filter_map(message_of)
            .map(|(row, mut m)| {
                if self.cfg.links {
                    linker.fill(&mut m);
                } else {
                    m.links.clear();
                }
                (row, m)
            })
            .collect();
        match self.sink.clone() {
            SinkKind::Alertmanager(ep) => {
                let lease = bursar_model::Duration(self.cfg.resend.millis().saturating_mul(4));
                let alerts: Vec<sink::PostableAlert> =
                    messages.iter().flat_map(|(_, m)| sink::alerts(m, now, lease, self.cfg.base_url())).collect();
                match sink::post_alerts(&ep, &alerts) {
                    Ok(()) => {
                        self.failures = 0;
                        self.next_try = None;
                        for (row, m) in &messages {
                            self.delivered(row, m, now)?;
                            pass.sent += 1;
                        }
                    }
                    Err(e) => {
                        for (row, _) in &messages {
                            self.outbox.failed(row.seq)?;
                        }
                        pass.failed += messages.len();
                        self.backoff(&e);
                    }
                }
            }
            SinkKind::Webhook(ep) => {
                'notices: for (row, m) in &messages {
                    // One message per recipient, with only that recipient's links: a message sent
                    // to one approver's address never carries another's.
                    for one in per_recipient(m) {
                        if let Err(e) = sink::post_webhook(&ep, &one) {
                            self.outbox.failed(row.seq)?;
                            pass.failed += 1;
                            self.backoff(&e);
                            break 'notices;
                        }
                    }
                    self.failures = 0;
                    self.next_try = None;
                    self.delivered(row, m, wall())?;
                    pass.sent += 1;
                }
            }
        }
        Ok(())
    }
}

/// A notice as each of its recipients gets it: their name alone in `recipients`, their links alone.
/// A notice for nobody in particular (an alert about no job) is sent as it is.
pub fn per_recipient(m: &NoticeMessage) -> Vec<NoticeMessage> {
    if m.recipients.len() <= 1 {
        let mut one = m.clone();
        if let Some(r) = m.recipients.first() {
            one.links.retain(|l| &l.for_user == r);
        }
        return vec![one];
    }
    m.recipients
        .iter()
        .map(|r| {
            let mut one = m.clone();
            one.recipients = vec![r.clone()];
            one.links.retain(|l| &l.for_user == r);
            one
        })
        .collect()
}

/// The resolution rules' view of a stored open notice.
fn open_of(n: &NoticeRow) -> Option<Open> {
    Some(Open {
        seq: n.seq,
        job: n.job.clone(),
        kind: NoticeKind::parse(&n.kind)?,
        policy: n.policy.clone(),
        opened_at: n.opened_at,
    })
}

/// The message to send for a stored notice: its body with the status and resolution of its row.
fn message_of(row: NoticeRow) -> Option<(NoticeRow, NoticeMessage)> {
    let mut m: NoticeMessage = match serde_json::from_str(&row.body) {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(notice = row.seq, error = %e, "a stored notice cannot be read; skipped");
            return None;
        }
    };
    if let Some(at) = row.resolved_at {
        m.status = NoticeStatus::Resolved;
        m.resolved_at = Some(Timestamp(at).to_string());
        m.resolution = row.resolution.clone();
    }
    Some((row, m))
}
