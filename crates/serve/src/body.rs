//! Request bodies, read only when a request has earned it: the middleware that puts a listener's
//! limits on every request and refuses a declared oversize body before a byte of it is read
//! ([`context`]), and the one that reads a body under its deadline and size limit once the request is
//! authenticated and may use its route ([`read_body`]), refusing first a caller whose write budget is
//! spent. A request that fails either is answered without its body ever being buffered (64
//! unauthenticated connections each sending 8 MiB used to hold 614 MiB).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::listen::{Limits, ListenCounters};
use crate::respond::error;

/// What [`read_body`] needs, put on every request by [`context`].
#[derive(Clone)]
pub struct BodyContext {
    /// The listener's limits.
    pub limits: Limits,
    /// Its counters.
    pub counters: Arc<ListenCounters>,
    /// The write budgets ([`crate::budget`]).
    pub budgets: Arc<crate::budget::Budgets>,
}

/// Middleware: puts the [`BodyContext`] on the request and refuses a declared oversize body before
/// anything of it is read.
pub async fn context(State(ctx): State<BodyContext>, mut req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > ctx.limits.max_body as u64) {
        ctx.counters.too_large.fetch_add(1, Ordering::Relaxed);
        let mut r = error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body declares {} bytes, over the limit of {} (`--max-body`); split it into several requests",
                declared.unwrap_or(0),
                ctx.limits.max_body
            ),
        );
        r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        return r;
    }
    req.extensions_mut().insert(ctx);
    next.run(req).await
}

/// Reads a body under the deadline and the size limit: the bytes, or the 408/413 to answer.
pub async fn read_limited(body: Body, ctx: &BodyContext) -> Result<axum::body::Bytes, Response> {
    match tokio::time::timeout(ctx.limits.body_timeout, axum::body::to_bytes(body, ctx.limits.max_body)).await {
        Err(_) => {
            ctx.counters.body_timeouts.fetch_add(1, Ordering::Relaxed);
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {:?}", ctx.limits.body_timeout),
            );
            r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            Err(r)
        }
        Ok(Err(e)) => {
            ctx.counters.too_large.fetch_add(1, Ordering::Relaxed);
            Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body could not be read within the limit of {} bytes: {e}", ctx.limits.max_body),
            ))
        }
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// Middleware, under authentication and each route's power: reads the body of a request that has
/// one to read (a state-changing method, or a caller whose credential binds the body: MUNGE), under
/// the deadline and the size limit; refuses a caller whose write budget is spent before reading
/// anything; and checks a MUNGE credential against the body it was made for (401 if another).
pub async fn read_body(req: Request, next: Next) -> Response {
    let caller = crate::auth::caller(req.extensions());
    let has_body = !matches!(req.method(), &axum::http::Method::GET | &axum::http::Method::HEAD);
    if !has_body && !caller.binds_body() {
        return next.run(req).await;
    }
    let Some(ctx) = req.extensions().get::<BodyContext>().cloned() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "the request has no body limits");
    };
    if has_body && let Err(over) = ctx.budgets.precheck(&caller) {
        return crate::respond::Refusal::from(over).into_response();
    }
    let (parts, body) = req.into_parts();
    let bytes = match read_limited(body, &ctx).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(e) = caller.check_body(&bytes) {
        tracing::info!(error = %e, "request refused: the credential was made for another body");
        return crate::auth::unauthorized(e.to_string());
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}
