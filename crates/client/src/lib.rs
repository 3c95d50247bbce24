//! A typed client of `bursar serve`: what the Slurm agents, the terminal commands, the load generator
//! and the integration tests use to talk to a running server.
//!
//! Every request body is serialised from `bursar-model` types and every answer is deserialised into
//! them ([`bursar_model::api`]), so a client never builds or reads JSON by hand. The transport
//! ([`http`]) is a small blocking HTTP/1.1 client over loopback TCP, enough for what the server sends,
//! so a client of bursar pulls no HTTP stack, async runtime or server code into its build.
//!
//! Exports: [`Client`] (typed calls), [`ClientError`], [`DecisionStream`], and the transport in [`http`]
//! for tests that need to send something malformed on purpose.
//!
//! Boundaries: no policy semantics and no server code; this crate depends on `bursar-model` only.

pub mod http;

use std::net::SocketAddr;
use std::time::Duration;

use bursar_model::api::{
    ActionKind, ActionReply, ActionRequest, AdmitReply, ErrorReply, EventsReply, PendingReply, PoolView, Sequenced,
};
use bursar_model::{Event, Input};

pub use crate::http::{Conn, LineStream, Response};

/// Why a request to serve failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// serve could not be reached, or the connection broke.
    #[error("bursar serve at `{addr}`: {source}")]
    Io {
        /// The server address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// serve answered with an error status.
    #[error("bursar serve at `{addr}`: HTTP {status}: {message}")]
    Status {
        /// The server address.
        addr: SocketAddr,
        /// The status code.
        status: u16,
        /// The `error` of the answer (or its text when it is not the API's error body).
        message: String,
    },
    /// The answer is not the body the API defines.
    #[error("bursar serve at `{addr}`: unexpected answer to {what}: {message}")]
    Decode {
        /// The server address.
        addr: SocketAddr,
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
}

/// Shorthand for results of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Where serve listens, and its token.
#[derive(Debug, Clone)]
pub struct Client {
    /// Address, e.g. `127.0.0.1:7878`.
    pub addr: SocketAddr,
    /// Bearer token (serve `--token`), if set.
    pub token: Option<String>,
    /// How long to wait for an answer.
    pub timeout: Duration,
}

impl Client {
    /// A client of the server at `addr`, sending `token` as a bearer token when set.
    pub fn new(addr: SocketAddr, token: Option<String>) -> Client {
        Client { addr, token, timeout: Duration::from_secs(30) }
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        ClientError::Io { addr: self.addr, source }
    }

    fn connect(&self) -> Result<Conn> {
        let conn = Conn::connect(self.addr, self.token.as_deref()).map_err(|e| self.io(e))?;
        conn.set_read_timeout(Some(self.timeout)).map_err(|e| self.io(e))?;
        Ok(conn)
    }

    /// Sends one request and returns the raw answer, whatever its status.
    pub fn raw(&self, method: &str, path: &str, body: &[u8]) -> Result<Response> {
        self.connect()?.request(method, path, body).map_err(|e| self.io(e))
    }

    /// Sends a request and decodes a 2xx answer as `T`; an error status becomes [`ClientError::Status`]
    /// with the answer's `error`.
    pub fn call<T: serde::de::DeserializeOwned>(&self, method: &str, path: &str, body: &[u8]) -> Result<T> {
        let r = self.raw(method, path, body)?;
        self.decode(&format!("{method} {path}"), &r)
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, what: &str, r: &Response) -> Result<T> {
        if !(200..300).contains(&r.status) {
            let message = serde_json::from_slice::<ErrorReply>(&r.body).map(|e| e.error).unwrap_or_else(|_| r.text());
            return Err(ClientError::Status { addr: self.addr, status: r.status, message });
        }
        serde_json::from_slice(&r.body).map_err(|e| ClientError::Decode {
            addr: self.addr,
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

    /// `GET /v1/pending`: the jobs waiting for an approval or a keepalive.
    pub fn pending(&self) -> Result<PendingReply> {
        self.call("GET", "/v1/pending", b"")
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
            addr: self.addr,
            what: "an action request".into(),
            message: e.to_string(),
        })?;
        self.call("POST", &format!("/v1/jobs/{}/{verb}", path_segment(job)), &body)
    }

    /// `GET /v1/decisions?after=SEQ`: every decision after `after`, in order; `follow` keeps the stream
    /// open for live decisions.
    pub fn decisions(&self, after: u64, follow: bool) -> Result<DecisionStream> {
        let conn = Conn::connect(self.addr, self.token.as_deref()).map_err(|e| self.io(e))?;
        let path = format!("/v1/decisions?after={after}&format=jsonl&follow={follow}");
        let stream = conn.stream(&path, &[]).map_err(|e| self.io(e))?;
        if stream.status != 200 {
            return Err(ClientError::Status {
                addr: self.addr,
                status: stream.status,
                message: format!("GET {path} was refused"),
            });
        }
        // serve sends a keep-alive at least every 15 s; three times that without a byte means a dead peer.
        stream.set_read_timeout(Some(Duration::from_secs(45))).map_err(|e| self.io(e))?;
        Ok(DecisionStream { stream, addr: self.addr })
    }
}

/// `s` percent-encoded as one path segment (a job id may hold `/`, `?`, spaces, …).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A stream of decisions, each with its `seq`.
#[derive(Debug)]
pub struct DecisionStream {
    stream: LineStream,
    addr: SocketAddr,
}

impl DecisionStream {
    /// The next decision; `None` when the stream ended (serve stopped, or caught up without `follow`).
    pub fn next_decision(&mut self) -> Result<Option<Sequenced>> {
        loop {
            let line = self.stream.next_line().map_err(|source| ClientError::Io { addr: self.addr, source })?;
            let Some(line) = line else { return Ok(None) };
            let line = line.trim();
            if line.is_empty() {
                continue; // keep-alive
            }
            if let Ok(e) = serde_json::from_str::<ErrorReply>(line) {
                return Err(ClientError::Status { addr: self.addr, status: 200, message: e.error });
            }
            return serde_json::from_str(line).map(Some).map_err(|e| ClientError::Decode {
                addr: self.addr,
                what: "the decision stream".into(),
                message: format!("{e}: {line}"),
            });
        }
    }
}
