//! The HTTP API: routes, request decoding and the answers (authentication and each route's power
//! are [`crate::auth`]'s).
//!
//! Handlers never touch engine state: they decode and validate the request, send [`Work`] to the
//! engine thread (waiting when its queue is full: back-pressure) and turn the reply into JSON. A
//! request that cannot be decoded gets a 400 with the reason and reaches the engine not at all.
//!
//! Routes: `POST /v1/events`, `POST /v1/admit`, `GET /v1/decisions`, `GET /v1/jobs/{id}`,
//! `GET /v1/projects/{name}`, `GET /v1/policies`, `POST /v1/reload`, `POST /v1/snapshot`,
//! `GET /healthz`, `GET /metrics`, `GET /v1/report` and `GET /report` (the `bursar report` JSON and
//! HTML, see `docs/reports.md`). See `docs/serve.md` for the bodies.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bursar_auth::{Caller, Power};
use bursar_model::api::{
    AdmitReply, Duplicate, ErrorReply, EventsReply, PoliciesView, PolicyFile, PolicyGuest, PolicyInfo, Rejected,
    Sequenced, SnapshotReply,
};
use bursar_model::{EventKind, Input};
use bursar_session::{Incoming, Origin};
use serde::Deserialize;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::core::{Outcome, Work};
use crate::metrics::Metrics;
use crate::reload::{ReloadRequest, SharedStatus};
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
    /// Who may call and what each may do, swapped whole when the configuration reloads.
    pub auth: crate::auth::SharedAuth,
    /// The configuration file the principals came from, reread on reload.
    pub config_file: Option<PathBuf>,
    /// Becomes true at shutdown (ends the streams).
    pub shutdown: watch::Receiver<bool>,
    /// The longest line of a request body.
    pub max_line: usize,
    /// The action links' key ([`crate::people`]).
    pub people: crate::people::Links,
    /// Whether the audit log commits.
    pub journal: Arc<bursar_audit::Health>,
    /// Lines `GET /healthz` adds after its `ok`: why the start did not restore the newest engine
    /// snapshot ([`crate::core::Recovered::health_notes`]).
    pub health_notes: Arc<[String]>,
    /// Rates for the report routes (`--prices`): the billing comparison and the cost per unit.
    pub prices: Option<Arc<bursar_report::Prices>>,
    /// The last copy of the engine's state for the pool views, and when it was taken
    /// ([`crate::pool::PoolInput`]).
    pub pool_input: crate::pool::PoolInputCache,
    /// What the binary is.
    pub build: Arc<crate::BuildInfo>,
    /// Why the utilisation source sent no sample for a job at its last poll; `None` without a source.
    pub skips: Option<crate::utilisation::SharedSkips>,
    /// Every caller's writes this minute ([`crate::budget`]).
    pub budgets: Arc<crate::budget::Budgets>,
    /// Origins a browser may change things from besides the server's own (`[serve] origins`).
    pub origins: Arc<[String]>,
}

/// Why the audit log cannot commit, as a sentence, if it cannot.
fn journal_failing(st: &AppState) -> Option<String> {
    st.journal.failing().map(|f| {
        format!(
            "the audit log cannot commit since {} ({} attempts): {}; retrying, nothing is lost",
            bursar_model::Timestamp(f.since_ms),
            f.attempts,
            f.error
        )
    })
}

/// Routes whose body is read only once the caller is authenticated and may use them
/// ([`crate::listen::read_body`]).
pub(crate) fn with_body<S: Clone + Send + Sync + 'static>(routes: Router<S>) -> Router<S> {
    routes.route_layer(middleware::from_fn(crate::listen::read_body))
}

/// Routes that need `power`: the power is checked before the body is read.
pub(crate) fn needing<S: Clone + Send + Sync + 'static>(power: Power, routes: Router<S>) -> Router<S> {
    with_body(routes).route_layer(middleware::from_fn(move |req, next| crate::auth::require(power, req, next)))
}

/// The layers every router's API takes, outermost first: authentication (headers only), the
/// cross-site check (so a request without a credential is told 401, and one with a credential a
/// browser sends on its own is refused before anything else happens), then, per route, the power
/// and the body ([`needing`], [`with_body`]).
pub(crate) fn guarded<S: Clone + Send + Sync + 'static>(
    api: Router<S>,
    auth: crate::auth::AuthState,
    csrf: crate::csrf::Csrf,
) -> Router<S> {
    api.layer(middleware::from_fn_with_state(csrf, crate::csrf::guard))
        .layer(middleware::from_fn_with_state(auth, crate::auth::authenticate))
}

/// The layers around a whole router, outermost first: the security headers, the body limit of the
/// extractor, and the [`crate::listen::BodyContext`] (with the early 413).
pub(crate) fn outer<S: Clone + Send + Sync + 'static>(router: Router<S>, ctx: crate::listen::BodyContext) -> Router<S> {
    let max_body = ctx.limits.max_body;
    router
        .layer(middleware::from_fn_with_state(ctx, crate::listen::context))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn(crate::auth::security_headers))
}

/// The authentication layer's state.
pub(crate) fn auth_state(st: &AppState) -> crate::auth::AuthState {
    crate::auth::AuthState { auth: st.auth.clone(), metrics: st.metrics.clone() }
}

/// The router with every route, the body limit, authentication and each route's power.
pub fn router(state: AppState, limits: crate::listen::Limits, counters: Arc<crate::listen::ListenCounters>) -> Router {
    let read = needing(
        Power::Read,
        Router::new()
            .route("/v1/decisions", get(decisions))
            .route("/v1/jobs/{id}", get(job))
            .route("/v1/projects/{name}", get(project))
            .route("/v1/policies", get(policies))
            .route("/metrics", get(metrics))
            .route("/v1/report", get(report_json))
            .route("/report", get(report_html)),
    );
    let admin = needing(
        Power::Admin,
        Router::new()
            .route("/v1/reload", post(reload))
            .route("/v1/snapshot", post(snapshot))
            .route("/v1/audit/prune", post(prune)),
    );
    let submit = needing(Power::Submit, Router::new().route("/v1/admit", post(admit)));
    // Each line of a body needs its own power, checked in the handler.
    let per_line = with_body(Router::new().route("/v1/events", post(events)));
    let csrf = crate::csrf::Csrf::api(state.origins.clone(), counters.clone());
    let api = guarded(
        read.merge(admin).merge(submit).merge(per_line).merge(crate::people::api_router()),
        auth_state(&state),
        csrf.clone(),
    );
    let links = crate::people::link_router().layer(middleware::from_fn_with_state(csrf.form(), crate::csrf::guard));
    let ctx = crate::listen::BodyContext { limits, counters, budgets: state.budgets.clone() };
    outer(Router::new().route("/healthz", get(healthz)).merge(api).merge(links).fallback(not_found), ctx)
        .with_state(state)
}

/// The router of the scheduler's own listener (`--admit-listen`): admissions and health only, so
/// nothing else competes for its connections.
pub fn admit_router(
    state: AppState,
    limits: crate::listen::Limits,
    counters: Arc<crate::listen::ListenCounters>,
) -> Router {
    let csrf = crate::csrf::Csrf::api(state.origins.clone(), counters.clone());
    let api = guarded(needing(Power::Submit, Router::new().route("/v1/admit", post(admit))), auth_state(&state), csrf);
    let ctx = crate::listen::BodyContext { limits, counters, budgets: state.budgets.clone() };
    outer(Router::new().route("/healthz", get(healthz)).merge(api).fallback(admit_only), ctx).with_state(state)
}

async fn admit_only() -> Response {
    error(StatusCode::NOT_FOUND, "this listener (--admit-listen) serves only POST /v1/admit and GET /healthz")
}

/// A JSON error answer.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    reply(status, &ErrorReply { error: message.into() })
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

/// `ok`, or 503 with why the server cannot take events (its audit log cannot commit). After the
/// `ok`, a `note:` line per thing an operator should know that does not stop the server: an engine
/// snapshot refused at start (the first line stays `ok`, which probes and the Slurm hook read).
async fn healthz(State(st): State<AppState>) -> Response {
    match journal_failing(&st) {
        None if st.health_notes.is_empty() => (StatusCode::OK, "ok\n").into_response(),
        None => {
            let mut body = String::from("ok\n");
            for n in st.health_notes.iter() {
                body.push_str(n);
                body.push('\n');
            }
            (StatusCode::OK, body).into_response()
        }
        Some(why) => error(StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn metrics(State(st): State<AppState>) -> Response {
    // The live jobs are counted by walking the job table: on the engine thread, once per scrape.
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::CountJobs { reply: tx }).await.is_ok()
        && let Ok(Ok(live)) = tokio::time::timeout(std::time::Duration::from_secs(5), rx).await
    {
        st.metrics.live_jobs.store(live, Ordering::Relaxed);
    }
    let mut text = st.metrics.render();
    st.budgets.render(&mut text);
    // The audit writer's own totals: a transaction holds every batch that was queued when it began,
    // so these (not `bursar_audit_commit_seconds`, which is per batch) say how many fsyncs there are.
    let t = st.journal.totals();
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
    let (policies_failed, config_failed) = st
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
        u8::from(journal_failing(&st).is_some()),
        u8::from(policies_failed),
        u8::from(config_failed),
    );
    let label = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
    let _ = write!(
        text,
        "# HELP bursar_build_info The binary: version, commit and what it was built with (always 1).\n\
         # TYPE bursar_build_info gauge\nbursar_build_info{{version=\"{}\",commit=\"{}\",features=\"{}\"}} 1\n",
        label(st.build.version),
        label(st.build.commit),
        label(&st.build.features)
    );
    let (digest, loaded_at) = st
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

/// Frames and decodes a request body of JSON Lines through the session's one decoder: the inputs
/// (with their 1-based line numbers) and the rejected lines, each with its reason. Each line is
/// decoded on its own, so a line that is not UTF-8 (or not JSON, or too long) costs only itself. This
/// is the only parser of request bodies (fuzzed by `fuzz/fuzz_targets/serve_body.rs`).
pub fn decode_body(body: &[u8], max_line: usize) -> (Vec<Incoming>, Vec<Rejected>) {
    bursar_session::decode_body(body, max_line, Origin::Producer)
}

/// Checks each line against what `caller` may send (the lines it may not are refused, each with
/// why), and marks the others as the caller's: its namespace for their ids and its sender record.
pub(crate) fn admit_lines(caller: &Caller, items: Vec<Incoming>) -> (Vec<Incoming>, Vec<Rejected>) {
    let mut ok = Vec::with_capacity(items.len());
    let mut denied = Vec::new();
    let sender = Arc::new(caller.sender());
    for mut item in items {
        if let Err(d) = caller.check_input(&item.input) {
            denied.push(Rejected { source: None, line: item.line, error: d.message });
            continue;
        }
        if !caller.is_open() {
            item.namespace(caller.name());
        }
        item.sender = Some(sender.clone());
        ok.push(item);
    }
    (ok, denied)
}

/// Why inputs sent to the engine were not answered: the status and the sentence (and, for a
/// spent budget, when to retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failed {
    /// 429, 500, 503.
    pub status: StatusCode,
    /// For the sender.
    pub message: String,
    /// `Retry-After`, seconds.
    pub retry_after: Option<u64>,
}

impl Failed {
    fn new(status: StatusCode, message: impl Into<String>) -> Failed {
        Failed { status, message: message.into(), retry_after: None }
    }

    /// The JSON answer.
    pub(crate) fn response(&self) -> Response {
        let mut r = error(self.status, self.message.clone());
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

/// Charges `caller`'s write budget for `items` ([`crate::budget`]); over it, why, and the first
/// refusal of the minute journaled (the request's first input, as its sender's).
async fn charge(st: &AppState, caller: &Arc<Caller>, items: &[Incoming]) -> Result<(), Failed> {
    let bytes: usize = items.iter().map(|i| i.raw.len()).sum();
    let Err(over) = st.budgets.charge(caller, items.len() as u64, bytes as u64) else { return Ok(()) };
    tracing::warn!(principal = caller.name(), events = items.len(), bytes, "request refused: write budget spent");
    if over.journal
        && let Some(first) = items.first()
    {
        let reason = over.message.lines().next().unwrap_or("").to_owned();
        let _ = st.engine.send(Work::Refusal { item: Box::new(first.clone()), reason }).await;
    }
    Err(Failed { status: StatusCode::TOO_MANY_REQUESTS, message: over.message, retry_after: Some(over.retry_after) })
}

/// How often a request waiting for its commit looks whether the audit log can commit at all.
const COMMIT_WATCH: std::time::Duration = std::time::Duration::from_millis(50);

/// Charges the sender's write budget, sends `items` to the engine thread and waits until they are
/// durable: the one road of every input a request sends (`/v1/events`, `/v1/admit`, answers,
/// keepalives, the event socket). When the audit log cannot commit (a full disk), the wait ends
/// with 503 as soon as that is known (within [`COMMIT_WATCH`] of the failed commit), not when
/// space returns: the inputs are applied and will be committed once it does, so resending them
/// (ids make that safe) tells the sender what became of them.
pub(crate) async fn submit(st: &AppState, items: Vec<Incoming>, caller: &Arc<Caller>) -> Result<Vec<Outcome>, Failed> {
    if let Some(why) = journal_failing(st) {
        // Refused at once rather than queued behind a commit that cannot happen yet.
        return Err(Failed::new(StatusCode::SERVICE_UNAVAILABLE, format!("{why}; resend later (ids make that safe)")));
    }
    charge(st, caller, &items).await?;
    let (tx, rx) = oneshot::channel();
    let caller = Some(caller.clone());
    let not_durable = |why: String| {
        Failed::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{why}: this request may have been applied but is not durable yet; resend it later (ids make that safe) to learn what became of it"
            ),
        )
    };
    match or_failing(st, st.engine.send(Work::Inputs { items, caller, reply: tx })).await {
        Err(why) => return Err(not_durable(why)),
        Ok(Err(_)) => return Err(Failed::new(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down")),
        Ok(Ok(())) => {}
    }
    match or_failing(st, rx).await {
        Err(why) => Err(not_durable(why)),
        Ok(Ok(Ok(applied))) => Ok(applied),
        Ok(Ok(Err(e))) => Err(Failed::new(StatusCode::INTERNAL_SERVER_ERROR, e)),
        Ok(Err(_)) => Err(Failed::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine stopped before the events were durable; resend them (ids make this safe)",
        )),
    }
}

/// `fut`'s output, or why the audit log cannot commit as soon as it cannot (looked at every
/// [`COMMIT_WATCH`]): a request never waits on a commit that cannot happen.
async fn or_failing<F: std::future::Future>(st: &AppState, fut: F) -> Result<F::Output, String> {
    let mut fut = std::pin::pin!(fut);
    loop {
        tokio::select! {
            out = &mut fut => return Ok(out),
            () = tokio::time::sleep(COMMIT_WATCH) => {
                if let Some(why) = journal_failing(st) {
                    return Err(why);
                }
            }
        }
    }
}

async fn events(State(st): State<AppState>, Extension(caller): Extension<Arc<Caller>>, body: Bytes) -> Response {
    let (items, mut rejected) = decode_body(&body, st.max_line);
    st.metrics.events_rejected.fetch_add(rejected.len() as u64, Ordering::Relaxed);
    let decoded = items.len();
    let (items, denied) = admit_lines(&caller, items);
    if !denied.is_empty() {
        st.metrics.events_denied.fetch_add(denied.len() as u64, Ordering::Relaxed);
        tracing::info!(principal = caller.name(), lines = denied.len(), "event lines refused: no power");
    }
    if items.is_empty() && !denied.is_empty() && denied.len() == decoded {
        // Every valid line was one the caller may not send: 403, naming the power and the principal.
        let first = denied[0].error.clone();
        rejected.extend(denied);
        rejected.sort_by_key(|r| r.line);
        return reply(
            StatusCode::FORBIDDEN,
            &EventsReply {
                error: Some(first),
                accepted: 0,
                duplicates: Vec::new(),
                rejected,
                decisions: Vec::new(),
                applied: None,
            },
        );
    }
    rejected.extend(denied);
    rejected.sort_by_key(|r| r.line);
    if items.is_empty() {
        let reason = if rejected.is_empty() { "the body holds no event" } else { "no line is a valid event" };
        return reply(
            StatusCode::BAD_REQUEST,
            &EventsReply {
                error: Some(reason.to_owned()),
                accepted: 0,
                duplicates: Vec::new(),
                rejected,
                decisions: Vec::new(),
                applied: None,
            },
        );
    }
    let applied = match submit(&st, items, &caller).await {
        Ok(a) => a,
        Err(f) => return f.response(),
    };
    let mut answer = EventsReply {
        error: None,
        accepted: 0,
        duplicates: Vec::new(),
        rejected,
        decisions: Vec::new(),
        applied: None,
    };
    let mut refused_all = true;
    let mut unknown_all = true;
    for a in applied {
        if let Some(why) = a.denied {
            unknown_all &= a.unknown_job;
            answer.rejected.push(Rejected { source: None, line: a.line, error: why });
        } else if let Some(r) = a.refused {
            refused_all = false;
            answer.rejected.push(Rejected { source: None, line: a.line, error: format!("refused: {}", r.reason) });
        } else if a.duplicate {
            refused_all = false;
            answer.duplicates.push(Duplicate { line: a.line, id: a.id });
        } else {
            refused_all = false;
            answer.accepted += 1;
            answer.decisions.extend(a.decisions);
        }
    }
    answer.rejected.sort_by_key(|r| r.line);
    if refused_all && answer.accepted == 0 && answer.duplicates.is_empty() {
        // Every line reached the engine thread and was refused there: for who sent it (403), or
        // because the job it names is unknown (404, when that is every line's reason).
        answer.error = answer.rejected.first().map(|r| r.error.clone());
        let status = if unknown_all { StatusCode::NOT_FOUND } else { StatusCode::FORBIDDEN };
        return reply(status, &answer);
    }
    reply(StatusCode::OK, &answer)
}

/// Query of `POST /v1/admit`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmitQuery {
    /// Answer what the submission would get now, recording nothing (`sbatch --test-only`).
    #[serde(default)]
    pub(crate) test_only: bool,
}

async fn admit(
    State(st): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    q: Result<Query<AdmitQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let Ok(Query(q)) = q.map_err(|e| {
        tracing::debug!(error = %e.body_text(), "bad admit query");
    }) else {
        return error(StatusCode::BAD_REQUEST, "bad query: the only parameter of /v1/admit is `test_only=true`");
    };
    let (mut items, rejected) = decode_body(&body, st.max_line);
    if let Some(r) = rejected.first() {
        st.metrics.events_rejected.fetch_add(1, Ordering::Relaxed);
        return error(StatusCode::BAD_REQUEST, format!("malformed event: {}", r.error));
    }
    if items.len() != 1 {
        return error(
            StatusCode::BAD_REQUEST,
            format!("expected exactly one job.submitted event, got {}", items.len()),
        );
    }
    let Some(item) = items.pop() else { return error(StatusCode::BAD_REQUEST, "expected one event") };
    let job_id = match &item.input {
        Input::Event(e) => match &e.kind {
            EventKind::JobSubmitted(spec) => spec.id.clone(),
            other => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "expected a `job.submitted` event, got `{}`; send other events to /v1/events",
                        other.type_name()
                    ),
                );
            }
        },
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("expected a `job.submitted` event, got `{}`; send it to /v1/events", other.type_name()),
            );
        }
    };
    let (mut items, denied) = admit_lines(&caller, vec![item]);
    if let Some(d) = denied.into_iter().next() {
        st.metrics.events_denied.fetch_add(1, Ordering::Relaxed);
        return error(StatusCode::FORBIDDEN, d.error);
    }
    let Some(item) = items.pop() else { return error(StatusCode::INTERNAL_SERVER_ERROR, "no admission to apply") };
    if q.test_only {
        return preview(&st, item).await;
    }
    let event_id = item.input.id().into_owned();
    let applied = match submit(&st, vec![item], &caller).await {
        Ok(a) => a,
        Err(f) => return f.response(),
    };
    st.metrics.admissions.fetch_add(1, Ordering::Relaxed);
    let Some(a) = applied.into_iter().next() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine returned no outcome");
    };
    if let Some(why) = a.denied {
        return error(StatusCode::FORBIDDEN, why);
    }
    if let Some(r) = a.refused {
        // Never a decision: a deny with `admission: true` for a running job's id would be an
        // `scancel` of that job.
        let status = match r.by {
            bursar_session::RefusedBy::Clock => StatusCode::UNPROCESSABLE_ENTITY,
            bursar_session::RefusedBy::Engine => StatusCode::CONFLICT,
        };
        return error(status, r.reason);
    }
    if a.duplicate {
        // A resent submission (the producer retried after a timeout or a crash): answer with the
        // decision made the first time.
        return resent_admission(&st, job_id, event_id).await;
    }
    let mut decisions = a.decisions;
    let Some(pos) = decisions.iter().position(|d| d.decision.admission && d.decision.event_id == a.id) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine made no admission decision");
    };
    let admission = decisions.remove(pos);
    st.metrics.admit.observe(started.elapsed());
    reply(StatusCode::OK, &AdmitReply { admission, duplicate: false, other_decisions: decisions, test_only: false })
}

/// `POST /v1/admit?test_only=true`: the decision the submission would get now, from the engine
/// thread, with nothing journaled, reserved or remembered.
async fn preview(st: &AppState, item: Incoming) -> Response {
    let Input::Event(event) = item.input else {
        return error(StatusCode::BAD_REQUEST, "expected a `job.submitted` event");
    };
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Preview { event: Box::new(event), raw: item.raw, reply: tx }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down");
    }
    let decisions = match rx.await {
        Ok(Ok(d)) => d,
        Ok(Err(why)) => return error(StatusCode::CONFLICT, why),
        Err(_) => return error(StatusCode::SERVICE_UNAVAILABLE, "the engine stopped before it answered"),
    };
    st.metrics.previews.fetch_add(1, Ordering::Relaxed);
    let mut decisions: Vec<Sequenced> = decisions.into_iter().map(|decision| Sequenced { seq: 0, decision }).collect();
    let Some(pos) = decisions.iter().position(|d| d.decision.admission) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the engine made no admission decision");
    };
    let admission = decisions.remove(pos);
    reply(StatusCode::OK, &AdmitReply { admission, duplicate: false, other_decisions: decisions, test_only: true })
}

/// The answer to a submission whose event id was seen before: the admission decision logged the
/// first time, or a 409 that names why there is none.
async fn resent_admission(st: &AppState, job_id: String, event_id: String) -> Response {
    let audit = st.audit.clone();
    let found = tokio::task::spawn_blocking(move || {
        let log = bursar_audit::AuditLog::open_read(&audit)?;
        let admission = log.admission_of(&job_id, &event_id)?;
        let event = if admission.is_none() { log.event_by_id(&event_id)? } else { None };
        Ok::<_, bursar_audit::AuditError>((admission, event, job_id, event_id))
    })
    .await;
    match found {
        Ok(Ok((Some(stored), _, _, _))) => match stored.to_decision() {
            Ok(decision) => reply(
                StatusCode::OK,
                &AdmitReply {
                    admission: Sequenced { seq: u64::try_from(stored.seq).unwrap_or(0), decision },
                    duplicate: true,
                    other_decisions: Vec::new(),
                    test_only: false,
                },
            ),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("the logged admission is unreadable: {e}")),
        },
        Ok(Ok((None, Some(ev), job_id, event_id))) if ev.job.as_deref() != Some(job_id.as_str()) => error(
            StatusCode::CONFLICT,
            format!(
                "event id `{event_id}` was already used for {}; a new submission needs a new event id",
                match ev.job {
                    Some(j) => format!("job `{j}`"),
                    None => format!("a `{}` event", ev.kind),
                }
            ),
        ),
        Ok(Ok((None, Some(_), job_id, event_id))) => error(
            StatusCode::CONFLICT,
            format!(
                "event `{event_id}` for job `{job_id}` was already applied, but it holds no admission decision (it was not a new submission of this job)"
            ),
        ),
        Ok(Ok((None, None, _, event_id))) => error(
            StatusCode::CONFLICT,
            format!(
                "event id `{event_id}` was already processed, but it is no longer in the audit log (pruned); a new submission needs a new event id"
            ),
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
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

/// What a `GET /v1/decisions` asks for, single node or cluster: the seq to start after (`after`, else
/// SSE's `Last-Event-ID`), whether to follow, and the format (`format`, else the `Accept` header); or
/// the 400 that says why not.
pub(crate) fn stream_request(
    headers: &HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<(u64, bool, Format), Box<Response>> {
    let Query(q) = q.map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, format!("bad query: {}", e.body_text()))))?;
    let accept_sse =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"));
    let format = match q.format.as_deref() {
        Some("sse") => Format::Sse,
        Some("jsonl" | "ndjson") => Format::JsonLines,
        Some(other) => {
            return Err(Box::new(error(
                StatusCode::BAD_REQUEST,
                format!("unknown format `{other}`: use `sse` or `jsonl`"),
            )));
        }
        None if accept_sse => Format::Sse,
        None => Format::JsonLines,
    };
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    Ok((q.after.or(last_event_id).unwrap_or(0), q.follow.unwrap_or(true), format))
}

/// A decision stream's response: `body` with the format's content type, never cached.
pub(crate) fn stream_response(body: axum::body::Body, format: Format) -> Response {
    let ctype = match format {
        Format::Sse => "text/event-stream",
        Format::JsonLines => "application/x-ndjson",
    };
    let mut r = Response::new(body);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn decisions(
    State(st): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let (after, follow, format) = match stream_request(&headers, q) {
        Ok(r) => r,
        Err(r) => return *r,
    };
    let body = stream::body(stream::Stream {
        after,
        follow,
        format,
        audit: st.audit.clone(),
        live: st.decisions.subscribe(),
        shutdown: st.shutdown.clone(),
        metrics: st.metrics.clone(),
    });
    stream_response(body, format)
}

async fn job(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Job { id: id.clone(), reply: tx }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down");
    }
    match rx.await {
        Ok(Some(mut v)) => {
            let board = st.skips.as_ref().and_then(|s| s.lock().ok());
            v.utilisation.no_sample =
                crate::utilisation::no_sample(&id, v.utilisation.samples, v.phase == "running", board.as_deref());
            reply(StatusCode::OK, &v)
        }
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
    reply(StatusCode::OK, &policies_view(status))
}

/// `GET /v1/policies`: the set in force, its files and the last reload (single node and cluster).
pub(crate) fn policies_view(status: crate::reload::PolicyStatus) -> PoliciesView {
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
        Ok(Ok(seq)) => reply(StatusCode::OK, &SnapshotReply { event_seq: seq }),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down"),
    }
}

/// `POST /v1/audit/prune` (`bursar audit prune --server`): serve prunes its own log, since it is
/// the one process that may write it ([`bursar_audit::lock`]). The log is verified first on a
/// reader, off the engine thread, in one read transaction (one instant, while the writer goes on);
/// then the engine thread snapshots and hands the prune to the writer ([`Work::Prune`]).
async fn prune(State(st): State<AppState>, body: Bytes) -> Response {
    let before = match serde_json::from_slice::<bursar_model::api::PruneRequest>(&body)
        .map_err(|e| e.to_string())
        .and_then(|r| bursar_model::Timestamp::parse(&r.before).map_err(|e| e.to_string()))
    {
        Ok(t) => t,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not a prune request (`{{\"before\":\"2026-01-01T00:00:00Z\"}}`): {e}"),
            );
        }
    };
    let audit = st.audit.clone();
    let verified = tokio::task::spawn_blocking(move || -> Result<Option<String>, String> {
        // One read transaction (the pinned reader): the log as it was at one instant, whatever serve
        // commits meanwhile, so a live log shows no false problem.
        let log = bursar_audit::AuditLog::open_read_pinned(&audit).map_err(|e| e.to_string())?;
        let rep = bursar_audit::verify::verify(&log).map_err(|e| e.to_string())?;
        Ok(rep.problems.first().map(|p| p.message.clone()))
    })
    .await;
    match verified {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(problem))) => {
            return error(
                StatusCode::CONFLICT,
                format!(
                    "refusing to prune a log that does not verify: {problem}\n  help: run `bursar audit verify` and investigate first"
                ),
            );
        }
        Ok(Err(e)) => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot verify the log before pruning: {e}"));
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Prune { before, reply: tx }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down");
    }
    match rx.await {
        Ok(Ok(r)) => {
            tracing::info!(before = %before, events = r.events, decisions = r.decisions, "audit log pruned through serve");
            reply(StatusCode::OK, &r)
        }
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
        let (ok, bad) = decode_body(&body, 1024);
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].line, 1);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].line, 3);
        assert_eq!(bad[1].line, 4);
        assert!(bad[1].error.contains("reserved"));
    }

    #[test]
    fn a_non_utf8_line_costs_only_itself() {
        // Regression: the whole body was refused (400) for one non-UTF-8 line.
        let (ok, bad) =
            decode_body(b"\xff\xfe\n{\"id\":\"e1\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}", 1024);
        assert_eq!((ok.len(), bad.len(), bad[0].line), (1, 1, 1));
    }
}

/// `?period=2026-11&by=project&cost_per_unit=true` of the report routes; all optional (default: the
/// month of the newest event, by project, without the cost-per-unit section).
#[derive(Debug, Deserialize)]
struct ReportQuery {
    period: Option<String>,
    by: Option<String>,
    #[serde(default)]
    cost_per_unit: Option<String>,
}

async fn report_json(State(st): State<AppState>, Query(q): Query<ReportQuery>) -> Response {
    report_answer(st, q, false).await
}

async fn report_html(State(st): State<AppState>, Query(q): Query<ReportQuery>) -> Response {
    report_answer(st, q, true).await
}

/// Catches the report facts up from the audit log and renders them, off the async threads, with the
/// idle threshold and budgets of the policy set in force.
async fn report_answer(st: AppState, q: ReportQuery, html: bool) -> Response {
    let audit = st.audit.clone();
    let now = bursar_audit::wall_ms();
    let set = st.status.read().ok().and_then(|s| s.set.clone());
    let cost_per_unit = match q.cost_per_unit.as_deref() {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") | Some("") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`cost_per_unit={other}` is not a boolean\n  help: use `cost_per_unit=true`"),
            );
        }
    };
    let prices = st.prices.clone();
    let done = tokio::task::spawn_blocking(move || {
        let query = bursar_report::ReportQuery { period: q.period.as_deref(), by: q.by.as_deref(), cost_per_unit };
        let (set, prices) = (set.as_deref(), prices.as_deref());
        if html {
            bursar_report::current_html(&audit, set, &query, prices, now)
        } else {
            bursar_report::current_json(&audit, set, &query, prices, now)
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
