//! The routes only single-node serve has, because they read this process's engine or its audit
//! log: `GET /v1/jobs/{id}`, `GET /v1/projects/{name}`, `POST /v1/snapshot`, `POST /v1/audit/prune`,
//! `GET /v1/report` and `GET /report` (the `bursar report` JSON and HTML, `docs/reports.md`),
//! `GET /v1/estimate` (a request's estimated start, `docs/estimate.md`). The
//! people-facing ones are [`crate::people`]'s.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bursar_model::api::SnapshotReply;
use serde::Deserialize;
use tokio::sync::oneshot;

use crate::core::Work;
use crate::local::Local;
use crate::respond::{error, json, json_text};
use crate::road::Door;

/// `GET /v1/jobs/{id}`: what the engine knows about a job.
pub async fn job(State(door): State<Door<Local>>, Path(id): Path<String>) -> Response {
    let st = &door.backend;
    let asked = id.clone();
    match st.read(move |v| crate::views::job(v.engine, &asked)).await {
        Ok(Some(mut v)) => {
            let board = st.skips.as_ref().and_then(|s| s.lock().ok());
            v.utilisation.no_sample =
                crate::utilisation::no_sample(&id, v.utilisation.samples, v.phase == "running", board.as_deref());
            json(StatusCode::OK, &v)
        }
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("bursar knows no job `{id}` (never submitted, denied, or forgotten after it ended)"),
        ),
        Err(r) => r.into_response(),
    }
}

/// `?prefix=lab-` of `GET /v1/unconfirmed`.
#[derive(Debug, Deserialize)]
pub struct UnconfirmedQuery {
    /// Only jobs whose id starts with it (a scheduler agent's own: `<cluster>-`).
    #[serde(default)]
    pub prefix: String,
}

/// `GET /v1/unconfirmed?prefix=…`: the admissions the scheduler has yet to confirm it created.
pub async fn unconfirmed(State(door): State<Door<Local>>, Query(q): Query<UnconfirmedQuery>) -> Response {
    match door.backend.read(move |v| crate::views::unconfirmed(v.engine, &q.prefix)).await {
        Ok(view) => json(StatusCode::OK, &view),
        Err(r) => r.into_response(),
    }
}

/// `GET /v1/projects/{name}`: a ledger's usage and held GPUs.
pub async fn project(State(door): State<Door<Local>>, Path(name): Path<String>) -> Response {
    match door.backend.read(move |v| crate::views::project(v.engine, &name)).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(r) => r.into_response(),
    }
}

/// `POST /v1/snapshot`: write an engine snapshot now.
pub async fn snapshot(State(door): State<Door<Local>>) -> Response {
    let st = &door.backend;
    let (tx, rx) = oneshot::channel();
    if st.engine.send(Work::Snapshot { reply: Some(tx) }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down");
    }
    match rx.await {
        Ok(Ok(seq)) => json(StatusCode::OK, &SnapshotReply { event_seq: seq }),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down"),
    }
}

/// `POST /v1/audit/prune` (`bursar audit prune --server`): serve prunes its own log, since it is
/// the one process that may write it ([`bursar_audit::lock`]). The log is verified first on a
/// reader, off the engine thread, in one read transaction (one instant, while the writer goes on);
/// then the engine thread snapshots and hands the prune to the writer ([`Work::Prune`]).
pub async fn prune(State(door): State<Door<Local>>, body: Bytes) -> Response {
    let st = &door.backend;
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
            json(StatusCode::OK, &r)
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the engine is shutting down"),
    }
}

/// `?period=2026-11&by=project&cost_per_unit=true` of the report routes; all optional (default: the
/// month of the newest event, by project, without the cost-per-unit section).
#[derive(Debug, Deserialize)]
pub struct ReportQuery {
    /// `YYYY-MM`.
    pub period: Option<String>,
    /// `project`, `user`, a tag, `config`.
    pub by: Option<String>,
    /// `true` for the cost-per-unit section.
    #[serde(default)]
    pub cost_per_unit: Option<String>,
}

/// `GET /v1/report`.
pub async fn report_json(State(door): State<Door<Local>>, Query(q): Query<ReportQuery>) -> Response {
    report_answer(&door.backend, q, false).await
}

/// `GET /report`.
pub async fn report_html(State(door): State<Door<Local>>, Query(q): Query<ReportQuery>) -> Response {
    report_answer(&door.backend, q, true).await
}

/// Catches the report facts up from the audit log and renders them, off the async threads, with the
/// idle threshold and budgets of the policy set in force.
async fn report_answer(st: &Local, q: ReportQuery, html: bool) -> Response {
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
        Ok(Ok(body)) => json_text(StatusCode::OK, body),
        Ok(Err(bursar_report::ReportError::Invalid(m))) => error(StatusCode::BAD_REQUEST, m),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `?gpus=8&gpu_type=H100&hours=12&region=R&queue=Q&dataset=D` of `GET /v1/estimate`: the first
/// three required. Read as text and checked here, so a mistake gets a sentence, not serde's.
#[derive(Debug, Deserialize)]
pub struct EstimateQuery {
    /// GPUs (above 0, at most 1,000,000; a share such as `2/7` counts MIG slices).
    pub gpus: Option<String>,
    /// GPU type.
    pub gpu_type: Option<String>,
    /// Hours (the limit; above 0, at most 1,000,000).
    pub hours: Option<String>,
    /// Only this region.
    pub region: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// The dataset the job reads: a region without a copy starts it after the copy.
    pub dataset: Option<String>,
}

impl EstimateQuery {
    /// The request, or what is wrong with the query.
    pub fn request(self) -> Result<crate::estimate::Request, String> {
        let text = self.gpus.as_deref().ok_or("`gpus` is required (`?gpus=8&gpu_type=H100&hours=12`)")?;
        let gpus = bursar_model::Gpus::parse(text).map_err(|e| format!("`gpus`: {e}"))?;
        if gpus.is_zero() {
            return Err("`gpus` is above 0: whole GPUs (`8`) or a share of one (`2/7`, `0.5`)".to_owned());
        }
        let hours = self
            .hours
            .as_deref()
            .ok_or("`hours` is required: the limit the job would ask for")?
            .parse::<f64>()
            .ok()
            .filter(|h| h.is_finite() && *h > 0.0 && *h <= bursar_model::limits::REQUESTED_HOURS)
            .ok_or("`hours` is a number of hours above 0, at most 1000000")?;
        let gpu_type = self.gpu_type.filter(|t| !t.is_empty()).ok_or("`gpu_type` is required (e.g. `H100`)")?;
        for (field, v) in
            [("gpu_type", Some(&gpu_type)), ("region", self.region.as_ref()), ("queue", self.queue.as_ref())]
        {
            if let Some(v) = v {
                bursar_model::names::check_name(field, v).map_err(|e| e.message)?;
            }
        }
        if let Some(d) = &self.dataset {
            bursar_model::names::check_text("dataset", d).map_err(|e| e.message)?;
        }
        Ok(crate::estimate::Request {
            gpus,
            gpu_type,
            hours,
            region: self.region,
            queue: self.queue,
            dataset: self.dataset,
            job_id: None,
        })
    }
}

/// `GET /v1/estimate`: when a request would start, per partition, soonest first.
pub async fn estimate(State(door): State<Door<Local>>, Query(q): Query<EstimateQuery>) -> Response {
    let req = match q.request() {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match door.backend.read(crate::estimate::gather_view).await {
        Ok(input) => json(StatusCode::OK, &crate::estimate::answer(&input.configured(&door.backend.capacity), &req)),
        Err(r) => r.into_response(),
    }
}
