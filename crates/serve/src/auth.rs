//! Every request is someone: the middleware that authenticates a request before any handler sees
//! it, the one that checks the route's power, and the headers every answer carries.
//!
//! [`authenticate`] reads what the request presents (the `Authorization` header, Slurm's
//! `X-SLURM-USER-TOKEN`, a trusted proxy's user header, the verified client certificate, the peer
//! address) and asks the [`bursar_auth::Authenticator`] in force (swapped whole when the
//! configuration reloads, so a rotated token works at once). A missing or wrong credential is a 401
//! with `WWW-Authenticate`; otherwise the [`Caller`] goes on the request for the handlers. [`require`]
//! refuses a caller without the route's power with a 403 that names the power and the principal. A
//! MUNGE credential is verified off the async threads (`unmunge` is a program) and against the
//! request's method and path; the body's digest it binds is checked once the body is read
//! ([`crate::body::read_body`]).
//!
//! Authentication reads headers only: a request is authenticated (and its route's power checked)
//! before a byte of its body is read, so a request that fails is answered without its body ever
//! being buffered. (64 unauthenticated connections each sending 8 MiB used to hold 614 MiB.)
//!
//! Routes and powers (the table `docs/security.md` gives): `GET /healthz` none; `POST /v1/admit`
//! `submit`; `POST /v1/events` each line its own (see [`bursar_auth::Caller::check_input`]);
//! `POST /v1/jobs/{id}/approve|reject` `answer`, `…/keepalive` `keepalive`; `POST /v1/reload` and
//! `POST /v1/snapshot` `admin`; every other `GET` `read`; `/act/{token}` the link's own signature.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bursar_auth::{Authenticator, Caller, CertIdentity, Power, Presented};
use bursar_model::api::ErrorReply;

/// The authenticator in force, swapped whole on reload.
pub type SharedAuth = Arc<RwLock<Arc<Authenticator>>>;

fn json_error(status: StatusCode, message: String) -> Response {
    let body = serde_json::to_string(&ErrorReply { error: message }).unwrap_or_default();
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// The 401 answer.
pub fn unauthorized(message: String) -> Response {
    let mut r = json_error(StatusCode::UNAUTHORIZED, message);
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"bursar\""));
    r
}

/// The 403 answer.
pub fn forbidden(message: String) -> Response {
    json_error(StatusCode::FORBIDDEN, message)
}

/// The authenticator in force now.
pub fn current(auth: &SharedAuth) -> Arc<Authenticator> {
    match auth.read() {
        Ok(a) => a.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// The longest credential header read (a JWT with many claims is a few KiB); a longer one is
/// refused unread, and never echoed or logged.
pub const MAX_CREDENTIAL: usize = 16 * 1024;

/// The one value of a credential header, or why the request is refused: a header sent twice (which
/// copy counts would depend on the reader, and `docs/security.md` makes mixed credentials a 401), a
/// value with a byte that is not visible ASCII (ignoring it let a good credential beside it through),
/// or one longer than [`MAX_CREDENTIAL`].
fn credential<'h>(h: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, String> {
    let mut all = h.get_all(name).iter();
    let Some(v) = all.next() else { return Ok(None) };
    if all.next().is_some() {
        return Err(format!("`{name}` is sent more than once; send one credential"));
    }
    if v.len() > MAX_CREDENTIAL {
        return Err(format!("`{name}` is longer than {MAX_CREDENTIAL} bytes"));
    }
    v.to_str().map(Some).map_err(|_| format!("`{name}` holds a byte that is not visible ASCII"))
}

/// Authenticates `req` from its headers (its body is not read) and returns the request with its
/// caller.
pub async fn caller_of(auth: &SharedAuth, req: Request) -> Result<(Caller, Request), Response> {
    let a = current(auth);
    if a.is_open() {
        return Ok((Caller::open(), req));
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or(parts.uri.path(), |p| p.as_str());
    let read = |name: &str| credential(&parts.headers, name).map(|v| v.map(str::to_owned));
    let headers = (|| {
        Ok::<_, String>((
            read("authorization")?,
            read("x-slurm-user-token")?,
            read("x-slurm-user-name")?,
            a.proxy_header().map(read).transpose()?.flatten(),
        ))
    })();
    let (authorization, slurm_token, slurm_user, proxy_user) = match headers {
        Ok(h) => h,
        Err(why) => {
            tracing::info!(error = %why, "request refused: not authenticated");
            return Err(unauthorized(why));
        }
    };
    let owned = OwnedPresented {
        authorization,
        slurm_token,
        slurm_user,
        proxy_user,
        peer: parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>().map(|p| p.0.ip()),
        cert: parts
            .extensions
            .get::<crate::listen::PeerCert>()
            .map(|c| CertIdentity { subject: c.subject.clone(), common_name: c.common_name.clone() }),
        request: Some(bursar_auth::munge::request(parts.method.as_str(), path)),
    };
    let now = bursar_model::Timestamp::wall_clock();
    let result = if owned.presented().blocks() {
        let a = a.clone();
        tokio::task::spawn_blocking(move || a.authenticate(&owned.presented(), now))
            .await
            .unwrap_or_else(|e| Err(bursar_auth::AuthError::NotAccepted(format!("cannot check the credential: {e}"))))
    } else {
        a.authenticate(&owned.presented(), now)
    };
    match result {
        Ok(caller) => Ok((caller, Request::from_parts(parts, body))),
        Err(e) => {
            // What the caller sent may be in the message (a user name): bounded in the log and
            // the answer alike.
            let why = crate::respond::bounded(&e.to_string(), 512);
            tracing::info!(error = %why, "request refused: not authenticated");
            Err(unauthorized(why))
        }
    }
}

/// What a request presented, owned (so a blocking check can take it to another thread).
struct OwnedPresented {
    authorization: Option<String>,
    slurm_token: Option<String>,
    slurm_user: Option<String>,
    proxy_user: Option<String>,
    peer: Option<std::net::IpAddr>,
    cert: Option<CertIdentity>,
    request: Option<String>,
}

impl OwnedPresented {
    fn presented(&self) -> Presented<'_> {
        Presented {
            authorization: self.authorization.as_deref(),
            slurm_token: self.slurm_token.as_deref(),
            slurm_user: self.slurm_user.as_deref(),
            proxy_user: self.proxy_user.as_deref(),
            peer: self.peer,
            cert: self.cert.clone(),
            unix: None,
            request: self.request.clone(),
        }
    }
}

/// What [`authenticate`] needs.
#[derive(Clone)]
pub struct AuthState {
    /// The authenticator in force.
    pub auth: SharedAuth,
    /// Where 401s are counted.
    pub metrics: Arc<crate::Metrics>,
    /// Each address's failed authentications this minute.
    pub failures: Arc<Failures>,
}

/// Failed authentications an address may make in a wall-clock minute; past them its requests are
/// answered 429 before any credential is checked (or logged) until the next minute. 401s used to be
/// free: 40 requests carrying a valid JWT and 300 KB of user name wrote 12 MB of log (issue 56).
pub const FAILURES_PER_MINUTE: u32 = 120;

/// Each address's failed authentications in the current minute.
#[derive(Debug, Default)]
pub struct Failures(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, (i64, u32)>>);

impl Failures {
    fn minute() -> i64 {
        bursar_model::Timestamp::wall_clock().millis().div_euclid(60_000)
    }

    /// Seconds until `addr` may try again, if it spent its failures this minute.
    fn spent(&self, addr: std::net::IpAddr) -> Option<u64> {
        let now = Self::minute();
        let g = self.0.lock().ok()?;
        let (minute, n) = *g.get(&addr)?;
        (minute == now && n >= FAILURES_PER_MINUTE).then(|| {
            let ms = bursar_model::Timestamp::wall_clock().millis().rem_euclid(60_000);
            u64::try_from(60 - ms / 1000).unwrap_or(60).max(1)
        })
    }

    /// Counts one failure of `addr`.
    fn count(&self, addr: std::net::IpAddr) {
        let now = Self::minute();
        if let Ok(mut g) = self.0.lock() {
            if g.len() > 65_536 {
                // Bounded: old minutes go first, and a flood of addresses cannot grow it forever.
                g.retain(|_, (m, _)| *m == now);
            }
            let e = g.entry(addr).or_insert((now, 0));
            if e.0 != now {
                *e = (now, 0);
            }
            e.1 = e.1.saturating_add(1);
        }
    }
}

/// Middleware: authenticates the request and puts its [`Caller`] on it, or answers 401.
pub async fn authenticate(
    axum::extract::State(st): axum::extract::State<AuthState>,
    req: Request,
    next: Next,
) -> Response {
    let addr = req.extensions().get::<axum::extract::ConnectInfo<SocketAddr>>().map(|p| p.0.ip());
    if let Some(retry) = addr.and_then(|a| st.failures.spent(a)) {
        st.metrics.unauthenticated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut r = json_error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{FAILURES_PER_MINUTE} requests from this address failed authentication this minute; try again in {retry} s"
            ),
        );
        if let Ok(v) = HeaderValue::from_str(&retry.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    match caller_of(&st.auth, req).await {
        Ok((caller, mut req)) => {
            req.extensions_mut().insert(Arc::new(caller));
            next.run(req).await
        }
        Err(r) => {
            st.metrics.unauthenticated.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(a) = addr {
                st.failures.count(a);
            }
            r
        }
    }
}

/// The caller [`authenticate`] put on the request.
pub fn caller(req_extensions: &axum::http::Extensions) -> Arc<Caller> {
    req_extensions.get::<Arc<Caller>>().cloned().unwrap_or_else(|| Arc::new(Caller::open()))
}

/// Middleware: answers 403 unless the caller has `power`.
pub async fn require(power: Power, req: Request, next: Next) -> Response {
    let c = caller(req.extensions());
    match c.may(power) {
        Ok(()) => next.run(req).await,
        Err(d) => {
            tracing::info!(principal = c.name(), power = power.as_str(), "request refused: no power");
            forbidden(d.message)
        }
    }
}

/// Middleware: the headers every answer carries. Pages are not to be framed (clickjacking an
/// approve button), sniffed, or given a referrer (a link's token is in its URL); scripts and styles
/// come only from the page itself.
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    r
}
