//! The HTTP API: routes, request decoding, the bearer-token check and the answers.
//!
//! Handlers never touch engine state: they decode and validate the request, send [`Work`] to the
//! engine thread (waiting when its queue is full: back-pressure) and turn the reply into JSON. A
//! request that cannot be decoded gets a 400 with the reason and reaches the engine not at all.
//!
//! Routes: `POST /v1/events`, `POST /v1/admit`, `GET /v1/decisions`, `GET /v1/jobs/{id}`,
//! `GET /v1/projects/{name}`, `GET /v1/policies`, `POST /v1/reload`, `POST /v1/snapshot`,
//! `GET /healthz`, `GET /metrics`, `GET /v1/report` and `GET /report` (the `bursar report` JSON and
//! HTML, see `docs/reports.md`). See `docs/serve.md` for the bodies.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bursar_model::{EventKind, decode_event};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::core::{Applied, Incoming, Sequenced, TICK_PREFIX, Work, with_seq};
use crate::metrics::Metrics;
use crate::reload::{ReloadRequest, SharedStatus};
use crate::store::Store;
use crate::stream::{self, Format};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
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
    /// The bearer token every route but `/healthz` requires, if set.
    pub token: Option<Arc<str>>,
    /// Becomes true at shutdown (ends the streams).
    pub shutdown: watch::Receiver<bool>,
}

/// The router with every route, the body limit and the token check.
pub fn router(state: AppState, max_body: usize) -> Router {
    let api = Router::new()
        .route("/v1/events", post(events))
        .route("/v1/admit", post(admit))
        .route("/v1/decisions", get(decisions))
        .route("/v1/jobs/{id}", get(job))
        .route("/v1/projects/{name}", get(project))
        .route("/v1/policies", get(policies))
        .route("/v1/reload", post(reload))
        .route("/v1/snapshot", post(snapshot))
        .route("/metrics", get(metrics))
        .route("/v1/report", get(report_json))
        .route("/report", get(report_html))
        .layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    reply(status, &json!({ "error": message.into() }))
}

/// A JSON answer.
fn reply(status: StatusCode, v: &impl serde::Serialize) -> Response {
    match serde_json::to_string(v) {
        Ok(body) => json_response(status, body),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such route; see docs/serve.md for the API")
}

/// Constant-time comparison, so the token cannot be guessed byte by byte from response times.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = &st.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|g| same(g.as_bytes(), token.as_bytes())) {
            let mut r = error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(req).await
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn metrics(State(st): State<AppState>) -> Response {
    let mut text = st.metrics.render();
    // Failures of policies that can fail (WebAssembly guests: deadline, fuel, memory cap, trap, bad
    // output), by policy, from the set in force.
    let set = st.status.read().ok().and_then(|s| s.set.clone());
    text.push_str(
        "# HELP bursar_policy_failures_total Policy calls that failed (WebAssembly: deadline, fuel, memory, trap, bad output) and took the policy's on_error outcome.\n# TYPE bursar_policy_failures_total counter\n",
    );
    if let Some(set) = set {
        for p in set.policies().iter().filter(|p| p.meta().kind == "wasm") {
            let id = p.meta().id.replace('\\', "\\\\").replace('"', "\\\"");
            text.push_str(&format!("bursar_policy_failures_total{{policy=\"{id}\"}} {}\n", p.failures()));
        }
    }
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    r
}

/// Decodes a request body of JSON Lines: the events (with their 1-based line numbers), and the
/// rejected lines as `{"line": N, "reason": "…"}`. Blank lines are skipped; a body that is not UTF-8
/// is refused whole. This is the only parser of request bodies (fuzzed by `fuzz/fuzz_targets/serve_body.rs`).
pub fn decode_body(body: &[u8]) -> Result<(Vec<Incoming>, Vec<Value>), String> {
    let text =
        std::str::from_utf8(body).map_err(|e| format!("the body is not UTF-8 text (byte {})", e.valid_up_to()))?;
    let mut ok = Vec::new();
    let mut rejected = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        match decode_event(line) {
            Ok(event) if event.id.starts_with(TICK_PREFIX) => rejected.push(json!({
                "line": i + 1,
                "reason": format!("event ids starting with `{TICK_PREFIX}` are reserved for bursar's own clock"),
            })),
            Ok(event) => ok.push(Incoming { line: i + 1, raw: line.to_owned(), event }),
            Err(e) => rejected.push(json!({ "line": i + 1, "reason": e.to_string() })),
        }
    }
    Ok((ok, rejected))
}

async fn submit(st: &AppState, items: Vec<Incoming>) -> Result<Vec<Applied>, Response> {
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Events { items, reply: tx }).await.is_err() {
        return Err(error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down"));
    }
    match rx.await {
        Ok(Ok(applied)) => Ok(applied),
        Ok(Err(e)) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e)),
        Err(_) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine stopped before the events were durable; resend them (ids make this safe)",
        )),
    }
}

async fn events(State(st): State<AppState>, body: Bytes) -> Response {
    let (items, rejected) = match decode_body(&body) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    st.metrics.events_rejected.fetch_add(rejected.len() as u64, Ordering::Relaxed);
    if items.is_empty() {
        let reason = if rejected.is_empty() { "the body holds no event" } else { "no line is a valid event" };
        return reply(
            StatusCode::BAD_REQUEST,
            &json!({ "error": reason, "accepted": 0, "duplicates": [], "rejected": rejected, "decisions": [] }),
        );
    }
    let applied = match submit(&st, items).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let accepted = applied.iter().filter(|a| !a.duplicate).count();
    let duplicates: Vec<Value> =
        applied.iter().filter(|a| a.duplicate).map(|a| json!({ "line": a.line, "id": a.event_id })).collect();
    let mut out = String::with_capacity(256);
    out.push_str(&format!(
        r#"{{"accepted":{accepted},"duplicates":{},"rejected":{},"decisions":["#,
        serde_json::to_string(&duplicates).unwrap_or_else(|_| "[]".into()),
        serde_json::to_string(&rejected).unwrap_or_else(|_| "[]".into()),
    ));
    let mut first = true;
    for d in applied.iter().flat_map(|a| &a.decisions) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&d.to_json());
    }
    out.push_str("]}");
    json_response(StatusCode::OK, out)
}

async fn admit(State(st): State<AppState>, body: Bytes) -> Response {
    let started = Instant::now();
    let (mut items, rejected) = match decode_body(&body) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if let Some(r) = rejected.first() {
        st.metrics.events_rejected.fetch_add(1, Ordering::Relaxed);
        let reason = r.get("reason").and_then(Value::as_str).unwrap_or("malformed event");
        return error(StatusCode::BAD_REQUEST, format!("malformed event: {reason}"));
    }
    if items.len() != 1 {
        return error(
            StatusCode::BAD_REQUEST,
            format!("expected exactly one job.submitted event, got {}", items.len()),
        );
    }
    let Some(item) = items.pop() else { return error(StatusCode::BAD_REQUEST, "expected one event") };
    let EventKind::JobSubmitted(spec) = &item.event.kind else {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "expected a `job.submitted` event, got `{}`; send other events to /v1/events",
                item.event.kind.type_name()
            ),
        );
    };
    let job_id = spec.id.clone();
    let event_id = item.event.id.clone();
    let applied = match submit(&st, vec![item]).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    st.metrics.admissions.fetch_add(1, Ordering::Relaxed);
    let Some(a) = applied.into_iter().next() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine returned no outcome");
    };
    if a.duplicate {
        // A resent submission (the producer retried after a timeout or a crash): answer with the
        // decision made the first time.
        let audit = st.audit.clone();
        let found = tokio::task::spawn_blocking(move || {
            Store::open_read(&audit).and_then(|s| s.admission_of(&job_id, &event_id))
        })
        .await;
        return match found {
            Ok(Ok(Some((seq, json)))) => {
                let body = with_seq(seq, &json);
                let body = match body.strip_suffix('}') {
                    Some(b) => format!("{b},\"duplicate\":true}}"),
                    None => body,
                };
                json_response(StatusCode::OK, body)
            }
            Ok(Ok(None)) => error(
                StatusCode::CONFLICT,
                "this event id was already processed, but its admission decision is not in the audit log (it may have been pruned)",
            ),
            Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.0),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
    }
    let mut decisions = a.decisions;
    let Some(pos) = decisions.iter().position(|d| d.decision.admission && d.decision.event_id == a.event_id) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine made no admission decision");
    };
    let main = decisions.remove(pos);
    let mut body = main.to_json();
    if !decisions.is_empty() && body.ends_with('}') {
        body.pop();
        body.push_str(",\"other_decisions\":[");
        for (i, d) in decisions.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&d.to_json());
        }
        body.push_str("]}");
    }
    st.metrics.admit.observe(started.elapsed());
    json_response(StatusCode::OK, body)
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

async fn decisions(
    State(st): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(q) = match q {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("bad query: {}", e.body_text())),
    };
    let accept_sse =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"));
    let format = match q.format.as_deref() {
        Some("sse") => Format::Sse,
        Some("jsonl" | "ndjson") => Format::JsonLines,
        Some(other) => {
            return error(StatusCode::BAD_REQUEST, format!("unknown format `{other}`: use `sse` or `jsonl`"));
        }
        None if accept_sse => Format::Sse,
        None => Format::JsonLines,
    };
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let after = q.after.or(last_event_id).unwrap_or(0);
    let body = stream::body(stream::Stream {
        after,
        follow: q.follow.unwrap_or(true),
        format,
        audit: st.audit.clone(),
        live: st.decisions.subscribe(),
        shutdown: st.shutdown.clone(),
        metrics: st.metrics.clone(),
    });
    let ctype = match format {
        Format::Sse => "text/event-stream",
        Format::JsonLines => "application/x-ndjson",
    };
    let mut r = Response::new(body);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn job(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Job { id: id.clone(), reply: tx }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down");
    }
    match rx.await {
        Ok(Some(v)) => reply(StatusCode::OK, &v),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("bursar knows no job `{id}` (never submitted, denied, or forgotten after it ended)"),
        ),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down"),
    }
}

async fn project(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Project { name, reply: tx }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down");
    }
    match rx.await {
        Ok(v) => reply(StatusCode::OK, &v),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down"),
    }
}

async fn policies(State(st): State<AppState>) -> Response {
    let Ok(status) = st.status.read().map(|s| s.clone()) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "policy status unavailable");
    };
    let (digest, list, files) = match &status.set {
        Some(set) => (
            set.digest().to_owned(),
            set.policies()
                .iter()
                .map(|p| {
                    let m = p.meta();
                    json!({
                        "id": &*m.id,
                        "kind": m.kind,
                        "mode": m.mode.as_str(),
                        "description": m.description,
                        "source": m.source,
                    })
                })
                .collect::<Vec<_>>(),
            set.files().iter().map(|f| json!({ "path": f.path, "digest": f.digest })).collect::<Vec<_>>(),
        ),
        None => (String::new(), Vec::new(), Vec::new()),
    };
    reply(
        StatusCode::OK,
        &json!({
            "digest": digest,
            "loaded_at": status.loaded_at,
            "policies": list,
            "files": files,
            "last_reload": status.last,
        }),
    )
}

async fn reload(State(st): State<AppState>) -> Response {
    let (tx, rx) = oneshot::channel();
    if st.reload.send(ReloadRequest { cause: "http", reply: Some(tx) }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down");
    }
    match rx.await {
        Ok(outcome) => {
            let status = if outcome.ok { StatusCode::OK } else { StatusCode::UNPROCESSABLE_ENTITY };
            reply(status, &outcome)
        }
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down"),
    }
}

async fn snapshot(State(st): State<AppState>) -> Response {
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Snapshot { reply: Some(tx) }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down");
    }
    match rx.await {
        Ok(Ok(seq)) => reply(StatusCode::OK, &json!({ "event_seq": seq })),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_lines_are_numbered_and_bad_ones_reported() {
        let body = Bytes::from(
            "{\"id\":\"e1\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}\n\nnot json\n{\"id\":\"bursar-tick-5\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}\r\n",
        );
        let (ok, bad) = decode_body(&body).unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].line, 1);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0]["line"], 3);
        assert_eq!(bad[1]["line"], 4);
        assert!(bad[1]["reason"].as_str().unwrap().contains("reserved"));
    }

    #[test]
    fn non_utf8_body_is_refused() {
        assert!(decode_body(&Bytes::from_static(b"\xff\xfe")).is_err());
    }

    #[test]
    fn token_comparison() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}

/// `?period=2026-11&by=project` of the report routes; both optional (default: the month of the
/// newest event, by project).
#[derive(Debug, Deserialize)]
struct ReportQuery {
    period: Option<String>,
    by: Option<String>,
}

async fn report_json(State(st): State<AppState>, Query(q): Query<ReportQuery>) -> Response {
    report_answer(st, q, false).await
}

async fn report_html(State(st): State<AppState>, Query(q): Query<ReportQuery>) -> Response {
    report_answer(st, q, true).await
}

/// Catches the report facts up from the audit log and renders them, off the async threads.
async fn report_answer(st: AppState, q: ReportQuery, html: bool) -> Response {
    let audit = st.audit.clone();
    let now = bursar_audit::wall_ms();
    let done = tokio::task::spawn_blocking(move || {
        let (period, by) = (q.period.as_deref(), q.by.as_deref());
        if html {
            bursar_report::current_html(&audit, period, by, now)
        } else {
            bursar_report::current_json(&audit, period, by, now)
        }
    })
    .await;
    match done {
        Ok(Ok(body)) if html => {
            let mut r = (StatusCode::OK, body).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
            r
        }
        Ok(Ok(body)) => json_response(StatusCode::OK, body),
        Ok(Err(bursar_report::ReportError::Invalid(m))) => error(StatusCode::BAD_REQUEST, m),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
