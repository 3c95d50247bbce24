//! The routes every backend serves, written once over [`Backend`]: `POST /v1/events`,
//! `POST /v1/admit`, `GET /v1/decisions`, `GET /v1/policies`, `POST /v1/reload`, `GET /healthz`,
//! `GET /metrics`. Single-node serve and a cluster instance mount the same handlers over their own
//! backend ([`crate::router`]); the bodies are `docs/serve.md`'s.
//!
//! A handler decodes the request, hands its lines to the one road ([`crate::road`]) and turns what
//! came back into the answer; a request that cannot be decoded gets a 400 with the reason and
//! reaches the backend not at all.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bursar_auth::Caller;
use bursar_model::api::{Duplicate, EventsReply, PoliciesView, PolicyFile, PolicyGuest, PolicyInfo, Rejected};
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::backend::{Backend, Fate};
use crate::reload::{PolicyStatus, ReloadRequest};
use crate::respond::{Refusal, error, json, metrics_text};
use crate::road::Door;
use crate::stream::Format;

/// `ok`, or 503 with why the server cannot take events (its audit log cannot commit, it is not
/// connected to NATS). After the `ok`, a `note:` line per thing an operator should know that does not
/// stop the server: an engine snapshot refused at start (the first line stays `ok`, which probes and
/// the Slurm hook read).
pub async fn healthz<B: Backend>(State(door): State<Door<B>>) -> Response {
    if let Some(why) = door.backend.unavailable() {
        return error(StatusCode::SERVICE_UNAVAILABLE, why);
    }
    let mut body = String::from("ok\n");
    for n in door.backend.health_notes() {
        body.push_str(&n);
        body.push('\n');
    }
    (StatusCode::OK, body).into_response()
}

/// `GET /metrics`: the backend's counters and the write budgets'.
pub async fn metrics<B: Backend>(State(door): State<Door<B>>) -> Response {
    let mut text = door.backend.metrics().await;
    door.budgets.render(&mut text);
    metrics_text(text)
}

/// `POST /v1/events` query: `wait_ms=N` waits up to N ms (at most [`MAX_WAIT_MS`]) for every event
/// to be applied, where applying comes after durability (a cluster's partition owners); single-node
/// serve applies before it answers, so there it changes nothing.
#[derive(Debug, Default, Deserialize)]
pub struct EventsQuery {
    wait_ms: Option<u64>,
}

/// The longest `?wait_ms=`.
pub const MAX_WAIT_MS: u64 = 30_000;

fn events_reply(status: StatusCode, error: Option<String>, rejected: Vec<Rejected>) -> Response {
    json(
        status,
        &EventsReply { error, accepted: 0, duplicates: Vec::new(), rejected, decisions: Vec::new(), applied: None },
    )
}

/// `POST /v1/events`: every line its own input, each checked against the caller's powers on its
/// own; the answer says what became of each.
pub async fn events<B: Backend>(
    State(door): State<Door<B>>,
    Extension(caller): Extension<Arc<Caller>>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Response {
    let wait = match q {
        Ok(Query(q)) => q.wait_ms.map(|ms| std::time::Duration::from_millis(ms.min(MAX_WAIT_MS))),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("{e}: `wait_ms` is a number of milliseconds")),
    };
    let (items, mut rejected) = door.decode(&body);
    let decoded = items.len();
    let (items, denied) = door.lines(&caller, items);
    if items.is_empty() && !denied.is_empty() && denied.len() == decoded {
        // Every valid line was one the caller may not send: 403, naming the power and the principal.
        let first = denied[0].error.clone();
        rejected.extend(denied);
        rejected.sort_by_key(|r| r.line);
        return events_reply(StatusCode::FORBIDDEN, Some(first), rejected);
    }
    rejected.extend(denied);
    rejected.sort_by_key(|r| r.line);
    if items.is_empty() {
        let reason = if rejected.is_empty() { "the body holds no event" } else { "no line is a valid event" };
        return events_reply(StatusCode::BAD_REQUEST, Some(reason.to_owned()), rejected);
    }
    let submitted = match door.send(&caller, items, wait).await {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let mut answer = EventsReply {
        error: None,
        accepted: 0,
        duplicates: Vec::new(),
        rejected,
        decisions: Vec::new(),
        applied: submitted.applied,
    };
    let mut denied_all = true;
    let mut unknown_all = true;
    for a in submitted.outcomes {
        match a.fate {
            Fate::Denied(r) => {
                unknown_all &= matches!(r, Refusal::UnknownJob(_));
                answer.rejected.push(Rejected { source: None, line: a.line, error: r.message().to_owned() });
            }
            Fate::Refused(r) => {
                denied_all = false;
                answer.rejected.push(Rejected { source: None, line: a.line, error: format!("refused: {}", r.reason) });
            }
            Fate::Duplicate => {
                denied_all = false;
                answer.duplicates.push(Duplicate { line: a.line, id: a.id });
            }
            Fate::Accepted(decisions) => {
                denied_all = false;
                answer.accepted += 1;
                answer.decisions.extend(decisions);
            }
        }
    }
    answer.rejected.sort_by_key(|r| r.line);
    if denied_all {
        // Every line reached the engine and was refused there for who sent it (403), or because
        // the job it names is unknown (404, when that is every line's reason).
        answer.error = answer.rejected.first().map(|r| r.error.clone());
        let status = if unknown_all { StatusCode::NOT_FOUND } else { StatusCode::FORBIDDEN };
        return json(status, &answer);
    }
    json(StatusCode::OK, &answer)
}

/// Query of `POST /v1/admit`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmitQuery {
    /// Answer what the submission would get now, recording nothing (`sbatch --test-only`).
    #[serde(default)]
    pub test_only: bool,
    /// Add when an allowed (or previewed) job is expected to start (`estimate`), for the answer a
    /// person reads: the Slurm hook's message, the Kubernetes check's.
    #[serde(default)]
    pub estimate: bool,
}

/// What `?estimate=true` asks about a submission: its GPUs, GPU type (none: nothing to estimate),
/// hours and queue, in its region if it names one.
fn estimate_request(item: &bursar_session::Incoming) -> Option<crate::estimate::Request> {
    let bursar_model::Input::Event(e) = &item.input else { return None };
    let bursar_model::EventKind::JobSubmitted(spec) = &e.kind else { return None };
    Some(crate::estimate::Request {
        gpus: spec.gpus,
        gpu_type: spec.gpu_type.clone()?,
        hours: spec.requested_hours,
        // `region = "any"`: the job may run anywhere (cross-region placement); every region answers.
        region: spec.region.clone().filter(|r| !r.eq_ignore_ascii_case("any")),
        queue: spec.queue.clone(),
        dataset: spec.dataset.clone(),
        job_id: Some(spec.id.clone()),
    })
}

/// `POST /v1/admit`: one `job.submitted`, answered with its admission decision once durable.
pub async fn admit<B: Backend>(
    State(door): State<Door<B>>,
    Extension(caller): Extension<Arc<Caller>>,
    q: Result<Query<AdmitQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Response {
    let Ok(Query(q)) = q.map_err(|e| {
        tracing::debug!(error = %e.body_text(), "bad admit query");
    }) else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad query: the parameters of /v1/admit are `test_only=true` and `estimate=true`",
        );
    };
    let (mut items, rejected) = door.decode(&body);
    if let Some(r) = rejected.first() {
        return error(StatusCode::BAD_REQUEST, format!("malformed event: {}", r.error));
    }
    if items.len() != 1 {
        return error(
            StatusCode::BAD_REQUEST,
            format!("expected exactly one job.submitted event, got {}", items.len()),
        );
    }
    let Some(item) = items.pop() else { return error(StatusCode::BAD_REQUEST, "expected one event") };
    let asked = if q.estimate { estimate_request(&item) } else { None };
    match door.admit(&caller, item, q.test_only).await {
        Ok(mut r) => {
            let allowed = r.admission.decision.decision == bursar_model::DecisionKind::Allow;
            if let Some(req) = asked.filter(|_| allowed || r.test_only) {
                r.estimate = door.backend.estimate(req).await;
            }
            json(StatusCode::OK, &r)
        }
        Err(r) => r.into_response(),
    }
}

/// Query of `GET /v1/decisions`.
#[derive(Debug, Deserialize)]
pub struct StreamQuery {
    /// Send decisions with a seq above this.
    after: Option<u64>,
    /// Keep the stream open for live decisions (default true).
    follow: Option<bool>,
    /// `sse` or `jsonl`.
    format: Option<String>,
}

/// What a `GET /v1/decisions` asks for: the seq to start after (`after`, else SSE's
/// `Last-Event-ID`), whether to follow, and the format (`format`, else the `Accept` header); or the
/// refusal that says why not.
fn stream_request(headers: &HeaderMap, q: StreamQuery) -> Result<(u64, bool, Format), Refusal> {
    let accept_sse =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"));
    let format = match q.format.as_deref() {
        Some("sse") => Format::Sse,
        Some("jsonl" | "ndjson") => Format::JsonLines,
        Some(other) => return Err(Refusal::BadRequest(format!("unknown format `{other}`: use `sse` or `jsonl`"))),
        None if accept_sse => Format::Sse,
        None => Format::JsonLines,
    };
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    Ok((q.after.or(last_event_id).unwrap_or(0), q.follow.unwrap_or(true), format))
}

/// `GET /v1/decisions`: the decisions after a cursor, then live ([`crate::stream`]).
pub async fn decisions<B: Backend>(
    State(door): State<Door<B>>,
    headers: HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad query: {}", e.body_text())),
    };
    let (after, follow, format) = match stream_request(&headers, q) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let ctype = match format {
        Format::Sse => "text/event-stream",
        Format::JsonLines => "application/x-ndjson",
    };
    let mut r = Response::new(door.backend.decisions(after, follow, format));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /v1/policies`: the set in force, its files and the last reload.
pub async fn policies<B: Backend>(State(door): State<Door<B>>) -> Response {
    let Ok(status) = door.backend.policy_status().read().map(|s| s.clone()) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "policy status unavailable");
    };
    json(StatusCode::OK, &policies_view(status))
}

/// The `GET /v1/policies` body of `status`.
pub fn policies_view(status: PolicyStatus) -> PoliciesView {
    let mut view = PoliciesView {
        digest: String::new(),
        loaded_at: status.loaded_at,
        policies: Vec::new(),
        files: Vec::new(),
        guests: Vec::new(),
        last_reload: status.last,
    };
    if let Some(set) = &status.set {
        view.digest = set.digest().to_owned();
        view.policies = set
            .policies()
            .iter()
            .map(|p| {
                let m = p.meta();
                PolicyInfo {
                    id: m.id.to_string(),
                    kind: m.kind.to_owned(),
                    mode: m.mode.as_str().to_owned(),
                    description: m.description.clone(),
                    source: m.source.clone(),
                }
            })
            .collect();
        view.files =
            set.files().iter().map(|f| PolicyFile { path: f.path.clone(), digest: f.digest.clone() }).collect();
        view.guests = set
            .guests()
            .iter()
            .map(|g| PolicyGuest { policy: g.policy.clone(), path: g.path.clone(), digest: g.digest.clone() })
            .collect();
    }
    view
}

/// `POST /v1/reload`: compile the policy directory (and reread the configuration file) now.
pub async fn reload<B: Backend>(State(door): State<Door<B>>) -> Response {
    let (tx, rx) = oneshot::channel();
    if door.backend.reloads().send(ReloadRequest { cause: "http", reply: Some(tx) }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down");
    }
    match rx.await {
        Ok(outcome) => {
            let status = if outcome.ok { StatusCode::OK } else { StatusCode::UNPROCESSABLE_ENTITY };
            json(status, &outcome)
        }
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down"),
    }
}
