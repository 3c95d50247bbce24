//! The one road from decoded lines to an answer, which every door takes: `POST /v1/events` and
//! `POST /v1/admit` over HTTP, the Unix socket, a person's answer from a terminal or a signed
//! link, single node or cluster.
//!
//! In order: each line is checked against what the caller's credential alone allows (its powers,
//! the jobs its patterns name; [`bursar_auth::Caller::check_input`]) and marked as the caller's
//! (its id namespace, its sender record); the backend is asked whether it can take inputs at all
//! (a full disk, NATS unreachable: [`Refusal::Unavailable`] before anything is charged); the
//! caller's write budget is charged once ([`crate::budget`]; over it, [`Refusal::OverBudget`] and the
//! minute's first refusal kept by the backend); then the backend applies them and answers once they
//! are durable. What needs the engine's state (is this caller an approver of the job, does the job
//! exist) is the engine thread's check ([`crate::gate`]), and the route's power was checked before
//! the body was read ([`crate::auth::require`]): those are the only other places a caller is
//! judged.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bursar_auth::Caller;
use bursar_model::api::{AdmitReply, Rejected};
use bursar_model::{EventKind, Input};
use bursar_session::{Incoming, Origin};

use crate::backend::{Backend, Submitted};
use crate::budget::Budgets;
use crate::metrics::Metrics;
use crate::respond::Refusal;

/// A door's view of the server: the backend behind it and what every door shares.
pub struct Door<B> {
    /// What decides.
    pub backend: Arc<B>,
    /// Who may call, and where 401s are counted.
    pub auth: crate::auth::AuthState,
    /// Every caller's writes this minute.
    pub budgets: Arc<Budgets>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The longest line of a request body or a socket connection.
    pub max_line: usize,
    /// Origins a browser may change things from besides the server's own (`[serve] origins`).
    pub origins: Arc<[String]>,
}

impl<B> Clone for Door<B> {
    fn clone(&self) -> Self {
        Door {
            backend: self.backend.clone(),
            auth: self.auth.clone(),
            budgets: self.budgets.clone(),
            metrics: self.metrics.clone(),
            max_line: self.max_line,
            origins: self.origins.clone(),
        }
    }
}

/// Checks each line against what `caller` may send (the lines it may not are refused, each with
/// why), and marks the others as the caller's: its namespace for their ids and its sender record.
pub fn lines(caller: &Caller, items: Vec<Incoming>) -> (Vec<Incoming>, Vec<Rejected>) {
    let mut ok = Vec::with_capacity(items.len());
    let mut denied = Vec::new();
    let sender = Arc::new(caller.sender());
    let namespace = caller.id_namespace();
    for mut item in items {
        if let Err(d) = caller.check_input(&item.input) {
            denied.push(Rejected { source: None, line: item.line, error: d.message });
            continue;
        }
        if let Some(ns) = &namespace {
            item.namespace(ns);
        }
        item.sender = Some(sender.clone());
        ok.push(item);
    }
    (ok, denied)
}

impl<B: Backend> Door<B> {
    /// Frames and decodes a body of JSON Lines through the session's one decoder: the inputs
    /// (with their 1-based line numbers) and the rejected lines, counted.
    pub fn decode(&self, body: &[u8]) -> (Vec<Incoming>, Vec<Rejected>) {
        let (items, rejected) = bursar_session::decode_body(body, self.max_line, Origin::Producer);
        self.metrics.events_rejected.fetch_add(rejected.len() as u64, Ordering::Relaxed);
        (items, rejected)
    }

    /// [`lines`], counted.
    pub fn lines(&self, caller: &Caller, items: Vec<Incoming>) -> (Vec<Incoming>, Vec<Rejected>) {
        let (ok, denied) = lines(caller, items);
        if !denied.is_empty() {
            self.metrics.events_denied.fetch_add(denied.len() as u64, Ordering::Relaxed);
            tracing::info!(principal = caller.name(), lines = denied.len(), "event lines refused: no power");
        }
        (ok, denied)
    }

    /// Whether the backend can take inputs, then the caller's write budget, charged once for the
    /// whole request (over it: refused whole, nothing applied, the minute's first refusal kept).
    async fn ready(&self, caller: &Arc<Caller>, items: &[Incoming]) -> Result<(), Refusal> {
        if let Some(why) = self.backend.unavailable() {
            // Refused at once rather than queued behind a commit that cannot happen yet.
            return Err(Refusal::Unavailable(format!("{why}; resend later (ids make that safe)")));
        }
        let bytes: usize = items.iter().map(|i| i.raw.len()).sum();
        let Err(over) = self.budgets.charge(caller, items.len() as u64, bytes as u64) else { return Ok(()) };
        tracing::warn!(principal = caller.name(), events = items.len(), bytes, "request refused: write budget spent");
        if over.journal
            && let Some(first) = items.first()
        {
            let reason = over.message.lines().next().unwrap_or("").to_owned();
            self.backend.record_refusal(first.clone(), reason).await;
        }
        Err(over.into())
    }

    /// Sends checked `items` down the road: availability, budget, then the backend, answered
    /// once durable (with `wait`, once applied too, where the backend applies later).
    pub async fn send(
        &self,
        caller: &Arc<Caller>,
        items: Vec<Incoming>,
        wait: Option<Duration>,
    ) -> Result<Submitted, Refusal> {
        self.ready(caller, &items).await?;
        self.backend.submit(items, caller, wait).await
    }

    /// One admission: `item` must be a `job.submitted`; it is checked against the caller's powers,
    /// then previewed (`test_only`: nothing recorded, nothing charged) or sent down the road.
    pub async fn admit(&self, caller: &Arc<Caller>, item: Incoming, test_only: bool) -> Result<AdmitReply, Refusal> {
        let started = Instant::now();
        let is_submission = matches!(&item.input, Input::Event(e) if matches!(e.kind, EventKind::JobSubmitted(_)));
        if !is_submission {
            return Err(Refusal::BadRequest(format!(
                "expected a `job.submitted` event, got `{}`; send other events to /v1/events",
                item.input.type_name()
            )));
        }
        let (mut items, denied) = self.lines(caller, vec![item]);
        if let Some(d) = denied.into_iter().next() {
            return Err(Refusal::Forbidden(d.error));
        }
        let Some(item) = items.pop() else { return Err(Refusal::Internal("no admission to apply".into())) };
        if test_only {
            let r = self.backend.preview(item).await?;
            self.metrics.previews.fetch_add(1, Ordering::Relaxed);
            return Ok(r);
        }
        self.ready(caller, std::slice::from_ref(&item)).await?;
        let r = self.backend.admit(item, caller).await?;
        self.metrics.admissions.fetch_add(1, Ordering::Relaxed);
        if !r.duplicate {
            self.metrics.admit.observe(started.elapsed());
        }
        Ok(r)
    }
}
