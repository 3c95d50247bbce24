//! The routers: which route is mounted where, with which power. Single-node serve's main listener
//! ([`local`]) and the scheduler's own listener (`--admit-listen`, [`admit_only`], any backend);
//! a cluster instance builds its own from [`common`] and [`wrap`] (`crate::cluster::router`). The
//! routes every backend has are [`crate::api`]'s, written once; the ones only the engine of this
//! process can answer are [`crate::local_api`]'s and [`crate::people`]'s.
//!
//! Powers (the table `docs/security.md` gives): `GET /healthz` none; `POST /v1/admit` `submit`;
//! `POST /v1/events` each line its own (checked on the road, [`crate::road`]); the people's answers
//! `answer` or `keepalive` (in their handlers); `GET /mine` and `/v1/pending/mine` `answer` or
//! `keepalive`, `GET /v1/pending` `read` or either of those (in their handlers: without `read`, the
//! caller's own); `POST /v1/reload`, `/v1/snapshot`, `/v1/audit/prune` `admin`; every other `GET`
//! `read`; `/act/{token}` the link's own signature.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post};
use bursar_auth::Power;

use crate::api;
use crate::backend::Backend;
use crate::body::BodyContext;
use crate::layers::{guarded, needing, outer, with_body};
use crate::listen::{Limits, ListenCounters};
use crate::local::Local;
use crate::respond::error;
use crate::road::Door;

/// The routes every backend serves, each with its power (not yet authenticated: [`wrap`] does it).
pub fn common<B: Backend>() -> Router<Door<B>> {
    needing(Power::Submit, Router::new().route("/v1/admit", post(api::admit::<B>)))
        // Each line of a body needs its own power, checked on the road.
        .merge(with_body(Router::new().route("/v1/events", post(api::events::<B>))))
        .merge(needing(
            Power::Read,
            Router::new()
                .route("/v1/decisions", get(api::decisions::<B>))
                .route("/v1/policies", get(api::policies::<B>))
                .route("/metrics", get(api::metrics::<B>)),
        ))
        .merge(needing(Power::Admin, Router::new().route("/v1/reload", post(api::reload::<B>))))
}

/// Authentication and the cross-site check around `api`, `/healthz` beside it, and the outer layers.
pub fn wrap<B: Backend>(
    door: Door<B>,
    api: Router<Door<B>>,
    links: Option<Router<Door<B>>>,
    limits: Limits,
    counters: Arc<ListenCounters>,
    fallback: &'static str,
) -> Router {
    let csrf = crate::csrf::Csrf::api(door.origins.clone(), counters.clone());
    let mut routes =
        Router::new().route("/healthz", get(api::healthz::<B>)).merge(guarded(api, door.auth.clone(), csrf.clone()));
    if let Some(links) = links {
        routes = routes.merge(links.layer(middleware::from_fn_with_state(csrf.form(), crate::csrf::guard)));
    }
    let routes = routes.fallback(move || async move { not_found(fallback) });
    let ctx = BodyContext { limits, counters, budgets: door.budgets.clone() };
    outer(routes, ctx).with_state(door)
}

fn not_found(message: &'static str) -> Response {
    error(StatusCode::NOT_FOUND, message)
}

/// Single-node serve's main listener: every route.
pub fn local(door: Door<Local>, limits: Limits, counters: Arc<ListenCounters>) -> Router {
    use crate::local_api;
    let read = needing(
        Power::Read,
        Router::new()
            .route("/v1/jobs/{id}", get(local_api::job))
            .route("/v1/unconfirmed", get(local_api::unconfirmed))
            .route("/v1/projects/{name}", get(local_api::project))
            .route("/v1/report", get(local_api::report_json))
            .route("/v1/estimate", get(local_api::estimate))
            .route("/report", get(local_api::report_html)),
    );
    let admin = needing(
        Power::Admin,
        Router::new().route("/v1/snapshot", post(local_api::snapshot)).route("/v1/audit/prune", post(local_api::prune)),
    );
    let api = common::<Local>().merge(read).merge(admin).merge(crate::people::api_router());
    wrap(
        door,
        api,
        Some(crate::people::link_router()),
        limits,
        counters,
        "no such route; see docs/serve.md for the API",
    )
}

/// The scheduler's own listener (`--admit-listen`): admissions and health only, so nothing else
/// competes for its connections.
pub fn admit_only<B: Backend>(door: Door<B>, limits: Limits, counters: Arc<ListenCounters>) -> Router {
    let api = needing(Power::Submit, Router::new().route("/v1/admit", post(api::admit::<B>)));
    wrap(
        door,
        api,
        None,
        limits,
        counters,
        "this listener (--admit-listen) serves only POST /v1/admit and GET /healthz",
    )
}
