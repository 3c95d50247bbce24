//! Cross-site request forgery: one layer every state-changing route a browser can reach goes
//! through, whatever the credential (and any credential added later, a login's cookie session
//! included, goes through it by being put under this layer).
//!
//! A browser attaches some credentials on its own: none at all on a server without principals
//! (loopback), a trusted proxy's user header (the proxy adds it for the browser's session), a TLS
//! client certificate, a cookie. With those, a page on another site could make the browser POST to
//! `/v1/jobs/X/approve` as its user: before this layer, a POST through the authenticating proxy
//! with `Origin: https://evil.example`, `Sec-Fetch-Site: cross-site` and `Content-Type: text/plain`
//! approved the job. Now a request that changes something (any method but `GET`, `HEAD` and
//! `OPTIONS`) is refused with 403 when:
//!
//! 1. `Sec-Fetch-Site` says it comes from another site (`cross-site`, `same-site`): every browser
//!    of the last years sends it, and a page cannot forge it; `same-origin` and `none` (typed,
//!    bookmarked) pass; or, without that header,
//! 2. `Origin` names another origin than the server's own (the `Host` the request was sent to) or
//!    one of `[serve] origins` (a proxy's public address), or is `null`;
//!
//! and with 415 when its body is not declared JSON: a non-JSON `Content-Type` is refused from
//! everyone, and one that declares none is refused unless the credential travels in
//! `Authorization` or `X-SLURM-USER-TOKEN`, which no page can make a browser send to another site
//! without a CORS preflight (bursar grants none). `text/plain`, a form, and a body without a type are
//! what a page can send cross-site without a preflight; JSON is not.
//!
//! The link confirmation form (`POST /act/{token}`) is a form by design: it takes
//! `application/x-www-form-urlencoded` ([`Csrf::form`]) but is checked for its origin like the rest.
//! Tools (`bursar approve`, the Slurm hook, the agents, `curl -H 'content-type: application/json'`)
//! send neither `Sec-Fetch-Site` nor a foreign `Origin`, and pass.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

/// What a route accepts, and the origins besides the server's own.
#[derive(Debug, Clone)]
pub struct Csrf {
    /// Origins (`https://bursar.example.org`, lowercased) a browser may send from besides the
    /// server's own.
    pub origins: Arc<[String]>,
    /// A form body is accepted (the link confirmation page's).
    pub form: bool,
    /// Where refusals are counted.
    pub counters: Arc<crate::listen::ListenCounters>,
}

impl Csrf {
    /// The API's rule: JSON bodies only.
    pub fn api(origins: Arc<[String]>, counters: Arc<crate::listen::ListenCounters>) -> Csrf {
        Csrf { origins, form: false, counters }
    }

    /// The link form's rule: a form body too.
    pub fn form(&self) -> Csrf {
        Csrf { form: true, ..self.clone() }
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// 403 or 415.
    pub status: StatusCode,
    /// For the caller.
    pub message: String,
}

fn header<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Whether `media` (a `Content-Type` value) is JSON: `application/json`, JSON Lines
/// (`application/x-ndjson`, `application/jsonl`) or a `+json` type, parameters allowed.
pub fn is_json(media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    matches!(essence.as_str(), "application/json" | "application/x-ndjson" | "application/jsonl")
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The server's own origin's host part, as the request was addressed (`Host`).
fn own_host(h: &HeaderMap) -> Option<String> {
    header(h, "host").map(str::to_ascii_lowercase)
}

/// Checks one request against `csrf`'s rule: `Ok` or the refusal.
pub fn check(csrf: &Csrf, method: &Method, h: &HeaderMap) -> Result<(), Refused> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let forbidden = |message: String| Err(Refused { status: StatusCode::FORBIDDEN, message });
    match header(h, "sec-fetch-site").map(str::to_ascii_lowercase).as_deref() {
        Some("same-origin" | "none") => {}
        Some(other) => {
            let other = crate::respond::bounded(other, 64);
            return forbidden(format!(
                "a {other} request may not change anything here (`Sec-Fetch-Site: {other}`): use bursar's own page, or a tool"
            ));
        }
        None => {
            if let Some(origin) = header(h, "origin") {
                let o = origin.trim_end_matches('/').to_ascii_lowercase();
                let host = o.split_once("://").map(|(_, rest)| rest);
                let own = host.is_some_and(|x| own_host(h).as_deref() == Some(x));
                if o == "null" || !(own || csrf.origins.contains(&o)) {
                    let origin = crate::respond::bounded(origin, 256);
                    return forbidden(format!(
                        "a request from `{origin}` may not change anything here: only this server's own pages (and `[serve] origins`) may"
                    ));
                }
            }
        }
    }
    let ambient = h.get(header::AUTHORIZATION).is_none() && h.get("x-slurm-user-token").is_none();
    let form =
        |m: &str| m.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/x-www-form-urlencoded");
    match header(h, "content-type") {
        Some(m) if is_json(m) || (csrf.form && form(m)) => Ok(()),
        None if !ambient => Ok(()),
        other => Err(Refused {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: format!(
                "{}: a request that changes something must send JSON with `Content-Type: application/json` (JSON Lines: `application/x-ndjson`){}",
                match other {
                    Some(m) => format!("the body is `{}`", crate::respond::bounded(m, 128)),
                    None => "the body declares no type".to_owned(),
                },
                if ambient { ", since its credential is one a browser sends on its own" } else { "" }
            ),
        }),
    }
}

/// Middleware: refuses a cross-site or non-JSON state-changing request ([`check`]).
pub async fn guard(State(csrf): State<Csrf>, req: Request, next: Next) -> Response {
    match check(&csrf, req.method(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            csrf.counters.cross_site.fetch_add(1, Ordering::Relaxed);
            tracing::info!(reason = %r.message, "request refused: cross-site or not JSON");
            crate::respond::error(r.status, r.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csrf() -> Csrf {
        Csrf::api(Arc::from(vec!["https://bursar.example.org".to_owned()]), Arc::default())
    }

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap_or_else(|_| axum::http::HeaderValue::from_static("x")));
        }
        m
    }

    #[test]
    fn cross_site_and_non_json_writes_are_refused() {
        let post = Method::POST;
        let json = ("content-type", "application/json");
        let host = ("host", "10.0.0.5:7878");
        // The attack of issue 46: proxy credential, foreign origin, cross-site, text/plain.
        let attack = h(&[
            host,
            ("origin", "https://evil.example"),
            ("sec-fetch-site", "cross-site"),
            ("content-type", "text/plain"),
        ]);
        assert_eq!(check(&csrf(), &post, &attack).map_err(|r| r.status), Err(StatusCode::FORBIDDEN));
        // Each defence alone.
        let r = check(&csrf(), &post, &h(&[host, json, ("sec-fetch-site", "same-site")]));
        assert_eq!(r.map_err(|r| r.status), Err(StatusCode::FORBIDDEN));
        let r = check(&csrf(), &post, &h(&[host, json, ("origin", "https://evil.example")]));
        assert_eq!(r.map_err(|r| r.status), Err(StatusCode::FORBIDDEN));
        let r = check(&csrf(), &post, &h(&[host, json, ("origin", "null")]));
        assert_eq!(r.map_err(|r| r.status), Err(StatusCode::FORBIDDEN));
        let r = check(&csrf(), &post, &h(&[host, ("content-type", "text/plain")]));
        assert_eq!(r.map_err(|r| r.status), Err(StatusCode::UNSUPPORTED_MEDIA_TYPE));
        let r = check(&csrf(), &post, &h(&[host]));
        assert_eq!(r.map_err(|r| r.status), Err(StatusCode::UNSUPPORTED_MEDIA_TYPE), "no type, ambient credential");
        // What passes: the server's own page, a configured origin, a tool with a bearer token.
        assert_eq!(check(&csrf(), &post, &h(&[host, json, ("sec-fetch-site", "same-origin")])), Ok(()));
        assert_eq!(check(&csrf(), &post, &h(&[host, json, ("origin", "http://10.0.0.5:7878")])), Ok(()));
        assert_eq!(check(&csrf(), &post, &h(&[host, json, ("origin", "https://bursar.example.org")])), Ok(()));
        assert_eq!(check(&csrf(), &post, &h(&[host, ("authorization", "Bearer t")])), Ok(()));
        assert_eq!(check(&csrf(), &post, &h(&[host, ("content-type", "application/x-ndjson; charset=utf-8")])), Ok(()));
        // Reads are not this layer's; a form only where a form is the point.
        assert_eq!(check(&csrf(), &Method::GET, &attack), Ok(()));
        let form = h(&[host, ("content-type", "application/x-www-form-urlencoded"), ("sec-fetch-site", "same-origin")]);
        assert!(check(&csrf(), &post, &form).is_err());
        assert_eq!(check(&csrf().form(), &post, &form), Ok(()));
    }
}
