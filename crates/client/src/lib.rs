//! A typed client of `bursar serve`: what the Slurm agents, the terminal commands, the load generator
//! and the integration tests use to talk to a running server.
//!
//! Every request body is serialised from `bursar-model` types and every answer is deserialised into
//! them ([`bursar_model::api`]), so a client never builds or reads JSON by hand. The transport is
//! `bursar-http`, bursar's one outgoing client: plain HTTP to a loopback address
//! ([`Client::new`]), or `https://` with a CA file, a client certificate and any credential
//! ([`Client::with_config`]); no async runtime or server code comes with it.
//!
//! Exports: [`Client`] (typed calls), [`ClientError`], [`DecisionStream`], and [`Conn`] /
//! [`LineStream`] / [`Response`] for raw requests (tests that send something malformed on purpose,
//! the load generator's keep-alive connections).
//!
//! Boundaries: no policy semantics and no server code; this crate depends on `bursar-model` and
//! `bursar-http` only.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bursar_http::{Auth, Request};
use bursar_model::api::{
    ActionKind, ActionReply, ActionRequest, AdmitReply, ErrorReply, EventsReply, PendingReply, PoolView, Sequenced,
};
use bursar_model::{Event, Input};

pub use bursar_http::Response;

/// Why a request to serve failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// serve could not be reached, the connection broke, or TLS failed (the source says which, and
    /// what to do).
    #[error("bursar serve at `{server}`: {source}")]
    Transport {
        /// The server's base URL.
        server: String,
        /// The error.
        source: bursar_http::Error,
    },
    /// serve answered with an error status.
    #[error("bursar serve at `{server}`: HTTP {status}: {message}")]
    Status {
        /// The server's base URL.
        server: String,
        /// The status code.
        status: u16,
        /// The `error` of the answer (or its text when it is not the API's error body).
        message: String,
    },
    /// The answer is not the body the API defines.
    #[error("bursar serve at `{server}`: unexpected answer to {what}: {message}")]
    Decode {
        /// The server's base URL.
        server: String,
        /// The request.
        what: String,
        /// What did not fit.
        message: String,
    },
}

impl ClientError {
    /// The HTTP status, when serve answered one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when serve could not be reached at all (not running, wrong address).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Transport { source, .. } if source.is_unreachable())
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// A client of one `bursar serve`.
#[derive(Debug, Clone)]
pub struct Client {
    http: bursar_http::Client,
    server: String,
    timeout: Duration,
}

/// serve sends a keep-alive at least every 15 s on the decision stream; three times that without a
/// byte means a dead peer.
const STREAM_IDLE: Duration = Duration::from_secs(45);

impl Client {
    /// A client of the server at `addr` over plain HTTP, sending `token` as a bearer token when set.
    pub fn new(addr: SocketAddr, token: Option<String>) -> Client {
        let timeout = Duration::from_secs(30);
        let http = bursar_http::Client::plain(addr, Auth::bearer(token.as_deref()), Some(timeout));
        Client::over(http)
    }

    /// A client from a full configuration: an `https://` URL, a CA file, a client certificate,
    /// any credential (`config.timeout` is each request's limit; the decision stream has none).
    pub fn with_config(config: bursar_http::ClientConfig) -> Result<Client> {
        let shown = config.base_url.clone();
        let http =
            bursar_http::Client::new(config).map_err(|source| ClientError::Transport { server: shown, source })?;
        Ok(Client::over(http))
    }

    /// A client over an `bursar_http::Client` already built.
    pub fn over(http: bursar_http::Client) -> Client {
        Client { server: http.base().to_string(), http, timeout: Duration::from_secs(30) }
    }

    /// Each request's time limit (30 s unless set).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The server's base URL, as errors name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The transport, for requests this crate has no typed call for.
    pub fn http(&self) -> &bursar_http::Client {
        &self.http
    }

    fn transport(&self, source: bursar_http::Error) -> ClientError {
        ClientError::Transport { server: self.server.clone(), source }
    }

    /// Sends one request and returns the raw answer, whatever its status. A body is sent as JSON
    /// (`Content-Type: application/json`): serve refuses a state-changing request whose body says
    /// otherwise (docs/security.md, "Cross-site requests").
    pub fn raw(&self, method: &str, path: &str, body: &[u8]) -> Result<Response> {
        let mut req = Request::new(method, path).body(body).timeout(Some(self.timeout));
        if !matches!(method, "GET" | "HEAD") {
            req = req.header("content-type", "application/json");
        }
        self.http.send(&req).map_err(|e| self.transport(e))
    }

    /// Sends a request and decodes a 2xx answer as `T`; an error status becomes [`ClientError::Status`]
    /// with the answer's `error`.
    pub fn call<T: serde::de::DeserializeOwned>(&self, method: &str, path: &str, body: &[u8]) -> Result<T> {
        let r = self.raw(method, path, body)?;
        self.decode(&format!("{method} {path}"), &r)
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, what: &str, r: &Response) -> Result<T> {
        if !r.is_success() {
            let message = serde_json::from_slice::<ErrorReply>(&r.body).map(|e| e.error).unwrap_or_else(|_| r.text());
            return Err(ClientError::Status { server: self.server.clone(), status: r.status, message });
        }
        serde_json::from_slice(&r.body).map_err(|e| ClientError::Decode {
            server: self.server.clone(),
            what: what.to_owned(),
            message: format!("{e}: {}", r.text()),
        })
    }

    /// `POST /v1/events` with `events` as JSON Lines. A body with some rejected lines is still a 200;
    /// the caller decides what a rejected line means for it (see [`EventsReply::rejected`]).
    pub fn post_events(&self, events: &[Event]) -> Result<EventsReply> {
        let mut body = String::new();
        for e in events {
            body.push_str(&e.to_json());
            body.push('\n');
        }
        self.post_body(body)
    }

    /// `POST /v1/events` with any inputs a producer may send (events and action records).
    pub fn post_inputs(&self, inputs: &[Input]) -> Result<EventsReply> {
        let mut body = String::new();
        for i in inputs {
            body.push_str(&i.to_json());
            body.push('\n');
        }
        self.post_body(body)
    }

    fn post_body(&self, body: String) -> Result<EventsReply> {
        let r = self.raw("POST", "/v1/events", body.as_bytes())?;
        if r.status == 400 {
            // "no line is a valid event" still comes as an events reply, with every rejected line.
            if let Ok(reply) = serde_json::from_slice::<EventsReply>(&r.body) {
                return Ok(reply);
            }
        }
        self.decode("POST /v1/events", &r)
    }

    /// `POST /v1/admit` with one `job.submitted` event: the admission decision, once durable.
    pub fn admit(&self, event: &Event) -> Result<AdmitReply> {
        self.call("POST", "/v1/admit", event.to_json().as_bytes())
    }

    /// `POST /v1/admit?estimate=true`: [`Client::admit`], and for an allowed job naming its GPU type
    /// when it is expected to start (`estimate`).
    pub fn admit_with_estimate(&self, event: &Event) -> Result<AdmitReply> {
        self.call("POST", "/v1/admit?estimate=true", event.to_json().as_bytes())
    }

    /// `POST /v1/admit?test_only=true`: what the submission would be answered now; serve records
    /// nothing (a dry run, `sbatch --test-only`).
    pub fn preview(&self, event: &Event) -> Result<AdmitReply> {
        self.call("POST", "/v1/admit?test_only=true", event.to_json().as_bytes())
    }

    /// `POST /v1/audit/prune`: serve prunes its own log (the admin power).
    pub fn prune(&self, before: bursar_model::Timestamp) -> Result<bursar_model::api::PruneReply> {
        let body =
            serde_json::to_vec(&bursar_model::api::PruneRequest { before: before.to_string() }).map_err(|e| {
                ClientError::Decode {
                    server: self.server.clone(),
                    what: "a prune request".into(),
                    message: e.to_string(),
                }
            })?;
        let req = Request::new("POST", "/v1/audit/prune")
            .body(&body)
            .header("content-type", "application/json")
            .timeout(Some(self.timeout));
        let r = self.http.send(&req).map_err(|e| self.transport(e))?;
        self.decode("POST /v1/audit/prune", &r)
    }

    /// `GET /v1/pending`: the jobs waiting for an approval or a keepalive.
    pub fn pending(&self) -> Result<PendingReply> {
        self.call("GET", "/v1/pending", b"")
    }

    /// `GET /v1/estimate`: when a request of `gpus` × `gpu_type` for `hours` would start, per
    /// partition of the pool (in `region` or `queue` only, when given), soonest first.
    pub fn estimate(
        &self,
        gpus: bursar_model::Gpus,
        gpu_type: &str,
        hours: f64,
        region: Option<&str>,
        queue: Option<&str>,
        dataset: Option<&str>,
    ) -> Result<bursar_model::api::EstimateReply> {
        let mut path =
            format!("/v1/estimate?gpus={}&gpu_type={}&hours={hours}", encode(&gpus.to_string()), encode(gpu_type));
        for (key, value) in [("region", region), ("queue", queue), ("dataset", dataset)] {
            if let Some(v) = value {
                path.push_str(&format!("&{key}={}", encode(v)));
            }
        }
        self.call("GET", &path, b"")
    }

    /// `GET /v1/unconfirmed?prefix=…`: the admissions of jobs whose id starts with `prefix` that the
    /// scheduler has yet to confirm.
    pub fn unconfirmed(&self, prefix: &str) -> Result<bursar_model::api::UnconfirmedView> {
        self.call("GET", &format!("/v1/unconfirmed?prefix={}", path_segment(prefix)), b"")
    }

    /// `GET /v1/pool`: what the pool page shows.
    pub fn pool(&self) -> Result<PoolView> {
        self.call("GET", "/v1/pool", b"")
    }

    /// `POST /v1/jobs/{job}/approve|reject|keepalive`: a person's answer, once durable. A refusal
    /// (unknown job 404, not an approver 403, not pending 409, lapsed 410) is a
    /// [`ClientError::Status`] with serve's sentence.
    pub fn act(&self, job: &str, action: ActionKind, req: &ActionRequest) -> Result<ActionReply> {
        let verb = match action {
            ActionKind::Approve | ActionKind::ApproveOverBudget => "approve",
            ActionKind::Reject => "reject",
            ActionKind::Keepalive => "keepalive",
        };
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Decode {
            server: self.server.clone(),
            what: "an action request".into(),
            message: e.to_string(),
        })?;
        self.call("POST", &format!("/v1/jobs/{}/{verb}", path_segment(job)), &body)
    }

    /// `GET /v1/decisions?after=SEQ`: every decision after `after`, in order; `follow` keeps the stream
    /// open for live decisions.
    pub fn decisions(&self, after: u64, follow: bool) -> Result<DecisionStream> {
        let path = format!("/v1/decisions?after={after}&format=jsonl&follow={follow}");
        let req = Request::get(&path).timeout(None).read_timeout(Some(STREAM_IDLE));
        let lines = self.http.stream(&req).map_err(|e| self.transport(e))?;
        if lines.status != 200 {
            return Err(ClientError::Status {
                server: self.server.clone(),
                status: lines.status,
                message: format!("GET {path} was refused"),
            });
        }
        Ok(DecisionStream { lines, server: self.server.clone() })
    }
}

/// `s` percent-encoded as one path segment (a job id may hold `/`, `?`, spaces, …).
pub fn path_segment(s: &str) -> String {
    bursar_http::encode(s)
}

/// A stream of decisions, each with its `seq`.
#[derive(Debug)]
pub struct DecisionStream {
    lines: bursar_http::Lines,
    server: String,
}

impl DecisionStream {
    /// The next decision; `None` when the stream ended (serve stopped, or caught up without `follow`).
    pub fn next_decision(&mut self) -> Result<Option<Sequenced>> {
        loop {
            let line = self
                .lines
                .next_line()
                .map_err(|source| ClientError::Transport { server: self.server.clone(), source })?;
            let Some(line) = line else { return Ok(None) };
            let line = line.trim();
            if line.is_empty() {
                continue; // keep-alive
            }
            if let Ok(e) = serde_json::from_str::<ErrorReply>(line) {
                return Err(ClientError::Status { server: self.server.clone(), status: 200, message: e.error });
            }
            return serde_json::from_str(line).map(Some).map_err(|e| ClientError::Decode {
                server: self.server.clone(),
                what: "the decision stream".into(),
                message: format!("{e}: {line}"),
            });
        }
    }
}

/// Raw requests on one keep-alive connection (reused while the server keeps it open), for tests
/// that send what the typed calls never would and for the load generator. Connects on the first
/// request. Errors are `io::Error`s whose message is `bursar-http`'s.
#[derive(Debug)]
pub struct Conn {
    http: bursar_http::Client,
    read_timeout: Cell<Option<Duration>>,
}

impl Conn {
    /// A connection to `addr` over plain HTTP; `token` is sent as a bearer token on every request.
    /// Each read waits 30 s at most (see [`Conn::set_read_timeout`]).
    pub fn connect(addr: SocketAddr, token: Option<&str>) -> io::Result<Conn> {
        Ok(Conn::over(bursar_http::Client::plain(addr, Auth::bearer(token), None)))
    }

    /// Raw requests over a client already built (https, another credential).
    pub fn over(http: bursar_http::Client) -> Conn {
        Conn { http, read_timeout: Cell::new(Some(Duration::from_secs(30))) }
    }

    /// How long each read of an answer (or of a stream opened after this) waits; `None` forever.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.read_timeout.set(t);
        Ok(())
    }

    /// A request; anything but a `GET` goes as JSON unless `extra` names its type.
    fn req<'a>(&self, method: &'a str, path: &'a str, body: &'a [u8], extra: &[(&'a str, &'a str)]) -> Request<'a> {
        let mut r = Request::new(method, path).body(body);
        if !matches!(method, "GET" | "HEAD") && !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
            r = r.header("content-type", "application/json");
        }
        r.headers(extra).timeout(None).read_timeout(self.read_timeout.get())
    }

    /// Sends a request and reads the whole answer, whatever its status.
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> io::Result<Response> {
        self.request_with(method, path, body, &[])
    }

    /// Like [`Conn::request`] with extra headers.
    pub fn request_with(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> io::Result<Response> {
        self.http.send(&self.req(method, path, body, extra)).map_err(bursar_http::Error::into_io)
    }

    /// Sends a GET whose answer is a stream, and returns a line reader over it.
    pub fn stream(self, path: &str, extra: &[(&str, &str)]) -> io::Result<LineStream> {
        let lines = self.http.stream(&self.req("GET", path, b"", extra)).map_err(bursar_http::Error::into_io)?;
        Ok(LineStream { status: lines.status, headers: lines.headers.clone(), lines })
    }
}

/// Lines of a streamed (chunked) answer, read as they arrive.
#[derive(Debug)]
pub struct LineStream {
    /// Status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    lines: bursar_http::Lines,
}

impl LineStream {
    /// The next line (without its newline); `None` at the end of the stream.
    pub fn next_line(&mut self) -> io::Result<Option<String>> {
        self.lines.next_line().map_err(bursar_http::Error::into_io)
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
