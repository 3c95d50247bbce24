//! `bursar serve --cluster nats://…`: this instance's part of a bursar cluster on NATS JetStream
//! (`bursar-cluster` does the cluster; this module serves it over HTTP).
//!
//! Routes (a router of its own: cluster mode has no engine thread on this instance to ask about a
//! job or a project, and no single audit log to stream from):
//! - `POST /v1/admit`: forwarded to the partition's owner (NATS request-reply), answered within
//!   `--admit-timeout`; `503` with the partition and the cause when no owner answers in time.
//! - `POST /v1/events`: published to the partitions' subjects; answered once stored in the stream
//!   (`accepted`, `duplicates` as the stream found them, `rejected`; `decisions` is empty: they come
//!   on the decisions stream).
//! - `GET /v1/decisions?after=CURSOR&follow=&format=`: the decisions stream, from JetStream.
//! - `GET /v1/cluster`: this instance, its partitions, every partition's owner.
//! - `GET /healthz` (200 while connected to NATS), `GET /metrics`.
//!
//! Policies load with the same loader as single-node serve, and reload on file changes and SIGHUP;
//! quotas scoped by user or tag are checked through the ledger partition (`docs/cluster.md`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bursar_auth::{Caller, Power};
use bursar_cluster::{Cluster, ClusterConfig, Front, Status};
use bursar_engine::PolicySet;
use bursar_model::api::{Duplicate, ErrorReply, EventsReply, Rejected, ReloadOutcome};
use bursar_model::{EventKind, Input};
use bursar_session::{Origin, decode_body};
use tokio::sync::{mpsc, watch};

use crate::{Config, Ready, ServeError};

#[derive(Clone)]
struct ClusterState {
    front: Arc<Front>,
    status: Arc<Status>,
    auth: crate::auth::AuthState,
    max_line: usize,
    /// An event dated more than this after the wall clock is refused here, at the front: the
    /// partition's owner replays its stream later, so the bound cannot be its to apply.
    max_skew: bursar_model::Duration,
    /// The set in force here and the last reload (`/v1/policies`, `/metrics`).
    policy: crate::reload::SharedStatus,
    /// Reload counters.
    metrics: Arc<crate::Metrics>,
    /// Asks the reloader (`POST /v1/reload`).
    reload: mpsc::Sender<crate::reload::ReloadRequest>,
    /// Origins a browser may change things from besides this server's own.
    origins: Arc<[String]>,
    /// Every caller's writes this minute through this instance ([`crate::budget`]).
    budgets: Arc<crate::budget::Budgets>,
}

fn reply(status: StatusCode, v: &impl serde::Serialize) -> Response {
    match serde_json::to_string(v) {
        Ok(body) => {
            let mut r = (status, body).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    reply(status, &ErrorReply { error: message.into() })
}

fn need(power: Power, routes: Router<ClusterState>) -> Router<ClusterState> {
    crate::http::needing(power, routes)
}

/// The lines `caller` may send that are within the clock bound, namespaced and marked as theirs;
/// the others refused with why.
fn front_lines(
    st: &ClusterState,
    caller: &Caller,
    items: Vec<bursar_session::Incoming>,
) -> (Vec<bursar_session::Incoming>, Vec<Rejected>) {
    let bound = bursar_session::ClockBound::Wall { skew: st.max_skew };
    let (items, mut refused) = crate::http::admit_lines(caller, items);
    let mut ok = Vec::with_capacity(items.len());
    for item in items {
        match bound.refuses(item.input.time(), None) {
            Some(reason) if matches!(item.input, Input::Event(_)) => {
                refused.push(Rejected { source: None, line: item.line, error: format!("refused: {reason}") })
            }
            _ => ok.push(item),
        }
    }
    (ok, refused)
}

fn router(state: ClusterState, limits: crate::listen::Limits, counters: Arc<crate::listen::ListenCounters>) -> Router {
    let api = need(Power::Submit, Router::new().route("/v1/admit", post(admit)))
        .merge(crate::http::with_body(Router::new().route("/v1/events", post(events))))
        .merge(need(
            Power::Read,
            Router::new()
                .route("/v1/decisions", get(decisions))
                .route("/v1/cluster", get(cluster_view))
                .route("/v1/policies", get(policies))
                .route("/metrics", get(metrics)),
        ))
        .merge(need(Power::Admin, Router::new().route("/v1/reload", post(reload))));
    let csrf = crate::csrf::Csrf::api(state.origins.clone(), counters.clone());
    let api = crate::http::guarded(api, state.auth.clone(), csrf);
    // Each instance keeps its callers' budgets for what it takes (docs/cluster.md).
    let ctx = crate::listen::BodyContext { limits, counters, budgets: state.budgets.clone() };
    let routes = Router::new().route("/healthz", get(healthz)).merge(api).fallback(|| async {
        error(
            StatusCode::NOT_FOUND,
            "no such route in cluster mode: /v1/admit, /v1/events, /v1/decisions, /v1/cluster, /v1/policies, /v1/reload, /healthz, /metrics (docs/cluster.md)",
        )
    });
    crate::http::outer(routes, ctx).with_state(state)
}

async fn healthz(State(st): State<ClusterState>) -> Response {
    if st.front.connected() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        error(StatusCode::SERVICE_UNAVAILABLE, "not connected to NATS; reconnecting")
    }
}

async fn metrics(State(st): State<ClusterState>) -> Response {
    use std::fmt::Write as _;
    let mut text = st.status.render();
    st.budgets.render(&mut text);
    let m = &st.metrics;
    let _ =
        writeln!(text, "# HELP bursar_reloads_total Policy reloads, by outcome.\n# TYPE bursar_reloads_total counter");
    for (label, v) in [("ok", &m.reloads_ok), ("unchanged", &m.reloads_unchanged), ("failed", &m.reloads_failed)] {
        let _ = writeln!(
            text,
            "bursar_reloads_total{{outcome=\"{label}\"}} {}",
            v.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    let (digest, loaded_at, failed) = st
        .policy
        .read()
        .map(|s| {
            let digest = s.set.as_ref().map(|x| x.digest().to_owned()).unwrap_or_default();
            (digest, s.loaded_at.clone(), s.last.as_ref().is_some_and(|l| l.status == "failed"))
        })
        .unwrap_or_default();
    let loaded_s = bursar_model::Timestamp::parse(&loaded_at).map(|t| t.millis() as f64 / 1e3).unwrap_or(0.0);
    let _ = write!(
        text,
        "# HELP bursar_last_reload_failed 1 when the last reload could not take the policy directory: what is in force is older than the files.\n\
         # TYPE bursar_last_reload_failed gauge\nbursar_last_reload_failed{{part=\"policies\"}} {}\n\
         # HELP bursar_policy_set_info The policy set in force on this instance, by digest (always 1).\n\
         # TYPE bursar_policy_set_info gauge\nbursar_policy_set_info{{digest=\"{}\"}} 1\n\
         # HELP bursar_policy_set_loaded_timestamp_seconds When the set in force was loaded here (Unix time).\n\
         # TYPE bursar_policy_set_loaded_timestamp_seconds gauge\nbursar_policy_set_loaded_timestamp_seconds {loaded_s:.3}\n",
        u8::from(failed),
        digest.replace('\\', "\\\\").replace('"', "\\\""),
    );
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    r
}

async fn policies(State(st): State<ClusterState>) -> Response {
    let Ok(status) = st.policy.read().map(|s| s.clone()) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "policy status unavailable");
    };
    reply(StatusCode::OK, &crate::http::policies_view(status))
}

async fn reload(State(st): State<ClusterState>) -> Response {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if st.reload.send(crate::reload::ReloadRequest { cause: "http", reply: Some(tx) }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down");
    }
    match rx.await {
        Ok(outcome) => {
            let status = if outcome.ok { StatusCode::OK } else { StatusCode::UNPROCESSABLE_ENTITY };
            reply(status, &outcome)
        }
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the reload was abandoned (shutting down)"),
    }
}

async fn cluster_view(State(st): State<ClusterState>) -> Response {
    reply(StatusCode::OK, &st.status.view())
}

async fn admit(
    State(st): State<ClusterState>,
    Extension(caller): Extension<Arc<Caller>>,
    q: Result<Query<crate::http::AdmitQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Response {
    let Ok(Query(q)) = q else {
        return error(StatusCode::BAD_REQUEST, "bad query: the only parameter of /v1/admit is `test_only=true`");
    };
    let (mut items, rejected) = decode_body(&body, st.max_line, Origin::Producer);
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
    if !matches!(&item.input, Input::Event(e) if matches!(e.kind, EventKind::JobSubmitted(_))) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("expected a `job.submitted` event, got `{}`; send it to /v1/events", item.input.type_name()),
        );
    }
    let (mut items, refused) = front_lines(&st, &caller, vec![item]);
    if let Some(r) = refused.into_iter().next() {
        let status =
            if r.error.starts_with("refused:") { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::FORBIDDEN };
        return error(status, r.error);
    }
    let Some(item) = items.pop() else { return error(StatusCode::INTERNAL_SERVER_ERROR, "no admission to forward") };
    if !q.test_only
        && let Some(over) = over_budget(&st, &caller, std::slice::from_ref(&item))
    {
        return over;
    }
    let asked = if q.test_only { st.front.preview(&item).await } else { st.front.admit(&item).await };
    match asked {
        Ok(r) => reply(StatusCode::OK, &r),
        Err(refusal) => {
            error(StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE), refusal.error)
        }
    }
}

/// Charges `caller`'s write budget on this instance for `items` ([`crate::budget`]); over it, the
/// 429 answer to send instead. Unlike single-node serve, the refusal is not journaled (a cluster's journal is its
/// partitions' streams, which carry only inputs to apply): the metric and the log line count it.
fn over_budget(st: &ClusterState, caller: &Caller, items: &[bursar_session::Incoming]) -> Option<Response> {
    let bytes: usize = items.iter().map(|i| i.raw.len()).sum();
    let over = st.budgets.charge(caller, items.len() as u64, bytes as u64).err()?;
    tracing::warn!(principal = caller.name(), events = items.len(), bytes, "request refused: write budget spent");
    Some(over.response())
}

/// `POST /v1/events` query: `wait_ms=N` waits up to N ms (at most [`MAX_WAIT_MS`]) for every event
/// to be applied by its partition's owner, not only stored.
#[derive(Debug, serde::Deserialize)]
struct EventsQuery {
    wait_ms: Option<u64>,
}

/// The longest `?wait_ms=`.
const MAX_WAIT_MS: u64 = 30_000;

async fn events(
    State(st): State<ClusterState>,
    Extension(caller): Extension<Arc<Caller>>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Response {
    let wait = match q {
        Ok(Query(q)) => q.wait_ms.map(|ms| Duration::from_millis(ms.min(MAX_WAIT_MS))),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("{e}: `wait_ms` is a number of milliseconds")),
    };
    let (items, mut rejected) = decode_body(&body, st.max_line, Origin::Producer);
    let decoded = items.len();
    let (items, refused) = front_lines(&st, &caller, items);
    let all_denied = decoded > 0 && items.is_empty() && refused.iter().all(|r| !r.error.starts_with("refused:"));
    rejected.extend(refused);
    rejected.sort_by_key(|r| r.line);
    if all_denied {
        let r = EventsReply {
            error: rejected.iter().find(|r| !r.error.starts_with("refused:")).map(|r| r.error.clone()),
            accepted: 0,
            duplicates: vec![],
            rejected,
            decisions: vec![],
            applied: None,
        };
        return reply(StatusCode::FORBIDDEN, &r);
    }
    if items.is_empty() {
        let reason = if rejected.is_empty() { "the body holds no event" } else { "no line is a valid event" };
        let r = EventsReply {
            error: Some(reason.into()),
            accepted: 0,
            duplicates: vec![],
            rejected,
            decisions: vec![],
            applied: None,
        };
        return reply(StatusCode::BAD_REQUEST, &r);
    }
    if let Some(over) = over_budget(&st, &caller, &items) {
        return over;
    }
    match st.front.publish(items).await {
        Ok(published) => {
            let mut answer = EventsReply {
                error: None,
                accepted: 0,
                duplicates: Vec::new(),
                rejected,
                decisions: Vec::new(),
                applied: None,
            };
            let mut at = Vec::new();
            for p in published {
                at.extend(p.at);
                if p.duplicate {
                    answer.duplicates.push(Duplicate { line: p.line, id: p.id });
                } else {
                    answer.accepted += 1;
                }
            }
            if let Some(within) = wait {
                answer.applied = Some(st.front.wait_applied(&at, within).await);
            }
            reply(StatusCode::OK, &answer)
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("{e}; resend the events (ids make that safe)")),
    }
}

async fn decisions(
    State(st): State<ClusterState>,
    headers: HeaderMap,
    q: Result<Query<crate::http::StreamQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let (after, follow, format) = match crate::http::stream_request(&headers, q) {
        Ok(r) => r,
        Err(r) => return *r,
    };
    let rx = st.front.decisions(after, follow);
    let stream =
        futures_util::stream::unfold((rx, false), move |(mut rx, done): (mpsc::Receiver<_>, bool)| async move {
            if done {
                return None;
            }
            match rx.recv().await {
                Some(Ok(d)) => {
                    let d: bursar_model::api::Sequenced = d;
                    let frame = crate::stream::frame(format, d.seq, &d.to_json());
                    Some((Ok::<Bytes, Infallible>(frame), (rx, false)))
                }
                Some(Err(e)) => Some((Ok(crate::stream::error_frame(format, &e)), (rx, true))),
                None => None,
            }
        });
    crate::http::stream_response(Body::from_stream(stream), format)
}

async fn compile(config: &Config) -> Result<PolicySet, ServeError> {
    let (loader, dir) = (config.loader.clone(), config.policies.clone());
    let set = tokio::task::spawn_blocking(move || loader(&dir))
        .await
        .map_err(|e| ServeError::Io { context: "compile the policies".into(), message: e.to_string() })?;
    set.map_err(|errors| ServeError::Policies { dir: config.policies.display().to_string(), errors })
}

/// Runs one cluster instance on `listener` until `shutdown` resolves, then hands its partitions over
/// (a snapshot each, leases deleted) and stops. `ready` is called once the instance is connected and
/// listening, before any request is taken.
pub async fn serve_cluster(
    config: Config,
    mut cluster: ClusterConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(&Ready) -> Result<(), ServeError>,
) -> Result<(), ServeError> {
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Io { context: "read the bound address".into(), message: e.to_string() })?;
    crate::check_bind(addr, &config.auth)?;
    for (on, flag) in [
        (config.socket.is_some(), "--socket"),
        (config.admit_listen.is_some(), "--admit-listen"),
        (config.utilisation.is_some(), "--utilisation"),
    ] {
        if on {
            return Err(ServeError::Cluster(format!(
                "`{flag}` is not available with `--cluster` yet: send events to any instance's POST /v1/events (docs/cluster.md)"
            )));
        }
    }
    let set = Arc::new(compile(&config).await?);
    cluster.audit = config.audit.clone();
    cluster.durable = config.durable;
    cluster.tick = config.tick;
    cluster.snapshot_every = config.snapshot_every;
    cluster.engine = config.engine;
    let (policies_tx, policies_rx) = watch::channel(set.clone());
    let instance = Cluster::start(cluster, policies_rx).await.map_err(|e| ServeError::Cluster(e.to_string()))?;

    // Reloads: file changes, SIGHUP and `POST /v1/reload`; a set that does not compile is refused
    // and the one in force stays. Each instance compiles its own copy of the files: the owners it
    // runs take the new set between two batches (docs/cluster.md, "Reloading").
    let started_at = crate::wall_time().to_string();
    let policy: crate::reload::SharedStatus = Arc::new(std::sync::RwLock::new(crate::reload::PolicyStatus {
        set: Some(set.clone()),
        loaded_at: started_at.clone(),
        last: Some(ReloadOutcome {
            ok: true,
            status: "loaded".into(),
            cause: "startup".into(),
            at: started_at,
            digest: set.digest().to_owned(),
            errors: Vec::new(),
            compile_ms: 0.0,
            config: None,
        }),
    }));
    let metrics = Arc::new(crate::Metrics::default());
    let (reload_tx, mut reload_rx) = mpsc::channel::<crate::reload::ReloadRequest>(64);
    let triggers = crate::reload::Triggers::start(&config.policies, config.watch, config.debounce, &reload_tx)?;
    let reloader = {
        let (config, policy, metrics) = (config.clone(), policy.clone(), metrics.clone());
        tokio::spawn(async move {
            while let Some(req) = reload_rx.recv().await {
                let started = std::time::Instant::now();
                let compiled = compile(&config).await;
                let mut outcome = ReloadOutcome {
                    ok: false,
                    status: "failed".into(),
                    cause: req.cause.into(),
                    at: crate::wall_time().to_string(),
                    digest: policies_tx.borrow().digest().to_owned(),
                    errors: Vec::new(),
                    compile_ms: started.elapsed().as_secs_f64() * 1e3,
                    config: None,
                };
                let relaxed = std::sync::atomic::Ordering::Relaxed;
                match compiled {
                    Ok(set) if set.digest() == policies_tx.borrow().digest() => {
                        outcome.ok = true;
                        outcome.status = "unchanged".into();
                        metrics.reloads_unchanged.fetch_add(1, relaxed);
                    }
                    Ok(set) => {
                        tracing::info!(cause = req.cause, digest = set.digest(), "policies reloaded");
                        let set = Arc::new(set);
                        outcome.ok = true;
                        outcome.status = "loaded".into();
                        outcome.digest = set.digest().to_owned();
                        metrics.reloads_ok.fetch_add(1, relaxed);
                        if let Ok(mut st) = policy.write() {
                            st.set = Some(set.clone());
                            st.loaded_at = outcome.at.clone();
                        }
                        let _ = policies_tx.send(set);
                    }
                    Err(e) => {
                        tracing::error!(cause = req.cause, error = %e, "policy reload failed; the set in force stays");
                        outcome.errors = match e {
                            ServeError::Policies { errors, .. } => errors.iter().map(|d| d.headline()).collect(),
                            other => vec![other.to_string()],
                        };
                        metrics.reloads_failed.fetch_add(1, relaxed);
                    }
                }
                if let Ok(mut st) = policy.write() {
                    st.last = Some(outcome.clone());
                }
                if let Some(reply) = req.reply {
                    let _ = reply.send(outcome);
                }
            }
        })
    };

    let limits = crate::listen::Limits {
        max_connections: config.max_connections,
        max_per_address: config.max_connections_per_address,
        max_unfinished_per_address: config.max_unfinished_per_address,
        header_timeout: config.header_timeout,
        body_timeout: config.body_timeout,
        max_body: config.max_body,
    };
    let state = ClusterState {
        front: instance.front.clone(),
        status: instance.status.clone(),
        auth: crate::auth::AuthState {
            auth: Arc::new(std::sync::RwLock::new(config.auth.clone())),
            metrics: Arc::new(crate::Metrics::default()),
        },
        max_line: config.max_body,
        max_skew: config.max_skew,
        policy,
        metrics,
        reload: reload_tx.clone(),
        origins: config.origins.clone().into(),
        budgets: Arc::default(),
    };
    let counters = Arc::new(crate::listen::ListenCounters::default());
    let tls = config
        .tls
        .as_ref()
        .map(crate::listen::Tls::load)
        .transpose()
        .map_err(|e| ServeError::Io { context: "load the TLS settings".into(), message: e.to_string() })?;
    let app = router(state, limits, counters.clone());
    ready(&Ready { addr, admit: None })?;
    tracing::info!(%addr, partitions = instance.front.partitions(), digest = set.digest(), "cluster instance listening");
    crate::systemd::notify("READY=1");
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    crate::listen::serve(listener, app, limits, counters, tls, stop_rx).await;
    triggers.stop();
    reloader.abort();
    let _ = tokio::time::timeout(Duration::from_secs(30), instance.shutdown()).await;
    tracing::info!("cluster instance stopped");
    Ok(())
}
