//! Answers: the JSON and HTML bodies every route sends, and [`Refusal`], the one typed reason a
//! request is not done, with the one place its HTTP status is chosen.
//!
//! Every door (HTTP, the Unix socket, cluster mode) and every layer (authentication, the write
//! budget, the road to the engine) says *why* with a [`Refusal`] variant; only here does a variant
//! become a status code, so a refusal means the same on every door. Nothing above this floor picks
//! a status by reading a message.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bursar_model::api::ErrorReply;

/// A JSON answer.
pub fn json(status: StatusCode, v: &impl serde::Serialize) -> Response {
    match serde_json::to_string(v) {
        Ok(body) => json_text(status, body),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A JSON answer from its text.
pub fn json_text(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A JSON error answer: `{"error": message}`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json(status, &ErrorReply { error: message.into() })
}

/// A page for people, never cached (it shows state that changes, and may carry a link's token).
pub fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Prometheus' text exposition format.
pub fn metrics_text(text: String) -> Response {
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    r
}

/// Why a request, or one input of it, is not done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request itself is wrong (not JSON, not the event the route takes, a bad query): 400.
    BadRequest(String),
    /// The caller may not do this (a power, a job pattern, not an approver): 403.
    Forbidden(String),
    /// The job it names is unknown: 404.
    UnknownJob(String),
    /// It contradicts what is recorded (a second submission of a known job, an id reused for
    /// another event, an answer already given): 409.
    Conflict(String),
    /// Dated beyond the clock bound (`[clock] max_skew`): 422.
    Clock(String),
    /// What it answers has lapsed (an approval request that expired, a link past its time): 410.
    Expired(String),
    /// The caller's write budget this minute is spent: 429 with `Retry-After`.
    OverBudget {
        /// For the caller.
        message: String,
        /// Seconds until the next minute.
        retry_after: u64,
    },
    /// Not now: the audit log cannot commit, NATS is unreachable, no partition owner answered, the
    /// engine is stopping. Resending later is safe (ids make it so): 503.
    Unavailable(String),
    /// bursar's own fault: 500.
    Internal(String),
}

impl Refusal {
    /// The status this refusal is answered with, on every door.
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
            Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
            Refusal::UnknownJob(_) => StatusCode::NOT_FOUND,
            Refusal::Conflict(_) => StatusCode::CONFLICT,
            Refusal::Clock(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Refusal::Expired(_) => StatusCode::GONE,
            Refusal::OverBudget { .. } => StatusCode::TOO_MANY_REQUESTS,
            Refusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The sentence for the caller.
    pub fn message(&self) -> &str {
        match self {
            Refusal::BadRequest(m)
            | Refusal::Forbidden(m)
            | Refusal::UnknownJob(m)
            | Refusal::Conflict(m)
            | Refusal::Clock(m)
            | Refusal::Expired(m)
            | Refusal::Unavailable(m)
            | Refusal::Internal(m)
            | Refusal::OverBudget { message: m, .. } => m,
        }
    }

    /// The refusal a status names (a partition owner's answer, which crosses NATS as a status and a
    /// sentence).
    pub fn from_status(status: u16, message: String) -> Refusal {
        match status {
            400 => Refusal::BadRequest(message),
            403 => Refusal::Forbidden(message),
            404 => Refusal::UnknownJob(message),
            409 => Refusal::Conflict(message),
            410 => Refusal::Expired(message),
            422 => Refusal::Clock(message),
            429 => Refusal::OverBudget { message, retry_after: 60 },
            500 => Refusal::Internal(message),
            _ => Refusal::Unavailable(message),
        }
    }

    /// The refusal answered with `status`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal::from_status(status.as_u16(), message.into())
    }

    /// The engine thread is gone (the server is stopping).
    pub fn engine_gone() -> Refusal {
        Refusal::Unavailable("the engine is shutting down; resend in a moment (ids make that safe)".into())
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = match &self {
            Refusal::OverBudget { retry_after, .. } => Some(*retry_after),
            _ => None,
        };
        let mut r = error(status, self.message().to_owned());
        if let Some(s) = retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), marked where it was cut: what a
/// 401 echoes and the log keeps of what a caller sent.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_caller_sent_is_echoed_bounded() {
        assert_eq!(bounded("bob", 10), "bob");
        let long = "é".repeat(300);
        let cut = bounded(&long, 101);
        assert!(cut.starts_with(&"é".repeat(50)) && cut.ends_with("… (600 bytes in all)"), "{cut}");
    }

    #[test]
    fn a_refusal_keeps_its_status_across_nats() {
        for r in [
            Refusal::BadRequest("a".into()),
            Refusal::Forbidden("b".into()),
            Refusal::UnknownJob("c".into()),
            Refusal::Conflict("d".into()),
            Refusal::Clock("e".into()),
            Refusal::Expired("h".into()),
            Refusal::Unavailable("f".into()),
            Refusal::Internal("g".into()),
        ] {
            assert_eq!(Refusal::from_status(r.status().as_u16(), r.message().to_owned()), r);
        }
        let over = Refusal::OverBudget { message: "spent".into(), retry_after: 12 }.into_response();
        assert_eq!(over.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(over.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("12"));
    }
}
