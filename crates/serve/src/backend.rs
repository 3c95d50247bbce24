//! The seam every door stands on: what a request may ask of whatever decides — apply inputs,
//! admit or preview a submission, keep a refusal, stream the decisions, show the policies, reload —
//! implemented once by the engine of this process ([`crate::local::Local`]) and once by a cluster
//! instance's front end ([`crate::cluster::ClusterBackend`]).
//!
//! A backend takes inputs that are already decoded, checked against the caller's powers, namespaced
//! and charged to the caller's write budget ([`crate::road`] does that, once, for every door); it
//! answers only once what it was given is durable (the audit log, or the partition's replicated
//! stream), and says why not with a typed [`Refusal`] the doors answer alike.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bursar_auth::Caller;
use bursar_model::api::AdmitReply;
use bursar_session::Incoming;
use tokio::sync::mpsc;

pub use crate::core::{Fate, Outcome};
use crate::reload::{ReloadRequest, SharedStatus};
use crate::respond::Refusal;
use crate::stream::Format;

/// What became of a request's inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// One per input sent, in order.
    pub outcomes: Vec<Outcome>,
    /// With a wait asked for (a cluster's `?wait_ms=`): whether every input was applied in time.
    pub applied: Option<bool>,
}

/// Whatever decides: this process's engine, or a cluster.
pub trait Backend: Send + Sync + 'static {
    /// Why inputs cannot be taken now (the audit log cannot commit, NATS is unreachable), if so:
    /// asked before a request is charged or sent, and by `GET /healthz`.
    fn unavailable(&self) -> Option<String>;

    /// Lines `GET /healthz` adds after its `ok`: what an operator should know that does not stop
    /// the server.
    fn health_notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Applies `items` (checked, namespaced and charged by the road) for `caller`, answering once
    /// they are durable; with `wait`, also waits up to it for them to be applied where applying
    /// comes after durability (a cluster's partition owners).
    fn submit(
        &self,
        items: Vec<Incoming>,
        caller: &Arc<Caller>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Submitted, Refusal>> + Send;

    /// Admits one `job.submitted` (checked, namespaced and charged by the road): its admission
    /// decision once durable, or the decision made the first time for a resent one.
    fn admit(&self, item: Incoming, caller: &Arc<Caller>) -> impl Future<Output = Result<AdmitReply, Refusal>> + Send;

    /// What the submission would be answered now, recording and reserving nothing.
    fn preview(&self, item: Incoming) -> impl Future<Output = Result<AdmitReply, Refusal>> + Send;

    /// Keeps a request refused before the backend saw it (a spent write budget): its first input and
    /// why, where the backend keeps refusals.
    fn record_refusal(&self, item: Incoming, reason: String) -> impl Future<Output = ()> + Send;

    /// The decisions after `after`, in `format`; with `follow`, live ones as they are made.
    fn decisions(&self, after: u64, follow: bool, format: Format) -> Body;

    /// The policy set in force and the last reload.
    fn policy_status(&self) -> &SharedStatus;

    /// The reloader's queue (`POST /v1/reload`).
    fn reloads(&self) -> &mpsc::Sender<ReloadRequest>;

    /// The backend's `/metrics` text (the door adds the write budgets').
    fn metrics(&self) -> impl Future<Output = String> + Send;

    /// When a request would start, in the partition that starts it soonest (`POST
    /// /v1/admit?estimate=true`), from a copy of the state at most a second old; `None` where the
    /// backend cannot say (a cluster instance's front end) or no partition can run it.
    fn estimate(
        &self,
        req: crate::estimate::Request,
    ) -> impl Future<Output = Option<bursar_model::api::PartitionEstimate>> + Send {
        let _ = req;
        std::future::ready(None)
    }
}
