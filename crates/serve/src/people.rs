//! The people-facing routes: the pool page, what waits for whom, and the answers a person gives —
//! from a terminal (`bursar approve|reject|keepalive`, through the API) or with one click on a
//! signed link in a notice.
//!
//! Routes (merged into [`crate::router::local`]):
//! - `GET /` (the pool page, [`crate::page`]), `GET /v1/pool` (the `read` power); `GET
//!   /v1/pending` (everything with `read`; with only `answer` or `keepalive`, what the caller may
//!   answer, as `GET /v1/pending/mine` and `GET /mine` always give);
//!   `POST /v1/jobs/{id}/approve|reject|keepalive` ([`ActionRequest`] → [`ActionReply`]; the
//!   `answer` or `keepalive` power). The answer is the caller's: `by` is the authenticated
//!   principal, and a request that names someone else (`bursar approve --as bob` with alice's
//!   credential) is refused.
//! - `GET /act/{token}` shows what the link will do and changes nothing (a link preview or a mail
//!   scanner that follows it approves nothing); `POST /act/{token}` does it. The HMAC token is these
//!   two routes' authority ([`bursar_notify::token`]), so they take no bearer token.
//!
//! Every answer goes the one road: the action becomes the ordinary v1 event (`job.keepalive`,
//! `approval.granted`, `approval.rejected`), encoded from `bursar-model` types, decoded through
//! `bursar_session` under the producer's rules and applied as [`Work::Inputs`], so it is journaled,
//! replayed and deduplicated like any event. A link's event id derives from its token: a second use
//! is a duplicate the engine already knows. Before sending anything, the job's state is checked
//! (unknown, not pending, lapsed, not an approver, not live) so the person is told why nothing
//! happened; the engine's own checks stay behind it.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bursar_auth::{Caller, Power, Proof, Role};
use bursar_model::api::{ActionKind, ActionReply, ActionRequest, DenyLine, ErrorReply, PoolView};
use bursar_model::{Event, EventKind, RawJson, Timestamp};
use bursar_notify::{JobFacts, TokenError};
use bursar_session::Origin;

use crate::backend::Fate;
use crate::local::Local;
use crate::pool::PoolInput;
use crate::respond::{Refusal, html, json};
use crate::road::Door;

/// What the people's routes share: single-node serve's door.
type AppState = Door<Local>;

/// How many recent denies the page shows.
const DENIES_SHOWN: usize = 10;

/// The people-facing API routes (authenticated by the router that merges them).
pub fn api_router() -> Router<AppState> {
    let read =
        crate::layers::needing(Power::Read, Router::new().route("/", get(page)).route("/v1/pool", get(pool_json)));
    // The action's power is checked in the handler: approve and reject need `answer`, keepalive `keepalive`.
    // What waits for the caller: the `answer` or the `keepalive` power, not `read` (checked in the
    // handlers: either one will do).
    read.merge(crate::layers::with_body(Router::new().route("/v1/jobs/{id}/{action}", axum::routing::post(action_api))))
        .route("/mine", get(mine_page))
        .route("/v1/pending/mine", get(mine_json))
        // Everything with `read`; what the caller may answer with `answer` or `keepalive` alone
        // (checked in the handler).
        .route("/v1/pending", get(pending_json))
}

/// The signed links' routes: the link is their authority, so they take no credential.
pub fn link_router() -> Router<AppState> {
    Router::new().route("/act/{token}", get(link_show).post(link_do))
}

/// What the engine knows about `job`, and whether input `seen` was applied (a used link).
async fn facts(st: &AppState, job: &str, seen: String) -> Result<(Option<JobFacts>, bool), Refusal> {
    let job = job.to_owned();
    st.backend.read(move |v| (crate::pool::facts(v.engine, &job), v.engine.seen(&seen))).await
}

/// What a person asks for.
#[derive(Debug, Clone)]
struct Act {
    job: String,
    action: ActionKind,
    by: String,
    reason: Option<String>,
    /// The event id as the caller names it (bursar keeps it in the caller's namespace).
    event_id: String,
    /// Who asks, and how they proved it (a link's is the principal it was addressed to).
    caller: Arc<Caller>,
    /// A link's request: the GPUs, hours and submission time (ms) it was sent for.
    bound: Option<(bursar_model::Gpus, f64, i64)>,
}

impl Act {
    /// The event id bursar keeps.
    fn kept_id(&self) -> String {
        match self.caller.id_namespace() {
            Some(ns) => bursar_session::namespaced(&ns, &self.event_id),
            None => self.event_id.clone(),
        }
    }
}

fn phase_words(phase: &str) -> &str {
    match phase {
        "pending_approval" => "waiting for approval",
        "admitted" => "admitted",
        "running" => "running",
        "deferred" => "deferred",
        "finished" => "finished",
        "reclaimed" => "reclaimed",
        other => other,
    }
}

/// Checks `act` against what the engine knows, before anything is sent.
fn precheck(act: &Act, facts: Option<&JobFacts>, seen: bool, now: Timestamp) -> Result<(), Refusal> {
    let job = &act.job;
    if seen {
        let state = facts.map(|f| format!("; job `{job}` is now {}", phase_words(&f.phase))).unwrap_or_default();
        return Err(Refusal::new(
            StatusCode::CONFLICT,
            format!("this was already done (the same answer was applied before){state}"),
        ));
    }
    let Some(f) = facts else {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            format!("bursar knows no job `{job}` (never submitted, denied, or forgotten after it ended)"),
        ));
    };
    match act.action {
        ActionKind::Approve | ActionKind::ApproveOverBudget | ActionKind::Reject => {
            let Some(w) = &f.approval else {
                return Err(Refusal::new(
                    StatusCode::CONFLICT,
                    format!("job `{job}` is not waiting for an approval: it is {}", phase_words(&f.phase)),
                ));
            };
            if Timestamp::parse(&w.expires).is_ok_and(|e| now >= e) {
                return Err(Refusal::new(
                    StatusCode::GONE,
                    format!("the approval request of job `{job}` expired at {}: it is denied", w.expires),
                ));
            }
            if !w.approvers.is_empty() && !w.approvers.contains(&act.by) {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "`{}` is not an approver of job `{job}`: only {} may approve or reject it",
                        act.by,
                        w.approvers.join(", ")
                    ),
                ));
            }
            if !w.self_approval && w.user == act.by {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "`{}` submitted job `{job}` and may not answer its approval (its policies do not set `self_approval = true`)",
                        act.by
                    ),
                ));
            }
            if let Some((gpus, hours, submitted)) = act.bound
                && (gpus != w.gpus
                    || (hours - w.requested_hours).abs() > 1e-9
                    || Timestamp::parse(&w.submitted).map(|t| t.millis()).ok() != Some(submitted))
            {
                return Err(Refusal::new(
                    StatusCode::CONFLICT,
                    format!(
                        "this link was sent for job `{job}` at {gpus} GPUs for {hours} h, submitted {}; the request waiting now is {} GPUs for {} h, submitted {}, and needs its own answer",
                        Timestamp(submitted),
                        w.gpus,
                        w.requested_hours,
                        w.submitted
                    ),
                ));
            }
            if act.action == ActionKind::ApproveOverBudget && !w.over_budget {
                return Err(Refusal::new(
                    StatusCode::CONFLICT,
                    format!("job `{job}` was not held by a quota; approve it plainly"),
                ));
            }
        }
        ActionKind::Keepalive => {
            act.caller.may_keep_alive(job, &f.user).map_err(|d| Refusal::new(StatusCode::FORBIDDEN, d.message))?;
            if !f.live {
                return Err(Refusal::new(
                    StatusCode::CONFLICT,
                    format!("job `{job}` is {}: there is nothing to keep alive", phase_words(&f.phase)),
                ));
            }
        }
    }
    Ok(())
}

/// The v1 event of `act` at `now`, with the id as the caller names it. How the answer was proved is
/// not in the event: the journal keeps the sender beside it.
fn event_of(act: &Act, now: Timestamp, over_budget: bool) -> Event {
    let by = Some(act.by.clone());
    let job_id = act.job.clone();
    let kind = match act.action {
        ActionKind::Keepalive => EventKind::JobKeepalive { job_id, by },
        ActionKind::Approve | ActionKind::ApproveOverBudget => EventKind::ApprovalGranted { job_id, by },
        ActionKind::Reject => EventKind::ApprovalRejected { job_id, by },
    };
    let raw = |v: serde_json::Value| serde_json::value::RawValue::from_string(v.to_string()).ok().map(RawJson);
    let mut extra = Vec::new();
    if over_budget {
        extra.extend(raw(serde_json::Value::Bool(true)).map(|v| ("over_budget".to_owned(), v)));
    }
    if let Some(r) = act.reason.as_ref().filter(|r| !r.trim().is_empty()) {
        extra.extend(raw(serde_json::Value::from(r.trim())).map(|v| ("reason".to_owned(), v)));
    }
    Event { id: act.event_id.clone(), time: now, kind, extra }
}

/// Checks `act`, applies it as its v1 event through the one road, and says what it did.
async fn apply(st: &AppState, act: Act) -> Result<ActionReply, Refusal> {
    let now = crate::wall_time();
    let (facts, seen) = facts(st, &act.job, act.kept_id()).await?;
    precheck(&act, facts.as_ref(), seen, now)?;
    let over_budget = act.action == ActionKind::ApproveOverBudget;
    let line = event_of(&act, now, over_budget).to_json();
    let (items, rejected) = bursar_session::decode_body(line.as_bytes(), st.max_line, Origin::Producer);
    if let Some(r) = rejected.first() {
        return Err(Refusal::BadRequest(format!("the answer is not a valid event: {}", r.error)));
    }
    let (items, denied) = st.lines(&act.caller, items);
    if let Some(d) = denied.into_iter().next() {
        return Err(Refusal::Forbidden(d.error));
    }
    let Some(outcome) = st.send(&act.caller, items, None).await?.outcomes.into_iter().next() else {
        return Err(Refusal::engine_gone());
    };
    let decisions = match outcome.fate {
        Fate::Accepted(d) => d,
        Fate::Denied(r) => return Err(r),
        Fate::Refused(r) => return Err(Refusal::Conflict(r.reason)),
        Fate::Duplicate => {
            return Err(Refusal::Conflict("this was already done (the same answer was applied before)".into()));
        }
    };
    let job = &act.job;
    let about: Vec<&bursar_model::Decision> =
        decisions.iter().map(|s| &s.decision).filter(|d| d.job_id.as_deref() == Some(job.as_str())).collect();
    let admission = about.iter().find(|d| d.admission);
    let message = match act.action {
        ActionKind::Approve | ActionKind::ApproveOverBudget => match admission {
            Some(d) if d.decision == bursar_model::DecisionKind::Allow => {
                format!(
                    "job `{job}` approved by {}{}: it may start now",
                    act.by,
                    if over_budget { " over budget" } else { "" }
                )
            }
            _ => match about.iter().find(|d| d.decision == bursar_model::DecisionKind::Alert) {
                // A grant that answered its sender's policies while another's request still
                // waits (docs/policy-language.md): recorded, the job stays held.
                Some(d) if d.reason.contains(" recorded for ") => d.reason.clone(),
                Some(d) => return Err(Refusal::new(StatusCode::FORBIDDEN, d.reason.clone())),
                None => {
                    return Err(Refusal::new(
                        StatusCode::CONFLICT,
                        format!("job `{job}` no longer waited for an approval; nothing changed"),
                    ));
                }
            },
        },
        ActionKind::Reject => match admission {
            Some(d) if d.decision == bursar_model::DecisionKind::Deny => {
                format!("job `{job}` rejected by {}: it will not run", act.by)
            }
            _ => {
                return Err(Refusal::new(
                    StatusCode::CONFLICT,
                    format!("job `{job}` no longer waited for an approval; nothing changed"),
                ));
            }
        },
        ActionKind::Keepalive => {
            if about.iter().any(|d| d.decision == bursar_model::DecisionKind::Alert) {
                format!("job `{job}` kept alive by {}: the idle reclaim is called off", act.by)
            } else {
                format!("keepalive for job `{job}` recorded by {}; it was not under an idle warning", act.by)
            }
        }
    };
    Ok(ActionReply {
        job_id: job.clone(),
        action: act.action,
        by: act.by.clone(),
        event_id: act.kept_id(),
        message,
        decisions,
    })
}

async fn action_api(
    State(st): State<AppState>,
    Extension(caller): Extension<Arc<Caller>>,
    Path((job, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let kind = match action.as_str() {
        "approve" => ActionKind::Approve,
        "reject" => ActionKind::Reject,
        "keepalive" => ActionKind::Keepalive,
        other => {
            return json(
                StatusCode::NOT_FOUND,
                &ErrorReply { error: format!("no action `{other}`: use approve, reject or keepalive") },
            );
        }
    };
    let power = if kind == ActionKind::Keepalive { Power::Keepalive } else { Power::Answer };
    if let Err(d) = caller.may(power) {
        return json(StatusCode::FORBIDDEN, &ErrorReply { error: d.message });
    }
    let req: ActionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return json(
                StatusCode::BAD_REQUEST,
                &ErrorReply { error: format!("the body is not an action request ({{\"by\": \"name\"}}): {e}") },
            );
        }
    };
    // The answer is the credential's: a request may name who answers only to say it is the caller.
    let by = if caller.is_open() {
        if req.by.trim().is_empty() {
            return json(StatusCode::BAD_REQUEST, &ErrorReply { error: "`by` must name who answers".into() });
        }
        req.by.trim().to_owned()
    } else {
        let named = req.by.trim();
        if !named.is_empty() && named != caller.name() {
            return json(
                StatusCode::FORBIDDEN,
                &ErrorReply {
                    error: format!(
                        "the request answers as `{named}` but the credential is `{}`'s: an answer is recorded as whoever sends it (drop `--as`, or run the command as `{named}`)",
                        caller.name()
                    ),
                },
            );
        }
        caller.name().to_owned()
    };
    let kind = if kind == ActionKind::Approve && req.over_budget { ActionKind::ApproveOverBudget } else { kind };
    let event_id =
        req.id.clone().unwrap_or_else(|| format!("api-{}-{job}-{}", kind.as_str(), crate::wall_time().millis()));
    let act = Act { job, action: kind, by, reason: req.reason, event_id, caller, bound: None };
    match apply(&st, act).await {
        Ok(reply) => json(StatusCode::OK, &reply),
        Err(r) => r.into_response(),
    }
}

/// What the pool and pending views are built from: a recent copy, or a new one from the engine.
async fn pool_input(st: &AppState) -> Result<Arc<PoolInput>, Refusal> {
    st.backend.pool_input().await
}

/// Runs `f` over the pool input off the async threads (and off the engine thread).
async fn off_thread<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&PoolInput) -> T + Send + 'static,
) -> Result<T, Refusal> {
    let input = pool_input(st).await?;
    tokio::task::spawn_blocking(move || f(&input))
        .await
        .map_err(|e| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// What waits for `who` in `all`: the approvals they may answer (a policy names them, or names
/// nobody; not their own job unless every asking policy allows it), the idle warnings of their own
/// jobs and their own jobs in the queue (with their places in it), beside the pool's capacity (a
/// figure per partition, no one's job). `None` (a server without principals): everything.
pub fn pending_for(who: Option<&str>, mut all: bursar_model::api::PendingReply) -> bursar_model::api::PendingReply {
    if let Some(name) = who {
        all.approvals.retain(|w| {
            (w.approvers.is_empty() || w.approvers.iter().any(|a| a == name)) && (w.user != name || w.self_approval)
        });
        all.idle.retain(|w| w.user == name);
        all.queue.retain(|q| q.user == name);
        all.for_user = Some(name.to_owned());
    }
    all
}

/// The caller's answer to "what waits for me?", or the refusal of one with neither power.
async fn mine(st: &AppState, caller: &Caller) -> Result<bursar_model::api::PendingReply, Refusal> {
    if caller.may(Power::Answer).is_err() && caller.may(Power::Keepalive).is_err() {
        let d = caller.may(Power::Answer).err().map(|d| d.message).unwrap_or_default();
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!("{d}; what waits for a person needs the `answer` or the `keepalive` power"),
        ));
    }
    let all = all_pending(st).await?;
    Ok(pending_for((!caller.is_open()).then(|| caller.name()), all))
}

/// Everything that waits, and the queue.
async fn all_pending(st: &AppState) -> Result<bursar_model::api::PendingReply, Refusal> {
    let skips = st.backend.skips.clone();
    off_thread(st, move |input| input.pending(skips.as_ref().and_then(|s| s.lock().ok()).as_deref())).await
}

/// `GET /v1/pending/mine`: [`pending_for`] the caller.
async fn mine_json(State(st): State<AppState>, Extension(caller): Extension<Arc<Caller>>) -> Response {
    match mine(&st, &caller).await {
        Ok(p) => json(StatusCode::OK, &p),
        Err(r) => r.into_response(),
    }
}

/// `GET /mine`: the page of what waits for the caller, with the buttons that answer it (they post
/// JSON to `POST /v1/jobs/{id}/…` with the page's own credential: a cookie session through an
/// authenticating proxy, docs/serve.md, "People in a browser").
async fn mine_page(State(st): State<AppState>, Extension(caller): Extension<Arc<Caller>>) -> Response {
    match mine(&st, &caller).await {
        Ok(p) => html(StatusCode::OK, crate::page::mine(caller.name(), &p, crate::wall_time())),
        Err(r) => {
            html(r.status(), crate::page::message("bursar: waiting for you", "Nothing to show", r.message(), None))
        }
    }
}

/// `GET /v1/pending` (`bursar pending`): with the `read` power, everything that waits and the whole
/// queue; with only the `answer` or `keepalive` power, what the caller may answer ([`pending_for`],
/// as `GET /v1/pending/mine`), so an approver runs `bursar pending` too; otherwise 403.
async fn pending_json(State(st): State<AppState>, Extension(caller): Extension<Arc<Caller>>) -> Response {
    let answer = match caller.may(Power::Read) {
        Ok(()) => all_pending(&st).await,
        Err(_) if caller.may(Power::Answer).is_ok() || caller.may(Power::Keepalive).is_ok() => mine(&st, &caller).await,
        Err(d) => Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "{}; what waits needs the `read` power (everything), or `answer` or `keepalive` (what waits for you)",
                d.message
            ),
        )),
    };
    match answer {
        Ok(p) => json(StatusCode::OK, &p),
        Err(r) => r.into_response(),
    }
}

/// The pool view with the last denies from the audit log.
async fn pool_view(st: &AppState) -> Result<PoolView, Refusal> {
    let now = crate::wall_time();
    let skips = st.backend.skips.clone();
    let mut view =
        off_thread(st, move |input| input.pool(now, skips.as_ref().and_then(|s| s.lock().ok()).as_deref())).await?;
    let audit = st.backend.audit.clone();
    let denies = tokio::task::spawn_blocking(move || {
        bursar_audit::AuditLog::open_read(&audit)?.latest_decisions("deny", DENIES_SHOWN)
    })
    .await
    .map_err(|e| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    view.denies = denies
        .into_iter()
        .map(|d| DenyLine {
            time: Timestamp(d.time).to_string(),
            job_id: d.job,
            project: d.project,
            user: d.user,
            policies: d.policies,
            reason: d.reason,
        })
        .collect();
    Ok(view)
}

async fn pool_json(State(st): State<AppState>) -> Response {
    match pool_view(&st).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(r) => r.into_response(),
    }
}

async fn page(State(st): State<AppState>) -> Response {
    match pool_view(&st).await {
        Ok(v) => html(StatusCode::OK, crate::page::pool(&v)),
        Err(r) => html(r.status(), crate::page::message("bursar: the pool", "Cannot show the pool", r.message(), None)),
    }
}

/// Verifies a link's token: its claims, or the page that says why it cannot be used.
fn verify(st: &AppState, token: &str) -> Result<bursar_notify::Claims, Box<Response>> {
    let Some(key) = &st.backend.links else {
        return Err(Box::new(html(
            StatusCode::NOT_FOUND,
            crate::page::message(
                "bursar",
                "Links are off",
                "This bursar server does not send notices (`serve --notify`), so it has no action links.",
                None,
            ),
        )));
    };
    key.verify(token, crate::wall_time()).map_err(|e| {
        let (status, title) = match &e {
            TokenError::Malformed => (StatusCode::BAD_REQUEST, "This link is damaged"),
            TokenError::Forged => (StatusCode::FORBIDDEN, "This link is not valid"),
            TokenError::Expired(_) => (StatusCode::GONE, "This link has expired"),
        };
        let more = match &e {
            TokenError::Expired(c) => format!("{e}. Nothing was done to job `{}`.", c.job),
            _ => format!("{e}. Nothing was done."),
        };
        Box::new(html(status, crate::page::message("bursar", title, &more, None)))
    })
}

fn act_of(st: &AppState, claims: &bursar_notify::Claims, token: &str, reason: Option<String>) -> Act {
    // A link is its addressee's: the person it was sent to (an approver a policy names, a job's
    // owner), proved by bursar's own signature, with the power its action needs and no other. The
    // engine's own checks (is this person an approver of the job, is the job theirs) stay behind it.
    let auth = crate::auth::current(&st.auth.auth);
    let caller = if auth.is_open() {
        Caller::open()
    } else {
        let person = auth.person(&claims.for_user);
        let role = if claims.action == ActionKind::Keepalive { Role::User } else { Role::Approver };
        let principal = bursar_auth::Principal { roles: [role].into_iter().collect(), ..(*person).clone() };
        Caller { principal: Arc::new(principal), proof: Proof::Link { notice: claims.notice.clone() } }
    };
    Act {
        job: claims.job.clone(),
        action: claims.action,
        by: claims.for_user.clone(),
        reason,
        event_id: bursar_notify::event_id(token),
        caller: Arc::new(caller),
        bound: claims.request,
    }
}

async fn link_show(State(st): State<AppState>, Path(token): Path<String>) -> Response {
    let claims = match verify(&st, &token) {
        Ok(c) => c,
        Err(page) => return *page,
    };
    let act = act_of(&st, &claims, &token, None);
    let facts = match facts(&st, &act.job, act.kept_id()).await {
        Ok(f) => f,
        Err(r) => return html(r.status(), crate::page::message("bursar", "Try again", r.message(), None)),
    };
    if let Err(r) = precheck(&act, facts.0.as_ref(), facts.1, crate::wall_time()) {
        return html(
            r.status(),
            crate::page::message("bursar", "Nothing to do", &format!("{}. Nothing was done.", r.message()), None),
        );
    }
    html(StatusCode::OK, crate::page::confirm(&claims, facts.0.as_ref()))
}

/// The form of a confirmation page.
#[derive(Debug, Default)]
struct LinkForm {
    /// A rejection's reason.
    reason: Option<String>,
}

async fn link_do(State(st): State<AppState>, Path(token): Path<String>, req: axum::extract::Request) -> Response {
    let claims = match verify(&st, &token) {
        Ok(c) => c,
        Err(page) => return *page,
    };
    // The link is this route's authority: its form is read only once the link verifies.
    let Some(ctx) = req.extensions().get::<crate::body::BodyContext>().cloned() else {
        return html(StatusCode::INTERNAL_SERVER_ERROR, String::new());
    };
    let body = match crate::body::read_limited(req.into_body(), &ctx).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let form: LinkForm = parse_form(&body);
    let act = act_of(&st, &claims, &token, form.reason);
    match apply(&st, act).await {
        Ok(reply) => {
            html(StatusCode::OK, crate::page::message("bursar", "Done", &reply.message, Some(&reply.event_id)))
        }
        Err(r) => html(
            r.status(),
            crate::page::message("bursar", "Nothing was done", &format!("{}. Nothing was done.", r.message()), None),
        ),
    }
}

/// Reads the confirmation form (`application/x-www-form-urlencoded`, one optional field, `reason`)
/// leniently: anything else in it is ignored.
fn parse_form(body: &[u8]) -> LinkForm {
    let text = String::from_utf8_lossy(body);
    let mut form = LinkForm::default();
    for pair in text.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "reason" {
            form.reason = Some(url_decode(v));
        }
    }
    form
}

/// Percent-decoding with `+` as a space.
fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => {
                    out.push(b);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_model::api::ApprovalWait;

    fn act(action: ActionKind, by: &str) -> Act {
        Act {
            job: "j1".into(),
            action,
            by: by.into(),
            reason: None,
            event_id: "link-x".into(),
            caller: Arc::new(Caller::open()),
            bound: None,
        }
    }

    fn held(expires: &str) -> JobFacts {
        JobFacts {
            phase: "pending_approval".into(),
            live: false,
            user: "alice".into(),
            project: "nlp".into(),
            approval: Some(ApprovalWait {
                job_id: "j1".into(),
                project: "nlp".into(),
                user: "alice".into(),
                gpus: 8.into(),
                requested_hours: 100.0,
                submitted: "2026-11-02T09:00:00Z".into(),
                expires: expires.into(),
                approvers: vec!["bob".into()],
                policies: vec!["approval/big".into()],
                reason: "big".into(),
                over_budget: false,
                held_by: Vec::new(),
                self_approval: false,
            }),
            idle: Vec::new(),
        }
    }

    #[test]
    fn a_person_is_told_why_nothing_happens() {
        let now = Timestamp::parse("2026-11-02T10:00:00Z").unwrap();
        let f = held("2026-11-03T09:00:00Z");
        assert_eq!(precheck(&act(ActionKind::Approve, "bob"), Some(&f), false, now), Ok(()));
        let status = |a: &Act, f: Option<&JobFacts>, seen| precheck(a, f, seen, now).unwrap_err().status();
        assert_eq!(status(&act(ActionKind::Approve, "bob"), Some(&f), true), StatusCode::CONFLICT);
        assert_eq!(status(&act(ActionKind::Approve, "bob"), None, false), StatusCode::NOT_FOUND);
        let r = precheck(&act(ActionKind::Approve, "mallory"), Some(&f), false, now).unwrap_err();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(r.message().contains("only bob"), "{}", r.message());
        assert_eq!(status(&act(ActionKind::ApproveOverBudget, "bob"), Some(&f), false), StatusCode::CONFLICT);
        assert_eq!(
            status(&act(ActionKind::Reject, "bob"), Some(&held("2026-11-02T09:30:00Z")), false),
            StatusCode::GONE
        );
        let mut running = f.clone();
        running.approval = None;
        running.phase = "running".into();
        running.live = true;
        assert_eq!(status(&act(ActionKind::Approve, "bob"), Some(&running), false), StatusCode::CONFLICT);
        assert_eq!(precheck(&act(ActionKind::Keepalive, "alice"), Some(&running), false, now), Ok(()));
        running.live = false;
        running.phase = "reclaimed".into();
        assert_eq!(status(&act(ActionKind::Keepalive, "alice"), Some(&running), false), StatusCode::CONFLICT);
    }

    #[test]
    fn an_answer_is_the_ordinary_v1_event() {
        let now = Timestamp::parse("2026-11-02T10:00:00Z").unwrap();
        let mut a = act(ActionKind::Reject, "bob");
        a.reason = Some(" too big ".into());
        let line = event_of(&a, now, false).to_json();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["type"], "approval.rejected");
        assert_eq!((v["by"].as_str(), v["reason"].as_str(), v.get("via")), (Some("bob"), Some("too big"), None));
        let (ok, bad) = bursar_session::decode_body(line.as_bytes(), 1 << 20, Origin::Producer);
        assert_eq!((ok.len(), bad.len()), (1, 0));
        let granted = event_of(&act(ActionKind::ApproveOverBudget, "bob"), now, true).to_json();
        assert!(
            granted.contains("\"type\":\"approval.granted\"") && granted.contains("\"over_budget\":true"),
            "{granted}"
        );
    }

    #[test]
    fn form_reasons_are_decoded() {
        assert_eq!(parse_form(b"reason=too+big%21").reason.as_deref(), Some("too big!"));
        assert_eq!(parse_form(b"reason=50%").reason.as_deref(), Some("50%"));
        assert_eq!(parse_form(b"x=1").reason, None);
    }
}
